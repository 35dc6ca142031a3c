"""libasound's own error messages, into voiced's log instead of straight onto stderr.

libasound prints what it finds wrong ("ALSA lib confmisc.c:855:(parse_card) cannot find card
'0'", up to eight lines for one failed open) to stderr itself. A daemon whose microphone is
unplugged retries the open with backoff for as long as it is gone, and every attempt would put
those lines in the journal beside voiced's own message, which already names the device and the
error. Routed through ``snd_lib_error_set_handler`` they become DEBUG records of this module's
logger (``-vv`` shows them), their printf format as it is: the arguments of a C variadic call
cannot be read portably from Python.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

__all__ = ["route_libasound_messages"]

log = logging.getLogger(__name__)

# void handler(const char *file, int line, const char *function, int err, const char *fmt, ...):
# the fixed arguments are read; the printf arguments after ``fmt`` are left alone (a callee that
# does not read them is safe on the Linux ABIs voiced runs on).
_HANDLER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p)


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def _message(file: bytes | None, line: int, function: bytes | None, err: int, fmt: bytes | None) -> None:
    log.debug("libasound %s:%d (%s) %s%s", _text(file), line, _text(function), _text(fmt),
              f" (error {err})" if err else "")


_handler = _HANDLER_TYPE(_message)  # kept here: libasound holds only the C pointer
_lock = threading.Lock()
_routed: bool | None = None


def route_libasound_messages() -> bool:
    """Install the handler once per process; False (and nothing changed) where libasound cannot be
    loaded. Affects every user of libasound in the process (pyalsaaudio included)."""
    global _routed
    with _lock:
        if _routed is None:
            _routed = _install()
        return _routed


def _install() -> bool:
    name = ctypes.util.find_library("asound") or "libasound.so.2"
    try:
        library = ctypes.CDLL(name)
        set_handler = library.snd_lib_error_set_handler
    except (OSError, AttributeError) as exc:
        log.debug("libasound messages stay on stderr: %s", exc)
        return False
    set_handler.argtypes = [_HANDLER_TYPE]
    set_handler.restype = ctypes.c_int
    return set_handler(_handler) == 0
