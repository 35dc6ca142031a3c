"""What a request to the cloud needs besides the URL: the API key and the TLS context.

Both are read when first needed, never at start-up. A key file or CA file that is
missing, unreadable or empty makes the cloud unusable (a warning, once per problem) and
is looked at again after ``probe_ttl_s``, so a key provisioned later is picked up
without a restart.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from voiced.cloud.config import CloudConfig
from voiced.cloud.deadline import deadline_transport
from voiced.cloud.errors import CloudError, CloudErrorKind

if TYPE_CHECKING:  # httpx is imported where it is used: nothing heavy at import time
    import httpx

__all__ = ["Access", "CloudAccess", "http_client", "status_error", "transport_error"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Access:
    """Everything a request needs; the key is never logged."""

    api_key: str | None
    """Bearer token, or None when no key file is configured."""
    ssl_context: ssl.SSLContext
    """Verifying TLS context, built once: httpx would otherwise load a CA bundle for every client."""

    def __repr__(self) -> str:
        return f"Access(api_key={'***' if self.api_key else None})"


class _Lazy(Generic[T]):
    """A value loaded on first use; a failure is remembered for ``retry_s`` and warned about once."""

    def __init__(self, load: Callable[[], T], retry_s: float, clock: Callable[[], float]) -> None:
        self._load = load
        self._retry_s = retry_s
        self._clock = clock
        self._loaded = False
        self._value: T | None = None
        self.error: CloudError | None = None
        self._failed_at = 0.0
        self._warned: set[str] = set()

    def get(self) -> T:
        """Called with the owner's lock held."""
        if self._loaded:
            return self._value  # type: ignore[return-value]
        now = self._clock()
        if self.error is not None and now - self._failed_at < self._retry_s:
            raise self.error
        try:
            self._value = self._load()
        except CloudError as exc:
            self.error, self._failed_at = exc, now
            if exc.detail not in self._warned:
                self._warned.add(exc.detail)
                log.warning("cloud disabled: %s", exc.detail)
            raise
        if self.error is not None:
            log.info("cloud usable again: %s", self.error.detail.split(" ", 1)[0])
        self._loaded, self.error = True, None
        return self._value


class CloudAccess:
    """Reads the key file and builds the TLS context lazily; thread-safe.

    :meth:`problem` reads only the (small) key file, so routing decisions on the daemon's
    threads stay cheap; the TLS context, which loads the CA store, is built by :meth:`get`
    on a cloud thread.
    """

    def __init__(self, config: CloudConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._key = _Lazy(self._read_key, config.probe_ttl_s, clock)
        self._tls = _Lazy(self._tls_context, config.probe_ttl_s, clock)
        self._access: Access | None = None

    def get(self) -> Access:
        """The key and TLS context; raises CloudError(DISABLED) while a file is missing."""
        with self._lock:
            if self._access is None:
                self._access = Access(self._key.get(), self._tls.get())
            return self._access

    def problem(self) -> CloudError | None:
        """Why the cloud is unusable now (the key file, or a CA file already found bad), or None."""
        with self._lock:
            try:
                self._key.get()
            except CloudError as exc:
                return exc
            return self._tls.error

    def _read_key(self) -> str | None:
        path = self.config.api_key_file
        if path is None:
            return None
        try:
            key = path.read_text(encoding="utf-8-sig").strip()  # -sig: an editor's byte-order mark is no part of it
        except FileNotFoundError:
            raise CloudError(CloudErrorKind.DISABLED, f"cloud.api_key_file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise CloudError(CloudErrorKind.DISABLED, f"cloud.api_key_file {path} cannot be read: {exc}") from None
        if not key:
            raise CloudError(CloudErrorKind.DISABLED, f"cloud.api_key_file {path} is empty")
        if any(c.isspace() for c in key) or not key.isprintable():
            raise CloudError(CloudErrorKind.DISABLED, f"cloud.api_key_file {path} holds more than one token")
        return key

    def _tls_context(self) -> ssl.SSLContext:
        ca = self.config.ca_file if self.config.uses_tls else None
        try:
            # A private CA replaces the system's store, like mqtt.ca_file; verification stays on.
            return ssl.create_default_context(cafile=str(ca) if ca is not None else None)
        except FileNotFoundError:
            raise CloudError(CloudErrorKind.DISABLED, f"cloud.ca_file {ca} does not exist") from None
        except (OSError, ssl.SSLError) as exc:
            raise CloudError(CloudErrorKind.DISABLED, f"cloud.ca_file {ca} cannot be used: {exc}") from None


def http_client(config: CloudConfig, access: Access, timeout: httpx.Timeout) -> httpx.Client:
    """A client for ``config.base_url``: verified TLS, the key as a bearer token, no redirects;
    its requests keep a :func:`~voiced.cloud.deadline.deadline` they are made in."""
    import httpx

    headers = {"User-Agent": "voiced"}
    if access.api_key:
        headers["Authorization"] = f"Bearer {access.api_key}"
    transport = deadline_transport(
        access.ssl_context,
        # Headers and body leave in separate writes: without this, Nagle holds the body
        # back until the server's delayed ACK (up to 40 ms per request).
        [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
    )
    return httpx.Client(
        base_url=config.root,
        headers=headers,
        timeout=timeout,
        transport=transport,
        follow_redirects=False,  # a redirect could carry the key or the audio elsewhere
        trust_env=False,  # proxies and CA bundles come from the config, not the environment
    )


def transport_error(exc: BaseException) -> CloudError:
    """An httpx (or socket) exception as a CloudError naming why the server was not reached."""
    import httpx

    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:  # httpx → httpcore → the OSError or SSLError underneath
        chain.append(e)
        e = e.__cause__ or e.__context__
    if isinstance(exc, httpx.TimeoutException) or any(isinstance(c, TimeoutError) for c in chain):
        return CloudError(CloudErrorKind.TIMEOUT, f"no answer in time ({type(exc).__name__})")
    for c in chain:
        if isinstance(c, ssl.SSLCertVerificationError):
            return CloudError(CloudErrorKind.TLS, f"certificate not trusted: {c.verify_message}")
        if isinstance(c, ssl.SSLError):
            return CloudError(CloudErrorKind.TLS, f"TLS handshake failed: {c.reason or c}")
        if isinstance(c, socket.gaierror):
            return CloudError(CloudErrorKind.DNS, f"host name does not resolve: {c.strerror or c}")
        if isinstance(c, ConnectionRefusedError):
            return CloudError(CloudErrorKind.REFUSED, "connection refused")
    return CloudError(CloudErrorKind.CONNECTION, f"{type(exc).__name__}: {exc}")


def status_error(status: int) -> CloudError | None:
    """The CloudError an HTTP status means for a call, or None for success (2xx)."""
    if 200 <= status < 300:
        return None
    if status in (401, 403):
        return CloudError(CloudErrorKind.AUTH, f"HTTP {status}: the API key was refused", status)
    if status >= 500:
        return CloudError(CloudErrorKind.SERVER_ERROR, f"HTTP {status}", status)
    if 300 <= status < 400:
        return CloudError(CloudErrorKind.CLIENT_ERROR, f"HTTP {status}: redirects are not followed; "
                          "set cloud.base_url to the final address", status)
    return CloudError(CloudErrorKind.CLIENT_ERROR, f"HTTP {status}", status)
