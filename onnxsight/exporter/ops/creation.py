"""Tensor creation: full, *_like, empty (as zeros), arange, repeat_interleave indices, random tensors.

Sizes may be symbolic (0-d int64 Values mixed with ints in the list).
``empty`` tensors are zero-filled (their content is unspecified in PyTorch).
Random ops use ONNX Runtime's generators: same distributions, different
numbers from PyTorch's, so they never match eager element for element.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import torch
from onnx import helper

from onnxsight.exporter import _dtypes
from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.ops import float4
from onnxsight.exporter.ops._nn_common import random_like

aten = torch.ops.aten


def _fill_value(b: GraphBuilder, value: Any, dtype: torch.dtype) -> Value:
    """0-d Value holding ``value`` (a Python scalar or a symbolic 0-d Value) converted as torch does."""
    if isinstance(value, Value):
        return b.cast(value, dtype)
    return b.const(torch.tensor(value).to(dtype))


def _full(b: GraphBuilder, shape: Value, value: Any, dtype: torch.dtype) -> Value:
    return b.op("Expand", _fill_value(b, value, dtype), shape, dtype=dtype, shape=b.node.out_shape)


def _dtype(b: GraphBuilder, dtype: torch.dtype | None, like: Value | None = None) -> torch.dtype:
    """The node's output dtype from its meta, else the argument, else ``like``'s, else the default."""
    return b.node.out_dtype or dtype or (like.dtype if like is not None else None) or torch.get_default_dtype()


@translation(aten.full.default)
def aten_full(b: GraphBuilder, size: Sequence[int | Value], fill_value: Any, *, dtype: torch.dtype | None = None,
              layout: Any = None, device: Any = None, pin_memory: bool | None = None) -> Value:
    """full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None,
    Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _full(b, b.int_list(size), fill_value, _dtype(b, dtype))


@translation(aten.zeros.default, aten.empty.memory_format)
def aten_zeros(b: GraphBuilder, size: Sequence[int | Value], *, dtype: torch.dtype | None = None, layout: Any = None,
               device: Any = None, pin_memory: bool | None = None, memory_format: Any = None) -> Value:
    """zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None) -> Tensor"""
    if _dtype(b, dtype) is float4.FLOAT4:  # torch.empty(..., dtype=torch.float4_e2m1fn_x2)
        return float4.float4_zeros(b, b.int_list(size), len(size))
    return _full(b, b.int_list(size), 0, _dtype(b, dtype))


@translation(aten.ones.default)
def aten_ones(b: GraphBuilder, size: Sequence[int | Value], *, dtype: torch.dtype | None = None, layout: Any = None,
              device: Any = None, pin_memory: bool | None = None) -> Value:
    """ones(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None) -> Tensor"""
    return _full(b, b.int_list(size), 1, _dtype(b, dtype))


@translation(aten.empty_strided.default, aten.empty_permuted.default)
def aten_empty_strided(b: GraphBuilder, size: Sequence[int | Value], stride_or_layout: Sequence[int], *,
                       dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
                       pin_memory: bool | None = None) -> Value:
    """empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None,
    Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _full(b, b.int_list(size), 0, _dtype(b, dtype))


@translation(aten.full_like.default)
def aten_full_like(b: GraphBuilder, self: Value, fill_value: Any, *, dtype: torch.dtype | None = None,
                   layout: Any = None, device: Any = None, pin_memory: bool | None = None,
                   memory_format: Any = None) -> Value:
    """full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None,
    Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return _full(b, b.shape_of(self), fill_value, _dtype(b, dtype, self))


@translation(aten.zeros_like.default, aten.empty_like.default)
def aten_zeros_like(b: GraphBuilder, self: Value, *, dtype: torch.dtype | None = None, layout: Any = None,
                    device: Any = None, pin_memory: bool | None = None, memory_format: Any = None) -> Value:
    """zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return _full(b, b.shape_of(self), 0, _dtype(b, dtype, self))


@translation(aten.ones_like.default)
def aten_ones_like(b: GraphBuilder, self: Value, *, dtype: torch.dtype | None = None, layout: Any = None,
                   device: Any = None, pin_memory: bool | None = None, memory_format: Any = None) -> Value:
    """ones_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return _full(b, b.shape_of(self), 1, _dtype(b, dtype, self))


@translation(aten.fill.Scalar, aten.fill.Tensor)
def aten_fill(b: GraphBuilder, self: Value, value: Any) -> Value:
    """fill.Scalar(Tensor self, Scalar value) -> Tensor"""
    dtype = _dtype(b, None, self)
    if isinstance(value, Value) and value.rank:  # fill.Tensor takes a 0-d tensor; make sure it is 0-d
        value = b.op("Reshape", value, b.const([], torch.int64))
    return _full(b, b.shape_of(self), value, dtype)


@translation(aten.new_full.default)
def aten_new_full(b: GraphBuilder, self: Value, size: Sequence[int | Value], fill_value: Any, *,
                  dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
                  pin_memory: bool | None = None) -> Value:
    """new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None,
    Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _full(b, b.int_list(size), fill_value, _dtype(b, dtype, self))


@translation(aten.new_zeros.default, aten.new_empty.default)
def aten_new_zeros(b: GraphBuilder, self: Value, size: Sequence[int | Value], *, dtype: torch.dtype | None = None,
                   layout: Any = None, device: Any = None, pin_memory: bool | None = None) -> Value:
    """new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None,
    Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _full(b, b.int_list(size), 0, _dtype(b, dtype, self))


@translation(aten.new_ones.default)
def aten_new_ones(b: GraphBuilder, self: Value, size: Sequence[int | Value], *, dtype: torch.dtype | None = None,
                  layout: Any = None, device: Any = None, pin_memory: bool | None = None) -> Value:
    """new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None,
    Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _full(b, b.int_list(size), 1, _dtype(b, dtype, self))


@translation(aten.new_empty_strided.default)
def aten_new_empty_strided(b: GraphBuilder, self: Value, size: Sequence[int | Value], stride: Sequence[int], *,
                           dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
                           pin_memory: bool | None = None) -> Value:
    """new_empty_strided(Tensor self, SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None,
    Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _full(b, b.int_list(size), 0, _dtype(b, dtype, self))


@translation(aten.scalar_tensor.default)
def aten_scalar_tensor(b: GraphBuilder, s: Any, *, dtype: torch.dtype | None = None, layout: Any = None,
                       device: Any = None, pin_memory: bool | None = None) -> Value:
    """scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None) -> Tensor"""
    dtype = _dtype(b, dtype)
    if isinstance(s, Value):
        return b.op("Reshape", b.cast(s, dtype), b.const([], torch.int64), dtype=dtype, shape=())
    return b.op("Identity", _fill_value(b, s, dtype))


# -- arange ----------------------------------------------------------------------------------------
def _is_int(x: Any) -> bool:
    if isinstance(x, Value):
        return x.dtype is not None and not x.dtype.is_floating_point
    return isinstance(x, int)


def _f64(b: GraphBuilder, x: Any) -> Value:
    return b.cast(x, torch.float64) if isinstance(x, Value) else b.const(float(x), torch.float64)


def _i64(b: GraphBuilder, x: Any) -> Value:
    """A bound as int64, truncated toward zero (C's cast, as torch's ``Scalar.to<int64_t>()``)."""
    return b.cast(x, torch.int64) if isinstance(x, Value) else b.const(int(x), torch.int64)



# NOTE: torch's arange into an integer dtype (RangeFactories.cpp) truncates start and step to int64
# and fills start + i * step; its length is ceil((end - start) / step) in double from the bounds as
# given, except for int64 where it is computed from the truncated bounds too. So
# arange(-0.5, 4, dtype=int32) has 5 elements [0..4] but the same with int64 has 4.
@functools.lru_cache(maxsize=1)
def _int64_arange_truncates_bounds() -> bool:
    """Whether this torch truncates float bounds first for an int64 arange: torch 2.13 does
    (``arange(2.5, dtype=int64)`` is ``[0, 1]``), torch 2.14 counts like every other integer dtype
    (``[0, 1, 2]``). Asked of the installed torch, so the graph follows it (tests/exporter/test_runs_in_ort.py
    compares with eager under `make test` and `make test-latest`)."""
    return torch.arange(2.5, dtype=torch.int64).numel() == 2


def _arange_integral(b: GraphBuilder, start: Any, end: Any, step: Any, out: torch.dtype) -> Value:
    """arange with float bounds into an integer dtype, with torch's length and values."""
    if out == torch.int64 and _int64_arange_truncates_bounds():
        return b.op("Range", _i64(b, start), _i64(b, end), _i64(b, step), dtype=torch.int64)
    if not any(isinstance(x, Value) for x in (start, end, step)):
        count: Value = b.const(max(0, math.ceil((float(end) - float(start)) / float(step))), torch.int64)
    else:
        span = b.op("Div", b.op("Sub", _f64(b, end), _f64(b, start)), _f64(b, step))
        count = b.op("Max", b.cast(b.op("Ceil", span), torch.int64), b.const(0, torch.int64))
    index = b.op("Range", b.const(0, torch.int64), count, b.const(1, torch.int64), dtype=torch.int64)
    return b.cast(b.op("Add", _i64(b, start), b.op("Mul", index, _i64(b, step))), out)


@translation(aten.arange.start_step)
def aten_arange_start_step(b: GraphBuilder, start: Any, end: Any, step: Any = 1, *, dtype: torch.dtype | None = None,
                           layout: Any = None, device: Any = None, pin_memory: bool | None = None) -> Value:
    """arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None,
    Device? device=None, bool? pin_memory=None) -> Tensor"""
    out = b.node.out_dtype or dtype or torch.int64
    if not out.is_floating_point and any(not _is_int(x) for x in (start, end, step)):
        return _arange_integral(b, start, end, step, out)
    if all(_is_int(x) for x in (start, end, step)):
        ints = [b.cast(x, torch.int64) if isinstance(x, Value) else b.const(x, torch.int64) for x in (start, end, step)]
        return b.cast(b.op("Range", *ints, dtype=torch.int64), out)
    # NOTE: PyTorch computes element i as start + i * step in double and casts; ONNX Range adds step
    # repeatedly in the output dtype, which drifts for float32. Count in int64, scale in double.
    if not any(isinstance(x, Value) for x in (start, end, step)):
        count: Value = b.const(max(0, math.ceil((float(end) - float(start)) / float(step))), torch.int64)
    else:
        span = b.op("Div", b.op("Sub", _f64(b, end), _f64(b, start)), _f64(b, step))
        count = b.op("Max", b.cast(b.op("Ceil", span), torch.int64), b.const(0, torch.int64))
    index = b.op("Range", b.const(0, torch.int64), count, b.const(1, torch.int64), dtype=torch.int64)
    values = b.op("Add", _f64(b, start), b.op("Mul", b.cast(index, torch.float64), _f64(b, step)))
    return b.cast(values, out)


@translation(aten.arange.start)
def aten_arange_start(b: GraphBuilder, start: Any, end: Any, *, dtype: torch.dtype | None = None, layout: Any = None,
                      device: Any = None, pin_memory: bool | None = None) -> Value:
    """arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, Layout? layout=None,
    Device? device=None, bool? pin_memory=None) -> Tensor"""
    return aten_arange_start_step(b, start, end, 1, dtype=dtype)


@translation(aten.arange.default)
def aten_arange(b: GraphBuilder, end: Any, *, dtype: torch.dtype | None = None, layout: Any = None,
                device: Any = None, pin_memory: bool | None = None) -> Value:
    """arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None) -> Tensor"""
    return aten_arange_start_step(b, 0, end, 1, dtype=dtype)


@translation(aten.repeat_interleave.Tensor)
def aten_repeat_interleave(b: GraphBuilder, repeats: Value, *, output_size: int | None = None) -> Value:
    """repeat_interleave.Tensor(Tensor repeats, *, SymInt? output_size=None) -> Tensor

    Element i repeated repeats[i] times: output position p holds #{i : cumsum(repeats)[i] <= p}.
    """
    counts = b.cast(repeats, torch.int64)
    ends = b.op("CumSum", counts, b.const(0, torch.int64))
    total = b.op("ReduceSum", counts, b.const([0], torch.int64), keepdims=0)
    positions = b.op("Range", b.const(0, torch.int64), total, b.const(1, torch.int64), dtype=torch.int64)
    passed = b.op("LessOrEqual", b.op("Unsqueeze", ends, b.const([0], torch.int64)), b.op("Unsqueeze", positions, b.const([1], torch.int64)),
                  dtype=torch.bool)
    return b.op("ReduceSum", b.cast(passed, torch.int64), b.const([1], torch.int64), keepdims=0)


# -- random: same distributions as PyTorch, never the same numbers --------------------------------
@translation(aten.rand.default)
def aten_rand(b: GraphBuilder, size: Sequence[int | Value], *, dtype: torch.dtype | None = None, layout: Any = None,
              device: Any = None, pin_memory: bool | None = None) -> Value:
    """rand(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None) -> Tensor"""
    dtype = _dtype(b, dtype)
    return random_like(b, "RandomUniformLike", _full(b, b.int_list(size), 0, dtype), dtype)


@translation(aten.randn.default)
def aten_randn(b: GraphBuilder, size: Sequence[int | Value], *, dtype: torch.dtype | None = None, layout: Any = None,
               device: Any = None, pin_memory: bool | None = None) -> Value:
    """randn(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None) -> Tensor"""
    dtype = _dtype(b, dtype)
    return random_like(b, "RandomNormalLike", _full(b, b.int_list(size), 0, dtype), dtype)


@translation(aten.normal.Tensor_Tensor, aten.normal.Tensor_float, aten.normal.float_Tensor)
def aten_normal(b: GraphBuilder, mean: Value | float, std: Value | float = 1.0, *, generator: Any = None) -> Value:
    """normal.Tensor_Tensor(Tensor mean, Tensor std, *, Generator? generator=None) -> Tensor
    (also normal.Tensor_float and normal.float_Tensor: one of them a Python float)

    Each element drawn from N(mean_i, std_i), the parameters broadcast: mean + std * N(0, 1).
    """
    dtype = b.node.out_dtype or torch.get_default_dtype()
    mean_value, std_value = (b.cast(v, dtype) if isinstance(v, Value) else b.scalar(float(v), dtype)
                             for v in (mean, std))
    shaped = b.op("Add", mean_value, std_value, dtype=dtype, shape=b.node.out_shape)   # the broadcast shape
    standard = random_like(b, "RandomNormalLike", shaped, dtype)
    return b.op("Add", mean_value, b.op("Mul", std_value, standard), dtype=dtype, shape=b.node.out_shape)


@translation(aten.rand_like.default)
def aten_rand_like(b: GraphBuilder, self: Value, *, dtype: torch.dtype | None = None, layout: Any = None,
                   device: Any = None, pin_memory: bool | None = None, memory_format: Any = None) -> Value:
    """rand_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return random_like(b, "RandomUniformLike", self, _dtype(b, dtype, self))


@translation(aten.randn_like.default)
def aten_randn_like(b: GraphBuilder, self: Value, *, dtype: torch.dtype | None = None, layout: Any = None,
                    device: Any = None, pin_memory: bool | None = None, memory_format: Any = None) -> Value:
    """randn_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return random_like(b, "RandomNormalLike", self, _dtype(b, dtype, self))


@translation(aten.randint.low)
def aten_randint_low(b: GraphBuilder, low: int, high: int, size: Sequence[int | Value], *,
                     dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
                     pin_memory: bool | None = None) -> Value:
    """randint.low(SymInt low, SymInt high, SymInt[] size, *, ScalarType? dtype=long, Layout? layout=None,
    Device? device=None, bool? pin_memory=None) -> Tensor"""
    zeros = _full(b, b.int_list(size), 0, torch.float64)
    uniform = random_like(b, "RandomUniformLike", zeros, torch.float64, low=float(low), high=float(high))
    return b.cast(b.op("Floor", uniform), _dtype(b, dtype or torch.int64))


@translation(aten.randint.default)
def aten_randint(b: GraphBuilder, high: int, size: Sequence[int | Value], *, dtype: torch.dtype | None = None,
                 layout: Any = None, device: Any = None, pin_memory: bool | None = None) -> Value:
    """randint(SymInt high, SymInt[] size, *, ScalarType? dtype=long, Layout? layout=None, Device? device=None,
    bool? pin_memory=None) -> Tensor"""
    return aten_randint_low(b, 0, high, size, dtype=dtype)


@translation(aten.randint_like.low_dtype)
def aten_randint_like_low_dtype(b: GraphBuilder, self: Value, low: int | Value, high: int | Value, *,
                                dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
                                pin_memory: bool | None = None, memory_format: Any = None) -> Value:
    """randint_like.low_dtype(Tensor self, SymInt low, SymInt high, *, ScalarType? dtype=None,
    Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None)
    -> Tensor

    Integers drawn uniformly from [low, high) in ``self``'s shape, of ``self``'s dtype unless given.
    """
    if not isinstance(low, int) or not isinstance(high, int):
        raise UnsupportedVariant("low/high", "a symbolic bound", "Python ints")
    zeros = _full(b, b.shape_of(self), 0, torch.float64)
    uniform = random_like(b, "RandomUniformLike", zeros, torch.float64, low=float(low), high=float(high))
    return b.cast(b.op("Floor", uniform), _dtype(b, dtype, self))


@translation(aten.randint_like.default)
def aten_randint_like(b: GraphBuilder, self: Value, high: int | Value, *, dtype: torch.dtype | None = None,
                      layout: Any = None, device: Any = None, pin_memory: bool | None = None,
                      memory_format: Any = None) -> Value:
    """randint_like(Tensor self, SymInt high, *, ScalarType? dtype=None, Layout? layout=None,
    Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return aten_randint_like_low_dtype(b, self, 0, high, dtype=dtype)


@translation(aten.normal_functional.default)
def aten_normal_functional(b: GraphBuilder, self: Value, mean: float = 0.0, std: float = 1.0, *,
                           generator: Any = None) -> Value:
    """normal_functional(Tensor self, float mean=0., float std=1., *, Generator? generator=None) -> Tensor

    ``self``'s shape and dtype filled from N(mean, std): the functional form of ``normal_``
    (``torch.nn.init.normal_``).
    """
    return random_like(b, "RandomNormalLike", self, _dtype(b, None, self), mean=float(mean), scale=float(std))


@translation(aten.randperm.default)
def aten_randperm(b: GraphBuilder, n: int | Value, *, dtype: torch.dtype | None = None, layout: Any = None,
                  device: Any = None, pin_memory: bool | None = None) -> Value:
    """randperm(SymInt n, *, ScalarType? dtype=long, Layout? layout=None, Device? device=None,
    bool? pin_memory=None) -> Tensor"""
    count = b.int_list([n])
    keys = random_like(b, "RandomUniformLike", _full(b, count, 0, torch.float32), torch.float32)
    _, order = b.op("TopK", keys, count, outputs=2)
    return b.cast(b.op("Identity", order, dtype=torch.int64), _dtype(b, dtype or torch.int64))


@translation(aten.multinomial.default)
def aten_multinomial(b: GraphBuilder, self: Value, num_samples: int, replacement: bool = False, *,
                     generator: Any = None) -> Value:
    """multinomial(Tensor self, int num_samples, bool replacement=False, *, Generator? generator=None) -> Tensor

    With replacement (or one draw) ONNX's Multinomial over the weights' logarithms; without, the top
    ``num_samples`` of the logarithms plus Gumbel noise, which draws categories one after the other
    without putting them back, with the same probabilities as PyTorch's sampling.
    """
    i64, dtype = torch.int64, torch.float32  # ONNX Runtime's Multinomial takes float32 only
    rows = self if self.rank == 2 else b.op("Unsqueeze", self, b.const([0], i64), shape=(1, *(self.shape or ())))
    logits = b.op("Log", b.cast(rows, dtype), dtype=dtype, shape=rows.shape)
    if replacement or num_samples == 1:
        out = b.op("Multinomial", logits, sample_size=num_samples, dtype=i64)
        b.nodes[-1].attribute.append(helper.make_attribute("dtype", _dtypes.to_onnx(i64)))  # as random_like
    else:
        uniform = random_like(b, "RandomUniformLike", logits, dtype, low=float(torch.finfo(dtype).tiny), high=1.0)
        gumbel = b.op("Neg", b.op("Log", b.op("Neg", b.op("Log", uniform))))
        _, out = b.op("TopK", b.op("Add", logits, gumbel), b.const([num_samples], i64), axis=-1, outputs=2)
        out = b.op("Identity", out, dtype=i64)
    if self.rank != 2:
        out = b.op("Squeeze", out, b.const([0], i64), dtype=i64)
    return out
