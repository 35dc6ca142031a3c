"""Frames of 10 ms and windows of N frames: the clock of the listening loop."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from voiced.errors import ConfigError

__all__ = ["FRAME_MS", "FRAME_SAMPLES", "SAMPLE_RATE", "Window", "Windower"]

SAMPLE_RATE = 16_000
"""The rate every stage after capture works at."""

FRAME_MS = 10
FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000
"""160 samples: one 10 ms frame at 16 kHz."""


@dataclass(frozen=True)
class Window:
    """``frames`` consecutive 10 ms frames of mono float32 audio at 16 kHz."""

    samples: np.ndarray
    """float32 in [-1, 1], ``frames * FRAME_SAMPLES`` long (the last window may be shorter)."""
    start: float
    """Stream time of the first sample, in seconds."""
    index: int
    """0-based window number."""

    @property
    def end(self) -> float:
        return self.start + len(self.samples) / SAMPLE_RATE


class Windower:
    """Cuts chunks of any length into windows of ``window_frames`` frames.

    Keeps the remainder between calls, so a chunk boundary never moves a window.
    """

    def __init__(self, window_frames: int = 10) -> None:
        if window_frames < 1:
            raise ConfigError("window_frames", f"must be at least 1, got {window_frames}")
        self.window_frames = window_frames
        self.window_samples = window_frames * FRAME_SAMPLES
        self._pending = np.zeros(0, dtype=np.float32)
        self._consumed = 0  # samples already emitted in windows
        self._index = 0

    def push(self, chunk: np.ndarray) -> Iterator[Window]:
        """Add mono float32 samples; yield every window that is now complete."""
        if len(chunk):
            self._pending = np.concatenate([self._pending, np.asarray(chunk, dtype=np.float32)])
        n = self.window_samples
        while len(self._pending) >= n:
            samples, self._pending = self._pending[:n], self._pending[n:]
            yield self._emit(samples)

    def flush(self) -> Iterator[Window]:
        """Yield the incomplete last window, if any samples are left."""
        if len(self._pending):
            samples, self._pending = self._pending, np.zeros(0, dtype=np.float32)
            yield self._emit(samples)

    def windows(self, chunks: Iterable[np.ndarray]) -> Iterator[Window]:
        """Windows of a whole chunk stream, the short tail included."""
        for chunk in chunks:
            yield from self.push(chunk)
        yield from self.flush()

    def _emit(self, samples: np.ndarray) -> Window:
        window = Window(samples=samples, start=self._consumed / SAMPLE_RATE, index=self._index)
        self._consumed += len(samples)
        self._index += 1
        return window
