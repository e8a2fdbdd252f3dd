"""Indexing ops: OpInfo samples, then advanced indexing and index_put layouts by hand."""

from __future__ import annotations

import pytest
import torch

import onnxsight
from tests.exporter.ops.opinfo_harness import assert_op_passes
from tests.exporter.ops.test_shape import Fn, assert_like_eager

OPS = [
    "__getitem__", "index_select", "gather", "take_along_dim", "scatter", "scatter_add", "scatter_reduce.sum",
    "scatter_reduce.prod", "scatter_reduce.amax", "scatter_reduce.amin", "scatter_reduce.mean", "select_scatter",
    "slice_scatter", "diagonal_scatter", "as_strided_scatter", "masked_scatter", "masked_select", "masked_fill",
    "nn.functional.embedding", "nonzero", "nonzero_static", "argwhere", "take", "put", "index_put", "index_add", "index_copy", "index_fill",
    "index_reduce.amax", "index_reduce.amin", "index_reduce.mean", "index_reduce.prod", "_unsafe_masked_index",
    "_unsafe_masked_index_put_accumulate",
]


@pytest.mark.parametrize("name", OPS)
def test_opinfo(name: str) -> None:
    assert_op_passes(name)


X = torch.arange(3 * 4 * 5 * 2, dtype=torch.float32).reshape(3, 4, 5, 2)
I = torch.tensor([[0, -1], [2, 1]])
J = torch.tensor([3, -5])


@pytest.mark.parametrize("key", [
    lambda i, j: (i,),                              # one index tensor: Gather
    lambda i, j: (slice(None), i, j),               # adjacent, broadcast (2, 2) with (2,)
    lambda i, j: (i, slice(None), j),               # not adjacent: broadcast dims first
    lambda i, j: (slice(None), slice(None), j, 0),  # adjacent with an int index
    lambda i, j: (None, slice(None), i),            # None entries
    lambda i, j: (Ellipsis, i[0].abs()),
], ids=["single", "adjacent", "separated", "with-int", "none", "ellipsis"])
def test_advanced_indexing(key) -> None:  # noqa: ANN001 - a lambda building the key
    assert_like_eager(lambda x, i, j: x[key(i, j)], X, I, J)


def test_boolean_masks() -> None:
    mask = X[..., 0] > 30  # 3-D mask over the first three dims
    assert_like_eager(lambda x, m: (x[m], x[:, m[0, :, 0]], x[m[:, 0, 0], 1]), X, mask)


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("layout", ["first", "adjacent", "separated"])
def test_index_put(accumulate: bool, layout: str) -> None:
    i = torch.tensor([0, 2, -1, 0])  # the repeated (0, 1) only counts twice with accumulate
    j = torch.tensor([1, 3, 0, 1])
    if not accumulate:  # duplicates without accumulate pick an unspecified writer
        i, j = i[:3], j[:3]
    keys = {"first": lambda i, j: [i, j], "adjacent": lambda i, j: [None, i, j],
            "separated": lambda i, j: [i, None, j]}
    values = torch.tensor([100.0, 200.0]) if accumulate else torch.tensor(7.0)  # broadcast against the result
    assert_like_eager(lambda t, i, j, v: torch.ops.aten.index_put(t, keys[layout](i, j), v, accumulate),
                      torch.randn(3, 4, 5, 2), i, j, values)


def test_index_put_in_place_setitem_and_mask() -> None:
    def fn(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        out[m] = -1.0
        out[:, torch.tensor([0, 2])] += 10.0
        return out
    x = torch.randn(3, 4)
    assert_like_eager(fn, x, x > 0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_gather_scatter_other_dtypes(dtype: torch.dtype) -> None:
    x = (torch.arange(12).reshape(3, 4) % 3).to(dtype)
    index = torch.tensor([[0, 1, 2, 0], [2, 2, 1, 0]])
    assert_like_eager(lambda t, i: (t.gather(0, i), t.scatter(0, i, t[:2]), torch.nonzero(t)), x, index)


def test_scatter_reduce_include_self_false() -> None:
    x, index, src = torch.randn(3, 4), torch.tensor([[0, 1, 0, 1], [0, 0, 0, 0]]), torch.randn(2, 4)
    for reduce in ("sum", "prod", "amax", "amin", "mean"):
        assert_like_eager(lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=False), x, index, src)


def test_scatter_reduce_opset17() -> None:
    x, index, src = torch.randn(3, 4), torch.tensor([[0, 1, 0, 1]]), torch.randn(1, 4)
    assert_like_eager(lambda t, i, s: t.scatter_reduce(0, i, s, "sum"), x, index, src, opset=17)
    with pytest.raises(onnxsight.ExportError, match="opset 18"):
        onnxsight.export(Fn(lambda t, i, s: t.scatter_reduce(0, i, s, "amax")), (x, index, src), opset_version=17)


def test_embedding_with_padding_idx() -> None:
    weight, ids = torch.randn(10, 3), torch.tensor([[0, 2, 9], [2, 2, 1]])
    assert_like_eager(lambda w, i: torch.nn.functional.embedding(i, w, padding_idx=2), weight, ids)


def test_scatter_reduce_integer_mean_rounds_like_pytorch() -> None:
    x, index = torch.tensor([[5, -3, 7, 2]]), torch.tensor([[0, 0, 1, 1]])
    src = torch.tensor([[4, -7, 3, -6]])
    for include_self in (True, False):
        assert_like_eager(lambda t, i, s: t.scatter_reduce(1, i, s, "mean", include_self=include_self), x, index, src)
