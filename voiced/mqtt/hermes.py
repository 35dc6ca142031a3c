"""The Hermes protocol of Rhasspy 2.5 / Snips: topics, outgoing payloads, incoming parsers.

Outgoing payloads are exactly what ``rhasspyhermes`` reads (camelCase keys, ``siteId``
and ``sessionId`` on everything). Incoming payloads are checked field by field: a
payload that is not JSON, not an object, lacks a required field or has a field of the
wrong type raises :class:`MalformedMessage` with the reason, and nothing else.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from voiced.errors import VoicedError
from voiced.intents import Intent, SlotKind

__all__ = [
    "AsrToggle", "AsrToken", "HermesMessage", "MalformedMessage", "NluQuery", "StartListening", "StopListening",
    "TerminationReason", "Topic", "TtsSay", "for_site", "intent_name_from_topic", "intent_not_recognized",
    "intent_topic", "nlu_intent", "parse_message", "parse_nlu_query", "parse_start_listening", "parse_stop_listening",
    "parse_toggle", "parse_tts_say", "partial_text_captured", "play_bytes_topic", "play_finished",
    "play_finished_topic", "say_finished", "session_ended", "session_started", "site_and_request_from_play_bytes",
    "text_captured", "tokens_from_text",
]

DEFAULT_SITE = "default"
"""The siteId Hermes assumes when a message has none."""


class MalformedMessage(VoicedError):
    """An incoming payload is not a valid message of its topic; the message says why."""


class Topic(StrEnum):
    """Fixed Hermes topics (per-intent and per-site topics have helpers below)."""

    TEXT_CAPTURED = "hermes/asr/textCaptured"
    PARTIAL_TEXT_CAPTURED = "hermes/asr/partialTextCaptured"
    START_LISTENING = "hermes/asr/startListening"
    STOP_LISTENING = "hermes/asr/stopListening"
    ASR_TOGGLE_ON = "hermes/asr/toggleOn"
    ASR_TOGGLE_OFF = "hermes/asr/toggleOff"
    NLU_QUERY = "hermes/nlu/query"
    INTENT_NOT_RECOGNIZED = "hermes/nlu/intentNotRecognized"
    INTENT_ALL = "hermes/intent/#"
    SESSION_STARTED = "hermes/dialogueManager/sessionStarted"
    SESSION_ENDED = "hermes/dialogueManager/sessionEnded"
    TTS_SAY = "hermes/tts/say"
    TTS_SAY_FINISHED = "hermes/tts/sayFinished"
    PLAY_BYTES_ALL = "hermes/audioServer/+/playBytes/+"


class TerminationReason(StrEnum):
    """Why a dialogue session ended (``termination.reason`` of sessionEnded)."""

    NOMINAL = "nominal"
    ABORTED_BY_USER = "abortedByUser"
    INTENT_NOT_RECOGNIZED = "intentNotRecognized"
    TIMEOUT = "timeout"
    ERROR = "error"


_INTENT_PREFIX = "hermes/intent/"
_AUDIO_PREFIX = "hermes/audioServer/"
_TOPIC_RESERVED = frozenset("/+#\0")


def _topic_level(value: str, what: str) -> str:
    if not value or _TOPIC_RESERVED & set(value):
        raise ValueError(f"{what} {value!r} cannot be one MQTT topic level")
    return value


def intent_topic(intent_name: str) -> str:
    """``hermes/intent/<intentName>``."""
    return _INTENT_PREFIX + _topic_level(intent_name, "intent name")


def intent_name_from_topic(topic: str) -> str | None:
    """The intent name of a ``hermes/intent/<intentName>`` topic, else None."""
    name = topic[len(_INTENT_PREFIX) :] if topic.startswith(_INTENT_PREFIX) else ""
    return name if name and "/" not in name else None


def play_bytes_topic(site_id: str, request_id: str) -> str:
    """``hermes/audioServer/<siteId>/playBytes/<requestId>`` (payload: WAV bytes)."""
    return f"{_AUDIO_PREFIX}{_topic_level(site_id, 'site id')}/playBytes/{_topic_level(request_id, 'request id')}"


def play_finished_topic(site_id: str) -> str:
    """``hermes/audioServer/<siteId>/playFinished``."""
    return f"{_AUDIO_PREFIX}{_topic_level(site_id, 'site id')}/playFinished"


def site_and_request_from_play_bytes(topic: str) -> tuple[str, str] | None:
    """(siteId, requestId) of a playBytes topic, else None."""
    parts = topic.split("/")
    if len(parts) == 5 and parts[0:2] == ["hermes", "audioServer"] and parts[3] == "playBytes":
        return parts[2], parts[4]
    return None


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
            time = {"start": _num(self.start_time), "end": _num(self.end_time)}
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
) -> HermesMessage:
    """``hermes/asr/textCaptured``: a final transcript. ``tokens`` default to the words of ``text``."""
    payload = {
        "text": text,
        "likelihood": _num(likelihood),
        "seconds": _num(seconds),
        "siteId": site_id,
        "sessionId": session_id,
        "wakewordId": wakeword_id,
        "asrTokens": _hypotheses(tokens, text, likelihood),
        "lang": lang,
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
) -> HermesMessage:
    """``hermes/asr/partialTextCaptured``: the transcript so far, with textCaptured's fields."""
    final = text_captured(text, likelihood, seconds, site_id, session_id, wakeword_id, tokens, lang)
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


def say_finished(site_id: str, request_id: str | None = None, session_id: str | None = None) -> HermesMessage:
    """``hermes/tts/sayFinished``: answers a tts/say, echoing its ``id``."""
    return HermesMessage(Topic.TTS_SAY_FINISHED, {"siteId": site_id, "id": request_id, "sessionId": session_id})


def play_finished(site_id: str, request_id: str | None = None, session_id: str | None = None) -> HermesMessage:
    """``hermes/audioServer/<siteId>/playFinished``: answers a playBytes, echoing its request id."""
    return HermesMessage(play_finished_topic(site_id), {"id": request_id, "siteId": site_id, "sessionId": session_id})


# ---------------------------------------------------------------------------- incoming


@dataclass(frozen=True)
class NluQuery:
    """``hermes/nlu/query``: recognize an intent from text."""

    input: str
    site_id: str = DEFAULT_SITE
    session_id: str | None = None
    id: str | None = None
    intent_filter: tuple[str, ...] | None = None
    """Only these intents may be recognized (None: all)."""
    wakeword_id: str | None = None
    lang: str | None = None
    custom_data: str | None = None
    asr_confidence: float | None = None


@dataclass(frozen=True)
class StartListening:
    """``hermes/asr/startListening``."""

    site_id: str = DEFAULT_SITE
    session_id: str | None = None
    stop_on_silence: bool = True
    send_audio_captured: bool = False
    wakeword_id: str | None = None
    intent_filter: tuple[str, ...] | None = None
    lang: str | None = None


@dataclass(frozen=True)
class StopListening:
    """``hermes/asr/stopListening``."""

    site_id: str = DEFAULT_SITE
    session_id: str | None = None


@dataclass(frozen=True)
class AsrToggle:
    """``hermes/asr/toggleOn`` (enabled) or ``toggleOff``."""

    enabled: bool
    site_id: str = DEFAULT_SITE
    reason: str = ""


@dataclass(frozen=True)
class TtsSay:
    """``hermes/tts/say``: speak ``text``, then answer with sayFinished."""

    text: str
    site_id: str = DEFAULT_SITE
    id: str | None = None
    session_id: str | None = None
    lang: str | None = None
    volume: float | None = None
    """Playback volume in [0, 1], if given."""


class _Reader:
    """Typed access to the fields of one JSON object, raising MalformedMessage."""

    def __init__(self, payload: bytes | str) -> None:
        try:
            text = payload.decode("utf-8") if isinstance(payload, (bytes, bytearray)) else payload
            obj = json.loads(text)
        except UnicodeDecodeError:
            raise MalformedMessage("payload is not UTF-8") from None
        except ValueError as exc:
            raise MalformedMessage(f"payload is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise MalformedMessage(f"payload is a JSON {type(obj).__name__}, not an object")
        self.obj: dict[str, Any] = obj

    def _get(self, key: str, required: bool) -> Any:
        value = self.obj.get(key)  # null counts as absent: rhasspyhermes writes null for unset fields
        if value is None and required:
            raise MalformedMessage(f"required field {key!r} is missing")
        return value

    def text(self, key: str, required: bool = False, default: str | None = None) -> Any:
        value = self._get(key, required)
        if value is None:
            return default
        if not isinstance(value, str):
            raise MalformedMessage(f"field {key!r} must be a string, got {type(value).__name__}")
        return value

    def number(self, key: str) -> float | None:
        value = self._get(key, False)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise MalformedMessage(f"field {key!r} must be a number, got {value!r}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise MalformedMessage(f"field {key!r} must be true or false, got {value!r}")
        return value

    def texts(self, key: str) -> tuple[str, ...] | None:
        value = self._get(key, False)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise MalformedMessage(f"field {key!r} must be a list of strings, got {value!r}")
        return tuple(value)

    def site(self) -> str:
        return str(self.text("siteId", default=DEFAULT_SITE))


def parse_nlu_query(payload: bytes | str) -> NluQuery:
    """Parse ``hermes/nlu/query`` (``input`` required)."""
    r = _Reader(payload)
    return NluQuery(
        input=r.text("input", required=True),
        site_id=r.site(),
        session_id=r.text("sessionId"),
        id=r.text("id"),
        intent_filter=r.texts("intentFilter"),
        wakeword_id=r.text("wakewordId"),
        lang=r.text("lang"),
        custom_data=r.text("customData"),
        asr_confidence=r.number("asrConfidence"),
    )


def parse_start_listening(payload: bytes | str) -> StartListening:
    """Parse ``hermes/asr/startListening``."""
    r = _Reader(payload)
    return StartListening(
        site_id=r.site(),
        session_id=r.text("sessionId"),
        stop_on_silence=r.flag("stopOnSilence", True),
        send_audio_captured=r.flag("sendAudioCaptured", False),
        wakeword_id=r.text("wakewordId"),
        intent_filter=r.texts("intentFilter"),
        lang=r.text("lang"),
    )


def parse_stop_listening(payload: bytes | str) -> StopListening:
    """Parse ``hermes/asr/stopListening``."""
    r = _Reader(payload)
    return StopListening(site_id=r.site(), session_id=r.text("sessionId"))


def parse_toggle(payload: bytes | str, enabled: bool) -> AsrToggle:
    """Parse ``hermes/asr/toggleOn`` (``enabled=True``) or ``toggleOff``."""
    r = _Reader(payload)
    return AsrToggle(enabled=enabled, site_id=r.site(), reason=r.text("reason", default=""))


def parse_tts_say(payload: bytes | str) -> TtsSay:
    """Parse ``hermes/tts/say`` (``text`` required; ``volume`` within [0, 1])."""
    r = _Reader(payload)
    volume = r.number("volume")
    if volume is not None and not 0.0 <= volume <= 1.0:
        raise MalformedMessage(f"field 'volume' must be within [0, 1], got {volume}")
    return TtsSay(
        text=r.text("text", required=True),
        site_id=r.site(),
        id=r.text("id"),
        session_id=r.text("sessionId"),
        lang=r.text("lang"),
        volume=volume,
    )


_PARSERS: dict[str, Callable[[bytes | str], object]] = {
    Topic.NLU_QUERY: parse_nlu_query,
    Topic.START_LISTENING: parse_start_listening,
    Topic.STOP_LISTENING: parse_stop_listening,
    Topic.ASR_TOGGLE_ON: lambda p: parse_toggle(p, True),
    Topic.ASR_TOGGLE_OFF: lambda p: parse_toggle(p, False),
    Topic.TTS_SAY: parse_tts_say,
}


def parse_message(topic: str, payload: bytes | str) -> NluQuery | StartListening | StopListening | AsrToggle | TtsSay:
    """Parse an incoming message by its topic; MalformedMessage for a topic voiced does not read."""
    parser = _PARSERS.get(topic)
    if parser is None:
        raise MalformedMessage(f"no Hermes message voiced reads is published on {topic!r}")
    return parser(payload)  # type: ignore[return-value]


def for_site(message: Mapping[str, Any] | object, site_id: str) -> bool:
    """True when ``message`` (a payload object or a parsed message) is for ``site_id``.

    A message without a siteId is for the ``default`` site, as in Hermes; messages for
    other sites are to be ignored.
    """
    if isinstance(message, Mapping):
        target = message.get("siteId")
        target = DEFAULT_SITE if target is None else target
    else:
        target = getattr(message, "site_id", DEFAULT_SITE)
    return target == site_id
