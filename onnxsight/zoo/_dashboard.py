"""The zoo dashboard: one self-contained HTML file per run.

Rendered with jinja2 autoescaping on every value; the only unescaped inserts
are our own CSS and script, allowed by a Content-Security-Policy that names
them by hash and forbids everything else (no network, no other script), so a
model name or error message can never run as code. The trends over the stored
runs and each model's history are inline SVG from ``onnxsight.reports.charts``
(matplotlib; no style attributes, so the policy holds), shaped by ``_history.py``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import jinja2

from onnxsight.zoo._dashboard_assets import CSS, SCRIPT, TEMPLATE
from onnxsight.zoo._history import model_histories, trends
from onnxsight.zoo._result import STATUSES, ModelResult
from onnxsight.zoo._store import ResultsStore
from onnxsight.zoo._summary import fmt_diff, headline, problem, steps_agreed

STDERR_SHOWN = 2000


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def source_link(file: str | None, line: int | None) -> tuple[str | None, str | None]:
    """(href, label) for a source location; links only to absolute local paths, as file: URIs."""
    if not file:
        return None, None
    label = f"{file}:{line}" if line else file
    if not os.path.isabs(file):
        return None, label
    return Path(file).as_uri() + (f"#L{int(line)}" if line else ""), label


def _row(result: ModelResult, anchor: str | None) -> dict[str, Any]:
    cause = result.root_cause or {}
    link, where = source_link(cause.get("file"), cause.get("line"))
    if not where and result.status != "passed":  # no user frame: point at the model's build function
        link, where = source_link(result.source.get("file"), result.source.get("line"))
    ops = ", ".join(f"{op} {n}" for op, n in sorted(result.op_counts.items(), key=lambda kv: -kv[1]))
    return {
        "name": result.name, "suite": result.suite, "status": result.status, "stage": result.stage,
        "tags": list(result.tags), "seconds": f"{result.seconds:.1f}",
        "export": f"{result.export_seconds:.2f}" if result.export_seconds is not None else "",
        "peak": f"{result.peak_mb:.0f}" if result.peak_mb else "",
        "size": f"{result.onnx_bytes / 1024:.0f}" if result.onnx_bytes else "", "diff": fmt_diff(result.max_abs_diff),
        "scale": fmt_diff(result.reference_max_abs),
        "problem": problem(result), "link": link, "where": where, "ops": ops, "nodes": result.node_count,
        "stderr": result.stderr_tail[-STDERR_SHOWN:] if result.status != "passed" else "",
        "history": anchor, "steps": steps_agreed(result),
    }


def render(results: Sequence[ModelResult], *, run_id: str, changes: Sequence[dict[str, Any]] = (),
           baseline: str | None = None, skipped: Sequence[tuple[str, str]] = (), store: ResultsStore | None = None,
           started: float | None = None, interrupted: bool = False) -> str:
    """The dashboard as one HTML string."""
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    csp = ("default-src 'none'; img-src data:; base-uri 'none'; form-action 'none'; "
           f"style-src '{_sha256(CSS)}'; script-src '{_sha256(SCRIPT)}'")
    tally = Counter(r.status for r in results)
    order = sorted(results, key=lambda r: (r.status == "passed", r.suite, r.name))
    histories = model_histories(store, [r.name for r in order])
    anchors = {h["name"]: h["anchor"] for h in histories if h["rows"]}
    return environment.from_string(TEMPLATE).render(
        csp=csp, css=CSS, script=SCRIPT, run_id=run_id, headline=headline(results), interrupted=interrupted,
        started=time.strftime("%Y-%m-%d %H:%M", time.localtime(started)) if started else None,
        tally=[(s, tally[s]) for s in STATUSES if tally[s]], skipped=list(skipped), baseline=baseline,
        changes=list(changes), trends=trends(store), tags=sorted({t for r in results for t in r.tags}),
        rows=[_row(r, anchors.get(r.name)) for r in order], generation=any(r.generation for r in results),
        histories=[h for h in histories if h["rows"]])


def write_dashboard(out_dir: str, *, results: Sequence[ModelResult], run_id: str,
                    changes: Sequence[dict[str, Any]] = (), baseline: str | None = None,
                    skipped: Sequence[tuple[str, str]] = (), store: ResultsStore | None = None,
                    started: float | None = None, interrupted: bool = False) -> str:
    """Write ``DIR/dashboard.html`` and return its path."""
    path = os.path.join(out_dir, "dashboard.html")
    html = render(results, run_id=run_id, changes=changes, baseline=baseline, skipped=skipped, store=store,
                  started=started, interrupted=interrupted)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(html)
    return path
