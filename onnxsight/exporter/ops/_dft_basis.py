"""DFTs of static length as one MatMul with a basis computed in float64 (used by spectral.py).

# NOTE: ONNX Runtime's DFT kernel (onnxruntime 1.32, CPU, float32) loses precision at lengths
# that are not a power of two, the more the longer: its largest error is 4e-6 of the output's
# scale at 12 points, 2e-5 at 100, 1e-4 at 500, 3e-4 at 1100 (random data of scale 9), where
# torch's pocketfft stays near 1e-7; at powers of two it is 2e-7..7e-7. Both miss torch.testing's
# float32 tolerance (rtol 1.3e-6, atol 1e-5) on ordinary inputs (some elements from 32 points on).
# A MatMul with the exact basis rounded once to float32 stays within 1-4x torch's own error,
# inside that tolerance, at every length measured (7..2048). The basis has (2 n)^2 elements for a
# complex transform of length n, so it is used while it stays under BASIS_MAX_ELEMENTS (4 MiB of
# float32: n <= 512 complex, n <= 1022 real); longer or symbolic lengths run ONNX's DFT.

Values are laid out as everywhere in onnxsight: a complex tensor is real with a trailing
(real, imaginary) dim of 2, and ``axis`` is a logical dim (the pair dim not counted).
"""

from __future__ import annotations

import math

import torch

from onnxsight.exporter._builder import GraphBuilder, Value

BASIS_MAX_ELEMENTS = 1 << 20


def fits(rows: int | Value | None, cols: int | Value | None) -> bool:
    """Whether a (rows, cols) basis is static and small enough (BASIS_MAX_ELEMENTS)."""
    return isinstance(rows, int) and isinstance(cols, int) and rows > 0 and cols > 0 and \
        rows * cols <= BASIS_MAX_ELEMENTS


def _turns(rows: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of 2 pi k t / n for k < rows, t < n, in float64, exact zeros where they are zero."""
    turns = (torch.arange(rows)[:, None] * torch.arange(n)[None, :]) % n   # k t mod n, exact
    angle = turns.to(torch.float64) * (2 * math.pi / n)
    cos, sin = torch.cos(angle), torch.sin(angle)
    cos[(4 * turns) % (2 * n) == n] = 0.0   # odd multiples of pi/2
    sin[(2 * turns) % n == 0] = 0.0         # multiples of pi
    return cos, sin


def c2c_basis(n: int, *, inverse: bool) -> torch.Tensor:
    """(2n, 2n): rows (t, re/im) to columns (m, re/im) of x_t e^{-+2 pi i m t / n}, summed; / n inverse."""
    cos, sin = _turns(n, n)
    sin = sin if inverse else -sin
    # (a + ib)(cos + i sin) = (a cos - b sin) + i (a sin + b cos)
    basis = torch.stack([torch.stack([cos, sin], dim=-1), torch.stack([-sin, cos], dim=-1)], dim=1)
    return (basis / n if inverse else basis).reshape(2 * n, 2 * n)


def r2c_basis(n: int, bins: int) -> torch.Tensor:
    """(n, 2 bins): real samples t to bins (m, re/im) of the forward DFT, m < bins."""
    cos, sin = _turns(bins, n)
    return torch.stack([cos.T, -sin.T], dim=-1).reshape(n, 2 * bins)


def c2r_basis(half: int, n: int) -> torch.Tensor:
    """(2 half, n): bins (k, re/im) 0..half-1 of a Hermitian spectrum of length n to its inverse's
    samples (scaled by 1/n): w_k (re cos - im sin)(2 pi k t / n) / n, w_k 1 for DC and Nyquist, else 2."""
    cos, sin = _turns(half, n)
    k = torch.arange(half)
    weights = torch.where((k == 0) | (2 * k == n), 1.0, 2.0).to(torch.float64)[:, None] / n
    return torch.stack([weights * cos, -weights * sin], dim=1).reshape(2 * half, n)


def along(b: GraphBuilder, x: Value, axis: int, basis: torch.Tensor, *, pairs_in: bool, pairs_out: bool,
          dtype: torch.dtype, shape: tuple | None) -> Value:
    """``basis`` applied over logical ``axis`` of ``x`` (with its pair dim when ``pairs_in``): the axis
    (and pairs) moved last, flattened, one MatMul, the result's pairs split off and the axis moved back."""
    rank = b.rank_of(x)
    real = dtype.to_real() if dtype.is_complex else dtype
    others = [d for d in range(rank) if d != axis]
    pair = [rank] if pairs_in else []
    y = x if axis == rank - 1 else b.op("Transpose", x, perm=[*others, axis, *pair], dtype=x.dtype)
    if pairs_in:
        y = b.op("Reshape", y, b.const([0] * (rank - 1) + [-1], torch.int64), dtype=real)
    y = b.op("MatMul", y, b.const(basis, real), dtype=real)
    if pairs_out:
        y = b.op("Reshape", y, b.const([0] * (rank - 1) + [-1, 2], torch.int64), dtype=dtype)
    if axis == rank - 1:
        y.dtype, y.shape = dtype, shape
        return y
    back = [*range(axis), rank - 1, *range(axis, rank - 1)] + ([rank] if pairs_out else [])
    return b.op("Transpose", y, perm=back, dtype=dtype, shape=shape)


_FFTS = ("_fft_r2c", "_fft_c2c", "_fft_c2r")


def runtime_dft_dims(node: torch.fx.Node) -> list[tuple[int, str]]:
    """The dims (and their lengths) of an FFT node that spectral.py leaves to ONNX's DFT at a length
    that is not a power of two, or a symbolic one: the OPS010 warning (exporter/translate/_analysis.py).

    Mirrors the translations' choice: r2c's real transform over the last of ``dim`` needs an
    (n, 2 (n//2 + 1)) basis, c2r's an (2 half, n) one, every other dim a complex (2 n, 2 n) one.
    """
    base = getattr(node.target, "__name__", "").split(".")[0]
    source = node.args[0].meta.get("val") if node.args and isinstance(node.args[0], torch.fx.Node) else None
    if base not in _FFTS or not isinstance(source, torch.Tensor):
        return []
    rank = source.dim()
    dims = [d % rank for d in node.args[1]]
    found = []
    for position, dim in enumerate(dims):
        n = source.shape[dim]
        length, static = n, isinstance(n, int) and fits(2 * n, 2 * n)
        if position == len(dims) - 1 and base == "_fft_r2c":
            static = isinstance(n, int) and fits(n, 2 * (n // 2 + 1 if node.args[3] else n))
        elif position == len(dims) - 1 and base == "_fft_c2r":
            length = node.args[3]
            static = isinstance(n, int) and isinstance(length, int) and fits(2 * n, length) and n <= length // 2 + 1
        if not static and not (isinstance(length, int) and length & (length - 1) == 0):
            found.append((dim, str(length)))
    return found
