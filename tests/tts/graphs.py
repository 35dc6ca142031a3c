"""ONNX graph helpers for the Piper-layout test voices (on top of tests.modelgen's builder)."""

from __future__ import annotations

import math

import onnx
from onnx import TensorProto

from tests.modelgen.transducer import _Graph

__all__ = ["VoiceGraph", "finish", "synth_inputs"]


class VoiceGraph(_Graph):
    """Conv, transposed conv and small conveniences."""

    def conv(self, x: str, cin: int, cout: int, k: int = 1, dilation: int = 1, gain: float = 1.0,
             bias: bool = True) -> str:
        w = self.randn((cout, cin, k), gain / math.sqrt(cin * k))
        inputs = [x, self.const(w, "conv_w")] + ([self.const(self.randn(cout, 0.01), "conv_b")] if bias else [])
        pad = dilation * (k - 1) // 2
        return self.op("Conv", inputs, kernel_shape=[k], dilations=[dilation], pads=[pad, pad])

    def up(self, x: str, cin: int, cout: int, k: int, stride: int) -> str:
        w = self.randn((cin, cout, k), 1.0 / math.sqrt(cin * k / stride))
        pad = (k - stride) // 2
        return self.op("ConvTranspose", [x, self.const(w, "up_w"), self.const(self.randn(cout, 0.01), "up_b")],
                       kernel_shape=[k], strides=[stride], pads=[pad, pad])

    def unsqueeze(self, x: str, axes: list[int]) -> str:
        return self.op("Unsqueeze", [x, self.i64(axes)])

    def squeeze(self, x: str, axes: list[int]) -> str:
        return self.op("Squeeze", [x, self.i64(axes)])

    def mul(self, *xs: str) -> str:
        out = xs[0]
        for x in xs[1:]:
            out = self.op("Mul", [out, x])
        return out

    def add(self, *xs: str) -> str:
        out = xs[0]
        for x in xs[1:]:
            out = self.op("Add", [out, x])
        return out

    def scale(self, scales: str, i: int) -> str:
        return self.slice(scales, i, i + 1, 0)  # [1], broadcasts


def synth_inputs(g: VoiceGraph, multi: bool) -> tuple[str, str, str, str | None]:
    """Piper's inputs: ``input`` [1, N] int64, ``input_lengths`` [1], ``scales`` [3], ``sid`` [1] if multi."""
    ids = g.input("input", ["batch_size", "phonemes"], TensorProto.INT64)
    lengths = g.input("input_lengths", ["batch_size"], TensorProto.INT64)
    scales = g.input("scales", [3])
    sid = g.input("sid", ["batch_size"], TensorProto.INT64) if multi else None
    return ids, lengths, scales, sid


def finish(g: VoiceGraph) -> onnx.ModelProto:
    """The checked model (no metadata: Piper's exports carry none)."""
    model = g.model({})
    onnx.checker.check_model(model, full_check=True)
    return model
