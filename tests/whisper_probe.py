"""A probe Whisper model that makes sherpa-onnx tell what its encoder is fed, compared bit for bit in the graph.

sherpa-onnx computes Whisper features in C++ and exposes only tokens. So the probe is a model in
sherpa-onnx's Whisper layout (the metadata, input and output names its loader reads) whose encoder
holds the features voiced would feed as a constant and compares them with what it is given:
``Equal`` on float32 is a bit-for-bit test (no tolerance). Its decoder then "predicts" the figures
as token ids, one per step, and ``<name>-tokens.txt`` names token ``i`` ``<i>``, so sherpa-onnx's
result reads back as numbers:

    frames fed, differing values (capped at 49999), max |difference| in 1e-7 units (capped),
    first differing flat index [n_mels, MAX_FRAMES] (two base-50000 digits),
    differing values exactly (two digits)

sherpa-onnx's greedy search calls the decoder with ``offset`` 0 (the sot sequence + no_timestamps,
two tokens here), then 2, 3, 4 … so the figures are laid out at those offsets, then eot. It stops
after 6 tokens per second of speech, so a 0.44 s file gives only the first two figures: the order
puts first what every reading needs.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["FeatureProbe", "ProbeReading"]

BASE = 50000
"""Figures are sent as base-50000 digits: every digit is a token id below eot."""
EOT = BASE
VOCAB = BASE + 2
MAX_FRAMES = 3000
SCALE = 1e7
"""max |difference| is reported in units of 1e-7 (capped at BASE - 1)."""


@dataclass(frozen=True)
class ProbeReading:
    """What sherpa-onnx fed the probe encoder, against the features the probe holds."""

    frames: int
    """Frames sherpa-onnx fed (speech + tail padding)."""
    differing: int
    """Values that are not bit-identical (after padding both to MAX_FRAMES with zeros); a lower bound
    (49999) when the utterance is too short for the exact count."""
    max_difference: float | None
    """Largest |difference| (resolution 1e-7, capped at 0.005); None when the utterance is too short."""
    first: tuple[int, int] | None
    """[mel bin, frame] of the first differing value; None when none differs or the utterance is too short."""


def _ints(name: str, values: list[int]):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array(values, np.int64), name)


def _floats(name: str, values):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array(values, np.float32), name)


class FeatureProbe:
    """Writes the probe files into ``directory``; ``read`` runs sherpa-onnx on samples against features."""

    def __init__(self, directory: Path, n_mels: int = 80) -> None:
        self.directory = directory
        self.n_mels = n_mels
        directory.mkdir(parents=True, exist_ok=True)
        self.encoder = directory / "probe-encoder.onnx"
        self.decoder = directory / "probe-decoder.onnx"
        self.tokens = directory / "probe-tokens.txt"
        self.tokens.write_text("".join(f"{base64.b64encode(f'<{i}>'.encode()).decode()} {i}\n" for i in range(VOCAB)))
        self._write_decoder()

    def _meta(self) -> dict[str, str]:
        # what sherpa-onnx's OfflineWhisperModel reads; tiny caches (1 layer, state 1) keep it cheap
        return {"model_type": "whisper-probe", "n_mels": str(self.n_mels), "n_text_layer": "1", "n_text_ctx": "448",
                "n_text_state": "1", "n_vocab": str(VOCAB), "sot": str(BASE + 1), "eot": str(EOT), "blank_id": "0",
                "translate": "0", "transcribe": "0", "is_multilingual": "0", "no_timestamps": str(BASE + 1),
                "no_speech": "0", "sot_sequence": str(BASE + 1)}

    def write_encoder(self, expected: np.ndarray) -> None:
        """The probe encoder for ``expected`` [frames, n_mels], the features voiced feeds its encoder."""
        import onnx
        from onnx import TensorProto, helper

        held = np.zeros((1, self.n_mels, MAX_FRAMES), np.float32)
        held[0, :, : len(expected)] = expected.T
        node = helper.make_node
        nodes = [
            node("Shape", ["mel"], ["shape"]),
            node("Gather", ["shape", "two"], ["frames"]),
            node("Sub", ["max_frames", "frames"], ["pad_frames"]),
            node("Concat", ["five_zeros", "pad_frames"], ["pads"], axis=0),
            node("Pad", ["mel", "pads"], ["given"]),
            node("Equal", ["given", "held"], ["same"]),
            node("Not", ["same"], ["changed"]),
            node("Cast", ["changed"], ["changed_f"], to=TensorProto.FLOAT),
            node("ReduceSum", ["changed_f"], ["differing"], keepdims=1),
            node("Reshape", ["changed_f", "minus_one"], ["changed_flat"]),
            node("ArgMax", ["changed_flat"], ["first"], axis=0, keepdims=1),  # the first 1 (0 when none)
            node("Cast", ["first"], ["first_f"], to=TensorProto.FLOAT),
            node("Sub", ["given", "held"], ["difference"]),
            node("Abs", ["difference"], ["size"]),
            node("ReduceMax", ["size"], ["largest"], keepdims=0),
            node("Mul", ["largest", "scale"], ["largest_units"]),
            node("Reshape", ["largest_units", "one"], ["largest_1"]),
            node("Reshape", ["differing", "one"], ["differing_1"]),
            node("Cast", ["frames"], ["frames_f"], to=TensorProto.FLOAT),
            node("Concat", ["frames_f", "differing_1", "largest_1", "first_f"], ["n_layer_cross_k"], axis=0),
            node("Identity", ["n_layer_cross_k"], ["n_layer_cross_v"]),
        ]
        inits = [_floats("held", held), _ints("two", [2]), _ints("max_frames", [MAX_FRAMES]), _ints("five_zeros", [0] * 5),
                 _ints("minus_one", [-1]), _ints("one", [1]), _floats("scale", SCALE)]
        graph = helper.make_graph(
            nodes, "whisper_feature_probe_encoder",
            [helper.make_tensor_value_info("mel", TensorProto.FLOAT, [1, self.n_mels, "T"])],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("n_layer_cross_k", "n_layer_cross_v")],
            inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        helper.set_model_props(model, self._meta())
        onnx.save(model, str(self.encoder))

    def _write_decoder(self) -> None:
        import onnx
        from onnx import TensorProto, helper

        node = helper.make_node
        # cross_k = [frames, differing, largest, first] -> digits at offsets 0, 2, 3 … then eot
        nodes = [
            node("Div", ["n_layer_cross_k", "base"], ["quotient"]),
            node("Floor", ["quotient"], ["high"]),
            node("Mul", ["high", "base"], ["high_part"]),
            node("Sub", ["n_layer_cross_k", "high_part"], ["low"]),
            node("Gather", ["n_layer_cross_k", "i0"], ["frames"]),
            node("Gather", ["high", "i1"], ["differing_high"]),
            node("Gather", ["low", "i1"], ["differing_low"]),
            node("Gather", ["n_layer_cross_k", "i2"], ["largest"]),
            node("Min", ["largest", "top_digit"], ["largest_capped"]),
            node("Gather", ["high", "i3"], ["first_high"]),
            node("Gather", ["low", "i3"], ["first_low"]),
            node("Gather", ["n_layer_cross_k", "i1"], ["differing"]),
            node("Min", ["differing", "top_digit"], ["differing_capped"]),
            node("Concat", ["frames", "frames", "differing_capped", "largest_capped", "first_high", "first_low",
                            "differing_high", "differing_low", "eot"], ["figures"], axis=0),
            node("Min", ["offset", "last"], ["step"]),
            node("Gather", ["figures", "step"], ["figure"]),
            node("Round", ["figure"], ["figure_rounded"]),
            node("Cast", ["figure_rounded"], ["token"], to=TensorProto.INT64),
            node("OneHot", ["token", "vocab", "off_on"], ["one_hot"], axis=-1),  # [1, vocab]
            node("Shape", ["tokens"], ["tokens_shape"]),
            node("Concat", ["tokens_shape", "vocab"], ["logits_shape"], axis=0),
            node("Expand", ["one_hot", "logits_shape"], ["logits"]),
            node("Identity", ["in_n_layer_self_k_cache"], ["out_n_layer_self_k_cache"]),
            node("Identity", ["in_n_layer_self_v_cache"], ["out_n_layer_self_v_cache"]),
        ]
        inits = [_floats("base", float(BASE)), _floats("top_digit", float(BASE - 1)), _ints("i0", [0]), _ints("i1", [1]),
                 _ints("i2", [2]), _ints("i3", [3]), _floats("eot", [float(EOT)]), _ints("last", [8]),
                 _ints("vocab", [VOCAB]), _floats("off_on", [0.0, 1.0])]

        def cache(name: str):
            return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 1, 448, 1])

        graph = helper.make_graph(
            nodes, "whisper_feature_probe_decoder",
            [helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, "n"]), cache("in_n_layer_self_k_cache"),
             cache("in_n_layer_self_v_cache"), helper.make_tensor_value_info("n_layer_cross_k", TensorProto.FLOAT, [4]),
             helper.make_tensor_value_info("n_layer_cross_v", TensorProto.FLOAT, [4]),
             helper.make_tensor_value_info("offset", TensorProto.INT64, [1])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "n", VOCAB]),
             cache("out_n_layer_self_k_cache"), cache("out_n_layer_self_v_cache")],
            inits)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(self.decoder))

    def read(self, samples: np.ndarray, expected: np.ndarray) -> ProbeReading:
        """Run sherpa-onnx's Whisper recognizer on ``samples`` (16 kHz) against ``expected`` [frames, n_mels]."""
        import sherpa_onnx

        self.write_encoder(expected)
        recognizer = sherpa_onnx.OfflineRecognizer.from_whisper(
            encoder=str(self.encoder), decoder=str(self.decoder), tokens=str(self.tokens), num_threads=1)
        stream = recognizer.create_stream()
        stream.accept_waveform(16000, samples)
        recognizer.decode_stream(stream)
        figures = [int(token.strip("<>")) for token in stream.result.tokens]
        if len(figures) < 2:
            raise ValueError(f"the probe read {figures}: not a probe reading")
        figures += [None] * (7 - len(figures))  # a short utterance: sherpa-onnx stopped early
        frames, capped, largest, first_high, first_low, differing_high, differing_low = figures
        differing = capped if differing_low is None else differing_high * BASE + differing_low
        first = None if not differing or first_low is None else first_high * BASE + first_low
        return ProbeReading(frames=frames, differing=differing,
                            max_difference=None if largest is None else largest / SCALE,
                            first=None if first is None else (first // MAX_FRAMES, first % MAX_FRAMES))
