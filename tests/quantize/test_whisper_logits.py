"""The tied output projection of a Whisper decoder rewritten so dynamic quantization takes it.

The real decoder's case is in tests/quantize/test_whisper_int8.py (the INT8 decoder of the real
tiny.en weights has no FP32 vocabulary MatMul left); here the graph is the export's pattern in
small: the same function, a quantizable MatMul, and graphs that are not the pattern left alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from quantize.whisper_logits import untie_logits

VOCAB, WIDTH = 96, 16


def _decoder_tail(outer_perm: tuple[int, ...] = (0, 2, 1), share_inner: bool = False) -> onnx.ModelProto:
    """tokens -> Gather(E) -> Relu -> Transpose -> MatMul(E, .) -> Transpose -> logits, E tied as in the export."""
    rng = np.random.default_rng(0)
    embedding = numpy_helper.from_array(rng.normal(0, 0.5, (VOCAB, WIDTH)).astype(np.float32), "embed.weight")
    nodes = [
        helper.make_node("Gather", ["embed.weight", "tokens"], ["x"], name="embed"),
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("Transpose", ["h"], ["ht"], name="inner", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["embed.weight", "ht"], ["scores"], name="proj"),
        helper.make_node("Transpose", ["scores"], ["logits"], name="outer", perm=list(outer_perm)),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)]
    if share_inner:  # the transposed activations are used elsewhere too: not the pattern
        outputs.append(helper.make_tensor_value_info("ht", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, 5])],
                              outputs, [embedding])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model: onnx.ModelProto, tokens: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"tokens": tokens})[0]


def test_the_tied_projection_becomes_a_matmul_with_a_constant_b_and_the_same_logits() -> None:
    tokens = np.array([[3, 17, 40, 95, 0]], np.int64)
    model = _decoder_tail()
    before = _run(model, tokens)
    assert untie_logits(model) == 1
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Gather", "Relu", "MatMul"], ops  # both transposes gone
    inits = {i.name: i for i in model.graph.initializer}
    matmul = model.graph.node[-1]
    assert matmul.input[0] == "h" and tuple(inits[matmul.input[1]].dims) == (WIDTH, VOCAB)
    assert model.graph.node[0].input[0] == "embed.weight"  # the embedding's Gather keeps the FP32 table
    np.testing.assert_allclose(_run(model, tokens), before, rtol=1e-5, atol=1e-5)


def test_dynamic_quantization_now_takes_the_projection(tmp_path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def quantized_ops(model: onnx.ModelProto) -> set[str]:
        src, out = tmp_path / "m.onnx", tmp_path / "m.int8.onnx"
        onnx.save(model, str(src))
        quantize_dynamic(str(src), str(out), op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8,
                         extra_options={"MatMulConstBOnly": True})
        return {n.op_type for n in onnx.load(str(out)).graph.node}

    tied = _decoder_tail()
    assert "MatMulInteger" not in quantized_ops(tied)  # why the rewrite exists: A constant, B not
    untie_logits(tied)
    assert "MatMulInteger" in quantized_ops(tied)


def test_graphs_that_are_not_the_pattern_are_left_alone() -> None:
    for model in (_decoder_tail(outer_perm=(1, 0, 2)), _decoder_tail(share_inner=True)):
        before = model.SerializeToString()
        assert untie_logits(model) == 0
        assert model.SerializeToString() == before
