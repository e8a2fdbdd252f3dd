"""The naming contract: every FX node's output is the ONNX value of the same name.

Translations return Values that may be shared (a cached constant, a graph
input, another node's value, the same Value twice); the translator must give
each FX node its own name without renaming a value something else still
reads. Each case exports, passes onnx.checker, runs in ONNX Runtime against
eager PyTorch, and checks ``value_names`` name for name.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import onnx
import pytest
import torch
from torch.utils import _pytree as pytree

import onnxsight
from onnxsight.exporter import GraphBuilder, Value


@torch.library.custom_op("naming_test::one", mutates_args=())
def one(x: torch.Tensor) -> torch.Tensor:
    return torch.ones((), dtype=x.dtype)


@one.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty((), dtype=x.dtype)


@torch.library.custom_op("naming_test::same", mutates_args=())
def same(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@same.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("naming_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x * 2, x * 2


@twice.register_fake
def _(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x)


def one_onnx(b: GraphBuilder, x: Value) -> Value:
    return b.scalar(1.0, x)  # the builder's cached constant


def same_onnx(b: GraphBuilder, x: Value) -> Value:
    return x  # an input, returned unchanged


def twice_onnx(b: GraphBuilder, x: Value) -> tuple[Value, Value]:
    doubled = b.op("Mul", x, b.scalar(2.0, x))
    return doubled, doubled  # one Value for both outputs


CUSTOM = {"naming_test::one": one_onnx, "naming_test::same": same_onnx, "naming_test::twice": twice_onnx}


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


CASES = [
    ("index_then_argmax_of_0d", lambda x, s: x[0] + torch.argmax(s), (torch.randn(3, 4), torch.tensor(2.5))),
    ("argmax_of_0d_then_index", lambda x, s: torch.argmax(s) + x[0], (torch.randn(3, 4), torch.tensor(2.5))),
    ("custom_returns_cached_constant", lambda x: torch.ops.naming_test.one(x) * x + (x + 1.0), (torch.randn(3),)),
    ("custom_returns_its_input", lambda x: torch.ops.naming_test.same(x) * 3.0, (torch.randn(2, 3),)),
    ("custom_input_is_the_output", lambda x: torch.ops.naming_test.same(x), (torch.randn(2, 3),)),
    ("same_value_for_two_outputs", lambda x: torch.ops.naming_test.twice(x), (torch.randn(2, 3),)),
    ("same_value_two_outputs_used", lambda x: (lambda p: p[0] - p[1] + p[1])(torch.ops.naming_test.twice(x)),
     (torch.randn(4),)),
    ("cached_constant_returned_by_two_nodes",
     lambda x: torch.ops.naming_test.one(x) + torch.ops.naming_test.one(x) * x + 1.0, (torch.randn(3),)),
    ("multi_output_node", lambda x: torch.topk(x, 2, dim=-1), (torch.randn(3, 5),)),
    ("multi_output_node_one_output_read", lambda x: torch.max(x, dim=1)[1] + 1, (torch.randn(3, 5),)),
]


def _produced(graph: onnx.GraphProto) -> set[str]:
    names = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    for node in graph.node:
        names.update(node.output)
    return names


def _assert_names_follow_fx(program: Any) -> None:
    """Every non-getitem FX call's output(s) are ONNX values named ``node`` / ``node__i``."""
    produced = _produced(program.model_proto.graph)
    names = program.value_names
    for node in program.exported_program.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        multi = isinstance(node.meta.get("val"), (list, tuple))
        keys = [k for k in names if k.startswith(f"{node.name}__")] if multi else [node.name]
        assert keys, f"no value_names entry for {node.name}"
        for key in keys:
            assert names[key] == key, f"{key} is named {names[key]}"
            assert key in produced, f"{key} is not produced by any ONNX node"


@pytest.mark.parametrize(("case", "fn", "args"), CASES, ids=[c[0] for c in CASES])
def test_each_fx_node_gets_its_own_name_and_the_model_runs(case: str, fn: Callable[..., Any], args: tuple) -> None:
    program = onnxsight.export(Fn(fn), args, custom_translations=CUSTOM, optimize=False)  # the translator's names
    onnx.checker.check_model(program.model_proto, full_check=True)
    expected = [t for t in pytree.tree_leaves(fn(*args)) if isinstance(t, torch.Tensor)]
    actual = program(*args)
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual):
        torch.testing.assert_close(got, want)
    _assert_names_follow_fx(program)


def test_constant_cache_keeps_its_name_after_a_node_returns_it() -> None:
    """The cached constant stays produced under its own name; the FX node reads it through an Identity."""
    program = onnxsight.export(Fn(lambda x: torch.ops.naming_test.one(x) * x + (x + 1.0)), (torch.randn(3),),
                               custom_translations=CUSTOM, optimize=False)
    graph = program.model_proto.graph
    (one_node,) = [n for n in program.exported_program.graph.nodes if "one" in str(n.target)]
    (producer,) = [n for n in graph.node if one_node.name in n.output]
    assert producer.op_type == "Identity"
    (constant,) = [n for n in graph.node if producer.input[0] in n.output]
    assert constant.op_type == "Constant"


def test_a_node_output_is_named_directly_without_identity() -> None:
    """A value produced by the translation's own node gets the FX name itself (no extra Identity)."""
    program = onnxsight.export(Fn(lambda x: torch.relu(x) * 2.0), (torch.randn(3),))
    ops = [n.op_type for n in program.model_proto.graph.node]
    assert "Identity" not in ops
    assert [n.output[0] for n in program.model_proto.graph.node if n.op_type == "Relu"] == ["relu"]
