"""``voiced-quantize wake-stream DIR``: openWakeWord's front end as one streaming graph, exactly.

    report = write_stream("models/openwakeword")   # frontend.stream.onnx + .json beside the models

Two rewrites, then one graph (``voiced.wake.frontend`` runs it):

- **Embedding.** The published model maps a 76-frame mel window to one embedding and is run
  every 8 mel frames, so 68 of its 76 input frames, and the same share of every layer's frames,
  were computed for the window before. Along time it has only unpadded convolutions (stride 1)
  and poolings whose strides multiply to 8, the step between windows: a layer's frames for the
  next window are its frames for this one shifted by 8 / (stride so far), with the pooling pairs
  in the same phase. So each convolution with a time kernel of k gets a cache of the last k - 1
  frames of its input (``Concat`` before it, ``Slice`` of the last k - 1 as the next cache), and
  the model takes only the 8n new mel frames.
- **Mel.** ``melspectrogram.onnx`` clips its output to 80 dB under the loudest value of the whole
  call, which is why openWakeWord calls it once per 80 ms frame. Here the clip floor is taken per
  frame's 8 mel frames (``ReduceMax`` over each group instead of everything), so one call over n
  frames (with the same 480 samples of context) gives what n calls give; ``x / 10 + 2`` follows.

The mel output feeds the embedding part; the caches after openWakeWord's initial mel history (76
frames of ones) are stored in the model's metadata. Nothing is approximated: every convolution
sees the same numbers. Validation: embeddings of the published models (a mel call per frame, a
window per frame) and of the graph on real audio (or openWakeWord's noise), fed one and two
frames per call, must agree within ``tolerance``; the figures go into the manifest beside the
output, which the daemon checks at load.
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
from quantize.decoding import quiet_manifest_check
from quantize.frontends import load_audio, oww_noise
from quantize.graph import load_onnx
from quantize.manifest import partial, publish, removed_on_failure
from quantize.progress import say
from voiced.errors import ConfigError, ModelError
from voiced.models.manifest import manifest_path, sha256_file
from voiced.runtime.onnx import SessionOptions, create_session
from voiced.wake.frontend import (
    CACHES_METADATA, EMBEDDING, FRAME_SAMPLES, FRONTEND_STREAM, MEL_BINS, MEL_CONTEXT, MEL_PER_FRAME, ONES,
    STREAM_AUDIO_INPUT, STREAM_OUTPUT, WARMUP_MEL, WINDOW, StreamingFrontEnd, WindowFrontEnd, encode_caches,
)

__all__ = ["StreamReport", "stream_embedding_model", "stream_frontend_model", "write_stream"]

STREAM_MEL = "mel"
"""The embedding part's input, new mel frames [1, 8n, 32] (inside the front end: the mel part's output)."""
MEL_PREFIX = "mel/"
"""Prefix of the mel part's names in the joined graph."""

TIME = 2
"""The time axis inside the network (NCHW after the input Reshape: H is time, W the mel bins)."""
POINTWISE_OPS = frozenset({"LeakyRelu", "Relu", "Max", "Min", "Add", "Mul", "Sub", "Clip", "BatchNormalization"})
"""Operators that act on each frame alone (a Max/Add with a constant): no cache needed."""
BINARY_OPS = frozenset({"Max", "Min", "Add", "Mul", "Sub"})
"""Of those, the ones that act frame by frame only when their other operand is the same for every frame."""
TOLERANCE = 1e-5
"""Largest embedding difference accepted; the rewrite is exact, so any real difference is a bug."""


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _constant_over_time(value: np.ndarray | None) -> bool:
    """An initializer that broadcasts the same value to every frame (a scalar, or one per channel)."""
    return value is not None and (value.size == 1 or (value.ndim == 4 and value.shape[TIME] == 1))


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
    inputs = [helper.make_tensor_value_info(STREAM_MEL, TensorProto.FLOAT, [1, "mel_frames", MEL_BINS])]
    outputs = [helper.make_tensor_value_info(STREAM_OUTPUT, TensorProto.FLOAT, ["frames", EMBEDDING])]
    out_nodes = [helper.make_node("Reshape", [STREAM_MEL, "stream/in_shape"], [first.output[0]], name="stream/in")]
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
            length = (dims.get(node.input[0]) or [0, 0, 0])[2]
            # groups must end where the window ends (no frame left over), so the new frames form whole groups
            if kt != st or pads[0] or pads[2] or MEL_PER_FRAME % stride or not length or length % st:
                raise ModelError(f"{origin}: pooling {node.name or node.output[0]} (time kernel {kt}, stride {st}) is"
                                 f" not in phase with the {MEL_PER_FRAME}-frame step: the streaming rewrite would not be exact")
        elif op not in POINTWISE_OPS or (op in BINARY_OPS and not all(_constant_over_time(inits.get(x)) for x in node.input[1:])):
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


def _per_frame_melspectrogram(model: onnx.ModelProto, origin: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The mel model's nodes, names prefixed, with its clip floor per 80 ms frame: samples in
    (``STREAM_AUDIO_INPUT``), ``x / 10 + 2`` mel frames [1, 8n, 32] out (``STREAM_MEL``)."""
    graph = model.graph
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise ModelError(f"{origin}: not openWakeWord's melspectrogram model (one input, one output expected)")
    source_in, source_out = graph.input[0].name, graph.output[0].name

    def name(x: str) -> str:
        return STREAM_AUDIO_INPUT if x == source_in else MEL_PREFIX + x if x else x

    nodes = []
    for node in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [name(x) for x in node.input]
        copy.output[:] = [name(x) for x in node.output]
        copy.name = MEL_PREFIX + node.name
        nodes.append(copy)
    initializers = []
    for init in graph.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(init)
        copy.name = name(init.name)
        initializers.append(copy)
    reduce = [n for n in nodes if n.op_type == "ReduceMax"]
    clip = nodes[-1]
    if (len(reduce) != 1 or _attr(reduce[0], "axes", None) is not None or len(reduce[0].input) != 1
            or clip.op_type != "Clip" or clip.output[0] != name(source_out) or clip.input[0] != reduce[0].input[0]):
        raise ModelError(f"{origin}: not openWakeWord's melspectrogram model (expected its output clipped under the"
                         " ReduceMax of the whole call)")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    db, grouped = reduce[0].input[0], "stream/mel_grouped"
    extra = {"stream/group_shape": np.array([-1, MEL_PER_FRAME * MEL_BINS], np.int64),
             "stream/mel_shape": np.array([1, -1, MEL_BINS], np.int64),
             "stream/ten": np.array(10.0, np.float32), "stream/two": np.array(2.0, np.float32)}
    if opset >= 18:  # ReduceMax's axes became an input
        extra["stream/group_axis"] = np.array([1], np.int64)
    # the loudest value of each frame's 8 mel frames, not of the whole call: [n, 1]
    per_frame = (helper.make_node("ReduceMax", [grouped, "stream/group_axis"], [reduce[0].output[0]], keepdims=1,
                                  name="stream/frame_max") if opset >= 18 else
                 helper.make_node("ReduceMax", [grouped], [reduce[0].output[0]], axes=[1], keepdims=1, name="stream/frame_max"))
    i = nodes.index(reduce[0])
    nodes[i:i + 1] = [helper.make_node("Reshape", [db, "stream/group_shape"], [grouped], name="stream/group"), per_frame]
    # Clip(x, floor, inf) with a floor per frame is Max(x, floor), broadcast over the frame's row
    nodes[-1:] = [
        helper.make_node("Max", [grouped, clip.input[1]], ["stream/mel_floored"], name="stream/floor"),
        helper.make_node("Reshape", ["stream/mel_floored", "stream/mel_shape"], ["stream/mel_db"], name="stream/frames"),
        helper.make_node("Div", ["stream/mel_db", "stream/ten"], ["stream/mel_tenth"], name="stream/div"),
        helper.make_node("Add", ["stream/mel_tenth", "stream/two"], [STREAM_MEL], name="stream/add"),
    ]
    used = {x for n in nodes for x in n.input}
    initializers = [t for t in initializers if t.name in used]
    return nodes, initializers + [numpy_helper.from_array(v, k) for k, v in extra.items()]


def _initial_caches(embedding_stream: onnx.ModelProto) -> list[np.ndarray]:
    """The caches after openWakeWord's initial mel history: zeros, then a receptive field of ones
    (nothing of the zeros remains)."""
    import onnxruntime as ort

    session = ort.InferenceSession(embedding_stream.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.zeros(i.shape, np.float32) for i in session.get_inputs()[1:]}
    feeds[STREAM_MEL] = np.full((1, WARMUP_MEL, MEL_BINS), ONES, np.float32)
    return [np.asarray(x, np.float32) for x in session.run(None, feeds)[1:]]


def stream_frontend_model(melspec: onnx.ModelProto, embedding: onnx.ModelProto,
                          origin: str = "openWakeWord front end") -> tuple[onnx.ModelProto, list[str]]:
    """Both models as one streaming graph (samples and caches in; embeddings and caches out), and
    the names of its caches; the initial caches are in its metadata (``CACHES_METADATA``)."""
    streamed, caches = stream_embedding_model(embedding, origin)
    mel_nodes, mel_inits = _per_frame_melspectrogram(melspec, origin)
    graph = streamed.graph
    inputs = [helper.make_tensor_value_info(STREAM_AUDIO_INPUT, TensorProto.FLOAT, [1, "samples"]), *graph.input[1:]]
    joined = helper.make_graph([*mel_nodes, *graph.node], "openwakeword_frontend_stream", inputs, list(graph.output),
                               [*mel_inits, *graph.initializer])
    mel_opsets = {o.domain: o.version for o in melspec.opset_import}
    opsets = {o.domain: o.version for o in streamed.opset_import}
    if any(opsets.get(d, v) != v for d, v in mel_opsets.items()):
        raise ModelError(f"{origin}: the two models use different opsets ({mel_opsets} and {opsets}): joined, one part"
                         " would change meaning")
    opsets.update(mel_opsets)
    out = helper.make_model(joined, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
                            ir_version=max(melspec.ir_version, streamed.ir_version), producer_name="voiced-quantize wake-stream")
    out.metadata_props.add(key=CACHES_METADATA, value=encode_caches(_initial_caches(streamed)))
    onnx.checker.check_model(out)
    return out, caches


@dataclass
class StreamReport:
    """What ``wake-stream`` wrote and how it compared with the published models."""

    output: str
    sources: list[str]
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
                f" published models, largest difference {self.max_abs_diff:.2e}; CPU per 80 ms frame: {speed}")


def write_stream(directory: str | Path, *, audio: list[Path] | None = None, output: str | Path | None = None,
                 overwrite: bool = False, tolerance: float = TOLERANCE, max_seconds: float = 120.0) -> StreamReport:
    """Write ``frontend.stream.onnx`` (+ manifest) beside ``melspectrogram.onnx`` and ``embedding_model.onnx``
    in ``directory`` and validate it against them."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ConfigError("DIR", f"{folder} is not a folder with melspectrogram.onnx and embedding_model.onnx")
    melspec, embedding = folder / "melspectrogram.onnx", folder / "embedding_model.onnx"
    out_path = Path(output) if output else folder / FRONTEND_STREAM
    if out_path.exists() and not manifest_path(out_path).exists() and not overwrite:
        raise ConfigError("--output", f"{out_path} exists and was not written by voiced-quantize (no manifest beside it);"
                          " pass --force to replace it")
    model, caches = stream_frontend_model(load_onnx(melspec), load_onnx(embedding), str(folder))
    say(f"{folder}: {len(caches)} caches; writing {out_path.name}")
    # Validated as a partial file: the manifest of an earlier run (made from other source models)
    # would refuse the new graph, and a run stopped half-way must leave the old one as it was.
    written = partial(out_path)
    report = StreamReport(str(out_path), [melspec.name, embedding.name], caches=len(caches))
    with removed_on_failure([written]):
        onnx.save(model, str(written))
        samples = np.clip(np.round(_validation_audio(audio or [], max_seconds) * 32768.0), -32768, 32767)
        options = SessionOptions(threads=1)
        published = WindowFrontEnd(create_session(melspec, options), create_session(embedding, options))
        with quiet_manifest_check():  # its manifest is written below, with the validation results
            stream = StreamingFrontEnd(create_session(written, options), written)
        report.max_abs_diff, report.frames_compared = _compare(published, stream, samples)
        report.speed_us = _speed(published, stream, samples)
        report.passed = report.max_abs_diff <= tolerance
    method = {"method": "stream-rewrite", "caches": caches, "tolerance": tolerance,
              "sources": [{"file": melspec.name, "sha256": sha256_file(melspec), "size": melspec.stat().st_size}],
              "reason": "time-axis convolutions unpadded, pooling strides multiply to the 8-frame step, mel clipped"
                        " per 80 ms frame as per-frame calls clip it: exact"}
    validation = {"passed": report.passed, "frames_compared": report.frames_compared,
                  "max_abs_diff": report.max_abs_diff, "speed_us_per_frame": report.speed_us,
                  "failures": [] if report.passed else [f"largest difference {report.max_abs_diff:.3e} > {tolerance}"]}
    report.manifest = str(publish(written, out_path, embedding, method, validation))
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


def _compare(published: WindowFrontEnd, stream: StreamingFrontEnd, samples: np.ndarray) -> tuple[float, int]:
    """Both over the same samples, one frame per call and two per call (a 100 ms window sometimes
    completes two); also their initial states' embeddings (the first windows hold the ones)."""
    worst, n = 0.0, 0
    for per_call in (1, 2):
        ps, ss = published.initial_state(), stream.initial_state()
        step = per_call * FRAME_SAMPLES
        for i in range(0, len(samples) - MEL_CONTEXT - step + 1, step):
            chunk = samples[i:i + MEL_CONTEXT + step]
            a, ps = published.advance(ps, chunk)
            b, ss = stream.advance(ss, chunk)
            worst, n = max(worst, float(np.abs(a - b).max())), n + per_call
    return worst, n


def _speed(published: WindowFrontEnd, stream: StreamingFrontEnd, samples: np.ndarray, runs: int = 200) -> dict[str, float]:
    """CPU microseconds per 80 ms frame of each (medians of 3, alternated)."""
    chunk = samples[:MEL_CONTEXT + FRAME_SAMPLES]
    out: dict[str, list[float]] = {"published": [], "stream": []}
    for _ in range(3):
        for name, form in (("published", published), ("stream", stream)):
            state = form.initial_state()
            t = time.process_time()
            for _ in range(runs):
                form.advance(state, chunk)
            out[name].append((time.process_time() - t) / runs * 1e6)
    return {k: round(float(np.median(v)), 1) for k, v in out.items()}
