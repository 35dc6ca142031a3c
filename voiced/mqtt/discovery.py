"""Home Assistant MQTT discovery: the daemon appears in HA as one device.

Entities, all with the daemon's availability topic:

- ``event`` *intent*: fires once per recognized intent; ``event_types`` are the intent names.
- ``sensor`` *transcript*: the last transcript (HA keeps at most 255 characters of state;
  the full text and details are in the JSON attributes).
- ``binary_sensor`` *listening* and *speaking*.
- ``switch`` *microphone* (off: nothing is heard; kept across restarts), with a speaker
  ``number`` *volume* (0-100 %), with wake words ``select`` *wake word sensitivity*
  (``voiced.wake.sensitivity``): set from HA on ``…/set``, their state published back.
- ``notify`` *speak*, with a voice: HA's ``notify.send_message`` says the message aloud.
- ``button`` *stop speaking*, with a speaker: ends what is being said and what is queued.

Configs are retained under ``<prefix>/<component>/<node>/<object>/config`` and published
again on every connection and whenever HA announces itself (``online`` on
``<prefix>/status``), so HA restarts and broker restarts without persistence both heal.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from voiced.errors import ConfigError
from voiced.intents import Intent
from voiced.mqtt.client import MqttClient
from voiced.wake.sensitivity import Sensitivity

__all__ = [
    "Component",
    "Discovery",
    "DiscoveryConfig",
    "BUTTON_PRESS",
    "DiscoveryMessage",
    "SWITCH_OFF",
    "SWITCH_ON",
    "StateTopics",
    "discovery_messages",
    "intent_event",
    "node_id_for",
    "state_topics",
    "transcript_state",
]

log = logging.getLogger(__name__)

STATE_MAX_CHARS = 255
"""Home Assistant rejects longer entity states."""
SWITCH_ON = "ON"
SWITCH_OFF = "OFF"
BUTTON_PRESS = "PRESS"


class Component(StrEnum):
    """The HA entity platforms voiced announces."""

    EVENT = "event"
    SENSOR = "sensor"
    BINARY_SENSOR = "binary_sensor"
    SWITCH = "switch"
    NUMBER = "number"
    NOTIFY = "notify"
    BUTTON = "button"
    SELECT = "select"


@dataclass(frozen=True)
class DiscoveryConfig:
    """How voiced announces itself to Home Assistant."""

    site_id: str
    """The Hermes siteId; names the device and, sanitized, its node id."""
    availability_topic: str
    """The client's availability topic (``online`` / ``offline``)."""
    prefix: str = "homeassistant"
    """HA's discovery prefix (HA's default)."""
    base_topic: str = "voiced"
    """Entity state topics live under ``<base_topic>/<node>/``."""
    device_name: str = ""
    """Device name shown in HA; empty: ``voiced <site_id>``."""
    sw_version: str = ""
    """Software version shown in HA, if any."""
    suggested_area: str = ""
    """The area HA puts the device in when it first sees it, if any."""

    def __post_init__(self) -> None:
        if not self.site_id:
            raise ConfigError("site_id", "must not be empty")
        for key in ("prefix", "base_topic", "availability_topic"):
            value = getattr(self, key)
            if not value or set("+#\0") & set(value):
                raise ConfigError(f"discovery.{key}", f"must be a topic without wildcards, got {value!r}")

    @property
    def node_id(self) -> str:
        return node_id_for(self.site_id)


def node_id_for(site_id: str) -> str:
    """The site id reduced to what HA accepts in a discovery topic: ``[a-zA-Z0-9_-]``."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", site_id)


@dataclass(frozen=True)
class StateTopics:
    """Where the pipeline publishes what the entities show."""

    intent: str
    """JSON ``{"event_type": <intent name>, ...slot values...}`` per recognized intent."""
    transcript: str
    """Plain text, at most 255 characters (see :func:`transcript_state`)."""
    transcript_attributes: str
    """JSON object with the full text and details."""
    listening: str
    """``ON`` / ``OFF``."""
    speaking: str
    """``ON`` / ``OFF``."""
    wake: str
    """JSON ``{"event_type": <wake word>, "score": …, "session_id": …}`` per detection."""
    microphone: str
    """``ON`` / ``OFF``: the microphone switch."""
    microphone_set: str
    """HA sets the switch here (``ON`` / ``OFF``)."""
    volume: str
    """The volume in percent (``55``)."""
    volume_set: str
    """HA sets the volume here, in percent."""
    wake_sensitivity: str
    """The wake word sensitivity's level (``Moderately sensitive``)."""
    wake_sensitivity_set: str
    """HA sets the level here."""
    say: str
    """HA's notify messages, plain UTF-8 text to speak."""
    stop: str
    """HA's button presses (``PRESS``): stop speaking."""


def state_topics(config: DiscoveryConfig) -> StateTopics:
    base = f"{config.base_topic}/{config.node_id}"
    return StateTopics(
        intent=f"{base}/intent",
        transcript=f"{base}/transcript",
        transcript_attributes=f"{base}/transcript/attributes",
        listening=f"{base}/listening",
        speaking=f"{base}/speaking",
        wake=f"{base}/wake",
        microphone=f"{base}/microphone",
        microphone_set=f"{base}/microphone/set",
        volume=f"{base}/volume",
        volume_set=f"{base}/volume/set",
        wake_sensitivity=f"{base}/wake_sensitivity",
        wake_sensitivity_set=f"{base}/wake_sensitivity/set",
        say=f"{base}/say",
        stop=f"{base}/stop",
    )


@dataclass(frozen=True)
class DiscoveryMessage:
    """One retained discovery config."""

    topic: str
    config: Mapping[str, Any]

    def json(self) -> bytes:
        return json.dumps(self.config, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def discovery_messages(config: DiscoveryConfig, intent_names: Iterable[str],
                       wake_words: Iterable[str] = (), volume: bool = False,
                       speak: bool = False) -> list[DiscoveryMessage]:
    """The discovery configs of every entity, for the given intent names (and wake words, if any;
    the volume and the stop button with ``volume``: a device with a speaker; the notify entity with
    ``speak``: a voice)."""
    node = config.node_id
    topics = state_topics(config)
    device: dict[str, Any] = {
        "identifiers": [f"voiced_{node}"],
        "name": config.device_name or f"voiced {config.site_id}",
        "manufacturer": "voiced",
        "model": "voiced voice daemon",
    }
    if config.sw_version:
        device["sw_version"] = config.sw_version
    if config.suggested_area:
        device["suggested_area"] = config.suggested_area
    common = {
        "availability_topic": config.availability_topic,
        "payload_available": "online",
        "payload_not_available": "offline",
        "device": device,
        "origin": {"name": "voiced"},
    }

    def entity(component: Component, obj: str, name: str, **extra: Any) -> DiscoveryMessage:
        body = {"name": name, "unique_id": f"voiced_{node}_{obj}", **common, **extra}
        return DiscoveryMessage(f"{config.prefix}/{component}/{node}/{obj}/config", body)

    return [
        entity(Component.EVENT, "intent", "Intent", state_topic=topics.intent,
               event_types=sorted(set(intent_names)), icon="mdi:account-voice"),
        entity(Component.SENSOR, "transcript", "Transcript", state_topic=topics.transcript,
               json_attributes_topic=topics.transcript_attributes, icon="mdi:text-to-speech"),
        entity(Component.BINARY_SENSOR, "listening", "Listening", state_topic=topics.listening,
               payload_on="ON", payload_off="OFF", icon="mdi:microphone"),
        entity(Component.BINARY_SENSOR, "speaking", "Speaking", state_topic=topics.speaking,
               payload_on="ON", payload_off="OFF", icon="mdi:speaker"),
        entity(Component.SWITCH, "microphone", "Microphone", state_topic=topics.microphone,
               command_topic=topics.microphone_set, payload_on=SWITCH_ON, payload_off=SWITCH_OFF,
               icon="mdi:microphone-settings"),
    ] + ([entity(Component.EVENT, "wake", "Wake word", state_topic=topics.wake,
                 event_types=sorted(set(wake_words)), icon="mdi:microphone-message"),
          entity(Component.SELECT, "wake_sensitivity", "Wake word sensitivity", state_topic=topics.wake_sensitivity,
                 command_topic=topics.wake_sensitivity_set, options=list(Sensitivity), entity_category="config",
                 icon="mdi:account-voice")] if wake_words else []) + (
        [entity(Component.NUMBER, "volume", "Volume", state_topic=topics.volume, command_topic=topics.volume_set,
                min=0, max=100, step=5, unit_of_measurement="%", mode="slider", icon="mdi:volume-high"),
         entity(Component.BUTTON, "stop", "Stop speaking", command_topic=topics.stop, payload_press=BUTTON_PRESS,
                icon="mdi:stop")]
        if volume else []) + (
        [entity(Component.NOTIFY, "speak", "Speak", command_topic=topics.say, icon="mdi:account-voice")]
        if speak else [])


def intent_event(intent: Intent, site_id: str) -> bytes:
    """The event entity's payload for ``intent``: ``event_type`` plus attributes."""
    body = {
        "event_type": intent.name,
        "text": intent.text,
        "slots": intent.slot_values,
        "confidence": intent.confidence,
        "source": intent.source.value,
        "site_id": site_id,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def wake_event(label: str, score: float, session_id: str, site_id: str) -> bytes:
    """The wake-word event entity's payload for one detection."""
    body = {"event_type": label, "score": round(score, 4), "session_id": session_id, "site_id": site_id}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def transcript_state(text: str, details: Mapping[str, Any] | None = None) -> tuple[bytes, bytes]:
    """(state, attributes) payloads of the transcript sensor: the text cut to 255 characters,
    and a JSON object with the full ``text`` and ``details`` (likelihood, seconds, session…)."""
    state = text if len(text) <= STATE_MAX_CHARS else text[: STATE_MAX_CHARS - 1] + "…"
    attributes = {"text": text, **(details or {})}
    return state.encode("utf-8"), json.dumps(attributes, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class Discovery:
    """Keeps HA's view of the device current: publishes on connect and on HA's birth message."""

    def __init__(self, client: MqttClient, config: DiscoveryConfig, intent_names: Sequence[str],
                 wake_words: Sequence[str] = (), volume: bool = False, speak: bool = False) -> None:
        self.client = client
        self.config = config
        self._volume = volume
        self._speak = speak
        self._lock = threading.Lock()
        self._intent_names = tuple(intent_names)
        self._wake_words = tuple(wake_words)
        self.publications = 0
        """How many times the configs were published (for stats and tests)."""
        client.add_connect_listener(self.publish)
        client.subscribe(f"{config.prefix}/status", self._on_ha_status)

    @property
    def topics(self) -> StateTopics:
        return state_topics(self.config)

    def set_intent_names(self, intent_names: Sequence[str]) -> None:
        """New event types (after the templates were reloaded); republishes."""
        with self._lock:
            self._intent_names = tuple(intent_names)
        self.publish()

    def publish(self) -> None:
        """Publish every config, retained, ahead of the outbox (see ``MqttClient.publish_state``):
        configs are state, sent again on every connection, and must reach HA before events do."""
        with self._lock:
            names = self._intent_names
            self.publications += 1
        messages = discovery_messages(self.config, names, self._wake_words, self._volume, self._speak)
        sent = [self.client.publish_state(m.topic, m.json()) for m in messages]
        if all(sent):
            log.debug("published Home Assistant discovery for %s", self.config.node_id)
        else:
            log.debug("Home Assistant discovery for %s waits for the next connection", self.config.node_id)

    def _on_ha_status(self, topic: str, payload: bytes) -> None:
        if payload.strip() == b"online":
            log.info("Home Assistant came online: publishing discovery again")
            self.publish()
