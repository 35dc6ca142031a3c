"""``voiced bench llm --model DIR``: the LLM fallback's time to intent and token rates, as JSON.

For each thread count (default 1 and 2) a fresh worker loads the model on the CPU, answers
one warm-up request (``first_request_ms``: the whole prompt is processed), then each
utterance ``--runs`` times through ``LlmFallback.answer``, exactly as the daemon asks.
Figures: time to intent (what the caller waits: prompt, generation, check), prompt tokens
reused from the previous request, prompt tokens processed per second, generated tokens per
second, outcomes, and the worker's load time and peak RSS. ``--prefix-cache both`` runs a
worker with and one without the prefix cache, taking turns request by request so that a
busy machine slows both alike, and adds their ratios. Without ``--templates`` a small
built-in set of lighting intents is used. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from voiced.intents import IntentRecognizer
from voiced.llm.config import LlmConfig, Provider
from voiced.llm.fallback import LlmAnswer, LlmFallback
from voiced.bench.common import percentile, proc_peak_rss_mb

__all__ = ["CACHE_MODES", "TEMPLATES", "UTTERANCES", "bench_llm", "run"]

TEMPLATES = """
language: en
intents:
  HassTurnOn:
    data:
      - sentences: ["turn on [the] {name}", "(turn|switch) on [the] lights in [the] {area}"]
  HassTurnOff:
    data:
      - sentences: ["turn off [the] {name}", "(turn|switch) off [the] lights in [the] {area}"]
  HassLightSet:
    data:
      - sentences: ["set [the] {area} lights to {brightness} percent"]
        slots: {domain: light}
lists:
  area:
    values:
      - {in: "living room", out: living_room}
      - {in: "(bed|sleeping) room", out: bedroom}
      - kitchen
      - {in: "bath room", out: bathroom}
  brightness:
    range: {from: 0, to: 100}
"""

UTTERANCES = (
    "set the bedroom lights to 40 percent",
    "could you make it brighter in the kitchen",
    "lights out in the bathroom please",
    "what's the weather like tomorrow",
)


CACHE_MODES = {"on": (True,), "off": (False,), "both": (True, False)}
"""``--prefix-cache`` choices: the settings measured side by side."""


def bench_llm(model: Path, recognizer: IntentRecognizer, utterances: Sequence[str], *,
              threads: Sequence[int] = (1, 2), runs: int = 3, max_new_tokens: int = 64,
              budget_s: float = 120.0, prefix_cache: Sequence[bool] = (True,)) -> dict[str, object]:
    """Figures for ``model`` answering ``utterances`` with ``recognizer``'s intents, per thread count and cache setting."""
    results: list[dict[str, object]] = []
    comparison = []
    for n in threads:
        llms = {on: LlmFallback.from_recognizer(
            LlmConfig(model=model, max_new_tokens=max_new_tokens, threads=n, provider=Provider.CPU, prefix_cache=on),
            recognizer) for on in prefix_cache}
        try:
            ready_s = {on: _preload(llm, budget_s) for on, llm in llms.items()}
            # Reported apart: first-call allocations, and the whole prompt even with the cache.
            first = {on: llm.answer(utterances[0], budget_s) for on, llm in llms.items()}
            answers: dict[bool, list[LlmAnswer]] = {on: [] for on in llms}
            order = list(llms)
            for i, text in enumerate(t for _ in range(runs) for t in utterances):
                for on in order[i % len(order):] + order[: i % len(order)]:  # neither always goes first
                    answers[on].append(llms[on].answer(text, budget_s))
            for on, llm in llms.items():
                info = llm.worker.info
                results.append({
                    "threads": n,
                    "prefix_cache": bool(info and info.prefix_cache),
                    "ready_s": round(ready_s[on], 3),
                    "model_load_s": round(info.load_s, 3) if info else None,
                    "worker_peak_rss_mb": proc_peak_rss_mb(llm.worker.pid),
                    "first_request_ms": _ms(first[on].elapsed_s),
                    **_figures(answers[on]),
                })
            if len(llms) == 2:
                comparison.append({"threads": n, **_ratios(answers[True], answers[False])})
        finally:
            for llm in llms.values():
                llm.close()
    return {
        "model": str(model),
        "provider": "cpu",
        "utterances": len(utterances),
        "runs": runs,
        "max_new_tokens": max_new_tokens,
        "results": results,
        **({"cached_over_uncached": comparison} if comparison else {}),
    }


def _preload(llm: LlmFallback, budget_s: float) -> float:
    start = time.perf_counter()
    llm.preload(budget_s)
    return time.perf_counter() - start


def _figures(answers: list[LlmAnswer]) -> dict[str, object]:
    waits = sorted(a.elapsed_s for a in answers)
    prompt = sum(a.prompt_tokens for a in answers)
    processed = prompt - sum(a.cached_tokens for a in answers)
    prefill = sum(a.prefill_s for a in answers)
    decoded = sum(max(a.tokens - 1, 0) for a in answers)  # the first token is part of the prefill
    decode = sum(a.decode_s for a in answers)
    return {
        "time_to_intent_ms": {
            "mean": _ms(statistics.fmean(waits)),
            "p50": _ms(percentile(waits, 0.5)),
            "p90": _ms(percentile(waits, 0.9)),
            "p95": _ms(percentile(waits, 0.95)),
            "max": _ms(waits[-1]),
        },
        "prompt_tokens_mean": round(prompt / len(answers), 1),
        "cached_prompt_tokens_mean": round((prompt - processed) / len(answers), 1),
        "generated_tokens_mean": round(sum(a.tokens for a in answers) / len(answers), 1),
        "prompt_tokens_per_s": round(processed / prefill, 1) if prefill else None,
        "generated_tokens_per_s": round(decoded / decode, 1) if decode else None,
        "outcomes": dict(Counter(a.outcome.value for a in answers)),
    }


def _ratios(cached: list[LlmAnswer], uncached: list[LlmAnswer]) -> dict[str, float]:
    """Time to intent with the cache over without, same requests, same moments."""
    a, b = sorted(x.elapsed_s for x in cached), sorted(x.elapsed_s for x in uncached)
    return {
        "time_to_intent_mean": round(statistics.fmean(a) / statistics.fmean(b), 3),
        "time_to_intent_p50": round(percentile(a, 0.5) / percentile(b, 0.5), 3),
        "time_to_intent_p95": round(percentile(a, 0.95) / percentile(b, 0.95), 3),
        "same_answer_share": sum(x.raw == y.raw for x, y in zip(cached, uncached, strict=True)) / len(cached),
    }


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def run(model: Path, templates: Sequence[str] | None, utterances: Sequence[str] | None, *, threads: Sequence[int],
        runs: int, max_new_tokens: int, prefix_cache: str) -> dict[str, object]:
    """``voiced bench llm``: the figures for ``model``, with the built-in lighting templates by default."""
    with tempfile.TemporaryDirectory(prefix="voiced-bench-llm-") as tmp:
        if not templates:
            path = Path(tmp) / "lights.yaml"
            path.write_text(TEMPLATES, encoding="utf-8")
            templates = [str(path)]
        recognizer = IntentRecognizer.load(templates)
        return bench_llm(model, recognizer, tuple(utterances or UTTERANCES), threads=threads, runs=runs,
                         max_new_tokens=max_new_tokens, prefix_cache=CACHE_MODES[prefix_cache])
