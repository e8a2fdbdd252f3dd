"""What the dashboard draws from the results store: the trends per run and each model's history.

Numbers only leave here (and the labels the charts escape): the dashboard's template escapes the
rest. The charts are ``onnxsight.reports.charts``; this module only shapes the store's rows for them.
"""

from __future__ import annotations

import json
import time
from typing import Any, Sequence

from onnxsight.reports import charts
from onnxsight.zoo._result import as_float
from onnxsight.zoo._store import ResultsStore
from onnxsight.zoo._summary import fmt_diff

HISTORY_RUNS = 30


def _number(value: Any) -> float | None:
    """A stored number, or None (SQL NULL arrives from pandas as NaN)."""
    number = as_float(value)
    return None if number is None or number != number else number


def run_date(started: Any) -> str:
    """A run's start time as the dashboard shows it (local time, to the minute)."""
    seconds = _number(started)
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds)) if seconds is not None else ""


def trends(store: ResultsStore | None) -> list[dict[str, Any]]:
    """Pass rate and total export time per stored run, as inline SVG charts (none before two runs)."""
    if store is None:
        return []
    history = store.history(HISTORY_RUNS)
    runs = [{"date": run_date(row.started), "pass_rate": row.pass_rate, "export": row.export_seconds}
            for row in history.itertuples(index=False)]
    drawn = [("pass rate per run", charts.run_trend(runs, value="pass_rate", label="pass rate", unit="%",
                                                    percent=True)),
             ("export time per run, all models", charts.run_trend(runs, value="export", label="export time, all models",
                                                                  unit="s"))]
    return [{"title": title, "svg": svg} for title, svg in drawn if svg is not None]


def tolerance(outputs: Any) -> float | None:
    """The absolute tolerance of the output that differs most (the one ``max_abs_diff`` comes from)."""
    try:
        rows = json.loads(outputs) if isinstance(outputs, str) else outputs
    except ValueError:
        return None
    if not isinstance(rows, list):  # no verified outputs (SQL NULL)
        return None
    rows = [row for row in rows if isinstance(row, dict) and as_float(row.get("atol")) is not None]
    if not rows:
        return None
    worst = max(rows, key=lambda row: as_float(row.get("max_abs_diff")) or 0.0)
    return as_float(worst.get("atol"))


def model_histories(store: ResultsStore | None, models: Sequence[str]) -> list[dict[str, Any]]:
    """For each model of this run: its rows over the stored runs (oldest first) and a chart of its max abs
    difference against its tolerance. ``anchor`` is the id a dashboard row links to."""
    if store is None or not models:
        return []
    frame = store.model_history(HISTORY_RUNS)
    by_model: dict[str, list[dict[str, Any]]] = {}
    for row in frame.itertuples(index=False):
        by_model.setdefault(str(row.model), []).append({
            "run_id": str(row.run_id), "date": run_date(row.started), "status": str(row.status),
            "export": _number(row.export_seconds), "peak": _number(row.peak_mb),
            "max_abs_diff": _number(row.max_abs_diff), "atol": tolerance(row.outputs)})
    histories = []
    for index, name in enumerate(models):
        rows = by_model.get(name, [])
        histories.append({
            "anchor": f"history-{index}", "name": name, "chart": charts.difference_history(rows),
            "rows": [{**row, "export": f"{row['export']:.2f}" if row["export"] is not None else "",
                      "peak": f"{row['peak']:.0f}" if row["peak"] is not None else "",
                      "diff": fmt_diff(row["max_abs_diff"]), "atol": f"{row['atol']:g}" if row["atol"] else ""}
                     for row in reversed(rows)]})                     # newest first in the table
    return histories
