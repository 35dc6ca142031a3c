"""Front ends: real audio → the exact tensors each model family is fed in use.

- Silero VAD v5: 512-sample chunks on the grid from the start of the stream, each with
  the 64 samples before it (zeros at the start) and the state the previous call returned,
  as :class:`voiced.vad.silero.SileroDetector` runs it.
- openWakeWord: ``melspectrogram.onnx`` on int16-scaled samples, ``x / 10 + 2``, windows
  of 76 frames every 8 frames → embedding input [N, 76, 32, 1] (openWakeWord's
  ``AudioFeatures._get_embeddings``).
- Moonshine spelling CNN: 1 s clips, n_fft 512 periodic Hann, hop 125, centred with
  reflect padding, power 2, 64 Slaney mels 20–8000 Hz (librosa's ``norm="slaney"``
  filters), ``log(x + 1e-6)``, crop/pad to 128 frames, per-clip ``(x - mean) / std``
  (ddof 1, std clamped at 1e-3) → [1, 1, 64, 128]. Reproduces upstream's 200/220 top-1.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from voiced.audio.frames import SAMPLE_RATE
from voiced.audio.source import WavSource
from voiced.errors import ConfigError, ModelError
from voiced.vad.silero import CHUNK_SAMPLES, CONTEXT_SAMPLES, STATE_SHAPE

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["OwwFrontEnd", "SpellingFrontEnd", "load_audio", "silero_run"]

Feeds = dict[str, np.ndarray]


def load_audio(path: str | Path) -> np.ndarray:
    """A WAV file of any rate/layout as mono float32 at 16 kHz (voiced's own reader and resampler)."""
    with WavSource(path, chunk_ms=1000) as source:
        chunks = list(source.chunks())
    return np.concatenate(chunks).astype(np.float32, copy=False) if chunks else np.zeros(0, np.float32)


# ------------------------------------------------------------------------------ Silero


def silero_run(session: ort.InferenceSession, audio: np.ndarray, keep_feeds: bool = True) -> tuple[list[Feeds], np.ndarray]:
    """Run Silero over ``audio`` with carried state; (feeds of every call, speech probability per chunk)."""
    sr = np.array(SAMPLE_RATE, dtype=np.int64)
    state = np.zeros(STATE_SHAPE, np.float32)
    context = np.zeros(CONTEXT_SAMPLES, np.float32)
    feeds: list[Feeds] = []
    probs = np.empty(len(audio) // CHUNK_SAMPLES, np.float32)
    for j in range(len(probs)):
        chunk = audio[j * CHUNK_SAMPLES : (j + 1) * CHUNK_SAMPLES]
        feed = {"input": np.concatenate([context, chunk])[np.newaxis], "state": state, "sr": sr}
        if keep_feeds:
            feeds.append(feed)
        prob, state = session.run(None, feed)
        probs[j] = float(np.asarray(prob).reshape(-1)[0])
        context = chunk[-CONTEXT_SAMPLES:]
    return feeds, probs


# ------------------------------------------------------------------------------ openWakeWord

OWW_WINDOW = 76
"""Mel frames per embedding window (775 ms)."""
OWW_STEP = 8
"""Mel frames between windows (80 ms)."""
OWW_BINS = 32


class OwwFrontEnd:
    """openWakeWord's feature pipeline up to the embedding model's input."""

    def __init__(self, melspectrogram: str | Path) -> None:
        from voiced.runtime.onnx import SessionOptions, create_session

        self.path = Path(melspectrogram)
        self.session = create_session(self.path, SessionOptions(threads=1))
        self._input = self.session.get_inputs()[0].name

    def mel(self, audio: np.ndarray) -> np.ndarray:
        """[frames, 32] after openWakeWord's ``x / 10 + 2``."""
        # openWakeWord feeds int16 sample values as float32, not [-1, 1].
        pcm = (np.asarray(audio, np.float32) * 32768.0)[np.newaxis]
        out = np.asarray(self.session.run(None, {self._input: pcm})[0], np.float32)
        if out.shape[-1] != OWW_BINS:
            raise ModelError(f"{self.path}: expected {OWW_BINS} mel bins, got output shape {out.shape}")
        return out.reshape(-1, OWW_BINS) / 10.0 + 2.0

    def windows(self, audio: np.ndarray) -> np.ndarray:
        """Embedding inputs [N, 76, 32, 1]; a clip under 76 frames is padded in front with ones,
        as openWakeWord's mel buffer starts."""
        mel = self.mel(audio)
        if len(mel) < OWW_WINDOW:
            mel = np.concatenate([np.ones((OWW_WINDOW - len(mel), OWW_BINS), np.float32), mel])
        starts = range(0, len(mel) - OWW_WINDOW + 1, OWW_STEP)
        return np.stack([mel[s : s + OWW_WINDOW] for s in starts])[..., np.newaxis].astype(np.float32)


def oww_noise(seconds: float, seed: int = 0) -> np.ndarray:
    """Quiet noise (int16 ±1000, as openWakeWord fills its buffers at start) in [-1, 1] units."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-1000, 1000, int(seconds * SAMPLE_RATE)) / 32768.0).astype(np.float32)


# ------------------------------------------------------------------------------ spelling CNN


@dataclass(frozen=True)
class SpellingFrontEnd:
    """Log-mel for the moonshine spelling CNN, parameters from ``spelling_cnn_meta.json``."""

    classes: tuple[str, ...]
    """Class names in logit order."""
    sample_rate: int = 16_000
    """Must be 16 kHz (the rate voiced's audio path delivers)."""
    n_mels: int = 64
    """Mel bins (``n_mels``)."""
    hop: int = 125
    """Samples between frames (``hop_length``)."""
    frames: int = 128
    """Frames per clip after crop/pad (``target_frames``)."""
    clip_seconds: float = 1.0
    """Clip length (``clip_seconds``)."""
    n_fft: int = 512
    """Not in the meta file; from the model card (SOURCE.txt): n_fft 512."""
    f_min: float = 20.0
    """Lowest mel edge in Hz (model card)."""
    f_max: float = 8000.0
    """Highest mel edge in Hz (model card)."""

    def __post_init__(self) -> None:
        if self.sample_rate != SAMPLE_RATE:
            raise ConfigError("sample_rate", f"the spelling CNN front end runs at 16 kHz, meta says {self.sample_rate}")
        if not self.classes:
            raise ConfigError("classes", "the meta file lists no classes")

    @classmethod
    def from_meta(cls, path: str | Path) -> SpellingFrontEnd:
        path = Path(path)
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError("--meta", f"cannot read the spelling CNN meta file: {exc}", str(path)) from None
        return cls(
            classes=tuple(meta.get("classes", ())),
            sample_rate=int(meta.get("sample_rate", 16_000)),
            n_mels=int(meta.get("n_mels", 64)),
            hop=int(meta.get("hop_length", 125)),
            frames=int(meta.get("target_frames", 128)),
            clip_seconds=float(meta.get("clip_seconds", 1.0)),
        )

    @property
    def clip_samples(self) -> int:
        return round(self.clip_seconds * self.sample_rate)

    def clips(self, audio: np.ndarray) -> list[np.ndarray]:
        """A short recording is one clip; a long one is cut into clips every half clip."""
        n = self.clip_samples
        if len(audio) <= n * 3 // 2:
            return [audio]
        return [audio[s : s + n] for s in range(0, len(audio) - n + 1, n // 2)]

    def log_mel(self, clip: np.ndarray) -> np.ndarray:
        """One clip → [1, 1, n_mels, frames] float32."""
        n = self.clip_samples
        x = np.asarray(clip, np.float32)[:n]
        if len(x) < n:
            x = np.pad(x, (0, n - len(x)))
        half = self.n_fft // 2
        padded = np.pad(x, (half, half), mode="reflect")
        count = 1 + (len(padded) - self.n_fft) // self.hop
        index = np.arange(self.n_fft)[np.newaxis, :] + self.hop * np.arange(count)[:, np.newaxis]
        power = np.abs(np.fft.rfft(padded[index] * _hann(self.n_fft), axis=1)) ** 2
        mel = np.log(_slaney_filters(self.sample_rate, self.n_fft, self.n_mels, self.f_min, self.f_max) @ power.T + 1e-6)
        mel = mel[:, : self.frames]
        if mel.shape[1] < self.frames:
            mel = np.pad(mel, ((0, 0), (0, self.frames - mel.shape[1])))
        mel = (mel - mel.mean()) / max(float(mel.std(ddof=1)), 1e-3)
        return mel[np.newaxis, np.newaxis].astype(np.float32)

    def batch(self, clips: Sequence[np.ndarray]) -> np.ndarray:
        return np.concatenate([self.log_mel(c) for c in clips]) if clips else np.zeros((0, 1, self.n_mels, self.frames), np.float32)


def _hann(n: int) -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)  # periodic


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    # Slaney: linear below 1 kHz, logarithmic above (librosa's default, htk=False).
    f = np.asarray(f, np.float64)
    lin = f / (200.0 / 3)
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), lin)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), m * (200.0 / 3))


@functools.lru_cache(maxsize=4)
def _slaney_filters(sr: int, n_fft: int, n_mels: int, f_min: float, f_max: float) -> np.ndarray:
    fft_freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, np.newaxis] - fft_freqs[np.newaxis, :]
    lower = -ramps[:-2] / widths[:-1, np.newaxis]
    upper = ramps[2:] / widths[1:, np.newaxis]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, np.newaxis]  # Slaney area normalisation
    return weights.astype(np.float32)
