"""The benchmark runs file cases in child processes: a case that kills the interpreter or hangs in
C code is counted as a failure, its file kept, and the run goes on after it."""

from __future__ import annotations

from voiced.bench.fuzz_isolated import fuzz_files_isolated


def test_a_crash_is_a_counted_failure_and_the_run_resumes_after_that_case(tmp_path) -> None:
    work, keep = tmp_path / "work", tmp_path / "keep"
    work.mkdir()
    result = fuzz_files_isolated("tokens", 30, work, 5, None, None, keep, env={"VOICED_FUZZ_SELFTEST": "7:crash"})
    assert result["restarts"] == 1
    assert result["failure"] == 1 and "the interpreter died" in result["failures"][0]["detail"]
    assert result["failures"][0]["case"] == "tokens: case 7"
    assert result.get("clear_error", 0) + result.get("loaded", 0) == 29  # every other case ran once
    assert [p.name for p in keep.iterdir()] == ["tokens-5-7-tokens.txt"]


def test_a_hang_the_child_cannot_break_is_killed_and_counted(tmp_path) -> None:
    result = fuzz_files_isolated("tokens", 12, tmp_path, 5, None, None, watchdog_s=3,
                                 env={"VOICED_FUZZ_SELFTEST": "3:hang"})
    assert result["failure"] == 1 and "no answer within 3 s" in result["failures"][0]["detail"]
    assert result.get("clear_error", 0) + result.get("loaded", 0) == 11


def test_a_child_generates_the_same_cases_each_time_which_resuming_relies_on(tmp_path) -> None:
    # (an in-process run may differ: Hypothesis draws constants from the modules already imported)
    first = fuzz_files_isolated("intents", 40, tmp_path, 11, None, None)
    second = fuzz_files_isolated("intents", 40, tmp_path, 11, None, None)
    assert first["restarts"] == 0 and first["child_rss_mb_end"] > 0 and first["failures"] == []
    assert {k: v for k, v in first.items() if "rss" not in k} == {k: v for k, v in second.items() if "rss" not in k}
