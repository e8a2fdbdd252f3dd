"""Comparisons, logical and bitwise ops, and NaN/Inf tests; all but bitwise give bool tensors."""

from __future__ import annotations

import torch

from onnxsight.exporter import _dtypes
from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.ops.elementwise import Operand, promoted

aten = torch.ops.aten


def _compare(b: GraphBuilder, op_type: str, self: Operand, other: Operand) -> Value:
    dtype, (x, y) = promoted(b, self, other)
    if dtype == torch.bool and op_type != "Equal":  # ONNX orders numbers, not booleans
        x, y = b.cast(x, torch.int32), b.cast(y, torch.int32)
    return b.op(op_type, x, y, dtype=torch.bool)


@translation(aten.eq.Tensor, aten.eq.Scalar)
def aten_eq(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """eq.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _compare(b, "Equal", self, other)


@translation(aten.ne.Tensor, aten.ne.Scalar)
def aten_ne(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """ne.Tensor(Tensor self, Tensor other) -> Tensor"""
    return b.op("Not", _compare(b, "Equal", self, other))


@translation(aten.lt.Tensor, aten.lt.Scalar)
def aten_lt(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """lt.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _compare(b, "Less", self, other)


@translation(aten.le.Tensor, aten.le.Scalar)
def aten_le(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """le.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _compare(b, "LessOrEqual", self, other)


@translation(aten.gt.Tensor, aten.gt.Scalar)
def aten_gt(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """gt.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _compare(b, "Greater", self, other)


@translation(aten.ge.Tensor, aten.ge.Scalar)
def aten_ge(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """ge.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _compare(b, "GreaterOrEqual", self, other)


# -- logical: any dtype in, bool out ------------------------------------------------------------

def truth(b: GraphBuilder, x: Value) -> Value:
    """``x != 0`` as bool (NaN counts as true, as in PyTorch)."""
    if x.dtype == torch.bool:
        return x
    return b.op("Not", b.op("Equal", x, b.scalar(0, x), dtype=torch.bool))


@translation(aten.logical_not.default)
def aten_logical_not(b: GraphBuilder, self: Value) -> Value:
    """logical_not(Tensor self) -> Tensor"""
    return b.op("Not", truth(b, self))


@translation(aten.logical_and.default)
def aten_logical_and(b: GraphBuilder, self: Value, other: Value) -> Value:
    """logical_and(Tensor self, Tensor other) -> Tensor"""
    return b.op("And", truth(b, self), truth(b, other))


@translation(aten.logical_or.default)
def aten_logical_or(b: GraphBuilder, self: Value, other: Value) -> Value:
    """logical_or(Tensor self, Tensor other) -> Tensor"""
    return b.op("Or", truth(b, self), truth(b, other))


@translation(aten.logical_xor.default)
def aten_logical_xor(b: GraphBuilder, self: Value, other: Value) -> Value:
    """logical_xor(Tensor self, Tensor other) -> Tensor"""
    return b.op("Xor", truth(b, self), truth(b, other))


# -- bitwise: bool or integers ----------------------------------------------------------------------
# NOTE: BitwiseAnd/Or/Xor/Not arrived in opset 18; at opset 17 only bool
# tensors (And/Or/Xor/Not) can be translated, hence the opset-17 siblings.

_LOGICAL = {"BitwiseAnd": "And", "BitwiseOr": "Or", "BitwiseXor": "Xor", "BitwiseNot": "Not"}


def _bitwise(b: GraphBuilder, op_type: str, *args: Operand) -> Value:
    dtype, values = promoted(b, *args, dtype=b.node.out_dtype)
    if dtype == torch.bool:
        return b.op(_LOGICAL[op_type], *values, dtype=dtype)
    if not _dtypes.is_integer(dtype):
        raise TypeError(f"{op_type} needs bool or integer tensors, got {dtype}")
    if b.opset < 18:
        raise UnsupportedVariant("self", f"dtype {dtype} at opset {b.opset}", f"bool tensors ({op_type} on integers "
                                 "needs opset 18)")
    return b.op(op_type, *values, dtype=dtype)


@translation(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)
def aten_bitwise_and(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _bitwise(b, "BitwiseAnd", self, other)


@translation(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)
def aten_bitwise_or(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _bitwise(b, "BitwiseOr", self, other)


@translation(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)
def aten_bitwise_xor(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor"""
    return _bitwise(b, "BitwiseXor", self, other)


@translation(aten.bitwise_not.default)
def aten_bitwise_not(b: GraphBuilder, self: Value) -> Value:
    """bitwise_not(Tensor self) -> Tensor"""
    return _bitwise(b, "BitwiseNot", self)


# NOTE: ONNX's BitShift takes unsigned integers only. Shifts are computed on
# uint64 and cast back (which wraps like PyTorch); an arithmetic right shift of
# a negative x is ~(~x >> s), with ~x = -x - 1. Shift counts outside
# [0, bits) give 0 (left), or x >> (bits - 1) (right; 0 for unsigned), as in ATen.

def _shift(b: GraphBuilder, direction: str, self: Operand, other: Operand) -> Value:
    dtype, (x, count) = promoted(b, self, other, dtype=b.node.out_dtype)
    if not _dtypes.is_integer(dtype):
        raise TypeError(f"shifts need integer tensors, got {dtype}")
    bits = torch.iinfo(dtype).bits
    signed = torch.iinfo(dtype).min < 0
    x, count = b.cast(x, torch.int64), b.cast(count, torch.int64)
    zero = b.scalar(0, torch.int64)
    in_range = b.op("And", b.op("GreaterOrEqual", count, zero, dtype=torch.bool),
                    b.op("Less", count, b.scalar(bits, torch.int64), dtype=torch.bool))
    saturated = b.scalar(bits - 1 if direction == "RIGHT" and signed else 0, torch.int64)
    count = b.cast(b.op("Where", in_range, count, saturated), torch.uint64)
    negative = b.op("Less", x, zero, dtype=torch.bool)
    complement = b.op("Sub", b.op("Neg", x), b.scalar(1, torch.int64))
    operand = b.op("Where", negative, complement, x) if direction == "RIGHT" and signed else x
    shifted = b.cast(b.op("BitShift", b.cast(operand, torch.uint64), count, direction=direction,
                          dtype=torch.uint64), torch.int64)
    if direction == "RIGHT" and signed:
        shifted = b.op("Where", negative, b.op("Sub", b.op("Neg", shifted), b.scalar(1, torch.int64)), shifted)
    else:
        shifted = b.op("Where", in_range, shifted, zero)
    return b.cast(shifted, dtype)


@translation(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
             aten.bitwise_left_shift.Scalar_Tensor, aten.__lshift__.Tensor, aten.__lshift__.Scalar)
def aten_bitwise_left_shift(b: GraphBuilder, self: Operand, other: Operand) -> Value:
    """bitwise_left_shift.Tensor(Tensor self, Tensor other) -> Tensor  (also __lshift__)"""
    return _shift(b, "LEFT", self, other)


@translation(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
             aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Tensor, aten.__rshift__.Scalar)
def aten_bitwise_right_shift(b: GraphBuilder, self: Operand, other: Operand) -> Value:
    """bitwise_right_shift.Tensor(Tensor self, Tensor other) -> Tensor  (also __rshift__)"""
    return _shift(b, "RIGHT", self, other)


# -- NaN / Inf ------------------------------------------------------------------------------------

def _all_false(b: GraphBuilder, x: Value) -> Value:
    """A bool tensor of ``x``'s shape, all False (integers are never NaN or Inf)."""
    return b.op("Not", b.op("Equal", x, x, dtype=torch.bool))


@translation(aten.isnan.default)
def aten_isnan(b: GraphBuilder, self: Value) -> Value:
    """isnan(Tensor self) -> Tensor"""
    return b.op("IsNaN", self, dtype=torch.bool) if _dtypes.is_float(self.dtype) else _all_false(b, self)


@translation(aten.isinf.default)
def aten_isinf(b: GraphBuilder, self: Value) -> Value:
    """isinf(Tensor self) -> Tensor"""
    return b.op("IsInf", self, dtype=torch.bool) if _dtypes.is_float(self.dtype) else _all_false(b, self)


@translation(aten.isfinite.default)
def aten_isfinite(b: GraphBuilder, self: Value) -> Value:
    """isfinite(Tensor self) -> Tensor"""
    if not _dtypes.is_float(self.dtype):
        return b.op("Equal", self, self, dtype=torch.bool)
    bad = b.op("Or", b.op("IsNaN", self, dtype=torch.bool), b.op("IsInf", self, dtype=torch.bool))
    return b.op("Not", bad)
