"""Renderers: SARIF 2.1.0, markdown and HTML. Pure functions of records; no analysis here.

Entry points (imported lazily so `import onnxsight` stays light):
- ``to_sarif(diagnostics, ...) -> dict`` and ``write_sarif(diagnostics, path, ...) -> str`` (reports/sarif.py)
- ``write_export_reports(*, record, diagnostics, program, error, artifacts_dir) -> list[str]`` (reports/_export.py)
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "to_sarif": "onnxsight.reports.sarif",
    "write_sarif": "onnxsight.reports.sarif",
    "merge_sarif": "onnxsight.reports.sarif",
    "write_export_reports": "onnxsight.reports._export",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onnxsight.reports' has no attribute {name!r}")
