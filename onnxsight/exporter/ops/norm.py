"""Normalisation: layer, group, batch (inference and batch statistics), instance and RMS norm."""

from __future__ import annotations

from typing import Sequence

import torch

from onnxsight.exporter import _dtypes
from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation
from onnxsight.exporter.ops._nn_common import channel_param, filled, reduce, to_channel_axis

aten = torch.ops.aten


def _param_or_fill(b: GraphBuilder, param: Value | None, fill: float, x: Value,
                   shape: Sequence[int | Value]) -> Value:
    """``param``, or a tensor of ``shape`` filled with ``fill`` (ONNX's norm ops need scale and bias)."""
    if param is not None:
        return param
    if all(isinstance(d, int) for d in shape):
        return b.const(torch.full(tuple(shape), fill), x.dtype)
    return filled(b, fill, x, b.int_list(list(shape)))


def _stat_dtype(b: GraphBuilder, index: int, default: torch.dtype | None) -> torch.dtype | None:
    dtypes = b.node.out_dtypes
    return dtypes[index] if index < len(dtypes) and dtypes[index] is not None else default


# -- layer norm ------------------------------------------------------------------------------------------
@translation(aten.layer_norm.default)
def aten_layer_norm(b: GraphBuilder, input: Value, normalized_shape: Sequence[int], weight: Value | None = None,
                    bias: Value | None = None, eps: float = 1e-05, cudnn_enable: bool = True) -> Value:
    """layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None,
    float eps=1e-05, bool cudnn_enable=True) -> Tensor"""
    scale = _param_or_fill(b, weight, 1.0, input, normalized_shape)
    return b.op("LayerNormalization", input, scale, bias, axis=-len(normalized_shape), epsilon=float(eps))


@translation(aten.native_layer_norm.default)
def aten_native_layer_norm(b: GraphBuilder, input: Value, normalized_shape: Sequence[int], weight: Value | None,
                           bias: Value | None, eps: float) -> tuple[Value, Value | None, Value | None]:
    """native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps)
    -> (Tensor, Tensor, Tensor)"""
    scale = _param_or_fill(b, weight, 1.0, input, normalized_shape)
    attrs = dict(axis=-len(normalized_shape), epsilon=float(eps))
    if not (b.node.output_used(1) or b.node.output_used(2)):
        return b.op("LayerNormalization", input, scale, bias, **attrs), None, None
    out, mean, rstd = b.op("LayerNormalization", input, scale, bias, outputs=3, **attrs)
    mean.dtype = rstd.dtype = torch.float32  # stash_type
    return out, b.cast(mean, _stat_dtype(b, 1, input.dtype)), b.cast(rstd, _stat_dtype(b, 2, input.dtype))


# -- group norm ------------------------------------------------------------------------------------------
def _group_stats(b: GraphBuilder, x: Value, groups: int, eps: float) -> tuple[Value, Value]:
    """torch's (N, G) mean and reciprocal standard deviation of each group."""
    grouped = b.op("Reshape", x, b.const([0, groups, -1], torch.int64))
    mean = reduce(b, "ReduceMean", grouped, [2])
    centred = b.op("Sub", grouped, mean)
    var = reduce(b, "ReduceMean", b.op("Mul", centred, centred), [2], keepdims=False)
    rstd = b.op("Reciprocal", b.op("Sqrt", b.op("Add", var, b.scalar(float(eps), var))))
    return b.op("Squeeze", mean, b.const([2], torch.int64)), rstd


def _group_norm_formula(b: GraphBuilder, x: Value, groups: int, weight: Value | None, bias: Value | None,
                        eps: float) -> Value:
    """InstanceNormalization over (N, G, -1), then the per-channel affine transform."""
    grouped = b.op("Reshape", x, b.const([0, groups, -1], torch.int64))
    ones = b.const(torch.ones(groups), x.dtype)
    zeros = b.const(torch.zeros(groups), x.dtype)
    normed = b.op("InstanceNormalization", grouped, ones, zeros, epsilon=float(eps))
    out = b.op("Reshape", normed, b.shape_of(x))
    rank = b.rank_of(x)
    if weight is not None:
        out = b.op("Mul", out, to_channel_axis(b, weight, rank))
    if bias is not None:
        out = b.op("Add", out, to_channel_axis(b, bias, rank))
    return out


def _group_norm_21(b: GraphBuilder, x: Value, groups: int, weight: Value | None, bias: Value | None,
                   eps: float) -> Value:
    scale = channel_param(b, weight, 1.0, x)
    shift = channel_param(b, bias, 0.0, x)
    return b.op("GroupNormalization", x, scale, shift, num_groups=int(groups), epsilon=float(eps))


@translation(aten.group_norm.default, until=20)
def aten_group_norm(b: GraphBuilder, input: Value, num_groups: int, weight: Value | None = None,
                    bias: Value | None = None, eps: float = 1e-05, cudnn_enabled: bool = True) -> Value:
    """group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1e-05,
    bool cudnn_enabled=True) -> Tensor"""
    return _group_norm_formula(b, input, num_groups, weight, bias, eps)


@translation(aten.group_norm.default, since=21)
def aten_group_norm_21(b: GraphBuilder, input: Value, num_groups: int, weight: Value | None = None,
                       bias: Value | None = None, eps: float = 1e-05, cudnn_enabled: bool = True) -> Value:
    """group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1e-05,
    bool cudnn_enabled=True) -> Tensor"""
    return _group_norm_21(b, input, num_groups, weight, bias, eps)


def _with_group_stats(b: GraphBuilder, out: Value, x: Value, group: int,
                      eps: float) -> tuple[Value, Value | None, Value | None]:
    if not (b.node.output_used(1) or b.node.output_used(2)):
        return out, None, None
    mean, rstd = _group_stats(b, x, group, eps)
    return out, mean, rstd


@translation(aten.native_group_norm.default, until=20)
def aten_native_group_norm(b: GraphBuilder, input: Value, weight: Value | None, bias: Value | None, N: int,
                           C: int, HxW: int, group: int, eps: float) -> tuple[Value, Value | None, Value | None]:
    """native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW,
    int group, float eps) -> (Tensor, Tensor, Tensor)"""
    return _with_group_stats(b, _group_norm_formula(b, input, group, weight, bias, eps), input, group, eps)


@translation(aten.native_group_norm.default, since=21)
def aten_native_group_norm_21(b: GraphBuilder, input: Value, weight: Value | None, bias: Value | None, N: int,
                              C: int, HxW: int, group: int, eps: float
                              ) -> tuple[Value, Value | None, Value | None]:
    """native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW,
    int group, float eps) -> (Tensor, Tensor, Tensor)"""
    return _with_group_stats(b, _group_norm_21(b, input, group, weight, bias, eps), input, group, eps)


# -- batch norm ------------------------------------------------------------------------------------------
def _batch_norm_inference(b: GraphBuilder, x: Value, weight: Value | None, bias: Value | None,
                          running_mean: Value, running_var: Value, eps: float) -> Value:
    scale = channel_param(b, weight, 1.0, x)
    shift = channel_param(b, bias, 0.0, x)
    return b.op("BatchNormalization", x, scale, shift, running_mean, running_var, epsilon=float(eps))


def _batch_stats_norm(b: GraphBuilder, x: Value, weight: Value | None, bias: Value | None,
                      eps: float) -> tuple[Value, Value, Value, Value]:
    """Normalise with the batch's own statistics: (out, mean (C,), invstd (C,), biased var (C,))."""
    rank = b.rank_of(x)
    axes = [0] + list(range(2, rank))
    mean = reduce(b, "ReduceMean", x, axes)
    centred = b.op("Sub", x, mean)
    var = reduce(b, "ReduceMean", b.op("Mul", centred, centred), axes)
    invstd = b.op("Reciprocal", b.op("Sqrt", b.op("Add", var, b.scalar(float(eps), var))))
    out = b.op("Mul", centred, invstd)
    if weight is not None:
        out = b.op("Mul", out, to_channel_axis(b, weight, rank))
    if bias is not None:
        out = b.op("Add", out, to_channel_axis(b, bias, rank))
    squeeze = b.const(axes, torch.int64)
    return (out, b.op("Squeeze", mean, squeeze), b.op("Squeeze", invstd, squeeze), b.op("Squeeze", var, squeeze))


def _updated_running(b: GraphBuilder, running: Value, batch: Value, momentum: float) -> Value:
    """(1 - momentum) * running + momentum * batch, as torch updates its running statistics."""
    kept = b.op("Mul", running, b.scalar(1.0 - momentum, running))
    return b.op("Add", kept, b.op("Mul", b.cast(batch, running.dtype), b.scalar(momentum, running)))


def _unbiased(b: GraphBuilder, x: Value, var: Value) -> Value:
    """var * n / (n - 1) with n the number of elements per channel."""
    total = b.cast(reduce(b, "ReduceProd", b.shape_of(x), [0], keepdims=False), var.dtype)
    channels = b.cast(b.op("Shape", x, start=1, end=2, dtype=torch.int64), var.dtype)
    n = b.op("Div", total, channels)
    return b.op("Mul", var, b.op("Div", n, b.op("Sub", n, b.scalar(1.0, var))))


def _empty(b: GraphBuilder, x: Value) -> Value:
    return b.const(torch.zeros(0), x.dtype)


@translation(aten._native_batch_norm_legit_no_training.default)
def aten_batch_norm_no_training(b: GraphBuilder, input: Value, weight: Value | None, bias: Value | None,
                                running_mean: Value, running_var: Value, momentum: float, eps: float
                                ) -> tuple[Value, Value | None, Value | None]:
    """_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean,
    Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    out = _batch_norm_inference(b, input, weight, bias, running_mean, running_var, eps)
    used = b.node.output_used
    return (out, _empty(b, input) if used(1) else None, _empty(b, input) if used(2) else None)


@translation(aten._native_batch_norm_legit_functional.default)
def aten_batch_norm_functional(b: GraphBuilder, input: Value, weight: Value | None, bias: Value | None,
                               running_mean: Value, running_var: Value, training: bool, momentum: float,
                               eps: float) -> tuple[Value, ...]:
    """_native_batch_norm_legit_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean,
    Tensor running_var, bool training, float momentum, float eps)
    -> (Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)"""
    if not training:
        out = _batch_norm_inference(b, input, weight, bias, running_mean, running_var, eps)
        return out, _empty(b, input), _empty(b, input), running_mean, running_var
    out, mean, invstd, var = _batch_stats_norm(b, input, weight, bias, eps)
    new_mean = _updated_running(b, running_mean, mean, momentum) if b.node.output_used(3) else None
    new_var = _updated_running(b, running_var, _unbiased(b, input, var), momentum) if b.node.output_used(4) else None
    return out, mean, invstd, new_mean, new_var


@translation(aten._native_batch_norm_legit.default)
def aten_batch_norm_legit(b: GraphBuilder, input: Value, weight: Value | None, bias: Value | None,
                          running_mean: Value, running_var: Value, training: bool, momentum: float,
                          eps: float) -> tuple[Value, Value, Value]:
    """_native_batch_norm_legit(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean,
    Tensor(b!) running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    if not training:
        out = _batch_norm_inference(b, input, weight, bias, running_mean, running_var, eps)
        return out, _empty(b, input), _empty(b, input)
    return _batch_stats_norm(b, input, weight, bias, eps)[:3]


@translation(aten._native_batch_norm_legit.no_stats)
def aten_batch_norm_legit_no_stats(b: GraphBuilder, input: Value, weight: Value | None, bias: Value | None,
                                   training: bool, momentum: float, eps: float) -> tuple[Value, Value, Value]:
    """_native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, Tensor? bias, bool training,
    float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    return _batch_stats_norm(b, input, weight, bias, eps)[:3]


@translation(aten._batch_norm_with_update_functional.default)
def aten_batch_norm_with_update_functional(b: GraphBuilder, input: Value, weight: Value | None,
                                           bias: Value | None, running_mean: Value, running_var: Value,
                                           momentum: float, eps: float) -> tuple[Value | None, ...]:
    """_batch_norm_with_update_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean,
    Tensor running_var, float momentum, float eps)
    -> (Tensor, Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)"""
    out, mean, invstd, var = _batch_stats_norm(b, input, weight, bias, eps)
    reserve = b.const(torch.zeros(0), _stat_dtype(b, 3, torch.uint8)) if b.node.output_used(3) else None
    new_mean = _updated_running(b, running_mean, mean, momentum) if b.node.output_used(4) else None
    new_var = _updated_running(b, running_var, _unbiased(b, input, var), momentum) if b.node.output_used(5) else None
    return out, mean, invstd, reserve, new_mean, new_var


@translation(aten._batch_norm_no_update.default)
def aten_batch_norm_no_update(b: GraphBuilder, input: Value, weight: Value | None, bias: Value | None,
                              running_mean: Value | None, running_var: Value | None, momentum: float,
                              eps: float) -> tuple[Value | None, ...]:
    """_batch_norm_no_update(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean,
    Tensor? running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor)"""
    if running_mean is None or running_var is None:
        out = _batch_stats_norm(b, input, weight, bias, eps)[0]
    else:
        out = _batch_norm_inference(b, input, weight, bias, running_mean, running_var, eps)
    used = b.node.output_used
    reserve = b.const(torch.zeros(0), _stat_dtype(b, 3, torch.uint8)) if used(3) else None
    return (out, _empty(b, input) if used(1) else None, _empty(b, input) if used(2) else None, reserve)


# -- instance norm ---------------------------------------------------------------------------------------
@translation(aten.instance_norm.default)
def aten_instance_norm(b: GraphBuilder, input: Value, weight: Value | None, bias: Value | None,
                       running_mean: Value | None, running_var: Value | None, use_input_stats: bool,
                       momentum: float, eps: float, cudnn_enabled: bool) -> Value:
    """instance_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var,
    bool use_input_stats, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm without input statistics needs running_mean and running_var")
        return _batch_norm_inference(b, input, weight, bias, running_mean, running_var, eps)
    scale = channel_param(b, weight, 1.0, input)
    shift = channel_param(b, bias, 0.0, input)
    return b.op("InstanceNormalization", input, scale, shift, epsilon=float(eps))


# -- RMS norm ---------------------------------------------------------------------------------------------
def _rms_eps(input: Value, eps: float | None) -> float:
    """torch's default is the machine epsilon of the type it computes in (float32 for half types)."""
    if eps is not None:
        return float(eps)
    wide = input.dtype if input.dtype in (torch.float64,) else torch.float32
    return float(torch.finfo(wide).eps)


@translation(aten.rms_norm.default, until=22)
def aten_rms_norm(b: GraphBuilder, input: Value, normalized_shape: Sequence[int], weight: Value | None = None,
                  eps: float | None = None) -> Value:
    """rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor"""
    wide = b.cast(input, _dtypes.opmath(input.dtype))
    axes = list(range(-len(normalized_shape), 0))
    mean_square = reduce(b, "ReduceMean", b.op("Mul", wide, wide), axes)
    rms = b.op("Sqrt", b.op("Add", mean_square, b.scalar(_rms_eps(input, eps), mean_square)))
    out = b.cast(b.op("Div", wide, rms), input.dtype)
    if weight is not None:
        out = b.op("Mul", out, weight)
    return b.cast(out, b.node.out_dtype or out.dtype)


@translation(aten.rms_norm.default, since=23)
def aten_rms_norm_23(b: GraphBuilder, input: Value, normalized_shape: Sequence[int], weight: Value | None = None,
                     eps: float | None = None) -> Value:
    """rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor"""
    scale = _param_or_fill(b, weight, 1.0, input, normalized_shape)
    out = b.op("RMSNormalization", input, scale, axis=-len(normalized_shape), epsilon=_rms_eps(input, eps))
    return b.cast(out, b.node.out_dtype or out.dtype)
