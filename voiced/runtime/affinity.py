"""Pinning threads to cores, SCHED_FIFO for capture, and the CPU frequency governor check.

Every function acts on the *calling thread*: on Linux, pid 0 in ``sched_setaffinity`` and
``sched_setscheduler`` means the calling thread, not the whole process, which is what lets
each stage thread sit on its own cores. Cores a profile names that this machine (or its
cgroup) does not offer are dropped with a warning, so a Pi 4 profile still runs on a
2-core CI box.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from voiced.errors import ConfigError

__all__ = [
    "name_current_thread",
    "CPUFREQ_ROOT",
    "GOVERNOR_FIX",
    "Governor",
    "GovernorReport",
    "available_cpus",
    "check_governors",
    "clamp_cpus",
    "format_cpu_list",
    "kept_cpus",
    "ort_thread_affinities",
    "parse_cpu_list",
    "pin_current_thread",
    "read_governors",
    "set_realtime",
    "thread_cpus",
]

log = logging.getLogger(__name__)

CPUFREQ_ROOT = Path("/sys/devices/system/cpu")
"""Where ``cpu*/cpufreq/scaling_governor`` live."""


class Governor(StrEnum):
    """Linux cpufreq governors (``scaling_governor``)."""

    PERFORMANCE = "performance"
    POWERSAVE = "powersave"
    ONDEMAND = "ondemand"
    CONSERVATIVE = "conservative"
    SCHEDUTIL = "schedutil"
    USERSPACE = "userspace"


# -- CPU lists -----------------------------------------------------------------------------


def parse_cpu_list(text: str) -> frozenset[int]:
    """Parse the kernel's list format (``0-2,4``) as in ``Cpus_allowed_list``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        first, dash, last = part.partition("-")
        try:
            lo, hi = int(first), int(last) if dash else int(first)
        except ValueError:
            raise ConfigError("cpus", f"not a CPU list: {text!r}") from None
        if lo < 0 or hi < lo:
            raise ConfigError("cpus", f"not a CPU list: {text!r}")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """The kernel's compact list format: ``{0, 1, 2, 4}`` → ``0-2,4``."""
    ordered = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        runs.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(runs)


def available_cpus() -> frozenset[int]:
    """The cores this process may use (its main thread's mask: machine, cgroup and taskset)."""
    # The main thread is never pinned by us, so its mask is what the process was given.
    return frozenset(os.sched_getaffinity(os.getpid()))


def kept_cpus(cpus: Iterable[int], allowed: Iterable[int]) -> frozenset[int]:
    """The cores of ``cpus`` that are ``allowed``; all allowed ones when none of them is."""
    allowed = frozenset(allowed)
    return (frozenset(cpus) & allowed) or allowed


def clamp_cpus(cpus: Iterable[int], available: Iterable[int] | None = None, label: str = "") -> frozenset[int]:
    """:func:`kept_cpus`, with a warning that names what was dropped."""
    wanted = frozenset(cpus)
    allowed = frozenset(available) if available is not None else available_cpus()
    kept = wanted & allowed
    what = f" for {label}" if label else ""
    if not kept:
        log.warning("cores %s%s are not available here (have %s): using %s",
                    format_cpu_list(wanted), what, format_cpu_list(allowed), format_cpu_list(allowed))
        return allowed
    if kept != wanted:
        log.warning("cores %s%s are not available here (have %s): using %s",
                    format_cpu_list(wanted - allowed), what, format_cpu_list(allowed), format_cpu_list(kept))
    return kept


# -- the calling thread --------------------------------------------------------------------


def pin_current_thread(cpus: Iterable[int] | None, label: str | None = None) -> frozenset[int]:
    """Pin the calling thread to ``cpus`` (clamped); return the cores it runs on, read back.

    None leaves the thread where it is. ``label`` (default: the thread's name) is for logs.
    """
    label = label or threading.current_thread().name
    if cpus is not None:
        target = clamp_cpus(cpus, label=label)
        try:
            os.sched_setaffinity(0, target)  # 0 = the calling thread
        except OSError as exc:
            # e.g. a seccomp filter without sched_setaffinity: run unpinned rather than not at all.
            log.warning("cannot pin %s to cores %s: %s", label, format_cpu_list(target), exc)
    applied = thread_cpus()
    log.debug("%s (tid %d) runs on cores %s", label, threading.get_native_id(), format_cpu_list(applied))
    return applied


def thread_cpus(tid: int | None = None, pid: int | None = None) -> frozenset[int]:
    """The kernel's ``Cpus_allowed_list`` of thread ``tid`` (default: the calling thread)."""
    tid = threading.get_native_id() if tid is None else tid
    pid = os.getpid() if pid is None else pid
    status = Path(f"/proc/{pid}/task/{tid}/status")
    for line in status.read_text(encoding="ascii").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpu_list(line.partition(":")[2])
    raise OSError(f"no Cpus_allowed_list in {status}")


def set_realtime(priority: int, label: str | None = None) -> bool:
    """Give the calling thread SCHED_FIFO at ``priority`` (1..99); False (and a warning) if refused.

    Needs CAP_SYS_NICE or ``LimitRTPRIO=`` ≥ ``priority`` (the systemd unit sets the latter).
    """
    label = label or threading.current_thread().name
    if not 1 <= priority <= 99:
        raise ConfigError("realtime_priority", f"must be within 1..99, got {priority}")
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError as exc:
        log.warning("no realtime scheduling for %s (SCHED_FIFO %d: %s); running at normal priority. "
                    "Grant it with LimitRTPRIO=%d (see systemd/voiced.service)", label, priority, exc, priority)
        return False
    log.info("%s runs with SCHED_FIFO priority %d", label, priority)
    return True


def ort_thread_affinities(cpus: Iterable[int], threads: int) -> str | None:
    """``session.intra_op_thread_affinities`` for a session run from a thread pinned to ``cpus``.

    ONNX Runtime wants one entry per *extra* thread (``threads - 1``; the calling thread is
    the first) and 1-based processor ids. Extra threads take the stage's cores after the
    first, round robin, so the caller keeps its core when there are enough.
    """
    ordered = sorted(set(cpus))
    if threads <= 1 or not ordered:
        return None
    extra = ordered[1:] or ordered
    return ";".join(str(extra[i % len(extra)] + 1) for i in range(threads - 1))


# -- governor ------------------------------------------------------------------------------


GOVERNOR_FIX = ("enable systemd/voiced-cpu-performance.service, or: echo performance | "
                "sudo tee /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor")
"""How to get off ``powersave``."""


@dataclass(frozen=True)
class GovernorReport:
    """What ``scaling_governor`` says for each core."""

    governors: dict[int, str]
    """Core → governor; empty when the machine exposes no cpufreq (VMs, containers)."""

    @property
    def powersave(self) -> frozenset[int]:
        """Cores stuck at their lowest clock, where recognition falls behind."""
        return frozenset(cpu for cpu, gov in self.governors.items() if gov == Governor.POWERSAVE)

    @property
    def warnings(self) -> tuple[str, ...]:
        """One line per problem, saying how to fix it."""
        if not self.powersave:
            return ()
        cores = format_cpu_list(self.powersave)
        return (f"CPU governor is 'powersave' on cores {cores}: speech will be recognized late; {GOVERNOR_FIX}",)


def read_governors(root: Path = CPUFREQ_ROOT) -> dict[int, str]:
    """Core → ``scaling_governor``; cores without cpufreq are left out."""
    governors: dict[int, str] = {}
    for path in sorted(root.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        try:
            cpu = int(path.parent.parent.name.removeprefix("cpu"))
            governors[cpu] = path.read_text(encoding="ascii").strip()
        except (OSError, ValueError):
            continue
    return governors


def check_governors(root: Path = CPUFREQ_ROOT) -> GovernorReport:
    """Read the governors and log a warning for ``powersave``."""
    report = GovernorReport(read_governors(root))
    for warning in report.warnings:
        log.warning("%s", warning)
    return report


_PR_SET_NAME = 15


def name_current_thread(name: str) -> bool:
    """Give the calling thread a kernel name (``top -H``, ``/proc/<pid>/task/<tid>/comm``).

    Python's thread names stay inside Python; the kernel's (at most 15 bytes) is what
    operators and ``ps`` see. False where prctl is unavailable.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
