"""Elementwise arithmetic, comparison, logic and unary math."""

from __future__ import annotations

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation

aten = torch.ops.aten


def _binary(b: GraphBuilder, op_type: str, self: Value | float, other: Value | float) -> Value:
    dtype, (x, y) = b.promote(self, other)
    return b.op(op_type, x, y, dtype=dtype)


@translation(aten.add.Tensor, aten.add.Scalar)
def aten_add(b: GraphBuilder, self: Value, other: Value | float, alpha: float = 1) -> Value:
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    if alpha != 1:
        other = aten_mul(b, other, alpha)
    return _binary(b, "Add", self, other)


@translation(aten.sub.Tensor, aten.sub.Scalar)
def aten_sub(b: GraphBuilder, self: Value, other: Value | float, alpha: float = 1) -> Value:
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    if alpha != 1:
        other = aten_mul(b, other, alpha)
    return _binary(b, "Sub", self, other)


@translation(aten.mul.Tensor, aten.mul.Scalar)
def aten_mul(b: GraphBuilder, self: Value, other: Value | float) -> Value:
    """mul.Tensor(Tensor self, Tensor other) -> Tensor"""
    if isinstance(self, Value) and self.dtype == torch.bool and isinstance(other, Value) and other.dtype == torch.bool:
        return b.op("And", self, other)
    return _binary(b, "Mul", self, other)


@translation(aten.relu.default)
def aten_relu(b: GraphBuilder, self: Value) -> Value:
    """relu(Tensor self) -> Tensor"""
    return b.op("Relu", self)
