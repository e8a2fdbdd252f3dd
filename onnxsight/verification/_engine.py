"""The per-node engine: one PyTorch pass and chunked ONNX Runtime sessions, compared value by value.

PyTorch runs node by node (an FX Interpreter over the exported program).
Every few nodes, once the values waiting for comparison reach the memory
budget, one ONNX Runtime session computes exactly those values (and what
later chunks read from them), the pairs are compared, and every value no
longer needed on either side is released. Memory is the budget plus the
live values of the forward pass, not the number of nodes.

Propagated mode: ONNX Runtime computes each value from its own upstream
values, as a deployed model would. Isolated mode: each value is computed
from PyTorch's values of its inputs, so a translation error shows where it
is, without the drift accumulated before it.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx

from onnxsight.diagnostics import DiagnosticContext, node_location
from onnxsight.verification._bundle import ReproCase, capture_repro
from onnxsight.verification._chunks import ChunkExecutor, OrtFailure
from onnxsight.verification._coverage import (FOLDED, GRAPH_INPUT, NO_COUNTERPART, NON_TENSOR, OPTIMIZED_AWAY,
                                              OUTPUTS_ONLY, Entry, is_value_node, multi_output_groups, other_layout,
                                              output_indices, placeholder_entries, randomness, tie_order)
from onnxsight.verification._decisions import decision
from onnxsight.verification._graph import GraphIndex
from onnxsight.verification._metrics import compare, onnx_layout, real_view, to_numpy
from onnxsight.verification import _quantization as quant
from onnxsight.verification._root_cause import RootCauseTracker
from onnxsight.verification._runners import OrtRunner, TorchRunner
from onnxsight.verification._tolerance import Tolerance, dtype_name


@dataclass(frozen=True)
class Pair:
    """One FX value and the ONNX value that holds it."""

    value: str                 # ONNX value name
    node: Any                  # the FX node producing it
    index: int | None          # output index for multi-output nodes
    upstream: tuple[str, ...]  # compared values (ONNX names) it reads


@dataclass
class EngineOutput:
    """What the engine hands to the result: rows in topological order and what it captured."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    repros: dict[str, ReproCase] = field(default_factory=dict)
    nodes: dict[str, Any] = field(default_factory=dict)   # value -> FX node
    sessions: int = 0
    chunks: int = 0
    error: str | None = None
    outputs: frozenset[str] = frozenset()  # graph outputs: compared end to end, never excused
    borderline: dict[str, str] = field(default_factory=dict)  # value -> what its borderline decision was
    amplified: dict[str, str] = field(default_factory=dict)  # value -> how close it is on PyTorch's inputs
    rounding: dict[str, str] = field(default_factory=dict)  # quantize value -> its elements one step apart
    # graph output -> (PyTorch's value, the per-node run's value), for the deployed session's check
    output_values: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # graph output -> (its quantization grid's step, the quantize/dequantize node giving it)
    output_steps: dict[str, tuple[float, str]] = field(default_factory=dict)
    # value -> why it was not compared: an optimised model's fused op holds it in another layout
    other_layout: dict[str, str] = field(default_factory=dict)


@dataclass
class Plan:
    """What the engine compares (``pairs``), what it feeds from PyTorch instead of computing
    (``fed``: random and uninitialised values), and every FX value with its reason (``entries``)."""

    pairs: list[Pair] = field(default_factory=list)
    fed: list[Pair] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)


def plan_pairs(graph: Any, value_names: Mapping[str, str], index: GraphIndex, *, per_node: bool) -> list[Pair]:
    """The FX/ONNX value pairs to compare, in topological order, with what each one reads."""
    return plan_values(graph, value_names, index, per_node=per_node).pairs


def plan_values(graph: Any, value_names: Mapping[str, str], index: GraphIndex, *, per_node: bool,
                signature: Any = None) -> Plan:
    """Pair every FX value with its ONNX value, or say why it is not compared (see ``_coverage``)."""
    plan = Plan()
    pairs: dict[str, list[Pair]] = {}
    upstream_cache: dict[str, tuple[str, ...]] = {}
    outputs = set(index.graph_outputs)
    groups = multi_output_groups(value_names)
    known = set(index.producer) | set(index.initializers) | set(index.graph_inputs)

    def values_of(node: Any) -> tuple[str, ...]:
        if node.target is operator.getitem and node.args[0].name in pairs:
            wanted = [p.value for p in pairs[node.args[0].name] if p.index == node.args[1]]
            if wanted:
                return tuple(wanted)
        if node.name in pairs:
            return tuple(p.value for p in pairs[node.name])
        return upstream(node)

    def upstream(node: Any) -> tuple[str, ...]:
        if node.name not in upstream_cache:
            seen: dict[str, None] = {}
            for inp in node.all_input_nodes:
                seen.update(dict.fromkeys(values_of(inp)))
            upstream_cache[node.name] = tuple(seen)
        return upstream_cache[node.name]

    if signature is not None:
        plan.entries.extend(placeholder_entries(graph, signature, value_names))
    for node in graph.nodes:
        if not is_value_node(node, value_names, groups):
            continue
        random = randomness(node)
        found: list[Pair] = []
        for i in output_indices(node, value_names, groups):
            key = node.name if i is None else f"{node.name}__{i}"
            name = value_names.get(key)
            if name is None or name not in known:
                val = node.meta.get("val")
                element = val[i] if i is not None and isinstance(val, (tuple, list)) else val
                reason = NON_TENSOR if not _is_tensor(element) else (  # what it draws says more than a pass
                    random or (OPTIMIZED_AWAY if (name or key) in index.optimized_away else NO_COUNTERPART))
                plan.entries.append(Entry(name or key, node, i, reason))
                continue
            pair = Pair(name, node, i, upstream(node))
            # a graph output keeps its comparison (a value not compared fails the run: ACC009)
            fed = random or (tie_order(node, i) if name not in outputs else None)
            if fed is not None:
                plan.fed.append(pair)
                reason: str | None = fed
            elif not index.is_computed(name):
                reason = GRAPH_INPUT if name in index.graph_inputs else FOLDED
            elif not per_node and name not in outputs:
                reason = OUTPUTS_ONLY
            else:
                reason = None
                found.append(pair)
            plan.entries.append(Entry(name, node, i, reason))
        if found:
            pairs[node.name] = found
            plan.pairs.extend(found)
    return plan


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


@dataclass
class EngineConfig:
    """How the engine runs (chosen by :func:`onnxsight.verify`)."""

    mode: str
    tolerance: Tolerance
    memory_budget: int
    max_repros: int
    reference: Any = None  # a Float64Reference (reference="float64"): judges each value against float64
    # verify(onnx_model=): value -> the op type of the optimised model's fused node making it (None: not fused)
    fused_op: Callable[[str], str | None] | None = None


def run_engine(torch_runner: TorchRunner, ort_runner: OrtRunner, index: GraphIndex, pairs: Sequence[Pair],
               user_inputs: Sequence[Any], feeds: Mapping[str, np.ndarray], config: EngineConfig,
               ctx: DiagnosticContext, fed: Sequence[Pair] = ()) -> EngineOutput:
    """Stream PyTorch and ONNX Runtime through the graph, chunk by chunk, comparing every pair.

    ``fed`` values (random draws, uninitialised memory) are never computed by ONNX Runtime:
    PyTorch's values are fed in their place, so everything downstream stays comparable.
    """
    isolated = config.mode == "isolated"
    out = EngineOutput(outputs=frozenset(index.graph_outputs))
    fed_by_node: dict[Any, list[Pair]] = {}
    for pair in fed:
        fed_by_node.setdefault(pair.node, []).append(pair)
    fed_values: dict[str, np.ndarray] = {}
    by_node: dict[Any, list[Pair]] = {}
    for pair in pairs:
        by_node.setdefault(pair.node, []).append(pair)
        out.nodes[pair.value] = pair.node
    paired = {p.value: p for p in pairs}
    executor = ChunkExecutor(index, ort_runner, feeds)
    tracker = RootCauseTracker(independent=isolated)
    pending: list[Pair] = []
    pending_bytes = 0
    executed: set[Any] = set()
    grids: dict[Any, list[str]] = {}  # quantize/dequantize node -> the graph outputs on its grid
    for value, grid in quant.output_grids([p for p in pairs if p.value in out.outputs]).items():
        grids.setdefault(grid, []).append(value)

    def torch_value(pair: Pair) -> Any:
        value = torch_runner.env[pair.node]
        return value[pair.index] if pair.index is not None else value

    def on_pytorch_inputs(pair: Pair) -> np.ndarray | None:
        """``pair``'s ONNX nodes run once more from PyTorch's values of its inputs (a side check)."""
        reference = _pending_inputs([pair], paired, torch_runner)
        reference.update(fed_values)
        try:
            return executor.probe([pair.value], reference).get(pair.value)
        except OrtFailure:
            return None

    layouts: dict[str, bool] = {}  # isolated mode: value -> whether ONNX Runtime holds it in PyTorch's shape

    def keep_own_layouts(reference: dict[str, np.ndarray]) -> None:
        """Isolated mode on an optimised model: a value a fused op holds in another layout is computed by
        ONNX Runtime from PyTorch's inputs, not fed PyTorch's (its readers would get the wrong layout).
        A fused value compared in an earlier chunk is known; one in this chunk is found by a probe."""
        for name in [n for n in reference if config.fused_op is not None and config.fused_op(n) is not None]:
            if name not in layouts:
                try:
                    own = executor.probe([name], {k: v for k, v in reference.items() if k != name}).get(name)
                except OrtFailure:
                    own = None
                layouts[name] = own is None or np.shape(own) == np.shape(reference[name])
            if not layouts[name]:
                del reference[name]

    def flush() -> None:
        nonlocal pending, pending_bytes
        if pending and out.error is None:
            reference = _pending_inputs(pending, paired, torch_runner) if isolated else {}
            keep_own_layouts(reference)
            reference.update(fed_values)
            try:
                results = executor.run([p.value for p in pending], reference)
            except OrtFailure as exc:  # reported as ORT001/ORT002
                out.error = report_ort_error(exc, ort_runner, ctx, index)
                results = None
            out.chunks += 1
            if results is not None:
                for pair in pending:
                    _compare_pair(pair, torch_value(pair), results.get(pair.value), executor, tracker, config,
                                  out, reference_values=lambda name: _reference_value(name, paired, torch_runner,
                                                                                      feeds),
                                  rejudge=None if isolated else on_pytorch_inputs,
                                  value_of=torch_runner.env.get)
                    if pair.value in results:
                        layouts.setdefault(pair.value, pair.value not in out.other_layout)
        done = set(executed)
        for node in list(torch_runner.env):
            if node.op != "placeholder" and all(user in done for user in node.users if user.op != "output"):
                torch_runner.release(node)
        pending, pending_bytes = [], 0

    for node, value in torch_runner.iterate(user_inputs):
        executed.add(node)
        if node in grids:  # the step of an output's grid, while the scale PyTorch computed is alive
            size = quant.grid_step(node, torch_runner.env.get)
            out.output_steps.update({value: (size, node.name) for value in grids[node] if size is not None})
        for pair in fed_by_node.get(node, ()):
            fed_values[pair.value] = to_numpy(torch_value(pair))
        for pair in by_node.get(node, ()):
            pending.append(pair)
            pending_bytes += _nbytes(torch_value(pair))
        # a quantize node ends a chunk: when it only rounded differently, later chunks read PyTorch's integers
        if pending_bytes >= config.memory_budget or (not isolated and quant.kind(node) == "quantize"):
            flush()
    flush()
    out.sessions = executor.sessions
    return out


def _pending_inputs(pending: Sequence[Pair], paired: Mapping[str, Pair],
                    torch_runner: TorchRunner) -> dict[str, np.ndarray]:
    """PyTorch's values of the paired values this chunk's nodes read (isolated mode)."""
    wanted: dict[str, np.ndarray] = {}
    for pair in pending:
        for name in pair.upstream:
            source = paired.get(name)
            if source is not None and source.node in torch_runner.env:
                value = torch_runner.env[source.node]
                wanted[name] = real_view(to_numpy(value[source.index] if source.index is not None else value))
    return wanted


def _reference_value(name: str, paired: Mapping[str, Pair], torch_runner: TorchRunner,
                     feeds: Mapping[str, np.ndarray]) -> np.ndarray | None:
    if name in feeds:
        return feeds[name]
    pair = paired.get(name)
    if pair is None or pair.node not in torch_runner.env:
        return None
    value = torch_runner.env[pair.node]
    return real_view(to_numpy(value[pair.index] if pair.index is not None else value))


def _nbytes(value: Any) -> int:
    if hasattr(value, "element_size"):
        return int(value.numel() * value.element_size())
    return 8


def _compare_pair(pair: Pair, expected_value: Any, actual: np.ndarray | None, executor: ChunkExecutor,
                  tracker: RootCauseTracker, config: EngineConfig, out: EngineOutput, *,
                  reference_values: Any, rejudge: Any = None, value_of: Any = None) -> None:
    if actual is None:
        return
    expected = to_numpy(expected_value)
    if isinstance(expected_value, float) and np.issubdtype(np.asarray(actual).dtype, np.floating):
        expected = expected.astype(np.asarray(actual).dtype)  # a Python float has no dtype: the graph's is its
    expected_dtype = dtype_name(getattr(expected_value, "dtype", expected.dtype))
    expected, expected_dtype = onnx_layout(expected, expected_dtype, actual)  # complex as ONNX's reals
    actual_dtype = executor.types.get(pair.value, "unknown")
    bounds = config.tolerance.loosest(pair.value, expected_dtype, actual_dtype)
    metrics = compare(expected, actual, bounds, expected_dtype=expected_dtype, actual_dtype=actual_dtype)
    if metrics.shape_mismatch and _other_layout(pair, expected, actual, config, out):
        return
    if config.reference is not None:
        metrics = config.reference.judge(pair.node, pair.index, expected, actual, bounds, metrics,
                                         expected_dtype=expected_dtype, actual_dtype=actual_dtype)
    verdict = tracker.add(pair.value, metrics.passed, pair.upstream)
    rounded = quant.rounding(pair.node, expected, actual) if verdict.root_cause else None
    if rounded is not None:  # one step at a half step: ONNX Runtime goes on from PyTorch's integers
        out.rounding[pair.value] = rounded
        if pair.value in executor.env:
            executor.env[pair.value] = expected.astype(np.asarray(actual).dtype)
    elif verdict.root_cause and rejudge is not None:
        # its ONNX nodes once more, from PyTorch's exact inputs: where they give PyTorch's value there, the
        # difference is its inputs' rounding, which a threshold decision flips (ACC011) or the op amplifies (ACC014)
        close = _on_pytorch_inputs(expected, rejudge(pair), bounds, expected_dtype, actual_dtype)
        what = decision(pair.node)
        if close is not None and what is not None:
            out.borderline[pair.value] = _decided(what, expected, actual)
        elif close is not None:
            out.amplified[pair.value] = close
    excused = set(out.borderline) | set(out.rounding) | set(out.amplified)
    root_cause = verdict.root_cause and pair.value not in excused
    # differs only because of borderline decisions (itself, or every root cause behind it)
    borderline = pair.value in excused or (
        bool(verdict.propagated_from) and set(verdict.propagated_from) <= excused)
    location, _ = node_location(pair.node)
    row = {
        "value": pair.value, "fx_node": pair.node.name, "target": _target(pair.node),
        "onnx_op": executor.index.op_type(pair.value), "dtype": expected_dtype, "onnx_dtype": actual_dtype,
        "shape": tuple(expected.shape), "onnx_shape": tuple(np.shape(actual)),
        **{k: v for k, v in metrics.to_dict().items() if k != "passed"},
        "atol": bounds.atol, "rtol": bounds.rtol, "passed": metrics.passed, "root_cause": root_cause,
        "max_diff_steps": quant.steps_apart(pair.node, expected, actual, value_of or (lambda _: None)),
        "borderline": borderline, "propagated_from": ", ".join(verdict.propagated_from),
        "file": location.file if location else None, "line": location.line if location else None,
        "upstream": pair.upstream,
    }
    out.rows.append(row)
    if pair.value in out.outputs:
        out.output_values[pair.value] = (expected, np.asarray(actual))
    if root_cause and len(out.repros) < config.max_repros:
        case = capture_repro(executor.index, pair.value, set(out.nodes), expected, reference_values)
        if case is not None:
            out.repros[pair.value] = case


def _other_layout(pair: Pair, expected: np.ndarray, actual: np.ndarray, config: EngineConfig,
                  out: EngineOutput) -> bool:
    """True (and the reason recorded) when an optimised model's fused node, which the exported graph does not
    have, gives ``pair``'s name to a value of another shape (ONNX Runtime's RotaryEmbedding keeps Q's name for
    its (batch, length, hidden) output, where PyTorch holds (batch, heads, length, head size)). Such a value
    is not compared and is no root cause; what reads it is still compared. A node the exported graph has
    too, or a plain verify, keeps the shape mismatch."""
    op = config.fused_op(pair.value) if config.fused_op is not None else None
    if op is None:
        return False
    out.other_layout[pair.value] = other_layout(op, np.shape(actual), expected.shape)
    return True


def _on_pytorch_inputs(expected: np.ndarray, again: np.ndarray | None, bounds: Any, expected_dtype: str,
                       actual_dtype: str) -> str | None:
    """How close ``again`` (a value's ONNX nodes fed PyTorch's exact inputs) comes to PyTorch's value, where that is
    within tolerance; else None (a root cause: the op is wrong on PyTorch's own inputs too)."""
    if again is None:
        return None
    metrics = compare(expected, again, bounds, expected_dtype=expected_dtype, actual_dtype=actual_dtype)
    if not metrics.passed:
        return None
    return f"max abs diff {metrics.max_abs_diff:.3g} within atol {bounds.atol:g} + rtol {bounds.rtol:g}"


def _decided(what: str, expected: np.ndarray, actual: np.ndarray) -> str:
    """What a threshold decision (``_decisions``: ``what``) that decides as PyTorch on PyTorch's inputs decided
    differently from ONNX Runtime's own inputs."""
    if np.shape(actual) != np.shape(expected):
        return (f"it {what}; from ONNX Runtime's own inputs its result has {_count(actual)} where PyTorch's "
                f"has {_count(expected)}")
    differ = int(np.count_nonzero(np.asarray(actual) != np.asarray(expected)))
    return f"it {what}; from ONNX Runtime's own inputs {differ} of {np.size(expected)} elements differ"


def _count(value: Any) -> str:
    shape = list(np.shape(value))
    if len(shape) != 1:
        return f"shape {shape}"
    return f"{shape[0]} element" + ("" if shape[0] == 1 else "s")


def _target(node: Any) -> str:
    from onnxsight.exporter import op_display

    return op_display(node.target)


_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\((\d+)\) node with name '([^']*)'")


def report_ort_error(exc: OrtFailure, runner: OrtRunner, ctx: DiagnosticContext,
                     index: GraphIndex | None = None) -> str:
    """Emit ORT001 (session) or ORT002 (run) for a chunk that failed; return the error text.

    When ONNX Runtime has no kernel for a node's dtype, DTY002 names that node's op and
    dtype at the user's line (from the node's stack-trace metadata) as well.
    """
    from onnxsight import rules

    text = str(exc)[:800]
    match = _NO_KERNEL.search(text)
    if match and index is not None:
        _report_missing_kernel(match, index, ctx)
    rule = rules.ORT_SESSION_FAILED if exc.phase == "session" else rules.ORT_RUN_FAILED
    ctx.emit(rule, providers=", ".join(runner.providers), error=text)
    return text


def _report_missing_kernel(match: re.Match, index: GraphIndex, ctx: DiagnosticContext) -> None:
    from onnxsight import rules
    from onnxsight.diagnostics import parse_stack_trace, user_frame

    op_type, version, name = match.groups()
    node = next((n for n in index.model.graph.node if n.name == name), None)
    dtypes = sorted({onnx.TensorProto.DataType.Name(index.elem_types[i]).lower()
                     for i in (node.input if node is not None else ()) if i in index.elem_types})
    meta = {p.key: p.value for p in node.metadata_props} if node is not None else {}
    stack = parse_stack_trace(meta.get("pkg.torch.onnx.stack_trace"))
    ctx.emit(rules.DTYPE_NOT_RUN_BY_ORT, location=user_frame(stack), stack=stack,
             op=f"{op_type} (opset {version}, node {name})", dtype=", ".join(dtypes) or "its input dtype",
             properties={"onnx_node": name, "fx_node": meta.get("pkg.torch.onnx.fx_node", "").split(" ")[0] or None})
