"""Writing one run's reports: markdown, HTML, SARIF and the run record itself, from a RunRecord.

Rendering only: the facts are gathered before (``onnxsight.pipeline``
builds the :class:`RunRecord`), so a saved record renders again the same way
on a machine without the model, torch or ONNX Runtime (``onnxsight report``).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from typing import Any, Mapping, Sequence

from onnxsight.diagnostics import Diagnostic
from onnxsight.reports._record import RunRecord, paths_for, reserve_paths, write_atomic
from onnxsight.reports.sarif import write_sarif

logger = logging.getLogger("onnxsight")


def write_reports(run: RunRecord, artifacts_dir: str | os.PathLike, *, diagnostics: Sequence[Any] | None = None,
                  export_record: Any = None, paths: Mapping[str, str] | None = None) -> list[str]:
    """Render ``run`` into fresh files in ``artifacts_dir`` (or at ``paths``); return [md, html, sarif, json].

    ``diagnostics`` (Diagnostic objects) and ``export_record`` feed the SARIF
    log; without them it is rebuilt from the diagnostics in the record.
    """
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


def _diagnostics_from_record(run: RunRecord) -> list[Diagnostic]:
    out = []
    for row in run.diagnostics:
        try:
            out.append(Diagnostic.from_dict(row))
        except (KeyError, ValueError) as exc:  # a rule this version does not know
            logger.warning("onnxsight report: skipping diagnostic %s in SARIF: %s", row.get("rule"), exc)
    return out
