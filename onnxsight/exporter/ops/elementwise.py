"""Elementwise arithmetic: add/sub/mul/div, powers, rounding, remainders, clamps, where.

Unary math functions live in :mod:`elementwise_math`, comparisons and logic in
:mod:`elementwise_logic`. Every translation follows PyTorch's type promotion:
the result dtype comes from the FX node's meta (``b.node.out_dtype``), falling back
to :meth:`GraphBuilder.promote` for Python scalars.
"""

from __future__ import annotations

from typing import Union

import torch

from onnxsight.exporter import _dtypes
from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation

aten = torch.ops.aten

Operand = Union[Value, bool, int, float]

# NOTE: ONNX Runtime's CPU kernels for Pow/Max/Min/Mod cover int32/int64 but
# not the narrow integer types; those are computed in int64 and cast back
# (wrap-around is the same modulo 2**bits).
_NARROW_INTS = (torch.int8, torch.int16, torch.uint8, torch.uint16)


def promoted(b: GraphBuilder, *args: Operand, dtype: torch.dtype | None = None) -> tuple[torch.dtype, list[Value]]:
    """Cast tensors and Python scalars to ``dtype`` (default: PyTorch's promoted dtype)."""
    if dtype is None:
        dtype, values = b.promote(*args)
        return dtype, values
    return dtype, [b.cast(a, dtype) if isinstance(a, Value) else b.scalar(a, dtype) for a in args]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """dtype to compute integer Pow/Max/Min/Mod in (see the NOTE above)."""
    return torch.int64 if dtype in _NARROW_INTS else dtype


def float_out(b: GraphBuilder, x: Value) -> Value:
    """``x`` cast to the node's (floating) output dtype: integer inputs of unary math ops become float."""
    dtype = b.node.out_dtype
    if dtype is None or not dtype.is_floating_point:
        dtype = x.dtype if _dtypes.is_float(x.dtype) else torch.get_default_dtype()
    return b.cast(x, dtype)


def binary(b: GraphBuilder, op_type: str, self: Operand, other: Operand, *,
           dtype: torch.dtype | None = None) -> Value:
    """``op_type(self, other)`` after type promotion (to ``dtype`` when given)."""
    dtype, (x, y) = promoted(b, self, other, dtype=dtype)
    if dtype == torch.bool and op_type in ("Add", "Mul", "Max", "Min"):
        op_type = {"Add": "Or", "Mul": "And", "Max": "Or", "Min": "And"}[op_type]
    elif op_type in ("Pow", "Max", "Min", "Mod") and compute_dtype(dtype) != dtype:
        wide = b.op(op_type, b.cast(x, torch.int64), b.cast(y, torch.int64), dtype=torch.int64)
        return b.cast(wide, dtype)
    return b.op(op_type, x, y, dtype=dtype)


def _scaled(b: GraphBuilder, other: Operand, alpha: float) -> Operand:
    if alpha == 1:
        return other
    if isinstance(other, Value):
        return aten_mul(b, other, alpha)
    return other * alpha


@translation(aten.add.Tensor, aten.add.Scalar)
def aten_add(b: GraphBuilder, self: Value, other: Operand, alpha: float = 1) -> Value:
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    return binary(b, "Add", self, _scaled(b, other, alpha), dtype=b.node.out_dtype)


@translation(aten.sub.Tensor, aten.sub.Scalar)
def aten_sub(b: GraphBuilder, self: Value, other: Operand, alpha: float = 1) -> Value:
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    return binary(b, "Sub", self, _scaled(b, other, alpha), dtype=b.node.out_dtype)


@translation(aten.rsub.Tensor, aten.rsub.Scalar)
def aten_rsub(b: GraphBuilder, self: Value, other: Operand, alpha: float = 1) -> Value:
    """rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"""
    return binary(b, "Sub", other, _scaled(b, self, alpha), dtype=b.node.out_dtype)


@translation(aten.mul.Tensor, aten.mul.Scalar)
def aten_mul(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """mul.Tensor(Tensor self, Tensor other) -> Tensor"""
    return binary(b, "Mul", self, other, dtype=b.node.out_dtype)


@translation(aten.div.Tensor, aten.div.Scalar)
def aten_div(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """div.Tensor(Tensor self, Tensor other) -> Tensor  (true division: integers give float)"""
    return binary(b, "Div", self, other, dtype=float_dtype(b, self, other))


def float_dtype(b: GraphBuilder, *args: Operand) -> torch.dtype:
    """The node's floating output dtype, or the promoted dtype made floating."""
    dtype = b.node.out_dtype or b.promote(*args)[0]
    return dtype if dtype.is_floating_point else torch.get_default_dtype()


@translation(aten.div.Tensor_mode, aten.div.Scalar_mode)
def aten_div_mode(b: GraphBuilder, self: Value, other: Operand, *, rounding_mode: str | None = None) -> Value:
    """div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor"""
    if rounding_mode is None:
        return aten_div(b, self, other)
    dtype, (x, y) = promoted(b, self, other, dtype=b.node.out_dtype)
    if dtype.is_floating_point:
        quotient = b.op("Div", x, y)
        return trunc_float(b, quotient) if rounding_mode == "trunc" else b.op("Floor", quotient)
    if rounding_mode == "trunc":  # ONNX integer Div truncates toward zero, like C
        return binary(b, "Div", x, y, dtype=dtype)
    # floor: (x - x mod y) is an exact multiple of y; Mod(fmod=0) takes the divisor's sign.
    remainder = binary(b, "Mod", x, y, dtype=dtype)
    return b.op("Div", b.op("Sub", x, remainder), y)


@translation(aten.neg.default)
def aten_neg(b: GraphBuilder, self: Value) -> Value:
    """neg(Tensor self) -> Tensor"""
    return b.op("Neg", self)


@translation(aten.abs.default)
def aten_abs(b: GraphBuilder, self: Value) -> Value:
    """abs(Tensor self) -> Tensor"""
    return self if self.dtype == torch.bool else b.op("Abs", self)


@translation(aten.sign.default)
def aten_sign(b: GraphBuilder, self: Value) -> Value:
    """sign(Tensor self) -> Tensor"""
    return b.op("Identity", self) if self.dtype == torch.bool else b.op("Sign", self)


@translation(aten.reciprocal.default)
def aten_reciprocal(b: GraphBuilder, self: Value) -> Value:
    """reciprocal(Tensor self) -> Tensor"""
    return b.op("Reciprocal", float_out(b, self))


@translation(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def aten_pow(b: GraphBuilder, self: Operand, exponent: Operand) -> Value:
    """pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor  (also Tensor_Scalar, Scalar)"""
    return binary(b, "Pow", self, exponent, dtype=b.node.out_dtype)


# -- rounding ---------------------------------------------------------------------------------

def trunc_float(b: GraphBuilder, x: Value) -> Value:
    """Round toward zero (ONNX has no Trunc): Ceil below zero, Floor above."""
    negative = b.op("Less", x, b.scalar(0, x), dtype=torch.bool)
    return b.op("Where", negative, b.op("Ceil", x), b.op("Floor", x), dtype=x.dtype)


def _rounded(b: GraphBuilder, op_type: str, x: Value) -> Value:
    """``op_type`` (Floor/Ceil/Round/Trunc) of a float tensor; rounding an integer tensor is a copy."""
    if not _dtypes.is_float(x.dtype):
        return b.op("Identity", x)
    return trunc_float(b, x) if op_type == "Trunc" else b.op(op_type, x)


@translation(aten.floor.default)
def aten_floor(b: GraphBuilder, self: Value) -> Value:
    """floor(Tensor self) -> Tensor"""
    return _rounded(b, "Floor", self)


@translation(aten.ceil.default)
def aten_ceil(b: GraphBuilder, self: Value) -> Value:
    """ceil(Tensor self) -> Tensor"""
    return _rounded(b, "Ceil", self)


@translation(aten.round.default)
def aten_round(b: GraphBuilder, self: Value) -> Value:
    """round(Tensor self) -> Tensor  (half to even, like ONNX Round)"""
    return _rounded(b, "Round", self)


@translation(aten.trunc.default)
def aten_trunc(b: GraphBuilder, self: Value) -> Value:
    """trunc(Tensor self) -> Tensor"""
    return _rounded(b, "Trunc", self)


@translation(aten.round.decimals)
def aten_round_decimals(b: GraphBuilder, self: Value, *, decimals: int = 0) -> Value:
    """round.decimals(Tensor self, *, int decimals) -> Tensor"""
    if decimals == 0 or not _dtypes.is_float(self.dtype):
        return aten_round(b, self)
    # As ATen does: scale by 10**|decimals|, round half to even, scale back.
    scale = b.scalar(10.0 ** abs(decimals), self)
    if decimals > 0:
        return b.op("Div", b.op("Round", b.op("Mul", self, scale)), scale)
    return b.op("Mul", b.op("Round", b.op("Div", self, scale)), scale)


@translation(aten.frac.default)
def aten_frac(b: GraphBuilder, self: Value) -> Value:
    """frac(Tensor self) -> Tensor"""
    return b.op("Sub", self, trunc_float(b, self))


@translation(aten.fmod.Tensor, aten.fmod.Scalar)
def aten_fmod(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """fmod.Tensor(Tensor self, Tensor other) -> Tensor  (sign follows the dividend)"""
    dtype = b.node.out_dtype or b.promote(self, other)[0]
    if dtype.is_floating_point:
        _, (x, y) = promoted(b, self, other, dtype=dtype)
        return b.op("Mod", x, y, fmod=1)
    _, (x, y) = promoted(b, self, other, dtype=compute_dtype(dtype))
    return b.cast(b.op("Mod", x, y, fmod=1), dtype)


@translation(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def aten_remainder(b: GraphBuilder, self: Operand, other: Operand) -> Value:
    """remainder.Tensor(Tensor self, Tensor other) -> Tensor  (sign follows the divisor)"""
    dtype = b.node.out_dtype or b.promote(self, other)[0]
    if not dtype.is_floating_point:
        return binary(b, "Mod", self, other, dtype=dtype)
    # As ATen does for floats: fmod, then add the divisor when the signs disagree.
    _, (x, y) = promoted(b, self, other, dtype=dtype)
    mod = b.op("Mod", x, y, fmod=1)
    zero = b.scalar(0, dtype)
    signs_differ = b.op("Xor", b.op("Less", mod, zero, dtype=torch.bool), b.op("Less", y, zero, dtype=torch.bool))
    fix = b.op("And", signs_differ, b.op("Not", b.op("Equal", mod, zero, dtype=torch.bool)))
    return b.op("Where", fix, b.op("Add", mod, y), mod, dtype=dtype)


# -- min/max/clamp ---------------------------------------------------------------------------------

@translation(aten.maximum.default)
def aten_maximum(b: GraphBuilder, self: Value, other: Value) -> Value:
    """maximum(Tensor self, Tensor other) -> Tensor  (NaN propagates)"""
    return binary(b, "Max", self, other, dtype=b.node.out_dtype)


@translation(aten.minimum.default)
def aten_minimum(b: GraphBuilder, self: Value, other: Value) -> Value:
    """minimum(Tensor self, Tensor other) -> Tensor  (NaN propagates)"""
    return binary(b, "Min", self, other, dtype=b.node.out_dtype)


def _nan_ignoring(b: GraphBuilder, op_type: str, self: Value, other: Value) -> Value:
    dtype, (x, y) = promoted(b, self, other, dtype=b.node.out_dtype)
    result = binary(b, op_type, x, y, dtype=dtype)
    if not dtype.is_floating_point:
        return result
    take_y = b.op("IsNaN", x, dtype=torch.bool)
    take_x = b.op("IsNaN", y, dtype=torch.bool)
    return b.op("Where", take_y, y, b.op("Where", take_x, x, result, dtype=dtype), dtype=dtype)


@translation(aten.fmax.default)
def aten_fmax(b: GraphBuilder, self: Value, other: Value) -> Value:
    """fmax(Tensor self, Tensor other) -> Tensor  (NaN only when both are NaN)"""
    return _nan_ignoring(b, "Max", self, other)


@translation(aten.fmin.default)
def aten_fmin(b: GraphBuilder, self: Value, other: Value) -> Value:
    """fmin(Tensor self, Tensor other) -> Tensor  (NaN only when both are NaN)"""
    return _nan_ignoring(b, "Min", self, other)


def clamp(b: GraphBuilder, self: Value, low: Operand | None, high: Operand | None) -> Value:
    """max(self, low) then min(., high): ``high`` wins when low > high, as in ATen; NaN propagates."""
    dtype = b.node.out_dtype or b.promote(self, *(v for v in (low, high) if v is not None))[0]
    result = b.cast(self, dtype)
    if low is not None:
        result = binary(b, "Max", result, low, dtype=dtype)
    if high is not None:
        result = binary(b, "Min", result, high, dtype=dtype)
    return result if result is not self else b.op("Identity", self)


@translation(aten.clamp.default, aten.clamp.Tensor)
def aten_clamp(b: GraphBuilder, self: Value, min: Operand | None = None, max: Operand | None = None) -> Value:
    """clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor  (also clamp.default)"""
    return clamp(b, self, min, max)


@translation(aten.clamp_min.default, aten.clamp_min.Tensor)
def aten_clamp_min(b: GraphBuilder, self: Value, min: Operand) -> Value:
    """clamp_min(Tensor self, Scalar min) -> Tensor"""
    return clamp(b, self, min, None)


@translation(aten.clamp_max.default, aten.clamp_max.Tensor)
def aten_clamp_max(b: GraphBuilder, self: Value, max: Operand) -> Value:
    """clamp_max(Tensor self, Scalar max) -> Tensor"""
    return clamp(b, self, None, max)


@translation(aten.relu.default)
def aten_relu(b: GraphBuilder, self: Value) -> Value:
    """relu(Tensor self) -> Tensor"""
    if _dtypes.is_float(self.dtype):
        return b.op("Relu", self)
    return binary(b, "Max", self, 0, dtype=self.dtype)


# -- selection ---------------------------------------------------------------------------------

@translation(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def aten_where(b: GraphBuilder, condition: Value, self: Operand, other: Operand) -> Value:
    """where.self(Tensor condition, Tensor self, Tensor other) -> Tensor"""
    dtype, (x, y) = promoted(b, self, other, dtype=b.node.out_dtype)
    return b.op("Where", b.cast(condition, torch.bool), x, y, dtype=dtype)


@translation(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def aten_masked_fill(b: GraphBuilder, self: Value, mask: Value, value: Operand) -> Value:
    """masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor"""
    fill = b.cast(value, self.dtype) if isinstance(value, Value) else b.scalar(value, self)
    return b.op("Where", b.cast(mask, torch.bool), fill, self, dtype=self.dtype)
