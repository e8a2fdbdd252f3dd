"""FFTs (stft, torch.fft.*) through ONNX DFT, and the ops that carry their complex results.

Complex values are real tensors with a trailing (real, imaginary) dimension
of 2 (see :class:`onnxsight.exporter._builder.Value`); ``dtype``/``shape`` of
a Value stay PyTorch's, so every ``dim`` argument below is a logical dim and
the translations here add the pair dimension where ONNX needs it. The
translations registered with ``complex=True`` are the siblings used when an
input is complex; a complex value reaching any other op is a DTY001 error.

``torch.stft(x, n_fft, return_complex=True)`` decomposes to
``unfold -> mul(window) -> _fft_r2c -> permute``; ``.abs()``,
``torch.view_as_real``, ``.real``/``.imag`` (view_as_real + select) and
scaling by real numbers follow it.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation
from onnxsight.exporter.ops import _dft_basis

aten = torch.ops.aten

_NORM_NONE, _NORM_SQRT, _NORM_N = 0, 1, 2  # ATen's fft_norm_mode: none, 1/sqrt(n), 1/n


def _dim(dim: int, rank: int | None) -> int:
    """A logical dim made non-negative (the pair dim follows the logical ones)."""
    if rank is None:
        raise ValueError("the rank of a complex value must be known")
    return dim % rank if rank else 0


def _pair(dtype: torch.dtype | None) -> torch.dtype:
    """The complex dtype whose pairs have real dtype ``dtype``."""
    return {torch.float64: torch.complex128, torch.float16: torch.complex32}.get(dtype, torch.complex64)


def _signal_size(b: GraphBuilder, x: Value, dims: Sequence[int], like: Value) -> Value:
    """Number of elements the transform runs over (product of the sizes of ``dims``), as a scalar like ``like``."""
    sizes = [x.shape[d] if x.shape is not None else None for d in dims]
    if all(isinstance(s, int) for s in sizes):
        return b.scalar(float(math.prod(sizes)), like.dtype.to_real() if like.dtype.is_complex else like.dtype)
    shape = b.shape_of(x)
    picked = b.op("Gather", shape, b.const(list(dims), torch.int64), axis=0, dtype=torch.int64)
    count = b.op("ReduceProd", picked, keepdims=0, dtype=torch.int64, shape=())
    return b.cast(count, like.dtype.to_real() if like.dtype.is_complex else like.dtype)


def _scale(b: GraphBuilder, y: Value, n: Value, power: float) -> Value:
    """``y * n ** power`` (power in {-1, -0.5, 0.5, 1})."""
    if power == 0:
        return y
    factor = b.op("Sqrt", n) if abs(power) == 0.5 else n
    return b.op("Div" if power < 0 else "Mul", y, factor, dtype=y.dtype, shape=y.shape)


def _dft(b: GraphBuilder, x: Value, axis: int, *, inverse: bool, onesided: bool) -> Value:
    """One ONNX DFT over physical ``axis`` of a (..., 1 or 2) tensor; axis is an attribute before opset 20."""
    if b.opset >= 20:
        return b.op("DFT", x, None, b.const(axis, torch.int64), inverse=int(inverse), onesided=int(onesided))
    return b.op("DFT", x, axis=axis, inverse=int(inverse), onesided=int(onesided))


@translation(aten._fft_r2c.default, since=17)
def aten_fft_r2c(b: GraphBuilder, self: Value, dim: Sequence[int], normalization: int, onesided: bool) -> Value:
    """_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor  (complex)

    A real-input DFT over the last of ``dim`` (one-sided if asked), then complex
    DFTs over the others, as PyTorch's r2c does; static lengths as MatMuls (ops/_dft_basis.py).
    """
    if self.dtype is None or not self.dtype.is_floating_point:
        self = b.cast(self, torch.float32)
    dims = [_dim(d, self.rank) for d in dim]
    y = _r2c(b, self, dims[-1], onesided)
    for d in reversed(dims[:-1]):
        y = _c2c(b, y, d, inverse=False)
    if normalization != _NORM_NONE:
        y = _scale(b, y, _signal_size(b, self, dims, y), -0.5 if normalization == _NORM_SQRT else -1)
    return y


def _r2c(b: GraphBuilder, x: Value, axis: int, onesided: bool) -> Value:
    """The forward DFT of real ``x`` over logical ``axis`` (bins 0..n//2 when ``onesided``), as pairs."""
    n = x.shape[axis] if x.shape is not None else None
    shape = None if x.shape is None else tuple(x.shape)
    if isinstance(n, int) and shape is not None:
        bins = n // 2 + 1 if onesided else n
        shape = (*shape[:axis], bins, *shape[axis + 1:])
        if _dft_basis.fits(n, 2 * bins):
            return _dft_basis.along(b, x, axis, _dft_basis.r2c_basis(n, bins), pairs_in=False, pairs_out=True,
                                    dtype=_pair(x.dtype), shape=shape)
    pairs = b.op("Unsqueeze", x, b.const([-1], torch.int64), dtype=x.dtype)
    y = _dft(b, pairs, axis, inverse=False, onesided=onesided)
    y.dtype, y.shape = _pair(x.dtype), shape if isinstance(n, int) else None
    return y


@translation(aten._fft_c2c.default, since=17, complex=True)
def aten_fft_c2c(b: GraphBuilder, self: Value, dim: Sequence[int], normalization: int, forward: bool) -> Value:
    """_fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward) -> Tensor

    ONNX's inverse DFT is already scaled by 1/n; the scaling is adjusted to ``normalization``.
    Static lengths are MatMuls with a float64 basis (ops/_dft_basis.py).
    """
    dims = [_dim(d, self.rank) for d in dim]
    y = self
    for d in dims:
        y = _c2c(b, y, d, inverse=not forward)
    n = _signal_size(b, self, dims, y)
    wanted = {_NORM_NONE: 0.0, _NORM_SQRT: -0.5, _NORM_N: -1.0}[normalization]
    return _scale(b, y, n, wanted + (0.0 if forward else 1.0))


@translation(aten.view_as_real.default, complex=True)
def aten_view_as_real(b: GraphBuilder, self: Value) -> Value:
    """view_as_real(Tensor(a) self) -> Tensor(a)  (the pairs are already real)"""
    shape = None if self.shape is None else (*self.shape, 2)
    return b.op("Identity", self, dtype=self.dtype.to_real(), shape=shape)


@translation(aten.view_as_complex.default)
def aten_view_as_complex(b: GraphBuilder, self: Value) -> Value:
    """view_as_complex(Tensor(a) self) -> Tensor(a)"""
    shape = None if self.shape is None else self.shape[:-1]
    return b.op("Identity", self, dtype=_pair(self.dtype), shape=shape)


@translation(aten.abs.default, complex=True)
def aten_abs_complex(b: GraphBuilder, self: Value) -> Value:
    """abs(Tensor self) -> Tensor  (complex input: the magnitude, a real tensor)"""
    real = self.dtype.to_real()
    squares = b.op("Mul", self, self, dtype=real)
    total = b.op("ReduceSum", squares, b.const([-1], torch.int64), keepdims=0, dtype=real)
    return b.op("Sqrt", total, dtype=real, shape=self.shape)


@translation(aten.mul.Tensor, aten.mul.Scalar, complex=True)
def aten_mul_complex(b: GraphBuilder, self: Value | float, other: Value | float) -> Value:
    """mul.Tensor(Tensor self, Tensor other) -> Tensor  (complex times real, or complex times complex)"""
    if not (isinstance(self, Value) and self.dtype.is_complex):
        self, other = other, self
    real = self.dtype.to_real()
    if not isinstance(other, Value):
        if isinstance(other, complex):
            other = b.const([other.real, other.imag], real)
            return _complex_product(b, self, b.op("Identity", other, dtype=self.dtype, shape=()))
        return b.op("Mul", self, b.scalar(float(other), real), dtype=self.dtype)
    if other.dtype.is_complex:
        return _complex_product(b, self, other)
    scale = b.op("Unsqueeze", b.cast(other, real), b.const([-1], torch.int64), dtype=real)
    return b.op("Mul", self, scale, dtype=self.dtype)


def _complex_product(b: GraphBuilder, x: Value, y: Value) -> Value:
    """(a + bi)(c + di) = (ac - bd) + (ad + bc)i on (..., 2) pairs."""
    real = x.dtype.to_real()
    a, bi = b.op("Split", x, b.const([1, 1], torch.int64), axis=-1, outputs=2)
    c, di = b.op("Split", y, b.const([1, 1], torch.int64), axis=-1, outputs=2)
    re = b.op("Sub", b.op("Mul", a, c, dtype=real), b.op("Mul", bi, di, dtype=real), dtype=real)
    im = b.op("Add", b.op("Mul", a, di, dtype=real), b.op("Mul", bi, c, dtype=real), dtype=real)
    return b.op("Concat", re, im, axis=-1, dtype=x.dtype)


@translation(aten.permute.default, complex=True)
def aten_permute_complex(b: GraphBuilder, self: Value, dims: Sequence[int]) -> Value:
    """permute(Tensor(a) self, int[] dims) -> Tensor(a)"""
    perm = [_dim(d, self.rank) for d in dims]
    return b.op("Transpose", self, perm=[*perm, len(perm)], dtype=self.dtype)


@translation(aten.squeeze.dims, complex=True)
def aten_squeeze_dims_complex(b: GraphBuilder, self: Value, dim: Sequence[int]) -> Value:
    """squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)  (only dims of size 1, as PyTorch)"""
    shape = self.shape or ()
    axes = [d for d in (_dim(d, self.rank) for d in dim) if shape[d] == 1]
    if not axes:
        return b.op("Identity", self, dtype=self.dtype)
    return b.op("Squeeze", self, b.const(axes, torch.int64), dtype=self.dtype)


@translation(aten.unsqueeze.default, complex=True)
def aten_unsqueeze_complex(b: GraphBuilder, self: Value, dim: int) -> Value:
    """unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"""
    axis = _dim(dim, (self.rank or 0) + 1)
    return b.op("Unsqueeze", self, b.const([axis], torch.int64), dtype=self.dtype)


@translation(aten.view.default, aten._unsafe_view.default, complex=True)
def aten_view_complex(b: GraphBuilder, self: Value, size: Sequence[int | Value]) -> Value:
    """view(Tensor(a) self, SymInt[] size) -> Tensor(a)"""
    return b.op("Reshape", self, b.int_list([*size, 2]), dtype=self.dtype)


@translation(aten.clone.default, aten.alias.default, aten.alias_copy.default, aten.detach.default, complex=True)
def aten_clone_complex(b: GraphBuilder, self: Value, *, memory_format: torch.memory_format | None = None) -> Value:
    """clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor  (and alias, alias_copy, detach)"""
    return b.op("Identity", self, dtype=self.dtype)


@translation(aten.select.int, complex=True)
def aten_select_complex(b: GraphBuilder, self: Value, dim: int, index: int | Value) -> Value:
    """select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"""
    position = b.op("Reshape", b.int_list([index]), b.const([], torch.int64), dtype=torch.int64, shape=())
    return b.op("Gather", self, position, axis=_dim(dim, self.rank), dtype=self.dtype)


@translation(aten.slice.Tensor, complex=True)
def aten_slice_complex(b: GraphBuilder, self: Value, dim: int = 0, start: int | Value | None = None,
                       end: int | Value | None = None, step: int = 1) -> Value:
    """slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)"""
    big = 2**63 - 1
    starts = b.int_list([0 if start is None else start])
    ends = b.int_list([big if end is None or (isinstance(end, int) and end > big) else end])
    axes = b.const([_dim(dim, self.rank)], torch.int64)
    return b.op("Slice", self, starts, ends, axes, b.int_list([step]), dtype=self.dtype)


@translation(aten.sym_size.int, complex=True)
def aten_sym_size_complex(b: GraphBuilder, self: Value, dim: int) -> Value:
    """sym_size.int(Tensor self, int dim) -> SymInt  (a logical dim; the pair dim is never asked for)"""
    axis = _dim(dim, self.rank)
    return b.op("Squeeze", b.shape_of(self, axis, axis + 1), b.const([0], torch.int64), dtype=torch.int64, shape=())

@translation(aten.constant_pad_nd.default, complex=True)
def aten_constant_pad_nd_complex(b: GraphBuilder, self: Value, pad: Sequence[int | Value], value: complex = 0) -> Value:
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor  (irfft's zero padding of a spectrum)"""
    rank = b.rank_of(self)
    fill = complex(value)
    begins: list[int | Value] = [0] * (rank + 1)
    ends: list[int | Value] = [0] * (rank + 1)
    for i in range(len(pad) // 2):  # PyTorch's pad runs from the last logical dim backwards
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    if fill == 0:
        return b.op("Pad", self, b.int_list(begins + ends), dtype=self.dtype)
    real = self.dtype.to_real()
    parts = b.op("Split", self, b.const([1, 1], torch.int64), axis=-1, outputs=2)
    padded = [b.op("Pad", p, b.int_list(begins + ends), b.scalar(v, real), dtype=real)
              for p, v in zip(parts, (fill.real, fill.imag))]
    return b.op("Concat", *padded, axis=-1, dtype=self.dtype)


def _hermitian_weights(b: GraphBuilder, half: int | Value, n: int | Value, trailing: int, like: torch.dtype) -> Value:
    """Weights of the one-sided bins 0..half-1 of a length-``n`` signal: 1 for DC and Nyquist, 2 for the others.

    Shaped (half, 1, ..., 1) with ``trailing`` ones (the logical dims after the axis, then the pair dim).
    """
    if isinstance(half, int) and isinstance(n, int):
        weights = [1.0 if k == 0 or 2 * k == n else 2.0 for k in range(half)]
        return b.const(torch.tensor(weights).reshape(half, *[1] * trailing), like)
    k = b.op("Range", b.const(0, torch.int64), b.op("Squeeze", b.int_list([half]), b.const([0], torch.int64)),
             b.const(1, torch.int64), dtype=torch.int64)
    twice = b.op("Mul", k, b.const(2, torch.int64), dtype=torch.int64)
    edge = b.op("Or", b.op("Equal", k, b.const(0, torch.int64), dtype=torch.bool),
                b.op("Equal", twice, b.op("Squeeze", b.int_list([n]), b.const([0], torch.int64)), dtype=torch.bool),
                dtype=torch.bool)
    weights = b.op("Where", edge, b.const(1.0, like), b.const(2.0, like), dtype=like)
    return b.op("Unsqueeze", weights, b.const(list(range(1, trailing + 1)), torch.int64), dtype=like)


@translation(aten._fft_c2r.default, since=17, complex=True)
def aten_fft_c2r(b: GraphBuilder, self: Value, dim: Sequence[int], normalization: int,
                 last_dim_size: int | Value) -> Value:
    """_fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor  (real)

    As PyTorch: inverse complex DFTs over all of ``dim`` but the last, then a
    complex-to-real one over the last, whose input holds bins 0..n//2 of a
    Hermitian spectrum of length n = ``last_dim_size``.

    # NOTE: the real part of the inverse DFT of the one-sided bins, with every bin
    # but DC and Nyquist doubled and zeros up to n, is the inverse of the full
    # Hermitian spectrum (the imaginary parts of DC and Nyquist drop out, as in
    # pocketfft), so no conjugate mirror is built. A static length is one MatMul
    # with that inverse as a basis (_c2r_by_basis), others an ONNX inverse DFT.
    """
    dims = [_dim(d, self.rank) for d in dim]
    last = dims[-1]
    y = self
    for d in dims[:-1]:
        y = _c2c(b, y, d, inverse=True)
    half = self.shape[last] if isinstance(self.shape[last], int) else b.shape_of(self, last, last + 1)
    if isinstance(half, int) and _dft_basis.fits(2 * half, last_dim_size) and half <= last_dim_size // 2 + 1:
        out = _c2r_by_basis(b, y, last, half, last_dim_size)
    else:
        out = _c2r_by_dft(b, y, last, half, last_dim_size)
    power = {_NORM_NONE: 1.0, _NORM_SQRT: 0.5, _NORM_N: 0.0}[normalization]  # both carry ONNX's inverse 1/n
    return out if power == 0 else _scale(b, out, _signal_size(b, out, dims, out), power)


def _c2r_by_dft(b: GraphBuilder, y: Value, last: int, half: int | Value, last_dim_size: int | Value) -> Value:
    """The last axis's complex-to-real inverse as an ONNX inverse DFT of the weighted, zero-padded bins."""
    rank, real = b.rank_of(y), y.dtype.to_real()
    y = b.op("Mul", y, _hermitian_weights(b, half, last_dim_size, rank - last, real), dtype=y.dtype)
    pads: list[int | Value] = [0] * (2 * rank + 2)
    pads[rank + 1 + last] = (last_dim_size - half if isinstance(last_dim_size, int) and isinstance(half, int)
                             else b.op("Sub", b.int_list([last_dim_size]), b.int_list([half]), dtype=torch.int64))
    if pads[rank + 1 + last] != 0:
        y = b.op("Pad", y, b.int_list(pads), dtype=y.dtype)
    y = _dft(b, y, last, inverse=True, onesided=False)
    return b.op("Gather", y, b.const(0, torch.int64), axis=-1, dtype=real, shape=b.node.out_shape)


def _c2c(b: GraphBuilder, y: Value, axis: int, *, inverse: bool) -> Value:
    """A complex DFT over logical ``axis``, unscaled forward and scaled by 1/n inverse (ONNX's DFT's
    convention): a MatMul with a float64 basis for a static length (ops/_dft_basis.py), else ONNX's DFT."""
    n = y.shape[axis] if y.shape is not None else None
    if isinstance(n, int) and _dft_basis.fits(2 * n, 2 * n):
        return _dft_basis.along(b, y, axis, _dft_basis.c2c_basis(n, inverse=inverse), pairs_in=True,
                                pairs_out=True, dtype=y.dtype, shape=y.shape)
    out = _dft(b, y, axis, inverse=inverse, onesided=False)
    out.dtype, out.shape = y.dtype, y.shape
    return out


def _c2r_by_basis(b: GraphBuilder, y: Value, last: int, half: int, n: int) -> Value:
    """The last axis's complex-to-real inverse as one MatMul (ops/_dft_basis.py: c2r_basis)."""
    return _dft_basis.along(b, y, last, _dft_basis.c2r_basis(half, n), pairs_in=True, pairs_out=False,
                            dtype=y.dtype.to_real(), shape=b.node.out_shape)
