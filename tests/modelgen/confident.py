"""The ``style="confident"`` head of a generated transducer: decisions with margins, as after training.

A random-weight transducer decides every frame by near-ties (its top-2 logits differ by
almost nothing), so rounding its weights to FP16 already changes utterances and INT8 can
be judged only per decision. A trained model is confident: blank wins by a wide margin
while a sound lasts, a token wins by a wide margin where a new one starts. This head gives
the generated encoder that behaviour, still in the exact sherpa-onnx layout and still
deciding through every quantized layer:

- the encoder scores K sound classes on its last hidden state (``class_head_*``), averages
  the scores over neighbouring frames of the chunk and turns them into a soft class code;
- the decoder turns the newest token back into the code of its class, which the joiner
  subtracts: the class that was just emitted stays blank, a new class emits its token only
  once its share of the code clears the blank logit (hysteresis, as CTC-like peaks give);
- silence drives blank, as before.

``fit_head`` places the class centroids by k-means on the model's own hidden states of real
recordings (the calibration audio, never the audio the model is judged on), so decision
boundaries lie between clusters of speech, as training puts them. A random head, or one
not fitted, keeps the margins but emits at near-ties more often.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

__all__ = ["CONFIDENT", "ConfidentHead", "fit_head"]

HEAD_WEIGHT, HEAD_BIAS = "class_head_weight", "class_head_bias"
"""Initializer name prefixes ``fit_head`` looks for."""


@dataclass(frozen=True)
class ConfidentHead:
    classes: int = 8
    """Sound classes, each emitting one token."""
    code_dims: int = 3
    """Joiner channels per class; their rounding errors partly cancel (dithered scales)."""
    smooth_frames: int = 7
    """Class scores averaged over this many output frames of the chunk."""
    temperature: float = 0.3
    """Scale of the fitted scores (distance units) before the softmax: lower = softer code, fewer tokens."""
    code_gain: float = 1.0
    token_gain: float = 30.0
    blank_bias: float = 18.0
    """A new class emits when token_gain * tanh(code share) > blank_bias: about 69% of the code."""
    silence_gain: float = 8.0
    blank_silence_gain: float = 40.0
    ffn_scale: float = 0.25
    """Layer outputs added to the residual stream at this share of the random style's (see transducer.py)."""

    def dither(self) -> np.ndarray:
        return np.linspace(0.8, 1.25, self.code_dims) if self.code_dims > 1 else np.ones(1)

    def class_tokens(self, vocab: int) -> np.ndarray:
        """The token each class emits: distinct ids from the whole table (not blank, sos/eos or unk)."""
        return 3 + np.random.default_rng(123).choice(vocab - 3, self.classes, replace=False)

    def check(self, joiner_dim: int) -> None:
        if self.classes * self.code_dims > joiner_dim - 1:
            raise ValueError(f"{self.classes} classes x {self.code_dims} channels do not fit joiner_dim {joiner_dim}")


CONFIDENT = ConfidentHead()


def encoder_head(g, head: ConfidentHead, h: str, silence: str, width: int, joiner_dim: int) -> str:
    """[N, T', width] -> encoder_out [N, T', joiner_dim]: channel 0 silence, then the class code."""
    head.check(joiner_dim)
    k, m = head.classes, head.smooth_frames
    hn = g.norm(h)
    w = g.const(g.randn((width, k), 1 / math.sqrt(width)), HEAD_WEIGHT)
    scores = g.op("Add", [g.op("MatMul", [hn, w]), g.const(np.zeros(k, np.float32), HEAD_BIAS)])
    if m > 1:  # within the chunk, as a chunked encoder attends to its whole chunk
        pooled = g.op("AveragePool", [g.op("Transpose", [scores], perm=[0, 2, 1])], kernel_shape=[m],
                      pads=[m // 2, m - 1 - m // 2], count_include_pad=0, strides=[1])
        scores = g.op("Transpose", [pooled], perm=[0, 2, 1])
    share = g.op("Softmax", [scores], axis=2)
    code = np.zeros((k, joiner_dim - 1), np.float32)
    for c in range(k):
        code[c, c * head.code_dims:(c + 1) * head.code_dims] = head.code_gain * head.dither()
    silent = g.op("Mul", [silence, g.f32(head.silence_gain)])
    return g.op("Concat", [silent, g.linear(share, code)], axis=2)


def joiner_weights(rng: np.random.Generator, head: ConfidentHead, vocab: int, joiner_dim: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """W [joiner_dim, vocab], b [vocab]: blank from channel 0, each class token from its channels."""
    head.check(joiner_dim)
    w = rng.standard_normal((joiner_dim, vocab)) * 0.05  # the other tokens: small, never winning
    w[0, :] = 0.0
    ids = head.class_tokens(vocab)
    w[1:, ids] = 0.0
    for c, token in enumerate(ids):
        w[1 + c * head.code_dims:1 + (c + 1) * head.code_dims, token] = head.token_gain / head.code_dims
    w[:, 0] = 0.0
    w[0, 0] = head.blank_silence_gain
    b = np.zeros(vocab)
    b[0], b[1], b[2] = head.blank_bias, -100.0, -100.0
    return w, b


def decoder_graph(g, head: ConfidentHead, joiner_w: np.ndarray, decoder_dim: int, context_size: int) -> str:
    """icefall's stateless decoder shape (embedding, conv over the context, ReLU, projection) that
    maps the newest token to minus its class code; the older token adds a tenth of its own."""
    joiner_dim, vocab = joiner_w.shape
    y = g.input("y", ["N", context_size], TensorProto.INT64)
    keep = g.op("Cast", [g.op("GreaterOrEqual", [y, g.i64(0)])], to=TensorProto.FLOAT)
    ids = g.op("Max", [y, g.i64(0)])
    table = np.abs(g.randn((vocab, decoder_dim), 0.02))
    table[0] = 0.0
    classes = head.class_tokens(vocab)
    table[classes, :] = 0.0
    table[classes, np.arange(head.classes)] = 1.0
    emb = g.op("Gather", [g.const(table), ids], axis=0)
    emb = g.op("Mul", [emb, g.op("Unsqueeze", [keep, g.i64([2])])])  # a negative id contributes nothing
    conv = np.full((context_size, decoder_dim), 0.1, np.float32)
    conv[-1] = 1.0
    hidden = g.op("Relu", [g.op("ReduceSum", [g.op("Mul", [emb, g.const(conv)]), g.i64([1])], keepdims=0)])
    w = np.zeros((decoder_dim, joiner_dim), np.float32)
    for c in range(head.classes):
        w[c, 1 + c * head.code_dims:1 + (c + 1) * head.code_dims] = -head.code_gain * head.dither()
    return g.linear(hidden, w, np.zeros(joiner_dim, np.float32))


def fit_head(directory: str | Path, audio: Sequence[str | Path], head: ConfidentHead = CONFIDENT, seed: int = 0) -> int:
    """k-means the encoder's last hidden states of ``audio`` (WAV files or directories) into the
    head's classes and write the centroids into ``encoder.onnx``. Returns the frames used."""
    from quantize.calibration import find_audio
    from quantize.decoding import capture
    from voiced.asr.model import ModelFiles, TransducerModel
    from voiced.runtime.onnx import SessionOptions

    directory = Path(directory)
    encoder = onnx.load(str(directory / "encoder.onnx"))
    weight = next(i for i in encoder.graph.initializer if i.name.startswith(f"/{HEAD_WEIGHT}"))
    bias = next(i for i in encoder.graph.initializer if i.name.startswith(f"/{HEAD_BIAS}"))
    hidden = next(n.input[0] for n in encoder.graph.node if n.op_type == "MatMul" and n.input[1] == weight.name)
    probe = onnx.ModelProto()
    probe.CopyFrom(encoder)
    probe.graph.output.append(helper.make_tensor_value_info(hidden, TensorProto.FLOAT, None))
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])

    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # "FP32 model without a manifest": expected here
    try:
        model = TransducerModel(ModelFiles(directory / "encoder.onnx", directory / "decoder.onnx",
                                           directory / "joiner.onnx", directory / "tokens.txt"), SessionOptions(threads=1))
    finally:
        logging.disable(previous)
    # Every encoder call of streaming the audio (features with the states the stream carries).
    feeds = capture(model, find_audio(audio, "fit_audio"), 1 << 30, "fit the confident head")["encoder"]
    frames = np.concatenate([session.run(None, f)[-1][0] for f in feeds])
    centroids = _kmeans(frames.astype(np.float64), head.classes, np.random.default_rng(seed))
    # argmax of x.c - |c|^2/2 is the nearest centroid
    w = (centroids.T * head.temperature).astype(np.float32)
    b = (-(centroids**2).sum(axis=1) / 2 * head.temperature).astype(np.float32)
    weight.CopyFrom(numpy_helper.from_array(w, weight.name))
    bias.CopyFrom(numpy_helper.from_array(b, bias.name))
    onnx.save(encoder, str(directory / "encoder.onnx"))
    return len(frames)


def _kmeans(x: np.ndarray, k: int, rng: np.random.Generator, restarts: int = 8) -> np.ndarray:
    """The tightest of ``restarts`` k-means runs (a poor local optimum puts boundaries inside clusters)."""
    runs = [_lloyd(x, k, rng) for _ in range(restarts)]
    return min(runs, key=lambda c: ((x[:, None, :] - c[None]) ** 2).sum(-1).min(axis=1).sum())


def _lloyd(x: np.ndarray, k: int, rng: np.random.Generator, iterations: int = 50) -> np.ndarray:
    """Lloyd's k-means with k-means++ seeding."""
    centroids = [x[rng.integers(len(x))]]
    for _ in range(k - 1):
        d2 = np.min(((x[:, None, :] - np.array(centroids)[None]) ** 2).sum(-1), axis=1)
        centroids.append(x[rng.choice(len(x), p=d2 / d2.sum())])
    c = np.array(centroids)
    for _ in range(iterations):
        label = ((x[:, None, :] - c[None]) ** 2).sum(-1).argmin(axis=1)
        c = np.array([x[label == j].mean(axis=0) if (label == j).any() else c[j] for j in range(k)])
    return c
