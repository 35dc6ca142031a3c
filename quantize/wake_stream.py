"""``voiced-quantize wake-stream DIR``: openWakeWord's embedding model rewritten to stream, exactly.

    report = write_stream("models/openwakeword")   # embedding_model.stream.onnx + .json beside it

The published model maps a 76-frame mel window to one embedding and is run every 8 mel frames, so
68 of its 76 input frames, and the same share of every layer's frames, were computed for the
window before. Along time it has only unpadded convolutions (stride 1) and poolings whose
strides multiply to 8, the step between windows: a layer's frames for the next window are its
frames for this one shifted by 8 / (stride so far), with the pooling pairs in the same phase. So
each convolution with a time kernel of k gets a cache of the last k - 1 frames of its input
(``Concat`` before it, ``Slice`` of the last k - 1 as the next cache), and the model takes only
the 8n new mel frames. Nothing is approximated: the convolutions see the same numbers.

Validation: embeddings of both forms on real audio (or openWakeWord's noise) must agree within
``tolerance``; the figures go into the manifest beside the output, which the daemon checks at load.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantize.calibration import find_audio
from quantize.frontends import OwwFrontEnd, load_audio, oww_noise
from quantize.graph import load_onnx
from quantize.manifest import write_manifest
from quantize.progress import say
from voiced.errors import ConfigError, ModelError
from voiced.models.manifest import manifest_path
from voiced.runtime.onnx import SessionOptions, create_session
from voiced.wake.embedding import (
    EMBEDDING, MEL_BINS, MEL_PER_FRAME, STREAM_MEL_INPUT, STREAM_OUTPUT, WINDOW, StreamingEmbedding,
    WindowEmbedding, stream_path,
)

__all__ = ["StreamReport", "stream_embedding_model", "write_stream"]

TIME = 2
"""The time axis inside the network (NCHW after the input Reshape: H is time, W the mel bins)."""
POINTWISE_OPS = frozenset({"LeakyRelu", "Relu", "Max", "Min", "Add", "Mul", "Sub", "Clip", "BatchNormalization"})
"""Operators that act on each frame alone (a Max/Add with a constant): no cache needed."""
TOLERANCE = 1e-5
"""Largest embedding difference accepted; the rewrite is exact, so any real difference is a bug."""


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def stream_embedding_model(model: onnx.ModelProto, origin: str = "embedding model") -> tuple[onnx.ModelProto, list[str]]:
    """The streaming form of openWakeWord's embedding model, and the names of its caches.

    Raises ModelError when the graph is not the shape this rewrite is exact for (a padded or strided
    convolution along time, a pooling out of phase with the 8-frame step, an unknown operator).
    """
    graph = model.graph
    nodes = list(graph.node)
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    first, last = nodes[0], nodes[-1]
    if (len(graph.input) != 1 or first.op_type != "Reshape" or last.op_type != "Reshape" or first.input[0] != graph.input[0].name
            or list(inits.get(first.input[1], [])) != [-1, 1, WINDOW, MEL_BINS]):
        raise ModelError(f"{origin}: not openWakeWord's embedding model (expected Reshape [-1, 1, {WINDOW}, {MEL_BINS}] first)")
    inferred = onnx.shape_inference.infer_shapes(model)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in inferred.graph.value_info}
    dims[first.output[0]] = [1, 1, WINDOW, MEL_BINS]
    init_names = {first.input[1], last.input[1]}
    added = {
        "stream/in_shape": np.array([1, 1, -1, MEL_BINS], np.int64),
        "stream/out_shape": np.array([-1, EMBEDDING], np.int64),
        "stream/axis": np.array([TIME], np.int64),
        "stream/end": np.array([np.iinfo(np.int64).max], np.int64),
    }
    inputs = [helper.make_tensor_value_info(STREAM_MEL_INPUT, TensorProto.FLOAT, [1, "mel_frames", MEL_BINS])]
    outputs = [helper.make_tensor_value_info(STREAM_OUTPUT, TensorProto.FLOAT, ["frames", EMBEDDING])]
    out_nodes = [helper.make_node("Reshape", [STREAM_MEL_INPUT, "stream/in_shape"], [first.output[0]], name="stream/in")]
    caches: list[str] = []
    stride = 1  # frames of the mel input per frame at this depth
    for node in nodes[1:-1]:
        op = node.op_type
        if op == "Conv":
            kt = _attr(node, "kernel_shape", [1, 1])[0]
            pads = _attr(node, "pads", [0, 0, 0, 0])
            if _attr(node, "strides", [1, 1])[0] != 1 or _attr(node, "dilations", [1, 1])[0] != 1 or pads[0] or pads[2] \
                    or _attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
                raise ModelError(f"{origin}: convolution {node.name or node.output[0]} is strided, dilated or padded"
                                 " along time: the streaming rewrite would not be exact")
            if kt > 1:
                shape = dims.get(node.input[0])
                if not shape or len(shape) != 4 or not shape[1] or not shape[3]:
                    raise ModelError(f"{origin}: no static shape for {node.input[0]}")
                k = len(caches)
                cache, nxt, joined = f"cache_{k}", f"cache_{k}_next", f"stream/joined_{k}"
                cache_shape = [1, shape[1], kt - 1, shape[3]]
                inputs.append(helper.make_tensor_value_info(cache, TensorProto.FLOAT, cache_shape))
                outputs.append(helper.make_tensor_value_info(nxt, TensorProto.FLOAT, cache_shape))
                added[f"stream/keep_{kt - 1}"] = np.array([-(kt - 1)], np.int64)
                out_nodes.append(helper.make_node("Concat", [cache, node.input[0]], [joined], axis=TIME, name=f"stream/concat_{k}"))
                out_nodes.append(helper.make_node("Slice", [joined, f"stream/keep_{kt - 1}", "stream/end", "stream/axis"],
                                                  [nxt], name=f"stream/slice_{k}"))
                conv = onnx.NodeProto()
                conv.CopyFrom(node)
                conv.input[0] = joined
                out_nodes.append(conv)
                caches.append(cache)
                continue
        elif op == "MaxPool" or op == "AveragePool":
            kt, st = _attr(node, "kernel_shape", [1, 1])[0], _attr(node, "strides", [1, 1])[0]
            pads = _attr(node, "pads", [0, 0, 0, 0])
            stride *= st
            if kt != st or pads[0] or pads[2] or MEL_PER_FRAME % stride:
                raise ModelError(f"{origin}: pooling {node.name or node.output[0]} (time kernel {kt}, stride {st}) is"
                                 f" not in phase with the {MEL_PER_FRAME}-frame step: the streaming rewrite would not be exact")
        elif op not in POINTWISE_OPS or any(x in inits and inits[x].size != 1 for x in node.input[1:] if op in ("Max", "Min", "Add", "Mul", "Sub")):
            raise ModelError(f"{origin}: operator {op} ({node.name or node.output[0]}) is not known to act frame by frame")
        out_nodes.append(node)
    if stride != MEL_PER_FRAME:
        raise ModelError(f"{origin}: the time strides multiply to {stride}, not {MEL_PER_FRAME}")
    if list(inits.get(last.input[1], [])) != [-1, 1, 1, EMBEDDING]:
        raise ModelError(f"{origin}: not openWakeWord's embedding model (expected Reshape [-1, 1, 1, {EMBEDDING}] last)")
    # [1, 96, n, 1] → [n, 96]: one embedding per new frame
    out_nodes.append(helper.make_node("Transpose", [last.input[0]], ["stream/frames_first"], perm=[0, 2, 1, 3], name="stream/transpose"))
    out_nodes.append(helper.make_node("Reshape", ["stream/frames_first", "stream/out_shape"], [STREAM_OUTPUT], name="stream/out"))
    initializers = [i for i in graph.initializer if i.name not in init_names]
    initializers += [numpy_helper.from_array(v, k) for k, v in added.items()]
    out_graph = helper.make_graph(out_nodes, f"{graph.name}_stream", inputs, outputs, initializers)
    out = helper.make_model(out_graph, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                            producer_name="voiced-quantize wake-stream")
    for prop in model.metadata_props:
        out.metadata_props.add(key=prop.key, value=prop.value)
    onnx.checker.check_model(out)
    return out, caches


@dataclass
class StreamReport:
    """What ``wake-stream`` wrote and how the two forms compared."""

    source: str
    output: str
    manifest: str = ""
    caches: int = 0
    frames_compared: int = 0
    max_abs_diff: float = float("nan")
    speed_us: dict[str, float] = field(default_factory=dict)
    passed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        speed = ", ".join(f"{k} {v:.0f} us" for k, v in self.speed_us.items())
        return (f"{verdict} {self.output}: {self.caches} caches; {self.frames_compared} embeddings compared with the"
                f" window form, largest difference {self.max_abs_diff:.2e}; per 80 ms frame: {speed}")


def write_stream(directory_or_model: str | Path, *, audio: list[Path] | None = None, output: str | Path | None = None,
                 overwrite: bool = False, tolerance: float = TOLERANCE, max_seconds: float = 120.0) -> StreamReport:
    """Write ``embedding_model.stream.onnx`` (+ manifest) beside ``embedding_model.onnx`` and validate it."""
    base = Path(directory_or_model)
    source = base / "embedding_model.onnx" if base.is_dir() else base
    melspec = source.with_name("melspectrogram.onnx")
    out_path = Path(output) if output else stream_path(source)
    if out_path.exists() and not manifest_path(out_path).exists() and not overwrite:
        raise ConfigError("--output", f"{out_path} exists and was not written by voiced-quantize (no manifest beside it);"
                          " pass --force to replace it")
    if not melspec.is_file():
        raise ModelError(f"{melspec}: needed beside {source.name} to validate the rewrite")
    model = load_onnx(source)
    streamed, caches = stream_embedding_model(model, str(source))
    say(f"{source.name}: {len(caches)} caches; writing {out_path.name}")
    onnx.save(streamed, str(out_path))
    report = StreamReport(str(source), str(out_path), caches=len(caches))
    try:
        samples = _validation_audio(audio or [], max_seconds)
        mel = OwwFrontEnd(melspec).mel(samples)
        mel = mel[: len(mel) - len(mel) % MEL_PER_FRAME]
        options = SessionOptions(threads=1)
        window = WindowEmbedding(create_session(source, options))
        stream = StreamingEmbedding(create_session(out_path, options), out_path)
        report.max_abs_diff, report.frames_compared = _compare(window, stream, mel)
        report.speed_us = _speed(window, stream, mel)
        report.passed = report.max_abs_diff <= tolerance
    except BaseException:
        out_path.unlink(missing_ok=True)
        raise
    method = {"method": "stream-rewrite", "caches": caches, "tolerance": tolerance,
              "reason": "time-axis convolutions unpadded, pooling strides multiply to the 8-frame step: exact"}
    validation = {"passed": report.passed, "frames_compared": report.frames_compared,
                  "max_abs_diff": report.max_abs_diff, "speed_us_per_frame": report.speed_us,
                  "failures": [] if report.passed else [f"largest difference {report.max_abs_diff:.3e} > {tolerance}"]}
    report.manifest = str(write_manifest(out_path, source, method, validation))
    return report


def _validation_audio(paths: list[Path], max_seconds: float) -> np.ndarray:
    """Real audio when given (first ``max_seconds``), else openWakeWord's quiet start-up noise."""
    files = find_audio(paths) if paths else []
    if not files:
        return oww_noise(min(max_seconds, 30.0))
    pieces, total = [], 0
    for f in files:
        pieces.append(load_audio(f.path))
        total += len(pieces[-1])
        if total >= max_seconds * 16_000:
            break
    return np.concatenate(pieces)[: int(max_seconds * 16_000)]


def _compare(window: WindowEmbedding, stream: StreamingEmbedding, mel: np.ndarray) -> tuple[float, int]:
    """Both forms over the same mel stream, one frame per call as the daemon mostly feeds them."""
    ws, ss = window.initial_state(), stream.initial_state()
    worst, n = 0.0, 0
    for i in range(0, len(mel), MEL_PER_FRAME):
        a, ws = window.advance(ws, mel[i:i + MEL_PER_FRAME])
        b, ss = stream.advance(ss, mel[i:i + MEL_PER_FRAME])
        worst, n = max(worst, float(np.abs(a - b).max())), n + 1
    # and several frames per call (a 100 ms window sometimes completes two)
    ss = stream.initial_state()
    ws = window.initial_state()
    for i in range(0, len(mel) - 2 * MEL_PER_FRAME + 1, 2 * MEL_PER_FRAME):
        a, ws = window.advance(ws, mel[i:i + 2 * MEL_PER_FRAME])
        b, ss = stream.advance(ss, mel[i:i + 2 * MEL_PER_FRAME])
        worst, n = max(worst, float(np.abs(a - b).max())), n + 2
    return worst, n


def _speed(window: WindowEmbedding, stream: StreamingEmbedding, mel: np.ndarray, runs: int = 200) -> dict[str, float]:
    """CPU microseconds per 80 ms frame of each form (medians of 3, alternated)."""
    chunk = mel[:MEL_PER_FRAME]
    out: dict[str, list[float]] = {"window": [], "stream": []}
    for _ in range(3):
        for name, form in (("window", window), ("stream", stream)):
            state = form.initial_state()
            t = time.process_time()
            for _ in range(runs):
                form.advance(state, chunk)
            out[name].append((time.process_time() - t) / runs * 1e6)
    return {k: round(float(np.median(v)), 1) for k, v in out.items()}
