"""Playback settings and results: what :class:`~voiced.tts.playback.AlsaPlayer` is told and tells back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from voiced.configfile import section_from_dict
from voiced.errors import ConfigError

__all__ = ["DEFAULT_PCM", "PlaybackConfig", "PlaybackOutcome", "PlaybackResult", "PlaybackStats"]

DEFAULT_PCM = "default"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class PlaybackConfig:
    """How to play through an ALSA device."""

    device: str | None = None
    """ALSA PCM name, e.g. ``default``, ``plughw:CARD=Headphones`` or one from an asoundrc (dmix);
    unset: the hardware profile's ``[alsa] playback`` in the daemon, else ``default``."""
    rate: int | None = None
    """Rate to open the device at; None: the audio's own rate (no resampling when the device takes it)."""
    fallback_rate: int = 48_000
    """Rate to open at when the device refuses the first one; audio is resampled to it."""
    channels: int = 1
    """Channels to open; mono audio is copied to each (some hw devices only open stereo)."""
    period_ms: int = 20
    """ALSA period: the size of each write, and how soon :meth:`AlsaPlayer.stop` takes effect."""
    periods: int = 4
    """Periods in the device buffer: more survive scheduling hiccups, fewer stop sooner."""
    volume: float = 1.0
    """Software gain in [0, 1] applied to everything played (streams have their own on top)."""
    queue_chunks: int = 32
    """Chunks waiting for the device; a full queue makes writers wait (no audio is dropped)."""

    def __post_init__(self) -> None:
        if self.device is not None and (not isinstance(self.device, str) or not self.device.strip()):
            raise ConfigError("device", f"must be a non-empty ALSA PCM name, got {self.device!r}")
        for name in ("rate", "fallback_rate"):
            value = getattr(self, name)
            if value is None and name == "rate":
                continue
            if not _is_int(value) or not 4_000 <= value <= 384_000:
                raise ConfigError(name, f"must be an integer rate within 4000..384000 Hz, got {value!r}")
        if not _is_int(self.channels) or not 1 <= self.channels <= 8:
            raise ConfigError("channels", f"must be within 1..8, got {self.channels!r}")
        if not _is_int(self.period_ms) or not 5 <= self.period_ms <= 500:
            raise ConfigError("period_ms", f"must be within 5..500 ms, got {self.period_ms!r}")
        if not _is_int(self.periods) or not 2 <= self.periods <= 32:
            raise ConfigError("periods", f"must be within 2..32, got {self.periods!r}")
        if not isinstance(self.volume, (int, float)) or isinstance(self.volume, bool) or not 0 <= self.volume <= 1:
            raise ConfigError("volume", f"must be within 0..1, got {self.volume!r}")
        if not _is_int(self.queue_chunks) or self.queue_chunks < 1:
            raise ConfigError("queue_chunks", f"must be >= 1, got {self.queue_chunks!r}")

    @property
    def pcm(self) -> str:
        """The PCM opened: ``device``, or ALSA's ``default``."""
        return self.device or DEFAULT_PCM

    def period_frames(self, rate: int) -> int:
        """Frames in one period at ``rate``."""
        return max(1, rate * self.period_ms // 1000)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | None = None,
                  prefix: str = "audio.playback") -> PlaybackConfig:
        """Build from a TOML table; errors name ``prefix.key`` and ``source`` (the file)."""
        return section_from_dict(cls, data, prefix, source)


class PlaybackOutcome(Enum):
    """How a stream ended."""

    COMPLETED = "completed"
    """Everything written was played."""
    INTERRUPTED = "interrupted"
    """:meth:`AlsaPlayer.stop` cut it off."""
    FAILED = "failed"
    """The device could not be opened or was lost; ``error`` says why."""


@dataclass(frozen=True)
class PlaybackResult:
    """What happened to one stream."""

    outcome: PlaybackOutcome
    frames: int
    """Frames written to the device (at ``device_rate``)."""
    underruns: int
    """Times the device ran dry mid-stream (synthesis fell behind)."""
    device_rate: int | None
    """Rate the device ran at, None if it never opened."""
    error: str | None = None


@dataclass
class PlaybackStats:
    """Counters over the player's life, for the daemon's stats."""

    streams: int = 0
    frames_written: int = 0
    underruns: int = 0
    write_errors: int = 0
    open_failures: int = 0
    interrupted: int = 0
    last_error: str | None = None

