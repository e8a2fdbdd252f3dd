"""Matrix products: mm, bmm, addmm, linear, matmul."""

from __future__ import annotations

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation

aten = torch.ops.aten


@translation(aten.linear.default)
def aten_linear(b: GraphBuilder, input: Value, weight: Value, bias: Value | None = None) -> Value:
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"""
    if input.rank == 2 and weight.rank == 2:
        return b.op("Gemm", input, weight, bias, transB=1)
    out = b.op("MatMul", input, b.op("Transpose", weight, perm=[1, 0]))
    return out if bias is None else b.op("Add", out, bias)


@translation(aten.addmm.default)
def aten_addmm(b: GraphBuilder, self: Value, mat1: Value, mat2: Value, beta: float = 1, alpha: float = 1) -> Value:
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    return b.op("Gemm", mat1, mat2, self, alpha=float(alpha), beta=float(beta))


@translation(aten.mm.default)
def aten_mm(b: GraphBuilder, self: Value, mat2: Value) -> Value:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return b.op("MatMul", self, mat2)
