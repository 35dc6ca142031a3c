"""Incoming Hermes messages: the payloads voiced reads, parsed into frozen dataclasses.

Payloads are checked field by field: a payload that is not JSON, not an object, lacks a
required field or has a field of the wrong type raises :class:`MalformedMessage` with
the reason, and nothing else.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from voiced.errors import VoicedError
from voiced.mqtt.hermes_topics import DEFAULT_SITE, Topic

__all__ = [
    "AsrToggle", "ContinueSession", "EndSession", "MalformedMessage", "NluQuery", "ReplyAddress", "SessionKind",
    "StartListening", "StartSession", "StopListening", "TtsSay", "parse_continue_session", "parse_end_session",
    "parse_message", "parse_nlu_query", "parse_start_listening", "parse_start_session", "parse_stop_listening",
    "parse_toggle", "parse_tts_say", "reply_address",
]


class MalformedMessage(VoicedError):
    """An incoming payload is not a valid message of its topic; the message says why."""


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


class SessionKind(StrEnum):
    """``init.type`` of a startSession (rhasspyhermes ``DialogueActionType``)."""

    ACTION = "action"
    """Say ``text``, then listen for an intent."""
    NOTIFICATION = "notification"
    """Say ``text``; the session ends there."""


@dataclass(frozen=True)
class StartSession:
    """``hermes/dialogueManager/startSession``: a session an app begins (an announcement, a question)."""

    kind: SessionKind
    text: str | None = None
    site_id: str = DEFAULT_SITE
    intent_filter: tuple[str, ...] | None = None
    custom_data: str | None = None
    lang: str | None = None
    send_intent_not_recognized: bool = False
    """An answer no intent matches is told on dialogueManager/intentNotRecognized, the session kept open."""
    can_be_enqueued: bool = False
    """An action that comes while another session is open waits for it (sessionQueued); else it is dropped."""


@dataclass(frozen=True)
class ContinueSession:
    """``hermes/dialogueManager/continueSession``: say ``text``, then hear the session's next turn."""

    session_id: str
    text: str | None = None
    intent_filter: tuple[str, ...] | None = None
    custom_data: str | None = None
    lang: str | None = None
    send_intent_not_recognized: bool = False


@dataclass(frozen=True)
class EndSession:
    """``hermes/dialogueManager/endSession``: the app's last word in a session (``text`` is said)."""

    session_id: str
    text: str | None = None
    custom_data: str | None = None


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
    """Playback volume in [0, 1] (clamped), if given."""


@dataclass(frozen=True)
class ReplyAddress:
    """Who a request that could not be parsed came from: enough to answer it, so that its sender
    (a dialogue manager waiting for ``sayFinished``, an automation for its intent) does not wait
    for a timeout."""

    site_id: str
    id: str | None
    session_id: str | None
    custom_data: str | None


def reply_address(payload: bytes | str) -> ReplyAddress | None:
    """The ``siteId``, ``id``, ``sessionId`` and ``customData`` of a malformed request, when it is a
    JSON object whose ``siteId`` and ``id`` are strings (absent: the default site, None); else None.
    A ``sessionId`` or ``customData`` that is no string (maybe the very error) is left out of the
    answer rather than leaving the sender without one."""
    try:
        r = _Reader(payload)
        site, request_id = r.site(), r.text("id")
    except MalformedMessage:
        return None
    session, custom = (r.obj.get(key) for key in ("sessionId", "customData"))
    return ReplyAddress(site, request_id, session if isinstance(session, str) else None,
                        custom if isinstance(custom, str) else None)


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
        except RecursionError:  # [[[[… deep enough to exhaust the parser's stack (found by fuzzing)
            raise MalformedMessage("payload is nested too deeply") from None
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

    def object(self, key: str, required: bool = False) -> str:
        """The JSON object at ``key``, as text for a reader of its own ("{}" when absent)."""
        value = self._get(key, required)
        if value is None:
            return "{}"
        if not isinstance(value, dict):
            raise MalformedMessage(f"field {key!r} must be an object, got {type(value).__name__}")
        return json.dumps(value)

    def texts(self, key: str) -> tuple[str, ...] | None:
        value = self._get(key, False)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise MalformedMessage(f"field {key!r} must be a list of strings, got {value!r}")
        return tuple(value)

    def site(self) -> str:
        return str(self.text("siteId", default=DEFAULT_SITE))

    def intent_filter(self) -> tuple[str, ...] | None:
        """``intentFilter``; an empty list filters nothing, as in Rhasspy's NLU (``if query.intent_filter``)."""
        return self.texts("intentFilter") or None


def parse_nlu_query(payload: bytes | str) -> NluQuery:
    """Parse ``hermes/nlu/query`` (``input`` required)."""
    r = _Reader(payload)
    return NluQuery(
        input=r.text("input", required=True),
        site_id=r.site(),
        session_id=r.text("sessionId"),
        id=r.text("id"),
        intent_filter=r.intent_filter(),
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
        intent_filter=r.intent_filter(),
        lang=r.text("lang"),
    )


def parse_start_session(payload: bytes | str) -> StartSession:
    """Parse ``hermes/dialogueManager/startSession`` (``init`` required, with its ``type``)."""
    r = _Reader(payload)
    init = _Reader(r.object("init", required=True))
    kind = init.text("type", required=True)
    if kind not in tuple(SessionKind):
        raise MalformedMessage(f"init.type must be one of {', '.join(SessionKind)}, got {kind!r}")
    return StartSession(kind=SessionKind(kind), text=init.text("text"), site_id=r.site(),
                        intent_filter=init.intent_filter(), custom_data=r.text("customData"), lang=r.text("lang"),
                        send_intent_not_recognized=init.flag("sendIntentNotRecognized", False),
                        can_be_enqueued=init.flag("canBeEnqueued", False))


def parse_continue_session(payload: bytes | str) -> ContinueSession:
    """Parse ``hermes/dialogueManager/continueSession`` (``sessionId`` required)."""
    r = _Reader(payload)
    return ContinueSession(session_id=r.text("sessionId", required=True), text=r.text("text"),
                           intent_filter=r.intent_filter(), custom_data=r.text("customData"), lang=r.text("lang"),
                           send_intent_not_recognized=r.flag("sendIntentNotRecognized", False))


def parse_end_session(payload: bytes | str) -> EndSession:
    """Parse ``hermes/dialogueManager/endSession`` (``sessionId`` required)."""
    r = _Reader(payload)
    return EndSession(session_id=r.text("sessionId", required=True), text=r.text("text"),
                      custom_data=r.text("customData"))


def parse_stop_listening(payload: bytes | str) -> StopListening:
    """Parse ``hermes/asr/stopListening``."""
    r = _Reader(payload)
    return StopListening(site_id=r.site(), session_id=r.text("sessionId"))


def parse_toggle(payload: bytes | str, enabled: bool) -> AsrToggle:
    """Parse ``hermes/asr/toggleOn`` (``enabled=True``) or ``toggleOff``."""
    r = _Reader(payload)
    return AsrToggle(enabled=enabled, site_id=r.site(), reason=r.text("reason", default=""))


def parse_tts_say(payload: bytes | str) -> TtsSay:
    """Parse ``hermes/tts/say`` (``text`` required; ``volume`` clamped to [0, 1]: rhasspyhermes
    types it as a plain number, and "speak louder than full" is still a request to speak)."""
    r = _Reader(payload)
    volume = r.number("volume")
    if volume is not None:
        volume = min(1.0, max(0.0, volume))
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
    Topic.START_SESSION: parse_start_session,
    Topic.CONTINUE_SESSION: parse_continue_session,
    Topic.END_SESSION: parse_end_session,
}


def parse_message(topic: str, payload: bytes | str) -> object:
    """Parse an incoming message by its topic; MalformedMessage for a topic voiced does not read."""
    parser = _PARSERS.get(topic)
    if parser is None:
        raise MalformedMessage(f"no Hermes message voiced reads is published on {topic!r}")
    return parser(payload)  # type: ignore[return-value]
