"""export(..., report=True): build the run record, then write markdown, HTML, SARIF and the record.

This module gathers the facts (it reads the export record, the exported
program, the ONNX model and the verification result); the renderers in
``markdown.py`` and ``html.py`` only format the resulting :class:`RunRecord`.
torch objects are used by duck typing: nothing here imports torch.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import platform
import sys
from collections import Counter
from importlib import metadata
from typing import Any, Callable, Iterable, Mapping, Sequence

from onnxsight.reports._record import (
    RunRecord,
    jsonable,
    paths_for,
    reserve_paths,
    write_atomic,
)
from onnxsight.reports.sarif import write_sarif

logger = logging.getLogger("onnxsight")

UNSUPPORTED_RULES = ("OPS001", "OPS002", "OPS003")
PROGRAM_TEXT_LIMIT = 300_000
PLOT_POINTS_LIMIT = 4_000
WORST_NODES = 10
SNIPPET_CONTEXT = 3
NODE_COLUMNS = ("value", "fx_node", "target", "onnx_op", "dtype", "shape", "max_abs_diff", "max_rel_diff",
                "mismatch_fraction", "cosine", "passed", "root_cause", "file", "line")


def write_export_reports(*, record: Any, diagnostics: Sequence[Any], program: Any = None, error: Any = None,
                         artifacts_dir: str | os.PathLike = ".",
                         inputs: tuple[Any, Any, Any] | None = None) -> list[str]:
    """Write ``<model>_<timestamp>_report.md/.html``, ``.sarif`` and ``_run.json``; return their paths.

    ``record`` is the exporter's ExportRecord, ``program`` the ONNXProgram (None
    when the export failed before one existed), ``error`` the ExportError if
    any, ``inputs`` the (model, args, kwargs) given to export(). Never raises
    for a problem in gathering facts: a report about a failure must not fail.
    """
    run = build_run_record(record=record, diagnostics=diagnostics, program=program, error=error, inputs=inputs)
    return write_reports(run, artifacts_dir, diagnostics=diagnostics, export_record=record)


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
    onnx_model = onnx_model if onnx_model is not None else _model_proto(program)
    steps: list[tuple[str, Callable[[], None]]] = [
        ("stages", lambda: _fill_stages(run, record)),
        ("diagnostics", lambda: _fill_diagnostics(run, diagnostics)),
        ("model facts", lambda: run.facts.update(model_facts(exported, model, args, kwargs, program, onnx_model,
                                                             record))),
        ("environment", lambda: run.environment.update(environment())),
        ("verification", lambda: setattr(run, "verification", verification_summary(verification))),
        ("program text", lambda: setattr(run, "program_text", _program_text(exported))),
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


def write_reports(run: RunRecord, artifacts_dir: str | os.PathLike, *, diagnostics: Sequence[Any] | None = None,
                  export_record: Any = None, paths: Mapping[str, str] | None = None) -> list[str]:
    """Render ``run`` into fresh files in ``artifacts_dir`` (or at ``paths``); return [md, html, sarif, json]."""
    from onnxsight.reports import html, markdown

    if paths is None:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        paths = reserve_paths(artifacts_dir, run.model, stamp)
    run.files = {kind: os.path.basename(path) for kind, path in paths.items()}
    written = [write_atomic(paths["markdown"], markdown.render(run)),
               write_atomic(paths["html"], html.render(run))]
    if diagnostics is None:
        diagnostics = _diagnostics_from_record(run)
    written.append(write_sarif(list(diagnostics), paths["sarif"], record=export_record))
    written.append(run.save(paths["record"]))
    return written


def rerender(record_path: str | os.PathLike) -> list[str]:
    """``onnxsight report PATH``: render the reports of a saved run record again, next to it."""
    run = RunRecord.load(record_path)
    return write_reports(run, os.path.dirname(os.path.abspath(record_path)), paths=paths_for(record_path))


# -- stages and diagnostics ----------------------------------------------------------------------------

def _fill_stages(run: RunRecord, record: Any) -> None:
    for stage in getattr(record, "stages", None) or ():
        run.stages.append({"name": str(stage.name), "status": str(stage.status), "seconds": float(stage.seconds),
                           "detail": str(stage.detail or "")})
    for attempt in getattr(record, "attempts", None) or ():
        run.attempts.append(jsonable({k: getattr(attempt, k, None) for k in
                                      ("strategy", "success", "seconds", "error_type", "error", "rule")}))
    run.facts.update(jsonable({k: v for k, v in (getattr(record, "facts", None) or {}).items()}))


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
        row["count"] += 1
        location = diagnostic.get("location")
        if row["first_location"] is None and location:
            row["first_location"] = {"file": location.get("file"), "line": location.get("line"),
                                     "code": location.get("code")}
    return sorted(rows.values(), key=lambda r: (-r["count"], r["op"]))


def _diagnostics_from_record(run: RunRecord) -> list[Any]:
    from onnxsight.diagnostics import Diagnostic

    out = []
    for row in run.diagnostics:
        try:
            out.append(Diagnostic.from_dict(row))
        except (KeyError, ValueError) as exc:  # a rule this version does not know
            logger.warning("onnxsight report: skipping diagnostic %s in SARIF: %s", row.get("rule"), exc)
    return out


# -- model facts ------------------------------------------------------------------------------------

def model_facts(exported: Any, model: Any, args: Any, kwargs: Any, program: Any, onnx_model: Any,
                record: Any) -> dict[str, Any]:
    """Parameters and buffers by dtype, inputs/outputs, op histograms, ONNX size and opset."""
    facts: dict[str, Any] = {"opset": getattr(record, "opset", None)}
    facts.update(_weights_by_dtype(exported, model))
    facts["inputs"] = (_onnx_io(onnx_model, "input") if onnx_model is not None
                       else _inputs(exported, program, args, kwargs))
    facts["outputs"] = _onnx_io(onnx_model, "output") if onnx_model is not None else _ep_outputs(exported)
    if exported is not None:
        facts["aten_ops"] = dict(Counter(_aten_targets(exported.graph_module)).most_common())
    if onnx_model is not None:
        facts["onnx_ops"] = dict(Counter(_onnx_ops(onnx_model.graph)).most_common())
        facts["onnx_nodes"] = sum(facts["onnx_ops"].values())
        facts["onnx_size"] = int(onnx_model.ByteSize()) + (
            0 if onnx_model.graph.initializer or program is None else int(getattr(program, "weights_size", 0)))
        facts["opset"] = next((o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx")),
                              facts["opset"])
    return jsonable(facts)


def _weights_by_dtype(exported: Any, model: Any) -> dict[str, Any]:
    if exported is not None:
        state = dict(exported.state_dict)
        state.update(getattr(exported, "constants", {}) or {})
        signature = exported.graph_signature
        groups = {"parameters": list(signature.parameters), "buffers": list(signature.buffers)}
        tensors = {kind: [state[n] for n in names if n in state] for kind, names in groups.items()}
    elif model is not None and hasattr(model, "named_parameters"):
        tensors = {"parameters": [p for _, p in model.named_parameters()],
                   "buffers": [b for _, b in model.named_buffers()]}
    else:
        return {}
    out: dict[str, Any] = {}
    for kind, values in tensors.items():
        table: dict[str, dict[str, int]] = {}
        for tensor in values:
            if not hasattr(tensor, "dtype"):
                continue
            row = table.setdefault(_dtype(tensor.dtype), {"tensors": 0, "elements": 0, "bytes": 0})
            row["tensors"] += 1
            row["elements"] += int(tensor.numel())
            row["bytes"] += int(tensor.numel()) * int(tensor.element_size())
        out[kind] = table
    return out


def _dtype(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _shape(shape: Any) -> list[Any]:
    return [int(d) if isinstance(d, int) or str(d).isdigit() else str(d) for d in shape]


def _inputs(exported: Any, program: Any, args: Any, kwargs: Any) -> list[dict[str, Any]]:
    if exported is not None:
        nodes = {n.name: n for n in exported.graph_module.graph.nodes if n.op == "placeholder"}
        user = [s.arg.name for s in exported.graph_signature.input_specs
                if s.kind.name == "USER_INPUT" and hasattr(s.arg, "name")]
        onnx_names = list(getattr(program, "input_names", []) or [])
        rows = []
        for index, name in enumerate(user):
            val = nodes[name].meta.get("val") if name in nodes else None
            row: dict[str, Any] = {"name": onnx_names[index] if index < len(onnx_names) else name}
            if hasattr(val, "dtype"):
                row.update(dtype=_dtype(val.dtype), shape=_shape(val.shape))
            else:
                row.update(dtype=type(val).__name__, shape=None)
            rows.append(row)
        return rows
    if args is None and kwargs is None:
        return []
    from torch.utils import (
        _pytree as pytree,  # only reached when torch is already in use
    )

    args = args if isinstance(args, (tuple, list)) else (args,)
    leaves, _ = pytree.tree_flatten_with_path((tuple(args), dict(kwargs or {})))
    rows = []
    for path, leaf in leaves:
        row = {"name": pytree.keystr(path)}
        if hasattr(leaf, "dtype") and hasattr(leaf, "shape"):
            row.update(dtype=_dtype(leaf.dtype), shape=_shape(leaf.shape))
        else:
            row.update(dtype=type(leaf).__name__, shape=None)
        rows.append(row)
    return rows


def _ep_outputs(exported: Any) -> list[dict[str, Any]]:
    if exported is None:
        return []
    output = next((n for n in exported.graph_module.graph.nodes if n.op == "output"), None)
    values = output.args[0] if output is not None and output.args else ()
    rows = []
    for spec, node in zip(exported.graph_signature.output_specs, values):
        if spec.kind.name != "USER_OUTPUT":
            continue
        val = getattr(node, "meta", {}).get("val")
        rows.append({"name": getattr(node, "name", str(node)),
                     "dtype": _dtype(val.dtype) if hasattr(val, "dtype") else type(val).__name__,
                     "shape": _shape(val.shape) if hasattr(val, "shape") else None})
    return rows


def _onnx_io(model: Any, which: str) -> list[dict[str, Any]]:
    import onnx

    rows = []
    for value in getattr(model.graph, which):
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
        rows.append({"name": value.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
                     if tensor.elem_type else "?", "shape": dims if tensor.HasField("shape") else None})
    return rows


def _aten_targets(graph_module: Any) -> Iterable[str]:
    for node in graph_module.graph.nodes:
        if node.op == "get_attr":
            sub = getattr(graph_module, str(node.target), None)
            if sub is not None and hasattr(sub, "graph"):
                yield from _aten_targets(sub)
        if node.op == "call_function":
            yield _op_name(node.target)


def _op_name(target: Any) -> str:
    name = getattr(target, "_name", None)  # OpOverload: "aten::add.Tensor"
    if isinstance(name, str) and "::" in name:
        overload = getattr(target, "_overloadname", "default")
        base = name.replace("::", ".", 1)
        return base if base.endswith(f".{overload}") else f"{base}.{overload}"
    return f"{getattr(target, '__module__', '') or ''}.{getattr(target, '__name__', str(target))}".lstrip(".")


def _onnx_ops(graph: Any) -> Iterable[str]:
    for node in graph.node:
        yield f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        for attr in node.attribute:
            if attr.g.node:
                yield from _onnx_ops(attr.g)
            for sub in attr.graphs:
                yield from _onnx_ops(sub)


def _model_proto(program: Any) -> Any:
    """The program's ModelProto; for models over 2 GB the graph without weights (never built twice)."""
    if program is None:
        return None
    from onnxsight.exporter._program import EXTERNAL_DATA_THRESHOLD, assemble

    if getattr(program, "weights_size", 0) <= EXTERNAL_DATA_THRESHOLD:
        return program.model_proto
    return assemble(program._translated, with_data=False)


def _program_text(exported: Any) -> str:
    if exported is None:
        return ""
    text = str(exported)
    if len(text) > PROGRAM_TEXT_LIMIT:
        text = text[:PROGRAM_TEXT_LIMIT] + f"\n... ({len(text) - PROGRAM_TEXT_LIMIT} more characters)"
    return text


# -- environment -------------------------------------------------------------------------------------

def environment() -> dict[str, Any]:
    """Versions of python and the libraries, and the ONNX Runtime providers available here."""
    env: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for package in ("onnxsight", "torch", "onnx", "onnxruntime", "onnxruntime-gpu", "numpy"):
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    env["providers"] = _providers()
    return env


def _providers() -> list[str]:
    # NOTE: onnxruntime is imported only where the verification engine lives; the report asks
    # it when it is already loaded (any verification ran) and otherwise imports it once here,
    # lazily, as ONNXProgram.__call__ does.
    module = sys.modules.get("onnxruntime")
    if module is None:
        try:
            import onnxruntime as module  # type: ignore[no-redef]
        except ImportError:
            return []
    return list(module.get_available_providers())


# -- verification -------------------------------------------------------------------------------------

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
    keep = [{k: r.get(k) for k in ("index", "value", "target", "max_abs_diff", "max_rel_diff", "passed",
                                   "root_cause")} for r in nodes]
    if len(keep) <= PLOT_POINTS_LIMIT:
        return keep
    step = len(keep) / PLOT_POINTS_LIMIT
    picked = {int(i * step) for i in range(PLOT_POINTS_LIMIT)}
    return [r for i, r in enumerate(keep) if i in picked or r["root_cause"] or r["passed"] is False]
