"""The one factory for ONNX Runtime sessions: threads, optimization, spinning off."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from voiced.errors import ConfigError, ModelError
from voiced.runtime.graph_cache import GraphCache

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["MMAP_THRESHOLD_BYTES", "RunCancel", "SessionOptions", "arena_release", "create_session",
           "pin_mmap_threshold", "trim_heap"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionOptions:
    """How ONNX Runtime runs one model."""

    threads: int = 1
    """Intra-op threads; 1 keeps a Pi's other cores free for the other stages."""
    optimize: bool = True
    """Enable all graph optimizations (constant folding, fusions)."""
    thread_affinities: str | None = None
    """ONNX Runtime ``session.intra_op_thread_affinities`` (e.g. "2;3"), from the hardware profile."""
    memory_pattern: bool = True
    """ONNX Runtime's memory pattern: an allocation plan kept per input shape. Off for models fed a
    new length each call (a Piper voice, one per sentence), where the plans pile up (80 MB RSS)."""
    graph_cache: Path | None = None
    """Directory where optimized graphs are kept and reused (``voiced.runtime.graph_cache``); None:
    optimize at every load. Only used with ``optimize``."""
    collapse_huge_pages: bool = True
    """Move a loaded transducer's weights into huge pages at once (``advise_huge_pages``); the
    daemon loads with False and collapses after READY=1, so the copy does not delay the start."""

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ConfigError("threads", f"must be at least 1, got {self.threads}")


def create_session(path: str | Path, options: SessionOptions | None = None) -> ort.InferenceSession:
    """Open ``path`` as a CPU inference session after checking it against its manifest.

    A missing, tampered or broken file raises ModelError naming it.
    """
    import onnxruntime as ort

    from voiced.models.manifest import verify_model_file

    options = options or SessionOptions()
    path = Path(path)
    # Every model passes here, so none is loaded unchecked: a checksum mismatch against its
    # manifest or install record raises ModelError naming the file; FP32 files are warned about.
    verify_model_file(path)
    so = ort.SessionOptions()
    so.intra_op_num_threads = options.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_mem_pattern = options.memory_pattern
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if options.optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    # Spinning keeps idle worker threads busy-waiting; on a Pi that is wasted power and heat.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if options.thread_affinities and options.threads > 1:
        so.add_session_config_entry("session.intra_op_thread_affinities", options.thread_affinities)
    so.log_severity_level = 3
    if options.graph_cache is not None and options.optimize:
        session = _load_cached(ort, path, so, GraphCache(options.graph_cache))
        if session is not None:
            return session
    try:
        return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises several unrelated types for bad files
        raise ModelError(f"cannot load ONNX model {path}: {exc}") from exc


def _load_cached(ort, path: Path, so: ort.SessionOptions, cache: GraphCache) -> ort.InferenceSession | None:
    """The session from the cached optimized graph, or optimized now and the graph kept; None if
    the source has to be loaded the ordinary way (then its errors name the source)."""
    entry = cache.entry(path, ort.__version__, str(so.graph_optimization_level))
    if cache.hit(entry):
        level = so.graph_optimization_level
        # Already optimized: doing it again costs the time the cache saves and changes nothing.
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            session = ort.InferenceSession(str(entry), sess_options=so, providers=["CPUExecutionProvider"])
            log.debug("%s: optimized graph from %s", path, entry)
            return session
        except Exception as exc:  # a damaged entry must not stop the daemon: drop it, load the source
            log.warning("%s: cached optimized graph %s does not load (%s); optimizing the model again", path, entry, exc)
            cache.discard(entry)
        finally:
            so.graph_optimization_level = level
    temp = cache.writable_temp(entry)
    if temp is None:
        return None
    so.optimized_model_filepath = str(temp)
    try:
        session = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    except Exception:  # the plain load that follows reports it
        cache.discard(temp)
        return None
    finally:
        so.optimized_model_filepath = ""
    if temp.is_file():
        cache.commit(temp, entry)
    return session


def _run_options(release: bool) -> ort.RunOptions:
    import onnxruntime as ort

    run = ort.RunOptions()
    if release:
        run.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return run


@functools.cache
def _releasing_run() -> ort.RunOptions:
    return _run_options(True)


class RunCancel:
    """Ends model runs from another thread: a run made with :meth:`options` stops at its next node
    once :meth:`cancel` is called (ONNX Runtime's ``RunOptions.terminate``; it then raises), and
    later runs with them stop at once. One per piece of work that may be abandoned (a sentence
    being spoken when the speaker is told to stop), so the thread does not sit out a long run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._options: dict[bool, ort.RunOptions] = {}
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def options(self, release: bool = False) -> ort.RunOptions:
        """The run options to run with (``release``: as :func:`arena_release` gives them)."""
        with self._lock:
            run = self._options.get(release)
            if run is None:
                run = self._options[release] = _run_options(release)
                run.terminate = self._cancelled
            return run

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            for run in self._options.values():
                run.terminate = True


@contextlib.contextmanager
def arena_release(release: bool, cancel: RunCancel | None = None) -> Iterator[ort.RunOptions | None]:
    """The run options for one run (None: the default): with ``release``, ONNX Runtime's CPU arena
    gives its unused memory back at the end of the run, and the C heap's free pages go back to the
    system after it (``trim_heap``). For a rare input far larger than the usual ones, whose arena
    growth would otherwise be kept for the life of the process. With ``cancel``: its options."""
    if release:
        pin_mmap_threshold()
    if cancel is not None:
        yield cancel.options(release)
    elif release:
        yield _releasing_run()
    else:
        yield None
    if release:
        trim_heap()


_M_MMAP_THRESHOLD = -3  # glibc's <malloc.h> mallopt parameter
MMAP_THRESHOLD_BYTES = 1 << 20
"""Blocks from this size up are mapped apart and unmapped when freed (``pin_mmap_threshold``)."""


@functools.cache
def _glibc(name: str) -> Callable[..., int] | None:
    try:
        return getattr(ctypes.CDLL(None), name)  # type: ignore[no-any-return]
    except (AttributeError, OSError):  # not glibc (musl has neither call): nothing to do
        return None


@functools.cache
def pin_mmap_threshold() -> None:
    """Keep the C heap's big blocks out of the heap for the life of the process (glibc ``mallopt
    M_MMAP_THRESHOLD``), once, before the first releasing run (``arena_release``).

    glibc raises its mmap threshold (up to 32 MB) each time a mapped block is freed, so later big
    blocks come from the heap, where those of a thread's arena that end up at its top stay in RSS:
    ``trim_heap`` returns free pages inside the heaps, not a thread arena's top. The joe voice, two
    sentences at a time, each released, RSS after each of 8 rounds of 12 sentences: 144-199 MB
    with the moving threshold, 143-144 MB pinned at 1 MB from the start (``MALLOC_MMAP_THRESHOLD_``),
    CPU alike (40.0/39.1 s pinned, 40.5/41.8/37.8 s not); pinned here, before the first release, rounds stay
    within 2-4 MB. Whisper tiny.en on 40 hifitts files: 7.30 s of CPU pinned, 7.42 s not (median of 3)."""
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def trim_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``), after a releasing run
    (``arena_release``).

    What an arena gives back is only free()d: once glibc has raised its mmap threshold (it does
    after the first large block is freed) big blocks come from the heap, and their pages stay in
    RSS between live blocks. The joe voice, two sentences at a time, each released: +39 to +89 MB
    over 36 sentences without this, -2 to +16 MB with it, for no measurable CPU."""
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)
