"""Whisper's log-mel front end, as sherpa-onnx computes it, whole or as the audio arrives.

kaldi-native-fbank's Whisper fbank is slow (a recursive FFT with its twiddles recomputed per
frame: ~40 ms of CPU per second of audio on an x86 VM), and sherpa-onnx runs it over the whole
utterance after its end. ``LogMelFrames`` runs it while the utterance is spoken instead: at the
end only the last frame is left, and the features are bit for bit the same (kaldi's online
frames never change once ready; the frames at the end are computed again from the audio around
them, as they would be in one pass).
"""

from __future__ import annotations

import numpy as np

from voiced.asr.cmath import log10f
from voiced.audio.frames import SAMPLE_RATE

__all__ = ["HOP", "LogMelFrames", "log10_mel", "log_mel", "normalize"]

HOP = 160
"""Samples per feature frame (10 ms)."""
_FLOOR = np.float32(1e-10)


def _fbank(n_mels: int):
    import kaldi_native_fbank as knf

    opts = knf.WhisperFeatureOptions()
    opts.dim = n_mels
    return knf.OnlineWhisperFbank(opts)


def _frames(fbank, begin: int, n_mels: int) -> np.ndarray:
    """log10 mel energies [frames, n_mels] of ``fbank``'s ready frames from ``begin``."""
    n = fbank.num_frames_ready
    if n <= begin:
        return np.zeros((0, n_mels), np.float32)
    energies = np.stack([np.asarray(fbank.get_frame(i), np.float32) for i in range(begin, n)])
    return log10f(np.maximum(energies, _FLOOR))  # C's log10f, as sherpa-onnx (see voiced.asr.cmath)


def log10_mel(samples: np.ndarray, n_mels: int) -> np.ndarray:
    """log10 of Whisper's mel energies [frames, n_mels] of 16 kHz float ``samples`` (one pass)."""
    fbank = _fbank(n_mels)
    fbank.accept_waveform(SAMPLE_RATE, np.ascontiguousarray(samples, np.float32))
    fbank.input_finished()
    return _frames(fbank, 0, n_mels)


def normalize(log10_energies: np.ndarray) -> np.ndarray:
    """Whisper's features from log10 mel energies: clamped to 8 below their maximum, (x + 4) / 4."""
    if not len(log10_energies):
        return log10_energies
    return (np.maximum(log10_energies, log10_energies.max() - 8.0) + 4.0) / 4.0


def log_mel(samples: np.ndarray, n_mels: int) -> np.ndarray:
    """Whisper's log-mel features [frames, n_mels] of 16 kHz float samples, as sherpa-onnx makes them."""
    return normalize(log10_mel(samples, n_mels))


class LogMelFrames:
    """The log10 mel energies of one utterance, computed as its audio comes in."""

    def __init__(self, n_mels: int) -> None:
        self.n_mels = n_mels
        self._fbank = _fbank(n_mels)
        self._ready: list[np.ndarray] = []  # blocks of final frames, in order
        self._count = 0
        self.finished = False

    def accept_waveform(self, samples: np.ndarray) -> None:
        """Add 16 kHz float samples; the frames they complete are computed now."""
        if self.finished:
            raise RuntimeError("accept_waveform after input_finished")
        if len(samples):
            self._fbank.accept_waveform(SAMPLE_RATE, np.ascontiguousarray(samples, np.float32))
            self._take()

    def input_finished(self) -> None:
        """No more audio: the last frames (the signal reflected at its end) are computed."""
        if not self.finished:
            self.finished = True
            self._fbank.input_finished()
            self._take()

    def frames(self, samples: np.ndarray) -> np.ndarray:
        """All frames of ``samples`` (everything given so far) as if the input ended here: what
        ``log10_mel(samples)`` gives, computing only the frames that touch the end."""
        ready = np.concatenate(self._ready) if len(self._ready) > 1 else (
            self._ready[0] if self._ready else np.zeros((0, self.n_mels), np.float32))
        self._ready = [ready] if len(ready) else []
        if self.finished or not len(samples):
            return ready
        if self._count < 2:
            return log10_mel(samples, self.n_mels)
        # frame i's window starts at i * HOP - 120: frames of the audio from frame (count - 1) on are the
        # same as the whole's from their second one (the first sees this cut as its start)
        begin = (self._count - 1) * HOP
        tail = log10_mel(samples[begin:], self.n_mels)[1:]
        return np.concatenate([ready, tail])

    def _take(self) -> None:
        block = _frames(self._fbank, self._count, self.n_mels)
        if len(block):
            self._ready.append(block)
            self._count += len(block)
