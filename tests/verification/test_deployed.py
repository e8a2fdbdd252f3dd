"""verify() also runs the whole model in one session as it is deployed (``_deployed.py``).

The per-node engine runs the graph in chunks, each compared value an output of its chunk, which ONNX
Runtime fuses nothing across; the session a user deploys fuses (ONNX Runtime's default optimisation
level). Every graph output of that session is compared with PyTorch too.
"""

from __future__ import annotations

import onnxruntime as ort
import pytest
import torch

import onnxsight
from tests.verification.models import exported


@pytest.mark.parametrize("name", ["mlp", "attention"])
def test_a_float_model_passes_in_its_deployed_session(name: str) -> None:
    result = onnxsight.verify(exported(name))
    assert result.passed, [d.message for d in result.diagnostics]
    deployed = result.info["deployed"]
    assert deployed["compared"] and deployed["optimization_level"] == "ORT_ENABLE_ALL"
    assert {row["output"] for row in deployed["outputs"]} == set(result.output_names)
    assert all(row["passed"] and row["max_abs_diff"] < 1e-4 for row in deployed["outputs"])
    assert not any(d.code == "ACC013" for d in result.diagnostics)


def test_the_deployed_session_uses_the_given_session_options() -> None:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    result = onnxsight.verify(exported("mlp"), session_options=options)
    assert result.passed and result.info["deployed"]["optimization_level"] == "ORT_ENABLE_BASIC"


def test_a_deployed_session_that_differs_fails_naming_the_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """An optimised session whose outputs move (a stand-in for a fusion that rounds differently) is ACC013."""
    from onnxsight.verification import _runners

    program = exported("mlp")
    real = _runners.OrtRunner.infer

    def skewed(self: _runners.OrtRunner, feeds: dict) -> dict:
        results = real(self, feeds)
        level = getattr(self.session_options, "graph_optimization_level", None)
        if level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL:   # only the deployed session
            return {k: v + 1e-2 if k in program.output_names else v for k, v in results.items()}
        return results

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    monkeypatch.setattr(_runners.OrtRunner, "infer", skewed)
    result = onnxsight.verify(program, session_options=options)
    assert not result.passed and result.root_causes.empty   # every node matched per node
    found = [d for d in result.diagnostics if d.code == "ACC013"]
    assert len(found) == 1 and found[0].fields["output"] == program.output_names[0]
    assert "differs from PyTorch by 0.01" in found[0].message and "ORT_DISABLE_ALL" in found[0].message
    assert found[0].location is not None                   # the user's line of the output


def test_the_deployed_session_is_skipped_with_its_reason_above_the_memory_budget() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).eval()
    program = onnxsight.export(model, (torch.randn(2, 256),))   # 256 KB of weights, held once
    result = onnxsight.verify(program, memory_budget=1024)
    deployed = result.info["deployed"]
    assert result.passed and not deployed["compared"] and "exceed memory_budget" in deployed["reason"]


class Noisy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.5, training=True) + 1


def test_random_values_are_not_compared_whole() -> None:
    x = torch.randn(4, 8)
    result = onnxsight.verify(onnxsight.export(Noisy(), (x,)), (x,))
    deployed = result.info["deployed"]
    assert not deployed["compared"] and "random" in deployed["reason"]


@pytest.mark.parametrize("deployed_skew, plain_skew, passes", [(5e-3, 1e-2, True), (1e-2, 5e-3, False)])
def test_a_float_output_is_judged_by_what_the_optimisations_add_to_the_graphs_own_drift(
        monkeypatch: pytest.MonkeyPatch, deployed_skew: float, plain_skew: float, passes: bool) -> None:
    """The graph run whole drifts from PyTorch (float32 rounding over 52 convolutions: MobileNetV2, 2e-4): fused
    kernels that drift no further than it are a note, not an error; further by more than the tolerance, ACC013."""
    from onnxsight.verification import _runners

    program = exported("mlp")
    real = _runners.OrtRunner.infer
    skews = {ort.GraphOptimizationLevel.ORT_ENABLE_ALL: deployed_skew,
             ort.GraphOptimizationLevel.ORT_DISABLE_ALL: plain_skew}

    def skewed(self: _runners.OrtRunner, feeds: dict) -> dict:
        results = real(self, feeds)
        skew = skews.get(getattr(self.session_options, "graph_optimization_level", None), 0.0)
        return {k: v + skew if k in program.output_names else v for k, v in results.items()}

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    monkeypatch.setattr(_runners.OrtRunner, "infer", skewed)
    result = onnxsight.verify(program, session_options=options)
    [found] = [d for d in result.diagnostics if d.code == "ACC013"]
    assert result.passed is passes and (found.level.value == "note") is passes
    assert ("float rounding of fused kernels" in found.message) is passes
