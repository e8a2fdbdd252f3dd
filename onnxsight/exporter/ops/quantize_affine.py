"""torchao's affine quantization primitives (``torchao::quantize_affine`` & co.) as ONNX QDQ.

torchao's newer flows (``quantize_`` with ``Int8DynamicActivationInt8WeightConfig`` and friends, PT2E
with its ``AffineQuantized*Observer``s) emit ``quantize_affine``/``dequantize_affine``, whose
granularity is a ``block_size`` (one entry per dim: 1, a block, or the whole dim), and
``choose_qparams_affine`` for dynamic activation quantization. They become:

- every block the whole tensor: per-tensor ``QuantizeLinear``/``DequantizeLinear``;
- one dim of blocks of 1 (a channel, a token row of a 2-D activation), the rest whole: per-axis Q/DQ;
- one dim of blocks (a group of 32 weights, or the whole hidden dim of a per-token activation) and
  blocks of 1 elsewhere: blocked Q/DQ (``block_size``), from opset 21;
- anything else (blocks along two dims) is refused (OPS006), naming the block sizes.

torchao keeps sub-byte unsigned integers (``torch.uint4``...) in uint8 tensors with a narrower range:
they are uint8 Q/DQ with a Clip, as PyTorch computes them. Signed sub-byte dtypes (``torch.int4``) have no
PyTorch kernel (``copy_`` is not implemented for them), so no model computes them: 4-bit signed weights are
int8 tensors with ``quant_min=-8, quant_max=7`` (``IntxWeightOnlyConfig(weight_dtype=torch.int4)``).

From opset 21 the dequantize of a 4-bit weight (a constant whose range is 4-bit) reads an INT4/UINT4
initializer, two values a byte (``_four_bit``): half the bytes of int8, and the DequantizeLinear(4-bit,
blocked) ONNX Runtime's 4-bit MatMul kernels are fused from. Below opset 21, and for a weight without data
(fake mode), it stays int8/uint8.

NOTE: a symbolic ``block_size`` entry is taken as its whole dim: torchao derives block sizes from
``input.shape`` (a per-tensor block of a dynamic batch), never a fraction of a dynamic dim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._dtypes import int4_pairs
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.ops.quantize import _check_dtype, _clamped, _constant, _float_input, _store

_NS = "torchao::"
_BLOCKED_SINCE = 21


@dataclass(frozen=True)
class _Granularity:
    """How one call's scale maps onto its input: per tensor, per axis or blocks along one axis."""

    kind: str                   # "tensor", "axis" or "block"
    axis: int | None = None
    block: int | None = None
    missing: tuple[int, ...] = ()   # dims torchao's (keepdim=False) scale leaves out: blocks of the whole dim


def _granularity(b: GraphBuilder, x: Value, block_size: Sequence[Any]) -> _Granularity:
    shape = x.shape
    if shape is None or len(shape) != len(block_size):
        raise UnsupportedVariant("block_size", list(block_size), "one entry per dim of an input of known rank")
    whole, ones, partial = [], [], []
    for i, (size, block) in enumerate(zip(shape, block_size)):
        if not isinstance(block, int) or block == size:
            whole.append(i)
        elif block == 1:
            ones.append(i)
        else:
            partial.append(i)
    missing = tuple(i for i in whole if block_size[i] != 1)
    if not ones and not partial:
        return _Granularity("tensor", missing=missing)
    if len(ones) == 1 and not partial:
        return _Granularity("axis", axis=ones[0], missing=missing)
    blocked = [i for i in partial + whole if shape[i] != 1]
    text = f"{list(block_size)} on an input of shape {list(shape)}"
    if len(blocked) != 1 or not isinstance(block_size[blocked[0]], int):
        raise UnsupportedVariant("block_size", text, "per tensor, per axis (blocks of 1 along one dim), and blocks "
                                 "along one dim with blocks of 1 elsewhere (QuantizeLinear's block_size, opset 21)")
    if b.opset < _BLOCKED_SINCE:
        raise UnsupportedVariant("block_size", f"{text} (blocks along dim {blocked[0]}) at opset {b.opset}",
                                 "per tensor and per axis; blocks along one dim from opset 21 "
                                 "(export with opset_version=21)")
    return _Granularity("block", axis=blocked[0], block=int(block_size[blocked[0]]), missing=missing)


def _stored_dtype(dtype: torch.dtype) -> tuple[torch.dtype, int | None, int | None]:
    """The dtype PyTorch holds ``dtype``'s integers in, with the range of a sub-byte unsigned one."""
    bits = {getattr(torch, f"uint{k}"): k for k in range(1, 8) if hasattr(torch, f"uint{k}")}
    if dtype in bits:
        return torch.uint8, 0, 2 ** bits[dtype] - 1
    return dtype, None, None


def _checked(b: GraphBuilder, dtype: torch.dtype, quant_min: Any, quant_max: Any) -> tuple[torch.dtype, int, int]:
    """(stored dtype, quant_min, quant_max) with torchao's defaults; OPS006 for a dtype Q/DQ lacks at this opset."""
    stored, low, high = _stored_dtype(dtype)
    if stored is dtype and (dtype.is_floating_point or dtype not in (torch.int8, torch.uint8, torch.int16,
                                                                      torch.uint16)):
        raise UnsupportedVariant("dtype", str(dtype).replace("torch.", ""),
                                 "int8, uint8, uint1..uint7 (held in uint8), int16/uint16 from opset 21 (torch.int4 "
                                 "and the other signed sub-byte dtypes have no PyTorch kernel)")
    _check_dtype(b, stored)
    info = torch.iinfo(stored)
    low = info.min if low is None else low
    high = info.max if high is None else high
    return stored, int(low if quant_min is None else quant_min), int(high if quant_max is None else quant_max)


def _param(b: GraphBuilder, value: Value, x: Value, grain: _Granularity, dtype: torch.dtype) -> Value:
    """A scale or zero point in ``dtype``, shaped as Q/DQ wants it for ``grain`` (a weight's converted now)."""
    tensor = _constant(b, value)
    if grain.kind == "block":
        rank = x.rank or 0
        if tensor is not None:
            if tensor.dim() != rank:
                for i in grain.missing:
                    tensor = tensor.unsqueeze(i)
            return _store(b, tensor.to(dtype), f"{value.name}_{str(dtype)[6:]}_blocks")
        value = b.cast(value, dtype)
        if value.rank is not None and value.rank != rank and grain.missing:
            shape = list(value.shape or ())
            for i in grain.missing:
                shape.insert(i, 1)
            value = b.op("Unsqueeze", value, b.const(list(grain.missing), torch.int64), shape=tuple(shape))
        return value
    target: tuple = () if grain.kind == "tensor" else (x.shape[grain.axis],)
    if tensor is not None:
        return _store(b, tensor.to(dtype).reshape(target if grain.kind == "tensor" else (-1,)),
                      f"{value.name}_{str(dtype)[6:]}_{grain.kind}")
    reshaped = b.const([] if grain.kind == "tensor" else [-1], torch.int64)
    return b.op("Reshape", b.cast(value, dtype), reshaped, shape=target)


def _zero_point(b: GraphBuilder, zero_point: Value | None, scale: Value, x: Value, grain: _Granularity,
                dtype: torch.dtype) -> Value:
    """The zero point in the quantized dtype; zeros shaped as the scale when torchao has none (symmetric)."""
    if zero_point is not None and (zero_point.shape is None or 0 not in zero_point.shape):
        return _param(b, zero_point, x, grain, dtype)
    tensor = _constant(b, scale)
    if tensor is not None:
        return _store(b, torch.zeros(tensor.shape, dtype=dtype), f"{scale.name}_zero_{str(dtype)[6:]}")
    zeros = b.op("Mul", scale, b.const(0.0, torch.float32), shape=scale.shape)
    return b.cast(zeros, dtype)


@translation(_NS + "quantize_affine.default")
def quantize_affine(b: GraphBuilder, input: Value, block_size: Sequence[Any], scale: Value, zero_point: Value | None,
                    output_dtype: torch.dtype, quant_min: int | None = None, quant_max: int | None = None) -> Value:
    """quantize_affine(Tensor input, SymInt[] block_size, Tensor scale, Tensor? zero_point, ScalarType output_dtype,
    Scalar? quant_min=None, Scalar? quant_max=None) -> Tensor

    ``clamp(round(input * (1 / scale)) + zero_point, quant_min, quant_max)`` per block: QuantizeLinear (and a
    Clip when the range is narrower than the dtype's). A weight's quantize is evaluated now (int8 initializer).
    """
    dtype, low, high = _checked(b, output_dtype, quant_min, quant_max)
    values = [_constant(b, v) for v in (input, scale)]
    if all(v is not None for v in values) and all(isinstance(s, int) for s in block_size):
        zp = _constant(b, zero_point) if zero_point is not None else None
        tensor = torch.ops.torchao.quantize_affine.default(values[0], list(block_size), values[1], zp, output_dtype,
                                                           quant_min, quant_max)
        return _store(b, tensor, b.node.name)
    grain = _granularity(b, input, block_size)
    s = _param(b, scale, input, grain, torch.float32)
    q = b.op("QuantizeLinear", _float_input(b, input), s, _zero_point(b, zero_point, s, input, grain, dtype),
             axis=grain.axis, block_size=grain.block, dtype=dtype, shape=input.shape)
    return _clamped(b, q, dtype, low, high)


@translation(_NS + "dequantize_affine.default")
def dequantize_affine(b: GraphBuilder, input: Value, block_size: Sequence[Any], scale: Value,
                      zero_point: Value | None, input_dtype: torch.dtype, quant_min: int | None = None,
                      quant_max: int | None = None, output_dtype: torch.dtype = torch.float32) -> Value:
    """dequantize_affine(Tensor input, SymInt[] block_size, Tensor scale, Tensor? zero_point, ScalarType input_dtype,
    Scalar? quant_min=None, Scalar? quant_max=None, ScalarType output_dtype=float32) -> Tensor

    ``(input - zero_point) * scale`` per block: DequantizeLinear, then a Cast to ``output_dtype``.
    """
    dtype, low, high = _checked(b, input_dtype, quant_min, quant_max)
    grain = _granularity(b, input, block_size)
    s = _param(b, scale, input, grain, torch.float32)
    zp = _param(b, zero_point, input, grain, dtype) if zero_point is not None and (
        zero_point.shape is None or 0 not in zero_point.shape) else None
    fused = _matmul_nbits_form(b, input, s, zp, grain, dtype, low, high)
    if fused is not None:
        return b.cast(fused, output_dtype or torch.float32)
    input, zp = _four_bit(b, input, zp, dtype, low, high) or (input, zp)
    y = b.op("DequantizeLinear", input, s, zp, axis=grain.axis, block_size=grain.block, dtype=torch.float32,
             shape=input.shape)
    return b.cast(y, output_dtype or torch.float32)


def _matmul_nbits_form(b: GraphBuilder, x: Value, scale: Value, zero_point: Value | None, grain: _Granularity,
                       dtype: torch.dtype, low: int, high: int) -> Value | None:
    """A Linear's 4-bit weight [N, K] stored as [K, N] with blocks along axis 0, then transposed back; None
    when it is not a constant 2-D 4-bit weight in groups along K (or per row, K a power of 2 from 16).

    NOTE: ONNX Runtime fuses DequantizeLinear(4-bit [K, N], blocks along axis 0) -> Transpose ->
    Gemm(transB=1) into MatMulNBits (its transpose optimiser cancels the two transposes; measured with
    onnxruntime 1.32), never the same DequantizeLinear on [N, K]; a per-row weight is one block of K
    (MatMulNBits takes blocks of a power of 2 from 16).
    """
    scale_tensor = _constant(b, scale)
    if x.rank != 2 or scale_tensor is None or not all(isinstance(d, int) for d in x.shape):
        return None
    rows, columns = x.shape
    if grain.kind == "block" and grain.axis == 1:
        block = grain.block
    elif grain.kind == "axis" and grain.axis == 0 and columns >= 16 and columns & (columns - 1) == 0:
        block, scale_tensor = columns, scale_tensor.reshape(rows, 1)
        zp_tensor = _constant(b, zero_point) if zero_point is not None else None
        if zp_tensor is not None:
            zero_point = _store(b, zp_tensor.reshape(rows, 1), f"{zero_point.name}_rows")
    else:
        return None
    packed = _four_bit(b, x, zero_point, dtype, low, high, transpose=True)
    if packed is None:
        return None
    scale_t = _store(b, scale_tensor.t().contiguous(), f"{scale.name}_t")
    y = b.op("DequantizeLinear", packed[0], scale_t, packed[1], axis=0, block_size=block, dtype=torch.float32,
             shape=(columns, rows))
    return b.op("Transpose", y, perm=[1, 0], shape=x.shape)


_FOUR_BIT = {torch.int8: (torch.int4, -8, 7), torch.uint8: (torch.uint4, 0, 15)}


def _four_bit(b: GraphBuilder, x: Value, zero_point: Value | None, dtype: torch.dtype, low: int,
              high: int, *, transpose: bool = False) -> tuple[Value, Value | None] | None:
    """A weight's integers (and zero point) as an INT4/UINT4 initializer, two a byte, when its range is 4-bit.

    None (keep int8/uint8) below opset 21, for a runtime value or a weight without data (fake mode), a
    declared range wider than 4 bits or integers outside it, a zero point that is not a constant, and an
    odd last dim (the exporter packs pairs along the last dim, which is ONNX's packing when it is even).
    ``transpose``: a 2-D weight and its zero point stored transposed.
    """
    packed_dtype, lowest, highest = _FOUR_BIT.get(dtype, (None, 0, 0))
    if b.opset < 21 or packed_dtype is None or not lowest <= low <= high <= highest:
        return None
    tensors = [_constant(b, v) if v is not None else None for v in (x, zero_point)]
    if tensors[0] is None or (zero_point is not None and tensors[1] is None):
        return None
    if transpose:
        tensors = [t.t().contiguous() if t is not None and has_data(t) and t.dim() == 2 else t for t in tensors]
    present = [t for t in tensors if t is not None]
    if not all(has_data(t) and t.dim() and t.shape[-1] % 2 == 0 and t.dtype == dtype for t in present) or any(
            t.numel() and not low <= int(t.min()) <= int(t.max()) <= high for t in present):
        return None
    suffix = f"{str(packed_dtype)[6:]}{'_t' if transpose else ''}"
    values = _store(b, int4_pairs(tensors[0], packed_dtype), f"{x.name}_{suffix}")
    values.shape = tuple(tensors[0].shape)   # as ONNX counts them (onnx_shape doubles the packed last dim)
    if tensors[1] is None or not tensors[1].any():   # DequantizeLinear's default zero point: 0 of x's type
        return values, None
    zp = _store(b, int4_pairs(tensors[1], packed_dtype), f"{zero_point.name}_{suffix}")
    zp.shape = tuple(tensors[1].shape)
    return values, zp


_MAPPINGS = ("SYMMETRIC", "SYMMETRIC_NO_CLIPPING_ERR", "ASYMMETRIC")


@translation(_NS + "choose_qparams_affine.default")
def choose_qparams_affine(b: GraphBuilder, input: Value, mapping_type: str, block_size: Sequence[Any],
                          target_dtype: torch.dtype, quant_min: int | None = None, quant_max: int | None = None,
                          eps: float | None = None, scale_dtype: torch.dtype | None = None,
                          zero_point_dtype: torch.dtype | None = None, keepdim: bool = False) -> tuple[Value, Value]:
    """choose_qparams_affine(Tensor? input, str mapping_type, SymInt[] block_size, ScalarType target_dtype,
    Scalar? quant_min=None, Scalar? quant_max=None, float? eps=None, ScalarType? scale_dtype=None,
    ScalarType? zero_point_dtype=None, bool keepdim=False) -> (Tensor, Tensor)

    The min and max of each block (ReduceMin/ReduceMax over the dims whose block is the whole dim), widened
    to cover zero, then torchao's scale and zero point arithmetic for the mapping type.
    """
    if mapping_type not in _MAPPINGS:
        raise UnsupportedVariant("mapping_type", repr(mapping_type), ", ".join(repr(m) for m in _MAPPINGS))
    _, low, high = _checked(b, target_dtype, quant_min, quant_max)
    grain = _granularity(b, input, block_size)
    if grain.kind == "block" and grain.block != input.shape[grain.axis]:
        raise UnsupportedVariant("block_size", f"{list(block_size)} (blocks of {grain.block} along dim {grain.axis})",
                                 "blocks of 1 or of the whole dim (per tensor, per axis, per token)")
    x = _float_input(b, input)
    reduced = [i for i, size in enumerate(input.shape or ()) if not isinstance(block_size[i], int)
               or (block_size[i] != 1 and block_size[i] == size)]
    out_shape = tuple(1 if i in reduced else d for i, d in enumerate(input.shape)) if keepdim else tuple(
        d for i, d in enumerate(input.shape) if i not in reduced)
    lo, hi = (_reduce(b, op, x, reduced, keepdim, out_shape) for op in ("ReduceMin", "ReduceMax"))
    zero = b.const(0.0, torch.float32)
    lo, hi = b.op("Min", lo, zero, shape=out_shape), b.op("Max", hi, zero, shape=out_shape)
    floor = b.const(float(eps if eps is not None else torch.finfo(input.dtype or torch.float32).smallest_normal),
                    torch.float32)
    if mapping_type == "ASYMMETRIC":
        scale = b.op("Max", b.op("Div", b.op("Sub", hi, lo), b.const(float(high - low), torch.float32)), floor)
        zp = b.op("Sub", b.const(float(low), torch.float32), b.op("Round", b.op("Div", lo, scale)))
        zp = b.op("Clip", zp, b.const(float(low), torch.float32), b.const(float(high), torch.float32))
    else:
        if mapping_type == "SYMMETRIC":
            scale = b.op("Div", b.op("Max", b.op("Neg", lo), hi), b.const(float(high - low) / 2, torch.float32))
        else:
            small, large = (b.op("Div", lo, b.const(float(low), torch.float32)),
                            b.op("Div", hi, b.const(float(high), torch.float32)))
            scale = b.op("Where", b.op("Greater", small, large, dtype=torch.bool), small, large)
        scale = b.op("Max", scale, floor)
        zp = b.op("Add", b.op("Mul", scale, zero), b.const(float(int((high + low + 1) / 2)), torch.float32))
    scale_out, zp_out = (b.node.out_dtypes + (None, None))[:2]
    return (b.cast(_shaped(scale, out_shape), scale_out or torch.float32),
            b.cast(_shaped(zp, out_shape), zp_out or torch.int32))


def _reduce(b: GraphBuilder, op: str, x: Value, axes: list[int], keepdim: bool, shape: tuple) -> Value:
    """ReduceMin/ReduceMax over ``axes`` (an input from opset 18, an attribute before); ``x`` without axes."""
    if not axes:
        return x
    if b.opset < 18:
        return b.op(op, x, axes=axes, keepdims=int(keepdim), shape=shape)
    return b.op(op, x, b.const(axes, torch.int64), keepdims=int(keepdim), shape=shape)


def _shaped(value: Value, shape: tuple) -> Value:
    value.shape = shape
    return value


@translation("aten::_int_mm.default")
def int_mm(b: GraphBuilder, self: Value, mat2: Value) -> Value:
    """_int_mm(Tensor self, Tensor mat2) -> Tensor

    int8 x int8 -> int32 matrix product (torchao's ``Int8DynamicActivationInt8WeightConfig`` computes its
    Linear layers so): MatMulInteger, ONNX Runtime's integer kernel.
    """
    shape = (self.shape[0], mat2.shape[1]) if self.shape and mat2.shape else None
    return b.op("MatMulInteger", self, mat2, dtype=torch.int32, shape=shape)
