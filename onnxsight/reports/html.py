"""HTML report: one self-contained file rendered from a :class:`RunRecord` with jinja2.

- Autoescaping is on for every value; the only unescaped inserts are our own
  CSS and JavaScript files, numbers, and the charts' SVG (``reports/charts.py``:
  matplotlib writes every text in it escaped).
- A Content-Security-Policy allows exactly the report's own inline style and
  script (by hash) and no network at all, so even a missed escape could not run
  a model's string as script, and nothing leaves the page.
- Everything is readable without JavaScript; the script only makes tables
  sortable and adds expand/collapse-all buttons.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
from typing import Any

import jinja2

from onnxsight.reports import _format as fmt
from onnxsight.reports import charts
from onnxsight.reports._record import RunRecord

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def render(run: RunRecord) -> str:
    """The HTML report as one string."""
    environment = _environment()
    css = _read("report.css")
    script = _read("report.js")
    csp = ("default-src 'none'; img-src data:; base-uri 'none'; form-action 'none'; "
           f"style-src '{_sha256(css)}'; script-src '{_sha256(script)}'")
    verification = run.verification or {}
    context = {
        "run": run, "css": css, "script": script, "csp": csp,
        "headline": fmt.headline(run), "total": fmt.total_seconds(run),
        "stages": fmt.stage_rows(run), "groups": fmt.group_by_rule(run.diagnostics),
        "counts": run.counts(), "weights": fmt.weights_rows(run.facts),
        "aten_ops": fmt.histogram_rows(run.facts.get("aten_ops")),
        "onnx_ops": fmt.histogram_rows(run.facts.get("onnx_ops")),
        "plot": charts.error_along_graph(verification.get("nodes") or []),
        "layer_plot": charts.layer_error_bars(verification.get("quantization_layers") or []),
        "generation_plot": charts.difference_per_step((run.generation or {}).get("steps") or [],
                                                      atol=(run.generation or {}).get("atol")),
        "generation_verdict": fmt.generation_verdict(run.generation) if run.generation else "",
        "metric_columns": fmt.METRIC_COLUMNS, "dynamic_dims": fmt.dynamic_dim_rows(run),
    }
    return environment.get_template("report.html.j2").render(**context)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(seconds=fmt.seconds, size=fmt.size, number=fmt.number, shape=fmt.shape, where=fmt.where,
                       sortkey=sort_key, first_line=fmt.first_line, attempt_error=fmt.attempt_error)
    env.tests.update(long=fmt.is_long)
    return env


def _read(name: str) -> str:
    with open(os.path.join(TEMPLATES, name), encoding="utf-8") as handle:
        return handle.read()


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def sort_key(value: Any) -> str:
    """A ``data-sort`` value for a table cell: numbers as numbers, the rest as text."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(float(value)) if math.isfinite(value) else ("1e308" if value > 0 else "-1e308")
    if value in ("inf", "nan"):
        return "1e308"
    if value == "-inf":
        return "-1e308"
    return "" if value is None else str(value)
