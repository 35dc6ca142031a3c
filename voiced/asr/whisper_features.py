"""Whisper's log-mel front end, as sherpa-onnx computes it, whole or as the audio arrives.

The mel energies are kaldi-native-fbank's (what sherpa-onnx 2.0.1 computes), bit for bit:
computed by ``voiced.asr.whisper_fbank`` in numpy (~3x less CPU) where a probe finds it gives the
library's bits, by the library elsewhere. ``LogMelFrames`` computes them while the utterance is
spoken rather than after its end, as sherpa-onnx does: at the end only the last frame is left.
Frames once ready never change (kaldi's online frames); the frames at a cut are computed again
from the audio around it, the signal reflected at its end as in one pass.
"""

from __future__ import annotations

import numpy as np

from voiced.asr import whisper_fbank
from voiced.asr.cmath import log10f
from voiced.asr.whisper_fbank import HOP, frame_count, ready_frames
from voiced.audio.frames import SAMPLE_RATE

__all__ = ["HOP", "LogMelFrames", "log10_mel", "log_mel", "normalize"]

_FLOOR = np.float32(1e-10)


def _log10(energies: np.ndarray) -> np.ndarray:
    return log10f(np.maximum(energies, _FLOOR))  # C's log10f, as sherpa-onnx (see voiced.asr.cmath)


def log10_mel(samples: np.ndarray, n_mels: int) -> np.ndarray:
    """log10 of Whisper's mel energies [frames, n_mels] of 16 kHz float ``samples`` (one pass)."""
    samples = np.ascontiguousarray(samples, np.float32)
    if whisper_fbank.matches_knf(n_mels):
        return _log10(whisper_fbank.frame_energies(samples, 0, frame_count(len(samples)), n_mels))
    return _log10(whisper_fbank.library_energies(samples, n_mels))


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
        self._fbank = None if whisper_fbank.matches_knf(n_mels) else whisper_fbank.library_fbank(n_mels)
        self._ready: list[np.ndarray] = []  # blocks of final frames, in order
        self._count = 0  # final frames
        self._samples = 0  # samples given
        # numpy: the audio from the last final frame's start step on (offset a multiple of HOP)
        self._tail = np.zeros(0, np.float32)
        self._offset = 0
        self.finished = False

    def accept_waveform(self, samples: np.ndarray) -> None:
        """Add 16 kHz float samples; the frames they complete are computed now."""
        if self.finished:
            raise RuntimeError("accept_waveform after input_finished")
        if not len(samples):
            return
        samples = np.ascontiguousarray(samples, np.float32)
        self._samples += len(samples)
        if self._fbank is not None:
            self._fbank.accept_waveform(SAMPLE_RATE, samples)
            self._add(_log10(whisper_fbank.library_frames(self._fbank, self._count, self.n_mels)))
            return
        self._tail = np.concatenate([self._tail, samples])
        self._add(self._numpy_frames(self._count, ready_frames(self._samples)))
        keep = max(0, self._count - 1) * HOP  # frame count - 1 on: the next frame's window and more
        self._tail, self._offset = self._tail[keep - self._offset:], keep

    def input_finished(self) -> None:
        """No more audio: the last frames (the signal reflected at its end) are computed."""
        if self.finished:
            return
        self.finished = True
        if self._fbank is not None:
            self._fbank.input_finished()
            self._add(_log10(whisper_fbank.library_frames(self._fbank, self._count, self.n_mels)))
        else:
            self._add(self._numpy_frames(self._count, frame_count(self._samples)))

    def frames(self, samples: np.ndarray) -> np.ndarray:
        """All frames of ``samples`` (everything given so far) as if the input ended here: what
        ``log10_mel(samples)`` gives, computing only the frames that touch the end."""
        ready = np.concatenate(self._ready) if len(self._ready) > 1 else (
            self._ready[0] if self._ready else np.zeros((0, self.n_mels), np.float32))
        self._ready = [ready] if len(ready) else []
        if self.finished or not len(samples):
            return ready
        if self._fbank is None:
            return np.concatenate([ready, self._numpy_frames(self._count, frame_count(self._samples))])
        if self._count < 2:
            return log10_mel(samples, self.n_mels)
        # frame i's window starts at i * HOP - 120: frames of the audio from frame (count - 1) on are the
        # same as the whole's from their second one (the first sees this cut as its start)
        begin = (self._count - 1) * HOP
        return np.concatenate([ready, log10_mel(samples[begin:], self.n_mels)[1:]])

    def _numpy_frames(self, begin: int, end: int) -> np.ndarray:
        """log10 energies of frames ``begin``..``end`` from the kept audio (its frame indices shifted
        by its offset; the windows of those frames do not reach before it)."""
        shift = self._offset // HOP
        return _log10(whisper_fbank.frame_energies(self._tail, begin - shift, end - shift, self.n_mels))

    def _add(self, block: np.ndarray) -> None:
        if len(block):
            self._ready.append(block)
            self._count += len(block)
