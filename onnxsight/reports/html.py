"""HTML report: one self-contained file rendered from a :class:`RunRecord` with jinja2.

- Autoescaping is on for every value; the only unescaped inserts are our own
  CSS and JavaScript files and numbers.
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
from typing import Any, Mapping, Sequence

import jinja2

from onnxsight.reports import _format as fmt
from onnxsight.reports._record import RunRecord

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
PLOT_WIDTH, PLOT_HEIGHT, PLOT_MARGIN = 900.0, 260.0, 48.0
PLOT_FLOOR = 1e-12  # differences below this are drawn on the bottom line (log scale)


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
        "plot": error_plot(verification.get("nodes") or []),
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


def _log_error(value: Any) -> float | None:
    """log10 of a difference, or None when it is not a number."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(number) or math.isinf(number):
        return math.inf
    return math.log10(max(abs(number), PLOT_FLOOR))


def error_plot(nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Coordinates for an inline SVG of max abs difference (log scale) along the graph's values.

    Returns None when no value has a numeric difference. Marks: failing values
    in red, root causes as large red circles, non-finite differences on the top line.
    """
    points = [(index, node, _log_error(node.get("max_abs_diff"))) for index, node in enumerate(nodes)]
    finite = [y for _, _, y in points if y is not None and math.isfinite(y)]
    if not finite and not any(y == math.inf for _, _, y in points):
        return None
    low = math.floor(min(finite, default=math.log10(PLOT_FLOOR)))
    high = max(math.ceil(max(finite, default=0.0)), low + 1)
    width, height, margin = PLOT_WIDTH, PLOT_HEIGHT, PLOT_MARGIN
    span_x = max(len(points) - 1, 1)

    def x_of(index: int) -> float:
        return round(margin + (width - margin - 10) * index / span_x, 1)

    def y_of(value: float) -> float:
        value = high if value == math.inf else value
        return round(height - margin / 2 - (height - margin) * (value - low) / (high - low), 1)

    line, marks = [], []
    for index, node, y in points:
        if y is None:
            continue
        px, py = x_of(index), y_of(y)
        line.append(f"{px},{py}")
        if node.get("root_cause") or node.get("passed") is False:
            marks.append({"x": px, "y": py, "root": bool(node.get("root_cause")),
                          "title": f"{node.get('value')} ({node.get('target') or '?'}): max abs diff "
                                   f"{fmt.number(node.get('max_abs_diff'))}"
                                   + (" - root cause" if node.get("root_cause") else "")})
    step = max(1, math.ceil((high - low) / 6))
    ticks = [{"y": y_of(v), "label": f"1e{v}"} for v in range(int(low), int(high) + 1, step)]
    return {"width": width, "height": height, "margin": margin, "points": " ".join(line), "marks": marks,
            "ticks": ticks, "count": len(points), "x_end": x_of(len(points) - 1), "bottom": height - margin / 2}
