"""LayerNormalization written out as primitive operators, so INT8 decisions do not depend on the ONNX Runtime version.

A dynamically quantized model re-quantizes its activations on every call, and a LayerNormalization
output feeds every quantized MatMul of a transformer. ONNX Runtime's LayerNormalization kernel
changed between 1.28 and 1.32 (87% of the first encoder LayerNorm's outputs of Whisper tiny.en differ
in the last bits on the same input; 1.32's are closer to float64), which is enough to round some
quantized values the other way: voiced on onnxruntime 1.32 and sherpa-onnx 2.0.1 (bundling 1.28.2)
gave different tokens on 8 of 118 files for the same INT8 files. The primitive kernels (ReduceMean,
Sub, Mul, Add, Sqrt, Reciprocal) give bit-identical results in both versions, so with LayerNorm
written out the INT8 encoder's output is bit-identical across them and the tokens are equal on all
118 files, at no measurable cost (one INT8 encoder call: 114.6 vs 113.9 ms).

The formulation is ONNX Runtime's LayerNormalization fusion pattern changed on purpose in two places
(``d * d`` instead of ``Pow(d, 2)``, ``Reciprocal`` then ``Mul`` instead of ``Div``), so the graph
optimizer does not fuse it back into the version-dependent kernel.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["lower_layer_norms"]


def _attribute(node: onnx.NodeProto, name: str, default: float | int) -> float | int:
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _lowerable(node: onnx.NodeProto, rank: int | None) -> bool:
    """Only the transformer case: normalized over the last axis, float32 statistics, scale and bias given."""
    axis = int(_attribute(node, "axis", -1))
    last = axis == -1 or (rank is not None and axis == rank - 1)
    return (node.op_type == "LayerNormalization" and node.domain in ("", "ai.onnx") and last
            and int(_attribute(node, "stash_type", 1)) == 1 and len(node.input) == 3 and all(node.input)
            and len([o for o in node.output if o]) == 1 and node.output[0] != "")


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    infos = [*model.graph.value_info, *model.graph.input, *model.graph.output]
    return {v.name: len(v.type.tensor_type.shape.dim) for v in infos if v.type.tensor_type.HasField("shape")}


def lower_layer_norms(model: onnx.ModelProto) -> int:
    """Replace the main graph's LayerNormalization nodes (last axis, with scale and bias) in place;
    returns how many were replaced. Opset >= 13 (ReduceMean's axes are an attribute up to opset 17,
    an input from 18)."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    ranks = _ranks(model)
    nodes: list[onnx.NodeProto] = []
    count = 0
    for node in model.graph.node:
        if not _lowerable(node, ranks.get(node.input[0])):
            nodes.append(node)
            continue
        count += 1
        x, scale, bias = node.input
        p = f"{node.name or node.output[0]}/lowered"
        epsilon = float(_attribute(node, "epsilon", 1e-5))
        model.graph.initializer.append(numpy_helper.from_array(np.array(epsilon, np.float32), f"{p}/epsilon"))
        if opset >= 18:
            model.graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), f"{p}/axes"))

        def mean(src: str, dst: str) -> onnx.NodeProto:
            if opset >= 18:
                return helper.make_node("ReduceMean", [src, f"{p}/axes"], [dst], keepdims=1)
            return helper.make_node("ReduceMean", [src], [dst], axes=[-1], keepdims=1)

        nodes += [
            mean(x, f"{p}/mean"),
            helper.make_node("Sub", [x, f"{p}/mean"], [f"{p}/centred"]),
            helper.make_node("Mul", [f"{p}/centred", f"{p}/centred"], [f"{p}/squared"]),
            mean(f"{p}/squared", f"{p}/variance"),
            helper.make_node("Add", [f"{p}/variance", f"{p}/epsilon"], [f"{p}/variance_eps"]),
            helper.make_node("Sqrt", [f"{p}/variance_eps"], [f"{p}/std"]),
            helper.make_node("Reciprocal", [f"{p}/std"], [f"{p}/inv_std"]),
            helper.make_node("Mul", [f"{p}/centred", f"{p}/inv_std"], [f"{p}/normalized"]),
            helper.make_node("Mul", [f"{p}/normalized", scale], [f"{p}/scaled"]),
            helper.make_node("Add", [f"{p}/scaled", bias], [node.output[0]]),
        ]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return count
