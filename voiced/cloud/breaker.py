"""A circuit breaker: consecutive failures open it, a trial after a backoff delay half-opens it.

CLOSED lets every request through and counts consecutive failures; at the threshold it
OPENs and refuses everything for the next :class:`Backoff` delay. After the delay one
request goes through as a trial (HALF_OPEN): success closes the breaker and resets the
backoff, failure opens it again for a longer delay. The breaker is the one thing that
paces retries of an unreachable cloud: it spares the device probes that cannot succeed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from enum import Enum

from voiced.runtime.backoff import Backoff, BackoffPolicy

__all__ = ["BreakerState", "CircuitBreaker"]

log = logging.getLogger(__name__)


class BreakerState(Enum):
    CLOSED = "closed"
    """Requests go through."""
    OPEN = "open"
    """Requests are refused until the backoff delay has passed."""
    HALF_OPEN = "half_open"
    """One trial request is in flight; its outcome closes or reopens the breaker."""


class CircuitBreaker:
    """Thread-safe; ``allow`` before a request, then ``record_success`` or ``record_failure``."""

    def __init__(self, threshold: int, policy: BackoffPolicy, trial_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.trial_timeout_s = trial_timeout_s
        """A trial that never reports back (its thread hung) frees the way for another after this."""
        self._backoff = Backoff(policy)
        self._clock = clock
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._retry_at = 0.0
        self._trial_started: float | None = None
        self.opened = 0
        """How many times the breaker opened."""

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._state

    def would_allow(self) -> bool:
        """Whether ``allow`` would say yes now, without taking the trial (for routing decisions)."""
        with self._lock:
            return self._may_pass(self._clock())

    def allow(self) -> bool:
        """May a request go now? When OPEN and the delay is over, this one becomes the trial."""
        with self._lock:
            now = self._clock()
            if not self._may_pass(now):
                return False
            if self._state is not BreakerState.CLOSED:
                self._state = BreakerState.HALF_OPEN
                self._trial_started = now
                log.info("cloud circuit half-open: trying one request")
            return True

    def record_success(self) -> None:
        with self._lock:
            if self._state is not BreakerState.CLOSED:
                log.info("cloud circuit closed: the cloud answers again")
            self._state = BreakerState.CLOSED
            self._failures = 0
            self._trial_started = None
            self._backoff.reset()

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._state is BreakerState.HALF_OPEN or self._failures >= self.threshold:
                self._open()

    def retry_in(self) -> float | None:
        """Seconds until the next trial may go while OPEN, else None."""
        with self._lock:
            if self._state is not BreakerState.OPEN:
                return None
            return max(0.0, self._retry_at - self._clock())

    def stats(self) -> dict[str, object]:
        with self._lock:
            retry = max(0.0, self._retry_at - self._clock()) if self._state is BreakerState.OPEN else None
            return {"state": self._state.value, "consecutive_failures": self._failures,
                    "opened": self.opened, "retry_in_s": None if retry is None else round(retry, 3)}

    def _may_pass(self, now: float) -> bool:
        if self._state is BreakerState.CLOSED:
            return True
        if self._state is BreakerState.OPEN:
            return now >= self._retry_at
        return self._trial_started is None or now - self._trial_started >= self.trial_timeout_s

    def _open(self) -> None:
        delay = self._backoff.next_delay()
        self._retry_at = self._clock() + delay
        if self._state is not BreakerState.OPEN:
            self.opened += 1
        self._state = BreakerState.OPEN
        self._trial_started = None
        log.warning("cloud circuit open after %d consecutive failures: next try in %.1f s", self._failures, delay)
