"""Decisions at an integer boundary (a cast to int64) in a propagated per-node run.

The ONNX model is nudged by 2e-5, well inside float32's tolerance, where a value sits
1e-5 under an integer: its truncation flips from 2 to 3. The cast is judged again on
PyTorch's exact inputs (ACC011 when it decides the same there, a root cause when not),
and a graph output is never excused. (torchvision's nms: tests/vision/test_decision_verify.py.)
"""

from __future__ import annotations

import torch

import onnxsight
from tests.verification.faults import add_constant

X = torch.tensor([0.2999999, 0.51, 0.77])  # 10x: 2.999999 truncates to 2, 3.000019 to 3


class Truncates(torch.nn.Module):
    def __init__(self, clamp: bool) -> None:
        super().__init__()
        self.clamp = clamp

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scaled = x * 10.0
        bucket = scaled.to(torch.int64)
        return scaled, bucket.clamp(max=1) if self.clamp else bucket  # clamped: 1 either side


def _nudged(clamp: bool) -> tuple[onnxsight.ONNXProgram, onnxsight.VerificationResult]:
    prog = onnxsight.export(Truncates(clamp), (X,))
    scaled = next(n.output[0] for n in prog.model_proto.graph.node if n.op_type == "Mul")
    return prog, onnxsight.verify(prog, onnx_model=add_constant(prog.model_proto, scaled, 2e-5))


def _codes(result: onnxsight.VerificationResult) -> list[str]:
    return [d.code for d in result.diagnostics]


def test_cast_flipped_by_in_tolerance_rounding_is_acc011() -> None:
    _, result = _nudged(clamp=True)
    cast = result.nodes[result.nodes["target"] == "aten.to.dtype"].iloc[0]
    assert not cast["passed"] and cast["borderline"] and not cast["root_cause"], "the nudge did not flip the cast"
    assert result.passed and result.root_causes.empty
    warning = next(d for d in result.diagnostics if d.code == "ACC011")
    assert "integers or booleans" in warning.message and "1 of 3 elements differ" in warning.message
    assert warning.location is not None and warning.location.file.endswith("test_decisions.py")


def test_flipped_cast_that_reaches_an_output_fails() -> None:
    _, result = _nudged(clamp=False)
    assert not result.passed
    assert {"ACC011", "ACC001"} <= set(_codes(result)) and "ACC002" not in _codes(result)


def test_cast_that_is_wrong_on_pytorchs_inputs_is_a_root_cause() -> None:
    prog = onnxsight.export(Truncates(True), (X,))
    clean = onnxsight.verify(prog)
    assert clean.passed
    cast = clean.nodes.loc[clean.nodes["target"] == "aten.to.dtype", "value"].iloc[0]
    result = onnxsight.verify(prog, onnx_model=add_constant(prog.model_proto, cast, 1))
    assert not result.passed and list(result.root_causes["value"]) == [cast]
    assert "ACC011" not in _codes(result)


class Shifted(torch.nn.Module):
    """The truncated value moves with the length: 2.99997 at the example's 3, 2.99999 at 4."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scaled = x * 10.0 + (x.shape[0] - 3) * 2e-5
        return scaled.to(torch.int64)


def test_other_size_that_differs_only_by_a_borderline_decision_is_not_acc010() -> None:
    """At length 4 the nudged ONNX model truncates 3.00001 where PyTorch truncates 2.99999: the output
    differs, but by rounding at an integer boundary, which says nothing about the dim: no ACC010, and
    the size is listed with the decision that explains it."""
    x = torch.tensor([0.2999970, 0.51, 0.77])
    prog = onnxsight.export(Shifted(), (x,), dynamic_shapes={"x": {0: torch.export.Dim("n", min=1, max=64)}})
    scaled = next(n.output[0] for n in prog.model_proto.graph.node if n.op_type == "Add")
    result = onnxsight.verify(prog, onnx_model=add_constant(prog.model_proto, scaled, 2e-5), other_sizes=True)
    assert result.passed and "ACC010" not in _codes(result), result.diagnostics
    forgiven = [entry for entry in result.info["sizes_within_noise_floor"] if entry.get("decisions")]
    assert [entry["sizes"] for entry in forgiven] == [{"n": 4}]
    (what,) = forgiven[0]["decisions"].values()
    assert "integers or booleans" in what
