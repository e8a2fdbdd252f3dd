"""The nightly model-zoo job: suites, isolated model processes, results store, regressions, dashboard.

    from onnxsight.zoo import ModelSpec, RunOptions, run
    outcome = run(RunOptions(suites=("smoke",), out_dir="zoo-out"))

Command line: ``onnxsight zoo run|list|report`` (``onnxsight.zoo.cli``).
"""

from __future__ import annotations

import importlib
from typing import Any

from onnxsight.zoo._spec import BUILTIN_SUITES, ModelSpec, Suite, SuiteUnavailable, load_suite, load_suites

_LAZY = {
    "RunOptions": "onnxsight.zoo._runner",
    "RunOutcome": "onnxsight.zoo._runner",
    "run": "onnxsight.zoo._runner",
    "ModelResult": "onnxsight.zoo._result",
    "ResultsStore": "onnxsight.zoo._store",
    "RegressionPolicy": "onnxsight.zoo._baseline",
    "report": "onnxsight.zoo._report",
    "demo": "onnxsight.zoo._demo",
}

__all__ = sorted(["BUILTIN_SUITES", "ModelSpec", "Suite", "SuiteUnavailable", "load_suite", "load_suites", *_LAZY])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onnxsight.zoo' has no attribute {name!r}")
