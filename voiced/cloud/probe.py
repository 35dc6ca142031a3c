"""Is the cloud reachable? One cheap HTTP request, bounded by a hard deadline, cached when up.

The probe GETs ``base_url + probe_path`` (``/v1/models``) with the key and reads only the
status line and headers. Its whole time — DNS, connect, TLS, the answer — is bounded by
``probe_budget_s`` even when the server accepts and never answers or DNS hangs: the
blocking part runs on a ``cloud-probe`` thread and the caller waits for it at most the
budget. Probe threads still stuck past their deadlines (a hung resolver) are capped at
:data:`MAX_PROBE_THREADS`: beyond it probes report DOWN at once, so threads cannot pile up.

An UP result is trusted for ``probe_ttl_s``. A DOWN result is not cached: the circuit
breaker decides when to try again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from voiced.cloud.access import CloudAccess, http_client, status_error, transport_error
from voiced.cloud.config import CloudConfig
from voiced.cloud.deadline import deadline
from voiced.cloud.errors import CloudError, CloudErrorKind

__all__ = ["ProbeResult", "ProbeStatus", "Prober"]

log = logging.getLogger(__name__)

MAX_PROBE_THREADS = 2
"""Probe threads alive at once, at most: one past its deadline (its request's deadline ends
it soon after) may overlap a new probe; a hung resolver cannot make more pile up."""


class ProbeStatus(Enum):
    UP = "up"
    """The server answered (any status but 3xx, 401/403 and 5xx)."""
    DOWN = "down"
    """No usable answer within the budget; ``error`` says why."""


@dataclass(frozen=True)
class ProbeResult:
    status: ProbeStatus
    """Reachable or not."""
    elapsed_s: float
    """Time from the check to this result."""
    checked_at: float
    """``time.monotonic()`` when the result was known."""
    http_status: int | None = None
    """Status of the answer, when there was one."""
    error: CloudError | None = None
    """Why the cloud is down; None when up."""

    @property
    def up(self) -> bool:
        return self.status is ProbeStatus.UP

    def describe(self) -> str:
        ms = f"{self.elapsed_s * 1000:.0f} ms"
        if self.up:
            return f"reachable (HTTP {self.http_status} in {ms})"
        if self.http_status is not None:
            # It answered: the server is there, only its answer keeps the cloud out.
            return f"reached, but {_refusal(self.http_status, self.error)} (HTTP {self.http_status} in {ms})"
        return f"unreachable after {ms}: {self.error}"


class _Attempt:
    """One probe thread's request and its outcome."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.done = threading.Event()
        self.http_status: int | None = None
        self.error: CloudError | None = None
        self.result: ProbeResult | None = None
        """The verdict, once a caller has recorded it."""


class Prober:
    """Thread-safe; ``check`` blocks at most the budget, ``cached`` never blocks."""

    def __init__(self, config: CloudConfig, access: CloudAccess, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._access = access
        self._clock = clock
        self._lock = threading.Lock()
        self._attempt: _Attempt | None = None
        self._last: ProbeResult | None = None
        self._alive = 0  # probe threads not finished, including those past their deadline
        self._counts = {"probes": 0, "up": 0, "down": 0, "cached": 0, "hung": 0}

    def cached(self) -> ProbeResult | None:
        """The last result if it is UP and younger than the TTL, else None."""
        with self._lock:
            return self._fresh(self._clock())

    def last(self) -> ProbeResult | None:
        """The last result, however old."""
        with self._lock:
            return self._last

    def invalidate(self) -> None:
        """Forget a cached UP (a call just failed to reach the server)."""
        with self._lock:
            if self._last is not None and self._last.up:
                self._last = ProbeResult(ProbeStatus.DOWN, 0.0, self._clock(),
                                         error=CloudError(CloudErrorKind.CONNECTION, "a call failed since the last probe"))

    def check(self, budget_s: float | None = None, force: bool = False) -> ProbeResult:
        """Probe (or return a fresh cached UP unless ``force``); waits at most ``budget_s``
        (default and upper bound: ``probe_budget_s``)."""
        import httpx  # noqa: F401 - the first import takes long on a Pi: not part of the budget

        budget = min(self.config.probe_budget_s, budget_s if budget_s is not None else self.config.probe_budget_s)
        start = self._clock()
        with self._lock:
            fresh = None if force else self._fresh(start)
            if fresh is not None:
                self._counts["cached"] += 1
                return fresh
            attempt = self._attempt
            if attempt is None or attempt.done.is_set() or start >= attempt.deadline:
                if self._alive >= MAX_PROBE_THREADS:
                    # Earlier probes outlived their deadlines (a hung resolver): do not stack more.
                    self._counts["hung"] += 1
                    return self._record(None, ProbeResult(ProbeStatus.DOWN, 0.0, start, error=CloudError(
                        CloudErrorKind.TIMEOUT, "earlier probes are still waiting (DNS or connect hangs)")))
                attempt = _Attempt(start + budget)
                self._attempt = attempt
                self._alive += 1
                threading.Thread(target=self._run, args=(attempt, budget), name="cloud-probe", daemon=True).start()
        wait_until = min(attempt.deadline, start + budget)
        attempt.done.wait(max(0.0, wait_until - self._clock()))
        now = self._clock()
        timeout = CloudError(CloudErrorKind.TIMEOUT, f"no answer within the probe budget of {budget:g} s")
        with self._lock:
            if attempt.done.is_set():
                error = attempt.error
                status = ProbeStatus.DOWN if error is not None else ProbeStatus.UP
                return self._record(attempt, ProbeResult(status, now - start, now, attempt.http_status, error))
            if now >= attempt.deadline:
                return self._record(attempt, ProbeResult(ProbeStatus.DOWN, now - start, now, error=timeout))
        # This caller's budget was shorter than the probe it joined: not that probe's verdict.
        return ProbeResult(ProbeStatus.DOWN, now - start, now, error=timeout)

    def stats(self) -> dict[str, object]:
        with self._lock:
            last = self._last
            out: dict[str, object] = dict(self._counts)
            out["last"] = None if last is None else {
                "status": last.status.value, "http_status": last.http_status,
                "error": None if last.error is None else last.error.kind.value,
                "elapsed_ms": round(last.elapsed_s * 1000, 1),
                "age_s": round(self._clock() - last.checked_at, 1),
            }
            return out

    # -- internals ---------------------------------------------------------------------------

    def _fresh(self, now: float) -> ProbeResult | None:
        last = self._last
        if last is not None and last.up and now - last.checked_at < self.config.probe_ttl_s:
            return last
        return None

    def _record(self, attempt: _Attempt | None, result: ProbeResult) -> ProbeResult:
        """Count each attempt once, and give every caller that waited for it the same verdict;
        called with the lock held."""
        if attempt is not None:
            if attempt.result is not None:
                return attempt.result
            attempt.result = result
        self._counts["probes"] += 1
        self._counts["up" if result.up else "down"] += 1
        self._last = result
        if result.up:
            log.debug("cloud probe: %s", result.describe())
        else:
            log.info("cloud probe: %s", result.describe())
        return result

    def _run(self, attempt: _Attempt, budget: float) -> None:
        """The blocking part, on the cloud-probe thread."""
        import httpx

        try:
            access = self._access.get()
            # Only the status line and headers are read: a model list can be large. The deadline
            # ends this thread with its budget even when the headers come a byte at a time.
            with deadline(time.monotonic() + budget), \
                    http_client(self.config, access, httpx.Timeout(budget)) as client, \
                    client.stream("GET", self.config.root + self.config.probe_path) as response:
                attempt.http_status = response.status_code
            attempt.error = _probe_error(attempt.http_status)
        except CloudError as exc:
            attempt.error = exc
        except Exception as exc:  # noqa: BLE001 - every failure of the probe means "down"
            attempt.error = transport_error(exc)
        finally:
            with self._lock:
                self._alive -= 1
            attempt.done.set()


def _probe_error(status: int) -> CloudError | None:
    """Any answer proves the server is there, except refusals of the key, redirects and 5xx."""
    error = status_error(status)
    if error is not None and error.kind is CloudErrorKind.CLIENT_ERROR and not 300 <= status < 400:
        return None  # e.g. 404: a server without /v1/models is still reachable
    return error


def _refusal(status: int, error: CloudError | None) -> str:
    """What an answer that keeps the cloud out (see :func:`_probe_error`) means, in words."""
    if error is not None and error.kind is CloudErrorKind.AUTH:
        return "it refused the API key"
    if 300 <= status < 400:
        return "it redirects, and redirects are not followed"
    if status >= 500:
        return "the service failed"
    return "it refused the request"
