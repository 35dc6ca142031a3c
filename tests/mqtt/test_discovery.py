"""Home Assistant discovery on a real broker: retained, valid, republished when HA returns."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.support import wait_until
from voiced.errors import ConfigError
from voiced.intents import Intent, Slot, SlotKind
from voiced.mqtt.client import MqttClient
from voiced.mqtt.discovery import (
    Discovery,
    DiscoveryConfig,
    discovery_messages,
    intent_event,
    node_id_for,
    state_topics,
    transcript_state,
)

from .conftest import Broker, Gate, Subscriber, raw_publish

AVAILABILITY = "voiced/test/availability"
INTENTS = ["HassTurnOn", "HassTurnOff", "HassLightSet"]


def configs(sub: Subscriber) -> dict[str, dict[str, object]]:
    return {t: json.loads(p) for t, p, _ in sub.messages if t.endswith("/config")}


def test_configs_are_retained_valid_and_complete(
    broker: Broker, subscriber_factory: Callable[..., Subscriber], client_factory: Callable[..., MqttClient]
) -> None:
    client = client_factory(broker)
    Discovery(client, DiscoveryConfig(site_id="living room", availability_topic=AVAILABILITY), INTENTS)
    wait_until(lambda: client.connected and client.stats()["published"] >= 5, what="discovery acknowledged")
    # A fresh subscriber after the fact: only retained messages can reach it.
    sub = subscriber_factory(broker, "homeassistant/#")
    sub.wait_for(lambda ms: len({t for t, _, _ in ms if t.endswith("/config")}) == 5, "five configs")
    assert all(retained for t, _, retained in sub.messages if t.endswith("/config"))
    found = configs(sub)
    node = "living_room"
    assert set(found) == {
        f"homeassistant/event/{node}/intent/config",
        f"homeassistant/sensor/{node}/transcript/config",
        f"homeassistant/binary_sensor/{node}/listening/config",
        f"homeassistant/binary_sensor/{node}/speaking/config",
        f"homeassistant/switch/{node}/microphone/config",
    }
    unique_ids = {c["unique_id"] for c in found.values()}
    assert len(unique_ids) == 5
    for config in found.values():
        assert config["availability_topic"] == AVAILABILITY
        assert config["device"] == found[f"homeassistant/event/{node}/intent/config"]["device"]
        assert config["device"]["identifiers"] == [f"voiced_{node}"]  # type: ignore[index]
        assert isinstance(config["state_topic"], str) and "+" not in config["state_topic"]
    event = found[f"homeassistant/event/{node}/intent/config"]
    assert event["event_types"] == sorted(INTENTS)
    sensor = found[f"homeassistant/sensor/{node}/transcript/config"]
    assert sensor["json_attributes_topic"] != sensor["state_topic"]
    listening = found[f"homeassistant/binary_sensor/{node}/listening/config"]
    assert (listening["payload_on"], listening["payload_off"]) == ("ON", "OFF")
    switch = found[f"homeassistant/switch/{node}/microphone/config"]
    assert (switch["command_topic"], switch["payload_on"], switch["payload_off"]) == (
        f"voiced/{node}/microphone/set", "ON", "OFF")
    assert switch["state_topic"] == f"voiced/{node}/microphone"
    # The device is available while the client is connected.
    sub2 = subscriber_factory(broker, AVAILABILITY)
    sub2.wait_for(lambda ms: (AVAILABILITY, b"online", True) in ms, "retained online")


def test_republished_when_home_assistant_comes_online(
    broker: Broker, subscriber_factory: Callable[..., Subscriber], client_factory: Callable[..., MqttClient]
) -> None:
    client = client_factory(broker)
    discovery = Discovery(client, DiscoveryConfig(site_id="kitchen", availability_topic=AVAILABILITY), INTENTS)
    wait_until(lambda: client.connected and client.stats()["published"] >= 5, what="discovery acknowledged")
    assert discovery.publications == 1
    sub = subscriber_factory(broker, "homeassistant/+/kitchen/#")
    sub.wait_count(5)  # the retained copies
    raw_publish(broker, "homeassistant/status", b"offline")
    raw_publish(broker, "homeassistant/status", b"online")  # HA's birth message after its restart
    sub.wait_count(10)  # published again, live this time
    assert discovery.publications == 2
    live = [m for m in sub.messages[5:]]
    assert not any(retained for _, _, retained in live)  # delivered live (still stored retained)
    assert {t for t, _, _ in live} == {t for t, _, _ in sub.messages[:5]}


def test_republished_after_reconnect_and_with_new_intents(
    broker: Broker, subscriber_factory: Callable[..., Subscriber], client_factory: Callable[..., MqttClient]
) -> None:
    client = client_factory(broker)
    discovery = Discovery(client, DiscoveryConfig(site_id="hall", availability_topic=AVAILABILITY), INTENTS)
    wait_until(lambda: discovery.publications == 1, what="the first publication")
    broker.restart()  # a broker without persistence forgets retained configs
    wait_until(lambda: discovery.publications == 2, what="the publication after the reconnect")
    discovery.set_intent_names(["GetTime"])
    wait_until(lambda: client.stats()["inflight"] == 0, what="the new configs acknowledged")
    sub = subscriber_factory(broker, "homeassistant/event/#")
    sub.wait_count(1)
    assert json.loads(sub.payloads()[-1])["event_types"] == ["GetTime"]


def test_configs_reach_the_broker_before_the_backlog(
    broker: Broker, subscriber_factory: Callable[..., Subscriber], gate_factory: Callable[..., Gate],
    client_factory: Callable[..., MqttClient],  # after the gate: the client is closed before it at teardown
) -> None:
    # Events stored while the broker was away must not reach HA before the entity they belong
    # to exists: HA ignores a state topic it has no config for yet.
    gate = gate_factory(broker, open=False)
    client = client_factory(gate)
    discovery = Discovery(client, DiscoveryConfig(site_id="porch", availability_topic=AVAILABILITY), INTENTS)
    topics = discovery.topics
    for n in range(20):
        assert client.publish(topics.intent, f'{{"event_type": "HassTurnOn", "n": {n}}}')
    sub = subscriber_factory(broker, "#")
    gate.open()
    sub.wait_for(lambda ms: sum(t == topics.intent for t, _, _ in ms) == 20, "the backlog")
    order = [t for t, _, _ in sub.messages]
    config_at = [i for i, t in enumerate(order) if t.endswith("/config")]
    assert len(config_at) == 5
    assert max(config_at) < order.index(topics.intent)
    wait_until(lambda: client.stats()["inflight"] == 0, what="every PUBACK")
    stats = client.stats()
    assert stats["published"] == 25 and stats["queued"] == 0  # the configs were never stored


def test_configs_offline_are_not_stored(
    broker_factory: Callable[..., Broker], subscriber_factory: Callable[..., Subscriber],
    client_factory: Callable[..., MqttClient],
) -> None:
    # Reloading templates while the broker is away must not pile up configs in the outbox:
    # the next connection publishes the current ones once.
    broker = broker_factory(start=False)
    client = client_factory(broker)
    discovery = Discovery(client, DiscoveryConfig(site_id="attic", availability_topic=AVAILABILITY), INTENTS)
    for names in (["A"], ["B"], ["GetTime"]):
        discovery.set_intent_names(names)
    assert client.stats()["queued"] == 0
    broker.start()
    wait_until(lambda: client.connected and client.stats()["published"] == 5, what="the configs acknowledged")
    sub = subscriber_factory(broker, "homeassistant/event/#")
    sub.wait_count(1)
    assert json.loads(sub.payloads()[-1])["event_types"] == ["GetTime"]


def test_the_device_carries_its_version_and_area_when_known() -> None:
    plain = discovery_messages(DiscoveryConfig(site_id="kitchen", availability_topic=AVAILABILITY), INTENTS)
    assert not {"sw_version", "suggested_area"} & set(plain[0].config["device"])
    config = DiscoveryConfig(site_id="kitchen", availability_topic=AVAILABILITY, sw_version="0.1.0",
                             suggested_area="Kitchen")
    for message in discovery_messages(config, INTENTS, volume=True, speak=True):
        assert message.config["device"]["sw_version"] == "0.1.0"
        assert message.config["device"]["suggested_area"] == "Kitchen"


def test_a_device_with_a_speaker_has_a_volume_slider_and_a_stop_button_and_with_a_voice_a_notify_entity() -> None:
    config = DiscoveryConfig(site_id="kitchen", availability_topic=AVAILABILITY)
    without = {m.topic for m in discovery_messages(config, INTENTS)}
    found = {m.topic: m.config for m in discovery_messages(config, INTENTS, volume=True)}
    assert set(found) - without == {"homeassistant/number/kitchen/volume/config",
                                    "homeassistant/button/kitchen/stop/config"}
    button = found["homeassistant/button/kitchen/stop/config"]
    assert (button["command_topic"], button["payload_press"]) == ("voiced/kitchen/stop", "PRESS")
    slider = found["homeassistant/number/kitchen/volume/config"]
    assert (slider["state_topic"], slider["command_topic"]) == ("voiced/kitchen/volume", "voiced/kitchen/volume/set")
    assert (slider["min"], slider["max"], slider["unit_of_measurement"]) == (0, 100, "%")
    # with a voice, a notify entity whose messages are spoken
    found = {m.topic: m.config for m in discovery_messages(config, INTENTS, volume=True, speak=True)}
    assert found["homeassistant/notify/kitchen/speak/config"]["command_topic"] == "voiced/kitchen/say"
    assert "state_topic" not in found["homeassistant/notify/kitchen/speak/config"]


def test_a_device_with_wake_words_has_their_event_and_a_sensitivity_select() -> None:
    config = DiscoveryConfig(site_id="kitchen", availability_topic=AVAILABILITY)
    without = {m.topic for m in discovery_messages(config, INTENTS)}
    found = {m.topic: m.config for m in discovery_messages(config, INTENTS, wake_words=["alexa_v0.1"])}
    assert set(found) - without == {"homeassistant/event/kitchen/wake/config",
                                    "homeassistant/select/kitchen/wake_sensitivity/config"}
    select = found["homeassistant/select/kitchen/wake_sensitivity/config"]
    assert select["options"] == ["Slightly sensitive", "Moderately sensitive", "Very sensitive"]
    assert (select["state_topic"], select["command_topic"]) == ("voiced/kitchen/wake_sensitivity",
                                                                "voiced/kitchen/wake_sensitivity/set")
    assert select["entity_category"] == "config"  # under the device's configuration, as on HA's own satellites


def test_state_payloads() -> None:
    config = DiscoveryConfig(site_id="kitchen", availability_topic=AVAILABILITY)
    topics = state_topics(config)
    assert topics.intent == "voiced/kitchen/intent"
    state, attributes = transcript_state("x" * 300, {"likelihood": 0.5})
    assert len(state.decode()) == 255
    details = json.loads(attributes)
    assert details == {"text": "x" * 300, "likelihood": 0.5}
    assert transcript_state("turn on the light")[0] == b"turn on the light"
    slot = Slot("area", "area", "Kitchen", "kitchen", SlotKind.LIST, 20, 27)
    event = json.loads(intent_event(Intent("HassTurnOn", "turn on the light in Kitchen", (slot,), 1.0), "kitchen"))
    assert event["event_type"] == "HassTurnOn" and event["slots"] == {"area": "kitchen"}
    assert node_id_for("Küche / 2") == "K_che___2"
    messages = discovery_messages(config, ["B", "A", "B"])
    assert messages[0].config["event_types"] == ["A", "B"]
    assert all(json.loads(m.json()) == m.config for m in messages)


def test_bad_config() -> None:
    with pytest.raises(ConfigError):
        DiscoveryConfig(site_id="", availability_topic=AVAILABILITY)
    with pytest.raises(ConfigError):
        DiscoveryConfig(site_id="x", availability_topic=AVAILABILITY, prefix="home/#")
