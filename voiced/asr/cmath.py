"""``log10`` of float32 values as C's ``log10f`` computes it, for front ends that must equal a C++ one.

sherpa-onnx normalizes Whisper's features with ``std::log10`` on floats: the C library's
``log10f``. numpy's float32 ``log10`` is that same function on most CPUs, but on x86 with
AVX512 numpy dispatches to its own vectorized version (SVML), which differs in the last bit for
about a third of the values: enough to change a near-tie token of an INT8 model. Where numpy and
``log10f`` disagree on a probe, the C function is called per value (measured on such a CPU: the
log-mel of 3 s of audio 97 -> 123 ms); elsewhere numpy's is used as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from collections.abc import Callable

import numpy as np

__all__ = ["log10f"]

log = logging.getLogger(__name__)

_PROBE = np.geomspace(1e-10, 1e4, 4099, dtype=np.float32)


@functools.cache
def _c_log10f() -> Callable[[float], float] | None:
    """The C library's ``log10f``, or None where it cannot be loaded (then numpy's is used)."""
    name = ctypes.util.find_library("m")
    try:
        fn = ctypes.CDLL(name).log10f if name else None
    except (OSError, AttributeError):
        return None
    if fn is None:
        return None
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return fn


@functools.cache
def _numpy_is_log10f() -> bool:
    fn = _c_log10f()
    if fn is None:
        return True
    same = bool(np.array_equal(np.log10(_PROBE), np.fromiter(map(fn, _PROBE.tolist()), np.float32, len(_PROBE))))
    if not same:
        log.debug("numpy's float32 log10 is not the C library's log10f on this CPU: calling log10f per value")
    return same


def log10f(x: np.ndarray) -> np.ndarray:
    """``log10`` of float32 ``x`` (any shape), bit for bit what C's ``log10f`` gives."""
    x = np.asarray(x, np.float32)
    fn = _c_log10f()
    if fn is None or _numpy_is_log10f():
        return np.log10(x)
    flat = x.ravel().tolist()
    return np.fromiter(map(fn, flat), np.float32, len(flat)).reshape(x.shape)
