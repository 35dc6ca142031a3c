"""systemd notifications (READY, STATUS, STOPPING, RELOADING, WATCHDOG) over ``sdnotify``.

Everything here does nothing when ``NOTIFY_SOCKET`` is unset, so the daemon runs the same
from a shell. The watchdog timing comes from ``WATCHDOG_USEC`` (and ``WATCHDOG_PID``),
which systemd sets when the unit has ``WatchdogSec=``; pings go out at half that period.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from voiced.errors import ConfigError

__all__ = ["NotifyState", "SystemdNotifier", "WatchdogConfig"]

log = logging.getLogger(__name__)


class NotifyState(StrEnum):
    """The ``sd_notify`` assignments this daemon sends."""

    READY = "READY=1"
    STOPPING = "STOPPING=1"
    RELOADING = "RELOADING=1"
    WATCHDOG = "WATCHDOG=1"


@dataclass(frozen=True)
class WatchdogConfig:
    """The service watchdog systemd expects us to feed, if any."""

    timeout_s: float | None = None
    """``WATCHDOG_USEC`` in seconds: systemd restarts us when no ping arrives within it; None = no watchdog."""

    def __post_init__(self) -> None:
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ConfigError("WATCHDOG_USEC", f"must be > 0, got {self.timeout_s} s")

    @property
    def enabled(self) -> bool:
        return self.timeout_s is not None

    @property
    def interval_s(self) -> float | None:
        """Seconds between pings: half the timeout, as sd_watchdog_enabled(3) recommends."""
        return None if self.timeout_s is None else self.timeout_s / 2

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, pid: int | None = None) -> WatchdogConfig:
        """Read ``WATCHDOG_USEC`` / ``WATCHDOG_PID``; a watchdog meant for another process is ignored."""
        env = os.environ if environ is None else environ
        raw = env.get("WATCHDOG_USEC", "").strip()
        if not raw:
            return cls()
        watchdog_pid = env.get("WATCHDOG_PID", "").strip()
        if watchdog_pid and watchdog_pid != str(os.getpid() if pid is None else pid):
            log.debug("WATCHDOG_PID=%s is not us: no watchdog", watchdog_pid)
            return cls()
        try:
            usec = int(raw)
        except ValueError:
            raise ConfigError("WATCHDOG_USEC", f"must be an integer number of microseconds, got {raw!r}") from None
        if usec <= 0:
            raise ConfigError("WATCHDOG_USEC", f"must be > 0, got {usec}")
        return cls(timeout_s=usec / 1_000_000)


def _monotonic_usec() -> int:
    # CLOCK_MONOTONIC, the clock systemd compares MONOTONIC_USEC with (time.monotonic may differ).
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


class SystemdNotifier:
    """Sends ``sd_notify`` messages; a no-op without ``NOTIFY_SOCKET``. Thread-safe."""

    def __init__(self) -> None:
        self.socket_path: str | None = os.environ.get("NOTIFY_SOCKET") or None
        self._lock = threading.Lock()
        self._sender: Any = None
        if self.socket_path is None:
            return
        import sdnotify

        try:
            # debug=True: sdnotify raises instead of silently dropping everything afterwards.
            self._sender = sdnotify.SystemdNotifier(debug=True)
        except OSError as exc:
            log.warning("NOTIFY_SOCKET=%s is unusable (%s): not notifying systemd", self.socket_path, exc)

    @property
    def enabled(self) -> bool:
        """True when running under systemd with a usable notify socket."""
        return self._sender is not None

    def notify(self, *assignments: str) -> bool:
        """Send ``assignments`` as one datagram; False when disabled or the send failed."""
        if self._sender is None:
            return False
        message = "\n".join(assignments)
        # sdnotify encodes as Latin-1; systemd reads UTF-8. Handing it the UTF-8 bytes spelled
        # as Latin-1 makes it send exactly those bytes (and never fail on a non-Latin-1 name).
        wire = message.encode("utf-8").decode("latin-1")
        with self._lock:
            try:
                self._sender.notify(wire)
            except OSError as exc:
                # systemd gone or its queue full: never take the daemon down for a notification.
                log.warning("cannot notify systemd (%s): %s", message.replace("\n", " "), exc)
                return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """Start-up is complete (models loaded, stages running)."""
        return self.notify(NotifyState.READY, *self._status(status))

    def status(self, text: str) -> bool:
        """A one-line status shown by ``systemctl status``."""
        return self.notify(*self._status(text))

    def stopping(self, status: str | None = None) -> bool:
        """Shutdown has begun."""
        return self.notify(NotifyState.STOPPING, *self._status(status))

    def reloading(self, status: str | None = None) -> bool:
        """A reload (SIGHUP) has begun; send :meth:`ready` when it is done.

        Carries ``MONOTONIC_USEC``, which systemd 253+ needs to match RELOADING=1 to the reload.
        """
        return self.notify(NotifyState.RELOADING, f"MONOTONIC_USEC={_monotonic_usec()}", *self._status(status))

    def watchdog(self) -> bool:
        """Ping the service watchdog."""
        return self.notify(NotifyState.WATCHDOG)

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for ``seconds`` more to start or stop (slow model loading on a Pi Zero)."""
        return self.notify(f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}")

    def close(self) -> None:
        with self._lock:
            if self._sender is not None:
                self._sender.socket.close()
                self._sender = None

    @staticmethod
    def _status(text: str | None) -> tuple[str, ...]:
        # STATUS= is one line; a newline would start a new (bogus) assignment.
        return () if text is None else (f"STATUS={' '.join(text.splitlines())}",)
