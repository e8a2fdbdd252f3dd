"""Every dev-zoo model (smoke, tricky, transformers) exports, loads and runs in ONNX Runtime at each
supported opset (17..25) and matches the model's eager forward.

Slow (every model x 9 opsets): ``make test-zoo-opsets`` runs it; ``make test`` does not. Each case goes
through the zoo worker itself (``run_model``), so "passed" means what the nightly job means by it:
exported, checked, run in ONNX Runtime, equal to eager and to the exported program.
"""

from __future__ import annotations

import os

import pytest

from onnxsight.zoo import load_suite
from onnxsight.zoo._worker import run_model
from onnxsight.zoo.suites._hf_breadth import KNOWN_FAILURES

pytestmark = pytest.mark.slow

OPSETS = tuple(range(17, 26))
SUITES = ("smoke", "tricky", "transformers")
MODELS = [(suite, spec.name) for suite in SUITES for spec in load_suite(suite).specs]
CASES = [(suite, model, opset) for suite, model in MODELS for opset in OPSETS]


# A model the zoo knows is refused at export (its status in the README) must keep failing, at every opset.
PARAMS = [pytest.param(suite, model, opset, id=f"{model}-opset{opset}",
                       marks=[pytest.mark.xfail(reason=KNOWN_FAILURES[model], strict=True)] if model in KNOWN_FAILURES
                       else []) for suite, model, opset in CASES]


@pytest.mark.parametrize("suite, model, opset", PARAMS)
def test_model_runs_in_ort_at_opset(suite: str, model: str, opset: int, tmp_path) -> None:
    model_dir = os.path.join(str(tmp_path), model)
    os.makedirs(model_dir)
    task = {"model": model, "suite": suite, "providers": ["CPUExecutionProvider"], "per_node": False,
            "opset": opset, "model_dir": model_dir}
    result = run_model(task)
    detail = result.error or (result.root_cause or {}).get("message") or result.stderr_tail[-1500:]
    assert result.status == "passed", f"{model} at opset {opset}: {result.status} at {result.stage}: {detail}"
    assert result.outputs_compared > 0 and result.max_abs_diff is not None
