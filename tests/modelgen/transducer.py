"""Streaming transducers in the exact sherpa-onnx / icefall ONNX export layout, random weights.

``make_transducer(out_dir, "zipformer2" | "lstm")`` writes ``encoder.onnx``, ``decoder.onnx``,
``joiner.onnx``, ``tokens.txt`` and ``bpe.vocab`` (plus ``*.int8.onnx`` with ``int8=True``),
which ``sherpa_onnx.OnlineRecognizer.from_transducer`` and the ``sherpa-onnx`` CLI load as they
load real exports. CLI: ``python -m tests.modelgen.transducer --kind zipformer2 --size bench --int8 OUT``.

Layout (icefall ``zipformer/export-onnx-streaming.py`` and ``lstm_transducer_stateless2/export-onnx.py``;
sherpa-onnx ``online-zipformer2-transducer-model.cc``, ``online-lstm-transducer-model.cc``,
``online-transducer-model.cc``), opset 13, batch dimension ``N``:

- zipformer2 encoder, metadata ``model_type=zipformer2, version=1, model_author=k2-fsa,
  comment=streaming zipformer2, decode_chunk_len, T, num_encoder_layers, encoder_dims,
  cnn_module_kernels, left_context_len, query_head_dims, value_head_dims, num_heads`` (lists are
  comma-separated, one entry per stack). Inputs ``x`` [N, T, 80]; for every layer i (numbered
  across stacks; s is its stack) ``cached_key_i`` [left_ctx[s], N, heads[s]*query_head_dim[s]],
  ``cached_nonlin_attn_i`` [1, N, left_ctx[s], 3*dim[s]/4], ``cached_val1_i``, ``cached_val2_i``
  [left_ctx[s], N, heads[s]*value_head_dim[s]], ``cached_conv1_i``, ``cached_conv2_i``
  [N, dim[s], kernel[s]//2]; then ``embed_states`` [N, 128, 3, 19], ``processed_lens`` [N] int64.
  Outputs ``encoder_out`` [N, decode_chunk_len/4, joiner_dim], then ``new_<input>`` for every state
  in input order (sherpa-onnx binds both by position).
- lstm encoder, metadata ``model_type=lstm, version=1, model_author=k2-fsa, decode_chunk_len, T,
  num_encoder_layers, d_model, rnn_hidden_size``. Inputs ``x`` [N, T, 80], ``state0`` [layers, N,
  d_model], ``state1`` [layers, N, rnn_hidden_size]; outputs ``encoder_out``, ``new_state0``, ``new_state1``.
- decoder ``y`` int64 [N, 2] -> ``decoder_out`` [N, joiner_dim], metadata ``context_size=2``,
  ``vocab_size``; a negative id embeds to zero (icefall: embedding(clamp(y, 0)) * (y >= 0)).
- joiner ``encoder_out``, ``decoder_out`` [N, joiner_dim] -> ``logit`` [N, vocab] = W tanh(enc + dec) + b,
  metadata ``joiner_dim``.

Behaviour: features are normalised in the graph; output frame j is a stride-4 convolution over
chunk frames [4j, 4j + T - decode_chunk_len + 4), so all T frames matter. Every cached state feeds
the output through its own projection, and every new state is the old window shifted plus rows
made from this chunk (the LSTM is a real LSTM with projection); ``new_processed_lens =
processed_lens + decode_chunk_len/2`` and the output depends on it. Blank wins on silence; on speech
about a quarter of the frames emit a varied token, and ``<unk>`` (id 2) wins now and then.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.modelgen.confident import CONFIDENT, ConfidentHead, decoder_graph, encoder_head, fit_head, joiner_weights

__all__ = ["make_transducer", "make_tokens", "ZIPFORMER2_SIZES", "LSTM_SIZES"]

FEATURE_DIM = 80
CONTEXT_SIZE = 2
VOCAB_SIZE = 500
OPSET = 13
IR_VERSION = 8

# ---------------------------------------------------------------------------- tokens

_WORDS = """THE AND OF TO A IN HE I THAT WAS IT HIS YOU WITH AS FOR HAD IS HER NOT BUT AT ON SHE BE
HAVE BY WHICH HIM THEY THIS ALL FROM SO SAID WERE ONE ME WE MY THERE NO AN OR WHEN WHAT THEM
WOULD WHO IF WILL OUT ARE UP BEEN THEN COULD THEIR INTO MORE NOW SOME ABOUT LITTLE VERY DID
THAN UPON ONLY TIME ANY SHOULD OVER MAN MADE GREAT WELL SHALL DO LIKE KNOW OLD BEFORE US AFTER
DOWN SEE MUCH GOOD CAME YOUR HOW MUST OTHER SUCH MAY TWO WAY NEVER AGAIN THESE DAY HAND WHERE
LONG LIFE EYES EVEN MOST THOUGHT THROUGH MIGHT LOOKED WENT FIRST OWN AWAY YET NIGHT HOUSE GO
THINGS BACK TOO HEAD HERE YEARS FACE MEN HEARD FATHER MOTHER WORLD NOTHING PLACE STILL ASKED
TOLD PEOPLE HEART LEFT RIGHT WATER WORK LIGHT SMALL WHILE HOME DOOR ROOM WORDS COUNTRY AMERICA
FELLOW CITIZENS ASK CAN FREEDOM NUMBER ZERO THREE FOUR FIVE SIX SEVEN EIGHT NINE TEN HELLO
TURN LIGHTS KITCHEN TIMER MINUTES""".split()
_WORD_STARTS = """RE DE CON PRO COM EX UN DIS ST SH CH TH WH BR CR DR FR GR PR TR BL CL FL GL PL SL
SP SC SW QU KN WR SE MA MO MI ME BA BO BE CA CO HA HO LA LO PA PE PO SA SO TA TO WA VA""".split()
_PIECES = """S ED ING ER LY ES EN AL LE RE IN ON AN AR OR ST TH CH SH LL SS ENT ION TION ATION
ABLE IBLE MENT NESS FUL LESS OUS IVE IST ISM ITY ERS EST IES IED ANCE ENCE AGE URE OUGH IGHT
ARD ORD OUND OWN OWED ERED ATED LING TED DED RED NED LED SED PED KED GED ATE ITE ANT IC ICAL
OL OM OP OT OG OD UT UN UR US UM UL IL IM IP IT IR ID IG EL EM EP ET EW EY AY AW AV AM AP AT
AD AG AK AC OC UC EC ACK ECK ICK OCK UCK ANG ONG UNG ANK INK ONE INE ANE AKE IKE OKE ACE ICE
AIN EAN EAR EAD EAT OAD OAT OOK OOD OOL OOM OON AIR AIL ALL ELL ILL OLL IGH EIGH OUR OUT OW
OY OI AU EA IE OO EE AI UE UI CE GE VE ZE SE TE NE ME KE DE BE PE TY RY NY PY""".split()
_LETTERS = [chr(c) for c in range(ord("A"), ord("Z") + 1)]
_SP = "\u2581"  # sentencepiece word-start mark


def make_tokens(vocab_size: int = VOCAB_SIZE) -> list[str]:
    """Deterministic English BPE-like symbols: ``<blk>``, ``<sos/eos>``, ``<unk>``, then pieces.

    Includes the bare ``▁`` and ``'`` pieces that real LibriSpeech BPE tables have, every letter
    with and without ``▁`` (so any upper-case word can be spelled), whole words and suffixes.
    """
    out = ["<blk>", "<sos/eos>", "<unk>"]
    head = ["S", f"{_SP}THE", f"{_SP}A", "T", f"{_SP}AND", "ED", f"{_SP}OF", f"{_SP}TO", "E", "D", "N", "ING"]
    groups = [
        [_SP, "'", "'S"],
        [_SP + w for w in _WORDS],
        _PIECES,
        [_SP + p for p in _WORD_STARTS],
        _LETTERS,
        [_SP + c for c in _LETTERS],
    ]
    # Frequent pieces first, then words, suffixes and letters interleaved like a real table.
    candidates = head + [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]
    candidates += [a + b for a in "AEIOURSTLNDHMCPBGFWYKV" for b in "AEIOURSTLNDHMCPBGFWYKV"]
    for sym in candidates:
        if len(out) == vocab_size:
            break
        if sym not in out:
            out.append(sym)
    if len(out) != vocab_size:
        raise ValueError(f"cannot build {vocab_size} tokens, got {len(out)}")
    return out


def _write_tokens(out_dir: Path, tokens: list[str]) -> None:
    (out_dir / "tokens.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(tokens)), encoding="utf-8")
    # sentencepiece vocab (piece<TAB>score) for sherpa's hotword encoder (bpe_vocab=), which picks the
    # best-scoring segmentation: near-equal scores make that the fewest pieces, ties to frequent ones.
    lines = (f"{t}\t{0.0 if i < 3 else -5.0 - i / 1000:.4f}\n" for i, t in enumerate(tokens))
    (out_dir / "bpe.vocab").write_text("".join(lines), encoding="utf-8")


# ---------------------------------------------------------------------------- sizes


@dataclass(frozen=True)
class Zipformer2Size:
    num_encoder_layers: tuple[int, ...]
    encoder_dims: tuple[int, ...]
    query_head_dims: tuple[int, ...]
    value_head_dims: tuple[int, ...]
    num_heads: tuple[int, ...]
    cnn_module_kernels: tuple[int, ...]
    left_context_len: tuple[int, ...]
    hidden: int
    """Width of the synthetic per-frame stack (not part of the layout)."""
    ffn: int
    joiner_dim: int
    decoder_dim: int
    decode_chunk_len: int = 32
    T: int = 45


@dataclass(frozen=True)
class LstmSize:
    num_encoder_layers: int
    d_model: int
    rnn_hidden_size: int
    joiner_dim: int
    decoder_dim: int
    decode_chunk_len: int = 16
    T: int = 21  # icefall's LSTM subsampling needs decode_chunk_len + 5 frames


ZIPFORMER2_SIZES = {
    "test": Zipformer2Size(
        num_encoder_layers=(1, 2),
        encoder_dims=(16, 24),
        query_head_dims=(4, 4),
        value_head_dims=(3, 3),
        num_heads=(2, 2),
        cnn_module_kernels=(7, 5),
        left_context_len=(8, 4),
        hidden=32,
        ffn=64,
        joiner_dim=32,
        decoder_dim=32,
    ),
    # The layout of icefall's "small" streaming zipformer2 (chunk 16, left context 128).
    "bench": Zipformer2Size(
        num_encoder_layers=(2, 2, 2, 2, 2, 2),
        encoder_dims=(192, 256, 256, 256, 256, 256),
        query_head_dims=(32,) * 6,
        value_head_dims=(12,) * 6,
        num_heads=(4, 4, 4, 8, 4, 4),
        cnn_module_kernels=(31, 31, 15, 15, 15, 31),
        left_context_len=(128, 64, 32, 16, 32, 64),
        hidden=384,
        ffn=1280,
        joiner_dim=512,
        decoder_dim=512,
    ),
}
LSTM_SIZES = {
    "test": LstmSize(num_encoder_layers=2, d_model=16, rnn_hidden_size=24, joiner_dim=32, decoder_dim=32),
    "bench": LstmSize(num_encoder_layers=6, d_model=384, rnn_hidden_size=768, joiner_dim=512, decoder_dim=512),
}

# Joiner: blank logit = _BLANK_GAIN * tanh(enc[0] + dec[0]) + _BLANK_BIAS; the non-blank logits
# have std ~_TOKEN_STD (max over 497 ~ _BLANK_BIAS), so a frame emits when enc[0] + dec[0] < ~0.
# The <unk> logit gets _UNK_GAIN * tanh(enc[1] + dec[1]) and beats them when enc[1] > ~_UNK_LEVEL.
_TOKEN_STD, _BLANK_GAIN, _BLANK_BIAS, _UNK_GAIN, _UNK_LEVEL = 2.5, 10.0, 7.5, 6.0, 1.3
_DECODER_STD, _NO_REPEAT = 0.6, 2.0
# enc[0] = _EMIT_BIAS + (frame projection standardised over the chunk) + _SILENCE_GAIN * silence.
_EMIT_BIAS, _SILENCE_LEVEL, _SILENCE_GAIN = 0.3, -1.5, 8.0


# ---------------------------------------------------------------------------- graph building


class _Graph:
    """A tiny ONNX graph builder with seeded random initializers."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng, self.nodes, self.inits, self.inputs, self.outputs, self._n = rng, [], [], [], [], 0

    def _name(self, prefix: str) -> str:
        self._n += 1
        return f"/{prefix}_{self._n}"

    def input(self, name: str, shape: list, elem: int = TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def output(self, value: str, name: str, shape: list, elem: int = TensorProto.FLOAT) -> None:
        self.op("Identity", [value], out=name)
        self.outputs.append(helper.make_tensor_value_info(name, elem, shape))

    def const(self, arr, prefix: str = "const") -> str:
        name = self._name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def f32(self, value) -> str:
        return self.const(np.asarray(value, dtype=np.float32))

    def i64(self, value) -> str:
        return self.const(np.asarray(value, dtype=np.int64))

    def randn(self, shape, std: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        out = out or self._name(op_type)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out + "_node", **attrs))
        return out

    def linear(self, x: str, w: np.ndarray, b: np.ndarray | None = None) -> str:
        y = self.op("MatMul", [x, self.const(np.asarray(w, np.float32), "weight")])
        return y if b is None else self.op("Add", [y, self.const(np.asarray(b, np.float32), "bias")])

    def norm(self, x: str) -> str:
        """Layer norm over the last axis, no scale (opset 13 has no LayerNormalization)."""
        xc = self.op("Sub", [x, self.op("ReduceMean", [x], axes=[-1])])
        var = self.op("ReduceMean", [self.op("Mul", [xc, xc])], axes=[-1])
        return self.op("Div", [xc, self.op("Sqrt", [self.op("Add", [var, self.f32(1e-5)])])])

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        return self.op("Slice", [x, self.i64([start]), self.i64([end]), self.i64([axis])])

    def model(self, metadata: dict) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "main_graph", self.inputs, self.outputs, self.inits)
        opsets = [helper.make_opsetid("", OPSET)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="voiced-modelgen")
        model.ir_version = IR_VERSION
        for key, value in metadata.items():
            model.metadata_props.add(key=key, value=str(value))
        return model


def _front_end(g: _Graph, x: str, kernel: int, width: int, smooth: bool = False) -> tuple[str, str]:
    """Features -> (stride-4 conv [N, T', width], window silence [N, T', 1]).

    The conv sees the spectral shape (log-mel minus its per-frame mean, which a change of
    recording level leaves alone) plus a little of the level. Silence is how far the window's
    mean log-mel lies below about -13 (digital silence is -15.9). ``smooth``: each filter is a
    spectral pattern under a Hann window in time, so outputs change slowly from frame to frame.
    """
    xn = g.op("Mul", [g.op("Add", [x, g.f32(7.0)]), g.f32(0.25)])  # log-mel ~[-16, 5] -> ~[-2.2, 3]
    level = g.op("ReduceMean", [xn], axes=[-1])  # [N, T, 1]
    shape = g.op("Add", [g.op("Sub", [xn, level]), g.op("Mul", [level, g.f32(0.3)])])
    if smooth:
        window = np.hanning(kernel + 2)[1:-1]
        w = (g.randn((width, FEATURE_DIM, 1), 1 / math.sqrt(FEATURE_DIM)) * window / np.linalg.norm(window)).astype(np.float32)
    else:
        w = g.randn((width, FEATURE_DIM, kernel), 1 / math.sqrt(FEATURE_DIM * kernel))
    conv = g.op(
        "Conv", [g.op("Transpose", [shape], perm=[0, 2, 1]), g.const(w), g.const(g.randn(width, 0.1))], strides=[4]
    )
    mean_w = np.full((1, 1, kernel), 1.0 / kernel, dtype=np.float32)
    window = g.op("Conv", [g.op("Transpose", [level], perm=[0, 2, 1]), g.const(mean_w)], strides=[4])
    silence = g.op("Relu", [g.op("Sub", [g.f32(_SILENCE_LEVEL), window])])
    return g.op("Transpose", [conv], perm=[0, 2, 1]), g.op("Transpose", [silence], perm=[0, 2, 1])


def _encoder_proj(g: _Graph, h: str, silence: str, width: int, joiner_dim: int) -> str:
    """[N, T', width] -> [N, T', joiner_dim]. Channel 0 drives blank, channel 1 drives ``<unk>``.

    Both are frame projections standardised over the chunk's frames, so whatever the seed,
    speaker or level about a quarter of the frames fall below -_EMIT_BIAS (emit) and a few per
    cent rise above ~_UNK_LEVEL (unk); silence pushes channel 0 up and channel 1 down.
    """
    hn = g.norm(h)
    e = g.linear(hn, g.randn((width, joiner_dim - 2), 1 / math.sqrt(width)))
    p = g.linear(hn, g.randn((width, 2), 1 / math.sqrt(width)))
    centred = g.op("Sub", [p, g.op("ReduceMean", [p], axes=[1])])
    var = g.op("ReduceMean", [g.op("Mul", [centred, centred])], axes=[1])
    z = g.op("Div", [centred, g.op("Sqrt", [g.op("Add", [var, g.f32(0.02)])])])
    drive = g.op("Add", [g.op("Mul", [silence, g.f32([_SILENCE_GAIN, -_SILENCE_GAIN])]), g.f32([_EMIT_BIAS, 0.0])])
    return g.op("Concat", [g.op("Add", [z, drive]), e], axis=2)


# ---------------------------------------------------------------------------- encoders


@dataclass(frozen=True)
class _State:
    layer: int
    name: str
    shape: list
    layout: str  # "TNF" key/val, "1NTF" nonlin_attn, "NFT" conv, "NCTF" embed_states

    @property
    def window(self) -> tuple[int, int]:
        """(time steps, features per step) of the canonical [N, time, features] view."""
        s = self.shape
        if self.layout == "TNF":
            return s[0], s[2]
        if self.layout == "NFT":
            return s[2], s[1]
        return s[2], (s[3] if self.layout == "1NTF" else s[1] * s[3])

    def to_canonical(self, g: _Graph, v: str) -> str:
        if self.layout == "TNF":
            return g.op("Transpose", [v], perm=[1, 0, 2])
        if self.layout == "1NTF":
            return g.op("Squeeze", [v, g.i64([0])])
        if self.layout == "NFT":
            return g.op("Transpose", [v], perm=[0, 2, 1])
        return g.op("Reshape", [g.op("Transpose", [v], perm=[0, 2, 1, 3]), g.i64([0, self.shape[2], -1])])

    def from_canonical(self, g: _Graph, v: str) -> str:
        if self.layout in ("TNF", "NFT"):
            return self.to_canonical(g, v)  # both are their own inverse
        if self.layout == "1NTF":
            return g.op("Unsqueeze", [v, g.i64([0])])
        return g.op(
            "Transpose", [g.op("Reshape", [v, g.i64([0] + self.shape[2:0:-1] + [self.shape[3]])])], perm=[0, 2, 1, 3]
        )


def _zipformer2_states(size: Zipformer2Size) -> list[_State]:
    states, layer = [], 0
    for s, n_layers in enumerate(size.num_encoder_layers):
        lc, dim, heads = size.left_context_len[s], size.encoder_dims[s], size.num_heads[s]
        kernel = size.cnn_module_kernels[s]
        for _ in range(n_layers):
            states += [
                _State(layer, f"cached_key_{layer}", [lc, "N", heads * size.query_head_dims[s]], "TNF"),
                _State(layer, f"cached_nonlin_attn_{layer}", [1, "N", lc, 3 * dim // 4], "1NTF"),
                _State(layer, f"cached_val1_{layer}", [lc, "N", heads * size.value_head_dims[s]], "TNF"),
                _State(layer, f"cached_val2_{layer}", [lc, "N", heads * size.value_head_dims[s]], "TNF"),
                _State(layer, f"cached_conv1_{layer}", ["N", dim, kernel // 2], "NFT"),
                _State(layer, f"cached_conv2_{layer}", ["N", dim, kernel // 2], "NFT"),
            ]
            layer += 1
    # embed_states: (N, channels, left pad, freq), freq = ((80 - 1) // 2 - 1) // 2 = 19.
    return states + [_State(0, "embed_states", ["N", 128, 3, ((FEATURE_DIM - 1) // 2 - 1) // 2], "NCTF")]


def _zipformer2_encoder(rng: np.random.Generator, size: Zipformer2Size, head: ConfidentHead | None = None) -> onnx.ModelProto:
    g, H = _Graph(rng), size.hidden
    t_out = size.decode_chunk_len // 4
    states = _zipformer2_states(size)
    x = g.input("x", ["N", size.T, FEATURE_DIM])
    canon = {st.name: st.to_canonical(g, g.input(st.name, st.shape)) for st in states}
    processed = g.input("processed_lens", ["N"], TensorProto.INT64)
    new = {}

    def summary(st: _State) -> str:  # [N, H]: time-weighted sum of the window, projected
        steps, feat = st.window
        pooled = g.op(
            "ReduceSum",
            [g.op("Mul", [canon[st.name], g.const(g.randn((steps, 1), steps**-0.5))]), g.i64([1])],
            keepdims=0,
        )
        return g.linear(pooled, g.randn((feat, H), feat**-0.5))

    def update(st: _State, frames: str) -> None:  # shift the window by k rows, append k fresh ones
        steps, feat = st.window
        k = min(steps, t_out)
        fresh = g.linear(g.slice(frames, t_out - k, t_out, 1), g.randn((H, feat), H**-0.5))
        old = g.op("Mul", [g.slice(canon[st.name], steps - k, steps, 1), g.f32(0.5)])
        fresh = g.op("Tanh", [g.op("Add", [fresh, old])])
        new[st.name] = fresh if k == steps else g.op("Concat", [g.slice(canon[st.name], k, steps, 1), fresh], axis=1)

    front, silence = _front_end(g, x, size.T - 4 * (t_out - 1), H, smooth=head is not None)
    h = g.norm(front)
    ffn_scale = head.ffn_scale if head else 1.0
    # processed_lens (50 Hz frames seen so far) enters as a saturating ramp and slow oscillations.
    p = g.op("Unsqueeze", [g.op("Cast", [processed], to=TensorProto.FLOAT), g.i64([1])])
    phase = g.op("Mul", [p, g.f32([2 * np.pi / np.array([112.0, 400.0, 1000.0, 3000.0])])])
    ramp = g.op("Min", [g.op("Mul", [p, g.f32(1.0 / size.left_context_len[0])]), g.f32([1.0])])
    pfeat = g.op("Concat", [g.op("Sin", [phase]), g.op("Cos", [phase]), ramp], axis=1)
    extra = [g.linear(pfeat, g.randn((9, H), 1 / 3)), summary(states[-1])]
    update(states[-1], front)
    for layer in range(sum(size.num_encoder_layers)):
        mine = [st for st in states[:-1] if st.layer == layer]
        ctx = g.op("Sum", [summary(st) for st in mine] + (extra if layer == 0 else []))
        u = g.norm(g.op("Add", [h, g.op("Unsqueeze", [ctx, g.i64([1])])]))
        hidden = g.op("Relu", [g.linear(u, g.randn((H, size.ffn), math.sqrt(2 / H)), g.randn(size.ffn, 0.1))])
        h = g.op("Add", [h, g.linear(hidden, g.randn((size.ffn, H), ffn_scale * 0.7 / math.sqrt(size.ffn)))])
        for st in mine:
            update(st, h)
    out = encoder_head(g, head, h, silence, H, size.joiner_dim) if head else _encoder_proj(g, h, silence, H, size.joiner_dim)
    g.output(out, "encoder_out", ["N", t_out, size.joiner_dim])
    for st in states:
        g.output(st.from_canonical(g, new[st.name]), f"new_{st.name}", st.shape)
    g.output(
        g.op("Add", [processed, g.i64(size.decode_chunk_len // 2)]), "new_processed_lens", ["N"], TensorProto.INT64
    )
    join = lambda v: ",".join(map(str, v))  # noqa: E731
    return g.model(
        {
            "model_type": "zipformer2",
            "version": "1",
            "model_author": "k2-fsa",
            "comment": "streaming zipformer2",
            "decode_chunk_len": size.decode_chunk_len,
            "T": size.T,
            "num_encoder_layers": join(size.num_encoder_layers),
            "encoder_dims": join(size.encoder_dims),
            "cnn_module_kernels": join(size.cnn_module_kernels),
            "left_context_len": join(size.left_context_len),
            "query_head_dims": join(size.query_head_dims),
            "value_head_dims": join(size.value_head_dims),
            "num_heads": join(size.num_heads),
        }
    )


def _lstm_encoder(rng: np.random.Generator, size: LstmSize) -> onnx.ModelProto:
    g = _Graph(rng)
    L, D, R = size.num_encoder_layers, size.d_model, size.rnn_hidden_size
    t_out = size.decode_chunk_len // 4
    x = g.input("x", ["N", size.T, FEATURE_DIM])
    h0, c0 = g.input("state0", [L, "N", D]), g.input("state1", [L, "N", R])
    front, silence = _front_end(g, x, size.T - 4 * (t_out - 1), D)
    front = g.norm(front)
    seq = [g.op("Squeeze", [g.slice(front, t, t + 1, 1), g.i64([1])]) for t in range(t_out)]  # [N, D] each
    new_h, new_c = [], []
    for layer in range(L):
        h, c = (g.op("Gather", [s, g.i64(layer)], axis=0) for s in (h0, c0))
        w = g.const(g.randn((2 * D, 4 * R), (2 * D) ** -0.5))
        b = g.const(np.repeat(np.array([0, 1, 0, 0], np.float32), R))  # forget gate bias 1
        proj = g.const(g.randn((R, D), 1.5 / math.sqrt(R)))
        out = []
        for t in range(t_out):
            gates = g.op("Add", [g.op("MatMul", [g.op("Concat", [seq[t], h], axis=1), w]), b])
            i, f, cand, o = (g.slice(gates, k * R, (k + 1) * R, 1) for k in range(4))
            c = g.op(
                "Add",
                [g.op("Mul", [g.op("Sigmoid", [f]), c]), g.op("Mul", [g.op("Sigmoid", [i]), g.op("Tanh", [cand])])],
            )
            h = g.op("MatMul", [g.op("Mul", [g.op("Sigmoid", [o]), g.op("Tanh", [c])]), proj])
            out.append(g.op("Add", [h, seq[t]]) if layer else h)  # residual keeps the features visible
        seq = out
        new_h.append(g.op("Unsqueeze", [h, g.i64([0])]))
        new_c.append(g.op("Unsqueeze", [c, g.i64([0])]))
    hs = g.op("Concat", [g.op("Unsqueeze", [s, g.i64([1])]) for s in seq], axis=1)  # [N, t_out, D]
    g.output(_encoder_proj(g, hs, silence, D, size.joiner_dim), "encoder_out", ["N", t_out, size.joiner_dim])
    g.output(g.op("Concat", new_h, axis=0), "new_state0", [L, "N", D])
    g.output(g.op("Concat", new_c, axis=0), "new_state1", [L, "N", R])
    return g.model(
        {
            "model_type": "lstm",
            "version": "1",
            "model_author": "k2-fsa",
            "decode_chunk_len": size.decode_chunk_len,
            "T": size.T,
            "num_encoder_layers": L,
            "d_model": D,
            "rnn_hidden_size": R,
        }
    )


# ---------------------------------------------------------------------------- decoder and joiner


def _joiner_weights(rng: np.random.Generator, vocab: int, joiner_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """W [joiner_dim, vocab] and b [vocab] of logit = tanh(enc + dec) @ W + b."""
    w = rng.standard_normal((joiner_dim, vocab))
    w[:2, :] = 0.0  # channels 0 and 1 are reserved for blank and <unk>
    w *= (_TOKEN_STD / 0.6) / np.linalg.norm(w, axis=0, keepdims=True)  # equal norms: no favourite token
    w[:, 0] = 0.0
    w[0, 0], w[1, 2] = _BLANK_GAIN, _UNK_GAIN
    b = np.zeros(vocab)
    b[0], b[1], b[2] = _BLANK_BIAS, -100.0, _BLANK_BIAS - _UNK_GAIN * math.tanh(_UNK_LEVEL)
    return w, b  # <sos/eos> (id 1) never wins, as in trained models


def _decoder(rng: np.random.Generator, joiner_w: np.ndarray, decoder_dim: int, head: ConfidentHead | None = None
             ) -> onnx.ModelProto:
    """icefall's stateless decoder: embedding, depthwise conv over the context, ReLU, projection.

    A second embedding of the newest token, pointing away from that token's joiner vector,
    makes an immediate repeat unlikely, as in a trained model.
    """
    joiner_dim, vocab = joiner_w.shape
    g = _Graph(rng)
    if head:
        g.output(decoder_graph(g, head, joiner_w, decoder_dim, CONTEXT_SIZE), "decoder_out", ["N", joiner_dim])
        return g.model({"context_size": CONTEXT_SIZE, "vocab_size": vocab})
    y = g.input("y", ["N", CONTEXT_SIZE], TensorProto.INT64)
    keep = g.op("Cast", [g.op("GreaterOrEqual", [y, g.i64(0)])], to=TensorProto.FLOAT)  # [N, context]
    ids = g.op("Max", [y, g.i64(0)])
    emb = g.op("Gather", [g.const(g.randn((vocab, decoder_dim), 1.0)), ids], axis=0)
    emb = g.op("Mul", [emb, g.op("Unsqueeze", [keep, g.i64([2])])])  # a negative id contributes nothing
    conv = g.const(g.randn((CONTEXT_SIZE, decoder_dim), CONTEXT_SIZE**-0.5))
    hidden = g.op("Relu", [g.op("ReduceSum", [g.op("Mul", [emb, conv]), g.i64([1])], keepdims=0)])
    w = g.randn((decoder_dim, joiner_dim), _DECODER_STD / math.sqrt(decoder_dim / 2))
    w[:, :2] *= 0.2  # the context nudges blank and <unk> but does not decide them
    out = g.linear(hidden, w, g.randn(joiner_dim, 0.1))
    away = -_NO_REPEAT * joiner_w / np.maximum(np.linalg.norm(joiner_w, axis=0, keepdims=True), 1e-6)
    away[:2, :] = 0.0
    last = g.op("Squeeze", [g.slice(ids, CONTEXT_SIZE - 1, CONTEXT_SIZE, 1), g.i64([1])])
    push = g.op("Gather", [g.const(away.T.astype(np.float32)), last], axis=0)
    push = g.op("Mul", [push, g.slice(keep, CONTEXT_SIZE - 1, CONTEXT_SIZE, 1)])
    g.output(g.op("Add", [out, push]), "decoder_out", ["N", joiner_dim])
    return g.model({"context_size": CONTEXT_SIZE, "vocab_size": vocab})


def _joiner(joiner_w: np.ndarray, joiner_b: np.ndarray) -> onnx.ModelProto:
    joiner_dim, vocab = joiner_w.shape
    g = _Graph(np.random.default_rng(0))
    enc, dec = g.input("encoder_out", ["N", joiner_dim]), g.input("decoder_out", ["N", joiner_dim])
    g.output(g.linear(g.op("Tanh", [g.op("Add", [enc, dec])]), joiner_w, joiner_b), "logit", ["N", vocab])
    return g.model({"joiner_dim": joiner_dim})


# ---------------------------------------------------------------------------- entry points


def make_transducer(out_dir: str | Path, kind: str, *, seed: int = 0, size: str = "test", int8: bool = False,
                    style: str = "random", fit_audio: Sequence[str | Path] = ()) -> Path:
    """Write a random-weight streaming transducer of ``kind`` ("zipformer2" or "lstm") to ``out_dir``.

    ``size="test"`` is tiny (generation and decoding take milliseconds); ``size="bench"`` costs
    per chunk about what a ~20M-parameter streaming model costs. ``style="confident"``
    (zipformer2 only) decides with the margins of a trained model (see confident.py); with
    ``fit_audio`` its class head is fitted to those recordings. With ``int8=True`` the
    ``*.int8.onnx`` files are written too, quantized as icefall does (dynamic, QInt8 weights;
    MatMul in encoder and joiner, MatMul and Gather in the decoder). Returns ``out_dir``.
    """
    if kind not in ("zipformer2", "lstm"):
        raise ValueError(f"kind must be 'zipformer2' or 'lstm', got {kind!r}")
    if style not in ("random", "confident") or (style == "confident" and kind != "zipformer2"):
        raise ValueError(f"style must be 'random', or 'confident' for a zipformer2; got {style!r} for {kind!r}")
    head = CONFIDENT if style == "confident" else None
    sizes = ZIPFORMER2_SIZES if kind == "zipformer2" else LSTM_SIZES
    if size not in sizes:
        raise ValueError(f"size must be one of {sorted(sizes)}, got {size!r}")
    cfg, out, tokens = sizes[size], Path(out_dir), make_tokens()
    out.mkdir(parents=True, exist_ok=True)
    enc_rng, dec_rng, join_rng = (np.random.default_rng([seed, k]) for k in range(3))
    if head:
        joiner_w, joiner_b = joiner_weights(join_rng, head, len(tokens), cfg.joiner_dim)
    else:
        joiner_w, joiner_b = _joiner_weights(join_rng, len(tokens), cfg.joiner_dim)
    models = {
        "encoder": _zipformer2_encoder(enc_rng, cfg, head) if kind == "zipformer2" else _lstm_encoder(enc_rng, cfg),
        "decoder": _decoder(dec_rng, joiner_w, cfg.decoder_dim, head),
        "joiner": _joiner(joiner_w, joiner_b),
    }
    for name, model in models.items():
        onnx.checker.check_model(model, full_check=True)
        onnx.save(model, str(out / f"{name}.onnx"))
    _write_tokens(out, tokens)
    if head and fit_audio:
        fit_head(out, fit_audio, head, seed)
    if int8:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)  # quantize_dynamic warns about pre-processing on every call
        try:
            for name, ops in (("encoder", ["MatMul"]), ("decoder", ["MatMul", "Gather"]), ("joiner", ["MatMul"])):
                quantize_dynamic(
                    out / f"{name}.onnx",
                    out / f"{name}.int8.onnx",
                    op_types_to_quantize=ops,
                    weight_type=QuantType.QInt8,
                )
        finally:
            logging.disable(previous)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a random-weight sherpa-onnx streaming transducer.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--kind", choices=["zipformer2", "lstm"], default="zipformer2")
    parser.add_argument("--size", choices=["test", "bench"], default="test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--int8", action="store_true", help="also write *.int8.onnx")
    parser.add_argument("--style", choices=["random", "confident"], default="random",
                        help="confident: decisions with a trained model's margins (zipformer2)")
    parser.add_argument("--fit-audio", action="append", type=Path, default=[],
                        help="WAV files/directories to fit the confident head on (repeatable)")
    args = parser.parse_args(argv)
    print(make_transducer(args.out_dir, args.kind, seed=args.seed, size=args.size, int8=args.int8,
                          style=args.style, fit_audio=args.fit_audio))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
