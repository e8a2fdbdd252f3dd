"""The worker's run of a generative model (``ModelSpec.generation_steps``): its step programs exported,
saved, and a greedy generation verified step by step.

Stages: build -> export (``export_generation``: the decoder step, or an encoder-decoder's encoder, first
step and decoder) -> save -> verify (``verify_generation``: every step in PyTorch and ONNX Runtime, the
first real divergence compared per node). ``result.generation`` keeps the steps agreed for the dashboard.
"""

from __future__ import annotations

import os
from typing import Any

from onnxsight.zoo._result import FAILED, PASSED, ModelResult
from onnxsight.zoo._worker import _export_stages, _mark, _Stages, op_counts


def run_generation_model(result: ModelResult, spec: Any, task: dict[str, Any], stage: _Stages) -> ModelResult:
    """Export and verify ``spec``'s generation into ``result``; the worker's own handler records an exception
    (and the time and memory) as for any model."""
    import onnxsight

    with stage("build"):
        model, prompt = _prompt(spec.build())
    with stage("export"):
        try:
            programs = onnxsight.export_generation(model, prompt, opset_version=spec.opset or task.get("opset"))
        except onnxsight.ExportError as exc:
            result.status, result.error = FAILED, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            result.diagnostics = [d.to_dict() for d in exc.diagnostics]
            result.export_stages = _export_stages(getattr(exc, "record", None))
            result.root_cause = _first_error(result.diagnostics)
            return result
    result.export_stages = _export_stages(programs.decoder.record)
    result.diagnostics = [d.to_dict() for _, program in programs.items() for d in program.diagnostics]
    with stage("save"):
        _save(result, programs, task["model_dir"])
    result.status = FAILED  # until every step is shown to agree
    with stage("verify"):
        options: dict[str, Any] = {"steps": spec.generation_steps, "providers": tuple(task["providers"]),
                                   "per_node": bool(task.get("per_node", True))}
        if spec.tolerance is not None:
            options["tolerance"] = spec.tolerance
        outcome = onnxsight.verify_generation(model, prompt, programs, **options)
    _record(result, outcome)
    _mark(task["model_dir"], "done")
    result.stage = "done"
    return result


def _prompt(built: Any) -> tuple[Any, dict[str, Any]]:
    if not isinstance(built, tuple) or len(built) != 2 or not isinstance(built[1], dict):
        raise TypeError("a generation spec's build() returns (model, prompt), the prompt a dict of tensors")
    return built


def _save(result: ModelResult, programs: Any, model_dir: str) -> None:
    paths = programs.save(model_dir)
    result.onnx_bytes = sum(os.path.getsize(path) for path in paths.values())
    counts = op_counts(programs.decoder.model_proto.graph)
    result.op_counts, result.node_count = dict(counts.most_common()), sum(counts.values())


def _record(result: ModelResult, outcome: Any) -> None:
    """The generation's verdict, its steps agreed, the largest logit difference and the root cause."""
    steps = outcome.steps
    result.generation = {"steps": outcome.requested, "steps_run": len(steps), "steps_agreed": outcome.steps_agreed,
                         "first_divergence": outcome.first_divergence,
                         "first_token_difference": outcome.first_token_difference,
                         "max_logit_diff": [float(v) for v in steps["max_logit_diff"].fillna(float("nan"))],
                         "providers": outcome.info.get("providers")}
    result.max_abs_diff = float(steps["max_logit_diff"].max()) if len(steps) else None
    result.outputs_compared = len(steps)
    result.verification = {"passed": outcome.passed, "root_causes": outcome.root_causes.head(5).to_dict("records")}
    result.diagnostics.extend(d.to_dict() for d in outcome.diagnostics)
    result.status = PASSED if outcome.passed else FAILED
    result.root_cause = None if outcome.passed else _first_error(result.diagnostics, prefer="GEN")


def _first_error(diagnostics: list[dict[str, Any]], prefer: str = "") -> dict[str, Any] | None:
    """The first error (a GEN one first when ``prefer``), as the dashboard shows a root cause."""
    errors = [d for d in diagnostics if d["level"] == "error"]
    errors = [d for d in errors if d["rule"].startswith(prefer)] or errors
    if not errors:
        return None
    first = errors[0]
    location = first.get("location") or {}
    properties = first.get("properties") or {}
    return {"rule": first["rule"], "message": first["message"], "value": properties.get("onnx_value"),
            "file": location.get("file"), "line": location.get("line")}
