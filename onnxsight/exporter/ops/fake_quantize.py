"""Fake quantization (``torch.fake_quantize_per_tensor_affine``/``_per_channel_affine``, QAT's
``FakeQuantize``) as the float arithmetic PyTorch's kernel does.

PyTorch computes, in float32 with ``inv_scale = 1.0f / scale``::

    q = nearbyint(x * inv_scale) + zero_point          # an integer zero point
    q = nearbyint(x * inv_scale + zero_point)          # a float one (per channel only)
    output = (clamp(q, quant_min, quant_max) - zero_point) * scale
    mask = quant_min <= q <= quant_max                 # the gradient's mask, second output

ONNX Round is round-half-to-even, as ``nearbyint`` in the default rounding mode, so Mul, Round, Add,
Clip, Sub, Mul give the same floats. QuantizeLinear/DequantizeLinear would not: they divide by the scale
(a half step apart from PyTorch's multiply by its inverse) and saturate to the whole dtype, not to
``quant_min``/``quant_max`` (0..255 as int8 is a Clip anyway).

NOTE: a NaN input gives NaN here; PyTorch's cast of NaN to int64 is undefined (on x86, ``quant_min``
after the clamp).
"""

from __future__ import annotations

import numpy as np
import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation

aten = torch.ops.aten


def _inverse(b: GraphBuilder, scale: float | Value) -> tuple[Value, Value]:
    """(scale, 1 / scale) in float32, as the kernel takes them (a double scale is narrowed first)."""
    if isinstance(scale, Value):
        scale = b.cast(scale, torch.float32)
        return scale, b.op("Reciprocal", scale)
    narrowed = np.float32(scale)
    return b.const(float(narrowed), torch.float32), b.const(float(np.float32(1.0) / narrowed), torch.float32)


def _fake_quantize(b: GraphBuilder, x: Value, scale: float | Value, zero_point: int | Value, quant_min: int,
                   quant_max: int) -> tuple[Value, Value | None]:
    """(output, mask); scale and zero point broadcast against ``x`` already."""
    scale_value, inverse = _inverse(b, scale)
    floating_zero = isinstance(zero_point, Value) and zero_point.dtype is not None \
        and zero_point.dtype.is_floating_point
    zero = (b.cast(zero_point, torch.float32) if isinstance(zero_point, Value)
            else b.const(float(zero_point), torch.float32))
    scaled = b.op("Mul", b.cast(x, torch.float32), inverse, shape=x.shape)
    if floating_zero:
        q = b.op("Round", b.op("Add", scaled, zero, shape=x.shape), shape=x.shape)
    else:
        q = b.op("Add", b.op("Round", scaled, shape=x.shape), zero, shape=x.shape)
    low, high = b.const(float(quant_min), torch.float32), b.const(float(quant_max), torch.float32)
    clipped = b.op("Clip", q, low, high, shape=x.shape)
    out = b.op("Mul", b.op("Sub", clipped, zero, shape=x.shape), scale_value, shape=x.shape)
    mask = None
    if b.node.output_used(1):
        mask = b.op("And", b.op("GreaterOrEqual", q, low, dtype=torch.bool, shape=x.shape),
                    b.op("LessOrEqual", q, high, dtype=torch.bool, shape=x.shape), shape=x.shape)
    return b.cast(out, x.dtype), mask


@translation(aten.fake_quantize_per_tensor_affine_cachemask.default)
def aten_fake_quantize_per_tensor_affine_cachemask(b: GraphBuilder, self: Value, scale: float, zero_point: int,
                                                   quant_min: int, quant_max: int) -> tuple[Value, Value | None]:
    """fake_quantize_per_tensor_affine_cachemask(Tensor self, float scale, int zero_point, int quant_min,
    int quant_max) -> (Tensor output, Tensor mask)"""
    return _fake_quantize(b, self, scale, zero_point, quant_min, quant_max)


@translation(aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default)
def aten__fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
        b: GraphBuilder, self: Value, scale: Value, zero_point: Value, fake_quant_enabled: Value, quant_min: int,
        quant_max: int) -> tuple[Value, Value | None]:
    """_fake_quantize_per_tensor_affine_cachemask_tensor_qparams(Tensor self, Tensor scale, Tensor zero_point,
    Tensor fake_quant_enabled, int quant_min, int quant_max) -> (Tensor output, Tensor mask)

    Scale and zero point are one-element tensors (QAT's observers update them). ``fake_quant_enabled``
    switches the op off where it truncates to 0 (PyTorch reads it as an integer): then the output is the
    input and the mask all true.
    """
    scalar = b.const([], torch.int64)
    scale, zero_point = (b.op("Reshape", v, scalar, shape=()) for v in (scale, zero_point))
    zero_point = b.cast(zero_point, torch.int64)   # an integer zero point, whatever its dtype
    out, mask = _fake_quantize(b, self, scale, zero_point, quant_min, quant_max)
    enabled = b.op("Reshape", b.cast(fake_quant_enabled, torch.int64), scalar, shape=())
    on = b.op("Not", b.op("Equal", enabled, b.const(0, torch.int64), dtype=torch.bool, shape=()), shape=())
    out = b.op("Where", on, out, self, shape=self.shape)
    if mask is not None:
        mask = b.op("Or", mask, b.op("Not", on, shape=()), shape=self.shape)
    return out, mask


@translation(aten.fake_quantize_per_channel_affine_cachemask.default)
def aten_fake_quantize_per_channel_affine_cachemask(b: GraphBuilder, self: Value, scale: Value, zero_point: Value,
                                                    axis: int, quant_min: int,
                                                    quant_max: int) -> tuple[Value, Value | None]:
    """fake_quantize_per_channel_affine_cachemask(Tensor self, Tensor scale, Tensor zero_point, int axis,
    int quant_min, int quant_max) -> (Tensor output, Tensor mask)

    Scale and zero point are 1-D, one entry per index of ``axis``: unsqueezed to broadcast along it. An
    integer zero point is added after rounding, a float one (which PyTorch allows here) before.
    """
    rank = self.rank
    if rank is None:
        raise UnsupportedVariant("self", "an input of unknown rank", "an input of known rank")
    trailing = list(range(1, rank - axis))
    if trailing:
        scale, zero_point = (b.op("Unsqueeze", v, b.const(trailing, torch.int64)) for v in (scale, zero_point))
    return _fake_quantize(b, self, scale, zero_point, quant_min, quant_max)
