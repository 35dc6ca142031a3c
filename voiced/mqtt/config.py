"""How to reach the broker: :class:`MqttConfig`, the ``[mqtt]`` table of the config file."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, field, replace
from pathlib import Path

from voiced.errors import ConfigError
from voiced.runtime.backoff import BackoffPolicy

__all__ = ["MqttConfig"]


@dataclass(frozen=True)
class MqttConfig:
    """How to reach the broker (the ``[mqtt]`` table; ``voiced.configfile`` builds it)."""

    host: str = "localhost"
    """Broker host name or address."""
    port: int = 1883
    """Broker port (8883 is usual with TLS)."""
    username: str | None = None
    """User name for the broker, if it requires one."""
    password_file: str | None = None
    """File holding the password (e.g. a systemd credential); never given on the command line."""
    tls: bool = False
    """Use TLS; implied by ``ca_file``, ``cert_file`` or ``key_file``."""
    ca_file: str | None = None
    """CA certificates to verify the broker with; the system's when unset."""
    cert_file: str | None = None
    """Client certificate, with ``key_file``, for brokers that require one."""
    key_file: str | None = None
    """Private key of ``cert_file``."""
    client_id: str = ""
    """MQTT client id; empty: ``voiced-<hostname>-<siteId>`` (the daemon's; ``voiced-<hostname>`` elsewhere)."""
    keepalive: int = 30
    """Seconds between keepalive pings; the broker declares us gone (last will) after 1.5×."""
    availability_topic: str = "voiced/default/availability"
    """Retained ``online`` / ``offline`` (last will) of this daemon."""
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    """Delays between reconnect attempts."""
    max_payload_bytes: int = 65536
    """Larger payloads are dropped, both ways, and counted (but for ``max_audio_bytes``)."""
    max_audio_bytes: int = 8_388_608
    """Largest WAV taken on ``hermes/audioServer/<siteId>/playBytes/<id>`` (8 MiB: ~3 min of
    22 kHz mono); a larger one is dropped, counted and answered with ``playFinished``."""
    max_inflight: int = 20
    """Outbox messages sent and not yet acknowledged, at most."""

    def __post_init__(self) -> None:
        if not self.host:
            raise ConfigError("mqtt.host", "must not be empty")
        if not 0 < self.port < 65536:
            raise ConfigError("mqtt.port", f"must be within 1..65535, got {self.port}")
        if not 5 <= self.keepalive <= 65535:
            raise ConfigError("mqtt.keepalive", f"must be within 5..65535 seconds, got {self.keepalive}")
        if not self.availability_topic or set("+#\0") & set(self.availability_topic):
            raise ConfigError("mqtt.availability_topic", f"must be a topic without wildcards, got {self.availability_topic!r}")
        if self.max_payload_bytes < 1:
            raise ConfigError("mqtt.max_payload_bytes", f"must be >= 1, got {self.max_payload_bytes}")
        if self.max_audio_bytes < 1:
            raise ConfigError("mqtt.max_audio_bytes", f"must be >= 1, got {self.max_audio_bytes}")
        if not 1 <= self.max_inflight <= 1000:
            raise ConfigError("mqtt.max_inflight", f"must be within 1..1000, got {self.max_inflight}")
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("mqtt.cert_file", "cert_file and key_file go together")
        if self.password_file is not None and self.username is None:
            raise ConfigError("mqtt.username", "password_file is set but username is not")
        for key in ("password_file", "ca_file", "cert_file", "key_file"):
            path = getattr(self, key)
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"mqtt.{key}", f"file {path} does not exist")
        if self.uses_tls:
            self.tls_context()  # files that are no certificate or key fail here, named, not in paho at start

    def tls_context(self) -> ssl.SSLContext:
        """What TLS to the broker uses: ``ca_file`` (else the system's CAs), the client certificate;
        ConfigError naming the key when a file is no certificate, or the key does not match."""
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError("mqtt.ca_file", f"{self.ca_file} holds no CA certificate TLS can read "
                              f"({getattr(exc, 'reason', None) or exc})") from None
        if self.cert_file is not None:
            try:
                context.load_cert_chain(self.cert_file, self.key_file)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError("mqtt.cert_file", f"{self.cert_file} with key_file {self.key_file}: not a "
                                  f"certificate and its key ({getattr(exc, 'reason', None) or exc})") from None
        return context

    @property
    def uses_tls(self) -> bool:
        return self.tls or any(p is not None for p in (self.ca_file, self.cert_file, self.key_file))

    @property
    def resolved_client_id(self) -> str:
        return self.client_id or f"voiced-{socket.gethostname()}"

    def for_site(self, site_id: str) -> MqttConfig:
        """With the site in the default client id: satellites cloned from one image share a host
        name ("raspberrypi"), and the broker lets only one client hold an id."""
        return self if self.client_id else replace(self, client_id=f"voiced-{socket.gethostname()}-{site_id}")

    def read_password(self) -> str | None:
        """The password from ``password_file`` (one trailing newline and a byte-order mark removed: what
        editors add is not part of the password), or None."""
        if self.password_file is None:
            return None
        try:
            return Path(self.password_file).read_text(encoding="utf-8-sig").removesuffix("\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError("mqtt.password_file", f"cannot read {self.password_file}: {exc}") from None
