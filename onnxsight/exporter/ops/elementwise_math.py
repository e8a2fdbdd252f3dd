"""Elementwise math functions: exponentials, logarithms, trigonometry, erf, and friends.

Integer inputs give floating outputs in PyTorch (``torch.sqrt(int_tensor)`` is
float32), so every translation first casts to the node's output dtype.
"""

from __future__ import annotations

import math

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation
from onnxsight.exporter.ops.elementwise import Operand, float_dtype, float_out, promoted

aten = torch.ops.aten


def _unary(b: GraphBuilder, op_type: str, self: Value) -> Value:
    return b.op(op_type, float_out(b, self))


@translation(aten.exp.default)
def aten_exp(b: GraphBuilder, self: Value) -> Value:
    """exp(Tensor self) -> Tensor"""
    return _unary(b, "Exp", self)


@translation(aten.exp2.default)
def aten_exp2(b: GraphBuilder, self: Value) -> Value:
    """exp2(Tensor self) -> Tensor"""
    x = float_out(b, self)
    return b.op("Pow", b.scalar(2.0, x), x, dtype=x.dtype)


@translation(aten.expm1.default)
def aten_expm1(b: GraphBuilder, self: Value) -> Value:
    """expm1(Tensor self) -> Tensor"""
    # NOTE: exp(x) - 1 loses every digit for tiny x. Kahan's trick,
    # (u - 1) * x / log(u) with u = exp(x), keeps them; u == 1, u == 0 and
    # u == inf are the cases where it would divide 0/0 or inf/inf.
    x = float_out(b, self)
    u = b.op("Exp", x)
    one = b.scalar(1.0, x)
    u_minus_1 = b.op("Sub", u, one)
    kahan = b.op("Div", b.op("Mul", u_minus_1, x), b.op("Log", u))
    result = b.op("Where", b.op("IsInf", u, dtype=torch.bool), u, kahan)
    result = b.op("Where", b.op("Equal", u, b.scalar(0.0, x), dtype=torch.bool), b.op("Neg", one), result)
    return b.op("Where", b.op("Equal", u, one, dtype=torch.bool), x, result)


@translation(aten.log.default)
def aten_log(b: GraphBuilder, self: Value) -> Value:
    """log(Tensor self) -> Tensor"""
    return _unary(b, "Log", self)


def _log_base(b: GraphBuilder, self: Value, base: float) -> Value:
    x = float_out(b, self)
    return b.op("Mul", b.op("Log", x), b.scalar(1.0 / math.log(base), x))


@translation(aten.log2.default)
def aten_log2(b: GraphBuilder, self: Value) -> Value:
    """log2(Tensor self) -> Tensor"""
    return _log_base(b, self, 2.0)


@translation(aten.log10.default)
def aten_log10(b: GraphBuilder, self: Value) -> Value:
    """log10(Tensor self) -> Tensor"""
    return _log_base(b, self, 10.0)


@translation(aten.log1p.default)
def aten_log1p(b: GraphBuilder, self: Value) -> Value:
    """log1p(Tensor self) -> Tensor"""
    # NOTE: log(1 + x) loses tiny x; log(u) * x / (u - 1) with u = 1 + x keeps
    # it (Goldberg). u == 1 and u == inf are the 0/0 and inf/inf cases.
    x = float_out(b, self)
    u = b.op("Add", x, b.scalar(1.0, x))
    log_u = b.op("Log", u)
    precise = b.op("Div", b.op("Mul", log_u, x), b.op("Sub", u, b.scalar(1.0, x)))
    result = b.op("Where", b.op("IsInf", u, dtype=torch.bool), log_u, precise)
    return b.op("Where", b.op("Equal", u, b.scalar(1.0, x), dtype=torch.bool), x, result)


@translation(aten.sqrt.default)
def aten_sqrt(b: GraphBuilder, self: Value) -> Value:
    """sqrt(Tensor self) -> Tensor"""
    return _unary(b, "Sqrt", self)


@translation(aten.rsqrt.default)
def aten_rsqrt(b: GraphBuilder, self: Value) -> Value:
    """rsqrt(Tensor self) -> Tensor"""
    return b.op("Reciprocal", _unary(b, "Sqrt", self))


@translation(aten.sigmoid.default)
def aten_sigmoid(b: GraphBuilder, self: Value) -> Value:
    """sigmoid(Tensor self) -> Tensor"""
    return _unary(b, "Sigmoid", self)


@translation(aten.sin.default)
def aten_sin(b: GraphBuilder, self: Value) -> Value:
    """sin(Tensor self) -> Tensor"""
    return _unary(b, "Sin", self)


@translation(aten.cos.default)
def aten_cos(b: GraphBuilder, self: Value) -> Value:
    """cos(Tensor self) -> Tensor"""
    return _unary(b, "Cos", self)


@translation(aten.tan.default)
def aten_tan(b: GraphBuilder, self: Value) -> Value:
    """tan(Tensor self) -> Tensor"""
    return _unary(b, "Tan", self)


@translation(aten.asin.default)
def aten_asin(b: GraphBuilder, self: Value) -> Value:
    """asin(Tensor self) -> Tensor"""
    return _unary(b, "Asin", self)


@translation(aten.acos.default)
def aten_acos(b: GraphBuilder, self: Value) -> Value:
    """acos(Tensor self) -> Tensor"""
    return _unary(b, "Acos", self)


@translation(aten.atan.default)
def aten_atan(b: GraphBuilder, self: Value) -> Value:
    """atan(Tensor self) -> Tensor"""
    return _unary(b, "Atan", self)


@translation(aten.sinh.default)
def aten_sinh(b: GraphBuilder, self: Value) -> Value:
    """sinh(Tensor self) -> Tensor"""
    return _unary(b, "Sinh", self)


@translation(aten.cosh.default)
def aten_cosh(b: GraphBuilder, self: Value) -> Value:
    """cosh(Tensor self) -> Tensor"""
    return _unary(b, "Cosh", self)


@translation(aten.tanh.default)
def aten_tanh(b: GraphBuilder, self: Value) -> Value:
    """tanh(Tensor self) -> Tensor"""
    return _unary(b, "Tanh", self)


@translation(aten.asinh.default)
def aten_asinh(b: GraphBuilder, self: Value) -> Value:
    """asinh(Tensor self) -> Tensor"""
    return _unary(b, "Asinh", self)


@translation(aten.acosh.default)
def aten_acosh(b: GraphBuilder, self: Value) -> Value:
    """acosh(Tensor self) -> Tensor"""
    return _unary(b, "Acosh", self)


@translation(aten.atanh.default)
def aten_atanh(b: GraphBuilder, self: Value) -> Value:
    """atanh(Tensor self) -> Tensor"""
    return _unary(b, "Atanh", self)


@translation(aten.erf.default)
def aten_erf(b: GraphBuilder, self: Value) -> Value:
    """erf(Tensor self) -> Tensor"""
    return _unary(b, "Erf", self)


@translation(aten.erfc.default)
def aten_erfc(b: GraphBuilder, self: Value) -> Value:
    """erfc(Tensor self) -> Tensor"""
    x = float_out(b, self)
    return b.op("Sub", b.scalar(1.0, x), b.op("Erf", x))


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single precision.
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _horner(b: GraphBuilder, w: Value, coefficients: tuple[float, ...]) -> Value:
    p = b.scalar(coefficients[0], w)
    for c in coefficients[1:]:
        p = b.op("Add", b.op("Mul", p, w), b.scalar(c, w))
    return p


@translation(aten.erfinv.default)
def aten_erfinv(b: GraphBuilder, self: Value) -> Value:
    """erfinv(Tensor self) -> Tensor"""
    # NOTE: ONNX has no erfinv. Giles' polynomial approximation, then one
    # Newton step on erf(y) = x, gives float32 accuracy; |x| == 1 is +-inf and
    # |x| > 1 NaN (from the log of a negative number), as in PyTorch.
    x = float_out(b, self)
    one = b.scalar(1.0, x)
    w = b.op("Neg", b.op("Log", b.op("Mul", b.op("Sub", one, x), b.op("Add", one, x))))
    central = _horner(b, b.op("Sub", w, b.scalar(2.5, x)), _ERFINV_CENTRAL)
    tail = _horner(b, b.op("Sub", b.op("Sqrt", w), b.scalar(3.0, x)), _ERFINV_TAIL)
    y = b.op("Mul", b.op("Where", b.op("Less", w, b.scalar(5.0, x), dtype=torch.bool), central, tail), x)
    slope = b.op("Mul", b.scalar(2.0 / math.sqrt(math.pi), x), b.op("Exp", b.op("Neg", b.op("Mul", y, y))))
    refined = b.op("Sub", y, b.op("Div", b.op("Sub", b.op("Erf", y), x), slope))
    at_pole = b.op("Equal", b.op("Abs", x), one, dtype=torch.bool)
    return b.op("Where", at_pole, b.op("Mul", x, b.scalar(math.inf, x)), refined)


@translation(aten.atan2.default)
def aten_atan2(b: GraphBuilder, self: Value, other: Value) -> Value:
    """atan2(Tensor self, Tensor other) -> Tensor  (self is y, other is x)"""
    dtype, (y, x) = promoted(b, self, other, dtype=float_dtype(b, self, other))
    zero, pi = b.scalar(0.0, dtype), b.scalar(math.pi, dtype)
    # Both infinite: inf/inf is NaN, but the angle is that of (sign y, sign x).
    both_inf = b.op("And", b.op("IsInf", y, dtype=torch.bool), b.op("IsInf", x, dtype=torch.bool))
    y_finite = b.op("Where", both_inf, b.op("Sign", y), y)
    x_finite = b.op("Where", both_inf, b.op("Sign", x), x)
    base = b.op("Atan", b.op("Div", y_finite, x_finite))
    # x < 0: move atan's (-pi/2, pi/2) to the left half-plane, by -pi when y's sign bit is set (-0.0 too).
    y_negative = negative_sign_bit(b, y)
    shifted = b.op("Where", y_negative, b.op("Sub", base, pi), b.op("Add", base, pi))
    result = b.op("Where", b.op("Less", x, zero, dtype=torch.bool), shifted, base)
    # x == +-0: y/x is +-inf or NaN. y != 0 gives sign(y) * pi/2; y == +-0 gives +-pi for x = -0, else y.
    on_axis = b.op("Mul", b.op("Sign", y), b.scalar(math.pi / 2, dtype))
    signed_pi = b.op("Where", y_negative, b.op("Neg", pi), pi)
    at_origin = b.op("Where", negative_sign_bit(b, x), signed_pi, y)
    on_axis = b.op("Where", b.op("Equal", y, zero, dtype=torch.bool), at_origin, on_axis)
    return b.op("Where", b.op("Equal", x, zero, dtype=torch.bool), on_axis, result, dtype=dtype)


@translation(aten.hypot.default)
def aten_hypot(b: GraphBuilder, self: Value, other: Value) -> Value:
    """hypot(Tensor self, Tensor other) -> Tensor"""
    dtype, (x, y) = promoted(b, self, other, dtype=float_dtype(b, self, other))
    return b.op("Sqrt", b.op("Add", b.op("Mul", x, x), b.op("Mul", y, y)), dtype=dtype)


def negative_sign_bit(b: GraphBuilder, x: Value) -> Value:
    """True where a float's sign bit is set, -0.0 included (1 / -0.0 is -inf); False for NaN."""
    zero = b.scalar(0.0, x)
    below = b.op("Less", x, zero, dtype=torch.bool)
    negative_zero = b.op("And", b.op("Equal", x, zero, dtype=torch.bool),
                         b.op("Less", b.op("Reciprocal", x), zero, dtype=torch.bool))
    return b.op("Or", below, negative_zero)


@translation(aten.copysign.Tensor, aten.copysign.Scalar)
def aten_copysign(b: GraphBuilder, self: Value, other: Operand) -> Value:
    """copysign.Tensor(Tensor self, Tensor other) -> Tensor"""
    dtype, (x, y) = promoted(b, self, other, dtype=float_dtype(b, self, other))
    magnitude = b.op("Abs", x)
    return b.op("Where", negative_sign_bit(b, y), b.op("Neg", magnitude), magnitude, dtype=dtype)


@translation(aten.signbit.default)
def aten_signbit(b: GraphBuilder, self: Value) -> Value:
    """signbit(Tensor self) -> Tensor"""
    if self.dtype is not None and self.dtype.is_floating_point:
        return negative_sign_bit(b, self)
    if self.dtype in (torch.bool, torch.uint8, torch.uint16, torch.uint32, torch.uint64):
        return b.op("Not", b.op("Equal", self, self, dtype=torch.bool))
    return b.op("Less", self, b.scalar(0, self), dtype=torch.bool)


@translation(aten.ldexp.Tensor)
def aten_ldexp(b: GraphBuilder, self: Value, other: Value) -> Value:
    """ldexp.Tensor(Tensor self, Tensor other) -> Tensor  (self * 2**other)"""
    dtype, (x, exponent) = promoted(b, self, other, dtype=float_dtype(b, self, other))
    return b.op("Mul", x, b.op("Pow", b.scalar(2.0, dtype), exponent), dtype=dtype)
