"""Fault localisation: inject one fault into one ONNX node; verify must name that value first."""

from __future__ import annotations

import pytest

import onnxsight
from tests.verification.faults import scale_value, swap_inputs
from tests.verification.models import exported

SCALED = {
    "mlp": ["linear", "relu", "linear_1", "relu_1", "mul", "add", "linear_2", "add_1", "linear_4", "sub", "abs_1",
            "add_3", "div"],
    "attention": ["linear", "linear_1", "linear_2", "permute", "mm", "mul", "sigmoid", "div", "mm_1", "tanh",
                  "linear_3", "add"],
    "gated": ["linear", "split_with_sizes__0", "split_with_sizes__1", "sigmoid", "mul", "abs_1", "exp", "sub",
              "log1p", "cat"],
}
SWAPPED = {"mlp": ["sub", "div"], "attention": ["mm", "mm_1", "div"], "gated": ["sub"]}

CASES = [pytest.param(model, value, "scale", id=f"{model}-{value}-scale")
         for model, values in SCALED.items() for value in values] + \
        [pytest.param(model, value, "swap", id=f"{model}-{value}-swap")
         for model, values in SWAPPED.items() for value in values]


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
@pytest.mark.parametrize(("model", "value", "fault"), CASES)
def test_injected_fault_is_the_first_root_cause(model: str, value: str, fault: str, mode: str) -> None:
    prog = exported(model)
    inject = scale_value if fault == "scale" else swap_inputs
    result = onnxsight.verify(prog, onnx_model=inject(prog.model_proto, value), mode=mode)
    assert not result.passed
    assert list(result.root_causes["value"])[:1] == [value]
    if mode == "isolated":  # PyTorch's inputs everywhere: nothing else diverges
        assert list(result.root_causes["value"]) == [value]
        assert list(result.nodes.loc[~result.nodes["passed"], "value"]) == [value]
    root = next(d for d in result.diagnostics if d.code == "ACC002")
    assert root.properties["fx_node"] == value.split("__")[0]
    assert root.location is not None and root.location.file.endswith("models.py")


@pytest.mark.parametrize("model", sorted(SCALED))
def test_downstream_mismatches_are_propagated_from_the_root(model: str) -> None:
    prog = exported(model)
    value = SCALED[model][0]
    result = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, value))
    failed = result.nodes[~result.nodes["passed"]]
    assert set(failed.loc[~failed["root_cause"], "propagated_from"]) <= {value}
    codes = [d.code for d in result.diagnostics]
    assert "ACC006" in codes and "ACC001" in codes
