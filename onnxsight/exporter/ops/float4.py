"""Bit views between float4 and bytes: ``aten.view.dtype`` for ``torch.float4_e2m1fn_x2``.

Models meet float4 as packed weights (MX/NVFP4 formats: a ``float4_e2m1fn_x2`` buffer, two values a
byte, low nibble first) that their own code reads as bytes, ``w.view(torch.uint8)``, and unpacks with
bit operations; or bytes they computed that they return as float4, ``q.view(torch.float4_e2m1fn_x2)``.
ONNX holds the same bytes as FLOAT4E2M1 (opset 23) with the value count as the last dim.

NOTE: ONNX has no bit reinterpretation before BitCast (opset 26), so the views go through the
values, exactly: every float4 value is a float32 value, and each of the 16 codes has its own
(-0.0 included, told from +0.0 by the sign of its reciprocal). float4 -> bytes: Cast to float32,
the code of each value (its magnitude's rank among the 8 magnitudes, plus 8 when negative), two
codes a byte. bytes -> float4: the two codes of each byte, their float32 values from the table,
Cast to FLOAT4E2M1 (exact: the values are float4 values).
"""

from __future__ import annotations

import onnx
import torch

from onnxsight.exporter import _dtypes
from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation

aten = torch.ops.aten

FLOAT4 = torch.float4_e2m1fn_x2
_BYTES = (torch.uint8, torch.int8)
#: The float4 e2m1 magnitudes, by code (codes 8..15 are their negatives).
MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


@translation(aten.view.dtype)
def aten_view_dtype(b: GraphBuilder, self: Value, dtype: torch.dtype) -> Value:
    """view.dtype(Tensor(a) self, ScalarType dtype) -> Tensor(a)"""
    if dtype == self.dtype:
        return b.op("Identity", self)
    if self.dtype is FLOAT4 and dtype in _BYTES:
        return _float4_as_bytes(b, self, dtype)
    if self.dtype in _BYTES and dtype is FLOAT4:
        return _bytes_as_float4(b, self)
    raise UnsupportedVariant("dtype", f"{dtype} (from {self.dtype})",
                             "views between float4_e2m1fn_x2 and uint8/int8; cast the values instead (x.to(dtype))")


def float4_zeros(b: GraphBuilder, size: Value, rank: int) -> Value:
    """Zeros of float4 pairs of torch shape ``size`` (rank ``rank``): the values ONNX counts, doubled last dim."""
    if not rank:
        raise UnsupportedVariant("size", "[]", "float4 tensors of rank 1 and more (values pair along the last dim)")
    values = b.op("Mul", size, b.const([1] * (rank - 1) + [2], torch.int64))
    zero = onnx.helper.make_tensor("value", _dtypes.to_onnx(FLOAT4), [1], b"\x00", raw=True)
    return b.op("ConstantOfShape", values, value=zero, dtype=FLOAT4, shape=b.node.out_shape)


def _rank(self: Value) -> int:
    if not self.rank:
        raise UnsupportedVariant("self", f"a {'0-d' if self.rank == 0 else 'rank-unknown'} tensor",
                                 "tensors of rank 1 and more (float4 values pair along the last dim)")
    return self.rank


def _float4_as_bytes(b: GraphBuilder, self: Value, dtype: torch.dtype) -> Value:
    rank = _rank(self)
    values = b.op("Cast", self, to=_dtypes.to_onnx(torch.float32), dtype=torch.float32)  # [..., 2n]
    magnitude = b.op("Unsqueeze", b.op("Abs", values), b.const([-1], torch.int64))
    midpoints = [(low + high) / 2 for low, high in zip(MAGNITUDES, MAGNITUDES[1:])]
    above = b.cast(b.op("Greater", magnitude, b.const(midpoints, torch.float32), dtype=torch.bool), torch.int64)
    rank_of = b.op("ReduceSum", above, b.const([-1], torch.int64), keepdims=0)
    negative = b.op("Less", b.op("Reciprocal", values), b.const(0.0, torch.float32), dtype=torch.bool)
    codes = b.op("Add", rank_of, b.op("Mul", b.cast(negative, torch.int64), b.const(8, torch.int64)))
    pairs = b.op("Reshape", codes, b.const([0] * (rank - 1) + [-1, 2], torch.int64))
    packed = b.op("ReduceSum", b.op("Mul", pairs, b.const([1, 16], torch.int64)), b.const([-1], torch.int64),
                  keepdims=0)
    if dtype is torch.int8:  # the byte's two's-complement reading
        packed = b.op("Sub", packed, b.op("Mul", b.cast(b.op("Greater", packed, b.const(127, torch.int64),
                                                                 dtype=torch.bool), torch.int64),
                                          b.const(256, torch.int64)))
    return b.op("Cast", packed, to=_dtypes.to_onnx(dtype), dtype=dtype, shape=self.shape)


def _bytes_as_float4(b: GraphBuilder, self: Value) -> Value:
    rank = _rank(self)
    byte = b.op("BitwiseAnd", b.cast(self, torch.int32), b.const(255, torch.int32))   # int8: its bits
    low = b.op("BitwiseAnd", byte, b.const(15, torch.int32))
    high = b.op("Div", byte, b.const(16, torch.int32))
    last = b.const([-1], torch.int64)
    codes = b.op("Concat", b.op("Unsqueeze", low, last), b.op("Unsqueeze", high, last), axis=-1)
    flat = b.op("Reshape", codes, b.const([0] * (rank - 1) + [-1], torch.int64))
    table = b.const(list(MAGNITUDES) + [-m for m in MAGNITUDES], torch.float32)
    values = b.op("Gather", table, flat, axis=0, dtype=torch.float32)
    return b.op("Cast", values, to=_dtypes.to_onnx(FLOAT4), dtype=FLOAT4, shape=self.shape)
