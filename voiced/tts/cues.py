"""The sounds that frame a wake word's command, and ``[feedback]`` that turns them on (``voiced.core.feedback`` plays them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from voiced.tts.audio import AudioChunk
from voiced.tts.tones import bell

__all__ = ["FeedbackConfig", "heard_blip", "wake_blip"]

# A fifth up (A5 → E6) asks; the same fifth down answers. 0.18 s each: short enough to speak
# right after, unlike the timer's 0.9 s bell.
_UP_HZ = (880.0, 1318.5)
_NOTE_S = 0.09
_DECAY_S = 0.04
_PEAK = 0.35
"""Quieter than the timer bell: it sounds at arm's length, on every command."""


def wake_blip() -> AudioChunk:
    """The built-in "speak now": two short notes rising a fifth, 0.18 s."""
    return bell(_UP_HZ, _NOTE_S, _DECAY_S, peak=_PEAK)


def heard_blip() -> AudioChunk:
    """The built-in "heard you": the same two notes falling, 0.18 s."""
    return bell(_UP_HZ[::-1], _NOTE_S, _DECAY_S, peak=_PEAK)


@dataclass(frozen=True)
class FeedbackConfig:
    """``[feedback]``: sounds that frame a wake word's command (wake mode, satellites)."""

    wake: bool = False
    """Play a sound when the wake word is heard; speak after it (the microphone is muted while it plays)."""
    wake_wav: Path | None = None
    """The wake sound (a WAV, any rate); unset: a built-in blip rising a fifth (0.18 s)."""
    heard: bool = False
    """Play a sound when the end of the command has been heard (before any reply)."""
    heard_wav: Path | None = None
    """The heard sound (a WAV, any rate); unset: the built-in blip falling a fifth."""

    @property
    def any(self) -> bool:
        return self.wake or self.heard
