"""Shape and view ops: OpInfo samples, then slicing edge cases, dtypes and opset variants by hand."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import pytest
import torch
from torch.utils import _pytree as pytree

import onnxsight
from tests.exporter.ops.eager_check import FunctionModule as Fn
from tests.exporter.ops.opinfo_harness import assert_op_passes, compare

OPS = [
    "T", "mT", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "ravel", "permute", "transpose",
    "t", "movedim", "expand", "expand_as", "broadcast_to", "broadcast_tensors", "squeeze", "squeeze.multiple",
    "unsqueeze", "atleast_1d", "atleast_2d", "atleast_3d", "cat", "stack", "hstack", "vstack", "dstack",
    "column_stack", "meshgrid.list_of_tensors", "split", "split.list_args", "split_with_sizes", "unbind", "chunk",
    "tensor_split", "hsplit", "vsplit", "dsplit", "unsafe_split", "unsafe_chunk", "narrow", "narrow_copy",
    "select", "flip", "fliplr", "flipud", "roll", "rot90", "repeat", "tile", "repeat_interleave", "clone",
    "contiguous", "to", "diagonal", "linalg.diagonal", "unfold", "as_strided", "nn.functional.pad.constant",
    "constant_pad_nd", "permute_copy", "t_copy", "view_copy", "squeeze_copy", "unsqueeze_copy", "transpose_copy",
    "unbind_copy", "expand_copy", "diagonal_copy", "alias_copy", "sum_to_size", "_chunk_cat", "resize_",
]


@pytest.mark.parametrize("name", OPS)
def test_opinfo(name: str) -> None:
    assert_op_passes(name)




def assert_like_eager(fn: Callable[..., Any], *tensors: torch.Tensor, opset: int | None = None,
                      dynamic_shapes: Any = None, runs: Sequence[Sequence[torch.Tensor]] = ()) -> onnxsight.ONNXProgram:
    """Export ``fn`` on ``tensors``; its ONNX outputs on ``tensors`` (and on each of ``runs``) must match eager."""
    program = onnxsight.export(Fn(fn), tensors, opset_version=opset, dynamic_shapes=dynamic_shapes)
    for inputs in (tensors, *runs):
        expected = [t for t in pytree.tree_leaves(fn(*inputs)) if isinstance(t, torch.Tensor)]
        actual = program(*inputs)
        assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
        for index, (want, got) in enumerate(zip(expected, actual)):
            problem = compare(want, got)
            shapes = [tuple(t.shape) for t in inputs]
            assert not problem, f"inputs {shapes}, output {index}: {problem}\nexpected {want}\ngot      {got}"
    return program


X = torch.arange(2 * 5 * 4, dtype=torch.float32).reshape(2, 5, 4)


@pytest.mark.parametrize("index", [
    (slice(None), slice(-3, -1)), (slice(None), slice(1, 100)), (slice(None), slice(-100, 2)),
    (slice(None), slice(None, None, 2)), (slice(None), slice(1, None, 3)), (Ellipsis, slice(-1, None)),
    (slice(None), slice(4, 2)), (slice(None), slice(5, None)), (1, slice(None), -1), (-1,), (Ellipsis, None, 0),
], ids=str)
def test_slice_and_select(index: tuple) -> None:
    assert_like_eager(lambda x: x[index] + 0, X)


def test_narrow_negative_start() -> None:
    assert_like_eager(lambda x: x.narrow(1, -3, 2) + 0, X)


def test_squeeze_leaves_dims_that_are_not_one() -> None:
    x = torch.randn(1, 3, 1, 2)
    assert_like_eager(lambda t: (t.squeeze(1), t.squeeze((0, 1, 2)), t.squeeze(), t.squeeze(-2)), x)


@pytest.mark.parametrize("fn", [
    lambda t: t.squeeze(), lambda t: t.squeeze(1), lambda t: t.squeeze((1, 2)), lambda t: t.squeeze(1) * 2,
], ids=["all", "dim", "dims", "then-elementwise"])
def test_squeeze_of_a_dynamic_dim_is_decided_when_the_model_runs(fn: Callable[..., Any]) -> None:
    """A dim that is dynamic may be 1 when the model runs, whatever the example: eager drops it then, and so
    does the graph (PyTorch's test_squeeze_all_dims: (2, 1, 4) gives (2, 4), (2, 2, 3) keeps its rank)."""
    dynamic = (({0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC, 2: torch.export.Dim.DYNAMIC},),)
    program = assert_like_eager(fn, torch.randn(2, 1, 4), dynamic_shapes=dynamic,
                                runs=[(torch.randn(2, 2, 3),), (torch.randn(3, 1, 1),), (torch.randn(1, 5, 1),)])
    assert "Compress" in [node.op_type for node in program.model_proto.graph.node]


def test_squeeze_of_static_dims_is_one_squeeze() -> None:
    program = assert_like_eager(lambda t: t.squeeze((1, 2)), torch.randn(2, 1, 4),
                                dynamic_shapes=(({0: torch.export.Dim("batch")},),), runs=[(torch.randn(5, 1, 4),)])
    assert [node.op_type for node in program.model_proto.graph.node] == ["Squeeze"]


def test_cat_promotes_and_skips_legacy_empty() -> None:
    a, b = torch.randn(2, 3), torch.arange(6, dtype=torch.int32).reshape(2, 3)
    assert_like_eager(lambda x, y, e: torch.cat([x, y, e], 0), a, b, torch.empty(0))


def test_cat_on_a_negative_dim_keeps_it() -> None:
    # a KV cache's torch.cat(..., dim=-2) as Concat(axis=-2), the form onnxscript's cache attention rule matches
    program = assert_like_eager(lambda past, new: torch.cat([past, new], -2), torch.randn(1, 2, 5, 4),
                                torch.randn(1, 2, 1, 4))
    (concat,) = (n for n in program.model_proto.graph.node if n.op_type == "Concat")
    assert [a.i for a in concat.attribute if a.name == "axis"] == [-2]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.float16, torch.float64])
def test_to_copy_casts(dtype: torch.dtype) -> None:
    x = torch.tensor([[-2.7, -0.4, 0.0], [0.5, 1.9, 3.0]])
    assert_like_eager(lambda t: t.to(dtype), x)


def test_int_and_bool_tensors_through_views() -> None:
    x = torch.arange(24).reshape(2, 3, 4)
    assert_like_eager(lambda t: (t.permute(2, 0, 1).reshape(4, -1), t.flip(-1), (t > 5).transpose(0, 2),
                                 t.unsqueeze(1).expand(2, 3, 3, 4)), x)


def test_expand_keeps_minus_one_dims() -> None:
    assert_like_eager(lambda t: t.expand(4, -1, 3), torch.randn(2, 1))


def test_repeat_with_more_dims_than_rank() -> None:
    assert_like_eager(lambda t: t.repeat(2, 1, 3), torch.randn(2, 3))


def test_constant_pad_negative_and_value() -> None:
    assert_like_eager(lambda t: torch.constant_pad_nd(t, [1, -1, 2, 0], 3.5), torch.randn(2, 3, 4))


def test_copy_broadcasts_and_casts() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        out.copy_(y)
        return out
    assert_like_eager(fn, torch.randn(3, 4), torch.arange(4))


@pytest.mark.parametrize("opset", [17, 18, 23])
def test_opsets(opset: int) -> None:
    assert_like_eager(lambda t: (t.view(5, 8)[1:4:2], torch.cat(t.split([1, 3], 2)[::-1], 2), t.transpose(1, 2).flip(0),
                                 torch.constant_pad_nd(t, [1, 1]), t.diagonal(1, 1, 2), t.unfold(1, 2, 2)),
                      X, opset=opset)


def test_as_strided_overlapping_windows() -> None:
    assert_like_eager(lambda t: torch.as_strided(t, (3, 4), (2, 1), 1), torch.randn(12))


BATCH = torch.export.Dim("batch", min=3, max=64)


@pytest.mark.parametrize("fn", [
    lambda t: torch.as_strided(t, (t.shape[0], 2, 3), (6, 3, 1)),           # contiguous: a Slice + Reshape
    lambda t: torch.as_strided(t, (t.shape[0], 3, 2), (6, 1, 3)),           # transposed view
    lambda t: torch.as_strided(t, (t.shape[0], 2, 2), (6, 2, 1), 1),        # overlapping, with an offset
    lambda t: torch.as_strided(t, (t.shape[0] - 1, 6), (6, 1)),             # symbolic size expression
    lambda t: torch.as_strided(t, (t.shape[0], 6), (t.stride(0), 1), t.shape[0] - t.shape[0]),
], ids=["contiguous", "transposed", "overlapping_offset", "size_expression", "symbolic_stride_and_offset"])
def test_as_strided_with_symbolic_sizes(fn: Callable[..., Any]) -> None:
    """as_strided with a dynamic batch (ConvNeXt's layer scale, torchvision's stochastic depth) runs at other batches."""
    assert_like_eager(fn, torch.randn(4, 6), dynamic_shapes=(({0: BATCH},),),
                      runs=[(torch.randn(7, 6),), (torch.randn(3, 6),)])


@pytest.mark.parametrize(("dimension", "size", "step"), [(0, 2, 1), (0, 3, 2), (-2, 1, 3), (1, 2, 1)])
def test_unfold_over_a_symbolic_dim(dimension: int, size: int, step: int) -> None:
    """Windows over a dynamic dim are counted in the graph: other lengths give other window counts."""
    dynamic = torch.export.Dim("n", min=5, max=64)
    assert_like_eager(lambda t: t.unfold(dimension, size, step) * 2, torch.randn(6, 5),
                      dynamic_shapes=(({0: dynamic, 1: torch.export.Dim("m", min=5, max=64)},),),
                      runs=[(torch.randn(9, 5),), (torch.randn(5, 7),)])


@pytest.mark.parametrize(("offset", "dim1", "dim2"), [(0, 0, 1), (1, 0, 1), (-2, 0, 1), (2, 1, 0), (0, -1, -2),
                                                      (9, 0, 1)])
def test_diagonal_over_symbolic_dims(offset: int, dim1: int, dim2: int) -> None:
    """The diagonal's length and positions follow the runtime sizes of both dims."""
    n, m = torch.export.Dim("n", min=2, max=64), torch.export.Dim("m", min=2, max=64)
    assert_like_eager(lambda t: torch.diagonal(t, offset, dim1, dim2) + 1, torch.randn(4, 6, 3),
                      dynamic_shapes=(({0: n, 1: m},),), runs=[(torch.randn(7, 3, 3),), (torch.randn(2, 2, 3),)])


def test_diagonal_scatter_over_symbolic_dims() -> None:
    n = torch.export.Dim("n", min=2, max=64)
    assert_like_eager(lambda t, s: torch.diagonal_scatter(t, s, 0, 0, 1), torch.randn(4, 4), torch.randn(4),
                      dynamic_shapes=(({0: n, 1: n}, {0: n}),), runs=[(torch.randn(6, 6), torch.randn(6))])
