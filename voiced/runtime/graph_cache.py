"""ONNX Runtime's optimized graphs kept on disk, so a model is optimized once, not at every start.

Optimizing a graph (constant folding, fusions) is most of what loading a model costs: for the
bench-size zipformer2 about 0.35 s of the 0.45 s a process spends before its first chunk, and
sherpa-onnx pays it at every start too. ONNX Runtime can write the graph it runs
(``optimized_model_filepath``); loading that file with optimizations off runs the same kernels
on the same graph, bit for bit (checked on FP32 and INT8 zipformer2 and LSTM encoders).

The saved graph may hold CPU-specific rewrites, so an entry is keyed by the source file (path,
size, mtime, ctime, inode), the ONNX Runtime version and the CPU's model and flags: any change to
one of them is a new entry. Entries are written under a temporary name and renamed, so a reader
never sees half a file; a cached graph that fails to load is deleted and the source is loaded.

At most MAX_ENTRIES graphs are kept, the least recently used pruned. "Used" is an entry's mtime,
but not the wall clock's: a Raspberry Pi without RTC starts at 1970 or at fake-hwclock's old
time, and graphs stamped then would look oldest, be pruned in favour of stale ones and be
optimized again at every start. A hit or commit stamps max(now, newest mtime in the cache + 1 s),
so what a process uses is always newer than what it did not, whatever the clock says.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import time
from functools import lru_cache
from pathlib import Path

__all__ = ["GraphCache", "default_graph_cache"]

log = logging.getLogger(__name__)

MAX_ENTRIES = 16
"""Graphs kept; the least recently used go first (a daemon uses a handful)."""
SUFFIX = ".opt.onnx"
_STEP_NS = 1_000_000_000
"""How much newer than the newest entry a used one is stamped: a second, so that filesystems with
whole-second mtimes order it too."""


def default_graph_cache() -> Path:
    """``$CACHE_DIRECTORY/onnx`` under systemd (``CacheDirectory=voiced``), else
    ``$XDG_CACHE_HOME/voiced/onnx``, else ``~/.cache/voiced/onnx``."""
    systemd = os.environ.get("CACHE_DIRECTORY")
    if systemd:
        return Path(systemd.split(":")[0]) / "onnx"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "voiced" / "onnx"


@lru_cache(maxsize=1)
def _cpu_signature() -> str:
    # The model name and feature flags decide which kernels and layouts ONNX Runtime picks.
    wanted = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    lines: list[str] = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key = line.split(":", 1)[0].strip()
                if key in wanted and line not in lines:
                    lines.append(line)
                if not line.strip() and lines:
                    break  # the first processor's block is enough
    except OSError:
        pass
    return platform.machine() + "".join(lines)


class GraphCache:
    """One directory of optimized graphs."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def entry(self, source: Path, ort_version: str, level: str) -> Path:
        """Where the optimized graph of ``source`` lives (it may not exist yet)."""
        st = source.stat()
        identity = "\n".join(map(str, (
            source.resolve(), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev,
            ort_version, level, _cpu_signature(),
        )))
        key = hashlib.sha256(identity.encode()).hexdigest()[:24]
        return self.directory / f"{source.name.removesuffix('.onnx')}-{key}{SUFFIX}"

    def hit(self, entry: Path) -> bool:
        """True if ``entry`` exists; marks it as just used."""
        return self._mark_used(entry)

    def writable_temp(self, entry: Path) -> Path | None:
        """A temporary path to have ONNX Runtime write ``entry`` to; None if the directory is not writable."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.debug("no graph cache in %s: %s", self.directory, exc)
            return None
        if not os.access(self.directory, os.W_OK):
            return None
        return entry.with_name(f".{entry.name}.{os.getpid()}.tmp")

    def commit(self, temp: Path, entry: Path) -> None:
        """Publish a written graph under its name and drop the least recently used beyond MAX_ENTRIES."""
        try:
            os.replace(temp, entry)
        except OSError as exc:
            log.debug("graph cache: cannot keep %s: %s", entry, exc)
            self.discard(temp)
            return
        # ONNX Runtime wrote it with the wall clock's mtime, which may be years behind the others'.
        self._mark_used(entry)
        self._prune()

    def discard(self, path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass

    def _mark_used(self, entry: Path) -> bool:
        """Stamp ``entry`` newer than every other entry (see the module docstring); False if it is gone."""
        others = [mtime for mtime, p in self._entries() if p != entry]
        stamp = max([time.time_ns(), *(mtime + _STEP_NS for mtime in others)])
        try:
            os.utime(entry, ns=(stamp, stamp))
            return True
        except OSError:
            return False

    def _entries(self) -> list[tuple[int, Path]]:
        """(mtime in ns, path) of every entry."""
        entries = []
        for p in self.directory.glob(f"*{SUFFIX}"):
            try:
                entries.append((p.stat().st_mtime_ns, p))
            except OSError:
                continue
        return entries

    def _prune(self) -> None:
        for _, p in sorted(self._entries(), reverse=True)[MAX_ENTRIES:]:
            self.discard(p)
