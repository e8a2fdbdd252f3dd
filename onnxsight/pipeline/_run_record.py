"""The run record of one export or verification: every fact a report shows, gathered before rendering.

``build_run_record`` reads the exporter's ExportRecord, the diagnostics (with
source snippets copied in, so the record renders anywhere), the program and
the verification result, and returns a :class:`onnxsight.reports.RunRecord`;
the renderers in ``onnxsight.reports`` format that record and nothing else.
"""

from __future__ import annotations

import datetime as _dt
import logging
from typing import Any, Callable, Iterable, Mapping, Sequence

from onnxsight.pipeline._facts import environment, model_facts, model_structure, program_text
from onnxsight.reports import RunRecord, jsonable

logger = logging.getLogger("onnxsight")

UNSUPPORTED_RULES = ("OPS001", "OPS002", "OPS003")
PLOT_POINTS_LIMIT = 4_000
WORST_NODES = 10
SNIPPET_CONTEXT = 3


def build_run_record(*, record: Any = None, diagnostics: Sequence[Any] = (), program: Any = None,
                     error: Any = None, inputs: tuple[Any, Any, Any] | None = None, verification: Any = None,
                     kind: str = "export", model_name: str | None = None, onnx_model: Any = None) -> RunRecord:
    """Gather everything the reports show into a :class:`RunRecord`."""
    name = model_name or getattr(record, "model_name", None) or "model"
    run = RunRecord(model=str(name), created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    kind=kind, opset=getattr(record, "opset", None))
    exported = getattr(program, "exported_program", None) or getattr(record, "exported_program", None)
    verification = verification if verification is not None else getattr(program, "verification", None)
    model, args, kwargs = inputs if inputs is not None else (None, None, None)
    if onnx_model is None:
        try:
            onnx_model = model_structure(program)
        except Exception as exc:  # noqa: BLE001 - a report about a failure must not fail
            logger.warning("onnxsight report: could not build the ONNX model: %s: %s", type(exc).__name__, exc)
    steps: list[tuple[str, Callable[[], None]]] = [
        ("stages", lambda: _fill_stages(run, record)),
        ("diagnostics", lambda: _fill_diagnostics(run, diagnostics)),
        ("model facts", lambda: run.facts.update(model_facts(exported, model, args, kwargs, program, onnx_model,
                                                             record))),
        ("environment", lambda: run.environment.update(environment())),
        ("verification", lambda: setattr(run, "verification", verification_summary(verification))),
        ("program text", lambda: setattr(run, "program_text", program_text(exported))),
    ]
    for label, step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - a report about a failure must not fail
            logger.warning("onnxsight report: could not gather %s: %s: %s", label, type(exc).__name__, exc)
            run.facts.setdefault("report_warnings", []).append(f"{label}: {type(exc).__name__}: {exc}")
    if error is not None:
        run.status = "export failed"
        run.error = {"type": type(error).__name__, "stage": str(getattr(error, "stage", "export")),
                     "summary": str(getattr(error, "summary", error))}
    elif run.verification is not None and not run.verification.get("passed", True):
        run.status = "verification failed"
    elif any(stage.get("status") == "failed" for stage in run.stages):
        run.status = "verification failed" if _failed_stage(run) == "accuracy" else "export failed"
    return run


def _fill_stages(run: RunRecord, record: Any) -> None:
    for stage in getattr(record, "stages", None) or ():
        run.stages.append({"name": str(stage.name), "status": str(stage.status), "seconds": float(stage.seconds),
                           "detail": str(stage.detail or ""), "peak_rss": _bytes(getattr(stage, "peak_rss", None)),
                           "rss_after": _bytes(getattr(stage, "rss_after", None))})
    for attempt in getattr(record, "attempts", None) or ():
        run.attempts.append(jsonable({k: getattr(attempt, k, None) for k in
                                      ("strategy", "success", "seconds", "error_type", "error", "rule")}))
    run.facts.update(jsonable({k: v for k, v in (getattr(record, "facts", None) or {}).items()}))


def _bytes(value: Any) -> int | None:
    return None if value is None else int(value)


def _failed_stage(run: RunRecord) -> str | None:
    return next((s["name"] for s in run.stages if s.get("status") == "failed"), None)


def _fill_diagnostics(run: RunRecord, diagnostics: Iterable[Any]) -> None:
    for diagnostic in diagnostics:
        row = diagnostic.to_dict()
        row["rule_name"] = diagnostic.rule.name
        row["fix"] = diagnostic.rule.format_fix(**diagnostic.fields) if hasattr(diagnostic.rule, "format_fix") \
            else _format_fix(diagnostic.rule.fix, diagnostic.fields)
        location = diagnostic.location
        row["snippet"] = [[n, text] for n, text in location.snippet(SNIPPET_CONTEXT)] if location else []
        run.diagnostics.append(jsonable(row))
    run.unsupported = unsupported_table(run.diagnostics)


def _format_fix(template: str, fields: Mapping[str, Any]) -> str:
    """A fix hint with the diagnostic's fields filled in (``{op_name}``); the template when they do not fit."""
    try:
        return template.format_map({k: str(v) for k, v in fields.items()})
    except (KeyError, ValueError, IndexError, AttributeError):
        return template.replace("{{", "{").replace("}}", "}")


def unsupported_table(diagnostics: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per unsupported operator: op, count, rule, first source line."""
    rows: dict[str, dict[str, Any]] = {}
    for diagnostic in diagnostics:
        if diagnostic.get("rule") not in UNSUPPORTED_RULES:
            continue
        op = str(diagnostic.get("fields", {}).get("op", "?"))
        row = rows.setdefault(op, {"op": op, "count": 0, "rule": diagnostic["rule"], "first_location": None})
        row["count"] += int(diagnostic.get("fields", {}).get("count") or 1)  # OPS001: once per op, with its calls
        location = diagnostic.get("location")
        if row["first_location"] is None and location:
            row["first_location"] = {"file": location.get("file"), "line": location.get("line"),
                                     "code": location.get("code")}
    return sorted(rows.values(), key=lambda r: (-r["count"], r["op"]))


def verification_summary(result: Any) -> dict[str, Any] | None:
    """The outputs table, root causes, worst nodes and the per-node errors for the plot."""
    if result is None:
        return None
    outputs = _rows(getattr(result, "outputs", None))
    nodes = _rows(getattr(result, "nodes", None))
    roots = _rows(getattr(result, "root_causes", None))
    for index, row in enumerate(nodes):
        row["index"] = index
    failing = [r for r in nodes if r.get("passed") is False]
    worst = sorted(failing or nodes, key=lambda r: -_number(r.get("max_abs_diff")))[:WORST_NODES]
    info = dict(getattr(result, "info", None) or {})
    summary: dict[str, Any] = {
        "passed": bool(getattr(result, "passed", False)),
        "mode": str(info.get("mode") or getattr(result, "mode", "") or ""),
        "providers": [str(p) for p in (info.get("providers") or getattr(result, "providers", None) or [])],
        "reference": str(info.get("reference") or getattr(result, "reference", "") or ""),
        "error": str(info["error"]) if info.get("error") else "",
        "outputs": outputs, "root_causes": roots, "worst_nodes": worst,
        "nodes_compared": len(nodes), "nodes_failed": len(failing),
        "nodes": _downsample(nodes),
        "coverage": {"summary": dict(getattr(result, "coverage_summary", None) or {}),
                     "sizes_checked": list(getattr(result, "sizes_checked", None) or [])},
        # verify(float_model=): per layer, the quantized ONNX model against the float model, worst first
        # (layer, module_type, location "file:line", file, line, sqnr_db, sqnr_drop_db, max_error_steps, ...)
        "quantization_layers": list(info.get("quantization_layers") or []),
    }
    return jsonable(summary)


def _rows(frame: Any) -> list[dict[str, Any]]:
    if frame is None:
        return []
    if hasattr(frame, "to_dict"):
        return [dict(r) for r in frame.to_dict(orient="records")]
    return [dict(r) for r in frame]


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return float("-inf")
    return number if number == number else float("inf")


def _downsample(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most PLOT_POINTS_LIMIT rows for the plot, always keeping root causes and failures."""
    keep = [{k: r.get(k) for k in ("index", "value", "target", "max_abs_diff", "max_rel_diff", "atol", "passed",
                                   "root_cause")} for r in nodes]
    if len(keep) <= PLOT_POINTS_LIMIT:
        return keep
    step = len(keep) / PLOT_POINTS_LIMIT
    picked = {int(i * step) for i in range(PLOT_POINTS_LIMIT)}
    return [r for i, r in enumerate(keep) if i in picked or r["root_cause"] or r["passed"] is False]
