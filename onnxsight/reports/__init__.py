"""Renderers: SARIF 2.1.0, markdown and HTML. Pure functions of records; no analysis here.

reports imports only rules and diagnostics (never torch, ONNX Runtime or the
exporter): the facts a report shows are gathered into a :class:`RunRecord`
beforehand, by ``onnxsight.pipeline``. Entry points (imported lazily so
``import onnxsight`` stays light):

- ``to_sarif(diagnostics, ...) -> dict`` and ``write_sarif(diagnostics, path, ...) -> str`` (reports/sarif.py)
- ``write_reports(run, artifacts_dir, ...) -> list[str]``: markdown, HTML, SARIF and the run record
- ``rerender(record_path) -> list[str]``: the reports of a saved run record, again
- ``RunRecord``, ``jsonable`` (what a record may hold), ``write_text_atomic``
- ``onnxsight.reports.charts``: the charts (matplotlib, inline SVG) of the reports and the zoo dashboard
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "to_sarif": "onnxsight.reports.sarif",
    "write_sarif": "onnxsight.reports.sarif",
    "merge_sarif": "onnxsight.reports.sarif",
    "write_reports": "onnxsight.reports._write",
    "rerender": "onnxsight.reports._write",
    "RunRecord": "onnxsight.reports._record",
    "jsonable": "onnxsight.reports._record",
    "write_text_atomic": "onnxsight.reports._files",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onnxsight.reports' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
