"""Huge pages for the loaded weights: advised on the big anonymous mappings, nowhere else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from voiced.runtime.hugepages import advise_huge_pages

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


_BLOCK = """
import ctypes
import mmap
from pathlib import Path

from voiced.runtime.hugepages import HUGE_PAGE, advise_huge_pages


def smaps(address, field):
    # ``field`` of the mapping that holds ``address`` (smaps lists each mapping's range, then its fields)
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and head == field + ":":
            return line.split()[1]
    raise SystemExit("no mapping holds the block")


# 64 MiB of plain anonymous memory, as ONNX Runtime's allocations of loaded weights are (numpy
# arrays would not do: numpy advises its own large blocks already)
block = mmap.mmap(-1, 32 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
block[:] = bytes(range(256)) * (len(block) // 256)
address = ctypes.addressof(ctypes.c_char.from_buffer(block)) + 16 * HUGE_PAGE  # past any unaligned start
"""
"""A fresh interpreter's 64 MiB anonymous block and ``smaps(address, field)``; the children below
go on from there."""

_CHILD = _BLOCK + """
before = smaps(address, "THPeligible") == "1"
advised = advise_huge_pages()
print(before, smaps(address, "THPeligible") == "1", advised >= 16 * HUGE_PAGE,
      block[:] == bytes(range(256)) * (len(block) // 256))
"""

_THP_MADVISE = sys.platform.startswith("linux") and THP.is_file() and "[madvise]" in THP.read_text()


@pytest.mark.skipif(not _THP_MADVISE,
                    reason="needs Linux with transparent huge pages set to madvise (as Debian and Pi OS set them)")
def test_large_anonymous_mappings_become_huge_page_eligible() -> None:
    # A fresh interpreter: in the test process, earlier tests' models were advised already, and
    # which mapping a new block lands in depends on that history.
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True).stdout
    before, after, advised_enough, untouched = out.split()
    assert (before, after) == ("False", "True"), "the block's mapping becomes eligible by the advice alone"
    assert advised_enough == "True" and untouched == "True", "at least the block advised; its data unchanged"


def test_small_mappings_are_left_alone() -> None:
    assert advise_huge_pages(min_region=1 << 50) == 0



_COLLAPSE_CHILD = _BLOCK + """
advise_huge_pages(collapse=False)
advised_only = smaps(address, "AnonHugePages")
advise_huge_pages()
print(advised_only, smaps(address, "AnonHugePages"))
"""


def _kernel_at_least(major: int, minor: int) -> bool:
    release = os.uname().release.split("-")[0].split(".")
    return (int(release[0]), int(release[1])) >= (major, minor)


@pytest.mark.skipif(not _THP_MADVISE or not _kernel_at_least(6, 1),
                    reason="needs Linux 6.1+ (MADV_COLLAPSE) with transparent huge pages set to madvise")
def test_the_copy_into_huge_pages_waits_until_asked() -> None:
    """The daemon loads with ``collapse=False`` and collapses after READY=1: advised alone, the block
    stays in small pages (khugepaged's, later); asked again, it is in huge pages when the call returns."""
    out = subprocess.run([sys.executable, "-c", _COLLAPSE_CHILD], capture_output=True, text=True, check=True).stdout
    advised_only, collapsed = (int(x) for x in out.split())
    assert advised_only == 0
    assert collapsed >= 8 * 2048, "at least 8 huge pages (kB) of the 64 MiB block"
