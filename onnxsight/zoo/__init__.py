"""The nightly model-zoo job: suites, isolated model processes, results store, regressions, dashboard.

    from onnxsight.zoo import ModelSpec, RunOptions, run
    outcome = run(RunOptions(suites=("smoke",), out_dir="zoo-out"))

Command line: ``onnxsight zoo run|list|report`` (``onnxsight.zoo.cli``).
"""

from __future__ import annotations

from onnxsight._lazy import lazy_names
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

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
