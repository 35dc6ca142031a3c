"""Hermes addressing: the fixed topics, per-intent and per-site topic names, and sites.

Shared by :mod:`voiced.mqtt.hermes_out` (what voiced publishes) and
:mod:`voiced.mqtt.hermes_in` (what it reads); import them all from :mod:`voiced.mqtt.hermes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

__all__ = [
    "DEFAULT_SITE", "Topic", "audio_captured_topic", "for_site", "hotword_detected_topic", "intent_name_from_topic",
    "intent_topic", "play_bytes_topic", "play_finished_topic", "site_and_request_from_play_bytes",
]

DEFAULT_SITE = "default"
"""The siteId Hermes assumes when a message has none."""


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
    START_SESSION = "hermes/dialogueManager/startSession"
    CONTINUE_SESSION = "hermes/dialogueManager/continueSession"
    END_SESSION = "hermes/dialogueManager/endSession"
    DIALOGUE_INTENT_NOT_RECOGNIZED = "hermes/dialogueManager/intentNotRecognized"
    SESSION_QUEUED = "hermes/dialogueManager/sessionQueued"
    TTS_SAY = "hermes/tts/say"
    TTS_SAY_FINISHED = "hermes/tts/sayFinished"
    PLAY_BYTES_ALL = "hermes/audioServer/+/playBytes/+"
    HOTWORD_TOGGLE_ON = "hermes/hotword/toggleOn"
    HOTWORD_TOGGLE_OFF = "hermes/hotword/toggleOff"
    FEEDBACK_SOUND_TOGGLE_ON = "hermes/feedback/sound/toggleOn"
    FEEDBACK_SOUND_TOGGLE_OFF = "hermes/feedback/sound/toggleOff"
    TTS_ERROR = "hermes/error/tts"
    AUDIO_PLAY_ERROR = "hermes/error/audioServer/play"


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


def hotword_detected_topic(wakeword_id: str) -> str:
    """``hermes/hotword/<wakewordId>/detected``."""
    return f"hermes/hotword/{_topic_level(wakeword_id, 'wakewordId')}/detected"


def play_bytes_topic(site_id: str, request_id: str) -> str:
    """``hermes/audioServer/<siteId>/playBytes/<requestId>`` (payload: WAV bytes)."""
    return f"{_AUDIO_PREFIX}{_topic_level(site_id, 'site id')}/playBytes/{_topic_level(request_id, 'request id')}"


def audio_captured_topic(site_id: str, session_id: str) -> str:
    """``rhasspy/asr/<siteId>/<sessionId>/audioCaptured`` (payload: WAV bytes; Rhasspy's, not Snips')."""
    return f"rhasspy/asr/{_topic_level(site_id, 'site id')}/{_topic_level(session_id, 'session id')}/audioCaptured"


def play_finished_topic(site_id: str) -> str:
    """``hermes/audioServer/<siteId>/playFinished``."""
    return f"{_AUDIO_PREFIX}{_topic_level(site_id, 'site id')}/playFinished"


def site_and_request_from_play_bytes(topic: str) -> tuple[str, str] | None:
    """(siteId, requestId) of a playBytes topic, else None."""
    parts = topic.split("/")
    if len(parts) == 5 and parts[0:2] == ["hermes", "audioServer"] and parts[3] == "playBytes":
        return parts[2], parts[4]
    return None


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
