"""The one reconnect-with-backoff helper every external resource uses."""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass

from voiced.errors import ConfigError

__all__ = ["Backoff", "BackoffPolicy"]


@dataclass(frozen=True)
class BackoffPolicy:
    """Exponential backoff with jitter between reconnect attempts."""

    initial: float = 0.5
    """Delay before the first retry, in seconds."""
    maximum: float = 30.0
    """Upper bound of any delay, in seconds."""
    factor: float = 2.0
    """Growth of the delay after each failure."""
    jitter: float = 0.1
    """Fraction of random spread added to each delay, so devices do not retry in lockstep."""

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.maximum < self.initial:
            raise ConfigError("initial", f"need 0 < initial <= maximum, got {self.initial}, {self.maximum}")
        if self.factor < 1:
            raise ConfigError("factor", f"must be >= 1, got {self.factor}")
        if not 0 <= self.jitter <= 1:
            raise ConfigError("jitter", f"must be within [0, 1], got {self.jitter}")


class Backoff:
    """Counts failures and tells how long to wait before the next attempt."""

    def __init__(self, policy: BackoffPolicy | None = None) -> None:
        self.policy = policy or BackoffPolicy()
        self.failures = 0

    def next_delay(self) -> float:
        """Record one more failure and return the delay to wait before retrying."""
        p = self.policy
        # Compared in logs: initial * factor**failures overflows a float after ~1024 failures
        # (8.5 h of an absent broker at the defaults) or at once with a huge factor.
        grown = self.failures * math.log(p.factor)
        delay = p.maximum if grown >= math.log(p.maximum / p.initial) else min(p.maximum, p.initial * p.factor**self.failures)
        self.failures += 1
        return delay * (1 + p.jitter * random.random())

    def wait(self, stop: threading.Event | None = None) -> bool:
        """Sleep for the next delay; return False early if ``stop`` is set meanwhile."""
        delay = self.next_delay()
        if stop is None:
            threading.Event().wait(delay)
            return True
        return not stop.wait(delay)

    def reset(self) -> None:
        """Forget failures after a success."""
        self.failures = 0
