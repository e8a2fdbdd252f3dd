"""SARIF for the zoo: one log per model and one merged log per run, with baselineState.

The logs come from ``onnxsight.reports.sarif`` (``to_sarif``, ``merge_sarif``);
the zoo only tags each result with its model and suite, so the merged log and
the baseline comparison can tell models apart.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Sequence

from onnxsight.diagnostics import Diagnostic
from onnxsight.zoo._baseline import apply_baseline_state
from onnxsight.zoo._result import ModelResult


SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _to_sarif(diagnostics: list[Diagnostic]) -> dict[str, Any]:
    try:
        from onnxsight.reports.sarif import to_sarif
    except ImportError:
        return _minimal_sarif(diagnostics)
    return to_sarif(diagnostics)


def _merge(logs: list[dict[str, Any]]) -> dict[str, Any]:
    try:
        from onnxsight.reports.sarif import merge_sarif
    except ImportError:
        return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run for log in logs for run in log.get("runs", [])]}
    return merge_sarif(logs)


def _minimal_sarif(diagnostics: list[Diagnostic]) -> dict[str, Any]:
    """NOTE: a stopgap for builds without ``onnxsight.reports.sarif``: rules, levels, messages, locations."""
    from onnxsight import __version__

    rule_ids = list(dict.fromkeys(d.rule.code for d in diagnostics))
    by_code = {d.rule.code: d.rule for d in diagnostics}
    results = []
    for diag in diagnostics:
        entry: dict[str, Any] = {"ruleId": diag.rule.code, "ruleIndex": rule_ids.index(diag.rule.code),
                                 "level": diag.level.value, "message": {"text": diag.message},
                                 "properties": dict(diag.properties)}
        if diag.location is not None:
            region = {"startLine": diag.location.line} if diag.location.line else {}
            entry["locations"] = [{"physicalLocation": {"artifactLocation": {"uri": diag.location.file},
                                                        **({"region": region} if region else {})}}]
        results.append(entry)
    rules = [{"id": code, "name": by_code[code].name, "shortDescription": {"text": by_code[code].message},
              "helpUri": by_code[code].help_uri} for code in rule_ids]
    driver = {"name": "onnxsight", "version": __version__, "rules": rules}
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [{"tool": {"driver": driver}, "results": results}]}


def model_log(result: ModelResult) -> dict[str, Any]:
    """The SARIF log of one model's diagnostics, each result tagged with the model and suite."""
    diagnostics = [Diagnostic.from_dict(d) for d in result.diagnostics]
    log = _to_sarif(diagnostics)
    for run in log.get("runs", []):
        run.setdefault("properties", {}).update(model=result.name, suite=result.suite, status=result.status)
        for entry in run.get("results", []):
            entry.setdefault("properties", {}).update(model=result.name, suite=result.suite)
    return log


def merged_log(logs: Sequence[dict[str, Any]], baseline: dict[str, Any] | None,
               models: Iterable[str]) -> dict[str, Any]:
    """All model logs as one, with ``baselineState`` set on every result against ``baseline``."""
    merged = _merge(list(logs))
    return apply_baseline_state(merged, baseline, models)


def write_json(log: dict[str, Any], path: str) -> str:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(log, handle, indent=1)
    os.replace(tmp, path)
    return path


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None
