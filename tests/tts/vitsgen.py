"""A VITS-like Piper voice with generated weights and Piper's compute (see tests/tts/voicegen.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto

from tests.tts.graphs import VoiceGraph, finish, synth_inputs

__all__ = ["VITS_SIZES", "VitsSize", "vits_models"]


@dataclass(frozen=True)
class VitsSize:
    """Widths and depths, named after piper_train's ModelConfig / ModelAudioConfig fields."""

    hidden: int
    heads: int
    layers: int
    ffn: int
    inter: int
    dp: int
    flows: int
    wn_layers: int
    wn_kernel: int
    pre_kernel: int
    up_initial: int
    up_rates: tuple[int, ...]
    up_kernels: tuple[int, ...]
    rb_kernels: tuple[int, ...]
    rb_dilations: tuple[tuple[int, ...], ...]
    gin: int = 512


_MEDIUM = VitsSize(hidden=192, heads=2, layers=6, ffn=768, inter=192, dp=256, flows=4, wn_layers=4, wn_kernel=5,
                   pre_kernel=7, up_initial=256, up_rates=(8, 8, 4), up_kernels=(16, 16, 8),
                   rb_kernels=(3, 5, 7), rb_dilations=((1, 2), (2, 6), (3, 12)))
_TINY = VitsSize(hidden=16, heads=2, layers=1, ffn=32, inter=8, dp=16, flows=1, wn_layers=2, wn_kernel=5,
                 pre_kernel=5, up_initial=16, up_rates=(4, 4), up_kernels=(8, 8), rb_kernels=(3,),
                 rb_dilations=((1, 2),), gin=8)
VITS_SIZES: dict[str, VitsSize] = {
    "medium": _MEDIUM,
    "tiny": _TINY,
    "wide": VitsSize(**{**_TINY.__dict__, "flows": 3, "wn_layers": 3}),
}


def _layer_norm(g: VoiceGraph, x: str) -> str:
    return g.norm(x)  # over channels, last axis ([1, N, H])


def _text_encoder(g: VoiceGraph, s: VitsSize, ids: str, lengths: str, num_symbols: int) -> tuple[str, str, str, str]:
    """→ (hidden [1, H, N], mask [1, 1, N], m_p, logs_p [1, C, N])."""
    h = s.hidden
    x = g.op("Gather", [g.const(g.randn((num_symbols, h), 1.0), "emb"), ids])  # [1, N, H]
    n = g.op("Shape", [ids])
    positions = g.op("Range", [g.i64(0), g.squeeze(g.slice(n, 1, 2, 0), [0]), g.i64(1)])
    mask = g.op("Cast", [g.op("Less", [positions, lengths])], to=TensorProto.FLOAT)  # [N]
    mask = g.op("Reshape", [mask, g.i64([1, 1, -1])])
    dk = h // s.heads
    for _ in range(s.layers):
        def heads(t: str) -> str:
            return g.op("Transpose", [g.op("Reshape", [t, g.i64([1, -1, s.heads, dk])])], perm=[0, 2, 1, 3])

        q, k, v = (heads(g.linear(x, g.randn((h, h), 1 / math.sqrt(h)))) for _ in range(3))
        att = g.op("Softmax", [g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                                            g.f32(1 / math.sqrt(dk))])], axis=-1)
        o = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [att, v])], perm=[0, 2, 1, 3]), g.i64([1, -1, h])])
        x = _layer_norm(g, g.add(x, g.linear(o, g.randn((h, h), 1 / math.sqrt(h)))))
        xc = g.op("Transpose", [x], perm=[0, 2, 1])
        f = g.conv(g.op("Relu", [g.conv(g.mul(xc, mask), h, s.ffn, 3)]), s.ffn, h, 3, gain=0.5)
        x = _layer_norm(g, g.add(x, g.op("Transpose", [g.mul(f, mask)], perm=[0, 2, 1])))
    hidden = g.mul(g.op("Transpose", [x], perm=[0, 2, 1]), mask)
    stats = g.mul(g.conv(hidden, h, 2 * s.inter, 1, gain=0.5), mask)
    return hidden, mask, g.slice(stats, 0, s.inter, 1), g.slice(stats, s.inter, 2 * s.inter, 1)


def _encoder(g: VoiceGraph, s: VitsSize, num_symbols: int, num_speakers: int) -> tuple[str, str, str | None]:
    """Everything up to the prior sample: → (z_p [1, C, T], y_mask [1, 1, T], g [1, gin, 1] or None)."""
    ids, lengths, scales, sid = synth_inputs(g, num_speakers > 1)
    hidden, mask, m_p, logs_p = _text_encoder(g, s, ids, lengths, num_symbols)
    emb = g.unsqueeze(g.op("Gather", [g.const(g.randn((num_speakers, s.gin), 1.0), "emb_g"), sid]), [2]) if sid else None
    x = g.add(hidden, g.conv(emb, s.gin, s.hidden)) if emb else hidden
    d = g.op("Relu", [g.conv(g.op("Relu", [g.conv(x, s.hidden, s.dp, 3)]), s.dp, s.dp, 3)])
    p, p_noise = (g.op("Tanh", [g.conv(d, s.dp, 1, 1)]) for _ in range(2))
    noise_w, length_scale, noise_scale = g.scale(scales, 2), g.scale(scales, 1), g.scale(scales, 0)
    # about 2.5 frames per id: with a pad id after each phoneme and lessac's length_scale 1.2,
    # ~14 phonemes/s at 86 frames/s, the pace of Piper's English voices
    logw = g.add(g.f32(math.log(2.5)), g.mul(p, g.f32(0.3)), g.mul(p_noise, noise_w, g.f32(0.1)))
    w = g.op("Ceil", [g.mul(g.op("Exp", [logw]), mask, length_scale)])  # [1, 1, N]
    dur = g.op("Cast", [g.op("Reshape", [w, g.i64([-1])])], to=TensorProto.INT64)
    ends = g.op("CumSum", [dur, g.i64(0)])  # [N]
    total = g.op("Max", [g.squeeze(g.slice(ends, -1, 2**62, 0), [0]), g.i64(1)])
    frames = g.op("Range", [g.i64(0), total, g.i64(1)])  # [T]
    # phoneme of frame t = how many phonemes end at or before t (Piper: generate_path + matmul)
    done = g.op("Cast", [g.op("LessOrEqual", [g.unsqueeze(ends, [0]), g.unsqueeze(frames, [1])])],
                to=TensorProto.INT64)  # [T, N]
    which = g.op("Min", [g.op("ReduceSum", [done, g.i64([1])], keepdims=0),
                         g.op("Sub", [g.squeeze(g.slice(g.op("Shape", [dur]), 0, 1, 0), [0]), g.i64(1)])])
    m = g.op("Gather", [m_p, which], axis=2)
    logs = g.op("Gather", [logs_p, which], axis=2)
    eps = g.op("RandomNormalLike", [m], dtype=TensorProto.FLOAT)
    z_p = g.add(m, g.mul(eps, g.op("Exp", [g.op("Mul", [logs, g.f32(0.2)])]), noise_scale))
    y_mask = g.op("ConstantOfShape", [g.op("Concat", [g.i64([1, 1]), g.unsqueeze(total, [0])], axis=0)],
                  value=onnx.helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]))
    return z_p, y_mask, emb


def _decoder(g: VoiceGraph, s: VitsSize, z: str, y_mask: str, emb: str | None) -> str:
    """Flows (reverse) then HiFi-GAN: → audio [1, 1, T * hop]."""
    half, wh = s.inter // 2, s.hidden
    flip = g.i64(list(range(s.inter - 1, -1, -1)))
    for _ in range(s.flows):
        z = g.op("Gather", [z, flip], axis=1)
        x0, x1 = g.slice(z, 0, half, 1), g.slice(z, half, s.inter, 1)
        h = g.mul(g.conv(x0, half, wh), y_mask)
        skip = None
        for layer in range(s.wn_layers):
            x_in = g.conv(h, wh, 2 * wh, s.wn_kernel)
            if emb:
                x_in = g.add(x_in, g.conv(emb, s.gin, 2 * wh))
            acts = g.mul(g.op("Tanh", [g.slice(x_in, 0, wh, 1)]), g.op("Sigmoid", [g.slice(x_in, wh, 2 * wh, 1)]))
            last = layer == s.wn_layers - 1
            rs = g.conv(acts, wh, wh if last else 2 * wh, 1)
            if not last:
                h = g.mul(g.add(h, g.slice(rs, 0, wh, 1)), y_mask)
            out = rs if last else g.slice(rs, wh, 2 * wh, 1)
            skip = out if skip is None else g.add(skip, out)
        assert skip is not None
        m = g.conv(g.mul(skip, y_mask), wh, half, 1, gain=0.3)
        z = g.op("Concat", [x0, g.mul(g.op("Sub", [x1, m]), y_mask)], axis=1)
    x = g.conv(g.mul(z, y_mask), s.inter, s.up_initial, s.pre_kernel)
    if emb:
        x = g.add(x, g.conv(emb, s.gin, s.up_initial))
    ch = s.up_initial
    for rate, kernel in zip(s.up_rates, s.up_kernels):
        x = g.up(g.op("LeakyRelu", [x], alpha=0.1), ch, ch // 2, kernel, rate)
        ch //= 2
        total = None
        for k, dilations in zip(s.rb_kernels, s.rb_dilations):
            r = x
            for dil in dilations:  # HiFi-GAN "resblock 2": one conv per dilation
                r = g.add(r, g.conv(g.op("LeakyRelu", [r], alpha=0.1), ch, ch, k, dil, gain=0.5))
            total = r if total is None else g.add(total, r)
        assert total is not None
        x = g.mul(total, g.f32(1.0 / len(s.rb_kernels)))
    x = g.conv(g.op("LeakyRelu", [x], alpha=0.01), ch, 1, 7, bias=False)
    return g.op("Tanh", [x])


def vits_models(size: str = "tiny", num_symbols: int = 256, num_speakers: int = 1, split: bool = False,
                seed: int = 0) -> list[onnx.ModelProto]:
    """[voice] or [encoder, decoder] of a VITS-like voice of ``size``."""
    s, multi = VITS_SIZES[size], num_speakers > 1
    g = VoiceGraph(np.random.default_rng([seed, 0]))
    z_p, y_mask, emb = _encoder(g, s, num_symbols, num_speakers)
    if not split:
        g.output(_decoder(g, s, z_p, y_mask, emb), "output", [1, 1, "time"])
        return [finish(g)]
    g.output(z_p, "z", [1, s.inter, "time"])
    g.output(y_mask, "y_mask", [1, 1, "time"])
    if emb:
        g.output(emb, "g", [1, s.gin, 1])
    d = VoiceGraph(np.random.default_rng([seed, 1]))
    z = d.input("z", [1, s.inter, "time"])
    ym = d.input("y_mask", [1, 1, "time"])
    ge = d.input("g", [1, s.gin, 1]) if multi else None
    d.output(_decoder(d, s, z, ym, ge), "output", [1, 1, "time"])
    return [finish(g), finish(d)]
