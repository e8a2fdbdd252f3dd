"""Quantize/dequantize primitives of PT2E quantization (``quantized_decomposed``) as ONNX QDQ.

torchao's ``convert_pt2e`` leaves ``quantize_per_tensor``/``dequantize_per_tensor`` around every
quantized activation, ``dequantize_per_channel`` after every quantized weight, and, for dynamic
activation quantization, ``choose_qparams`` computing an activation's scale and zero point at run
time. They become ONNX ``QuantizeLinear``/``DequantizeLinear`` kept as such (never decomposed into
Mul/Round), the pattern ONNX Runtime fuses into its integer kernels.

NOTE: PyTorch quantizes as ``round(x * (1 / scale)) + zero_point``, ONNX as ``round(x / scale) +
zero_point``: the two agree except where ``x / scale`` lies within a rounding error of a half
step, where one lands one step away. Verification judges such elements as rounding (quantize nodes
are decisions, ``verification/_decisions.py``), never as a wrong translation.

A weight's quantize (``convert_pt2e(fold_quantize=False)``, or any quantize of a parameter) is
evaluated here, at export: the file stores the integers as an int8/uint8 initializer feeding a
DequantizeLinear, never the float weight with a QuantizeLinear in front.
"""

from __future__ import annotations

from typing import Any

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation

# The ops are defined by torch.ao.quantization (imported by torchao); keys as strings keep them unloaded here.
_NS = "quantized_decomposed::"

# Quantized dtypes QuantizeLinear/DequantizeLinear take, by the opset that introduced them.
_QUANT_DTYPES = {torch.int8: 10, torch.uint8: 10, torch.int16: 21, torch.uint16: 21}


def _check_dtype(b: GraphBuilder, dtype: torch.dtype) -> None:
    """UnsupportedVariant (OPS006) for a quantized dtype QuantizeLinear has no form of at this opset."""
    since = _QUANT_DTYPES.get(dtype)
    if since is None or b.opset < since:
        usable = [str(d).replace("torch.", "") for d, s in _QUANT_DTYPES.items() if s <= b.opset]
        raise UnsupportedVariant("dtype", str(dtype).replace("torch.", ""),
                                 ", ".join(usable) + (" (int16/uint16 from opset 21)" if b.opset < 21 else ""))


def _full_range(dtype: torch.dtype, quant_min: int, quant_max: int) -> bool:
    info = torch.iinfo(dtype)
    return (quant_min, quant_max) == (info.min, info.max)


def _float_input(b: GraphBuilder, x: Value) -> Value:
    """PyTorch quantizes float16/bfloat16 inputs through float32."""
    return b.cast(x, torch.float32)


def _scale(b: GraphBuilder, scale: float | Value, *, per_tensor: bool = True) -> Value:
    """A float32 scale: a 0-d one for per-tensor quantization (scale tensors are [1] in PyTorch)."""
    if not isinstance(scale, Value):
        return b.const(float(scale), torch.float32)
    return _converted(b, scale, torch.float32, scalar=per_tensor)


def _zero_point(b: GraphBuilder, zero_point: int | Value | None, dtype: torch.dtype, *,
                per_tensor: bool = True) -> Value | None:
    """The zero point in the quantized dtype (PyTorch keeps it as int64)."""
    if zero_point is None:
        return None
    if not isinstance(zero_point, Value):
        return b.const(int(zero_point), dtype)
    return _converted(b, zero_point, dtype, scalar=per_tensor)


def _clamped(b: GraphBuilder, q: Value, dtype: torch.dtype, quant_min: int | Value, quant_max: int | Value) -> Value:
    """QuantizeLinear saturates to the dtype's range; a narrower one (reduce_range, symmetric -127) is a Clip."""
    if isinstance(quant_min, int) and isinstance(quant_max, int) and _full_range(dtype, quant_min, quant_max):
        return q
    low, high = (b.op("Reshape", b.cast(v, dtype), b.const([], torch.int64), shape=()) if isinstance(v, Value)
                 else b.const(int(v), dtype) for v in (quant_min, quant_max))
    return b.op("Clip", q, low, high, dtype=dtype, shape=q.shape)


def _constant(b: GraphBuilder, value: Any) -> torch.Tensor | None:
    """The tensor of a weight (an initializer) or a Python number; None for a runtime value."""
    if isinstance(value, Value):
        tensor = b.initializers.get(value.name)
        return None if tensor is None else tensor.detach()
    return value


def _store(b: GraphBuilder, tensor: torch.Tensor, name: str) -> Value:
    """A new initializer named after the weight it is computed from (a layer called twice shares it)."""
    existing = b.initializers.get(name)
    if existing is not None and not (existing.shape == tensor.shape and existing.dtype == tensor.dtype
                                     and torch.equal(_bytes(existing), _bytes(tensor))):
        name = b.fresh(name)
    b.initializers.setdefault(name, tensor)
    return Value(name, tensor.dtype, tuple(tensor.shape))


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A packed 4-bit tensor as its bytes (PyTorch compares no int4/uint4 tensor), any other as it is."""
    return tensor.view(torch.uint8) if tensor.dtype in (torch.int4, torch.uint4) else tensor


def _converted(b: GraphBuilder, value: Value, dtype: torch.dtype, *, scalar: bool = False) -> Value:
    """``value`` in ``dtype`` (0-d when ``scalar``): a weight's scale or zero point converted now (ONNX
    Runtime fuses QDQ only around constant initializers: PT2E keeps zero points as int64 buffers, per-tensor
    ones as [1]), a runtime value by Cast and Reshape."""
    tensor = _constant(b, value)
    reshape = scalar and value.rank != 0
    if tensor is not None and (value.dtype != dtype or reshape):
        tensor = tensor.to(dtype).reshape(()) if reshape else tensor.to(dtype)
        return _store(b, tensor, f"{value.name}_{str(dtype).replace('torch.', '')}{'_scalar' if reshape else ''}")
    value = b.cast(value, dtype)
    return b.op("Reshape", value, b.const([], torch.int64), shape=()) if reshape else value


def _folded(b: GraphBuilder, overload: str, x: Value, args: tuple) -> Value | None:
    """The quantize of a weight evaluated now, stored as an initializer of integers; None for activations."""
    values = [_constant(b, a) for a in (x, *args)]
    if any(v is None for v in values[:3]):
        return None
    name, _, variant = overload.partition(".")
    tensor = getattr(getattr(torch.ops.quantized_decomposed, name), variant)(*values)
    # NOTE: named after the FX node (the translator keeps such an initializer's name): the integers feed
    # the DequantizeLinear directly, with no Identity between them that would hide the QDQ pattern.
    if b.node.name not in b.initializers:
        b.initializers[b.node.name] = tensor
        return Value(b.node.name, tensor.dtype, tuple(tensor.shape))
    return _store(b, tensor, f"{x.name}_quantized")


def _quantize(b: GraphBuilder, x: Value, scale: Value, zero_point: Value, dtype: torch.dtype,
              quant_min: int | Value, quant_max: int | Value, axis: int | None = None) -> Value:
    q = b.op("QuantizeLinear", _float_input(b, x), scale, zero_point, axis=axis, dtype=dtype, shape=x.shape)
    return _clamped(b, q, dtype, quant_min, quant_max)


def _dequantize(b: GraphBuilder, x: Value, scale: Value, zero_point: Value | None,
                out_dtype: torch.dtype | None, axis: int | None = None) -> Value:
    y = b.op("DequantizeLinear", x, scale, zero_point, axis=axis, dtype=torch.float32, shape=x.shape)
    return b.cast(y, out_dtype or torch.float32)


# -- per tensor -------------------------------------------------------------------------------------
@translation(_NS + "quantize_per_tensor.default")
def quantize_per_tensor(b: GraphBuilder, input: Value, scale: float, zero_point: int, quant_min: int,
                        quant_max: int, dtype: torch.dtype) -> Value:
    """quantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max,
    ScalarType dtype) -> Tensor"""
    _check_dtype(b, dtype)
    folded = _folded(b, "quantize_per_tensor.default", input, (scale, zero_point, quant_min, quant_max, dtype))
    return folded or _quantize(b, input, _scale(b, scale), _zero_point(b, zero_point, dtype), dtype,
                               quant_min, quant_max)


@translation(_NS + "quantize_per_tensor.tensor")
def quantize_per_tensor_tensor(b: GraphBuilder, input: Value, scale: Value, zero_point: Value, quant_min: int,
                               quant_max: int, dtype: torch.dtype) -> Value:
    """quantize_per_tensor.tensor(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max,
    ScalarType dtype) -> Tensor"""
    _check_dtype(b, dtype)
    folded = _folded(b, "quantize_per_tensor.tensor", input, (scale, zero_point, quant_min, quant_max, dtype))
    return folded or _quantize(b, input, _scale(b, scale), _zero_point(b, zero_point, dtype), dtype,
                               quant_min, quant_max)


@translation(_NS + "quantize_per_tensor.tensor2")
def quantize_per_tensor_tensor2(b: GraphBuilder, input: Value, scale: Value, zero_point: Value,
                                quant_min: Value, quant_max: Value, dtype: torch.dtype) -> Value:
    """quantize_per_tensor.tensor2(Tensor input, Tensor scale, Tensor zero_point, Tensor quant_min,
    Tensor quant_max, ScalarType dtype) -> Tensor"""
    _check_dtype(b, dtype)
    return _quantize(b, input, _scale(b, scale), _zero_point(b, zero_point, dtype), dtype, quant_min, quant_max)


@translation(_NS + "dequantize_per_tensor.default")
def dequantize_per_tensor(b: GraphBuilder, input: Value, scale: float, zero_point: int, quant_min: int,
                          quant_max: int, dtype: torch.dtype, *, out_dtype: torch.dtype | None = None) -> Value:
    """dequantize_per_tensor(Tensor input, float scale, int zero_point, int quant_min, int quant_max,
    ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor"""
    _check_dtype(b, dtype)
    return _dequantize(b, input, _scale(b, scale), _zero_point(b, zero_point, dtype), out_dtype)


@translation(_NS + "dequantize_per_tensor.tensor")
def dequantize_per_tensor_tensor(b: GraphBuilder, input: Value, scale: Value, zero_point: Value, quant_min: int,
                                 quant_max: int, dtype: torch.dtype, *,
                                 out_dtype: torch.dtype | None = None) -> Value:
    """dequantize_per_tensor.tensor(Tensor input, Tensor scale, Tensor zero_point, int quant_min,
    int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor"""
    _check_dtype(b, dtype)
    return _dequantize(b, input, _scale(b, scale), _zero_point(b, zero_point, dtype), out_dtype)


@translation(_NS + "dequantize_per_tensor.tensor2")
def dequantize_per_tensor_tensor2(b: GraphBuilder, input: Value, scale: Value, zero_point: Value,
                                  quant_min: Value, quant_max: Value, dtype: torch.dtype, *,
                                  out_dtype: torch.dtype | None = None) -> Value:
    """dequantize_per_tensor.tensor2(Tensor input, Tensor scale, Tensor zero_point, Tensor quant_min,
    Tensor quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor"""
    _check_dtype(b, dtype)
    return _dequantize(b, input, _scale(b, scale), _zero_point(b, zero_point, dtype), out_dtype)


# -- per channel (per axis) ----------------------------------------------------------------------------
def _axis(input: Value, axis: int) -> int:
    return axis + input.rank if axis < 0 and input.rank is not None else axis


@translation(_NS + "quantize_per_channel.default")
def quantize_per_channel(b: GraphBuilder, input: Value, scales: Value, zero_points: Value, axis: int,
                         quant_min: int, quant_max: int, dtype: torch.dtype) -> Value:
    """quantize_per_channel(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min,
    int quant_max, ScalarType dtype) -> Tensor"""
    _check_dtype(b, dtype)
    folded = _folded(b, "quantize_per_channel.default", input,
                     (scales, zero_points, axis, quant_min, quant_max, dtype))
    return folded or _quantize(b, input, _scale(b, scales, per_tensor=False),
                               _zero_point(b, zero_points, dtype, per_tensor=False), dtype, quant_min, quant_max,
                               axis=_axis(input, axis))


@translation(_NS + "dequantize_per_channel.default")
def dequantize_per_channel(b: GraphBuilder, input: Value, scales: Value, zero_points: Value | None, axis: int,
                           quant_min: int, quant_max: int, dtype: torch.dtype, *,
                           out_dtype: torch.dtype | None = None) -> Value:
    """dequantize_per_channel(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min,
    int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None) -> Tensor"""
    _check_dtype(b, dtype)
    return _dequantize(b, input, _scale(b, scales, per_tensor=False),
                       _zero_point(b, zero_points, dtype, per_tensor=False), out_dtype, axis=_axis(input, axis))


# -- dynamic activation quantization -------------------------------------------------------------------
def _qparams_outputs(b: GraphBuilder, scale: Value, zero_point: Value) -> tuple[Value, Value]:
    """PyTorch's qparams: a float64 [1] scale and an int64 [1] zero point (computed in float32, as eager)."""
    one = b.const([1], torch.int64)
    scale = b.cast(b.op("Reshape", scale, one, shape=(1,)), torch.float64)
    zero_point = b.cast(b.op("Reshape", zero_point, one, shape=(1,)), torch.int64)
    return scale, zero_point


def _min_max(b: GraphBuilder, x: Value) -> tuple[Value, Value]:
    """min(x.min(), 0) and max(x.max(), 0) in float32 (a scale always covers zero exactly)."""
    x = _float_input(b, x)
    zero = b.const(0.0, torch.float32)
    low = b.op("Min", b.op("ReduceMin", x, keepdims=0, shape=()), zero, shape=())
    high = b.op("Max", b.op("ReduceMax", x, keepdims=0, shape=()), zero, shape=())
    return low, high


@translation(_NS + "choose_qparams.tensor")
def choose_qparams(b: GraphBuilder, input: Value, quant_min: int, quant_max: int, eps: float,
                   dtype: torch.dtype) -> tuple[Value, Value]:
    """choose_qparams.tensor(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype)
    -> (Tensor, Tensor)

    Affine: ``scale = max((max - min) / (quant_max - quant_min), eps)``, ``zero_point =
    clamp(quant_min - round(min / scale))`` (torch.ao's ``determine_qparams``).
    """
    _check_dtype(b, dtype)
    low, high = _min_max(b, input)
    scale = b.op("Div", b.op("Sub", high, low), b.const(float(quant_max - quant_min), torch.float32))
    scale = b.op("Max", scale, b.const(float(eps), torch.float32))
    steps = b.cast(b.op("Round", b.op("Div", low, scale)), torch.int32)
    zero_point = b.op("Sub", b.const(int(quant_min), torch.int32), steps)
    zero_point = b.op("Clip", zero_point, b.const(int(quant_min), torch.int32), b.const(int(quant_max), torch.int32))
    return _qparams_outputs(b, scale, zero_point)


@translation(_NS + "choose_qparams_symmetric.tensor")
def choose_qparams_symmetric(b: GraphBuilder, input: Value, quant_min: int, quant_max: int, eps: float,
                             dtype: torch.dtype) -> tuple[Value, Value]:
    """choose_qparams_symmetric.tensor(Tensor input, int quant_min, int quant_max, float eps,
    ScalarType dtype) -> (Tensor, Tensor)

    Symmetric: ``scale = max(max(-min, max) / ((quant_max - quant_min) / 2), eps)``; the zero point
    is 0, or 128 for uint8.
    """
    _check_dtype(b, dtype)
    low, high = _min_max(b, input)
    bound = b.op("Max", b.op("Neg", low), high)
    scale = b.op("Div", bound, b.const(float(quant_max - quant_min) / 2, torch.float32))
    scale = b.op("Max", scale, b.const(float(eps), torch.float32))
    zero_point = b.const(128 if dtype == torch.uint8 else 0, torch.int64)
    return _qparams_outputs(b, scale, zero_point)


# -- blocked (per channel group, along the last axis of a 2-D weight): opset 21 ---------------------------
def _grouped(b: GraphBuilder, param: Value | None, input: Value, group_size: int, dtype: torch.dtype) -> Value | None:
    """A group's scale or zero point shaped [rows, columns / group_size], as blocked Q/DQ wants it."""
    if param is None:
        return None
    if input.shape is None or not all(isinstance(d, int) for d in input.shape) or input.rank != 2:
        raise UnsupportedVariant("input", f"shape {input.shape}", "a 2-D weight of static shape")
    rows, columns = input.shape
    converted = _converted(b, param, dtype)
    tensor = _constant(b, converted)
    shape = (rows, columns // group_size)
    if tensor is not None:
        return _store(b, tensor.reshape(shape), f"{converted.name}_blocks")
    return b.op("Reshape", converted, b.const(list(shape), torch.int64), shape=shape)


@translation(_NS + "quantize_per_channel_group.default", since=21)
def quantize_per_channel_group(b: GraphBuilder, input: Value, scales: Value, zero_points: Value, quant_min: int,
                               quant_max: int, dtype: torch.dtype, group_size: int) -> Value:
    """quantize_per_channel_group(Tensor input, Tensor scales, Tensor zero_points, int quant_min,
    int quant_max, ScalarType dtype, int group_size) -> Tensor"""
    _check_dtype(b, dtype)
    folded = _folded(b, "quantize_per_channel_group.default", input,
                     (scales, zero_points, quant_min, quant_max, dtype, group_size))
    if folded is not None:
        return folded
    q = b.op("QuantizeLinear", _float_input(b, input), _grouped(b, scales, input, group_size, torch.float32),
             _grouped(b, zero_points, input, group_size, dtype), axis=1, block_size=group_size, dtype=dtype,
             shape=input.shape)
    return _clamped(b, q, dtype, quant_min, quant_max)


@translation(_NS + "dequantize_per_channel_group.default", since=21)
def dequantize_per_channel_group(b: GraphBuilder, input: Value, scales: Value, zero_points: Value | None,
                                 quant_min: int, quant_max: int, dtype: torch.dtype, group_size: int,
                                 output_dtype: torch.dtype = torch.float32) -> Value:
    """dequantize_per_channel_group(Tensor input, Tensor scales, Tensor? zero_points, int quant_min,
    int quant_max, ScalarType dtype, int group_size, ScalarType output_dtype) -> Tensor"""
    _check_dtype(b, dtype)
    y = b.op("DequantizeLinear", input, _grouped(b, scales, input, group_size, torch.float32),
             _grouped(b, zero_points, input, group_size, dtype), axis=1, block_size=group_size,
             dtype=torch.float32, shape=input.shape)
    return b.cast(y, output_dtype or torch.float32)


# -- per token (one scale per row of the last dim: XNNPACK's dynamic activations, ExecuTorch's 8da4w) -------
# NOTE: computed as PyTorch writes them (multiply by 1 / scale, add the zero point, round, clamp), not as
# QuantizeLinear: the scale is a runtime [..., 1] tensor, which QuantizeLinear takes only blocked (opset 21,
# a static last dim), and eager rounds after adding its zero point. So the ONNX result is eager's, at every
# opset and with a dynamic last dim.
def _last_dim_max(b: GraphBuilder, x: Value, op: str) -> Value:
    """ReduceMax/ReduceMin over the last dim, kept (axes an input from opset 18, an attribute before)."""
    shape = (*x.shape[:-1], 1) if x.shape else None
    if b.opset < 18:
        return b.op(op, x, axes=[-1], keepdims=1, shape=shape)
    return b.op(op, x, b.const([-1], torch.int64), keepdims=1, shape=shape)


@translation(_NS + "quantize_per_token.default")
def quantize_per_token(b: GraphBuilder, input: Value, scales: Value, zero_points: Value, quant_min: int,
                       quant_max: int, dtype: torch.dtype) -> Value:
    """quantize_per_token(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max,
    ScalarType dtype) -> Tensor

    ``clamp(round(input * (1 / scales) + zero_points), quant_min, quant_max)``, scales broadcast over the
    last dim (one a token).
    """
    _check_dtype(b, dtype)
    # eager's dtype: float64 scales (choose_qparams_per_token_asymmetric's) make the whole product float64
    wide = torch.promote_types(torch.promote_types(input.dtype or torch.float32, scales.dtype or torch.float32),
                               torch.float32)
    x = b.cast(input, wide)
    inverse = b.op("Reciprocal", b.cast(scales, wide))
    steps = b.op("Add", b.op("Mul", x, inverse, shape=x.shape), b.cast(zero_points, wide), shape=x.shape)
    rounded = b.op("Clip", b.op("Round", steps, shape=x.shape), b.const(float(quant_min), wide),
                   b.const(float(quant_max), wide), shape=x.shape)
    return b.cast(rounded, dtype)


@translation(_NS + "dequantize_per_token.default")
def dequantize_per_token(b: GraphBuilder, input: Value, scales: Value, zero_points: Value, quant_min: int,
                         quant_max: int, dtype: torch.dtype, output_dtype: torch.dtype = torch.float32) -> Value:
    """dequantize_per_token(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max,
    ScalarType dtype, ScalarType output_dtype) -> Tensor

    ``(input - zero_points) * scales`` in the scales' dtype (float64 from choose_qparams_per_token_asymmetric),
    then a Cast to ``output_dtype``, as eager computes it.
    """
    _check_dtype(b, dtype)
    wide = scales.dtype if scales.dtype in (torch.float32, torch.float64) else torch.float32
    centred = b.op("Sub", b.cast(input, wide), b.cast(zero_points, wide), shape=input.shape)
    return b.cast(b.op("Mul", centred, scales if scales.dtype == wide else b.cast(scales, wide), shape=input.shape),
                  output_dtype or torch.float32)


@translation(_NS + "choose_qparams_per_token.default")
def choose_qparams_per_token(b: GraphBuilder, input: Value, dtype: torch.dtype) -> tuple[Value, Value]:
    """choose_qparams_per_token(Tensor input, ScalarType dtype) -> (Tensor, Tensor)

    Symmetric int8 per token: ``scales = max(amax(|input|, -1), 1e-5) / 127``, zero points 0 (float, as eager).
    """
    if dtype != torch.int8:
        raise UnsupportedVariant("dtype", str(dtype).replace("torch.", ""), "int8 (as PyTorch's kernel)")
    x = _float_input(b, input)
    largest = _last_dim_max(b, b.op("Abs", x, shape=x.shape), "ReduceMax")
    scale = b.op("Div", b.op("Max", largest, b.const(1e-5, torch.float32)), b.const(127.0, torch.float32),
                 shape=largest.shape)
    zero = b.op("ConstantOfShape", b.op("Shape", scale), shape=largest.shape, dtype=torch.float32)
    # NOTE: eager returns float32 scales and zero points; the op's meta (what torch.export traces the rest
    # of the graph with) declares float64 and int64: the ONNX graph follows the traced types, same values.
    scale_dtype, zero_dtype = (b.node.out_dtypes + (None, None))[:2]
    return b.cast(scale, scale_dtype or torch.float32), b.cast(zero, zero_dtype or torch.float32)


@translation(_NS + "choose_qparams_per_token_asymmetric.default")
def choose_qparams_per_token_asymmetric(b: GraphBuilder, input: Value, dtype: torch.dtype) -> tuple[Value, Value]:
    """choose_qparams_per_token_asymmetric(Tensor input, ScalarType dtype) -> (Tensor, Tensor)

    XNNPACK's asymmetric int8 per token (-128..127 whatever ``dtype``, as PyTorch): the row's min and max
    widened to cover zero, ``scale = max((max - min) / 255, eps)``, and the zero point from whichever end
    loses less, clamped and rounded; a float64 scale and an int64 zero point, shaped [..., 1].
    """
    x = _float_input(b, input)
    zero = b.const(0.0, torch.float32)
    low = b.op("Min", _last_dim_max(b, x, "ReduceMin"), zero)
    high = b.op("Max", _last_dim_max(b, x, "ReduceMax"), zero)
    shape = (*x.shape[:-1], 1) if x.shape else None
    scale = b.op("Max", b.op("Div", b.op("Sub", high, low), b.const(255.0, torch.float32)),
                 b.const(float(torch.finfo(torch.float32).eps), torch.float32), shape=shape)
    descaled_low, descaled_high = b.op("Div", low, scale), b.op("Div", high, scale)
    qmin, qmax = b.const(-128.0, torch.float32), b.const(127.0, torch.float32)
    from_low = b.op("Sub", qmin, descaled_low)
    from_high = b.op("Sub", qmax, descaled_high)
    errors = b.op("Add", b.op("Add", qmin, descaled_low), b.op("Add", qmax, descaled_high))
    chosen = b.op("Where", b.op("Greater", errors, zero, dtype=torch.bool), from_low, from_high)
    zero_point = b.op("Round", b.op("Clip", chosen, qmin, qmax), shape=shape)
    scale.shape = shape
    return b.cast(scale, torch.float64), b.cast(zero_point, torch.int64)
