"""Outgoing Hermes messages: what voiced publishes, as topic and JSON object.

The payloads are exactly what ``rhasspyhermes`` reads (camelCase keys, ``siteId`` and
``sessionId`` on everything); numbers must be finite.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from voiced.intents import Intent, SlotKind
from voiced.mqtt.hermes_topics import Topic, hotword_detected_topic, intent_topic, play_finished_topic

__all__ = [
    "AsrToken", "HermesMessage", "TerminationReason", "audio_play_error", "dialogue_intent_not_recognized",
    "hotword_detected", "intent_not_recognized",
    "nlu_intent", "partial_text_captured", "play_finished", "say_finished", "session_ended", "session_queued", "session_started",
    "text_captured", "tokens_from_text", "tts_error",
]


class TerminationReason(StrEnum):
    """Why a dialogue session ended (``termination.reason`` of sessionEnded)."""

    NOMINAL = "nominal"
    ABORTED_BY_USER = "abortedByUser"
    INTENT_NOT_RECOGNIZED = "intentNotRecognized"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class HermesMessage:
    """An outgoing message: its topic and its JSON object."""

    topic: str
    payload: Mapping[str, Any]

    def json(self) -> bytes:
        """The payload as compact UTF-8 JSON (NaN and infinities are refused)."""
        return json.dumps(self.payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


@dataclass(frozen=True)
class AsrToken:
    """One recognized word (Rhasspy's ``asrTokens`` entry)."""

    value: str
    confidence: float
    range_start: int
    """Index of the token's first character in the transcript."""
    range_end: int
    """Index just after its last character."""
    start_time: float | None = None
    """Stream time of the token's start, in seconds, when the recognizer knows it."""
    end_time: float | None = None

    def to_dict(self) -> dict[str, Any]:
        time = None
        if self.start_time is not None and self.end_time is not None:
            time = {"start": _seconds(self.start_time), "end": _seconds(self.end_time)}
        return {
            "value": self.value,
            "confidence": _num(self.confidence),
            "rangeStart": self.range_start,
            "rangeEnd": self.range_end,
            "time": time,
        }


def tokens_from_text(text: str, confidence: float = 1.0) -> list[AsrToken]:
    """One token per whitespace-separated word of ``text``, with its character range."""
    tokens, pos = [], 0
    for word in text.split():
        start = text.index(word, pos)
        pos = start + len(word)
        tokens.append(AsrToken(word, confidence, start, pos))
    return tokens


def _num(x: float) -> float:
    value = float(x)
    if not math.isfinite(value):
        raise ValueError(f"{x!r} is not a finite number")
    return value


def _seconds(x: float) -> float:
    """A time in seconds to the millisecond: sums of 10 ms frames are 1.5000000000000004 otherwise."""
    return round(_num(x), 3)


def _hypotheses(tokens: Sequence[AsrToken] | None, text: str, confidence: float) -> list[list[dict[str, Any]]]:
    # Rhasspy's asrTokens is a list of hypotheses, each a list of tokens; we have one.
    chosen = tokens if tokens is not None else tokens_from_text(text, confidence)
    return [[t.to_dict() for t in chosen]]


def text_captured(
    text: str,
    likelihood: float,
    seconds: float,
    site_id: str,
    session_id: str | None = None,
    wakeword_id: str | None = None,
    tokens: Sequence[AsrToken] | None = None,
    lang: str | None = None,
    from_templates: bool = False,
) -> HermesMessage:
    """``hermes/asr/textCaptured``: a final transcript. ``tokens`` default to the words of ``text``.
    ``fromTemplates`` (voiced's, beside Hermes' fields: readers ignore keys they do not know): the
    text is a template sentence chosen by template-aware decoding."""
    payload = {
        "text": text,
        "likelihood": _num(likelihood),
        "seconds": _seconds(seconds),
        "siteId": site_id,
        "sessionId": session_id,
        "wakewordId": wakeword_id,
        "asrTokens": _hypotheses(tokens, text, likelihood),
        "lang": lang,
        "fromTemplates": from_templates,
    }
    return HermesMessage(Topic.TEXT_CAPTURED, payload)


def partial_text_captured(
    text: str,
    likelihood: float,
    seconds: float,
    site_id: str,
    session_id: str | None = None,
    wakeword_id: str | None = None,
    tokens: Sequence[AsrToken] | None = None,
    lang: str | None = None,
    from_templates: bool = False,
) -> HermesMessage:
    """``hermes/asr/partialTextCaptured``: the transcript so far, with textCaptured's fields."""
    final = text_captured(text, likelihood, seconds, site_id, session_id, wakeword_id, tokens, lang, from_templates)
    return HermesMessage(Topic.PARTIAL_TEXT_CAPTURED, final.payload)


# Rhasspy's kinds: text values are "Unknown", numbers "Number".
_HERMES_KIND = {SlotKind.NUMBER: "Number"}


def nlu_intent(
    intent: Intent,
    site_id: str,
    session_id: str | None = None,
    request_id: str | None = None,
    custom_data: str | None = None,
    asr_tokens: Sequence[AsrToken] | None = None,
    asr_confidence: float | None = None,
    wakeword_id: str | None = None,
    lang: str | None = None,
) -> HermesMessage:
    """``hermes/intent/<intentName>`` for a recognized intent.

    ``request_id`` is the ``id`` of the nlu/query being answered, if any; ``asr_tokens``
    default to the words of the intent's text.
    """
    slots = []
    for s in intent.slots:
        span = None
        if s.start is not None and s.end is not None:
            span = {"start": s.start, "end": s.end, "rawStart": s.start, "rawEnd": s.end}
        slots.append(
            {
                "entity": s.entity,
                "slotName": s.name,
                "rawValue": s.raw_value,
                "value": {"kind": _HERMES_KIND.get(s.kind, "Unknown"), "value": s.value},
                "range": span,
                "confidence": _num(intent.confidence),
            }
        )
    payload = {
        "input": intent.text,
        "intent": {"intentName": intent.name, "confidenceScore": _num(intent.confidence)},
        "slots": slots,
        "siteId": site_id,
        "sessionId": session_id,
        "id": request_id,
        "customData": custom_data,
        "asrTokens": _hypotheses(asr_tokens, intent.text, 1.0 if asr_confidence is None else asr_confidence),
        "asrConfidence": None if asr_confidence is None else _num(asr_confidence),
        "rawInput": intent.text,
        "wakewordId": wakeword_id,
        "lang": lang,
    }
    return HermesMessage(intent_topic(intent.name), payload)


def intent_not_recognized(
    text: str,
    site_id: str,
    session_id: str | None = None,
    request_id: str | None = None,
    custom_data: str | None = None,
) -> HermesMessage:
    """``hermes/nlu/intentNotRecognized``."""
    payload = {"input": text, "siteId": site_id, "sessionId": session_id, "id": request_id, "customData": custom_data}
    return HermesMessage(Topic.INTENT_NOT_RECOGNIZED, payload)


def session_started(
    site_id: str, session_id: str, custom_data: str | None = None, lang: str | None = None
) -> HermesMessage:
    """``hermes/dialogueManager/sessionStarted``."""
    payload = {"siteId": site_id, "sessionId": session_id, "customData": custom_data, "lang": lang}
    return HermesMessage(Topic.SESSION_STARTED, payload)


def session_ended(
    site_id: str, session_id: str, reason: TerminationReason, custom_data: str | None = None
) -> HermesMessage:
    """``hermes/dialogueManager/sessionEnded`` with ``termination.reason``."""
    payload = {
        "termination": {"reason": TerminationReason(reason).value},
        "siteId": site_id,
        "sessionId": session_id,
        "customData": custom_data,
    }
    return HermesMessage(Topic.SESSION_ENDED, payload)


def hotword_detected(wakeword_id: str, site_id: str, session_id: str, score: float, sensitivity: float,
                     model_version: str = "") -> HermesMessage:
    """``hermes/hotword/<wakewordId>/detected`` (Rhasspy 2.5), with the detection's score as ``score``."""
    payload = {"modelId": wakeword_id, "modelVersion": model_version, "modelType": "universal",
               "currentSensitivity": sensitivity, "siteId": site_id, "sessionId": session_id,
               "sendAudioCaptured": None, "lang": None, "customEntities": None, "score": _num(score)}
    return HermesMessage(hotword_detected_topic(wakeword_id), payload)


def say_finished(site_id: str, request_id: str | None = None, session_id: str | None = None) -> HermesMessage:
    """``hermes/tts/sayFinished``: answers a tts/say, echoing its ``id``."""
    return HermesMessage(Topic.TTS_SAY_FINISHED, {"siteId": site_id, "id": request_id, "sessionId": session_id})


def play_finished(site_id: str, request_id: str | None = None, session_id: str | None = None) -> HermesMessage:
    """``hermes/audioServer/<siteId>/playFinished``: answers a playBytes, echoing its request id."""
    return HermesMessage(play_finished_topic(site_id), {"id": request_id, "siteId": site_id, "sessionId": session_id})


def tts_error(error: str, site_id: str, request_id: str | None = None, session_id: str | None = None) -> HermesMessage:
    """``hermes/error/tts``: a tts/say that could not be spoken (ahead of its sayFinished, as Rhasspy's
    TTS services send it), its ``id`` as ``context``."""
    return HermesMessage(Topic.TTS_ERROR, _error(error, site_id, request_id, session_id))


def audio_play_error(error: str, site_id: str, request_id: str | None = None,
                     session_id: str | None = None) -> HermesMessage:
    """``hermes/error/audioServer/play``: a playBytes that could not be played (ahead of its
    playFinished), its request id as ``context``."""
    return HermesMessage(Topic.AUDIO_PLAY_ERROR, _error(error, site_id, request_id, session_id))


def _error(error: str, site_id: str, context: str | None, session_id: str | None) -> dict[str, object]:
    return {"error": error, "siteId": site_id, "context": context, "sessionId": session_id}


def dialogue_intent_not_recognized(site_id: str, session_id: str, text: str,
                                   custom_data: str | None = None) -> HermesMessage:
    """``hermes/dialogueManager/intentNotRecognized``: a session whose app asked for it
    (``sendIntentNotRecognized``) heard an answer no intent matches, and stays open."""
    return HermesMessage(Topic.DIALOGUE_INTENT_NOT_RECOGNIZED,
                         {"sessionId": session_id, "siteId": site_id, "input": text, "customData": custom_data})


def session_queued(site_id: str, session_id: str, custom_data: str | None = None) -> HermesMessage:
    """``hermes/dialogueManager/sessionQueued``: an app's session waits for the one open to end."""
    return HermesMessage(Topic.SESSION_QUEUED, {"sessionId": session_id, "siteId": site_id, "customData": custom_data})
