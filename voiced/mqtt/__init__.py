"""MQTT: a broker client with a durable outbox, the Hermes protocol, Home Assistant discovery.

- :mod:`voiced.mqtt.outbox` — every outgoing message is stored in SQLite until acknowledged.
- :mod:`voiced.mqtt.config` — :class:`MqttConfig`: how to reach the broker.
- :mod:`voiced.mqtt.client` — :class:`MqttClient`: connect / publish / subscribe / close.
- :mod:`voiced.mqtt.hermes` — Hermes topics, payload builders and parsers (``hermes_topics``,
  ``hermes_out``, ``hermes_in``).
- :mod:`voiced.mqtt.discovery` — Home Assistant discovery configs and their upkeep.
"""

from __future__ import annotations

from voiced.mqtt.client import Handler, MqttClient
from voiced.mqtt.config import MqttConfig
from voiced.mqtt.discovery import Discovery, DiscoveryConfig
from voiced.mqtt.hermes import MalformedMessage, Topic
from voiced.mqtt.outbox import DropReason, Outbox, OutboxConfig

__all__ = [
    "Discovery",
    "DiscoveryConfig",
    "DropReason",
    "Handler",
    "MalformedMessage",
    "MqttClient",
    "MqttConfig",
    "Outbox",
    "OutboxConfig",
    "Topic",
]
