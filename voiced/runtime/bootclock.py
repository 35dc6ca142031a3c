"""This boot's id and the boot clock: time that setting the wall clock does not move.

A Pi has no real-time clock: its wall clock starts at the last shutdown's time and jumps
forward when NTP first answers. Ages measured within one boot use the boot clock
(CLOCK_BOOTTIME, suspend included); the boot id tells whether a stored time is of this boot.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

__all__ = ["boot_id", "since_boot"]

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


@functools.cache
def boot_id() -> str:
    """This boot's id ('' where the kernel gives none: then no stored time counts as this boot's)."""
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip()
    except OSError:
        return ""


def since_boot() -> float:
    """Seconds since boot, suspend included."""
    return time.clock_gettime(_BOOTTIME)
