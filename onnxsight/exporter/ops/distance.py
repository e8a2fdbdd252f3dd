"""Pairwise p-norm distances: _cdist_forward (``torch.cdist``) and _pdist_forward (``F.pdist``).

Both take the difference of every pair of rows by broadcasting and reduce it
over the feature axis with the reduction matching ``p``.

# NOTE: for p=2 PyTorch may use ``|x|^2 + |y|^2 - 2 x.y`` (one matmul), but that
# form cancels badly for close points (a distance of 0 comes out as ~1e-3 in
# float32), so ONNX Runtime and eager would disagree by more than float32
# tolerance on exactly the inputs where it matters. The broadcast difference
# costs P*R*M memory and is what eager computes without the mm path.
"""

from __future__ import annotations

import math

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter.ops._nn_common import reduce
from onnxsight.exporter._registry import translation

aten = torch.ops.aten


def _norm_last(b: GraphBuilder, diff: Value, p: float) -> Value:
    """The p-norm of ``diff`` over its last axis (dropped): p=0 counts non-zeros, p=inf is the max."""
    if p == 0:
        nonzero = b.op("Not", b.op("Equal", diff, b.scalar(0.0, diff), dtype=torch.bool), dtype=torch.bool)
        return reduce(b, "ReduceSum", b.cast(nonzero, diff.dtype), [-1], keepdims=False)
    if p == 1:
        return reduce(b, "ReduceL1", diff, [-1], keepdims=False)
    if p == 2:
        return reduce(b, "ReduceL2", diff, [-1], keepdims=False)
    if math.isinf(p):
        return reduce(b, "ReduceMax", b.op("Abs", diff), [-1], keepdims=False)
    powered = b.op("Pow", b.op("Abs", diff), b.scalar(float(p), diff))
    total = reduce(b, "ReduceSum", powered, [-1], keepdims=False)
    return b.op("Pow", total, b.scalar(1.0 / float(p), diff))


def _pairwise(b: GraphBuilder, x1: Value, x2: Value, p: float) -> Value:
    """(*, P, M) and (*, R, M) -> (*, P, R): the p-norm of x1[..., i, :] - x2[..., j, :]."""
    rows = b.op("Unsqueeze", x1, b.const([-2], torch.int64))      # (*, P, 1, M)
    cols = b.op("Unsqueeze", x2, b.const([-3], torch.int64))      # (*, 1, R, M)
    return _norm_last(b, b.op("Sub", rows, cols), float(p))


@translation(aten._cdist_forward.default)
def aten_cdist_forward(b: GraphBuilder, x1: Value, x2: Value, p: float, compute_mode: int | None = None) -> Value:
    """_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor

    ``compute_mode`` only picks eager's algorithm for p=2; the result is the same distance.
    """
    out = _pairwise(b, x1, x2, p)
    out.shape = b.node.out_shape
    return out


@translation(aten._pdist_forward.default)
def aten_pdist_forward(b: GraphBuilder, self: Value, p: float = 2) -> Value:
    """_pdist_forward(Tensor self, float p=2) -> Tensor

    The (N, N) distance matrix flattened, and its upper triangle (i < j, row
    major) taken: by constant indices when N is static, by a computed mask otherwise.
    """
    matrix = _pairwise(b, self, self, p)
    flat = b.op("Reshape", matrix, b.const([-1], torch.int64))
    rows = self.shape[0] if self.shape is not None else None
    if isinstance(rows, int):
        picked = [i * rows + j for i in range(rows) for j in range(i + 1, rows)]
        return b.op("Gather", flat, b.const(picked, torch.int64), axis=0, shape=(len(picked),))
    count = b.op("Shape", self, start=0, end=1, dtype=torch.int64, shape=(1,))
    count = b.op("Squeeze", count, b.const([0], torch.int64), dtype=torch.int64, shape=())
    index = b.op("Range", b.const(0, torch.int64), count, b.const(1, torch.int64), dtype=torch.int64)
    row = b.op("Unsqueeze", index, b.const([1], torch.int64), dtype=torch.int64)
    col = b.op("Unsqueeze", index, b.const([0], torch.int64), dtype=torch.int64)
    upper = b.op("Reshape", b.op("Less", row, col, dtype=torch.bool), b.const([-1], torch.int64), dtype=torch.bool)
    return b.op("Compress", flat, upper, axis=0, shape=b.node.out_shape)
