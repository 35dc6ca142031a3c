"""Short sounds the daemon makes on its own (a timer's bell, the wake word's blips), and the WAVs that replace them.

    bell((1318.5, 1046.5), note_s=0.45, decay_s=0.12)   # two decaying bell notes, E6 then C6
    load_sound(path, "feedback.wake_wav", default=blip, source="/etc/voiced/voiced.toml")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from voiced.errors import AudioError, ConfigError
from voiced.tts.audio import AudioChunk, wav_file_to_chunk

__all__ = ["TONE_RATE", "bell", "load_sound", "read_sound"]

TONE_RATE = 22_050
"""Rate of the built-in sounds (a Piper medium voice's, so the device is not reopened for them)."""

PARTIALS = ((1.0, 1.0), (2.76, 0.35))
"""(frequency ratio, amplitude) of each note: an inharmonic second partial reads as a bell, not as speech."""

_ATTACK_SAMPLES = 64
"""A soft attack: no click at the start of a note."""


def bell(notes_hz: Sequence[float], note_s: float, decay_s: float, *, peak: float = 0.5,
         rate: int = TONE_RATE) -> AudioChunk:
    """Bell notes one after the other, each ``note_s`` long and decaying with ``decay_s``; mono int16
    whose loudest sample is ``peak`` of full scale (headroom for the device's own gain)."""
    t = np.arange(round(note_s * rate)) / rate
    envelope = np.exp(-t / decay_s) * np.minimum(1.0, t * rate / _ATTACK_SAMPLES)
    notes = [sum(a * np.sin(2 * np.pi * f0 * r * t) for r, a in PARTIALS) * envelope for f0 in notes_hz]
    audio = np.concatenate(notes)
    audio *= peak / np.max(np.abs(audio))
    return AudioChunk(np.round(audio * 32767).astype(np.int16), rate)


def load_sound(path: Path | None, key: str, default: Callable[[], AudioChunk],
               source: str | None = None) -> AudioChunk:
    """:func:`read_sound` of ``path``, or ``default()`` when None."""
    return default() if path is None else read_sound(path, key, source)


def read_sound(path: Path, key: str, source: str | None = None) -> AudioChunk:
    """The WAV at ``path`` (any rate, 16-bit, channels averaged); a ConfigError naming ``key``,
    the file and the config ``source`` when it cannot be played."""
    try:
        sound = wav_file_to_chunk(path)
    except OSError as exc:
        raise ConfigError(key, f"{path}: {exc.strerror or exc}", source) from None
    except AudioError as exc:  # its message names the file
        raise ConfigError(key, str(exc), source) from None
    if sound.frames == 0:
        raise ConfigError(key, f"{path}: no audio in it", source)
    return sound
