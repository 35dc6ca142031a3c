"""Local first, the cloud only as a fallback, and only when it can be reached.

The daemon asks two cheap questions on its own threads — :meth:`CloudRouter.should_use_cloud_asr`
and :meth:`CloudRouter.should_use_cloud_intent` — which never touch the network, and hands
what needs the cloud to :meth:`submit_asr` / :meth:`submit_intent`, which never block.
A worker then, in order: checks the config, key and CA files; asks the circuit breaker;
probes reachability (cached while up, bounded by ``probe_budget_s``); makes the call. Every
request is answered through its callback within ``local_budget_s`` (see :mod:`.pool`).

Failed probes and failed calls both count toward opening the breaker; while it is open
nothing is sent and the daemon stays local; after the backoff delay one request is the
trial, with a fresh probe.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

import numpy as np
import yaml

from voiced.cloud.access import CloudAccess
from voiced.cloud.breaker import BreakerState, CircuitBreaker
from voiced.cloud.catalog import IntentCatalog
from voiced.cloud.clients import CallKind, CloudClient, Count
from voiced.cloud.config import CloudConfig
from voiced.cloud.errors import CloudError, CloudErrorKind
from voiced.cloud.pool import CloudOutcome, CloudResult, CloudTicket, WorkerPool
from voiced.cloud.probe import Prober, ProbeResult, ProbeStatus
from voiced.intents import Intent, IntentRecognizer
from voiced.stages import Counters

__all__ = ["CloudRouter", "CloudState", "CloudStatus"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class CloudState(Enum):
    """What the router knows about the cloud, without asking it."""

    DISABLED = "disabled"
    """Off in the config."""
    UNUSABLE = "unusable"
    """The key file or CA file is missing or unreadable."""
    UNKNOWN = "unknown"
    """Not probed yet, or the last good probe is older than the TTL."""
    UP = "up"
    """The last probe succeeded within the TTL."""
    DOWN = "down"
    """The last probe or call failed (fewer failures than the breaker's threshold)."""
    OPEN = "open"
    """The circuit breaker is open: nothing is sent until its delay passes."""
    HALF_OPEN = "half_open"
    """One trial request is deciding whether the cloud is back."""


@dataclass(frozen=True)
class CloudStatus:
    state: CloudState
    detail: str
    """Why, for logs and ``voiced doctor``."""


class CloudRouter:
    """The cloud fallback of one daemon; thread-safe. ``close`` it when done."""

    def __init__(self, config: CloudConfig, catalog: IntentCatalog | None = None, *,
                 counters: Counters | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.counters = counters or Counters()
        """Shared with the daemon if it passes its own; every name starts with ``cloud_``."""
        self._clock = clock
        self._catalog = catalog
        self._access = CloudAccess(config, clock)
        self._prober = Prober(config, self._access, clock)
        self._breaker = CircuitBreaker(config.failure_threshold, config.backoff,
                                       trial_timeout_s=config.probe_budget_s + config.local_budget_s, clock=clock)
        self._pool = WorkerPool(config.workers, config.queue_size, self.counters, clock)
        self._client: CloudClient | None = None
        self._client_lock = threading.Lock()
        if config.enabled and not config.uses_tls and not _is_loopback(config.host):
            log.warning("cloud.base_url %s is plain http: transcripts%s travel unencrypted", config.root,
                        " and audio" if config.asr else "")

    @classmethod
    def from_recognizer(cls, config: CloudConfig, recognizer: IntentRecognizer | None, *,
                        counters: Counters | None = None) -> CloudRouter:
        """A router that offers the cloud the recognizer's intents, slots and lists."""
        router = cls(config, counters=counters)
        router.set_intents(recognizer)
        return router

    def set_intents(self, recognizer: IntentRecognizer | None) -> None:
        """Offer the cloud these intents from now on (start-up, SIGHUP reload); requests
        already submitted keep the old ones. Never raises: the cloud is not worth a failed start."""
        if recognizer is None or not self.config.enabled:
            self._catalog = None
            return
        try:
            self._catalog = IntentCatalog.from_recognizer(recognizer)
        except (OSError, ValueError, TypeError, AttributeError, yaml.YAMLError) as exc:
            log.warning("cloud intents: cannot read the templates' slots (%s); offering intent names only", exc)
            self._catalog = IntentCatalog.from_names(recognizer.intent_names, recognizer.language)

    def set_catalog(self, catalog: IntentCatalog | None) -> None:
        """Offer the cloud exactly these intents from now on."""
        self._catalog = catalog

    # -- routing policy: cheap, never touches the network ----------------------------------------

    def should_use_cloud_asr(self, local_available: bool, local_confidence: float | None = None) -> bool:
        """Send this utterance's audio to the cloud? Only with ``cloud.asr`` on, when there is
        no local model or its confidence is below ``local_confidence_threshold``."""
        if not self.config.asr:
            return False
        low = local_confidence is not None and local_confidence < self.config.local_confidence_threshold
        return (not local_available or low) and self._may_try()

    def should_use_cloud_intent(self, local_intent: Intent | None) -> bool:
        """Ask the cloud for an intent? When no local recognizer found one, or only a weak one."""
        if not self.config.intent or not (self._catalog and self._catalog.intents):
            return False
        weak = local_intent is None or local_intent.confidence < self.config.local_confidence_threshold
        return weak and self._may_try()

    # -- requests: never block -----------------------------------------------------------------

    def submit_asr(self, samples: np.ndarray, on_result: Callable[[CloudResult[str]], None], *,
                   rate: int = 16_000, language: str | None = None) -> CloudTicket[str]:
        """Transcribe mono ``samples`` in the cloud; ``on_result`` gets the text (on a cloud thread)."""
        audio = np.array(samples, copy=True)  # the caller may reuse its buffer

        def call(client: CloudClient, left: float) -> str:
            return client.transcribe(audio, rate, language, timeout_s=left)

        return self._submit(CallKind.ASR, call, on_result)

    def submit_intent(self, text: str, on_result: Callable[[CloudResult[Intent]], None], *,
                      intent_filter: Iterable[str] | None = None) -> CloudTicket[Intent]:
        """Find the intent of ``text`` in the cloud among the known ones (narrowed by a Hermes
        ``intentFilter``); ``on_result`` gets the Intent, or None when none fits (on a cloud thread)."""
        catalog = self._catalog.restricted(intent_filter) if self._catalog is not None else None

        def call(client: CloudClient, left: float) -> Intent | None:
            if catalog is None:
                raise CloudError(CloudErrorKind.DISABLED, "no intents were given to the cloud router")
            return client.recognize_intent(text, catalog, timeout_s=left)

        return self._submit(CallKind.INTENT, call, on_result)

    # -- state ---------------------------------------------------------------------------------

    def status(self) -> CloudStatus:
        """What is known now; reads the key file the first time, never the network."""
        c = self.config
        if not c.enabled:
            return CloudStatus(CloudState.DISABLED, "cloud.enabled = false: everything stays on this device")
        if not c.asr and not c.intent:
            return CloudStatus(CloudState.DISABLED, "cloud.asr and cloud.intent are both false")
        problem = self._access.problem()
        if problem is not None:
            return CloudStatus(CloudState.UNUSABLE, problem.detail)
        breaker = self._breaker.state
        if breaker is BreakerState.OPEN:
            return CloudStatus(CloudState.OPEN, f"circuit open, next try in {self._breaker.retry_in() or 0:.1f} s")
        if breaker is BreakerState.HALF_OPEN:
            return CloudStatus(CloudState.HALF_OPEN, "trying whether the cloud is back")
        last = self._prober.last()
        if last is None:
            return CloudStatus(CloudState.UNKNOWN, "not probed yet")
        if not last.up:
            return CloudStatus(CloudState.DOWN, last.describe())
        if self._prober.cached() is None:
            return CloudStatus(CloudState.UNKNOWN, "last probe older than cloud.probe_ttl_s")
        return CloudStatus(CloudState.UP, last.describe())

    def prepare(self) -> None:
        """Do the slow local parts now — import httpx, read the key file, load the CA store,
        start the worker threads — so the first request does not pay for them; never the
        network, never raises. Meant for the daemon's start-up, before READY."""
        if not self.config.enabled:
            return
        import httpx  # noqa: F401

        self._pool.start()

        try:
            self._access.get()
        except CloudError:
            pass  # already warned; the cloud stays off until the file is there

    @property
    def breaker_state(self) -> BreakerState:
        return self._breaker.state

    def probe(self, force: bool = True) -> ProbeResult:
        """Probe now, blocking up to ``probe_budget_s`` (for ``voiced doctor`` and benchmarks, not stages)."""
        try:
            self._access.get()
        except CloudError as exc:
            return ProbeResult(ProbeStatus.DOWN, 0.0, self._clock(), error=exc)
        return self._prober.check(force=force)

    def stats(self) -> dict[str, object]:
        status = self.status()
        return {
            "state": status.state.value,
            "detail": status.detail,
            "breaker": self._breaker.stats(),
            "probe": self._prober.stats(),
            "queued": self._pool.queued(),
            "counters": {k: v for k, v in self.counters.snapshot().items() if k.startswith("cloud_")},
        }

    def close(self, timeout: float = 2.0) -> None:
        """Answer pending requests UNAVAILABLE, stop the threads, close connections."""
        self._pool.close(timeout)
        if self._client is not None:
            self._client.close()

    # -- internals -----------------------------------------------------------------------------

    def _may_try(self) -> bool:
        return self.config.enabled and self._access.problem() is None and self._breaker.would_allow()

    def _submit(self, kind: CallKind, call: Callable[[CloudClient, float], T],
                on_result: Callable[[CloudResult[T]], None]) -> CloudTicket[T]:
        return self._pool.submit(kind, lambda deadline: self._attempt(kind, deadline, call), on_result,
                                 self.config.local_budget_s)

    def _attempt(self, kind: CallKind, deadline: float, call: Callable[[CloudClient, float], T]) -> CloudResult[T]:
        """On a worker: check, ask the breaker, probe, call; feed the breaker with the outcome."""
        enabled = self.config.enabled and (self.config.asr if kind is CallKind.ASR else self.config.intent)
        if not enabled:
            return self._skipped(kind, CloudError(CloudErrorKind.DISABLED, f"cloud.{kind.value} is off"))
        try:
            access = self._access.get()
        except CloudError as exc:
            return self._skipped(kind, exc)
        if not self._breaker.allow():
            return self._skipped(kind, CloudError(
                CloudErrorKind.CIRCUIT_OPEN, f"circuit open, next try in {self._breaker.retry_in() or 0:.1f} s"))
        trial = self._breaker.state is BreakerState.HALF_OPEN
        probe = self._prober.check(budget_s=deadline - self._clock(), force=trial)
        if not probe.up:
            self._breaker.record_failure()
            return self._skipped(kind, probe.error)
        with self._client_lock:
            client = self._client
            if client is None or client.access is not access:
                client = self._client = CloudClient(self.config, access, self.counters)
        try:
            value = call(client, deadline - self._clock())
        except CloudError as exc:
            self._breaker.record_failure()
            if exc.kind.unreachable:
                self._prober.invalidate()
            return CloudResult(CloudOutcome.FAILED, error=exc)
        self._breaker.record_success()
        return CloudResult(CloudOutcome.OK, value)

    def _skipped(self, kind: CallKind, error: CloudError | None) -> CloudResult[T]:
        self.counters.add(Count.SKIPPED.of(kind))
        return CloudResult(CloudOutcome.UNAVAILABLE, error=error)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
