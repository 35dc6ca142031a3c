"""Utterance → intent with the local LLM, for what no template matched.

    llm = LlmFallback.from_recognizer(config.llm, recognizer)   # nothing loaded yet
    llm.start()                  # optional: load in the background now (after READY)
    intent = llm.recognize("set the bedroom lights to 40 percent")   # Intent(source=LLM) or None

``recognize`` returns within the time budget whatever happens (loading, a busy or dead
worker, a slow model), and returns only intents that pass :func:`parse_answer`; None
means "send intentNotRecognized". ``answer`` gives the same with the reason.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from voiced.errors import ConfigError, ModelError
from voiced.intents import Intent, IntentRecognizer
from voiced.llm.catalog import IntentCatalog
from voiced.llm.config import LlmConfig
from voiced.llm.prompt import build_prompt
from voiced.llm.runtime import Finish, Job
from voiced.llm.schema import AnswerKind, answer_schema, parse_answer
from voiced.llm.worker import Generation, LlmWorker, WorkerSettings, WorkerState

__all__ = ["LlmAnswer", "LlmFallback", "LlmOutcome"]

log = logging.getLogger(__name__)

PRELOAD_TIMEOUT_S = 120.0
"""How long ``preload`` waits for the model by default (start-up, before READY)."""


class LlmOutcome(Enum):
    """What became of one utterance sent to the LLM."""

    INTENT = "intent"
    """A valid intent."""
    NONE = "none"
    """The model answered that no intent fits (or there was nothing to ask)."""
    INVALID = "invalid"
    """The answer failed the schema check or was cut short at ``max_new_tokens``."""
    BUDGET = "budget"
    """The time budget ran out during generation, which was aborted."""
    BUSY = "busy"
    """An earlier aborted generation kept the model busy for the whole budget."""
    LOADING = "loading"
    """The model was still loading when the budget ran out."""
    UNAVAILABLE = "unavailable"
    """The model failed to load or its worker died (it restarts with the next request)."""
    ERROR = "error"
    """The runtime failed on this request (e.g. the prompt is longer than the model's context)."""


_FROM_FINISH = {
    Finish.BUDGET: LlmOutcome.BUDGET,
    Finish.CANCELLED: LlmOutcome.BUDGET,
    Finish.BUSY: LlmOutcome.BUSY,
    Finish.LOADING: LlmOutcome.LOADING,
    Finish.UNAVAILABLE: LlmOutcome.UNAVAILABLE,
    Finish.ERROR: LlmOutcome.ERROR,
}


@dataclass(frozen=True)
class LlmAnswer:
    """The LLM's verdict on one utterance."""

    outcome: LlmOutcome
    intent: Intent | None = None
    """Set only for INTENT."""
    raw: str = ""
    """What the model generated."""
    problem: str | None = None
    """Why the answer was refused (INVALID, ERROR)."""
    tokens: int = 0
    """Tokens generated (and streamed to the waiter) before it returned."""
    elapsed_s: float = 0.0
    """Time the caller waited."""
    prompt_tokens: int = 0
    """Prompt length (0 when the worker did not report)."""
    cached_tokens: int = 0
    """Prompt tokens the worker did not process again (prefix cache)."""
    prefill_s: float = 0.0
    """Worker time from the request to the first generated token."""
    decode_s: float = 0.0
    """Worker time for the tokens after the first."""


class LlmFallback:
    """The LLM fallback of one model; thread-safe, one generation at a time."""

    def __init__(self, config: LlmConfig, catalog: IntentCatalog) -> None:
        if config.model is None:
            raise ConfigError("llm.model", "the LLM fallback needs a model folder")
        self.config = config
        self._catalog = catalog
        self.worker = LlmWorker(WorkerSettings(config.model, config.provider, config.resolved_threads(),
                                               config.prefix_cache))
        self._counts: Counter[LlmOutcome] = Counter()
        self._counts_lock = threading.Lock()

    @classmethod
    def from_recognizer(cls, config: LlmConfig, recognizer: IntentRecognizer) -> LlmFallback:
        """A fallback answering with the intents of ``recognizer``; the model is not loaded yet."""
        return cls(config, IntentCatalog.from_recognizer(recognizer))

    @property
    def catalog(self) -> IntentCatalog:
        return self._catalog

    @property
    def state(self) -> WorkerState:
        return self.worker.state

    def set_intents(self, recognizer: IntentRecognizer) -> None:
        """New templates (SIGHUP): later requests use their intents; the loaded model stays."""
        self._catalog = IntentCatalog.from_recognizer(recognizer)  # one reference swap

    def start(self) -> None:
        """Begin loading the model in the worker process; returns at once."""
        self.worker.start()

    def preload(self, timeout: float = PRELOAD_TIMEOUT_S) -> None:
        """Load the model now and wait for it; ModelError when it fails or takes longer than ``timeout``."""
        state = self.worker.wait_ready(timeout)
        if state is not WorkerState.READY:
            why = self.worker.error or f"not loaded after {timeout:.0f} s"
            raise ModelError(f"LLM {self.config.model}: {why}")

    def close(self) -> None:
        """Stop the worker process."""
        self.worker.close()

    def counts(self) -> dict[str, int]:
        """Outcomes so far, by name (for the stats message)."""
        with self._counts_lock:
            return {o.value: n for o, n in self._counts.items()}

    def recognize(self, text: str, budget_s: float | None = None,
                  intent_filter: Iterable[str] | None = None) -> Intent | None:
        """The intent the LLM finds in ``text``, or None; returns within the budget (default: the config's)."""
        return self.answer(text, budget_s, intent_filter).intent

    def answer(self, text: str, budget_s: float | None = None,
               intent_filter: Iterable[str] | None = None) -> LlmAnswer:
        """Like ``recognize``, with the outcome, the raw output and the timing."""
        budget = self.config.time_budget_s if budget_s is None else budget_s
        if not budget > 0:
            raise ValueError(f"budget_s must be > 0, got {budget}")
        deadline = time.monotonic() + budget
        catalog = self._catalog.restricted(intent_filter)
        if not text.strip() or not catalog.intents:
            return self._count(LlmAnswer(LlmOutcome.NONE))
        job = Job(0, build_prompt(catalog, text), json.dumps(answer_schema(catalog, text)),
                  self.config.max_new_tokens, self.config.temperature)
        generation = self.worker.generate(job, deadline)
        result = self._judge(generation, catalog, text)
        # what people said stays out of the INFO log, as the cloud calls' does; debug shows it
        said = f" {text!r}" if log.isEnabledFor(logging.DEBUG) else ""
        log.log(logging.INFO if result.intent else logging.DEBUG, "LLM%s → %s%s in %.2f s (%d tokens)%s",
                said, result.outcome.value, f" {result.intent.name}" if result.intent else "", result.elapsed_s,
                result.tokens, f": {result.problem}" if result.problem else "")
        return self._count(result)

    def _judge(self, generation: Generation, catalog: IntentCatalog, text: str) -> LlmAnswer:
        end = generation.end
        base = LlmAnswer(
            LlmOutcome.INVALID, raw=generation.text, tokens=len(generation.tokens), elapsed_s=generation.elapsed_s,
            prompt_tokens=end.prompt_tokens if end else 0, cached_tokens=end.cached_tokens if end else 0,
            prefill_s=end.prefill_s if end else 0.0,
            decode_s=end.decode_s if end else 0.0,
        )
        if generation.finish in _FROM_FINISH:
            return replace(base, outcome=_FROM_FINISH[generation.finish], problem=end.error if end else None)
        if generation.finish is Finish.MAX_TOKENS:
            return replace(base, problem=f"cut short at max_new_tokens = {self.config.max_new_tokens}")
        parsed = parse_answer(generation.text, catalog, text)
        if parsed.kind is AnswerKind.INTENT:
            return replace(base, outcome=LlmOutcome.INTENT, intent=parsed.intent)
        if parsed.kind is AnswerKind.NONE:
            return replace(base, outcome=LlmOutcome.NONE)
        return replace(base, problem=parsed.problem)

    def _count(self, answer: LlmAnswer) -> LlmAnswer:
        with self._counts_lock:
            self._counts[answer.outcome] += 1
        return answer
