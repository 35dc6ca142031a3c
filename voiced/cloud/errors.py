"""What can go wrong with the cloud, as one typed error: :class:`CloudError` with a :class:`CloudErrorKind`."""

from __future__ import annotations

from enum import Enum

from voiced.errors import VoicedError

__all__ = ["CloudError", "CloudErrorKind"]


class CloudErrorKind(Enum):
    """Why a probe or a call failed; the first five mean the server was not reached."""

    DNS = "dns"
    """The host name did not resolve."""
    REFUSED = "refused"
    """Nothing listens on the port (connection refused)."""
    TIMEOUT = "timeout"
    """No answer within the deadline (connect, TLS, request or the whole budget)."""
    TLS = "tls"
    """The TLS handshake failed, e.g. a certificate that is not trusted or names another host."""
    CONNECTION = "connection"
    """Any other network failure: reset, closed mid-answer, unreachable network."""
    AUTH = "auth"
    """The server refused the API key (401 / 403)."""
    CLIENT_ERROR = "client_error"
    """The server refused the request (another 4xx)."""
    SERVER_ERROR = "server_error"
    """The server failed (5xx)."""
    MALFORMED = "malformed"
    """The answer was not what the API promises (not JSON, missing fields, wrong types)."""
    DISABLED = "disabled"
    """The cloud cannot be used: disabled in the config, or its key or CA file is missing."""
    CIRCUIT_OPEN = "circuit_open"
    """Recent requests failed: the circuit breaker keeps the cloud out until its delay passes."""

    @property
    def unreachable(self) -> bool:
        """The server was not reached: the next call must probe again first."""
        return self in _UNREACHABLE


_UNREACHABLE = frozenset({CloudErrorKind.DNS, CloudErrorKind.REFUSED, CloudErrorKind.TIMEOUT,
                          CloudErrorKind.TLS, CloudErrorKind.CONNECTION})


class CloudError(VoicedError):
    """A probe or a call to the cloud failed; the message never holds audio or transcripts."""

    def __init__(self, kind: CloudErrorKind, detail: str, http_status: int | None = None) -> None:
        self.kind = kind
        self.detail = detail
        self.http_status = http_status
        super().__init__(f"{kind.value}: {detail}")
