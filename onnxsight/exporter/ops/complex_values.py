"""Building complex values from real ones and reading them back: complex, polar, angle, conjugates.

Complex values are real tensors with a trailing (real, imaginary) dimension of 2
(see :class:`onnxsight.exporter._builder.Value`); ``torch.complex``/``torch.polar``
make those pairs from two real tensors, ``angle`` of a real tensor is 0 or pi, of a
complex one the pair's atan2, and the conjugates (``_conj``, which the FFTs of real
inputs end with, and ``_conj_physical``) negate the imaginary half.
"""

from __future__ import annotations

import math

import torch

from onnxsight.exporter import _dtypes
from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation
from onnxsight.exporter.ops.elementwise_math import aten_atan2
from onnxsight.exporter.ops.spectral import aten_mul_complex

aten = torch.ops.aten


def _pairs(b: GraphBuilder, real: Value, imag: Value) -> Value:
    """(real, imag) pairs of the node's complex dtype, both parts broadcast to one shape as torch does."""
    dtype = b.node.out_dtype or torch.complex64
    part = dtype.to_real()
    real, imag = b.cast(real, part), b.cast(imag, part)
    # Expand broadcasts both ways (numpy rules), so each part takes the other's dims too.
    real = b.op("Expand", real, b.shape_of(imag), dtype=part)
    imag = b.op("Expand", imag, b.shape_of(real), dtype=part)
    last = b.const([-1], torch.int64)
    parts = [b.op("Unsqueeze", p, last, dtype=part) for p in (real, imag)]
    return b.op("Concat", *parts, axis=-1, dtype=dtype, shape=b.node.out_shape)


@translation(aten.complex.default)
def aten_complex(b: GraphBuilder, real: Value, imag: Value) -> Value:
    """complex(Tensor real, Tensor imag) -> Tensor"""
    return _pairs(b, real, imag)


@translation(aten.polar.default)
def aten_polar(b: GraphBuilder, abs: Value, angle: Value) -> Value:
    """polar(Tensor abs, Tensor angle) -> Tensor  (abs * cos(angle), abs * sin(angle))"""
    part = (b.node.out_dtype or torch.complex64).to_real()
    abs, angle = b.cast(abs, part), b.cast(angle, part)
    real = b.op("Mul", abs, b.op("Cos", angle, dtype=part), dtype=part)
    imag = b.op("Mul", abs, b.op("Sin", angle, dtype=part), dtype=part)
    return _pairs(b, real, imag)


@translation(aten.angle.default)
def aten_angle(b: GraphBuilder, self: Value) -> Value:
    """angle(Tensor self) -> Tensor  (real input: pi below zero, 0 otherwise, NaN stays NaN)"""
    dtype = b.node.out_dtype or torch.float32
    x = b.cast(self, dtype)
    below = b.op("Less", x, b.scalar(0.0, dtype), dtype=torch.bool)
    angle = b.op("Where", below, b.scalar(math.pi, dtype), b.scalar(0.0, dtype), dtype=dtype)
    if self.dtype is not None and not self.dtype.is_floating_point:  # integers are never NaN
        return angle
    return b.op("Where", b.op("IsNaN", x, dtype=torch.bool), x, angle, dtype=dtype, shape=self.shape)


@translation(aten.angle.default, complex=True)
def aten_angle_complex(b: GraphBuilder, self: Value) -> Value:
    """angle(Tensor self) -> Tensor  (complex input: atan2(imag, real), a real tensor)"""
    real, imag = _parts(b, self)
    return aten_atan2(b, imag, real)


def _parts(b: GraphBuilder, value: Value) -> tuple[Value, Value]:
    """The real and imaginary parts of a complex Value, as real tensors of its logical shape."""
    part = value.dtype.to_real()
    return tuple(b.op("Gather", value, b.const(i, torch.int64), axis=-1, dtype=part, shape=value.shape)
                 for i in (0, 1))


def _conjugate(b: GraphBuilder, self: Value) -> Value:
    """(re, im) -> (re, -im): a multiplication by (1, -1) over the pair dim."""
    flip = b.const([1.0, -1.0], self.dtype.to_real())
    return b.op("Mul", self, flip, dtype=self.dtype, shape=self.shape)


@translation(aten._conj.default, complex=True)
def aten_conj(b: GraphBuilder, self: Value) -> Value:
    """_conj(Tensor(a) self) -> Tensor(a)  (torch's lazy conjugate, made real: ONNX has no conj bit)"""
    return _conjugate(b, self)


@translation(aten._conj_physical.default, complex=True)
def aten_conj_physical(b: GraphBuilder, self: Value) -> Value:
    """_conj_physical(Tensor self) -> Tensor"""
    return _conjugate(b, self)


def _as_pairs(b: GraphBuilder, x: Value | complex | float, dtype: torch.dtype) -> Value:
    """``x`` as (real, imaginary) pairs of complex ``dtype``: a real tensor or number gets imaginary 0."""
    part = dtype.to_real()
    if not isinstance(x, Value):
        value = complex(x)
        return b.op("Identity", b.const([value.real, value.imag], part), dtype=dtype, shape=())
    if x.dtype.is_complex:
        return x if x.dtype == dtype else b.op("Cast", x, to=_dtypes.to_onnx(part), dtype=dtype, shape=x.shape)
    real = b.op("Unsqueeze", b.cast(x, part), b.const([-1], torch.int64), dtype=part)
    zeros = b.op("Expand", b.scalar(0.0, part), b.shape_of(real), dtype=part)  # not real * 0: inf stays real
    return b.op("Concat", real, zeros, axis=-1, dtype=dtype)


def _complex_sum(b: GraphBuilder, op_type: str, self: Value | complex | float, other: Value | complex | float,
                 alpha: complex | float) -> Value:
    """self +/- alpha * other where either side is complex: Add/Sub on pairs."""
    dtype = b.node.out_dtype or torch.complex64
    left, right = _as_pairs(b, self, dtype), _as_pairs(b, other, dtype)
    if alpha != 1:
        right = aten_mul_complex(b, right, alpha)
    return b.op(op_type, left, right, dtype=dtype, shape=b.node.out_shape)


@translation(aten.add.Tensor, aten.add.Scalar, complex=True)
def aten_add_complex(b: GraphBuilder, self: Value | complex | float, other: Value | complex | float, *,
                     alpha: complex | float = 1) -> Value:
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor  (on (real, imaginary) pairs)"""
    return _complex_sum(b, "Add", self, other, alpha)


@translation(aten.sub.Tensor, aten.sub.Scalar, complex=True)
def aten_sub_complex(b: GraphBuilder, self: Value | complex | float, other: Value | complex | float, *,
                     alpha: complex | float = 1) -> Value:
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor  (on (real, imaginary) pairs)"""
    return _complex_sum(b, "Sub", self, other, alpha)
