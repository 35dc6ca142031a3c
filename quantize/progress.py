"""Progress lines on stderr for long steps (calibration, validation, speed runs)."""

from __future__ import annotations

import sys
import time
from typing import Self, TextIO

__all__ = ["Progress", "say", "set_quiet"]

_quiet = False


def set_quiet(quiet: bool) -> None:
    """Silence progress output (tests, ``--quiet``)."""
    global _quiet
    _quiet = quiet


def say(message: str, stream: TextIO | None = None) -> None:
    """One line of progress: ``voiced-quantize: message``."""
    if not _quiet:
        print(f"voiced-quantize: {message}", file=stream or sys.stderr, flush=True)


class Progress:
    """``label: 40/116 files (12.3 s)`` at most once a second, and once at the end."""

    def __init__(self, label: str, total: int, unit: str = "", interval: float = 1.0) -> None:
        self.label, self.total, self.unit, self.interval = label, total, unit, interval
        self.done = 0
        self._start = self._last = time.monotonic()
        self._closed = False

    def step(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.interval and self.done < self.total:
            self._last = now
            self._emit(now)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._emit(time.monotonic())

    def _emit(self, now: float) -> None:
        unit = f" {self.unit}" if self.unit else ""
        say(f"{self.label}: {self.done}/{self.total}{unit} ({now - self._start:.1f} s)")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
