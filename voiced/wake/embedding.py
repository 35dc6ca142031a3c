"""openWakeWord's embedding model on a stream of mel frames, in its window form or its streaming form.

Both take the mel frames of whole 80 ms frames (8 per frame) and give one 96-d embedding per frame,
the embedding of the last 76 mel frames, carrying their per-stream state in an opaque value:

- :class:`WindowEmbedding` runs ``embedding_model.onnx`` as published: every frame's whole 76-frame
  window (the state is the last 76 mel frames). 68 of those 76 frames were seen by the frame before.
- :class:`StreamingEmbedding` runs ``embedding_model.stream.onnx`` (``voiced-quantize wake-stream``):
  the same network rewritten to compute only the new frames of every layer. Its time axis has
  valid convolutions and poolings whose strides multiply to 8, the step between windows, so each
  layer's frames for a window are its frames for the window before, shifted: the rewrite caches
  the few input frames each time-axis convolution needs (the state) and gives the same numbers
  (bit-identical on the real clips) at about a quarter of the cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from voiced.errors import ModelError

__all__ = [
    "MEL_BINS", "MEL_PER_FRAME", "STREAM_MEL_INPUT", "STREAM_OUTPUT", "STREAM_SUFFIX", "WINDOW", "WARMUP_MEL",
    "Embedder", "StreamingEmbedding", "WindowEmbedding", "stream_path",
]

MEL_PER_FRAME = 8
"""Mel frames per 80 ms frame: the step between embedding windows."""
WINDOW = 76
"""Mel frames per embedding window."""
MEL_BINS = 32
EMBEDDING = 96
STREAM_SUFFIX = ".stream.onnx"
"""``embedding_model.onnx`` → ``embedding_model.stream.onnx``, written by ``voiced-quantize wake-stream``."""
STREAM_MEL_INPUT = "mel"
"""The streaming form's first input, new mel frames [1, 8n, 32]; every further input is a cache."""
STREAM_OUTPUT = "embeddings"
"""The streaming form's first output [n, 96]; output k+1 is the next value of input k+1."""
WARMUP_MEL = 80
"""Mel frames that fill every cache of the streaming form (its receptive field is the 76-frame window),
rounded up to whole frames."""
ONES = 1.0
"""openWakeWord's mel history before any audio (its buffer starts as ``np.ones``)."""


def stream_path(embedding: Path) -> Path:
    """Where the streaming form of ``embedding`` lives."""
    return embedding.with_name(embedding.name.removesuffix(".onnx") + STREAM_SUFFIX)


class Embedder(Protocol):
    """Embeddings of a mel stream; the state value belongs to one stream and is never changed in place."""

    def initial_state(self) -> Any:
        """The state after openWakeWord's initial mel history (76 frames of ones)."""

    def advance(self, state: Any, mel: np.ndarray) -> tuple[np.ndarray, Any]:
        """Embeddings [n, 96] of the windows ending at each whole frame of ``mel`` [8n, 32], and the next state."""


class WindowEmbedding:
    """``embedding_model.onnx`` as published: one 76-frame window per embedding, all of a call's in one batch."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._input = session.get_inputs()[0].name

    def initial_state(self) -> np.ndarray:
        return np.full((WINDOW, MEL_BINS), ONES, np.float32)

    def advance(self, state: np.ndarray, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(mel) // MEL_PER_FRAME
        history = np.concatenate([state, mel])
        ends = range(len(history) - MEL_PER_FRAME * (n - 1), len(history) + 1, MEL_PER_FRAME)
        windows = np.stack([history[e - WINDOW:e] for e in ends])[:, :, :, np.newaxis]
        out = self.session.run(None, {self._input: windows.astype(np.float32, copy=False)})[0]
        return out.reshape(n, EMBEDDING), history[-WINDOW:]


class StreamingEmbedding:
    """``embedding_model.stream.onnx``: new mel frames and the caches in, embeddings and the next caches out."""

    def __init__(self, session: Any, path: Path) -> None:
        inputs, outputs = session.get_inputs(), session.get_outputs()
        if (inputs[0].name != STREAM_MEL_INPUT or outputs[0].name != STREAM_OUTPUT or len(inputs) != len(outputs)
                or len(inputs) < 2):
            raise ModelError(f"{path}: not a streaming embedding model (inputs {[i.name for i in inputs]},"
                             f" outputs {[o.name for o in outputs]}); rewrite it with voiced-quantize wake-stream")
        self.session = session
        self._caches = [i.name for i in inputs[1:]]
        self._outputs = [o.name for o in outputs]
        zeros = tuple(np.zeros(i.shape, np.float32) for i in inputs[1:])
        # The caches hold activations of earlier frames only: after a receptive field of ones,
        # nothing of the zeros remains, and the state is exactly the window form's history of ones.
        _, self._initial = self.advance(zeros, np.full((WARMUP_MEL, MEL_BINS), ONES, np.float32))

    def initial_state(self) -> tuple[np.ndarray, ...]:
        return self._initial

    def advance(self, state: tuple[np.ndarray, ...], mel: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        feeds = dict(zip(self._caches, state))
        feeds[STREAM_MEL_INPUT] = mel[np.newaxis].astype(np.float32, copy=False)
        out = self.session.run(self._outputs, feeds)
        return out[0], tuple(out[1:])
