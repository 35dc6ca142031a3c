"""Transparent huge pages for the memory that holds loaded model weights.

ONNX Runtime reads every weight of the encoder at every chunk (25 MB for the bench-size INT8
zipformer2); with 4 KiB pages that walk costs TLB misses that 2 MiB pages avoid. Most systems
(Debian, Raspberry Pi OS) set THP to ``madvise``: a process gets huge pages only where it asks.
After the models are loaded, :func:`advise_huge_pages` asks for them on the large anonymous
mappings (the heap and big ``mmap`` blocks where the weights live) and, on Linux 6.1+, collapses
those ranges into huge pages now (``MADV_COLLAPSE``) rather than when khugepaged gets to them.
The collapse copies the weights (0.03-0.24 s of CPU for the bench-size zipformer2 on a 2-core x86 VM), so the
daemon loads with ``collapse=False`` and collapses once it has told systemd it is ready.
Nothing changes but the page size: the same bytes, the same results.
"""

from __future__ import annotations

import ctypes
import logging
import sys

__all__ = ["advise_huge_pages"]

log = logging.getLogger(__name__)

HUGE_PAGE = 2 << 20
MIN_REGION = 8 << 20
"""Only mappings this large: small ones would grow to a whole huge page for a few KiB of data."""
_MADV_HUGEPAGE = 14
_MADV_COLLAPSE = 25


def advise_huge_pages(min_region: int = MIN_REGION, collapse: bool = True) -> int:
    """Ask for huge pages on this process's large anonymous mappings; the bytes advised (0 off Linux).
    ``collapse``: also move them into huge pages now, before returning (else khugepaged does it,
    in the kernel's own time)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
            lines = f.readlines()
    except (OSError, AttributeError) as exc:
        log.debug("no huge pages: %s", exc)
        return 0
    advised = 0
    for line in lines:
        fields = line.split()
        if len(fields) < 5 or not fields[1].startswith("rw") or fields[4] != "0":
            continue
        if len(fields) > 5 and fields[5] != "[heap]":
            continue  # stacks, vdso, named mappings: not where tensors live
        start, end = (int(x, 16) for x in fields[0].split("-"))
        start = (start + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
        end &= ~(HUGE_PAGE - 1)
        if end - start < min_region:
            continue
        if madvise(start, end - start, _MADV_HUGEPAGE) != 0:
            continue  # THP "never" or not built in: nothing to gain anywhere
        advised += end - start
        if collapse:  # best effort: older kernels (EINVAL), fragmented memory (EAGAIN): khugepaged's
            madvise(start, end - start, _MADV_COLLAPSE)
    log.debug("huge pages advised on %d MiB", advised >> 20)
    return advised
