"""The worker: runs one model in its own process and writes its ModelResult.

``python -m onnxsight.zoo._worker TASK.json``. The parent supervises this
process (timeout, memory, signals); the worker writes the stage it enters to
``stage`` before entering it, so a crash still tells which stage it was in.
Stages: build -> eager -> export -> save -> run (ONNX Runtime vs eager) ->
verify (per-node verification engine).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from onnxsight.zoo._result import ERROR, FAILED, OOM, PASSED, ModelResult
from onnxsight.zoo._spec import grown_inputs, load_suite

OP_RULE_PREFIX = "OPS"


def _mark(model_dir: str, stage: str) -> None:
    with open(os.path.join(model_dir, "stage"), "w", encoding="utf-8") as handle:
        handle.write(stage)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _normalize(built: Any) -> tuple[Any, tuple, dict]:
    if not isinstance(built, tuple) or len(built) not in (2, 3):
        raise TypeError("build() must return (model, args) or (model, args, kwargs)")
    model, args = built[0], built[1]
    kwargs = built[2] if len(built) == 3 else {}
    return model, args if isinstance(args, tuple) else (args,), dict(kwargs or {})


def op_counts(graph: Any, functions: Mapping[tuple[str, str], Any] | None = None) -> Counter:
    """ONNX op types in a graph and its subgraphs (If/Loop/Scan bodies); a call of a local function
    (``module_functions=``) counts the ops of its body."""
    counts: Counter = Counter()
    functions = functions or {}
    for node in graph.node:
        function = functions.get((node.domain, node.op_type))
        if function is not None:
            counts.update(op_counts(function, functions))
            continue
        counts[node.op_type if not node.domain else f"{node.domain}::{node.op_type}"] += 1
        for attr in node.attribute:
            if attr.g is not None and attr.g.node:
                counts.update(op_counts(attr.g, functions))
            for sub in attr.graphs:
                counts.update(op_counts(sub, functions))
    return counts


def _output_diff(expected: Any, actual: list) -> tuple[float, int, float]:
    """Max abs difference over all tensor outputs (inf on shape/count disagreement), outputs compared, and the
    largest eager value (the scale the difference should be read against)."""
    import torch
    from torch.utils import _pytree as pytree

    reference = [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    scale = max((float(t.detach().abs().double().max()) for t in reference if t.numel() and not t.is_complex()
                 and t.dtype != torch.bool), default=0.0)
    if len(reference) != len(actual):
        return float("inf"), 0, scale
    worst = 0.0
    for ref, got in zip(reference, actual):
        ref = torch.view_as_real(ref) if ref.is_complex() else ref
        if tuple(ref.shape) != tuple(got.shape):
            return float("inf"), len(reference), scale
        if ref.numel():
            diff = (ref.detach().double() - got.double()).abs()
            worst = max(worst, float(diff.nan_to_num(nan=float("inf"), posinf=float("inf")).max()))
    return worst, len(reference), scale


def _run_program(prog: Any, args: tuple, kwargs: dict) -> list:
    """The exported program's tensor outputs on (copies of) the inputs, run by torch."""
    import torch
    from torch.utils import _pytree as pytree

    clone = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
    with torch.no_grad():
        outputs = prog.exported_program.module()(*clone[0], **clone[1])
    return [t for t in pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]


def _eager_verdict(result: ModelResult, expected: Any, actual: list, prog: Any, spec: Any, at: str = "") -> bool:
    """ACC007 unless the exported program's outputs (``actual``) equal the model's eager outputs under the
    verification tolerance.

    Called once ONNX is known to match the exported program, so a disagreement here is the capture's:
    Python state baked in at trace time, not a translation error. Comparing torch with torch (not ONNX
    with eager) keeps ONNX Runtime's rounding out of it. NaN/Inf disagreements fail.
    """
    import torch
    from torch.utils import _pytree as pytree

    from onnxsight.verification import Tolerance, compare

    names = list(prog.output_names)
    tolerance = (spec.tolerance if spec.tolerance is not None else Tolerance()).for_outputs(names)
    reference = [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    for index, ref in enumerate(reference):
        name = names[index] if index < len(names) else f"output {index}"
        got = actual[index] if index < len(actual) else None
        ref_np, got_np = _as_numpy(ref), None if got is None else _as_numpy(got)
        if got_np is not None:
            bounds = tolerance.for_value(name, ref.dtype)
            metrics = compare(ref_np, got_np, bounds, expected_dtype=ref.dtype)
            if metrics.passed:
                continue
            diff = "inf (NaN/Inf on one side only)" if metrics.nonfinite_introduced or metrics.nan_inf_mismatch \
                else (f"shape {tuple(got_np.shape)} vs eager {tuple(ref_np.shape)}" if metrics.shape_mismatch
                      else f"{metrics.max_abs_diff:.3g}")
            limit = f"atol {bounds.atol:g}, rtol {bounds.rtol:g}"
        else:
            diff, limit = "missing (the exported program returns fewer tensors than forward())", "-"
        _emit_eager_mismatch(result, spec, name + at, diff, limit)
        return False
    return True


def _second_size(result: ModelResult, model: Any, args: tuple, kwargs: dict, prog: Any, spec: Any) -> bool:
    """The exported program against eager at a second size (every dynamic dim of the spec one larger).

    Verification compares ONNX with the exported program at other sizes; this closes the loop to
    forward(): a capture that baked the example's size into a reshape runs, and agrees with its own
    ONNX, but not with the model (ACC007 naming the sizes). ``verification["second_size"]`` records it.
    """
    import torch
    from torch.utils import _pytree as pytree

    if not spec.dynamic or spec.dynamic_shapes is not None:
        return True
    args2, kwargs2, sizes = grown_inputs(spec.dynamic, model, args, kwargs)
    at = " at " + ", ".join(f"{name} {size}" for name, size in sizes.items())
    record: dict[str, Any] = {"sizes": sizes, "passed": True}
    result.verification = {**(result.verification or {}), "second_size": record}
    clone = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args2, kwargs2))
    try:
        with torch.no_grad():
            expected = model(*clone[0], **clone[1])
    except Exception as exc:  # noqa: BLE001  (the model itself rejects this size: nothing to compare)
        record.update(passed=None, skipped=f"eager: {type(exc).__name__}: {str(exc)[:300]}")
        return True
    try:
        actual = _run_program(prog, args2, kwargs2)
    except Exception as exc:  # noqa: BLE001  (forward() runs at this size, the exported program does not)
        record["passed"] = False
        _emit_eager_mismatch(result, spec, "every output" + at,
                             f"the exported program fails: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", "-")
        return False
    record["passed"] = _eager_verdict(result, expected, actual, prog, spec, at=at)
    return record["passed"]


def _as_numpy(value: Any) -> Any:
    """A tensor as numpy for compare(): complex as (real, imag) pairs, bfloat16 widened to float32."""
    import torch

    if not isinstance(value, torch.Tensor):
        return value
    value = value.detach().cpu()
    value = torch.view_as_real(value) if value.is_complex() else value
    return (value.float() if value.dtype == torch.bfloat16 else value).numpy()


def _emit_eager_mismatch(result: ModelResult, spec: Any, output: str, diff: str, limit: str) -> None:
    _emit(result, spec, "EXPORT_DIFFERS_FROM_EAGER", output=output, max_abs_diff=diff, tolerance=limit)


def _emit(result: ModelResult, spec: Any, rule: str, **fields: Any) -> None:
    """Record one diagnostic of ``rules.<rule>`` located at the model's entry in its suite."""
    from onnxsight import rules
    from onnxsight.diagnostics import DiagnosticContext, Location

    file, line = spec.source
    ctx = DiagnosticContext()
    ctx.emit(getattr(rules, rule), location=Location(file, line) if file else None, **fields)
    result.diagnostics.extend(d.to_dict() for d in ctx.diagnostics)


def _rounding_only(outcome: Any) -> str | None:
    """The first divergence (its ACC002 message) of a failed verification whose failures are values and
    shapes alone (no runtime error, no dtype or non-finite difference, no error but ACC001/ACC002/ACC004);
    else None. A shape is left to the float64 run: rounding before an nms changes how many boxes it keeps."""
    if outcome.passed or outcome.info.get("error"):
        return None
    if any(d.level.value == "error" and d.code not in ("ACC001", "ACC002", "ACC004") for d in outcome.diagnostics):
        return None
    nodes = outcome.nodes  # values that differ only because of a borderline decision (ACC011) are not judged here
    failing = nodes[~nodes["passed"].astype(bool) & ~nodes["borderline"].fillna(False).astype(bool)]
    flags = ("dtype_mismatch", "nonfinite_introduced", "nan_inf_mismatch")  # a shape: the float64 run judges it
    if failing.empty or any(failing[flag].fillna(0).astype(bool).any() for flag in flags):
        return None
    errors = [d for d in outcome.diagnostics if d.level.value == "error"]
    first = next((d for d in errors if d.code == "ACC002"), errors[0] if errors else None)  # else an ACC001
    return first.message if first else None


def degenerate_scale(expected: Any, tolerance: Any = None) -> tuple[str, float] | None:
    """``(what the outputs hold, atol)`` when eager's floating-point outputs cannot tell a right export from a
    wrong one: every one empty, or every value below the tolerance's atol for its dtype (~1e-25 from a deep net
    with default init, exactly 0 from a zero head). None when any output has a meaningful value, or none is
    floating-point (integer and bool outputs are compared exactly)."""
    import torch
    from torch.utils import _pytree as pytree

    from onnxsight.verification import Tolerance

    tolerance = tolerance if tolerance is not None else Tolerance()
    floats = [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not floats:
        return None
    atol = max(tolerance.for_value(f"output {i}", t.dtype).atol for i, t in enumerate(floats))
    filled = [t for t in floats if t.numel()]
    if not filled:
        return f"no values: all {len(floats)} floating-point output(s) are empty", atol
    scale = max(float(t.detach().abs().double().nan_to_num(nan=0.0).max()) for t in filled)
    if any(bool(t.detach().isinf().any()) for t in filled) or scale >= atol:
        return None
    return f"largest |value| {scale:.3g} over {len(filled)} output(s)", atol


def _degenerate(result: ModelResult, expected: Any, spec: Any) -> bool:
    """ZOO005 (and the model failed) when eager's outputs are too small for any comparison to fail."""
    found = degenerate_scale(expected, spec.tolerance)
    if found is None:
        return False
    _emit(result, spec, "ZOO_DEGENERATE_OUTPUTS", model=spec.name, scale=found[0], atol=f"{found[1]:g}")
    result.status, result.root_cause = FAILED, _first_error(result.diagnostics)
    return True


def _export_stages(record: Any) -> list[dict[str, Any]]:
    return [{"name": s.name, "status": s.status, "seconds": s.seconds, "detail": s.detail}
            for s in getattr(record, "stages", [])]


def _first_error(diagnostics: list[dict[str, Any]]) -> dict[str, Any] | None:
    for diag in diagnostics:
        if diag["level"] == "error":
            loc = diag.get("location") or {}
            return {"rule": diag["rule"], "message": diag["message"], "file": loc.get("file"), "line": loc.get("line")}
    return None


def _root_cause(diagnostics: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first ACC002 root cause (value, op, source line), else the first error diagnostic (ACC007...)."""
    for diag in diagnostics:
        if diag["rule"] == "ACC002":
            loc = diag.get("location") or {}
            fields = diag.get("fields", {})
            return {"rule": "ACC002", "message": diag["message"], "value": fields.get("value"),
                    "op": fields.get("target"), "file": loc.get("file"), "line": loc.get("line")}
    return _first_error(diagnostics)


def _verify(result: ModelResult, prog: Any, model_args: tuple, kwargs: dict, task: dict, spec: Any) -> bool:
    """Run onnxsight.verify (outputs, or every intermediate value with per_node) and keep its summary."""
    from onnxsight.verification import verify

    # Dynamic dims are verified at other sizes of each too (``sizes_checked`` in the summary; none when static).
    options: dict[str, Any] = {"per_node": bool(task.get("per_node")), "providers": tuple(task["providers"]),
                               "other_sizes": True}
    if spec.tolerance is not None:
        options["tolerance"] = spec.tolerance
    outcome = verify(prog, model_args, kwargs, **options)
    float32 = _rounding_only(outcome)
    if float32 is not None:  # values alone: judged again against PyTorch's own float32 error
        again = verify(prog, model_args, kwargs, reference="float64", **options)
        if again.passed:
            outcome = again
            _emit(result, spec, "ZOO_WITHIN_NOISE_FLOOR", model=spec.name, detail=float32)
    summary = outcome.to_dict()
    roots = outcome.root_causes
    if "root_causes" not in summary and hasattr(roots, "head"):
        summary["root_causes"] = roots.head(5).to_dict("records")
    for bulky in ("nodes", "diagnostics"):  # the per-node table stays out; diagnostics are kept once, below
        summary.pop(bulky, None)
    result.verification = summary
    result.diagnostics.extend(d.to_dict() for d in outcome.diagnostics)
    return bool(outcome.passed)


class _Stages:
    """Marks the stage being entered (for the supervisor, should the process die) and times it."""

    def __init__(self, result: ModelResult, model_dir: str) -> None:
        self.result, self.model_dir = result, model_dir

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.result.stage = name
        _mark(self.model_dir, name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.result.timings[name] = time.perf_counter() - start


def _export(result: ModelResult, model: Any, args: tuple, kwargs: dict, spec: Any, task: dict) -> Any:
    """The ONNXProgram, or None with the failure recorded (diagnostics, failing ops, first error)."""
    import onnxsight

    try:
        prog = onnxsight.export(model, args, kwargs=kwargs, opset_version=spec.opset or task.get("opset"),
                                dynamic_shapes=spec.dynamic_shapes_for(model, args, kwargs),
                                custom_translations=getattr(spec, "custom_translations", None),
                                module_functions=getattr(spec, "module_functions", False))
    except onnxsight.ExportError as exc:
        result.status = FAILED
        result.export_stages = _export_stages(getattr(exc, "record", None))
        result.diagnostics = [d.to_dict() for d in exc.diagnostics]
        result.failing_ops = sorted({str(d["fields"]["op"]) for d in result.diagnostics
                                     if d["rule"].startswith(OP_RULE_PREFIX) and "op" in d["fields"]})
        result.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        result.root_cause = _first_error(result.diagnostics)
        return None
    result.export_stages = _export_stages(prog.record)
    result.diagnostics = [d.to_dict() for d in prog.diagnostics]
    return prog


def _save(result: ModelResult, prog: Any, model_dir: str) -> None:
    files = prog.save(os.path.join(model_dir, "model.onnx"))
    result.onnx_bytes = sum(os.path.getsize(f) for f in files)
    model = prog.model_proto
    counts = op_counts(model.graph, {(f.domain, f.name): f for f in model.functions})
    result.op_counts, result.node_count = dict(counts.most_common()), sum(counts.values())


def run_model(task: dict[str, Any]) -> ModelResult:
    """Build, export, run and verify one model, recording everything; never raises for a model's failure."""
    from onnxsight.exporter import library_pytrees

    load_suite(task["suite"])  # imports the suite's libraries (transformers): their containers are flattened
    with library_pytrees():  # a model taking or returning a KV cache object: its copies, outputs and sizes
        return _run_model(task)


def _run_model(task: dict[str, Any]) -> ModelResult:
    import torch
    from torch.utils import _pytree as pytree

    suite = load_suite(task["suite"])
    spec = suite.spec(task["model"])
    result = ModelResult(name=spec.name, suite=suite.name, status=ERROR, tags=list(spec.tags),
                         source=task.get("source", {}))
    stage = _Stages(result, task["model_dir"])
    clock = time.perf_counter()
    try:
        if spec.generation_steps:  # a generative model: its step programs and a generation verified
            from onnxsight.zoo._generation import run_generation_model

            return run_generation_model(result, spec, task, stage)
        with stage("build"):
            model, args, kwargs = _normalize(spec.build())
        with stage("eager"), torch.no_grad():
            clone = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
            expected = model(*clone[0], **clone[1])  # on copies: in-place models must not change the inputs
        if _degenerate(result, expected, spec):
            return result
        with stage("export"):
            prog = _export(result, model, args, kwargs, spec, task)
        if prog is None:
            return result
        with stage("save"):
            _save(result, prog, task["model_dir"])
        result.status = FAILED  # until the outputs are shown to match
        with stage("run"):
            actual = prog(*args, providers=tuple(task["providers"]), **kwargs)
            result.max_abs_diff, result.outputs_compared, result.reference_max_abs = _output_diff(expected, actual)
        with stage("verify"):
            verdict = _verify(result, prog, args, kwargs, task, spec)
            # ONNX matches the exported program: does the exported program compute what forward() does?
            verdict = verdict and _eager_verdict(result, expected, _run_program(prog, args, kwargs), prog, spec)
            verdict = verdict and _second_size(result, model, args, kwargs, prog, spec)
        result.status = PASSED if verdict else FAILED
        result.root_cause = None if verdict else _root_cause(result.diagnostics)
        _mark(task["model_dir"], "done")
        result.stage = "done"
    except MemoryError:
        result.status, result.error = OOM, f"MemoryError in stage {result.stage}"
    except Exception as exc:  # noqa: BLE001  (a model's own failure is a result, not a crash of the job)
        result.status = ERROR if result.stage in ("build", "eager") else FAILED
        result.error = f"{type(exc).__name__}: {str(exc)[:2000]}"
        result.stderr_tail = traceback.format_exc()[-4000:]
    finally:
        result.seconds = time.perf_counter() - clock
        result.peak_mb = _peak_mb()
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0], encoding="utf-8") as handle:
        task = json.load(handle)
    result = run_model(task)
    result.write(os.path.join(task["model_dir"], "result.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
