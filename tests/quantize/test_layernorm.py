"""LayerNormalization written out as primitive operators: the same function, and ONNX Runtime does not fuse it back."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantize.layernorm import lower_layer_norms


def _model(opset: int, axis: int = -1, with_bias: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(1, 0.2, 16).astype(np.float32), "gamma")]
    inputs = ["x", "gamma"]
    if with_bias:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.2, 16).astype(np.float32), "beta"))
        inputs.append("beta")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["x_relu"]),  # something before it, as in a real graph
         helper.make_node("LayerNormalization", ["x_relu", *inputs[1:]], ["y"], name="ln", axis=axis, epsilon=1e-5)],
        "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _run(model: onnx.ModelProto, x: np.ndarray, optimized: Path | None = None) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("opset", [17, 18])
def test_same_function_and_not_fused_back(opset: int, tmp_path: Path) -> None:
    x = np.random.default_rng(1).normal(0, 3, (2, 7, 16)).astype(np.float32)
    model = _model(opset)
    expected = _run(model, x)
    assert lower_layer_norms(model) == 1
    onnx.checker.check_model(model, full_check=True)
    assert "LayerNormalization" not in {n.op_type for n in model.graph.node}
    got = _run(model, x, optimized=tmp_path / "optimized.onnx")
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-6)
    # the graph optimizer (ORT_ENABLE_ALL) leaves it written out: the version-dependent kernel is not used
    optimized = Counter(n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node)
    assert not {"LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization"} & set(optimized)
    assert optimized["ReduceMean"] == 2


def test_other_layer_norms_are_left_as_they_are() -> None:
    for model in (_model(17, axis=1), _model(17, with_bias=False)):
        assert lower_layer_norms(model) == 0
        assert [n.op_type for n in model.graph.node] == ["Relu", "LayerNormalization"]
