"""Shared by the nn/norm/attention/linalg tests: export at an opset, compare with eager, report op types."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch.utils import _pytree as pytree

import onnxsight
from tests.exporter.ops.eager_check import FunctionModule as Fn
from tests.exporter.ops.op_tolerances import CURATED
from tests.exporter.ops.opinfo_harness import compare, opinfo_table, run_sample, samples


def export_and_compare(fn: Callable[..., Any] | torch.nn.Module, *tensors: torch.Tensor, opset: int | None = None,
                       dynamic_shapes: Any = None) -> list[str]:
    """Export ``fn``, check ONNX Runtime's outputs against eager; return the graph's op types in order."""
    module = fn if isinstance(fn, torch.nn.Module) else Fn(fn)
    module.eval()
    with torch.no_grad():
        expected = [t for t in pytree.tree_leaves(module(*tensors)) if isinstance(t, torch.Tensor)]
    program = onnxsight.export(module, tensors, opset_version=opset, dynamic_shapes=dynamic_shapes)
    actual = program(*tensors)
    assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
    for index, (want, got) in enumerate(zip(expected, actual)):
        problem = compare(want, got, tolerance=CURATED)
        assert not problem, f"output {index}: {problem}"
    return [node.op_type for node in program.model_proto.graph.node]


def assert_samples_pass(name: str, *, keep: Callable[[Any], bool], limit: int = 4,
                        opset: int | None = None) -> None:
    """Like ``assert_op_passes`` for the samples ``keep`` accepts (leaving out random ones, e.g. dropout)."""
    info = opinfo_table()[name]
    results = [run_sample(name, info, i, s, opset=opset, tolerance=CURATED)
               for i, s in enumerate(samples(info, limit)) if keep(s)]
    failures = [r for r in results if r.status not in ("passed", "capture", "skipped")]
    assert any(r.status == "passed" for r in results), f"{name}: no sample passed: {results}"
    assert not failures, "\n".join(f"{r.op}[{r.index}] {r.status}: {r.detail}" for r in failures)


def count(op_types: Iterable[str], op_type: str) -> int:
    return sum(1 for t in op_types if t == op_type)
