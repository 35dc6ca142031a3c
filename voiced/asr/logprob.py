"""Log-softmax over the last axis, shared by the transducer searches and template-aware Whisper."""

from __future__ import annotations

import numpy as np

__all__ = ["log_softmax"]


def log_softmax(x: np.ndarray) -> np.ndarray:
    """``log(softmax(x))`` along the last axis, shifted by the maximum so large logits do not overflow."""
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
