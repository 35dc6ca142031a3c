"""The MQTT fixtures (real mosquitto, recording subscriber) for the daemon tests here too."""

from tests.mqtt.conftest import broker, broker_factory, subscriber_factory  # noqa: F401
