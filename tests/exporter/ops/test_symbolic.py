"""Dynamic shapes: models exported at batch 2 with a symbolic batch dim, run in ONNX Runtime at 1, 3 and 7.

These reach aten.sym_size, the Python arithmetic on SymInts that torch.export
records (operator.add/mul/floordiv/mod/truediv, math.ceil, torch.sym_max...)
and the shape ops that take symbolic sizes.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch
from torch.export import Dim

import onnxsight
from tests.exporter.ops.opinfo_harness import compare

BATCHES = (1, 3, 7)


class One(torch.nn.Module):
    """``fn(x)`` as a module whose input is named ``x`` (for ``dynamic_shapes={"x": ...}``)."""

    def __init__(self, fn: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(x)


def assert_dynamic_like_eager(fn: Callable[[torch.Tensor], Any], *, dims: dict[int, Any] | None = None,
                              shape: tuple[int, ...] = (2, 3, 4), opset: int | None = None) -> None:
    """Export at ``shape`` with dim 0 symbolic (or ``dims``); compare with eager at batch 1, 3 and 7."""
    dims = dims if dims is not None else {0: Dim("batch")}
    program = onnxsight.export(One(fn), (torch.randn(shape),), dynamic_shapes={"x": dims}, opset_version=opset)
    for batch in BATCHES:
        x = torch.randn(batch, *shape[1:])
        expected = fn(x)
        expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        actual = program(x)
        assert len(actual) == len(expected)
        for index, (want, got) in enumerate(zip(expected, actual)):
            problem = compare(want, got)
            assert not problem, f"batch {batch}, output {index}: {problem}"


# NOTE: at example batch 2, ``x[:min(b, 2)]`` or a split of ``b - 1`` rows specialise the batch
# (size-1 and equality guards); these models are exported at batch 4 instead.
AT_4 = {0: Dim.DYNAMIC}

MODELS: dict[str, tuple[Callable[[torch.Tensor], Any], dict[int, Any] | None]] = {
    "view-minus-one": (lambda x: (x.view(x.shape[0], -1), x.reshape(-1, 4), x.flatten(0, 1)), None),
    "view-product": (lambda x: x.reshape(x.shape[0] * 3, 4).unflatten(0, (x.shape[0], 3)), None),
    "expand": (lambda x: x[:, :1].expand(x.shape[0], 3, 4) + x.new_ones(1).expand(x.shape[0], 1, 1), None),
    "arange": (lambda x: (torch.arange(x.shape[0]), torch.arange(0, x.shape[0], 0.5) * 2, x + 0), None),
    "arange-dim1": (lambda x: x + torch.arange(x.shape[1]).view(-1, 1), {0: Dim("batch"), 1: Dim("seq")}),
    "index": (lambda x: (x[torch.arange(x.shape[0]) % 2], x[:, torch.tensor([2, 0])], x[x > 0]), None),
    "index-put": (lambda x: x.index_put((torch.arange(x.shape[0]) % 2,), torch.tensor(5.0), True), None),
    "cat": (lambda x: (torch.cat([x, x * 2], 0), torch.cat([x, x[:, :1]], 1)), None),
    "zeros": (lambda x: (torch.zeros(x.shape[0] * 2, 3), x.new_ones(torch.sym_max(x.shape[0], 3), 1),
                         torch.full((x.shape[0],), 1.5) * (x.shape[0] / 2)), None),
    "floordiv-mod-ceil": (lambda x: (torch.zeros(x.shape[0] // 2 + 1), torch.zeros(x.shape[0] % 3 + 2),
                                     torch.zeros(math.ceil(x.shape[0] / 3) + 1)), None),
    "sym-float": (lambda x: x * torch.sym_float(x.shape[0]) + torch.tensor(x.shape[0]), None),
    "numel": (lambda x: torch.ones(x.numel() // 4 - x.shape[0]), None),
    "slices": (lambda x: (x[: x.shape[0] - 1], x[-x.shape[0]:], x[: torch.sym_min(x.shape[0], 2)]), AT_4),
    "split-last": (lambda x: x.split([1, x.shape[0] - 1], 0)[1], AT_4),
    "repeat-pad": (lambda x: torch.constant_pad_nd(x.repeat(2, 1, 1), [0, 1, x.shape[0] % 2, 0]), None),
    "scatter-gather": (lambda x: x.gather(2, x.argsort(2)).scatter(1, torch.zeros_like(x[:, :1]).long(), 9.0),
                       None),
}


@pytest.mark.parametrize("name", MODELS)
def test_dynamic_batch(name: str) -> None:
    fn, dims = MODELS[name]
    assert_dynamic_like_eager(fn, dims=dims, shape=(4, 3, 4) if dims is AT_4 else (2, 3, 4))


def test_stride_and_numel_of_dynamic_dims() -> None:
    fn = lambda x: (torch.ones(x.stride(0)), torch.ones(x.numel() - x.shape[0]))  # noqa: E731
    program = onnxsight.export(One(fn), (torch.randn(4, 3, 2),),
                               dynamic_shapes={"x": {0: Dim.DYNAMIC, 2: Dim.DYNAMIC}})
    for shape in [(1, 3, 5), (6, 3, 3)]:
        x = torch.randn(shape)
        assert [t.shape for t in program(x)] == [t.shape for t in fn(x)]


@pytest.mark.parametrize("opset", [17, 23])
def test_dynamic_batch_opsets(opset: int) -> None:
    assert_dynamic_like_eager(MODELS["view-minus-one"][0], opset=opset)
    assert_dynamic_like_eager(MODELS["floordiv-mod-ceil"][0], opset=opset)


def test_symbolic_dims_are_named_in_the_model() -> None:
    program = onnxsight.export(One(lambda x: x.view(x.shape[0], -1)), (torch.randn(2, 3, 4),),
                               dynamic_shapes={"x": {0: Dim("batch")}})
    dims = program.model_proto.graph.output[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == 12


def test_runtime_assertions_emit_no_nodes() -> None:
    program = onnxsight.export(One(lambda x: torch.nonzero(x > 0)), (torch.randn(4, 3),))
    ops = {node.op_type for node in program.model_proto.graph.node}
    assert ops <= {"NonZero", "Transpose", "Constant", "Greater", "Shape", "Squeeze", "GreaterOrEqual",
                   "LessOrEqual", "Cast", "Identity"}, ops


def test_item_becomes_a_scalar() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        count = (x > 0).sum().item()
        return torch.full((2,), count)
    x = torch.randn(5)
    (actual,) = onnxsight.export(One(fn), (x,))(x)
    assert torch.equal(actual, fn(x))


class FloatsOfSizes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple:
        return torch.sym_float(x.shape[0]), x.shape[1] / 3, x * 2


@pytest.mark.parametrize("output_names", [None, ["rows", "ratio", "doubled"]])
def test_python_float_outputs_are_float32_named_after_their_values(output_names: list[str] | None) -> None:
    """A Python float the model returns comes out as torch.tensor(x) holds it (float32: PyTorch's
    test_export_sym_float), computed as a double inside; the output keeps the FX value's name, and
    verification compares it (a Python float is compared at the graph's dtype)."""
    dynamic = ({0: Dim.DYNAMIC, 1: Dim.DYNAMIC},)
    program = onnxsight.export(FloatsOfSizes(), (torch.zeros(2, 2),), dynamic_shapes=dynamic, output_names=output_names)
    outputs = program.model_proto.graph.output
    assert [o.name for o in outputs] == (output_names or ["sym_float", "truediv", "mul"])
    assert [o.type.tensor_type.elem_type for o in outputs] == [1, 1, 1]   # FLOAT
    assert "Cast" in [node.op_type for node in program.model_proto.graph.node]
    x = torch.zeros(5, 7)
    rows, ratio, doubled = program(x)
    assert rows.dtype == ratio.dtype == torch.float32 and rows.item() == 5.0
    torch.testing.assert_close(ratio, torch.tensor(7 / 3))
    assert onnxsight.verify(program, (x,)).passed
