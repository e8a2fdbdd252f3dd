"""The development zoo: every transformers and tricky model exports and matches eager in ONNX Runtime.

Slow (a process per model): ``make test-zoo`` runs these, ``make test`` does not.
"""

from __future__ import annotations

import os

import pytest

from onnxsight.zoo import load_suite
from onnxsight.zoo._supervise import supervise
from onnxsight.zoo.suites._hf_breadth import KNOWN_FAILURES

pytestmark = pytest.mark.slow

MODEL_TIMEOUT_S = 900.0
DEV_ZOO = [(suite, spec.name) for suite in ("transformers", "tricky") for spec in load_suite(suite).specs]
CASES = [pytest.param(suite, model, id=model, marks=pytest.mark.xfail(reason=KNOWN_FAILURES[model], strict=True))
         if model in KNOWN_FAILURES else pytest.param(suite, model, id=model) for suite, model in DEV_ZOO]


@pytest.mark.parametrize("suite, model", CASES)
def test_model_exports_and_matches_eager(suite: str, model: str, tmp_path) -> None:
    spec = load_suite(suite).spec(model)
    file, line = spec.source
    task = {"model": model, "suite": suite, "suite_name": suite, "tags": list(spec.tags),
            "model_dir": os.path.join(str(tmp_path), model), "providers": ["CPUExecutionProvider"],
            "per_node": False, "opset": None, "source": {"file": file, "line": line}}
    result = supervise(task, timeout=MODEL_TIMEOUT_S)
    detail = result.error or (result.root_cause or {}).get("message") or result.stderr_tail[-1500:]
    assert result.status == "passed", f"{model}: {result.status} at {result.stage}: {detail}"
    assert result.max_abs_diff is not None and result.outputs_compared > 0


def test_demo_returns_dashboard_and_sarif(tmp_path) -> None:
    from onnxsight.zoo import demo

    dashboard, sarif = demo(str(tmp_path / "zoo"))
    assert dashboard.endswith("dashboard.html") and os.path.exists(dashboard)
    assert sarif.endswith("merged.sarif") and os.path.exists(sarif)
