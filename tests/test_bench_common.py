"""The benchmarks' process measurement: a command's own figures, not the benchmark's."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from voiced.bench.common import measure_process


def test_a_measured_command_s_peak_rss_is_its_own_not_the_benchmark_s() -> None:
    """Linux counts the memory of the process that exec'd a program in its peak RSS: every
    `voiced say` and piper-tts run of `voiced bench tts` reported the benchmark's 783 MB (a real
    `voiced say` peaks near 190 MB), and the ratio between them was 1.0 whatever they used."""
    ballast = np.ones(400 * 2**20 // 8)  # this process grows to over 400 MB first
    small = measure_process(["/bin/true"])
    grown = measure_process([sys.executable, "-S", "-c", "b = bytearray(150 * 2**20); print(len(b))"])
    assert ballast.sum() > 0
    assert small["peak_rss_mb"] < 50, small
    assert 150 < grown["peak_rss_mb"] < 250 and grown["cpu_s"] > 0, grown


def test_a_command_that_fails_or_cannot_start_is_an_error_naming_it() -> None:
    with pytest.raises(RuntimeError, match=r"exited 3"):
        measure_process([sys.executable, "-S", "-c", "import sys; sys.exit(3)"])
    with pytest.raises(RuntimeError, match=r"/no/such/program exited 127: /no/such/program: No such file"):
        measure_process(["/no/such/program"])
