"""Dereverberation of one utterance by weighted prediction error (WPE).

A microphone across the room hears each sound again and again from the walls for a few hundred
milliseconds; the late part of that tail smears one word into the next, and a small recognizer
(Whisper tiny.en) then hears "shade" for "awning" or "13" for "15". WPE (Nakatani et al., 2010;
Yoshioka and Nakatani, 2012) predicts each short-time spectrum from the spectra at least
``delay`` frames earlier (one linear filter per frequency, weighted by the inverse of the
speech's power so that loud direct sound is not what gets predicted) and subtracts the
prediction: what a room adds late is predictable from what was said before, the new speech is
not. The direct sound and early reflections (within ``delay`` frames) are left alone, so read
speech close to the microphone passes almost unchanged.

It works on a whole utterance (the filter is estimated from all of it), which is how Whisper
decodes anyway: once per utterance, after the endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voiced.errors import ConfigError

__all__ = ["DereverbConfig", "dereverberate", "wpe"]


@dataclass(frozen=True)
class DereverbConfig:
    """WPE's settings (16 kHz audio)."""

    taps: int = 10
    """Earlier frames each frequency's prediction filter uses (10 x 8 ms: the tail's first 80 ms
    beyond ``delay``; later reverberation is predicted through the earlier, already reverberant
    frames)."""
    delay: int = 3
    """Frames (8 ms each) before the filter starts: the direct sound and the first reflections
    are kept, they help intelligibility."""
    iterations: int = 3
    """Re-estimates of the speech's power from the previous estimate of the dry speech."""
    fft: int = 512
    """Short-time spectrum length in samples (32 ms)."""
    hop: int = 128
    """Samples between spectra (8 ms)."""

    def __post_init__(self) -> None:
        if not 1 <= self.taps <= 64:
            raise ConfigError("taps", f"must be within 1..64, got {self.taps}")
        if not 1 <= self.delay <= 64:
            raise ConfigError("delay", f"must be within 1..64, got {self.delay}")
        if not 1 <= self.iterations <= 10:
            raise ConfigError("iterations", f"must be within 1..10, got {self.iterations}")
        if self.fft < 16 or self.fft & (self.fft - 1):
            raise ConfigError("fft", f"must be a power of two >= 16, got {self.fft}")
        if not 1 <= self.hop <= self.fft // 2:
            raise ConfigError("hop", f"must be within 1..fft/2, got {self.hop}")


BLOCK = 128
"""Frames (1 s) whose delayed copies (``taps`` of them per frame) are held at once: ~5 MB, not
``taps`` times the utterance's spectra."""


def dereverberate(samples: np.ndarray, config: DereverbConfig = DereverbConfig()) -> np.ndarray:
    """``samples`` (mono float) with the late reverberation predicted and removed; same length."""
    x = np.asarray(samples, np.float32)
    if len(x) < config.fft:
        return x.copy()
    spectra = _stft(x, config)
    if spectra.shape[1] <= config.delay + config.taps:
        return x.copy()
    return _istft(wpe(spectra, config), len(x), config)


def wpe(spectra: np.ndarray, config: DereverbConfig = DereverbConfig()) -> np.ndarray:
    """WPE on short-time spectra (frequencies x frames, complex): the spectra less their predicted
    late reverberation."""
    frames = spectra.shape[1]
    lag = config.delay + config.taps - 1
    padded = np.concatenate([np.zeros((spectra.shape[0], lag), spectra.dtype), spectra], axis=1)
    blocks = [(b, min(b + BLOCK, frames)) for b in range(0, frames, BLOCK)]
    dry = spectra
    eye = np.eye(config.taps, dtype=spectra.dtype)
    for _ in range(config.iterations):
        power = np.abs(dry) ** 2
        # a floor relative to the loudest frame keeps silent frames from dominating the weights
        weight = (1.0 / np.maximum(power, max(float(power.max()) * 1e-10, 1e-30))).astype(np.float32)
        # per frequency: (sum_t w_t x_t x_t^H) g = sum_t w_t x_t y_t*, x_t the delayed frames
        correlation = np.zeros((spectra.shape[0], config.taps, config.taps), np.complex128)
        cross = np.zeros((spectra.shape[0], config.taps, 1), np.complex128)
        for begin, end in blocks:
            past = _past(padded, begin, end, config)
            weighted = (past * weight[:, begin:end, None]).transpose(0, 2, 1)
            correlation += weighted @ past.conj()
            cross += weighted @ spectra[:, begin:end, None].conj()
        # a silent frequency (all zero) would leave the system singular: a tiny ridge
        ridge = eye * np.maximum(np.abs(np.trace(correlation, axis1=1, axis2=2)) * 1e-10, 1e-30)[:, None, None]
        filters = np.linalg.solve(correlation + ridge, cross).conj()  # (F, K, 1)
        dry = np.concatenate([spectra[:, begin:end] - (_past(padded, begin, end, config) @ filters)[..., 0]
                              for begin, end in blocks], axis=1)
    return dry


def _past(padded: np.ndarray, begin: int, end: int, config: DereverbConfig) -> np.ndarray:
    """(F, end - begin, taps): for frame t, the frames t - delay, t - delay - 1, ... (zero before
    the start; ``padded`` has delay + taps - 1 zero frames in front)."""
    lag = config.delay + config.taps - 1
    return np.stack([padded[:, lag - config.delay - k + begin:lag - config.delay - k + end]
                     for k in range(config.taps)], axis=-1)


def _window(config: DereverbConfig) -> np.ndarray:
    return np.hanning(config.fft + 1)[:-1].astype(np.float32)  # periodic: overlap-adds evenly


def _stft(x: np.ndarray, config: DereverbConfig) -> np.ndarray:
    pad = config.fft - config.hop
    padded = np.concatenate([np.zeros(pad, np.float32), x, np.zeros(config.fft, np.float32)])
    count = (len(padded) - config.fft) // config.hop + 1
    index = np.arange(config.fft)[None, :] + config.hop * np.arange(count)[:, None]
    return np.fft.rfft(padded[index] * _window(config), axis=1).T.astype(np.complex64)


def _istft(spectra: np.ndarray, length: int, config: DereverbConfig) -> np.ndarray:
    window = _window(config)
    frames = np.fft.irfft(spectra.T, n=config.fft, axis=1) * window
    count = frames.shape[0]
    out = np.zeros(config.hop * (count - 1) + config.fft)
    norm = np.zeros_like(out)
    for i in range(count):  # weighted overlap-add: exact where the windows overlap
        out[i * config.hop:i * config.hop + config.fft] += frames[i]
        norm[i * config.hop:i * config.hop + config.fft] += window ** 2
    pad = config.fft - config.hop
    out = out / np.maximum(norm, 1e-8)
    return out[pad:pad + length].astype(np.float32)
