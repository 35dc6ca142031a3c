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


@pytest.mark.parametrize("argv, said", [
    (["commands", "--asr-model", "m", "--speech", "s", "--count", "0"], "--count: must be at least 1, got 0"),
    (["wyoming", "--asr-model", "m", "--runs", "0", "a.wav"], "--runs: must be at least 1, got 0"),
    (["cloud", "--repeats", "-3"], "--repeats: must be at least 1, got -3"),
    (["service", "--asr-model", "m", "--idle-seconds", "-1"], "--idle-seconds: must be above 0, got -1"),
    (["intents", "--names", "501"], "--names: must be within 0..500, got 501"),
    (["asr", "--asr-model", "m", "--ct2-model", "/no/such/ct2", "a.wav"], "--ct2-model: /no/such/ct2 is not a folder"),
])
def test_benchmark_options_out_of_range_are_refused_before_any_work(argv, said, capsys) -> None:
    """0 runs made benchmarks divide by zero (tracebacks) or print NaN, which is no JSON; a count of 0
    for bench commands ran for ever; a missing --ct2-model failed after every other engine had run."""
    from voiced.cli import build_parser

    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["bench", *argv])
    assert done.value.code == 2 and said in capsys.readouterr().err
