"""The Hermes protocol of Rhasspy 2.5 / Snips: topics, outgoing payloads, incoming parsers.

One import for all of it; each part lives in its own module:

- :mod:`voiced.mqtt.hermes_topics` — fixed topics, per-intent and per-site topic names, sites.
- :mod:`voiced.mqtt.hermes_out` — builders of the messages voiced publishes, exactly what
  ``rhasspyhermes`` reads (camelCase keys, ``siteId`` and ``sessionId`` on everything).
- :mod:`voiced.mqtt.hermes_in` — parsers of the messages voiced reads: a payload that is
  not JSON, not an object, lacks a required field or has a field of the wrong type raises
  :class:`MalformedMessage` with the reason, and nothing else.
"""

from __future__ import annotations

from voiced.mqtt.hermes_in import (
    AsrToggle,
    ContinueSession,
    EndSession,
    MalformedMessage,
    NluQuery,
    ReplyAddress,
    SessionKind,
    StartListening,
    StartSession,
    StopListening,
    TtsSay,
    parse_continue_session,
    parse_end_session,
    parse_message,
    parse_nlu_query,
    parse_start_listening,
    parse_start_session,
    parse_stop_listening,
    parse_toggle,
    parse_tts_say,
    reply_address,
)
from voiced.mqtt.hermes_out import (
    AsrToken,
    HermesMessage,
    TerminationReason,
    audio_play_error,
    dialogue_intent_not_recognized,
    hotword_detected,
    intent_not_recognized,
    nlu_intent,
    partial_text_captured,
    play_finished,
    say_finished,
    session_ended,
    session_queued,
    session_started,
    text_captured,
    tokens_from_text,
    tts_error,
)
from voiced.mqtt.hermes_topics import (
    DEFAULT_SITE,
    Topic,
    audio_captured_topic,
    for_site,
    hotword_detected_topic,
    intent_name_from_topic,
    intent_topic,
    play_bytes_topic,
    play_finished_topic,
    site_and_request_from_play_bytes,
)

__all__ = [
    "DEFAULT_SITE", "AsrToggle", "AsrToken", "ContinueSession", "EndSession", "HermesMessage", "MalformedMessage", "NluQuery", "ReplyAddress", "StartListening",
    "SessionKind", "StartSession", "StopListening", "TerminationReason", "Topic", "TtsSay", "audio_captured_topic", "audio_play_error", "dialogue_intent_not_recognized", "for_site", "hotword_detected",
    "hotword_detected_topic", "intent_name_from_topic",
    "intent_not_recognized", "intent_topic", "nlu_intent", "parse_continue_session", "parse_end_session",
    "parse_message", "parse_start_session", "parse_nlu_query", "parse_start_listening",
    "parse_stop_listening", "parse_toggle", "parse_tts_say", "partial_text_captured", "play_bytes_topic",
    "play_finished", "play_finished_topic", "reply_address", "say_finished", "session_ended", "session_queued", "session_started",
    "site_and_request_from_play_bytes", "text_captured", "tokens_from_text", "tts_error",
]
