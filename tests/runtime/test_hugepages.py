"""Huge pages for the loaded weights: advised on the big anonymous mappings, nowhere else."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from voiced.runtime.hugepages import HUGE_PAGE, advise_huge_pages

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _thp_eligible_bytes() -> int:
    total, size = 0, 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line.startswith("Size:"):
            size = int(line.split()[1]) * 1024
        elif line.startswith("THPeligible:") and line.split()[1] == "1":
            total += size
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux") or not THP.is_file() or "[never]" in THP.read_text(),
                    reason="needs Linux with transparent huge pages not set to never")
def test_large_anonymous_mappings_become_huge_page_eligible() -> None:
    block = np.ones(64 * HUGE_PAGE // 8)  # 64 MiB of heap-like anonymous memory, as loaded weights are
    before = _thp_eligible_bytes()
    advised = advise_huge_pages()
    assert advised >= 32 * HUGE_PAGE
    assert _thp_eligible_bytes() >= before + 32 * HUGE_PAGE
    assert float(block.sum()) == block.size, "the data is untouched"


def test_small_mappings_are_left_alone() -> None:
    assert advise_huge_pages(min_region=1 << 50) == 0
