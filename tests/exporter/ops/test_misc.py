"""Sorting, selection, binning, unique and triangular masks: OpInfo samples and hand-written cases."""

from __future__ import annotations

from typing import Any, Callable

import onnx
import pytest
import torch
from torch.utils import _pytree as pytree

import onnxsight
from tests.exporter.ops.eager_check import FunctionModule as Fn
from tests.exporter.ops.opinfo_harness import assert_op_passes

OPS = ["sort", "argsort", "msort", "topk", "bucketize", "unique", "tril", "triu"]


@pytest.mark.parametrize("name", OPS)
def test_opinfo(name: str) -> None:
    assert_op_passes(name)




def _check(fn: Callable[..., Any], *inputs: torch.Tensor, **export_kwargs: Any) -> onnx.ModelProto:
    model = Fn(fn)
    program = onnxsight.export(model, inputs, **export_kwargs)
    expected = [t for t in pytree.tree_leaves(model(*inputs)) if isinstance(t, torch.Tensor)]
    actual = program(*inputs)
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual):
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        torch.testing.assert_close(got, want)
    return program.model_proto


TIES = torch.tensor([[3.0, 1.0, 3.0, 2.0, 1.0, 3.0], [0.0, 0.0, -1.0, 0.0, 5.0, 5.0]])


@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_keeps_tie_order(descending: bool) -> None:
    _check(lambda x: torch.sort(x, dim=1, descending=descending, stable=True), TIES)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8, torch.float16, torch.float64])
def test_sort_dtypes(dtype: torch.dtype) -> None:
    x = torch.randint(0, 50, (3, 7)).to(dtype)
    _check(lambda t: torch.sort(t, dim=0, descending=True, stable=True), x)


class SortLast(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sort(x, dim=-1)


def test_sort_dynamic_dim() -> None:
    model = SortLast()
    program = onnxsight.export(model, (torch.randn(2, 5),),
                               dynamic_shapes=({1: torch.export.Dim("n", min=2, max=64)},))
    x = torch.randn(2, 11)
    values, indices = program(x)
    torch.testing.assert_close(values, torch.sort(x).values)
    torch.testing.assert_close(indices, torch.sort(x).indices)


@pytest.mark.parametrize("largest", [True, False])
def test_topk(largest: bool) -> None:
    _check(lambda x: torch.topk(x, 3, dim=0, largest=largest), torch.randn(6, 4))


def test_topk_sorted_false_returns_the_k_elements() -> None:
    x = torch.randn(5, 8)
    program = onnxsight.export(Fn(lambda t: torch.topk(t, 4, sorted=False)), (x,))
    values, _ = program(x)
    torch.testing.assert_close(values.sort(-1).values, torch.topk(x, 4).values.sort(-1).values)


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted(right: bool) -> None:
    sequence = torch.tensor([-1.0, 0.0, 0.0, 2.0, 5.0])
    values = torch.tensor([[-3.0, 0.0, 1.0], [2.0, 5.0, 9.0]])
    _check(lambda s, v: torch.searchsorted(s, v, right=right), sequence, values)


def test_searchsorted_batched_sorter_int32() -> None:
    sequence = torch.tensor([[4.0, 1.0, 3.0, 2.0], [0.5, -2.0, 7.0, 1.0]])
    sorter = sequence.argsort(-1)
    values = torch.tensor([[2.5, 0.0, 4.0], [1.0, -5.0, 9.0]])
    _check(lambda s, v, o: torch.searchsorted(s, v, side="right", sorter=o, out_int32=True),
           sequence, values, sorter)


def test_bucketize_right() -> None:
    boundaries = torch.tensor([1, 3, 5, 7])
    _check(lambda x, b: torch.bucketize(x, b, right=True), torch.tensor([[0, 1, 3], [6, 7, 9]]), boundaries)


def test_unique_inverse_and_counts() -> None:
    x = torch.tensor([[3, 1, 3], [2, 1, 0]], dtype=torch.int32)
    _check(lambda t: torch.unique(t, return_inverse=True, return_counts=True), x)


def test_unique_dim() -> None:
    x = torch.tensor([[1.0, 2.0], [0.0, 5.0], [1.0, 2.0], [0.0, 1.0]])
    _check(lambda t: torch.unique(t, dim=0, return_inverse=True, return_counts=True), x)


@pytest.mark.parametrize("diagonal", [-1, 0, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_tril_triu_single_node(diagonal: int, dtype: torch.dtype) -> None:
    x = (torch.randn(2, 4, 5) * 4).to(dtype)
    proto = _check(lambda t: (torch.tril(t, diagonal), torch.triu(t, diagonal)), x)
    assert [n.op_type for n in proto.graph.node].count("Trilu") == 2
