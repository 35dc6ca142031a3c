"""openWakeWord's front end on a stream of audio: 96-d embeddings, one per 80 ms frame, two ways.

Both take int16-valued samples (``MEL_CONTEXT`` samples of context, then whole 80 ms frames) and
give the embedding of the last 76 mel frames at the end of each frame, carrying their per-stream
state in an opaque value:

- :class:`WindowFrontEnd` runs the published models: ``melspectrogram.onnx`` once per frame (it
  clips each call's output to 80 dB under that call's loudest value, so frames are computed one by
  one, as openWakeWord does), then ``embedding_model.onnx`` on every frame's whole 76-frame window
  (the state: the last 76 mel frames). 68 of those 76 frames were seen by the frame before.
- :class:`StreamingFrontEnd` runs ``frontend.stream.onnx`` (``voiced-quantize wake-stream``): both
  models in one graph, called once for all of a window's frames. The mel part clips each 80 ms
  frame's 8 mel frames by their own loudest value, as the per-frame calls do; the embedding part
  computes only the new frames of every layer. Its time axis has unpadded convolutions and
  poolings whose strides multiply to 8, the step between windows, so a layer's frames for a
  window are its frames for the window before, shifted: the graph caches the few input frames each
  time-axis convolution needs (the state) and gives the same numbers (bit-identical on real
  speech) for about a third of the CPU.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from voiced.errors import ModelError

__all__ = [
    "CACHES_METADATA", "EMBEDDING", "FRAME_SAMPLES", "FRONTEND_STREAM", "MEL_BINS", "MEL_CONTEXT", "MEL_PER_FRAME",
    "STREAM_AUDIO_INPUT", "STREAM_OUTPUT", "WARMUP_MEL", "WINDOW", "FrontEnd", "StreamingFrontEnd", "WindowFrontEnd",
    "decode_caches", "encode_caches",
]

FRAME_SAMPLES = 1280
"""One wake-word frame: 80 ms at 16 kHz."""
MEL_CONTEXT = 480
"""Samples before a frame's own that its mel frames see (openWakeWord's 3 hops of context)."""
MEL_PER_FRAME = 8
"""Mel frames per 80 ms frame: the step between embedding windows."""
WINDOW = 76
"""Mel frames per embedding window."""
MEL_BINS = 32
EMBEDDING = 96
FRONTEND_STREAM = "frontend.stream.onnx"
"""The streaming front end's file, beside the models it was made from (``voiced-quantize wake-stream``)."""
STREAM_AUDIO_INPUT = "audio"
"""The streaming graph's first input, samples [1, 480 + 1280n]; every further input is a cache."""
STREAM_OUTPUT = "embeddings"
"""The streaming graph's first output [n, 96]; output k+1 is the next value of input k+1."""
CACHES_METADATA = "voiced.initial_caches"
"""Metadata key of the caches after openWakeWord's initial mel history (an .npz, base64)."""
WARMUP_MEL = 80
"""Mel frames that fill every cache (the receptive field is the 76-frame window), in whole frames."""
ONES = 1.0
"""openWakeWord's mel history before any audio (its buffer starts as ``np.ones``)."""


class FrontEnd(Protocol):
    """Embeddings of an audio stream; a state value belongs to one stream and is never changed in place."""

    def initial_state(self) -> Any:
        """The state after openWakeWord's initial mel history (76 frames of ones)."""

    def advance(self, state: Any, samples: np.ndarray) -> tuple[np.ndarray, Any]:
        """Embeddings [n, 96] at the end of each frame of ``samples`` (480 + 1280n int16-valued floats),
        and the next state."""


class WindowFrontEnd:
    """The published models: a mel call per frame, then every frame's 76-frame window in one batch."""

    def __init__(self, melspec: Any, embedding: Any) -> None:
        self.melspec, self.embedding = melspec, embedding
        self._mel_in = melspec.get_inputs()[0].name
        self._emb_in = embedding.get_inputs()[0].name

    def initial_state(self) -> np.ndarray:
        return np.full((WINDOW, MEL_BINS), ONES, np.float32)

    def mel(self, samples: np.ndarray) -> np.ndarray:
        """Mel frames [8, 32] (openWakeWord's x/10 + 2) of one frame's samples, context included."""
        out = self.melspec.run(None, {self._mel_in: samples[np.newaxis].astype(np.float32, copy=False)})[0]
        return out.reshape(-1, MEL_BINS) / 10.0 + 2.0

    def advance(self, state: np.ndarray, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = (len(samples) - MEL_CONTEXT) // FRAME_SAMPLES
        mels = [self.mel(samples[j * FRAME_SAMPLES:(j + 1) * FRAME_SAMPLES + MEL_CONTEXT]) for j in range(n)]
        return self.embed(state, np.concatenate(mels))

    def embed(self, state: np.ndarray, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The embedding part alone: mel frames [8n, 32] in."""
        n = len(mel) // MEL_PER_FRAME
        history = np.concatenate([state, mel])
        ends = range(len(history) - MEL_PER_FRAME * (n - 1), len(history) + 1, MEL_PER_FRAME)
        windows = np.stack([history[e - WINDOW:e] for e in ends])[:, :, :, np.newaxis]
        out = self.embedding.run(None, {self._emb_in: windows.astype(np.float32, copy=False)})[0]
        return out.reshape(n, EMBEDDING), history[-WINDOW:]


class StreamingFrontEnd:
    """``frontend.stream.onnx``: samples and the caches in, embeddings and the next caches out, one call."""

    def __init__(self, session: Any, path: Path) -> None:
        inputs, outputs = session.get_inputs(), session.get_outputs()
        meta = session.get_modelmeta().custom_metadata_map
        if (inputs[0].name != STREAM_AUDIO_INPUT or outputs[0].name != STREAM_OUTPUT or len(inputs) != len(outputs)
                or len(inputs) < 2 or CACHES_METADATA not in meta):
            raise ModelError(f"{path}: not a streaming wake-word front end (inputs {[i.name for i in inputs]},"
                             f" outputs {[o.name for o in outputs]}); make it with voiced-quantize wake-stream")
        self.session = session
        self._caches = [i.name for i in inputs[1:]]
        self._outputs = [o.name for o in outputs]
        initial = decode_caches(meta[CACHES_METADATA])
        if [list(c.shape) for c in initial] != [list(i.shape) for i in inputs[1:]]:
            raise ModelError(f"{path}: its initial caches do not fit its cache inputs; make it again with voiced-quantize wake-stream")
        self._initial = initial

    def initial_state(self) -> tuple[np.ndarray, ...]:
        return self._initial

    def advance(self, state: tuple[np.ndarray, ...], samples: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        feeds = dict(zip(self._caches, state))
        feeds[STREAM_AUDIO_INPUT] = samples[np.newaxis].astype(np.float32, copy=False)
        out = self.session.run(self._outputs, feeds)
        return out[0], tuple(out[1:])


def encode_caches(caches: list[np.ndarray]) -> str:
    buf = io.BytesIO()
    np.savez(buf, *caches)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_caches(text: str) -> tuple[np.ndarray, ...]:
    with np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False) as npz:
        return tuple(np.asarray(npz[f"arr_{i}"], np.float32) for i in range(len(npz.files)))
