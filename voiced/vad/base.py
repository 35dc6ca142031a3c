"""What every VAD part shares: the kinds, the detector interface, frames, config parsing."""

from __future__ import annotations

from enum import Enum
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from voiced.audio.frames import FRAME_SAMPLES, Window

__all__ = ["SpeechDetector", "VadKind", "frame_count"]

T = TypeVar("T")


class VadKind(Enum):
    """Which voice activity detector the listening loop uses (the CLI's ``--vad`` values)."""

    NONE = "none"
    """No VAD: the whole stream is one utterance."""
    ENERGY = "energy"
    """The energy gate alone: frames louder than a threshold are speech."""
    SILERO = "silero"
    """The energy gate in front of Silero VAD: Silero runs only on windows the gate lets through."""


@runtime_checkable
class SpeechDetector(Protocol):
    """Per-stream speech detection: one probability per 10 ms frame of each window.

    Windows must be fed in stream order without gaps; a detector keeps whatever it needs
    between windows (a noise floor, a model state, samples not yet analysed).
    """

    def frame_probabilities(self, window: Window) -> np.ndarray:
        """Speech probability in [0, 1] of each frame of ``window`` (float32, ``frame_count`` long)."""
        ...

    def reset(self) -> None:
        """Forget the stream: the next window starts a new one."""
        ...


def frame_count(n_samples: int) -> int:
    """Frames in ``n_samples``; a short last frame (end of stream) counts as a frame."""
    return -(-n_samples // FRAME_SAMPLES)


