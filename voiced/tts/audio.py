"""Synthesized audio: the chunk type the voice yields, and Piper's float → int16 conversion."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from voiced.audio.resample import to_mono
from voiced.audio.wav import read_wav

__all__ = ["MAX_WAV_VALUE", "AudioChunk", "audio_peak", "float_to_int16", "wav_file_to_chunk", "wav_to_chunk"]

MAX_WAV_VALUE = 32767.0
"""Full scale of Piper's int16 output."""
_SILENT_PEAK = 1e-8
"""A peak below this is silence (piper-tts: no division by ~zero)."""


@dataclass(frozen=True, eq=False)
class AudioChunk:
    """A piece of synthesized speech, ready to play or write."""

    samples: np.ndarray
    """int16 samples, 1-D (interleaved when ``channels`` > 1)."""
    sample_rate: int
    """Frames per second."""
    sample_width: int = 2
    """Bytes per sample (2: int16)."""
    channels: int = 1
    """Interleaved channels."""
    sentence: int = 0
    """Index of the sentence this audio belongs to."""
    final: bool = True
    """The last chunk of its sentence (split voices yield several per sentence)."""

    def __post_init__(self) -> None:
        if self.samples.dtype != np.int16 or self.samples.ndim != 1:
            raise ValueError(f"samples must be 1-D int16, got {self.samples.dtype} {self.samples.shape}")
        if self.sample_rate <= 0 or self.channels < 1 or self.sample_width != 2:
            raise ValueError(f"bad layout: {self.sample_rate} Hz, {self.channels} ch, {self.sample_width} bytes")

    @property
    def frames(self) -> int:
        """Frames (samples per channel)."""
        return len(self.samples) // self.channels

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return self.frames / self.sample_rate

    def to_bytes(self) -> bytes:
        """Little-endian PCM, as ALSA's S16_LE and WAV files want it."""
        return self.samples.astype("<i2", copy=False).tobytes()


def audio_peak(audio: np.ndarray) -> float:
    """The largest absolute sample (0 for no samples): what Piper normalizes a sentence by."""
    return float(np.max(np.abs(audio))) if audio.size else 0.0


def float_to_int16(audio: np.ndarray, peak: float | None = None, volume: float = 1.0) -> np.ndarray:
    """Model output → int16 as piper-tts 1.8 does it: divide by the peak, volume, clip to ±1, × 32767, truncate.

    ``peak`` defaults to :func:`audio_peak` of ``audio`` itself (Piper normalizes every
    sentence to full scale; near-silence, a peak under 1e-8, becomes silence); a split voice
    passes the peak it chose for the whole sentence so chunk joins stay continuous.
    """
    x = np.asarray(audio, dtype=np.float32)
    peak = audio_peak(x) if peak is None else peak
    y = np.zeros_like(x) if peak < _SILENT_PEAK else x / np.float32(peak)
    if volume != 1.0:
        y = y * np.float32(volume)
    y = np.clip(y, -1.0, 1.0).astype(np.float32)
    return np.clip(y * MAX_WAV_VALUE, -MAX_WAV_VALUE, MAX_WAV_VALUE).astype(np.int16)


def wav_to_chunk(data: bytes, name: str = "WAV") -> AudioChunk:
    """A WAV file's bytes (hermes ``playBytes``) as one mono chunk; AudioError naming ``name`` if it
    is not a usable WAV. Any layout :func:`~voiced.audio.wav.read_wav` reads is accepted; channels
    are averaged. Read in memory: a full or read-only disk plays it all the same."""
    return _to_chunk(*read_wav(name, data))


def wav_file_to_chunk(path: str | os.PathLike[str]) -> AudioChunk:
    """A WAV file as one mono chunk (channels averaged); AudioError naming the file if it is not a usable WAV."""
    return _to_chunk(*read_wav(path))


def _to_chunk(samples: np.ndarray, rate: int) -> AudioChunk:
    mono = to_mono(samples)
    pcm = np.clip(np.round(mono * 32768.0), -32768, 32767).astype(np.int16)
    return AudioChunk(pcm, rate)
