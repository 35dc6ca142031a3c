"""``[wyoming]``: Home Assistant's voice protocol, served by the daemon (or ``voiced wyoming``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from urllib.parse import urlparse

from voiced.errors import ConfigError

__all__ = ["Endpoint", "Scheme", "WyomingConfig", "parse_uri"]


class Scheme(Enum):
    TCP = "tcp"
    UNIX = "unix"


@dataclass(frozen=True)
class Endpoint:
    scheme: Scheme
    host: str = ""
    port: int = 0
    path: str = ""
    """The socket file of a ``unix://`` endpoint."""


def parse_uri(uri: str) -> Endpoint:
    """``tcp://HOST:PORT`` or ``unix:///run/voiced/wyoming.sock``; raises ConfigError naming ``uri``."""
    parsed = urlparse(uri)
    if parsed.scheme == Scheme.TCP.value:
        try:
            port = parsed.port
        except ValueError:
            port = None
        if not parsed.hostname or port is None:
            raise ConfigError("uri", f"tcp URIs need a host and a port (tcp://0.0.0.0:10700), got {uri!r}")
        return Endpoint(Scheme.TCP, host=parsed.hostname, port=port)
    if parsed.scheme == Scheme.UNIX.value:
        path = parsed.netloc + parsed.path
        if not path:
            raise ConfigError("uri", f"unix URIs need a socket path (unix:///run/voiced/wyoming.sock), got {uri!r}")
        return Endpoint(Scheme.UNIX, path=path)
    raise ConfigError("uri", f"must start with tcp:// or unix://, got {uri!r}")


@dataclass(frozen=True)
class WyomingConfig:
    uri: str | None = None
    """Where to serve Wyoming: ``tcp://0.0.0.0:10700`` or ``unix://PATH``; unset: no Wyoming server.
    One port serves every service voiced has (asr, tts, wake, intent, satellite); Home Assistant's
    conventional ports are 10300 (STT), 10200 (TTS), 10400 (wake word) and 10700 (satellite)."""
    zeroconf: bool = True
    """Announce ``_wyoming._tcp.local.`` by mDNS (tcp only), which is how Home Assistant discovers the server."""
    zeroconf_name: str | None = None
    """The announced instance name; unset: ``voiced-<site id>``."""
    zeroconf_host: str | None = None
    """The address announced; unset: the one the default route leaves from."""
    max_clients: int = 8
    """Connections served at once; more are closed at accept and counted (``wyoming_refused``)."""
    max_line_bytes: int = 65_536
    """Longest event header line; a longer one drops the connection (``wyoming_malformed``)."""
    max_data_bytes: int = 1_048_576
    """Largest ``data_length`` (the JSON body after the header)."""
    max_payload_bytes: int = 1_048_576
    """Largest ``payload_length`` (an audio chunk of 1 s at 48 kHz, 16-bit stereo is 192 kB)."""
    max_audio_s: float = 60.0
    """Audio accepted per transcribe/detect request; what comes after is ignored and counted."""
    read_timeout_s: float = 10.0
    """Once an event has begun, the rest of it must arrive within this time, or the connection is dropped."""
    workers: int = 2
    """Threads that run the models for Wyoming requests (ASR, TTS, wake, intents); the event loop never waits on them."""
    satellite: bool = False
    """Offer the satellite role: Home Assistant drives our microphone and speaker over this server."""
    area: str | None = None
    """The satellite's area, announced in ``info``."""
    timer_finished_wav: Path | None = None
    """Satellite: the sound rung when a Home Assistant timer finishes (a WAV, any rate); unset: a
    built-in two-note chime (``voiced.wyoming.timers``)."""
    timer_rings: int = 5
    """Satellite: how many times the timer sound rings; the wake word said between rings stops it. 0: silent."""
    timer_ring_gap_s: float = 3.0
    """Satellite: silence between rings, with the microphone live to hear the wake word."""

    def __post_init__(self) -> None:
        if self.uri is not None:
            parse_uri(self.uri)
        for key in ("max_clients", "max_line_bytes", "max_data_bytes", "max_payload_bytes", "workers"):
            if getattr(self, key) < 1:
                raise ConfigError(key, f"must be at least 1, got {getattr(self, key)}")
        for key in ("max_audio_s", "read_timeout_s"):
            if not getattr(self, key) > 0:
                raise ConfigError(key, f"must be > 0, got {getattr(self, key)}")
        if not 0 <= self.timer_rings <= 100:
            raise ConfigError("timer_rings", f"must be within 0..100, got {self.timer_rings}")
        if not 0 <= self.timer_ring_gap_s <= 60:
            raise ConfigError("timer_ring_gap_s", f"must be within 0..60, got {self.timer_ring_gap_s}")

    @property
    def endpoint(self) -> Endpoint | None:
        return parse_uri(self.uri) if self.uri is not None else None
