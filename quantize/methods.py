"""Dynamic vs static quantization: the choice by operator mix, and running onnxruntime's quantizer.

Measured on the real models in ../shared (onnxruntime 1.31, x86, 1 thread), which is where
the rules come from:

- Conv-only graphs (moonshine spelling CNN, openWakeWord embedding): static QDQ with
  per-channel weights keeps the spelling CNN's top-1 (200/220 clips, as FP32); dynamic
  (ConvInteger with per-call activation ranges) drops it to 0/220 and runs 10x slower, and
  static with per-tensor weights also collapses it to 0/220.
- LSTM and If subgraphs (Silero VAD): onnxruntime cannot calibrate tensors inside
  subgraphs nor quantize LSTM statically; dynamic (EnableSubgraph) quantizes both.
- MatMul-dominated graphs (transducer encoders, joiners, decoders): dynamic, as icefall
  and sherpa-onnx do for their published ``*.int8.onnx`` files.

The weight format (``choose_weight_format``) is a separate choice, by CPU rather than graph:
on an AMD EPYC with AVX2 and no VNNI, s8 weights failed the spelling CNN, the oww embedding
and the transducers where u8 kept all of them (README, "INT8 on x86 with AVX2 and no VNNI").
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader

from quantize.graph import (
    CONTROL_FLOW_OPS,
    CONV_OPS,
    DYNAMIC_OPS,
    MATMUL_OPS,
    RECURRENT_OPS,
    STATIC_WEIGHT_OPS,
    GraphInfo,
    describe,
)
from quantize.cpu import CpuInfo, IntegerKernels, detect_cpu
from quantize.options import CalibrateMethod, Method, QuantizeOptions, WeightFormat
from voiced.errors import ConfigError, ModelError
from voiced.models.manifest import manifest_path

__all__ = ["MethodChoice", "WeightChoice", "choose_method", "choose_weight_format", "preprocess", "quantize_file",
           "unfuse_gemm"]

log = logging.getLogger(__name__)

Feeds = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class MethodChoice:
    """The method used and a sentence saying why."""

    method: Method
    reason: str


def choose_method(info: GraphInfo, requested: Method, has_calibration: bool) -> MethodChoice:
    """Resolve ``auto`` by operator mix; check a forced method can work on this graph."""
    recurrent = sorted(op for op in RECURRENT_OPS if info.ops[op])
    control = sorted(op for op in CONTROL_FLOW_OPS if info.ops[op])
    conv, matmul = info.share(CONV_OPS), info.share(MATMUL_OPS | {"Gather"})
    if info.total_weights == 0:
        raise ModelError(f"{info.path}: the graph has no float weights: nothing to quantize")
    if requested is Method.STATIC:
        if control:
            raise ConfigError("--method", f"{info.path}: static quantization cannot calibrate tensors inside"
                              f" {'/'.join(control)} subgraphs; use --method dynamic")
        if not has_calibration:
            raise ConfigError("--method", "static quantization needs calibration data (--audio or --npz)")
        return MethodChoice(Method.STATIC, f"requested (--method static); weights: {info.mix()}")
    if requested is Method.DYNAMIC:
        return MethodChoice(Method.DYNAMIC, f"requested (--method dynamic); weights: {info.mix()}")
    if recurrent or control:
        what = " and ".join(
            x for x in (", ".join(f"{op} x{info.ops[op]}" for op in recurrent), "/".join(control) + " subgraphs" if control else "") if x
        )
        return MethodChoice(
            Method.DYNAMIC,
            f"the graph has {what}: onnxruntime cannot quantize recurrent layers statically nor calibrate inside"
            f" subgraphs, so dynamic (INT8 weights, activations quantized per call; weights: {info.mix()})",
        )
    if conv > matmul:
        if not has_calibration:
            raise ConfigError(
                "--method",
                f"{info.path}: a convolutional graph (weights: {info.mix()}) wants static quantization, which needs"
                " calibration data: give --kind with --audio, or --npz; or force --method dynamic",
            )
        return MethodChoice(
            Method.STATIC,
            f"convolutional graph (Conv holds {conv:.0%} of the weights): static QDQ with calibrated activation ranges;"
            " dynamic ConvInteger is slower and its per-call ranges cost accuracy",
        )
    return MethodChoice(
        Method.DYNAMIC,
        f"MatMul/Gemm/Gather hold {matmul:.0%} of the weights ({info.mix()}): dynamic quantization (INT8 weights,"
        " activations quantized per call) suits MLP/transformer/transducer graphs and needs no calibration",
    )


@dataclass(frozen=True)
class WeightChoice:
    """The weight format used (never auto) and a sentence saying why."""

    format: WeightFormat
    reason: str

    @property
    def weight_type(self) -> str:
        """onnxruntime's QuantType name for it."""
        return "QUInt8" if self.format is WeightFormat.U8 else "QInt8"

    @property
    def reduce_range(self) -> bool:
        return self.format is WeightFormat.S8_REDUCED


SAFE_WEIGHT_FORMAT = WeightFormat.U8
"""auto's pick where u8×s8 kernels saturate (see the README section on AVX2 without VNNI for the figures)."""


def choose_weight_format(requested: WeightFormat, cpu: CpuInfo | None = None) -> WeightChoice:
    """Resolve ``auto`` by the integer kernels of ``cpu`` (default: the CPU this runs on)."""
    if requested is not WeightFormat.AUTO:
        return WeightChoice(requested, f"requested (--weight-format {requested.value})")
    cpu = cpu or detect_cpu()
    kernels = cpu.kernels
    if kernels is IntegerKernels.EXACT:
        return WeightChoice(WeightFormat.S8, f"auto: {cpu.describe()} accumulates u8×s8 products in 32 bits,"
                                             " so signed 8-bit weights are exact and fastest")
    why = ("adds pairs of u8×s8 products in int16 (VPMADDUBSW), which saturates"
           if kernels is IntegerKernels.SATURATING else "may add pairs of u8×s8 products in int16 (AVX2 without VNNI)")
    return WeightChoice(SAFE_WEIGHT_FORMAT, f"auto: {cpu.describe()} {why}; {SAFE_WEIGHT_FORMAT.value} weights"
                        " do not (quantizing for another CPU: pass --weight-format for that one)")


def preprocess(src: Path, dst: Path) -> str | None:
    """onnxruntime's quant_pre_process (ONNX shape inference + basic optimizations) into ``dst``.

    Returns None on success, else the reason it was skipped (``dst`` then holds a copy of ``src``).
    Symbolic shape inference is skipped: it needs sympy and only helps transformer graphs
    with symbolic dimensions.
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    try:
        with _quiet():
            quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)
        return None
    except Exception as exc:  # noqa: BLE001 - the optimizer and shape inference raise assorted types; fall back
        onnx.save(onnx.load(str(src)), str(dst))
        return f"{type(exc).__name__}: {exc}"


def quantize_file(
    src: Path,
    dst: Path,
    info: GraphInfo,
    method: Method,
    options: QuantizeOptions,
    calibration: Sequence[Feeds] = (),
) -> dict[str, Any]:
    """Quantize ``src`` into ``dst`` with ``method``; returns the parameters given to onnxruntime.

    A manifest left beside ``dst`` by an earlier run is removed first: the new file is loaded
    for validation, and the session factory would refuse it against the old checksum.
    """
    from onnxruntime.quantization.registry import IntegerOpsRegistry, QDQRegistry

    manifest_path(dst).unlink(missing_ok=True)

    registry = set(IntegerOpsRegistry if method is Method.DYNAMIC else QDQRegistry)
    with tempfile.TemporaryDirectory(prefix="voiced-quantize-") as tmp:
        if method is Method.DYNAMIC:
            model = onnx.load(str(src))
            if unfuse_gemm(model):
                # quant_pre_process fuses MatMul+Add into Gemm, which the dynamic quantizer skips.
                src = Path(tmp) / "unfused.onnx"
                onnx.save(model, str(src))
                info = describe(model, info.path)
        return _run(src, dst, info, method, options, calibration, registry)


def _run(src: Path, dst: Path, info: GraphInfo, method: Method, options: QuantizeOptions,
         calibration: Sequence[Feeds], registry: set[str]) -> dict[str, Any]:
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    op_types = _op_types(info, method, registry, options)
    per_channel = options.use_per_channel(method, info.share(MATMUL_OPS | {"Gather"}))
    weights = choose_weight_format(options.weight_format)
    weight_type = QuantType[weights.weight_type]
    params: dict[str, Any] = {
        "op_types": sorted(op_types & set(info.ops)),
        "per_channel": per_channel,
        "weight_format": weights.format.value,
        "weight_format_reason": weights.reason,
        "reduce_range": weights.reduce_range,
        "weight_type": weights.weight_type,
        "exclude_nodes": list(options.exclude_nodes),
        "exclude_op_types": list(options.exclude_op_types),
    }
    missing = [n for n in options.exclude_nodes if n not in info.nodes]
    if missing:
        log.warning("%s: --exclude-nodes names no node called %s (after pre-processing, which may fuse nodes)",
                    info.path, ", ".join(missing))
    if method is Method.DYNAMIC:
        extra = {"EnableSubgraph": info.subgraphs}
        params["extra_options"] = extra
        with _quiet():
            quantize_dynamic(
                str(src), str(dst), op_types_to_quantize=sorted(op_types), per_channel=per_channel,
                reduce_range=weights.reduce_range, weight_type=weight_type,
                nodes_to_exclude=list(options.exclude_nodes), extra_options=extra,
            )
        return params
    if not calibration:
        raise ConfigError("calibration", f"static quantization of {src} needs calibration data, and the set is empty")
    calib = {
        CalibrateMethod.MINMAX: CalibrationMethod.MinMax,
        CalibrateMethod.PERCENTILE: CalibrationMethod.Percentile,
        CalibrateMethod.ENTROPY: CalibrationMethod.Entropy,
    }[options.calibrate]
    # U8 asymmetric activations with symmetric weights (S8: onnxruntime's fast x86/ARM path; U8 where
    # that saturates); on the spelling CNN U8 activations kept top-1 at 200/220 where S8 gave 199/220.
    extra = {"ActivationSymmetric": False, "WeightSymmetric": True, "CalibMaxIntermediateOutputs": 32}
    params.update(activation_type="QUInt8", format="QDQ", calibrate_method=options.calibrate.value,
                  calibration_samples=len(calibration), extra_options=extra)
    with _quiet():
        quantize_static(
            str(src), str(dst), _Reader(calibration), quant_format=QuantFormat.QDQ, op_types_to_quantize=sorted(op_types),
            per_channel=per_channel, reduce_range=weights.reduce_range, activation_type=QuantType.QUInt8,
            weight_type=weight_type, nodes_to_exclude=list(options.exclude_nodes), calibrate_method=calib,
            calibration_providers=["CPUExecutionProvider"], extra_options=extra,
        )
    return params


def unfuse_gemm(model: onnx.ModelProto) -> bool:
    """Rewrite ``Gemm(A, B, C)`` with a constant B, alpha 1 and no transA as ``MatMul(A, B') + C``
    (in place, main graph only); returns whether anything changed."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    nodes: list[onnx.NodeProto] = []
    changed = False
    for node in graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if (node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or node.input[1] not in inits
                or attrs.get("alpha", 1.0) != 1.0 or attrs.get("transA", 0)
                or (len(node.input) > 2 and node.input[2] and attrs.get("beta", 1.0) != 1.0)):
            nodes.append(node)
            continue
        weight = node.input[1]
        if attrs.get("transB", 0):
            arr = onnx.numpy_helper.to_array(inits[weight]).T.copy()
            weight = f"{node.input[1]}_transposed_for_matmul"
            if weight not in inits:
                inits[weight] = onnx.numpy_helper.from_array(arr, weight)
                graph.initializer.append(inits[weight])
        has_bias = len(node.input) > 2 and bool(node.input[2])
        mm_out = f"{node.output[0]}_matmul" if has_bias else node.output[0]
        # onnxruntime names a fused node "<MatMul's name>/MatMulAddFusion": give the MatMul its name
        # back, so --exclude-nodes can use the names of the source graph.
        base = node.name.removesuffix("/MatMulAddFusion")
        mm_name = base if base != node.name else f"{node.name}/MatMul"
        nodes.append(onnx.helper.make_node("MatMul", [node.input[0], weight], [mm_out], name=mm_name))
        if has_bias:
            nodes.append(onnx.helper.make_node("Add", [mm_out, node.input[2]], [node.output[0]], name=f"{base}/Add"))
        changed = True
    if changed:
        del graph.node[:]
        graph.node.extend(nodes)
    return changed


def _op_types(info: GraphInfo, method: Method, registry: set[str], options: QuantizeOptions) -> set[str]:
    chosen = set(options.op_types) if options.op_types else set(registry)
    unknown = chosen - registry
    if unknown:
        raise ConfigError("--op-types", f"the {method.value} quantizer does not handle {', '.join(sorted(unknown))}"
                          f" (it handles {', '.join(sorted(registry))})")
    chosen -= set(options.exclude_op_types)
    weight_ops = (DYNAMIC_OPS if method is Method.DYNAMIC else STATIC_WEIGHT_OPS) & chosen
    present = {op for op in weight_ops if info.weights[op]}
    if not present:
        held = ", ".join(f"{op}" for op, _ in info.weights.most_common(4)) or "none"
        raise ModelError(
            f"{info.path}: unsupported operators for {method.value} quantization: the weights sit in {held},"
            f" and the {method.value} quantizer rewrites only {', '.join(sorted(weight_ops)) or 'nothing selected'}"
            + ("; try --method static" if method is Method.DYNAMIC else "")
        )
    return chosen


class _Reader(CalibrationDataReader):
    """onnxruntime's CalibrationDataReader over a list of feeds."""

    def __init__(self, feeds: Sequence[Feeds]) -> None:
        self._feeds = feeds
        self._it: Iterator[Feeds] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        item = next(self._it, None)
        return None if item is None else dict(item)

    def rewind(self) -> None:
        self._it = iter(self._feeds)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence onnxruntime.quantization's root-logger warnings and prints (our own progress says more)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(sys.stderr if log.isEnabledFor(logging.DEBUG) else _Null()):
            yield
    finally:
        logging.disable(previous)


class _Null:
    def write(self, _s: str) -> int:
        return 0

    def flush(self) -> None:
        pass
