"""Matrix products (mm, bmm, matmul, linear, the fused add-products addmm/addmv/addbmm/baddbmm) and determinants."""

from __future__ import annotations

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.ops._nn_common import reduce

aten = torch.ops.aten

# Gemm runs in ONNX Runtime for these only; other dtypes use MatMul + Mul + Add.
_GEMM_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _scaled_add(b: GraphBuilder, self: Value, product: Value, beta: float | Value, alpha: float | Value) -> Value:
    """``beta * self + alpha * product``, skipping unit factors; ``beta == 0`` ignores self (NaNs included).

    ``alpha``/``beta`` may be symbolic (a tensor's ``item()``): multiplied in, and ``beta == 0``
    decided when the model runs.
    """
    if isinstance(alpha, Value):
        product = b.op("Mul", product, b.cast(alpha, product.dtype))
    elif alpha != 1:
        product = b.op("Mul", product, b.scalar(alpha, product))
    if isinstance(beta, Value):
        total = b.op("Add", b.op("Mul", self, b.cast(beta, self.dtype)), product, dtype=product.dtype)
        ignored = b.op("Equal", beta, b.scalar(0, beta), dtype=torch.bool)
        return b.op("Where", ignored, product, total, dtype=product.dtype)
    if beta == 0:
        return product
    if beta != 1:
        self = b.op("Mul", self, b.scalar(beta, self))
    return b.op("Add", self, product, dtype=product.dtype)


@translation(aten.mm.default)
def aten_mm(b: GraphBuilder, self: Value, mat2: Value) -> Value:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return b.op("MatMul", self, mat2)


@translation(aten.bmm.default)
def aten_bmm(b: GraphBuilder, self: Value, mat2: Value) -> Value:
    """bmm(Tensor self, Tensor mat2) -> Tensor"""
    return b.op("MatMul", self, mat2)


@translation(aten.matmul.default)
def aten_matmul(b: GraphBuilder, self: Value, other: Value) -> Value:
    """matmul(Tensor self, Tensor other) -> Tensor

    ONNX MatMul has numpy's matmul semantics, which are torch.matmul's
    (1-D promotion and batch broadcasting included).
    """
    return b.op("MatMul", self, other)


@translation(aten.linear.default)
def aten_linear(b: GraphBuilder, input: Value, weight: Value, bias: Value | None = None) -> Value:
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"""
    if input.rank == 2 and weight.rank == 2 and input.dtype in _GEMM_DTYPES:
        return b.op("Gemm", input, weight, bias, transB=1)
    if weight.rank == 1:
        out = b.op("MatMul", input, weight)
    else:
        out = b.op("MatMul", input, b.op("Transpose", weight, perm=[1, 0]))
    return out if bias is None else b.op("Add", out, bias)


@translation(aten.addmm.default)
def aten_addmm(b: GraphBuilder, self: Value, mat1: Value, mat2: Value, *, beta: float | Value = 1,
               alpha: float | Value = 1) -> Value:
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    if mat1.dtype in _GEMM_DTYPES and not isinstance(alpha, Value) and not isinstance(beta, Value):
        # Gemm computes beta * C even when beta is 0, so C is left out then (torch ignores self).
        c = None if beta == 0 else self
        return b.op("Gemm", mat1, mat2, c, alpha=float(alpha), beta=float(beta) if c is not None else None)
    return _scaled_add(b, self, b.op("MatMul", mat1, mat2), beta, alpha)


@translation(aten.addmv.default)
def aten_addmv(b: GraphBuilder, self: Value, mat: Value, vec: Value, *, beta: float | Value = 1,
               alpha: float | Value = 1) -> Value:
    """addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    return _scaled_add(b, self, b.op("MatMul", mat, vec), beta, alpha)


@translation(aten.baddbmm.default)
def aten_baddbmm(b: GraphBuilder, self: Value, batch1: Value, batch2: Value, *, beta: float | Value = 1,
                 alpha: float | Value = 1) -> Value:
    """baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    return _scaled_add(b, self, b.op("MatMul", batch1, batch2), beta, alpha)


@translation(aten.addbmm.default)
def aten_addbmm(b: GraphBuilder, self: Value, batch1: Value, batch2: Value, *, beta: float | Value = 1,
                alpha: float | Value = 1) -> Value:
    """addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    total = reduce(b, "ReduceSum", b.op("MatMul", batch1, batch2), [0], keepdims=False)
    return _scaled_add(b, self, total, beta, alpha)


@translation(aten._trilinear.default)
def aten_trilinear(b: GraphBuilder, i1: Value, i2: Value, i3: Value, expand1: list[int], expand2: list[int],
                   expand3: list[int], sumdim: list[int], unroll_dim: int = 1) -> Value:
    """_trilinear(Tensor i1, Tensor i2, Tensor i3, int[] expand1, int[] expand2, int[] expand3, int[] sumdim,
    int unroll_dim=1) -> Tensor

    Each input lacks the axes in its ``expand`` list; the product is summed over
    ``sumdim``. That is one Einsum with a letter per axis of the full rank.
    """
    rank = b.rank_of(i1) + len(expand1)
    letters = "abcdefghijklmnopqrstuvwxyz"[:rank]
    terms = ["".join(letters[d] for d in range(rank) if d not in expand) for expand in (expand1, expand2, expand3)]
    result = "".join(letters[d] for d in range(rank) if d not in sumdim)
    return b.op("Einsum", i1, i2, i3, equation=f"{','.join(terms)}->{result}")


def _determinant(b: GraphBuilder, A: Value, unread: dict[int, str]) -> Value:
    """ONNX Det of ``A`` (..., n, n); the LU factors ATen returns beside it must be unread (ONNX has no LU)."""
    read = [name for index, name in unread.items() if b.node.output_used(index)]
    if read:
        raise UnsupportedVariant("outputs", f"{', '.join(read)} read", "the determinant alone (torch.linalg.det, "
                                 "torch.linalg.slogdet, torch.logdet)")
    return b.op("Det", A, dtype=A.dtype, shape=None if A.shape is None else A.shape[:-2])


@translation(aten._linalg_det.default)
def aten_linalg_det(b: GraphBuilder, A: Value) -> tuple[Value, None, None]:
    """_linalg_det(Tensor A) -> (Tensor result, Tensor LU, Tensor pivots)"""
    return _determinant(b, A, {1: "LU", 2: "pivots"}), None, None


@translation(aten._linalg_slogdet.default)
def aten_linalg_slogdet(b: GraphBuilder, A: Value) -> tuple[Value, Value, None, None]:
    """_linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)

    # NOTE: torch sums the logs of LU's diagonal, so logabsdet stays finite where det
    # overflows (a 60 x 60 matrix of entries near 10 has |det| near 1e90). ONNX has no
    # LU; each row is divided by its norm first, which bounds |det| of the result by 1
    # (Hadamard's inequality), and the rows' log norms are added back:
    # log|det A| = sum_i log|a_i| + log|det(A / |a_i|)|. A zero row keeps its zeros.
    """
    real = A.dtype
    squares = b.op("Mul", A, A, dtype=real)
    norms = b.op("Sqrt", b.op("ReduceSum", squares, b.const([-1], torch.int64), keepdims=1, dtype=real), dtype=real)
    zero = b.op("Equal", norms, b.scalar(0.0, real), dtype=torch.bool)
    norms = b.op("Where", zero, b.scalar(1.0, real), norms, dtype=real)
    scaled = b.op("Div", A, norms, dtype=real, shape=A.shape)
    det = _determinant(b, scaled, {2: "LU", 3: "pivots"})
    sign = b.op("Sign", det, dtype=det.dtype, shape=det.shape)
    log_norms = reduce(b, "ReduceSum", b.op("Log", norms, dtype=real), [-2, -1], keepdims=False)
    logabsdet = b.op("Add", b.op("Log", b.op("Abs", det, dtype=real), dtype=real), log_norms, dtype=real,
                     shape=det.shape)
    return sign, logabsdet, None, None
