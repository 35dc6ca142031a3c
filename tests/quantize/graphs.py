"""Small FP32 graphs built with onnx.helper, one per operator family the method choice knows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["conv_net", "custom_op_net", "inputs_npz", "lstm_net", "mlp", "no_weights_net", "saturating_matmul"]

OPSET = 13


def _save(graph: onnx.GraphProto, path: Path, opset: int = OPSET, domains: tuple[str, ...] = ()) -> Path:
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="voiced-tests")
    model.ir_version = 8
    model.metadata_props.add(key="made_by", value="tests.quantize.graphs")
    if not domains:
        onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def _w(rng: np.random.Generator, name: str, *shape: int, std: float | None = None) -> onnx.TensorProto:
    std = std if std is not None else 1 / np.sqrt(shape[0] if len(shape) == 2 else np.prod(shape[1:]))
    return numpy_helper.from_array((rng.standard_normal(shape) * std).astype(np.float32), name)


def mlp(path: Path, dim: int = 64, hidden: int = 128, classes: int = 10, seed: int = 0, ties: bool = False) -> Path:
    """x [N, dim] → MatMul/Add/Relu ×2 → logits [N, classes]: a MatMul graph (dynamic).

    ``ties``: the classes' weights differ by 1e-4, so INT8 rounding decides the argmax (agreement fails).
    """
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="fc1"),
        helper.make_node("Add", ["h1", "b1"], ["h1b"], name="fc1_bias"),
        helper.make_node("Relu", ["h1b"], ["a1"], name="relu1"),
        helper.make_node("MatMul", ["a1", "w2"], ["h2"], name="fc2"),
        helper.make_node("Add", ["h2", "b2"], ["logits"], name="fc2_bias"),
    ]
    w2 = _w(rng, "w2", hidden, classes)
    if ties:
        base = rng.standard_normal((hidden, 1)) / np.sqrt(hidden)
        w2 = numpy_helper.from_array((base + 1e-4 * rng.standard_normal((hidden, classes))).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(np.zeros(classes, np.float32), "b2") if ties else _w(rng, "b2", classes, std=0.1)
    inits = [_w(rng, "w1", dim, hidden), _w(rng, "b1", hidden, std=0.1), w2, b2]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", dim])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])], inits)
    return _save(graph, path)


def conv_net(path: Path, channels: int = 16, classes: int = 8, seed: int = 0) -> Path:
    """x [N, 1, 32, 32] → Conv/Relu ×3 → global pool → Gemm: a conv graph (static)."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev, cin = [], [], "x", 1
    for i in range(3):
        nodes += [helper.make_node("Conv", [prev, f"c{i}w", f"c{i}b"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1],
                                   strides=[2, 2] if i else [1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        inits += [_w(rng, f"c{i}w", channels, cin, 3, 3), _w(rng, f"c{i}b", channels, std=0.1)]
        prev, cin = f"r{i}", channels
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["pool"], name="pool"),
              helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"),
              helper.make_node("Gemm", ["flat", "fw", "fb"], ["logits"], name="classifier")]
    inits += [_w(rng, "fw", channels, classes), _w(rng, "fb", classes, std=0.1)]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 32, 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])], inits)
    return _save(graph, path)


def lstm_net(path: Path, dim: int = 16, hidden: int = 32, seed: int = 0) -> Path:
    """x [T, 1, dim] → LSTM → y: a recurrent graph (dynamic, whatever the mix)."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "h", "c"], name="lstm", hidden_size=hidden)]
    inits = [_w(rng, "W", 1, 4 * hidden, dim), _w(rng, "R", 1, 4 * hidden, hidden), _w(rng, "B", 1, 8 * hidden, std=0.1)]
    graph = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 1, dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", 1, 1, hidden]),
                               helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 1, hidden]),
                               helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 1, hidden])], inits)
    return _save(graph, path)


def custom_op_net(path: Path) -> Path:
    """A MatMul followed by an operator from a domain onnxruntime does not know."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
             helper.make_node("FancyActivation", ["h"], ["y"], name="fancy", domain="com.example.custom")]
    graph = helper.make_graph(nodes, "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], [_w(rng, "w", 8, 8)])
    return _save(graph, path, domains=("com.example.custom",))


def no_weights_net(path: Path) -> Path:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "plain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])])
    return _save(graph, path)


def inputs_npz(path: Path, shape: tuple[int, ...], count: int = 60, name: str = "x", seed: int = 1) -> Path:
    """``count`` samples of ``shape`` (batch of one each) as x [count, ...]."""
    rng = np.random.default_rng(seed)
    np.savez(path, **{name: rng.standard_normal((count, *shape[1:])).astype(np.float32)})
    return path


def saturating_matmul(path: Path, dim: int = 256, out: int = 16, seed: int = 0) -> Path:
    """x [N, dim] (non-negative, like activations after a ReLU) → MatMul with weights of magnitude
    near the largest: u8 activations near 255 times s8 weights near ±127, added in pairs, exceed
    int16 — what AVX2 without VNNI does (VPMADDUBSW) saturates on every other output."""
    rng = np.random.default_rng(seed)
    w = (rng.choice([-1.0, 1.0], (dim, out)) * rng.uniform(0.8, 1.0, (dim, out))).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "saturating", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", out])],
                              [numpy_helper.from_array(w, "w")])
    return _save(graph, path)
