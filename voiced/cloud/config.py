"""The ``[cloud]`` table: an optional OpenAI-compatible service used only as a fallback.

Nothing here can keep the daemon from starting: only malformed values are a
:class:`ConfigError`. The key file and the CA file are read when the cloud is first
needed; a missing one disables the cloud with a warning (see :mod:`voiced.cloud.access`).
Validation never touches the network (no DNS at load).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from voiced.errors import ConfigError
from voiced.runtime.backoff import BackoffPolicy

__all__ = ["CloudConfig"]


@dataclass(frozen=True)
class CloudConfig:
    """How and when to ask the cloud (the ``[cloud]`` table; ``voiced.configfile`` builds it)."""

    enabled: bool = False
    """Use the cloud at all; off by default: everything stays on the device."""
    base_url: str = ""
    """Service root without ``/v1``, e.g. ``https://api.openai.com``; required when enabled."""
    asr: bool = False
    """Send audio to the cloud when there is no local model or its confidence is low.
    Off by default: audio leaves the device only when this is true."""
    intent: bool = True
    """Send a transcript to the cloud when no local recognizer found an intent."""
    asr_model: str = "whisper-1"
    """``model`` of ``POST /v1/audio/transcriptions``."""
    intent_model: str = "gpt-4o-mini"
    """``model`` of ``POST /v1/chat/completions``."""
    api_key_file: Path | None = None
    """File holding the API key (e.g. a systemd credential), read when first needed; unset: no
    ``Authorization`` header (local servers). A missing or empty file disables the cloud."""
    ca_file: Path | None = None
    """CA certificates to verify the server with (private CAs); the system's when unset.
    TLS verification cannot be turned off."""
    probe_path: str = "/v1/models"
    """Path the reachability probe GETs; any answer but 401/403/5xx means reachable."""
    probe_budget_s: float = 2.5
    """Whole time a probe may take: DNS, connect, TLS and the HTTP answer's headers."""
    probe_ttl_s: float = 60.0
    """How long a successful probe is trusted before the next call probes again."""
    connect_timeout_s: float = 2.5
    """Connect (and TLS) timeout of a call."""
    request_timeout_s: float = 5.0
    """Whole time of a call — connect, upload and the complete answer, however slowly the
    server sends it (also capped by the time left of ``local_budget_s``)."""
    local_budget_s: float = 6.0
    """Time from submitting a request to its answer: past it the caller is answered
    ``timed_out`` and keeps the local result. Submitting never blocks."""
    local_confidence_threshold: float = 0.5
    """Local results below this confidence (ASR or intent) go to the cloud."""
    failure_threshold: int = 3
    """Consecutive failures (probes or calls) that open the circuit breaker."""
    backoff: BackoffPolicy = field(default_factory=lambda: BackoffPolicy(initial=5.0, maximum=300.0))
    """Delays before the breaker lets one trial through again ([cloud.backoff])."""
    workers: int = 2
    """Threads making cloud requests."""
    queue_size: int = 8
    """Requests waiting for a worker, at most; beyond it requests are answered ``busy`` at once."""
    publish_corrections: bool = False
    """Publish the cloud's result next to the local one (to improve local templates);
    off by default: transcripts stay off the broker."""

    def __post_init__(self) -> None:
        if self.enabled or self.base_url:
            _check_url(self.base_url)
        if not self.probe_path.startswith("/"):
            raise ConfigError("cloud.probe_path", f"must start with '/', got {self.probe_path!r}")
        for key in ("asr_model", "intent_model"):
            if not getattr(self, key).strip():
                raise ConfigError(f"cloud.{key}", "must not be empty")
        for key in ("probe_budget_s", "probe_ttl_s", "connect_timeout_s", "request_timeout_s", "local_budget_s"):
            value = getattr(self, key)
            if not 0 < value <= 3600:
                raise ConfigError(f"cloud.{key}", f"must be within (0, 3600] seconds, got {value}")
        if not 0 <= self.local_confidence_threshold <= 1:
            raise ConfigError("cloud.local_confidence_threshold",
                              f"must be within [0, 1], got {self.local_confidence_threshold}")
        if not 1 <= self.failure_threshold <= 100:
            raise ConfigError("cloud.failure_threshold", f"must be within 1..100, got {self.failure_threshold}")
        if not 1 <= self.workers <= 8:
            raise ConfigError("cloud.workers", f"must be within 1..8, got {self.workers}")
        if not 1 <= self.queue_size <= 1000:
            raise ConfigError("cloud.queue_size", f"must be within 1..1000, got {self.queue_size}")

    @property
    def root(self) -> str:
        """``base_url`` without a trailing slash."""
        return self.base_url.rstrip("/")

    @property
    def uses_tls(self) -> bool:
        return urlsplit(self.base_url).scheme == "https"

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).hostname or ""


def _check_url(url: str) -> None:
    if not url:
        raise ConfigError("cloud.base_url", "is required when the cloud is enabled")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError as exc:
        raise ConfigError("cloud.base_url", f"is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("cloud.base_url", f"must be http(s)://HOST[:PORT][/PATH], got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError("cloud.base_url", "must not hold a query, fragment or credentials (use api_key_file)")
    if parts.path.rstrip("/").endswith("/v1"):
        raise ConfigError("cloud.base_url", f"leave out the trailing /v1 (it is added to each path), got {url!r}")
