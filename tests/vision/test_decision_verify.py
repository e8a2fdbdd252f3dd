"""Per-node verification across a threshold decision (torchvision's nms).

NMS keeps or drops a box by comparing its IoU with a threshold. When ONNX Runtime's
boxes differ from PyTorch's by far less than the tolerance but an IoU sits that close
to the threshold, the two sides keep different boxes: a propagated per-node run then
sees a shape mismatch at the nms with every input matching. Each case here builds that
borderline on purpose (two boxes whose IoU is one float step under 0.5, and an ONNX
model whose box corners are 1e-5 larger, well inside the float32 tolerance) and checks
the verdict: the nms is judged again on PyTorch's own inputs, a decision that matches
there is ACC011 (a warning, not a root cause), graph outputs still have to match end to
end, and an nms that decides wrongly on PyTorch's inputs is still a root cause.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

torchvision = pytest.importorskip("torchvision")

import onnxsight  # noqa: E402
from tests.verification.faults import add_constant  # noqa: E402

SHIFT = 1e-5  # added to every box's x2, y2 in the ONNX model: 10x under float32's atol


class _Boxes(torch.nn.Module):
    """Boxes from corners and sizes (a computed value, so the ONNX side can be nudged), then nms."""

    def __init__(self, top: int | None) -> None:
        super().__init__()
        self.top = top

    def forward(self, xy: torch.Tensor, wh: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        far = xy + wh
        boxes = torch.cat([xy, far], dim=1)
        keep = torchvision.ops.nms(boxes, scores, 0.5)
        return boxes[keep if self.top is None else keep[: self.top]]


def _borderline() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Box A at [0, 0, 10, 10], box B shifted right by x: IoU (10 - x) / (10 + x) one step under 0.5, so
    torchvision keeps both; with x2 and y2 SHIFT larger the IoU passes 0.5 and B is dropped."""
    scores = torch.tensor([0.9, 0.8])
    x = np.float32(10 / 3)
    for _ in range(64):
        xy = torch.tensor([[0.0, 0.0], [float(x), 0.0]])
        wh = torch.tensor([[10.0, 10.0], [10.0, 10.0]])
        boxes = torch.cat([xy, xy + wh], 1)
        if (torchvision.ops.nms(boxes, scores, 0.5).numel() == 2
                and torchvision.ops.nms(torch.cat([xy, xy + wh + SHIFT], 1), scores, 0.5).numel() == 1):
            return xy, wh, scores
        x = np.nextafter(x, np.float32(4))
    raise AssertionError("no borderline pair of boxes found near x = 10/3")


def _program(top: int | None) -> onnxsight.ONNXProgram:
    return onnxsight.export(_Boxes(top), _borderline())


def _value(prog: onnxsight.ONNXProgram, op_type: str) -> str:
    """The one ONNX value produced by an ``op_type`` node that PyTorch has a value for."""
    outputs = [n.output[0] for n in prog.model_proto.graph.node if n.op_type == op_type]
    named = [name for name in outputs if name in set(prog.value_names.values())]
    assert len(named) == 1, (op_type, outputs)
    return named[0]


def _codes(result) -> list[str]:
    return [d.code for d in result.diagnostics]


def test_borderline_nms_is_a_warning_when_the_outputs_match() -> None:
    prog = _program(top=1)  # the best box only: the same on both sides
    nudged = add_constant(prog.model_proto, _value(prog, "Add"), SHIFT)
    result = onnxsight.verify(prog, onnx_model=nudged)
    nms = result.nodes[result.nodes["target"] == "torchvision.nms.default"].iloc[0]
    assert list(nms["onnx_shape"]) == [1] and list(nms["shape"]) == [2], "the borderline case did not flip"
    assert result.passed, result.diagnostics
    assert "ACC002" not in _codes(result) and "ACC004" not in _codes(result)
    warning = next(d for d in result.diagnostics if d.code == "ACC011")
    assert warning.properties["value"] == nms["value"]
    assert "torchvision.nms" in warning.message and "PyTorch's inputs" in warning.message
    assert result.root_causes.empty
    assert bool(nms["borderline"]) and not bool(nms["root_cause"])


def test_borderline_nms_fails_when_an_output_differs_end_to_end() -> None:
    prog = _program(top=None)  # every kept box: B is an output row on one side only
    nudged = add_constant(prog.model_proto, _value(prog, "Add"), SHIFT)
    result = onnxsight.verify(prog, onnx_model=nudged)
    assert not result.passed
    codes = _codes(result)
    assert "ACC011" in codes and "ACC001" in codes, codes


def test_nms_wrong_on_pytorchs_inputs_is_a_root_cause() -> None:
    prog = _program(top=1)
    clean = onnxsight.verify(prog)
    assert clean.passed and "ACC011" not in _codes(clean)
    nms = clean.nodes.loc[clean.nodes["target"] == "torchvision.nms.default", "value"].iloc[0]
    faulty = add_constant(prog.model_proto, nms, 1)  # every kept index off by one
    result = onnxsight.verify(prog, onnx_model=faulty)
    assert not result.passed
    assert list(result.root_causes["value"])[:1] == [nms]
    assert "ACC011" not in _codes(result)


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
def test_clean_nms_passes_in_every_mode(mode: str) -> None:
    result = onnxsight.verify(_program(top=None), mode=mode)
    assert result.passed and "ACC011" not in _codes(result)
