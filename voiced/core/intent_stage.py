"""The intent stage's work: text → intent (hassil templates → local LLM → cloud) → an intent event."""

from __future__ import annotations

from collections.abc import Callable

from voiced.core.events import CoreEvent, IntentNotRecognized, IntentRecognized, SessionEnded, SessionReason, Utterance
from voiced.core.models import Models
from voiced.intents import Intent
from voiced.stages import Counters

__all__ = ["IntentStage"]


class IntentStage:
    def __init__(self, models: Models, counters: Counters, emit: Callable[[CoreEvent], None]) -> None:
        self.models = models
        self.counters = counters
        self._emit = emit

    def recognize(self, utt: Utterance) -> None:
        """Templates, then the local LLM, then (only if reachable) the cloud; the answer is an event."""
        m = self.models
        intent = m.intents.recognize(utt.text)
        if intent is not None and utt.intent_filter is not None and intent.name not in utt.intent_filter:
            intent = None
        if intent is None and m.llm is not None:
            # bounded by llm.time_budget_s; whatever the model says is validated against the schema
            intent = m.llm.recognize(utt.text, intent_filter=utt.intent_filter)
            self.counters.add("llm_intents" if intent is not None else "llm_misses")
        if m.cloud.should_use_cloud_intent(intent):
            # The answer comes on a cloud thread within the cloud's budget; this stage moves on.
            m.cloud.submit_intent(utt.text, lambda r: self._publish_intent(utt, r.value if r.ok else intent),
                                  intent_filter=utt.intent_filter)
            return
        self._publish_intent(utt, intent)

    def _publish_intent(self, utt: Utterance, intent: Intent | None) -> None:
        if intent is None:
            self.counters.add("intents_not_recognized")
            self._emit(IntentNotRecognized(utt))
            if utt.from_speech and utt.session_id is not None:
                self._emit(SessionEnded(utt.session_id, SessionReason.INTENT_NOT_RECOGNIZED))
            return
        self.counters.add("intents")
        self._emit(IntentRecognized(utt, intent))
        if utt.from_speech and utt.session_id is not None:
            self._emit(SessionEnded(utt.session_id, SessionReason.NOMINAL))

