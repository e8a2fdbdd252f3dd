"""A LLaMA attention layer's scores in the one form ORT's ``FusionRotaryAttention`` matches, ``Softmax <- Add(mask)
<- Div <- MatMul``: the form the translation gives float32 scores, ``MatMul(Q, K^T) / sqrt(E)``; half-precision
scores, which the translation computes as ``MatMul(Q * E**-0.25, K^T * E**-0.25)`` so that Q K^T cannot overflow
(as torch's math attention does), are written in it too (``_rotary.py``, ``optimize="ort-fusion"`` only).
"""

from __future__ import annotations

import math

import onnx
import torch

from onnxsight.exporter._dtypes import to_torch
from onnxsight.exporter.optimize._decoder import scaled_by_root_of_head_size
from onnxsight.exporter.optimize._emit import Emitter
from onnxsight.exporter.optimize._graph import Graph, parent


def scores(graph: Graph, add: onnx.NodeProto | None) \
        -> tuple[tuple[onnx.NodeProto, onnx.NodeProto], onnx.NodeProto | None] | None:
    """((the node reading Q, the node reading K^T), None) where ``add``'s scores are ``MatMul(Q, K^T) / sqrt(E)``;
    ((Q's Mul, K^T's Mul), their MatMul) where they are ``MatMul(Q * E**-0.25, K^T * E**-0.25)`` (half precision);
    None otherwise."""
    div = parent(graph, add, 0, "Div")
    matmul = parent(graph, div, 0, "MatMul")
    if div is not None:
        return ((matmul, matmul), None) if matmul is not None and scaled_by_root_of_head_size(graph, div, matmul) \
            else None
    matmul = parent(graph, add, 0, "MatMul")
    muls = [graph.private(name, "Mul") for name in matmul.input] if matmul is not None else [None]
    if None in muls:
        return None
    head = graph.symbolic_shape(muls[0].input[0])
    roots = [graph.scalar(m.input[1]) for m in muls]
    if head is None or not isinstance(head[-1], int) or None in roots \
            or not all(math.isclose(r, head[-1] ** -0.25, rel_tol=1e-3) for r in roots):
        return None   # rel_tol: E**-0.25 rounded to float16 or bfloat16
    return (muls[0], muls[1]), matmul


def divided(emit: Emitter, prescaled: onnx.NodeProto, add: onnx.NodeProto, head_size: int) -> None:
    """``add`` reads ``MatMul(Q, K^T) / sqrt(E)`` in the scores' dtype instead of ``prescaled``, ``MatMul(Q * r,
    K^T * r)`` (left to dead code).

    NOTE: in float16, Q K^T now overflows where a score (after the scaling) passes 65504 / sqrt(E), about 5800 for
    a head size of 128, where the translation's form does not; attention scores are nowhere near that in practice,
    and ORT's fused ``MultiHeadAttention`` scales by itself. The unfused graph rounds Q K^T once more than eager
    PyTorch's float16 (a float16 step)."""
    graph = emit.graph
    q, k = (graph.producer[name].input[0] for name in prescaled.input)
    kind = to_torch(graph.elem_type(add.output[0]))
    product = emit.op("MatMul", q, k)
    value = emit.op("Div", product, emit.const("_root_head_size", torch.tensor(head_size ** 0.5, dtype=kind)))
    emit.place(prescaled)
    graph.set_input(add, 0, value)
