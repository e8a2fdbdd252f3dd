"""Pooling: max/avg pooling with their ATen options, adaptive average and max pooling."""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np
import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.ops._nn_common import add_batch, drop_batch, expand_ints, reduce, unbatched

aten = torch.ops.aten


def _plane_indices(b: GraphBuilder, x: Value, flat: Value, spatial: int) -> Value:
    """ONNX MaxPool's indices count over the whole tensor; torch's within each (n, c) plane."""
    dims = x.shape[-spatial:] if x.shape is not None else ()
    if len(dims) == spatial and all(isinstance(d, int) for d in dims):
        plane = b.const(math.prod(dims), torch.int64)
    else:
        plane = reduce(b, "ReduceProd", b.shape_of(x, start=-spatial), [0], keepdims=False)
    return b.op("Mod", flat, plane, dtype=torch.int64)


def _max_pool(b: GraphBuilder, x: Value, spatial: int, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool,
              with_indices: bool = True) -> tuple[Value, Value | None]:
    batchless = unbatched(x, spatial)
    if batchless:
        x = add_batch(b, x)
    kernel = expand_ints(kernel, spatial)
    pads = expand_ints(padding, spatial)
    attrs = dict(kernel_shape=kernel, strides=expand_ints(stride, spatial, default=kernel), pads=pads + pads,
                 dilations=expand_ints(dilation, spatial), ceil_mode=int(ceil_mode))
    indices = None
    dtype = x.dtype
    if dtype == torch.bfloat16:  # MaxPool takes no bfloat16; float32 holds every bfloat16 exactly
        x = b.cast(x, torch.float32)
    if with_indices and b.node.output_used(1):
        values, flat = b.op("MaxPool", x, outputs=2, **attrs)
        flat.dtype = torch.int64
        indices = _plane_indices(b, x, flat, spatial)
    else:
        values = b.op("MaxPool", x, **attrs)
    values = b.cast(values, dtype)
    if batchless:
        values = drop_batch(b, values)
        indices = None if indices is None else drop_batch(b, indices)
    return values, indices


@translation(aten.max_pool2d_with_indices.default)
def aten_max_pool2d_with_indices(b: GraphBuilder, self: Value, kernel_size: Sequence[int],
                                 stride: Sequence[int] = (), padding: Sequence[int] = (0,),
                                 dilation: Sequence[int] = (1,), ceil_mode: bool = False
                                 ) -> tuple[Value, Value | None]:
    """max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0,
    int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"""
    return _max_pool(b, self, 2, kernel_size, stride, padding, dilation, ceil_mode)


@translation(aten.max_pool3d_with_indices.default)
def aten_max_pool3d_with_indices(b: GraphBuilder, self: Value, kernel_size: Sequence[int],
                                 stride: Sequence[int] = (), padding: Sequence[int] = (0,),
                                 dilation: Sequence[int] = (1,), ceil_mode: bool = False
                                 ) -> tuple[Value, Value | None]:
    """max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0,
    int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"""
    return _max_pool(b, self, 3, kernel_size, stride, padding, dilation, ceil_mode)


def _torch_windows(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> list[tuple[int, int, int]]:
    """torch's pooling windows on one axis: (count inside the input, count with padding, start)."""
    out = (size + 2 * pad - kernel + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1  # the last window must start inside the input or the left padding
    windows = []
    for o in range(out):
        start = o * stride - pad
        end = min(start + kernel, size + pad)
        windows.append((min(end, size) - max(start, 0), end - start, start))
    return windows


def _avg_pool_exact(b: GraphBuilder, x: Value, dims: Sequence[int], kernel: list[int], strides: list[int],
                    pads: list[int], ceil_mode: bool, count_include_pad: bool,
                    divisor_override: int | None) -> Value:
    """AveragePool over the real elements, rescaled to torch's divisor (static spatial sizes).

    # NOTE: torch's divisor differs from ONNX's where a ceil_mode window overhangs
    # the padded input (it is cut at the padding) and with divisor_override. The
    # mean over the input elements alone (count_include_pad=0) times a constant
    # (real count / torch's divisor) per output position reproduces it; the right
    # pads are set so the window count is torch's without ONNX's ceil_mode.
    """
    per_axis = [_torch_windows(d, k, s, p, ceil_mode) for d, k, s, p in zip(dims, kernel, strides, pads)]
    ends = [(len(w) - 1) * s + k - d - p for w, s, k, d, p in zip(per_axis, strides, kernel, dims, pads)]
    out = b.op("AveragePool", x, kernel_shape=kernel, strides=strides, pads=pads + [max(e, 0) for e in ends],
               count_include_pad=0)
    real = np.ones([len(w) for w in per_axis])
    padded = np.ones_like(real)
    for axis, windows in enumerate(per_axis):
        view = [1] * len(per_axis)
        view[axis] = len(windows)
        real = real * np.array([w[0] for w in windows], dtype=np.float64).reshape(view)
        padded = padded * np.array([w[1] for w in windows], dtype=np.float64).reshape(view)
    divisor = np.full_like(real, divisor_override) if divisor_override else padded if count_include_pad else real
    factor = real / divisor
    if np.allclose(factor, 1.0):
        return out
    return b.op("Mul", out, b.const(torch.from_numpy(factor), x.dtype))


def _avg_pool(b: GraphBuilder, x: Value, spatial: int, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int], ceil_mode: bool, count_include_pad: bool,
              divisor_override: int | None) -> Value:
    batchless = unbatched(x, spatial)
    if batchless:
        x = add_batch(b, x)
    kernel = expand_ints(kernel, spatial)
    strides = expand_ints(stride, spatial, default=kernel)
    pads = expand_ints(padding, spatial)
    dims = list(x.shape[-spatial:]) if x.shape is not None else []
    static = len(dims) == spatial and all(isinstance(d, int) for d in dims)
    if (ceil_mode or divisor_override) and static:
        out = _avg_pool_exact(b, x, dims, kernel, strides, pads, ceil_mode, count_include_pad, divisor_override)
    elif divisor_override:
        raise UnsupportedVariant("divisor_override", divisor_override, f"None with symbolic spatial sizes {x.shape}")
    else:
        # Without ceil_mode every window lies inside the padded input, so ONNX's divisor is torch's.
        out = b.op("AveragePool", x, kernel_shape=kernel, strides=strides, pads=pads + pads,
                   ceil_mode=int(ceil_mode), count_include_pad=int(count_include_pad))
    return drop_batch(b, out) if batchless else out


@translation(aten.avg_pool2d.default)
def aten_avg_pool2d(b: GraphBuilder, self: Value, kernel_size: Sequence[int], stride: Sequence[int] = (),
                    padding: Sequence[int] = (0,), ceil_mode: bool = False, count_include_pad: bool = True,
                    divisor_override: int | None = None) -> Value:
    """avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False,
    bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    return _avg_pool(b, self, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@translation(aten.avg_pool3d.default)
def aten_avg_pool3d(b: GraphBuilder, self: Value, kernel_size: Sequence[int], stride: Sequence[int] = (),
                    padding: Sequence[int] = (0,), ceil_mode: bool = False, count_include_pad: bool = True,
                    divisor_override: int | None = None) -> Value:
    """avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False,
    bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    return _avg_pool(b, self, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


# -- adaptive pooling ----------------------------------------------------------------------------------
def _static_spatial(x: Value, spatial: int) -> list[int] | None:
    """The spatial sizes when all are static ints, else None (symbolic sizes: windows built in the graph)."""
    dims = list(x.shape[-spatial:]) if x.shape is not None else []
    return dims if len(dims) == spatial and all(isinstance(d, int) for d in dims) else None


def _fixed_output(output_size: Sequence[int], spatial: int) -> list[int]:
    out = expand_ints(output_size, spatial)
    if not all(isinstance(o, int) for o in out):
        raise UnsupportedVariant("output_size", list(output_size), "fixed ints (an output size that follows the "
                                 "input's symbolic size has no fixed window table)")
    return out


def _symbolic_windows(b: GraphBuilder, x: Value, axis: int, size_out: int) -> tuple[Value, Value, Value]:
    """(size, start, end) on ``axis`` of ``x`` at run time: torch's adaptive windows for any input size.

    start[o] = floor(o * size / out), end[o] = ceil((o + 1) * size / out), as int64 [out] tensors
    (ONNX integer Div truncates, which is floor for these non-negative operands).
    """
    size = b.shape_of(x, start=axis, end=axis + 1)
    cells = b.const(list(range(size_out)), torch.int64)
    out = b.const([size_out], torch.int64)
    start = b.op("Div", b.op("Mul", cells, size), out)
    end = b.op("Div", b.op("Add", b.op("Mul", b.op("Add", cells, b.const([1], torch.int64)), size),
                           b.const([size_out - 1], torch.int64)), out)
    return size, start, end


def _symbolic_averaging_matrix(b: GraphBuilder, x: Value, axis: int, size_out: int) -> Value:
    """The (in, out) averaging matrix of :func:`_averaging_matrix`, computed in the graph for a symbolic size."""
    size, start, end = _symbolic_windows(b, x, axis, size_out)
    positions = b.op("Unsqueeze", b.op("Range", b.scalar(0, torch.int64), b.op("Squeeze", size),
                                       b.scalar(1, torch.int64), dtype=torch.int64), b.const([1], torch.int64))
    inside = b.op("And", b.op("GreaterOrEqual", positions, start, dtype=torch.bool),
                  b.op("Less", positions, end, dtype=torch.bool), dtype=torch.bool)
    return b.op("Div", b.cast(inside, x.dtype), b.cast(b.op("Sub", end, start), x.dtype))


def _averaging_matrix(size_in: int, size_out: int) -> np.ndarray:
    """(in, out) matrix whose column o averages torch's adaptive window o: [floor(o*in/out), ceil((o+1)*in/out))."""
    matrix = np.zeros((size_in, size_out), dtype=np.float64)
    for o in range(size_out):
        start, end = (o * size_in) // size_out, -((-(o + 1) * size_in) // size_out)
        matrix[start:end, o] = 1.0 / (end - start)
    return matrix


def _adaptive_avg(b: GraphBuilder, x: Value, output_size: Sequence[int], spatial: int, op: str) -> Value:
    out = _fixed_output(output_size, spatial)
    if all(o == 1 for o in out):
        if unbatched(x, spatial):
            return drop_batch(b, b.op("GlobalAveragePool", add_batch(b, x)))
        return b.op("GlobalAveragePool", x)
    dims = _static_spatial(x, spatial)
    if dims is not None and all(d % o == 0 for d, o in zip(dims, out)):
        kernel = [d // o for d, o in zip(dims, out)]
        return _avg_pool(b, x, spatial, kernel, kernel, [0], False, True, None)
    # NOTE: windows overlap or differ in size when the input is not a multiple of the
    # output; the average over a box is separable, so one (in, out) averaging matrix
    # per spatial axis, applied with MatMul, reproduces torch exactly. With symbolic
    # sizes the matrix is computed in the graph from the run-time size (same windows).
    rank = b.rank_of(x)
    for offset, size_out in enumerate(out):
        axis = rank - spatial + offset
        if dims is None:
            matrix = _symbolic_averaging_matrix(b, x, axis, size_out)
        else:
            matrix = b.const(torch.from_numpy(_averaging_matrix(dims[offset], size_out)), x.dtype)
        if axis == rank - 1:
            x = b.op("MatMul", x, matrix)
        else:
            perm = list(range(rank))
            perm[axis], perm[-1] = perm[-1], perm[axis]
            x = b.op("Transpose", b.op("MatMul", b.op("Transpose", x, perm=perm), matrix), perm=perm)
    return x


@translation(aten._adaptive_avg_pool2d.default)
def aten_adaptive_avg_pool2d(b: GraphBuilder, self: Value, output_size: Sequence[int]) -> Value:
    """_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor"""
    return _adaptive_avg(b, self, output_size, 2, "adaptive_avg_pool2d")


@translation(aten._adaptive_avg_pool3d.default)
def aten_adaptive_avg_pool3d(b: GraphBuilder, self: Value, output_size: Sequence[int]) -> Value:
    """_adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor"""
    return _adaptive_avg(b, self, output_size, 3, "adaptive_avg_pool3d")


def _adaptive_windows(dims: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """(P, K) table: for each output cell, the flat in-plane positions of torch's adaptive window.

    Windows are [floor(o*in/out), ceil((o+1)*in/out)) per axis; shorter ones are
    padded by repeating their last position, which changes neither max nor argmax.
    """
    axes = []
    for size_in, size_out in zip(dims, out):
        axes.append([range((o * size_in) // size_out, -((-(o + 1) * size_in) // size_out)) for o in range(size_out)])
    strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
    cells = []
    for combo in np.ndindex(*out):
        boxes = [axes[a][o] for a, o in enumerate(combo)]
        cells.append([sum(p * st for p, st in zip(point, strides)) for point in itertools.product(*boxes)])
    width = max(len(c) for c in cells)
    return np.array([c + [c[-1]] * (width - len(c)) for c in cells], dtype=np.int64)


def _adaptive_max(b: GraphBuilder, x: Value, output_size: Sequence[int], spatial: int,
                  op: str) -> tuple[Value, Value | None]:
    out = _fixed_output(output_size, spatial)
    dims = _static_spatial(x, spatial)
    if dims is None:
        return _adaptive_max_symbolic(b, x, out, spatial), None
    if all(d % o == 0 for d, o in zip(dims, out)):
        kernel = [d // o for d, o in zip(dims, out)]
        return _max_pool(b, x, spatial, kernel, kernel, [0], [1], False)
    # NOTE: windows of varying size (input not a multiple of the output) have no
    # MaxPool form: gather every window's elements from the flattened plane into a
    # (..., P, K) tensor and reduce over K.
    table = _adaptive_windows(dims, out)
    flat = b.op("Reshape", x, b.op("Concat", b.shape_of(x, end=-spatial), b.const([-1], torch.int64), axis=0,
                                   dtype=torch.int64))
    gathered = b.op("Gather", flat, b.const(torch.from_numpy(table)), axis=-1)
    out_shape = b.op("Concat", b.shape_of(x, end=-spatial), b.const(out, torch.int64), axis=0, dtype=torch.int64)
    values = b.op("Reshape", reduce(b, "ReduceMax", gathered, [-1], keepdims=False), out_shape)
    if not b.node.output_used(1):
        return values, None
    best = b.op("ArgMax", gathered, axis=-1, keepdims=0, dtype=torch.int64)
    rows = b.const(torch.arange(table.shape[0]) * table.shape[1], torch.int64)
    positions = b.op("Gather", b.const(torch.from_numpy(table.reshape(-1))), b.op("Add", best, rows), axis=0)
    return values, b.op("Reshape", positions, out_shape, dtype=torch.int64)


def _adaptive_max_symbolic(b: GraphBuilder, x: Value, out: Sequence[int], spatial: int) -> Value:
    """Adaptive max pooling on symbolic spatial sizes, one axis at a time.

    # NOTE: a window is a box (a product of one interval per axis), so its max is
    # the max over each axis in turn. Per axis, an (out, K) index table, K the
    # longest window at run time, lists each window's positions (short windows
    # repeat their last one, which changes no max); Gather + ReduceMax over K.
    # The indices (return_indices=True) are not separable this way: refused.
    """
    if b.node.output_used(1):
        raise UnsupportedVariant("return_indices", True, f"False with symbolic spatial sizes {x.shape}")
    rank = b.rank_of(x)
    for offset, size_out in enumerate(out):
        axis = rank - spatial + offset
        _, start, end = _symbolic_windows(b, x, axis, size_out)
        width = reduce(b, "ReduceMax", b.op("Sub", end, start), [0], keepdims=False)
        steps = b.op("Unsqueeze", b.op("Range", b.scalar(0, torch.int64), width, b.scalar(1, torch.int64),
                                       dtype=torch.int64), b.const([0], torch.int64))
        last = b.op("Unsqueeze", b.op("Sub", end, b.const([1], torch.int64)), b.const([1], torch.int64))
        table = b.op("Min", b.op("Add", b.op("Unsqueeze", start, b.const([1], torch.int64)), steps), last)
        gathered = b.op("Gather", x, table, axis=axis)
        x = reduce(b, "ReduceMax", gathered, [axis + 1], keepdims=False)
    return x


@translation(aten.adaptive_max_pool2d.default)
def aten_adaptive_max_pool2d(b: GraphBuilder, self: Value, output_size: Sequence[int]
                             ) -> tuple[Value, Value | None]:
    """adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)"""
    return _adaptive_max(b, self, output_size, 2, "adaptive_max_pool2d")


@translation(aten.adaptive_max_pool3d.default)
def aten_adaptive_max_pool3d(b: GraphBuilder, self: Value, output_size: Sequence[int]
                             ) -> tuple[Value, Value | None]:
    """adaptive_max_pool3d(Tensor self, int[3] output_size) -> (Tensor, Tensor)"""
    return _adaptive_max(b, self, output_size, 3, "adaptive_max_pool3d")


def _max_pool_backward(b: GraphBuilder, grad_output: Value, self: Value, indices: Value, spatial: int) -> Value:
    """Each output's gradient added at its max's position: ``indices`` are flat over a plane's
    ``spatial`` dims (as max_pool*_with_indices returns them), so one ScatterElements(add) over the
    flattened planes; an input that is the max of several windows gets the sum of their gradients."""
    # ONNX Runtime's ScatterElements(add) takes float32/float64 only: half types are summed in float32.
    dtype = grad_output.dtype if grad_output.dtype in (torch.float32, torch.float64) else torch.float32
    flat = b.const([0] * (b.rank_of(self) - spatial) + [-1], torch.int64)
    planes = b.op("Reshape", self, flat, dtype=self.dtype)
    zeros = b.op("Expand", b.scalar(0.0, dtype), b.shape_of(planes), dtype=dtype)
    updates = b.op("Reshape", b.cast(grad_output, dtype), flat, dtype=dtype)
    where = b.op("Reshape", b.cast(indices, torch.int64), flat, dtype=torch.int64)
    summed = b.op("ScatterElements", zeros, where, updates, axis=-1, reduction="add", dtype=dtype)
    summed = b.cast(summed, grad_output.dtype)
    return b.op("Reshape", summed, b.shape_of(self), dtype=summed.dtype, shape=self.shape)


@translation(aten.max_pool2d_with_indices_backward.default, since=16)
def aten_max_pool2d_with_indices_backward(b: GraphBuilder, grad_output: Value, self: Value,
                                          kernel_size: Sequence[int], stride: Sequence[int],
                                          padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool,
                                          indices: Value) -> Value:
    """max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride,
    int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor

    The window arguments are already in ``indices``; only the scatter of the gradients is left.
    """
    return _max_pool_backward(b, grad_output, self, indices, 2)


@translation(aten.max_pool3d_with_indices_backward.default, since=16)
def aten_max_pool3d_with_indices_backward(b: GraphBuilder, grad_output: Value, self: Value,
                                          kernel_size: Sequence[int], stride: Sequence[int],
                                          padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool,
                                          indices: Value) -> Value:
    """max_pool3d_with_indices_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride,
    int[3] padding, int[3] dilation, bool ceil_mode, Tensor indices) -> Tensor"""
    return _max_pool_backward(b, grad_output, self, indices, 3)
