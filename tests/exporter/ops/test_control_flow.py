"""Higher-order control flow (torch.cond, while_loop, scan, map) exported and run in ONNX Runtime."""

from __future__ import annotations

from typing import Any

import onnx
import pytest
import torch
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop
from torch.utils import _pytree as pytree

import onnxsight


def _check(model: torch.nn.Module, *inputs_list: tuple[Any, ...], atol: float = 1e-5) -> onnx.ModelProto:
    """Export with the first inputs, then compare ONNX Runtime with eager on every input tuple."""
    model.eval()
    program = onnxsight.export(model, inputs_list[0])
    for inputs in inputs_list:
        expected = [t for t in pytree.tree_leaves(model(*inputs)) if isinstance(t, torch.Tensor)]
        actual = program(*inputs)
        assert len(actual) == len(expected)
        for want, got in zip(expected, actual):
            assert got.shape == want.shape and got.dtype == want.dtype
            torch.testing.assert_close(got, want, atol=atol, rtol=1e-4)
    return program.model_proto


def _op_types(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


class Cond(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t.sin() + 1, lambda t: t.cos() * 2, (x,))


class CondTwoOutputs(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def true_fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return a + b, a - b

        def false_fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return a * b, b.clone()

        return torch.cond(x.sum() > y.sum(), true_fn, false_fn, (x, y))


class NestedCond(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def inner_true(t: torch.Tensor) -> torch.Tensor:
            return t * 3

        def inner_false(t: torch.Tensor) -> torch.Tensor:
            return t - 5

        def outer_true(t: torch.Tensor) -> torch.Tensor:
            return torch.cond(t[0, 0] > 0, inner_true, inner_false, (t,)) + 1

        def outer_false(t: torch.Tensor) -> torch.Tensor:
            return t.cos()

        return torch.cond(x.sum() > 0, outer_true, outer_false, (x,))


class CondWithParameters(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("offset", torch.tensor([0.5, -1.0, 2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: self.lin(t).relu(), lambda t: t + self.offset, (x,))


class CondPassThrough(torch.nn.Module):
    """A branch that returns its operand unchanged: the If body needs an Identity."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t.clone(), lambda t: t * -1, (x,))


POSITIVE = torch.tensor([[1.0, 2.0, 3.0], [0.5, -0.1, 0.2]])
NEGATIVE = -POSITIVE


@pytest.mark.parametrize("model", [Cond(), CondWithParameters(), CondPassThrough()], ids=type)
def test_cond_both_branches(model: torch.nn.Module) -> None:
    proto = _check(model, (POSITIVE,), (NEGATIVE,))
    assert "If" in _op_types(proto)


def test_cond_two_outputs() -> None:
    x, y = torch.randn(4), torch.randn(4)
    _check(CondTwoOutputs(), (x + 10, y), (x - 10, y))


def test_nested_cond() -> None:
    proto = _check(NestedCond(), (POSITIVE,), (NEGATIVE,), (torch.tensor([[-1.0, 5.0, 5.0], [1.0, 1.0, 1.0]]),))
    (outer,) = [n for n in proto.graph.node if n.op_type == "If"]
    then_branch = next(a.g for a in outer.attribute if a.name == "then_branch")
    assert "If" in [n.op_type for n in then_branch.node]


def test_cond_branch_reads_lifted_parameters() -> None:
    model = CondWithParameters()
    proto = _check(model, (POSITIVE,), (NEGATIVE,))
    initializers = {t.name for t in proto.graph.initializer}
    assert {"lin.weight", "lin.bias"} <= initializers
    (node,) = [n for n in proto.graph.node if n.op_type == "If"]
    then_inputs = {i for attr in node.attribute if attr.name == "then_branch" for n in attr.g.node for i in n.input}
    assert {"lin.weight", "lin.bias"} <= then_inputs


class CountTo(torch.nn.Module):
    """while_loop to a bound that is tensor data."""

    def forward(self, bound: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def cond_fn(i: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
            return i < bound

        def body_fn(i: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, acc * 2 + 1

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


class CountUntilSum(torch.nn.Module):
    """while_loop whose condition reads the carried tensor's data."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def cond_fn(i: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
            return acc.sum() < 100

        def body_fn(i: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, acc + acc.abs() + 1

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


def test_while_loop_counts_to_data_dependent_bound() -> None:
    x = torch.randn(3)
    proto = _check(CountTo(), (torch.tensor(5), x), (torch.tensor(0), x), (torch.tensor(9), x))
    assert "Loop" in _op_types(proto)


def test_while_loop_condition_on_carried_data() -> None:
    _check(CountUntilSum(), (torch.rand(3),), (torch.full((3,), 200.0),), (torch.rand(3) * 10,))


class AddStepPerRow(torch.nn.Module):
    """A while_loop whose Python-int counter selects the row it writes in place (PyTorch's
    test_onnx_export_while_loop_int_carry): the write is a select_scatter at an unbacked index."""

    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        def more(step: Any, rows: torch.Tensor) -> Any:
            return step < rows.shape[0]

        def body(step: Any, rows: torch.Tensor) -> tuple[Any, torch.Tensor]:
            rows = rows.clone()
            torch._check(step >= 0)
            torch._check(step < rows.shape[0])
            rows.select(0, step).copy_(rows.select(0, step) * 2 + step)
            return step + 1, rows

        steps, rows = torch.ops.higher_order.while_loop(more, body, (0, x), ())  # the operator, as upstream calls it
        torch._check(steps > 0)
        return rows, steps * 3, torch.zeros(steps + 1)


def test_while_loop_int_carry_indexes_an_in_place_write() -> None:
    model, x = AddStepPerRow(), torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    program = onnxsight.export(model, (x,), verify=True)
    assert program.verification.passed
    other = torch.randn(3, 2)
    rows, steps, zeros = program(other)
    expected_rows, expected_steps, expected_zeros = model(other)
    torch.testing.assert_close(rows, expected_rows)
    assert int(steps) == expected_steps and zeros.shape == expected_zeros.shape


class CumulativeSum(torch.nn.Module):
    def forward(self, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def combine(carry: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            total = carry + x
            return total, total.clone()

        return scan(combine, torch.zeros_like(xs[0]), xs)


class ScanWithWeight(torch.nn.Module):
    """Two carries, an additional input (a parameter) and scan over dim 1 in reverse."""


    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3))

    def forward(self, xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        def combine(carry: tuple[torch.Tensor, torch.Tensor],
                    x: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
            total, count = carry
            total = total * 0.5 + x * self.weight
            return (total, count + 1), total.clone()

        init = (torch.zeros(2, 3), torch.zeros(()))
        return scan(combine, init, xs, dim=1, reverse=True)


def test_scan_cumulative_sum() -> None:
    model = CumulativeSum()
    xs = torch.randn(5, 3)
    proto = _check(model, (xs,))
    assert "Scan" in _op_types(proto)
    torch.testing.assert_close(onnxsight.export(model, (xs,))(xs)[1], xs.cumsum(0))


def test_scan_carries_additional_inputs_reverse() -> None:
    _check(ScanWithWeight(), (torch.randn(2, 4, 3),))


class MapRows(torch.nn.Module):
    def forward(self, xs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        from functorch.experimental.control_flow import map as control_flow_map

        return control_flow_map(lambda x, w: (x * w).sin(), xs, y)


def test_map() -> None:
    _check(MapRows(), (torch.randn(4, 3), torch.randn(3)))


def test_subgraph_value_names_are_unique() -> None:
    """ONNX wants one name per value across the graph and all its bodies."""
    proto = onnxsight.export(NestedCond(), (POSITIVE,)).model_proto
    names: list[str] = []

    def collect(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            names.extend(o for o in node.output if o)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    collect(attr.g)

    collect(proto.graph)
    assert len(names) == len(set(names))
    onnx.checker.check_model(proto, full_check=True)



class CondOnShape(torch.nn.Module):
    """The predicate is a SymBool (a comparison of a dynamic dimension)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.shape[0] > 4, lambda t: t.sin(), lambda t: t.cos(), (x,))


def test_cond_on_symbolic_predicate() -> None:
    model = CondOnShape()
    batch = torch.export.Dim("batch", min=2, max=64)
    program = onnxsight.export(model, (torch.randn(3, 2),), dynamic_shapes=({0: batch},))
    for rows in (3, 8):
        x = torch.randn(rows, 2)
        torch.testing.assert_close(program(x)[0], model(x))
