"""The repro reducer: the smallest ONNX subgraph, fed with PyTorch's values, that still diverges.

A root cause is the first value whose inputs matched and whose output did
not. Its repro starts as the ONNX nodes between it and the nearest compared
values (one node for a one-to-one translation), fed with PyTorch's values of
those inputs. When that alone does not diverge (in propagated mode a value
can diverge only because its inputs carried small, in-tolerance
differences: a threshold, an argmax, a cancellation), the subgraph grows by
one level of producers at a time, always fed with PyTorch's values, until
it diverges or reaches the graph inputs.

The PyTorch values are taken from one more run of the exported program,
after verification and only when it found a root cause; only the values a
candidate subgraph reads are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from onnxsight.verification._bundle import ReproCase, capture_repro
from onnxsight.verification._graph import GraphIndex, chunk_inputs
from onnxsight.verification._metrics import compare, real_view, to_numpy
from onnxsight.verification._runners import OrtRunner, TorchRunner
from onnxsight.verification._tolerance import Tolerance, dtype_name

# NOTE: each level adds the producers of every fed value; six levels already cover the
# cases seen (a threshold or argmax fed by an in-tolerance drift two or three values up),
# and a larger subgraph is no longer a "minimal" repro a runtime maintainer can read.
MAX_LEVELS = 6


@dataclass(frozen=True)
class Level:
    """One candidate subgraph: the nodes computing ``value`` when the values in ``stop`` are fed."""

    stop: frozenset[str]
    nodes: tuple[int, ...]
    inputs: tuple[str, ...]


def levels(index: GraphIndex, value: str, compared: set[str], *, max_levels: int = MAX_LEVELS) -> list[Level]:
    """Candidate subgraphs for ``value``, smallest first: each feeds one level of producers less."""
    stop = set(compared) - {value}
    found: list[Level] = []
    for _ in range(max_levels):
        nodes = index.slice([value], stop)
        inputs = chunk_inputs(index, nodes, {})
        found.append(Level(frozenset(stop), tuple(nodes), tuple(inputs)))
        grown = stop - set(inputs)
        if grown == stop:  # every input is a graph input: nothing left to grow into
            break
        stop = grown
    return found


def reduce_repros(prog: Any, index: GraphIndex, pairs: Sequence[Any], roots: Sequence[str],
                  user_inputs: Sequence[Any], feeds: Mapping[str, np.ndarray], tolerance: Tolerance,
                  providers: Sequence[str], *, device: str = "cpu") -> dict[str, ReproCase]:
    """The smallest diverging repro of each root cause in ``roots`` (one more PyTorch run for all)."""
    compared = {p.value for p in pairs}
    candidates = {value: levels(index, value, compared) for value in roots}
    needed = set(roots) | {n for found in candidates.values() for level in found for n in level.inputs}
    values = _torch_values(prog, pairs, needed, user_inputs, device)
    values.update({k: v for k, v in feeds.items() if k in needed})
    runner = OrtRunner(providers)
    runner.activate()
    cases: dict[str, ReproCase] = {}
    for value, found in candidates.items():
        case = _smallest(index, value, found, values, tolerance, runner)
        if case is not None:
            cases[value] = case
    runner.deactivate()
    return cases


def _smallest(index: GraphIndex, value: str, found: Sequence[Level], values: Mapping[str, np.ndarray],
              tolerance: Tolerance, runner: OrtRunner) -> ReproCase | None:
    expected = values.get(value)
    if expected is None:
        return None
    last: ReproCase | None = None
    for depth, level in enumerate(found):
        case = capture_repro(index, value, set(level.stop), expected, values.get)
        if case is None:
            break
        diff, diverges = _run(case, value, tolerance, runner)
        last = case.annotated(level=depth, onnx_nodes=len(level.nodes), reproduced=diverges,
                              max_abs_diff_standalone=diff, atol_rtol=_bounds(tolerance, value, expected),
                              nodes=fx_nodes_of(case))
        if diverges:
            return last
    return last


def _bounds(tolerance: Tolerance, value: str, expected: np.ndarray) -> tuple[float, float]:
    bounds = tolerance.for_value(value, dtype_name(expected.dtype))
    return bounds.atol, bounds.rtol


def _run(case: ReproCase, value: str, tolerance: Tolerance, runner: OrtRunner) -> tuple[float, bool]:
    """(max abs diff, diverges) of the case's subgraph on ONNX Runtime against the expected output."""
    try:
        runner.load(case.model)
        actual = runner.infer(dict(case.inputs))[value]
    except Exception:  # noqa: BLE001 - a subgraph ONNX Runtime cannot run reproduces a failure too
        return float("nan"), True
    dtype = dtype_name(case.expected.dtype)
    bounds = tolerance.loosest(value, dtype, runner.output_types.get(value, dtype))
    metrics = compare(case.expected, actual, bounds, expected_dtype=dtype,
                      actual_dtype=runner.output_types.get(value, dtype))
    return metrics.max_abs_diff, not metrics.passed


def _torch_values(prog: Any, pairs: Sequence[Any], needed: set[str], user_inputs: Sequence[Any],
                  device: str) -> dict[str, np.ndarray]:
    """PyTorch's values of the ``needed`` compared values, from one run that frees everything else."""
    by_node: dict[Any, list[Any]] = {}
    for pair in pairs:
        if pair.value in needed:
            by_node.setdefault(pair.node.name, []).append(pair)
    runner = TorchRunner(prog.exported_program, device=device)
    runner.activate()
    found: dict[str, np.ndarray] = {}
    done: set[Any] = set()
    try:
        for node, result in runner.iterate(user_inputs):
            done.add(node)
            for pair in by_node.get(node.name, ()):
                found[pair.value] = real_view(to_numpy(result[pair.index] if pair.index is not None else result))
            if len(found) == len({p.value for ps in by_node.values() for p in ps}):
                break
            for source in node.all_input_nodes:
                if source.op != "placeholder" and all(u in done for u in source.users if u.op != "output"):
                    runner.release(source)
    finally:
        runner.deactivate()
    return found


def fx_nodes_of(case: ReproCase) -> list[dict[str, Any]]:
    """The ONNX nodes of the subgraph with the FX node and user line behind each (from their metadata)."""
    from onnxsight.diagnostics import parse_stack_trace, user_frame

    found: list[dict[str, Any]] = []
    for node in case.model.graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        fx = meta.get("pkg.torch.onnx.fx_node", "").split(" ")[0].lstrip("%") or None
        frame = user_frame(parse_stack_trace(meta.get("pkg.torch.onnx.stack_trace")))
        found.append({"onnx_node": node.name or node.op_type, "op_type": node.op_type, "fx_node": fx,
                      "file": frame.file if frame else None, "line": frame.line if frame else None})
    return found
