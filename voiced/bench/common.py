"""Timing and process figures every benchmark reports the same way. Nothing here asserts a time."""

from __future__ import annotations

import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "cpu_model", "free_port", "installed_env", "machine", "measure_process", "median", "percentile", "proc_cpu_seconds", "proc_peak_rss_mb",
    "proc_rss_mb",
    "read_samples", "stats", "time_calls",
]

CLK_TCK = os.sysconf("SC_CLK_TCK")


def installed_env() -> dict[str, str]:
    """This environment as an installed voiced sees it: Python keeps its compiled bytecode.

    With ``PYTHONDONTWRITEBYTECODE`` set (some shells and CI images set it), every start of a
    child compiles voiced's modules from source again, a cost no device pays (pip compiles them
    at install); a benchmark that counts a child's CPU runs it without, after an untimed run."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


_MEASURE = """
import os, sys, time
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    except OSError as exc:
        os.write(2, f"{sys.argv[2]}: {exc.strerror}\\n".encode())
    os._exit(127)
_, status, ru = os.wait4(pid, 0)
os.write(int(sys.argv[1]), f"{time.perf_counter() - start} {ru.ru_utime + ru.ru_stime} {ru.ru_maxrss}".encode())
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""
"""Runs the measured command from a small process: Linux counts the memory of the process that
exec'd a program in that program's peak RSS (exec keeps the old address space's high-water mark;
with vfork it is the parent's), so a command started straight from a benchmark that had grown to
780 MB reported 780 MB, whatever it used."""


def measure_process(cmd: Sequence[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Run ``cmd`` to completion (in ``env``, else this environment); its wall time, CPU seconds
    (user+sys) and peak RSS (its own: it is started from a small wrapper, see ``_MEASURE``)."""
    read, write = os.pipe()
    # stderr goes to a file: a pipe read only after the exit would fill up and block the child
    with tempfile.TemporaryFile() as err, open(read, "rb") as figures:
        try:
            proc = subprocess.Popen([sys.executable, "-S", "-c", _MEASURE, str(write), *cmd],
                                    stdout=subprocess.DEVNULL, stderr=err, env=env, pass_fds=(write,))
        finally:
            os.close(write)  # the wrapper's copy is the one written: the read ends when it exits
        measured = figures.read().split()
        code = proc.wait()
        if code != 0 or len(measured) != 3:
            err.seek(0)
            raise RuntimeError(f"{cmd[0]} exited {code}: {err.read().decode(errors='replace')[-2000:]}")
    wall, cpu, maxrss = (float(x) for x in measured)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_mb": round(maxrss / 1024, 1)}


def read_samples(files: Sequence[Path]) -> list[Any]:
    """Each file's 16 kHz mono float samples, read as the daemon reads a file source (any format)."""
    import numpy as np

    from voiced.audio.source import WavSource

    out = []
    for f in files:
        with WavSource(f) as src:
            out.append(np.concatenate(list(src.chunks())))
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a server the benchmark starts, or a closed one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0..1) of an already sorted sequence."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def median(values: Sequence[float], digits: int = 4) -> float:
    return round(statistics.median(values), digits)


def stats(samples: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    """Median, p95, max and count of ``samples`` times ``scale`` (1e3: seconds → ms)."""
    s = sorted(x * scale for x in samples)
    return {"median": round(statistics.median(s), 3), "p95": round(percentile(s, 0.95), 3),
            "max": round(s[-1], 3), "n": len(s)}


def time_calls(fn: Callable[[], Any], n: int) -> list[float]:
    """Wall seconds of ``n`` calls of ``fn``."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def proc_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_mb(pid: int) -> float:
    """The resident set (VmRSS) of a live process now, in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024


def proc_peak_rss_mb(pid: int | None) -> float | None:
    """Peak resident set (VmHWM) of a live process in MB; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


def cpu_model() -> str:
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    # x86 says "model name"; a Raspberry Pi says "Model" (the board) and "Hardware"
    return next((fields[k] for k in ("model name", "model", "hardware") if fields.get(k) and not fields[k].isdigit()),
                platform.processor() or platform.machine())


def machine() -> dict[str, object]:
    """Where the figures were measured."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
            "arch": platform.machine(), "date": time.strftime("%Y-%m-%d")}
