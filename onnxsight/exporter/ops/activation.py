"""Activations (gelu, silu, hardtanh, elu family, hardswish, mish, prelu), softmax and dropout.

sigmoid, tanh and relu belong to the elementwise family.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.ops._nn_common import dropout

aten = torch.ops.aten


# -- gelu ------------------------------------------------------------------------------------------
def _gelu_formula(b: GraphBuilder, x: Value, approximate: str) -> Value:
    if approximate == "tanh":
        half = b.op("Mul", x, b.scalar(0.5, x))
        # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        cube = b.op("Mul", b.op("Mul", x, x), x)
        inner = b.op("Add", x, b.op("Mul", cube, b.scalar(0.044715, x)))
        core = b.op("Tanh", b.op("Mul", inner, b.scalar(math.sqrt(2 / math.pi), x)))
        return b.op("Mul", half, b.op("Add", core, b.scalar(1.0, x)))
    # 0.5 * (x * (erf(x / sqrt(2)) + 1)). NOTE: Div by sqrt(2), not Mul by its inverse, and the 0.5 applied last,
    # as the first input: the one form both ONNX Runtime's GeluFusion and onnxscript's erf-gelu rule recognise
    # (ORT's does not take x * (0.5 * (...)), torch.onnx's; onnxscript's not (0.5 * x) * (...)), so the five nodes
    # run as one Gelu kernel, and as BiasGelu with the bias Add before them.
    core = b.op("Add", b.op("Erf", b.op("Div", x, b.scalar(math.sqrt(2), x))), b.scalar(1.0, x))
    return b.op("Mul", b.scalar(0.5, x), b.op("Mul", x, core))


@translation(aten.gelu.default, until=19)
def aten_gelu(b: GraphBuilder, self: Value, *, approximate: str = "none") -> Value:
    """gelu(Tensor self, *, str approximate='none') -> Tensor"""
    return _gelu_formula(b, self, approximate)


@translation(aten.gelu.default, since=20)
def aten_gelu_20(b: GraphBuilder, self: Value, *, approximate: str = "none") -> Value:
    """gelu(Tensor self, *, str approximate='none') -> Tensor"""
    return b.op("Gelu", self, approximate=approximate)


# -- pointwise activations ---------------------------------------------------------------------------
@translation(aten.silu.default)
def aten_silu(b: GraphBuilder, self: Value) -> Value:
    """silu(Tensor self) -> Tensor"""
    return b.op("Mul", self, b.op("Sigmoid", self))


@translation(aten.hardtanh.default)
def aten_hardtanh(b: GraphBuilder, self: Value, min_val: float = -1, max_val: float = 1) -> Value:
    """hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor"""
    return b.op("Clip", self, b.scalar(min_val, self), b.scalar(max_val, self))


def _leaky(b: GraphBuilder, x: Value, slope: float | Value) -> Value:
    """x if x > 0 else slope * x: LeakyRelu (a float slope) or PRelu; Where for float64, which ONNX
    Runtime's CPU provider has no LeakyRelu-16 or PRelu-16 kernel for."""
    if x.dtype == torch.float64:
        scaled = b.op("Mul", x, slope if isinstance(slope, Value) else b.scalar(float(slope), x))
        return b.op("Where", b.op("Greater", x, b.scalar(0.0, x), dtype=torch.bool), x, scaled, dtype=x.dtype)
    if isinstance(slope, Value):
        weight = b.cast(slope, torch.float32) if x.dtype == torch.bfloat16 else slope
        return _half_via_float32(b, x, lambda v: b.op("PRelu", v, weight))
    return _half_via_float32(b, x, lambda v: b.op("LeakyRelu", v, alpha=float(slope)))


@translation(aten.leaky_relu.default)
def aten_leaky_relu(b: GraphBuilder, self: Value, negative_slope: float = 0.01) -> Value:
    """leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor"""
    return _leaky(b, self, float(negative_slope))


# NOTE: ONNX Celu takes float32 only, and Elu, Selu, HardSigmoid, HardSwish and Mish take bfloat16 only
# from opset 22, where ONNX Runtime's CPU provider still has no bfloat16 kernel for them (nor a float64
# one: NOT_IMPLEMENTED at load). bfloat16 is computed in float32 and cast back (as torch computes it);
# float64 by the formula, from ops that run in double, so no precision is lost.
def _half_via_float32(b: GraphBuilder, x: Value, emit: Callable[[Value], Value]) -> Value:
    """``emit(x)``, in float32 for bfloat16 (and any other type the op has no kernel for)."""
    if x.dtype is None or x.dtype in (torch.float16, torch.float32):
        return emit(x)
    return b.cast(emit(b.cast(x, torch.float32)), x.dtype)


def _elu_formula(b: GraphBuilder, x: Value, alpha: float, scale: float, input_scale: float) -> Value:
    """scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1))"""
    negative = b.op("Mul", b.op("Sub", b.op("Exp", b.op("Mul", x, b.scalar(input_scale, x))),
                                b.scalar(1.0, x)), b.scalar(alpha, x))
    positive = b.op("Greater", x, b.scalar(0.0, x), dtype=torch.bool)
    return b.op("Mul", b.op("Where", positive, x, negative, dtype=x.dtype), b.scalar(scale, x))


def _hardsigmoid_formula(b: GraphBuilder, x: Value) -> Value:
    """clamp(x / 6 + 1 / 2, 0, 1)"""
    shifted = b.op("Add", b.op("Mul", x, b.scalar(1 / 6, x)), b.scalar(0.5, x))
    return b.op("Clip", shifted, b.scalar(0.0, x), b.scalar(1.0, x))


@translation(aten.elu.default)
def aten_elu(b: GraphBuilder, self: Value, alpha: float = 1, scale: float = 1, input_scale: float = 1) -> Value:
    """elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor"""
    if input_scale == 1 and self.dtype != torch.float64:
        # scale * elu_alpha(x) is exactly ONNX Selu(alpha, gamma=scale).
        if scale == 1:
            return _half_via_float32(b, self, lambda x: b.op("Elu", x, alpha=float(alpha)))
        return _half_via_float32(b, self, lambda x: b.op("Selu", x, alpha=float(alpha), gamma=float(scale)))
    return _elu_formula(b, self, alpha, scale, input_scale)


@translation(aten.selu.default)
def aten_selu(b: GraphBuilder, self: Value) -> Value:
    """selu(Tensor self) -> Tensor"""
    return aten_elu(b, self, 1.6732632423543772, 1.0507009873554805)


@translation(aten.celu.default)
def aten_celu(b: GraphBuilder, self: Value, alpha: float = 1.0) -> Value:
    """celu(Tensor self, Scalar alpha=1.0) -> Tensor"""
    if self.dtype == torch.float64:  # max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
        return b.op("Add", b.op("Relu", self), b.op("Min", b.scalar(0.0, self),
                                                   _elu_formula(b, self, alpha, 1.0, 1.0 / alpha)))
    if self.dtype in (None, torch.float32):
        return b.op("Celu", self, alpha=float(alpha))
    return b.cast(b.op("Celu", b.cast(self, torch.float32), alpha=float(alpha)), self.dtype)


@translation(aten.hardswish.default)
def aten_hardswish(b: GraphBuilder, self: Value) -> Value:
    """hardswish(Tensor self) -> Tensor"""
    if self.dtype == torch.float64:
        return b.op("Mul", self, _hardsigmoid_formula(b, self))
    return _half_via_float32(b, self, lambda x: b.op("HardSwish", x))


@translation(aten.hardsigmoid.default)
def aten_hardsigmoid(b: GraphBuilder, self: Value) -> Value:
    """hardsigmoid(Tensor self) -> Tensor"""
    if self.dtype == torch.float64:
        return _hardsigmoid_formula(b, self)
    return _half_via_float32(b, self, lambda x: b.op("HardSigmoid", x, alpha=1 / 6, beta=0.5))


@translation(aten.mish.default, until=17)
def aten_mish(b: GraphBuilder, self: Value) -> Value:
    """mish(Tensor self) -> Tensor"""
    def formula(x: Value) -> Value:  # Softplus has no float64 kernel: log(1 + exp(x)) (inf -> x * 1)
        soft = b.op("Log", b.op("Add", b.op("Exp", x), b.scalar(1.0, x))) if x.dtype == torch.float64 \
            else b.op("Softplus", x)
        return b.op("Mul", x, b.op("Tanh", soft))
    return _half_via_float32(b, self, formula)


@translation(aten.mish.default, since=18)
def aten_mish_18(b: GraphBuilder, self: Value) -> Value:
    """mish(Tensor self) -> Tensor"""
    if self.dtype == torch.float64:
        return aten_mish(b, self)
    return _half_via_float32(b, self, lambda x: b.op("Mish", x))


@translation(aten._prelu_kernel.default)
def aten_prelu_kernel(b: GraphBuilder, self: Value, weight: Value) -> Value:
    """_prelu_kernel(Tensor self, Tensor weight) -> Tensor

    torch.prelu has already reshaped ``weight`` to broadcast against ``self``.
    """
    return _leaky(b, self, weight)


# -- softmax -----------------------------------------------------------------------------------------
def _softmax(b: GraphBuilder, op_type: str, x: Value, dim: int, dtype: torch.dtype | None) -> Value:
    if dtype is not None:
        x = b.cast(x, dtype)
    if x.rank == 0:  # ONNX Softmax needs an axis to work on; a 0-d softmax is over one element.
        flat = b.op("Reshape", x, b.const([1], torch.int64), shape=(1,))
        return b.op("Reshape", b.op(op_type, flat, axis=0), b.const([], torch.int64), shape=())
    return b.op(op_type, x, axis=dim)


@translation(aten.softmax.int)
def aten_softmax(b: GraphBuilder, self: Value, dim: int, dtype: torch.dtype | None = None) -> Value:
    """softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    return _softmax(b, "Softmax", self, dim, dtype)


@translation(aten._softmax.default)
def aten__softmax(b: GraphBuilder, self: Value, dim: int, half_to_float: bool) -> Value:
    """_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    return _softmax(b, "Softmax", self, dim, torch.float32 if half_to_float else None)


@translation(aten.log_softmax.int)
def aten_log_softmax(b: GraphBuilder, self: Value, dim: int, dtype: torch.dtype | None = None) -> Value:
    """log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"""
    return _softmax(b, "LogSoftmax", self, dim, dtype)


@translation(aten._log_softmax.default)
def aten__log_softmax(b: GraphBuilder, self: Value, dim: int, half_to_float: bool) -> Value:
    """_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    return _softmax(b, "LogSoftmax", self, dim, torch.float32 if half_to_float else None)


# -- dropout -----------------------------------------------------------------------------------------
@translation(aten.native_dropout.default)
def aten_native_dropout(b: GraphBuilder, input: Value, p: float, train: bool | None) -> tuple[Value, Value | None]:
    """native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)

    Identity (and an all-true mask) in inference; drawn in training mode otherwise (``_nn_common.dropout``).
    """
    if not train or p == 0:
        mask = None
        if b.node.output_used(1):
            mask = b.op("Expand", b.const(True, torch.bool), b.shape_of(input), dtype=torch.bool)
        return input, mask
    return dropout(b, input, float(p))


@translation(aten.dropout.default)
def aten_dropout(b: GraphBuilder, input: Value, p: float, train: bool) -> Value:
    """dropout(Tensor input, float p, bool train) -> Tensor"""
    if not train or p == 0:
        return input
    return dropout(b, input, float(p))[0]


@translation(aten.rrelu_with_noise_functional.default)
def aten_rrelu_with_noise_functional(b: GraphBuilder, self: Value, noise: Value, lower: float = 0.125,
                                     upper: float = 1 / 3, training: bool = False,
                                     generator: object = None) -> tuple[Value, Value]:
    """rrelu_with_noise_functional(Tensor self, Tensor noise, Scalar lower=0.125, Scalar upper=0.3333333333333333,
    bool training=False, Generator? generator=None) -> (Tensor, Tensor noise_out)

    In inference rrelu is leaky_relu with the mean slope; the noise buffer is unchanged.
    """
    if training:
        raise UnsupportedVariant("training", True, "False (rrelu in training draws random slopes; export in eval mode)")
    return _leaky(b, self, (float(lower) + float(upper)) / 2), noise
