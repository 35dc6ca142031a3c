"""The fallback as the daemon uses it: a worker process, a budget, only valid intents.

Nothing here asserts a wall-clock time: the budget tests freeze the real worker process
(SIGSTOP) or give a budget no generation can meet, and check which path was taken.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from voiced.errors import ModelError
from voiced.intents import IntentRecognizer, IntentSource
from voiced.llm import LLM_CONFIDENCE, LlmConfig, LlmFallback, LlmOutcome, Provider
from voiced.llm.runtime import Finish
from voiced.llm.worker import WorkerState

READY_S = 60.0
"""Generous: how long a worker may take to load the tiny model on a busy machine."""
ROOMY_S = 9.0
"""A budget the tiny model always meets."""


@pytest.fixture
def fallback(tiny_model: Path, recognizer: IntentRecognizer) -> Iterator[LlmFallback]:
    llm = LlmFallback.from_recognizer(LlmConfig(model=tiny_model, max_new_tokens=200, threads=1), recognizer)
    yield llm
    llm.close()


@pytest.fixture
def ready(fallback: LlmFallback) -> LlmFallback:
    fallback.preload(READY_S)
    return fallback


def test_importing_and_constructing_loads_nothing(fallback: LlmFallback) -> None:
    code = "import sys, voiced.llm; sys.exit('onnxruntime_genai' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    assert fallback.state is WorkerState.STOPPED and fallback.worker.pid is None


def test_preload_starts_the_worker_and_logs_the_provider_once(fallback: LlmFallback, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="voiced.llm"):
        fallback.preload(READY_S)
    assert fallback.state is WorkerState.READY and fallback.worker.pid not in (None, os.getpid())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("LLM ready")]
    assert len(lines) == 1 and "on cpu (asked: auto" in lines[0] and "guidance on" in lines[0]


def test_an_asked_for_gpu_that_is_absent_falls_back_to_the_cpu(tiny_model: Path, recognizer: IntentRecognizer,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    import onnxruntime_genai as og

    if og.is_cuda_available():
        pytest.skip("onnxruntime-genai-cuda is installed")
    llm = LlmFallback.from_recognizer(LlmConfig(model=tiny_model, provider=Provider.CUDA, threads=1), recognizer)
    try:
        with caplog.at_level(logging.INFO, logger="voiced.llm"):
            llm.preload(READY_S)
        assert llm.worker.info is not None and llm.worker.info.choice.provider is Provider.CPU
        assert any("provider cuda was asked for but cpu is used" in r.getMessage() for r in caplog.records)
        assert llm.answer("dim the lights", ROOMY_S).outcome in (LlmOutcome.INTENT, LlmOutcome.NONE)
    finally:
        llm.close()


def test_unmatched_utterances_get_a_valid_llm_intent_or_none(tiny_model: Path, recognizer: IntentRecognizer,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    llm = LlmFallback.from_recognizer(LlmConfig(model=tiny_model, max_new_tokens=200, temperature=2.0, threads=1),
                                      recognizer)
    try:
        texts = ["set the bedroom lights to 40 percent", "could you brighten the kitchen", "lamp off please",
                 "what time is it"] * 4
        with caplog.at_level(logging.INFO, logger="voiced.llm"):
            answers = [llm.answer(t, ROOMY_S) for t in texts]
    finally:
        llm.close()
    # what people said is not in the INFO log (the cloud's calls keep it out too)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("LLM →")]
    assert len(logged) == sum(a.intent is not None for a in answers)
    assert not [m for m in logged for t in texts if t in m]
    assert recognizer.recognize(texts[0]) is None  # "bedroom" is not "bed room": no template matches
    assert {a.outcome for a in answers} <= {LlmOutcome.INTENT, LlmOutcome.NONE}, [(a.raw, a.problem) for a in answers]
    intents = [a.intent for a in answers if a.intent is not None]
    assert intents, "sampling at temperature 2 picks an intent sometimes"
    for text, answer in zip(texts, answers):
        if answer.intent is not None:
            assert answer.intent.source is IntentSource.LLM and answer.intent.confidence == LLM_CONFIDENCE
            assert answer.intent.text == text and answer.intent.name in recognizer.intent_names
    assert llm.counts().keys() <= {"intent", "none"}


def test_the_prefix_cache_changes_nothing_but_what_the_worker_processes(tiny_model: Path,
                                                                        recognizer: IntentRecognizer) -> None:
    llms = [LlmFallback.from_recognizer(LlmConfig(model=tiny_model, max_new_tokens=200, threads=1, prefix_cache=on),
                                        recognizer) for on in (True, False)]
    texts = ["turn on the kitchen light", "lamp off please", "set the bedroom lights to 40 percent"]
    try:
        cached, fresh = ([llm.answer(t, ROOMY_S) for t in texts] for llm in llms)
        assert [llm.worker.info.prefix_cache if llm.worker.info else None for llm in llms] == [True, False]
    finally:
        for llm in llms:
            llm.close()
    assert [(a.outcome, a.raw, a.intent) for a in cached] == [(a.outcome, a.raw, a.intent) for a in fresh]
    assert [a.cached_tokens > 0 for a in cached] == [False, True, True]
    assert all(a.cached_tokens == 0 for a in fresh)


def test_the_intent_filter_limits_the_answers(ready: LlmFallback) -> None:
    for _ in range(3):
        answer = ready.answer("switch it off", ROOMY_S, intent_filter=["HassTurnOff"])
        assert answer.outcome is LlmOutcome.NONE or (answer.intent and answer.intent.name == "HassTurnOff")
    assert ready.answer("switch it off", ROOMY_S, intent_filter=[]).outcome is LlmOutcome.NONE


def test_an_answer_cut_short_is_not_an_intent(tiny_model: Path, recognizer: IntentRecognizer) -> None:
    llm = LlmFallback.from_recognizer(LlmConfig(model=tiny_model, max_new_tokens=2, threads=1), recognizer)
    try:
        answer = llm.answer("turn on the kitchen light", ROOMY_S)
    finally:
        llm.close()
    assert answer.outcome is LlmOutcome.INVALID and answer.intent is None and "max_new_tokens" in (answer.problem or "")


def test_a_budget_far_below_the_generation_aborts_it(ready: LlmFallback) -> None:
    answer = ready.answer("set the bedroom lights to 40 percent", budget_s=1e-6)
    assert answer.outcome is LlmOutcome.BUDGET and answer.intent is None
    job = ready.worker.pending
    assert job is not None  # the worker was told to stop; its end is read by the next request
    after = ready.answer("set the bedroom lights to 40 percent", ROOMY_S)
    assert after.outcome in (LlmOutcome.INTENT, LlmOutcome.NONE) and ready.worker.pending is None
    assert ready.worker.last_abandoned is not None and ready.worker.last_abandoned[0] == job


def test_a_frozen_worker_never_holds_the_caller_past_its_budget(ready: LlmFallback) -> None:
    pid = ready.worker.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # stands in for one very long step that holds the worker
    try:
        first = ready.answer("turn on the kitchen light", budget_s=0.2)
        second = ready.answer("turn on the kitchen light", budget_s=0.2)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert first.outcome is LlmOutcome.BUDGET and first.tokens == 0
    assert second.outcome is LlmOutcome.BUSY  # the aborted job had not ended yet
    job = ready.worker.pending
    assert job is not None
    assert ready.answer("turn on the kitchen light", ROOMY_S).outcome in (LlmOutcome.INTENT, LlmOutcome.NONE)
    # Both the job and its cancel were waiting when the worker ran again: it stopped before the prompt.
    assert ready.worker.last_abandoned == (job, Finish.CANCELLED)


def test_a_worker_that_never_ends_its_cancelled_job_is_restarted(ready: LlmFallback,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A hung worker (frozen here) answered every later request BUSY, each after its whole budget,
    for as long as it hung: past its grace it is killed and a new one answers."""
    pid = ready.worker.pid
    assert pid is not None
    ready.worker.cancel_grace_s = 0.0  # the grace is over at once (5 s by default)
    os.kill(pid, signal.SIGSTOP)
    try:
        assert ready.answer("turn on the kitchen light", budget_s=0.2).outcome is LlmOutcome.BUDGET
        with caplog.at_level(logging.WARNING, logger="voiced.llm"):
            after = ready.answer("turn on the kitchen light", ROOMY_S + 30)
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed and reaped, as it should be
            os.kill(pid, signal.SIGCONT)
    assert after.outcome in (LlmOutcome.INTENT, LlmOutcome.NONE)
    assert ready.worker.restarts == 1 and ready.worker.pid != pid and ready.worker.pending is None
    assert any("did not end a cancelled job" in r.getMessage() for r in caplog.records)


def test_the_first_request_does_not_wait_for_loading_past_its_budget(fallback: LlmFallback) -> None:
    assert fallback.answer("turn on the lamp", budget_s=1e-3).outcome is LlmOutcome.LOADING
    assert fallback.state is WorkerState.LOADING  # it goes on loading for the next request
    assert fallback.answer("turn on the lamp", ROOMY_S + 30).outcome in (LlmOutcome.INTENT, LlmOutcome.NONE)


def test_a_worker_that_dies_is_reported_and_restarted(ready: LlmFallback, caplog: pytest.LogCaptureFixture) -> None:
    pid = ready.worker.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    with caplog.at_level(logging.WARNING, logger="voiced.llm"):
        assert ready.answer("turn on the lamp", ROOMY_S).outcome is LlmOutcome.UNAVAILABLE
    assert any("exit code -9" in r.getMessage() for r in caplog.records)
    assert ready.state is WorkerState.STOPPED and ready.worker.restarts == 1
    assert ready.answer("turn on the lamp", ROOMY_S + 30).outcome in (LlmOutcome.INTENT, LlmOutcome.NONE)
    assert ready.worker.pid != pid


def test_a_model_that_cannot_load_disables_the_fallback_for_good(tmp_path: Path, recognizer: IntentRecognizer) -> None:
    llm = LlmFallback.from_recognizer(LlmConfig(model=tmp_path, threads=1), recognizer)
    with pytest.raises(ModelError, match="genai_config.json"):
        llm.preload(READY_S)
    assert llm.state is WorkerState.FAILED and llm.worker.pid is None
    assert llm.answer("turn on the lamp", ROOMY_S).outcome is LlmOutcome.UNAVAILABLE
    assert llm.worker.pid is None  # not retried

