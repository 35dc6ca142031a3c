"""The intent stage's work: text → intent (hassil templates → local LLM → cloud) → an intent event."""

from __future__ import annotations

import logging
import queue
import time
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
    """Text → intent event. Template matches are answered at once; the LLM's turns wait in a lane of
    their own (``use_llm_lane``, the daemon's ``llm`` stage), so a command the templates know is never
    held up by another one the LLM is thinking about (a stuck LLM held every command up 3 s each)."""

    def __init__(self, models: Models, counters: Counters, emit: Callable[[CoreEvent], None]) -> None:
        self.models = models
        self.counters = counters
        self._emit = emit
        self._llm_lane: queue.SimpleQueue[tuple[Utterance, float]] | None = None

    def use_llm_lane(self) -> None:
        """From now on the LLM's turns are taken by :meth:`llm_turn` on another thread."""
        self._llm_lane = queue.SimpleQueue()

    def recognize(self, utt: Utterance) -> None:
        """Templates, then the local LLM, then (only if reachable) the cloud; the answer is an event."""
        self._guarded(utt, lambda: self._recognize(utt))

    def llm_turn(self, timeout: float) -> bool:
        """Answer the next text waiting for the LLM (at most ``timeout`` s waited for one); False if none came."""
        assert self._llm_lane is not None, "use_llm_lane() first"
        try:
            utt, queued_at = self._llm_lane.get(timeout=timeout)
        except queue.Empty:
            return False
        self._guarded(utt, lambda: self._ask_llm(utt, queued_at))
        return True

    def _guarded(self, utt: Utterance, step: Callable[[], None]) -> None:
        """Text that trips the matcher is answered as not recognized: input from outside must not stop
        the stage (six failures in five minutes stop the daemon)."""
        try:
            step()
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
            if self._llm_lane is not None:
                self._llm_lane.put((utt, time.monotonic()))
                return
            self._ask_llm(utt, time.monotonic())
            return
        self._local_answer(utt, intent)

    def _ask_llm(self, utt: Utterance, since: float) -> None:
        """The LLM within what is left of ``llm.time_budget_s`` since ``since`` (a text that waited its
        whole budget behind others is not asked: it is answered now, as the budget promises)."""
        llm = self.models.llm
        assert llm is not None
        left = llm.config.time_budget_s - (time.monotonic() - since)
        if left > 0:
            # whatever the model says is validated against the schema
            intent = llm.recognize(utt.text, budget_s=left, intent_filter=utt.intent_filter)
            self.counters.add("llm_intents" if intent is not None else "llm_misses")
        else:
            intent = None
            self.counters.add("llm_too_late")
        self._local_answer(utt, intent)

    def _local_answer(self, utt: Utterance, intent: Intent | None) -> None:
        """Publish what the device found, or hand the text to the cloud when it is reachable."""
        m = self.models
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
