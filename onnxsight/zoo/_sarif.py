"""SARIF for the zoo: one log per model and one merged log per run, with baselineState.

The logs come from ``onnxsight.reports.sarif`` (``to_sarif``, ``merge_sarif``);
the zoo tags each result with its model and suite, so the merged log (one
run) and the baseline comparison can tell models apart.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from onnxsight.diagnostics import Diagnostic
from onnxsight.reports.sarif import merge_sarif, to_sarif, write_log
from onnxsight.zoo._baseline import apply_baseline_state
from onnxsight.zoo._result import ModelResult


def model_log(result: ModelResult) -> dict[str, Any]:
    """The SARIF log of one model's diagnostics, each result tagged with the model and suite."""
    diagnostics = [Diagnostic.from_dict(d) for d in result.diagnostics]
    log = to_sarif(diagnostics)
    for run in log.get("runs", []):
        run.setdefault("properties", {}).update(model=result.name, suite=result.suite, status=result.status)
        for entry in run.get("results", []):
            entry.setdefault("properties", {}).update(model=result.name, suite=result.suite)
    return log


def merged_log(logs: Sequence[dict[str, Any]], baseline: dict[str, Any] | None,
               models: Iterable[str]) -> dict[str, Any]:
    """All model logs as one, with ``baselineState`` set on every result against ``baseline``."""
    merged = merge_sarif(list(logs))
    return apply_baseline_state(merged, baseline, models)


def write_json(log: dict[str, Any], path: str) -> str:
    """Write a SARIF log atomically (strict JSON: no NaN)."""
    return write_log(log, path)


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None
