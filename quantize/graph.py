"""Reading an FP32 ONNX model and describing its operator mix, with errors that name the file."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from voiced.errors import ModelError

__all__ = [
    "CONTROL_FLOW_OPS",
    "CONV_OPS",
    "DYNAMIC_OPS",
    "MATMUL_OPS",
    "RECURRENT_OPS",
    "STATIC_WEIGHT_OPS",
    "GraphInfo",
    "describe",
    "load_onnx",
]

log = logging.getLogger(__name__)

CONV_OPS = frozenset({"Conv", "ConvTranspose"})
MATMUL_OPS = frozenset({"MatMul", "Gemm", "Attention"})
RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
DYNAMIC_OPS = frozenset({"Attention", "Conv", "EmbedLayerNormalization", "Gather", "LSTM", "MatMul"})
"""What onnxruntime's dynamic quantizer rewrites (its IntegerOps registry)."""
STATIC_WEIGHT_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Gather"})
"""Weight-carrying operators onnxruntime's static QDQ quantizer rewrites."""
_KNOWN_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "com.microsoft"}
"""Operator domains onnxruntime's CPU provider implements; anything else is a custom op."""


@dataclass(frozen=True)
class GraphInfo:
    """What the method choice needs to know about a model."""

    path: Path
    ops: Counter[str]
    """Node count per operator type, subgraphs (If/Loop branches) included."""
    weights: Counter[str]
    """Float parameters per operator type that consumes them (Conv, MatMul, LSTM …)."""
    subgraphs: bool
    """Whether any node carries a subgraph (If, Loop, Scan)."""
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: frozenset[str] = frozenset()
    """Node names, for checking --exclude-nodes."""

    @property
    def total_weights(self) -> int:
        return sum(self.weights.values())

    def share(self, ops: frozenset[str]) -> float:
        """Fraction of the float parameters consumed by ``ops``."""
        total = self.total_weights
        return sum(self.weights[o] for o in ops) / total if total else 0.0

    def mix(self, top: int = 6) -> str:
        """``Conv 41%, MatMul 3% …`` by parameter share, for messages."""
        total = self.total_weights or 1
        parts = [f"{op} {100 * n / total:.0f}%" for op, n in self.weights.most_common(top) if n / total >= 0.005]
        return ", ".join(parts) or "no weights"


def load_onnx(path: str | Path) -> onnx.ModelProto:
    """Load ``path`` as ONNX; a missing, non-ONNX or empty file raises ModelError naming it."""
    path = Path(path)
    if path.is_dir():  # a recognizer's or a wake word's folder has its own commands
        raise ModelError(f"{path} is a folder, not an .onnx file (folders: voiced-quantize asr DIR, wake-stream DIR)")
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # noqa: BLE001 - protobuf, onnx and the OS raise unrelated types for bad files
        raise ModelError(f"{path} is not an ONNX model ({type(exc).__name__}: {exc})") from None
    # An empty or unrelated protobuf can parse as an empty ModelProto.
    if model.ir_version <= 0 or not model.graph.node:
        raise ModelError(f"{path} is not an ONNX model (no IR version or no graph nodes)")
    return model


def describe(model: onnx.ModelProto, path: str | Path) -> GraphInfo:
    """Operator counts and parameter shares of ``model``; unknown operators raise ModelError."""
    path = Path(path)
    ops: Counter[str] = Counter()
    weights: Counter[str] = Counter()
    subgraphs = False
    unsupported: set[str] = set()
    names: set[str] = set()
    opsets = {o.domain: o.version for o in model.opset_import}
    for graph, consts in _graphs(model.graph, {}):
        for node in graph.node:
            ops[node.op_type] += 1
            names.add(node.name)
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                subgraphs = True
            if node.domain not in _KNOWN_DOMAINS or not _op_known(node.op_type, node.domain, opsets):
                unsupported.add(f"{node.op_type} (domain {node.domain or 'ai.onnx'!r})")
            for name in node.input:
                if name in consts and node.op_type != "Constant":
                    weights[node.op_type] += consts[name]
    if unsupported:
        raise ModelError(
            f"{path}: unsupported operators {', '.join(sorted(unsupported))}: onnxruntime's CPU provider"
            " cannot run them, so the model cannot be calibrated or validated"
        )
    return GraphInfo(
        path=path,
        ops=ops,
        weights=weights,
        subgraphs=subgraphs,
        inputs=tuple(i.name for i in model.graph.input),
        outputs=tuple(o.name for o in model.graph.output),
        nodes=frozenset(names),
    )


def _op_known(op_type: str, domain: str, opsets: dict[str, int]) -> bool:
    if domain == "com.microsoft":
        return True  # contrib ops are registered in onnxruntime, not in onnx.defs
    try:
        onnx.defs.get_schema(op_type, opsets.get(domain, opsets.get("", 1)), domain)
    except (onnx.defs.SchemaError, TypeError):  # no such operator at that opset; a damaged name (not text)
        return False
    return True


def _graphs(graph: onnx.GraphProto, outer: dict[str, int]) -> Iterator[tuple[onnx.GraphProto, dict[str, int]]]:
    """Every graph and subgraph with the float constants visible in it (name → element count)."""
    consts = dict(outer)
    for init in graph.initializer:
        if init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE):
            consts[init.name] = int(np.prod(init.dims)) if init.dims else 1
    for node in graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.t.data_type == onnx.TensorProto.FLOAT:
                    consts[node.output[0]] = int(np.prod(a.t.dims)) if a.t.dims else 1
    yield graph, consts
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g, consts)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _graphs(g, consts)
