"""What the speaker is asked and answers: its config, requests, results, counters."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from voiced.configfile import section_from_dict
from voiced.errors import ConfigError
from voiced.tts.audio import AudioChunk
from voiced.tts.config import SynthesisOptions

__all__ = ["RequestKind", "SpeakerConfig", "SpeakerStats", "SpeechOutcome", "SpeechRequest", "SpeechResult"]


@dataclass(frozen=True)
class SpeakerConfig:
    """How the speaker queues requests and signals half-duplex."""

    tail_ms: int = 300
    """After the last sound, how long ``on_speaking(False)`` waits (echo and device latency die down)."""
    max_pending: int = 16
    """Requests waiting behind the current one; more are refused (finished FAILED at once)."""

    def __post_init__(self) -> None:
        if not isinstance(self.tail_ms, int) or isinstance(self.tail_ms, bool) or not 0 <= self.tail_ms <= 10_000:
            raise ConfigError("tail_ms", f"must be within 0..10000, got {self.tail_ms!r}")
        if not isinstance(self.max_pending, int) or isinstance(self.max_pending, bool) or self.max_pending < 1:
            raise ConfigError("max_pending", f"must be >= 1, got {self.max_pending!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | None = None, prefix: str = "tts") -> SpeakerConfig:
        """Build from a TOML table; errors name ``prefix.key`` and ``source``."""
        return section_from_dict(cls, data, prefix, source)


class RequestKind(Enum):
    SAY = "say"
    """Text to synthesize."""
    PLAY = "play"
    """Ready audio (e.g. hermes playBytes)."""


class SpeechOutcome(Enum):
    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


@dataclass(frozen=True)
class SpeechResult:
    """How a request went, with its timing figures."""

    outcome: SpeechOutcome
    error: str | None = None
    """Why it failed."""
    sentences: int = 0
    """Sentences synthesized (0 for PLAY)."""
    audio_s: float = 0.0
    """Seconds of audio handed to the player."""
    played_frames: int = 0
    """Frames the device was given (at its rate)."""
    underruns: int = 0
    """Times playback ran dry (synthesis fell behind)."""
    queued_s: float = 0.0
    """Waiting time before the request started."""
    first_audio_s: float | None = None
    """From the start of the request to its first audio reaching the player."""
    synth_s: float = 0.0
    """Time spent synthesizing."""


class SpeechRequest:
    """One request; ``done`` is set and ``result`` filled when it has finished."""

    def __init__(self, kind: RequestKind, *, text: str = "", options: SynthesisOptions | None = None,
                 audio: Sequence[AudioChunk] = (), volume: float = 1.0, request_id: str | None = None,
                 tag: object = None, generation: int = 0) -> None:
        self.kind = kind
        self.text = text
        self.options = options
        self.audio = tuple(audio)
        self.volume = volume
        self.id = request_id
        """The caller's id (hermes ``id``), echoed back."""
        self.tag = tag
        """Anything the caller wants back in ``on_finished`` (e.g. the Hermes message)."""
        self.created = time.monotonic()
        self.done = threading.Event()
        self.result: SpeechResult | None = None
        self._generation = generation

    def wait(self, timeout: float | None = None) -> SpeechResult | None:
        """The result once finished, or None after ``timeout`` seconds."""
        return self.result if self.done.wait(timeout) else None


@dataclass
class SpeakerStats:
    requests: int = 0
    completed: int = 0
    interrupted: int = 0
    failed: int = 0
    refused: int = 0
