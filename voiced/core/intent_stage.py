"""The intent stage's work: text → intent (hassil templates → local LLM → cloud) → an intent event."""

from __future__ import annotations

import logging
from collections.abc import Callable

from voiced.core.events import CoreEvent, IntentNotRecognized, IntentRecognized, SessionEnded, SessionReason, Utterance
from voiced.core.models import Models
from voiced.intents import Intent
from voiced.runtime.lograte import sparse_level
from voiced.stages import Counters

__all__ = ["IntentStage"]

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 1_000
"""Longer texts are answered as not recognized, unmatched: a wildcard template's cost grows with the
square of the text (48 kB: 10 s of CPU and a stalled stage), and its intent would outgrow an MQTT
message. Spoken commands and shopping lists are a few hundred characters at most."""


class IntentStage:
    def __init__(self, models: Models, counters: Counters, emit: Callable[[CoreEvent], None]) -> None:
        self.models = models
        self.counters = counters
        self._emit = emit

    def recognize(self, utt: Utterance) -> None:
        """Templates, then the local LLM, then (only if reachable) the cloud; the answer is an event.
        Text that trips the matcher is answered as not recognized: input from outside must not stop
        the stage (six failures in five minutes stop the daemon)."""
        try:
            self._recognize(utt)
        except Exception:  # noqa: BLE001 - hassil and the LLM raise assorted types on odd templates and text
            self.counters.add("intent_errors")
            n = self.counters.get("intent_errors")
            log.log(sparse_level(n, first=10), "recognizing %r failed (%d so far); answered as not recognized",
                    utt.text[:80], n, exc_info=True)
            self._publish_intent(utt, None)

    def _recognize(self, utt: Utterance) -> None:
        if len(utt.text) > MAX_TEXT_CHARS:
            self.counters.add("intent_texts_too_long")
            log.warning("a text of %d characters is no command (at most %d): answered as not recognized",
                        len(utt.text), MAX_TEXT_CHARS)
            self._publish_intent(utt, None)
            return
        m = self.models
        intent = m.intents.recognize(utt.text, only=utt.intent_filter)
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

