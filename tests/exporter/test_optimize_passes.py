"""Each optimisation pass on a small hand-built graph: the nodes it removes, the values it keeps, and the same
results as the graph before it (run by onnx's reference evaluator)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnxsight.exporter.optimize import _attention, _fold, _simplify
from onnxsight.exporter.optimize._graph import Graph
from onnxsight.exporter.optimize._passes import dead_code

F = TensorProto.FLOAT


def _graph(nodes: list[onnx.NodeProto], inputs: dict[str, list[int]], outputs: dict[str, list[int] | None],
           initializers: dict[str, torch.Tensor]) -> Graph:
    proto = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
                              [helper.make_tensor_value_info(n, F, s) for n, s in outputs.items()])
    return Graph.build(proto, dict(initializers), {"": 18}, weights=set())


def _run(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    graph.commit()
    inits = [onnx.numpy_helper.from_array(t.contiguous().numpy(), name) for name, t in graph.initializers.items()
             if name in {i for n in graph.nodes for i in n.input}]
    proto = onnx.GraphProto()
    proto.CopyFrom(graph.proto)
    proto.initializer.extend(inits)
    return ReferenceEvaluator(helper.make_model(proto, opset_imports=[helper.make_opsetid("", 18)])).run(None, feeds)


def _axes(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def _weight(*shape: int) -> torch.Tensor:
    """The same values at every build (a case's graph is built twice: before and after its pass)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


CASES: list[tuple[str, Callable[[], Graph], Callable[[Graph], int], list[str]]] = [
    ("transpose-pair", lambda: _graph(
        [helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 1, 3]),
         helper.make_node("Transpose", ["t1"], ["y"], perm=[0, 1, 3, 2])],
        {"x": [1, 2, 3, 4]}, {"y": None}, {}), _simplify.transpose_pairs, ["Transpose"]),
    ("transpose-pair-identity", lambda: _graph(
        [helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0]),
         helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0]),
         helper.make_node("Relu", ["t2"], ["y"])],
        {"x": [2, 3]}, {"y": None}, {}), _simplify.transpose_pairs, ["Relu"]),
    ("unsqueeze-pair", lambda: _graph(
        [helper.make_node("Unsqueeze", ["x", "a0"], ["u1"]), helper.make_node("Unsqueeze", ["u1", "a1"], ["y"])],
        {"x": [3, 4]}, {"y": None}, {"a0": _axes(0), "a1": _axes(-1)}), _simplify.unsqueeze_pairs,
     ["Unsqueeze"]),
    ("squeeze-of-unsqueeze", lambda: _graph(
        [helper.make_node("Unsqueeze", ["x", "a0"], ["u1"]), helper.make_node("Squeeze", ["u1", "a0"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])],
        {"x": [3, 4]}, {"y": None}, {"a0": _axes(1)}), _simplify.unsqueeze_pairs, ["Relu"]),
    ("reshape-pair", lambda: _graph(
        [helper.make_node("Reshape", ["x", "s0"], ["r1"]), helper.make_node("Reshape", ["r1", "s1"], ["y"])],
        {"x": [2, 6]}, {"y": None}, {"s0": _axes(3, 4), "s1": _axes(4, -1)}), _simplify.reshape_pairs,
     ["Reshape"]),
    ("identity", lambda: _graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["i"]),
         helper.make_node("Neg", ["i"], ["y"])],
        {"x": [2]}, {"y": None}, {}), _simplify.identities, ["Relu", "Neg"]),
    ("linear-on-3d", lambda: _graph(   # GPT-2's Conv1D: view, addmm, view
        [helper.make_node("Reshape", ["x", "flat"], ["f"]), helper.make_node("Gemm", ["f", "w", "b"], ["g"]),
         helper.make_node("Reshape", ["g", "back"], ["y"])],
        {"x": [2, 3, 4]}, {"y": [2, 3, 5]}, {"flat": _axes(-1, 4), "back": _axes(2, 3, 5), "w": _weight(4, 5),
                                             "b": _weight(5)}), _simplify.linear_reshapes, ["MatMul", "Add"]),
    ("linear-after-heads-merge", lambda: _graph(   # the heads (batch, seq, heads, head) merged into the 2-D input
        [helper.make_node("Reshape", ["x", "flat"], ["f"]), helper.make_node("Gemm", ["f", "w", "b"], ["g"]),
         helper.make_node("Reshape", ["g", "back"], ["y"])],
        {"x": [2, 3, 2, 2]}, {"y": [2, 3, 5]}, {"flat": _axes(6, 4), "back": _axes(2, 3, 5), "w": _weight(4, 5),
                                                "b": _weight(5)}), _simplify.linear_reshapes,
     ["Reshape", "MatMul", "Add"]),
    ("constant-folding", lambda: _graph(
        [helper.make_node("Range", ["s", "e", "d"], ["r"]), helper.make_node("Cast", ["r"], ["c"], to=F),
         helper.make_node("Add", ["x", "c"], ["y"])],
        {"x": [4]}, {"y": None}, {"s": torch.tensor(0), "e": torch.tensor(4), "d": torch.tensor(1)}),
     lambda g: _fold.fold_constants(g, 18), ["Add"]),
]


@pytest.mark.parametrize(("case", "build", "run", "left"), CASES, ids=[c[0] for c in CASES])
def test_pass_removes_what_it_should_and_computes_the_same(case: str, build: Callable[[], Graph],
                                                           run: Callable[[Graph], int], left: list[str]) -> None:
    graph = build()
    shape = [d.dim_value for d in graph.proto.input[0].type.tensor_type.shape.dim]
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    before = _run(build(), feeds)
    assert run(graph) > 0
    dead_code(graph)
    assert [n.op_type for n in graph.nodes] == left
    for want, got in zip(before, _run(graph, feeds)):
        np.testing.assert_array_equal(got, want)


def test_a_linear_layer_whose_output_is_not_its_inputs_rows_keeps_its_reshapes() -> None:
    # the Gemm's rows regrouped (2 x 3 rows read back as 3 x 2): not x's own leading dims, so not a MatMul on x
    graph = _graph([helper.make_node("Reshape", ["x", "flat"], ["f"]), helper.make_node("Gemm", ["f", "w", "b"], ["g"]),
                    helper.make_node("Reshape", ["g", "back"], ["y"])], {"x": [2, 3, 4]}, {"y": [3, 2, 5]},
                   {"flat": _axes(-1, 4), "back": _axes(3, 2, 5), "w": torch.randn(4, 5), "b": torch.randn(5)})
    assert _simplify.linear_reshapes(graph) == 0
    graph = _graph([helper.make_node("Reshape", ["x", "flat"], ["f"]), helper.make_node("Gemm", ["f", "w", "b"], ["g"],
                                                                                        transB=1),
                    helper.make_node("Reshape", ["g", "back"], ["y"])], {"x": [2, 3, 4]}, {"y": [2, 3, 5]},
                   {"flat": _axes(-1, 4), "back": _axes(2, 3, 5), "w": torch.randn(5, 4), "b": torch.randn(5)})
    assert _simplify.linear_reshapes(graph) == 0   # transB: the weight as Gemm reads it, not as MatMul would


def test_a_value_read_by_two_nodes_is_not_merged_away() -> None:
    graph = _graph([helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0]),
                    helper.make_node("Transpose", ["t1"], ["y"], perm=[1, 0]),
                    helper.make_node("Relu", ["t1"], ["z"])], {"x": [2, 3]}, {"y": None, "z": None}, {})
    assert _simplify.transpose_pairs(graph) == 0


def test_a_graph_output_is_never_bypassed() -> None:
    graph = _graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"])],
                   {"x": [2]}, {"y": None}, {})
    assert _simplify.identities(graph) == 0


@pytest.mark.parametrize(("mask", "kept"), [
    (torch.zeros(1, 1, 3, 3), []),                                         # all attend: mask and guard go
    (torch.tensor([[0.0, -float("inf"), 0.0]] * 3), ["Add"]),              # a partial mask: the guard goes
    (torch.tensor([[-float("inf")] * 3, [0.0] * 3, [0.0] * 3]), None),      # a dead row: everything stays
])
@pytest.mark.parametrize("row_max", ["ReduceMax", "TopK"])
def test_constant_attention_masks(mask: torch.Tensor, kept: list[str] | None, row_max: str) -> None:
    maximum = helper.make_node("ReduceMax", ["s", "axes"], ["m"], keepdims=1) if row_max == "ReduceMax" \
        else helper.make_node("TopK", ["s", "one"], ["m", "index"], axis=-1)
    nodes = [helper.make_node("Add", ["x", "mask"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             maximum,
             helper.make_node("Equal", ["m", "ninf"], ["dead"]),
             helper.make_node("Where", ["dead", "zero", "p"], ["w"]), helper.make_node("Neg", ["w"], ["y"])]
    graph = _graph(nodes, {"x": [1, 2, 3, 3]}, {"y": None},
                   {"mask": mask, "axes": _axes(-1), "ninf": torch.tensor(-float("inf")), "zero": torch.tensor(0.0),
                    "one": torch.tensor([1])})
    graph.proto.value_info.append(helper.make_tensor_value_info("x", F, [1, 2, 3, 3]))
    changed = _attention.constant_masks(graph)
    dead_code(graph)
    ops = [n.op_type for n in graph.nodes]
    if kept is None:
        assert changed == 0 and row_max in ops
    else:
        assert ops == [*kept, "Softmax", "Neg"]
