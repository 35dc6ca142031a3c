"""A hard deadline for a whole request, not just for each read.

httpx's timeouts restart with every read and every write: a server that trickles its
answer a byte at a time, each well within the read timeout, holds a request for as long
as it likes. Inside :func:`deadline`, every network wait of this thread's requests —
connect, TLS, each write and each read, headers and body — is cut to the time left, and
an operation that starts after the deadline fails at once with httpcore's timeout error,
which httpx and :func:`~voiced.cloud.access.transport_error` turn into a TIMEOUT.

Only resolving the host name is not covered (``getaddrinfo`` takes no timeout): the probe
bounds that with its own thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # httpcore comes with httpx, imported where it is used
    import ssl

    import httpcore
    import httpx

__all__ = ["deadline", "deadline_transport"]

WRITE_PIECE = 16 * 1024
"""Bytes written per wait: a server that reads the upload slowly cannot stretch one write
(httpcore retries partial sends with the same timeout) past the deadline."""

MAX_CONNECTIONS, MAX_KEEPALIVE, KEEPALIVE_S = 100, 20, 5.0
"""httpx's default pool limits, which its transport would otherwise have."""

_DEADLINE: ContextVar[float | None] = ContextVar("voiced_cloud_deadline", default=None)


@contextmanager
def deadline(at: float) -> Iterator[None]:
    """Requests made inside end by ``at`` (``time.monotonic()``), whatever the server does."""
    token = _DEADLINE.set(at)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def deadline_transport(ssl_context: ssl.SSLContext,
                       socket_options: Iterable[tuple[int, int, int]]) -> httpx.HTTPTransport:
    """httpx's transport, its connections made through a backend that keeps :func:`deadline`."""
    import httpcore
    import httpx

    transport = httpx.HTTPTransport(verify=ssl_context)
    # httpx takes no network backend: its pool is made again, with httpx's default limits, around ours.
    transport._pool = httpcore.ConnectionPool(  # noqa: SLF001 - the one place httpx's pool is reached
        ssl_context=ssl_context, max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_KEEPALIVE,
        keepalive_expiry=KEEPALIVE_S, socket_options=list(socket_options),
        network_backend=_Backend(httpcore.SyncBackend()))
    return transport


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """``timeout`` cut to the time left before this thread's deadline; ``expired`` once it has passed."""
    at = _DEADLINE.get()
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise expired("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream:
    """An httpcore network stream whose every wait keeps the deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        import httpcore

        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        import httpcore

        view = memoryview(buffer)
        for at in range(0, len(view), WRITE_PIECE):
            self._inner.write(bytes(view[at:at + WRITE_PIECE]), _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> _Stream:
        import httpcore

        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend:
    """httpcore's network backend, making :class:`_Stream`\\ s."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> _Stream:
        import httpcore

        return _Stream(self._inner.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout),
                                               local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> _Stream:
        import httpcore

        return _Stream(self._inner.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)
