"""embedding_renorm (``nn.Embedding(max_norm=...)``): the looked-up rows of the table scaled down to ``max_norm``.

Eager renormalises the weight in place before each lookup; the captured program carries the functional
``embedding_renorm``: the new table, which the lookup reads, and the parameter's update, which the ONNX
model does not keep. It need not: a row scaled to ``max_norm`` is not scaled again, so every call reads
the values eager's call reads, whatever the calls before it.
"""

from __future__ import annotations

import math

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation
from onnxsight.exporter.ops._nn_common import reduce

aten = torch.ops.aten

_EPSILON = 1e-7  # eager's: scale = max_norm / (norm + 1e-7)


def _norm(b: GraphBuilder, rows: Value, p: float) -> Value:
    """Each row's p-norm, kept as a (N, 1) column."""
    if p == 2:
        return reduce(b, "ReduceL2", rows, [1])
    if p == 1:
        return reduce(b, "ReduceL1", rows, [1])
    if math.isinf(p):
        return reduce(b, "ReduceMax" if p > 0 else "ReduceMin", b.op("Abs", rows), [1])
    powered = b.op("Pow", b.op("Abs", rows), b.scalar(float(p), rows))
    return b.op("Pow", reduce(b, "ReduceSum", powered, [1]), b.scalar(1.0 / p, rows))


@translation(aten.embedding_renorm.default)
def aten_embedding_renorm(b: GraphBuilder, self: Value, indices: Value, max_norm: float, norm_type: float) -> Value:
    """embedding_renorm(Tensor self, Tensor indices, float max_norm, float norm_type) -> Tensor"""
    i64 = torch.int64
    where = b.op("Reshape", b.cast(indices, i64), b.const([-1, 1], i64), dtype=i64)   # (N, 1)
    rows = b.op("GatherND", self, where)                                                # (N, D)
    norm = _norm(b, rows, float(norm_type))
    limit = b.scalar(float(max_norm), rows)
    scale = b.op("Div", limit, b.op("Add", norm, b.scalar(_EPSILON, rows)))
    scale = b.op("Where", b.op("Greater", norm, limit, dtype=torch.bool), scale, b.scalar(1.0, rows))
    # a repeated index writes the same row twice, with the same value
    return b.op("ScatterND", self, where, b.op("Mul", rows, scale), dtype=self.dtype, shape=self.shape)
