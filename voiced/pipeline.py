"""The daemon: one core (capture, listening, intents, speech out) and its protocol adapters.

The core knows no protocol (``voiced.core``); the Hermes/MQTT adapter (``voiced.mqtt.adapter``)
is always there, the Wyoming server (``voiced.wyoming``) when ``[wyoming] uri`` is set.
"""

from __future__ import annotations

import dataclasses
import logging

from voiced.asr.loader import SpeechRecognizer
from voiced.config import Config
from voiced.core import Core, ListenMode
from voiced.intents import IntentRecognizer
from voiced.mqtt.adapter import HermesAdapter
from voiced.mqtt.client import MqttClient
from voiced.mqtt.discovery import Discovery
from voiced.runtime.notify import SystemdNotifier
from voiced.runtime.supervisor import Supervisor
from voiced.stages import Counters

__all__ = ["Daemon", "ListenMode"]

log = logging.getLogger(__name__)


class Daemon:
    """Owns the core and the adapters; ``start`` → READY → ``stop``."""

    def __init__(self, config: Config, mode: ListenMode = ListenMode.ALWAYS,
                 notifier: SystemdNotifier | None = None) -> None:
        self.config = config
        self.mode = mode
        self.core = Core(config, mode, notifier, status=self.status_line)
        self.hermes = HermesAdapter(self.core, config)
        self.wyoming = None
        if config.wyoming.uri is not None:
            from voiced.wyoming.server import WyomingServer  # asyncio and zeroconf only when asked for

            self.wyoming = WyomingServer(self.core, config.wyoming)
            self.hermes.stats_sections["wyoming"] = self.wyoming.stats

    # The parts callers (CLI, tests, benchmarks) reach for.
    @property
    def client(self) -> MqttClient:
        return self.hermes.client

    @property
    def discovery(self) -> Discovery:
        return self.hermes.discovery

    @property
    def supervisor(self) -> Supervisor:
        return self.core.supervisor

    @property
    def counters(self) -> Counters:
        return self.core.counters

    @property
    def intents(self) -> IntentRecognizer:
        return self.core.models.intents

    @property
    def recognizer(self) -> SpeechRecognizer | None:
        return self.core.models.recognizer

    def start(self) -> None:
        """Connect (without waiting for the broker), serve Wyoming, start the core's stages."""
        self.hermes.start()
        if self.wyoming is not None:
            self.wyoming.start()
        self.core.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the servers and the stages, flush the outbox while the broker is there."""
        if self.wyoming is not None:
            self.wyoming.stop(timeout * 0.2)
        clean = self.core.stop(timeout * 0.5)
        self.hermes.close(drain_timeout=timeout * 0.3)
        return clean

    def status_line(self) -> str:
        """What STATUS= shows: ``listening on alsa:hw:1,0 @16000 Hz · 0 dropped · mqtt connected``."""
        parts = [self.core.status_line(), self.hermes.status()]
        if self.wyoming is not None:
            parts.append(self.wyoming.status())
        return " · ".join(parts)

    def stats(self) -> dict[str, object]:
        """What ``voiced/<siteId>/stats`` carries."""
        return self.hermes.stats()

    def reload(self, config: Config) -> None:
        """SIGHUP: new intent templates (and the discovery that lists them) without touching audio."""
        self.core.reload(config)
        names = self.core.models.intents.intent_names
        self.hermes.set_intent_names(names)
        if dataclasses.replace(config, intents=self.config.intents) != self.config:
            log.warning("reload applies [intents] only; restart voiced for the other changes")
        log.info("reloaded %d intents", len(names))
