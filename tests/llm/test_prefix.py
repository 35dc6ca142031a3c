"""The prefix cache: a request after the first answers exactly what a fresh Generator answers.

Random weights put the model near ties everywhere and long unguided runs wander far, so
comparing token for token with a fresh Generator (greedy) is a sharp check that the cache
changes nothing but the time. How much was reused is what the runtime reports; no time
is asserted.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from tests.llm.test_runtime import UTTERANCES, _job
from voiced.llm.catalog import IntentCatalog
from voiced.llm.config import Provider
from voiced.llm.prefix import PrefixCache
from voiced.llm.runtime import (
    PREFILL_CHUNK,
    Finish,
    GenerationEnd,
    Job,
    LoadedModel,
    open_model,
    run_generation,
)
from voiced.llm.schema import AnswerKind, parse_answer


def _run(loaded: LoadedModel, job: Job, cache: PrefixCache | None = None, *, chunks: int | None = None,
         tokens: int | None = None) -> tuple[GenerationEnd, list[int]]:
    """Generate; cancelled after ``chunks`` prompt chunks or ``tokens`` answer tokens when given."""
    streamed: list[int] = []
    asked = itertools.count()

    def cancelled() -> bool:
        if chunks is not None and next(asked) >= chunks:
            return True
        return tokens is not None and len(streamed) >= tokens

    return run_generation(loaded, job, cancelled, streamed.append, cache), streamed


def _same_as_fresh(loaded: LoadedModel, job: Job, cache: PrefixCache) -> GenerationEnd:
    fresh, fresh_tokens = _run(loaded, job)
    cached, cached_tokens = _run(loaded, job, cache)
    assert cached_tokens == fresh_tokens and cached.text == fresh.text, job.prompt.user
    assert cached.finish is fresh.finish and cached.prompt_tokens == fresh.prompt_tokens
    assert fresh.cached_tokens == 0
    return cached


def _folder_with_search(tiny_model: Path, tmp_path: Path, **search: float) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "genai_config.json").read_text())
    config["search"].update(search)
    (folder / "genai_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("guided", [True, False], ids=["guided", "unguided"])
def test_requests_after_the_first_answer_as_a_fresh_generator_would(loaded: LoadedModel, catalog: IntentCatalog,
                                                                    guided: bool) -> None:
    cache = PrefixCache(loaded)
    for i, text in enumerate(UTTERANCES * 2):
        end = _same_as_fresh(loaded, _job(catalog, text, guided=guided, max_new_tokens=40), cache)
        if i == 0:
            assert end.cached_tokens == 0
        else:  # the system prompt at least: everything but the utterance and the chat template's end
            assert end.prompt_tokens - 40 < end.cached_tokens < end.prompt_tokens
        if guided:
            assert end.finish is Finish.EOS and parse_answer(end.text, catalog, text).kind is not AnswerKind.INVALID
        else:
            assert end.finish is Finish.MAX_TOKENS and end.tokens == 40


def test_the_repetition_penalty_still_counts_the_whole_prompt(tiny_model: Path, tmp_path: Path,
                                                              loaded: LoadedModel, catalog: IntentCatalog) -> None:
    penalized = open_model(_folder_with_search(tiny_model, tmp_path, repetition_penalty=1.3), Provider.CPU, threads=1)
    cache = PrefixCache(penalized)
    changed = False
    for text in UTTERANCES:
        job = _job(catalog, text, guided=False, max_new_tokens=40)
        end = _same_as_fresh(penalized, job, cache)
        changed |= end.text != _run(loaded, job)[0].text
    assert changed and end.cached_tokens > 0  # the penalty mattered, and the cache was used


def test_a_different_prompt_start_reuses_only_what_is_shared(loaded: LoadedModel, catalog: IntentCatalog) -> None:
    cache = PrefixCache(loaded)
    text = UTTERANCES[2]
    # An intent filter changes the intents listed, so the system prompt differs part way.
    fewer = catalog.restricted(["HassTurnOff"])
    ends = [_same_as_fresh(loaded, _job(c, text), cache) for c in (catalog, fewer, catalog, catalog)]
    # Both ways the shared part ends where the intent lists part; the same prompt again shares all but its end.
    assert 0 < ends[1].cached_tokens == ends[2].cached_tokens < ends[3].cached_tokens == ends[3].prompt_tokens - 1


def test_a_cancelled_request_leaves_what_it_processed_for_the_next(loaded: LoadedModel, catalog: IntentCatalog) -> None:
    cache = PrefixCache(loaded)
    job = _job(catalog, UTTERANCES[0])
    end, _ = _run(loaded, job, cache, chunks=2)  # cancelled before the third prompt chunk
    assert end.finish is Finish.CANCELLED and end.tokens == 0 and cache.held == 2 * PREFILL_CHUNK
    assert _same_as_fresh(loaded, job, cache).cached_tokens == 2 * PREFILL_CHUNK
    end, streamed = _run(loaded, _job(catalog, UTTERANCES[1]), cache, tokens=3)  # cancelled while answering
    assert end.finish is Finish.CANCELLED and end.tokens == len(streamed) == 3
    assert _same_as_fresh(loaded, _job(catalog, UTTERANCES[1]), cache).cached_tokens > 2 * PREFILL_CHUNK


def test_an_answer_cut_short_at_max_new_tokens_says_so(loaded: LoadedModel, catalog: IntentCatalog) -> None:
    cache = PrefixCache(loaded)
    for text in UTTERANCES[:2]:
        end = _same_as_fresh(loaded, _job(catalog, text, max_new_tokens=3), cache)
        assert end.finish is Finish.MAX_TOKENS and end.tokens == 3


def test_a_longer_prompt_than_the_cache_holds_starts_over(loaded: LoadedModel, catalog: IntentCatalog) -> None:
    cache = PrefixCache(loaded, headroom=0)  # room for exactly the first prompt and answer
    short, long = "lamp off", "turn the big lamp in the living room off and then the one in the kitchen too"
    ends = [_same_as_fresh(loaded, _job(catalog, t), cache) for t in (short, long, long)]
    assert ends[0].cached_tokens == 0 and ends[1].cached_tokens == 0  # a new, larger base
    assert ends[2].cached_tokens == ends[2].prompt_tokens - 1


def test_search_options_that_need_the_whole_sequence_turn_the_cache_off(tiny_model: Path, tmp_path: Path) -> None:
    folder = _folder_with_search(tiny_model, tmp_path, min_length=5)
    loaded = open_model(folder, Provider.CPU, threads=1)
    assert "min_length" in (PrefixCache.unsupported(loaded) or "")
    assert PrefixCache.create(loaded) is None
    with pytest.raises(ValueError, match="min_length"):
        PrefixCache(loaded)
