"""Whisper's output projection written as a MatMul that dynamic quantization takes.

The decoder's logits use the token embedding ``E`` [vocab, width] tied: the export computes
``Transpose(MatMul(E, Transpose(x)))``. Dynamic quantization only takes a MatMul whose second
input is the constant (``MatMulConstBOnly``), so this one, the decoder's largest (51,864 x 384 for
tiny.en: 80 MB of FP32 read for every token), stayed FP32 and was ~40 % of an INT8 decoder call
(14 of 34 ms in ONNX Runtime's profile on this VM). Written as ``MatMul(x, E^T)`` with ``E^T`` its
own initializer it is quantized like the other MatMuls; ``E`` stays FP32 for the token
embedding's Gather. The FP32 files are not touched.
"""

from __future__ import annotations

import onnx
from onnx import helper, numpy_helper

__all__ = ["untie_logits"]


def _perm(node: onnx.NodeProto) -> list[int]:
    return next((list(helper.get_attribute_value(a)) for a in node.attribute if a.name == "perm"), [])


def untie_logits(model: onnx.ModelProto) -> int:
    """Rewrite ``Transpose(MatMul(E, Transpose(x)))`` (both transposes swapping the last two axes
    of a rank-3 tensor, ``E`` a rank-2 initializer) into ``MatMul(x, E^T)`` in place; returns how
    many were rewritten."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    graph_outputs = {o.name for o in graph.output}
    swap = [0, 2, 1]
    drop: set[int] = set()
    replace: dict[int, onnx.NodeProto] = {}
    count = 0
    for node in graph.node:
        if node.op_type != "Transpose" or _perm(node) != swap:
            continue
        matmul = producer.get(node.input[0])
        if (matmul is None or matmul.op_type != "MatMul" or matmul.input[0] not in inits
                or uses.get(matmul.output[0]) != 1 or matmul.output[0] in graph_outputs):
            continue
        inner = producer.get(matmul.input[1])
        weight = inits[matmul.input[0]]
        if (inner is None or inner.op_type != "Transpose" or _perm(inner) != swap or len(weight.dims) != 2
                or uses.get(inner.output[0]) != 1 or inner.output[0] in graph_outputs):
            continue
        transposed = numpy_helper.from_array(numpy_helper.to_array(weight).T.copy(), f"{weight.name}.transposed")
        graph.initializer.append(transposed)
        replace[id(node)] = helper.make_node("MatMul", [inner.input[0], transposed.name], list(node.output),
                                             name=f"{matmul.name}.untied")
        drop.update((id(matmul), id(inner)))
        count += 1
    if count:
        nodes = [replace.get(id(n), n) for n in graph.node if id(n) not in drop]
        del graph.node[:]
        graph.node.extend(nodes)
    return count
