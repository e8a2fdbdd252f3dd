"""torch.onnx-style dynamic_axes keys that name nothing: ARG016 warns (key and valid names) and the export goes on.

A key that names an input but an axis it lacks stays an ARG003 error (tests/exporter/test_bad_calls.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnxsight
from onnxsight.exporter import InvalidArgumentError


class One(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2


X = torch.randn(2, 3)


@pytest.mark.parametrize("options, words", [
    ({"dynamic_axes": {"x": {0: "batch"}, "seq_lengths": {0: "batch"}}},
     ("'seq_lengths'", "forward()'s arguments are ['x']")),
    ({"dynamic_axes": {"input": {0: "batch"}, "seq_lengths": [0]}, "input_names": ["input"]},
     ("'seq_lengths'", "input_names are ['input']")),
    ({"dynamic_axes": {"features": {0: "batch"}, "inp": {0: "b"}}, "input_names": ["features"],
      "output_names": ["y"]},
     ("'inp'", "input_names are ['features']", "output_names are ['y']")),
], ids=["unknown-key", "list-of-axes-with-input-names", "with-input-and-output-names"])
def test_key_naming_nothing_warns_and_exports(options: dict[str, Any], words: tuple[str, ...]) -> None:
    program = onnxsight.export(One(), (X,), **options)
    warned = [d for d in program.diagnostics if d.rule.code == "ARG016"]
    assert len(warned) == 1 and warned[0].level.value == "warning"
    for word in words:
        assert word in warned[0].message, warned[0].message
    # the keys that do name the input still make its axis dynamic, and the model runs at another batch
    dims = program.model_proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and not dims[0].dim_value
    other = torch.randn(5, 3)
    outputs = program(other)
    result = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
    torch.testing.assert_close(torch.as_tensor(result), One()(other))


def test_key_naming_an_input_with_a_wrong_axis_is_still_an_error() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        onnxsight.export(One(), (X,), dynamic_axes={"x": {5: "b"}, "seq_lengths": {0: "b"}})
    codes = sorted(d.rule.code for d in info.value.diagnostics)
    assert codes == ["ARG003", "ARG016"], codes


def test_required_axes_refuse_a_key_naming_nothing_with_the_same_name_resolution() -> None:
    """The command line's --dynamic (RequiredAxes): the keys export() resolves, an unknown one refused (ARG003)."""
    from onnxsight.exporter import RequiredAxes

    class Gate(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: dict[str, torch.Tensor]) -> torch.Tensor:
            return a + b["x"]

    args = (X, {"x": torch.randn(2, 3)})
    axes = RequiredAxes({"a": {0: "batch"}, "x": {0: "batch"}}, source="--dynamic")   # "x": a leaf, by input_names
    program = onnxsight.export(Gate(), args, dynamic_axes=axes, input_names=["a", "x"])
    assert [v.type.tensor_type.shape.dim[0].dim_param for v in program.model_proto.graph.input] == ["batch"] * 2
    assert not [d for d in program.diagnostics if d.rule.code == "ARG016"]
    with pytest.raises(InvalidArgumentError) as info:
        onnxsight.export(Gate(), args, dynamic_axes=RequiredAxes({"y": {0: "batch"}}, source="--dynamic"),
                         input_names=["a", "x"], output_names=["y"])
    (error,) = info.value.diagnostics
    assert error.rule.code == "ARG003" and error.level.value == "error"
    assert "--dynamic names 'y', which is not an input" in error.message
    assert "forward()'s arguments are ['a', 'b']; input names are ['a', 'x']" in error.message
