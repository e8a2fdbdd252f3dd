"""verify_onnx: one ONNX model on two ONNX Runtime providers, value by value, with no PyTorch at all.

Both providers run the same chunked slices (propagated mode); each value is
compared as the reference provider computed it against the target's. A
value's location comes from the node's ``pkg.torch.onnx.stack_trace``
metadata when the model was exported by onnxsight or torch.onnx.
"""

from __future__ import annotations

import ast
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
import pandas as pd

from onnxsight.diagnostics import DiagnosticContext, node_location
from onnxsight.verification._api import DEFAULT_MEMORY_BUDGET
from onnxsight.verification._bundle import capture_repro
from onnxsight.verification._chunks import ChunkExecutor, OrtFailure
from onnxsight.verification._coverage import (COLUMNS, COMPARED, NO_RESULT, NOT_REACHED, OUTPUTS_ONLY,
                                              emit_coverage)
from onnxsight.verification._diagnose import emit_diagnostics
from onnxsight.verification._engine import report_ort_error
from onnxsight.verification._graph import GraphIndex, elem_type_name
from onnxsight.verification._metrics import compare
from onnxsight.verification._result import VerificationResult
from onnxsight.verification._root_cause import RootCauseTracker
from onnxsight.verification._runners import OrtRunner
from onnxsight.verification._tolerance import Tolerance
from onnxsight.verification._weights import model_and_weights

_FIRST_CHUNK = 64  # values in the first chunk, before their sizes are known


@dataclass
class _NodeRef:
    """An FX-node look-alike built from an ONNX node's metadata, so diagnostics find the source line."""

    name: str
    target: str
    meta: dict[str, Any] = field(default_factory=dict)


def _node_ref(node: onnx.NodeProto) -> _NodeRef:
    props = {p.key: p.value for p in node.metadata_props}
    name, target = node.name or node.output[0], node.op_type
    try:
        scopes = ast.literal_eval(props.get("pkg.torch.onnx.name_scopes", "[]"))
        classes = ast.literal_eval(props.get("pkg.torch.onnx.class_hierarchy", "[]"))
        name, target = (scopes[-1] if scopes else name), (classes[-1] if classes else target)
    except (ValueError, SyntaxError):
        pass
    return _NodeRef(name, target, {"stack_trace": props.get("pkg.torch.onnx.stack_trace") or None})


def _random_feeds(index: GraphIndex, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in index.model.graph.input:
        if info.name not in index.graph_inputs:
            continue
        tensor = info.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
        dtype = elem_type_name(tensor.elem_type)
        if dtype.startswith(("float", "bfloat")):
            feeds[info.name] = rng.standard_normal(shape).astype(np.float32)
        elif dtype == "bool":
            feeds[info.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            feeds[info.name] = rng.integers(0, max(1, min(shape, default=2)), shape).astype(dtype)
    return feeds


def verify_onnx(path_or_proto: onnx.ModelProto | str | os.PathLike,
                inputs: Mapping[str, Any] | Sequence[Any] | None = None,
                reference: str = "CPUExecutionProvider", target: str = "CUDAExecutionProvider",
                per_node: bool = True, *, tolerance: Tolerance | None = None, seed: int = 0,
                memory_budget: int = DEFAULT_MEMORY_BUDGET, provider_fallback: bool = False) -> VerificationResult:
    """Compare ``path_or_proto`` on provider ``target`` against provider ``reference``.

    ``inputs``: a mapping by input name or a sequence in input order; default seeded random
    inputs from the declared types (unknown dims as 1).
    """
    start = time.perf_counter()
    ctx = DiagnosticContext()
    tolerance = tolerance or Tolerance()
    model, weights = model_and_weights(path_or_proto, memory_budget=memory_budget)
    index = GraphIndex.build(model, weights)
    if inputs is None:
        feeds = _random_feeds(index, seed)
    elif isinstance(inputs, Mapping):
        feeds = {k: np.asarray(v) for k, v in inputs.items()}
    else:
        feeds = {name: np.asarray(v) for name, v in zip(index.graph_inputs, inputs)}
    ref_runner = OrtRunner([reference], ctx=ctx, fallback=False)
    tgt_runner = OrtRunner([target] + ([reference] if reference != target else []), ctx=ctx,
                           fallback=provider_fallback)
    ref_runner.activate()
    tgt_runner.activate()
    ref, tgt = ChunkExecutor(index, ref_runner, feeds), ChunkExecutor(index, tgt_runner, feeds)
    everything = [o for node in index.nodes for o in node.output if o and index.is_computed(o)]
    values = everything if per_node else [v for v in everything if v in set(index.graph_outputs)]
    compared = set(values)
    refs = {v: _node_ref(index.nodes[index.producer[v]]) for v in everything}
    tracker = RootCauseTracker()
    rows: list[dict[str, Any]] = []
    repros: dict[str, Any] = {}
    error = None
    size, position = _FIRST_CHUNK, 0
    while position < len(values) and error is None:
        chunk = values[position:position + size]
        position += len(chunk)
        try:
            expected, actual = ref.run(chunk), tgt.run(chunk)
        except OrtFailure as exc:  # reported as ORT001/ORT002
            error = report_ort_error(exc, tgt_runner, ctx, index)
            break
        used = 0
        for value in chunk:
            if not isinstance(expected.get(value), np.ndarray) or not isinstance(actual.get(value), np.ndarray):
                continue
            used += expected[value].nbytes * 2
            upstream = [n for n in index.node_inputs[index.producer[value]] if n in compared]
            row = _row(value, expected[value], actual[value], ref.types.get(value), tgt.types.get(value),
                       index, refs[value], tolerance, tracker, upstream)
            rows.append(row)
            if row["root_cause"] and len(repros) < 8:
                case = capture_repro(index, value, compared, expected[value],
                                     lambda n: feeds.get(n, expected.get(n, ref.env.get(n))))
                if case is not None:
                    repros[value] = case
        size = max(1, int(memory_budget * len(chunk) / max(used, 1)))
    emit_diagnostics(rows, refs, index.graph_outputs, ctx, reference=reference)
    coverage = _coverage(everything, compared, rows, refs, error)
    emit_coverage(coverage, index.graph_outputs, {r["value"] for r in rows}, ctx, refs)
    info = {"mode": "propagated", "per_node": per_node, "reference": reference, "providers": tgt_runner.providers,
            "requested_providers": [target], "compared": len(rows), "sessions": ref.sessions + tgt.sessions,
            "error": error, "seconds": time.perf_counter() - start, "tolerance": tolerance.to_dict()}
    return VerificationResult(rows, index.graph_outputs, ctx.diagnostics, repros=repros, info=info,
                              graph_name=model.graph.name, coverage=coverage)


def _coverage(values: Sequence[str], planned: set[str], rows: Sequence[Mapping[str, Any]],
              refs: Mapping[str, _NodeRef], error: str | None) -> pd.DataFrame:
    """One row per computed ONNX value: compared, or why not (outputs only, not reached, no result)."""
    done = {row["value"] for row in rows}
    table = []
    for value in values:
        if value in done:
            reason = COMPARED
        elif value not in planned:
            reason = OUTPUTS_ONLY
        else:
            reason = NOT_REACHED if error else NO_RESULT
        table.append({"value": value, "fx_node": refs[value].name, "target": refs[value].target,
                      "compared": reason == COMPARED, "reason": reason})
    return pd.DataFrame(table, columns=list(COLUMNS))


def _row(value: str, expected: np.ndarray, actual: np.ndarray, expected_dtype: str | None, actual_dtype: str | None,
         index: GraphIndex, ref: _NodeRef, tolerance: Tolerance, tracker: RootCauseTracker,
         upstream: Sequence[str]) -> dict[str, Any]:
    bounds = tolerance.loosest(value, expected_dtype or expected.dtype, actual_dtype or actual.dtype)
    metrics = compare(expected, actual, bounds, expected_dtype=expected_dtype, actual_dtype=actual_dtype)
    verdict = tracker.add(value, metrics.passed, upstream)
    location, _ = node_location(ref)
    return {"value": value, "fx_node": ref.name, "target": ref.target, "onnx_op": index.op_type(value),
            "dtype": expected_dtype, "onnx_dtype": actual_dtype, "shape": tuple(expected.shape),
            "onnx_shape": tuple(actual.shape), **{k: v for k, v in metrics.to_dict().items() if k != "passed"},
            "atol": bounds.atol, "rtol": bounds.rtol, "passed": metrics.passed, "root_cause": verdict.root_cause,
            "propagated_from": ", ".join(verdict.propagated_from),
            "file": location.file if location else None, "line": location.line if location else None}
