"""Calls written for torch.onnx.export, made with onnxsight.export (issue 25): the same call, the same model."""

from __future__ import annotations

import pytest
import torch

import onnxsight
from onnxsight.exporter import ExportError


SEEN: list[bool] = []  # what forward() saw, each time it ran (a module attribute would be traced away)


class ExportFriendly(torch.nn.Module):
    """Takes another path while an ONNX exporter runs: torch.onnx.is_in_onnx_export()'s documented use."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SEEN.append(torch.onnx.is_in_onnx_export())
        if torch.onnx.is_in_onnx_export():
            return x.sin()
        return x.cos()


def test_is_in_onnx_export_is_true_while_exporting_and_false_after() -> None:
    model, x = ExportFriendly(), torch.randn(2, 3)
    SEEN.clear()
    program = onnxsight.export(model, (x,))
    assert SEEN and all(SEEN)  # capture ran forward() with the flag set
    assert torch.onnx.is_in_onnx_export() is False
    assert [n.op_type for n in program.model_proto.graph.node] == ["Sin"]
    (out,) = program(x)
    torch.testing.assert_close(out, x.sin())


def test_is_in_onnx_export_is_false_after_a_failed_export() -> None:
    class Fails(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if torch.onnx.is_in_onnx_export():
                raise NotImplementedError("no export path yet")  # both strategies fail: strict sees True too
            return x

    with pytest.raises(ExportError):
        onnxsight.export(Fails(), (torch.randn(2, 3),))
    assert torch.onnx.is_in_onnx_export() is False
    with pytest.raises(ExportError):
        onnxsight.export(ExportFriendly(), (torch.randn(2, 3),), dynamic_shapes={"x": {5: "batch"}})
    assert torch.onnx.is_in_onnx_export() is False


def test_is_in_onnx_export_keeps_an_enclosing_exporters_flag() -> None:
    from torch.onnx._internal.exporter import _flags

    _flags._is_onnx_exporting = True
    try:
        onnxsight.export(ExportFriendly(), (torch.randn(2, 3),))
        assert torch.onnx.is_in_onnx_export() is True
    finally:
        _flags._is_onnx_exporting = False


# --- dimension names as strings in dynamic_shapes ------------------------------------------------------------

class AddMatmul(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x + y) @ y.transpose(-1, -2)


def _dims(program: onnxsight.ONNXProgram) -> dict[str, list[object]]:
    return {value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
            for value in program.model_proto.graph.input}


def _check_at(program: onnxsight.ONNXProgram, model: torch.nn.Module, *inputs: torch.Tensor) -> None:
    (out,) = program(*inputs)
    torch.testing.assert_close(out, model(*inputs), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("spec", [
    {"x": {0: "batch", 1: "sequence"}, "y": {0: "batch", 1: "sequence"}},
    {"x": ("batch", "sequence", None), "y": ["batch", "sequence", None]},
    ({0: "batch", 1: "sequence"}, ("batch", "sequence", None)),
], ids=["dicts", "tuples-per-dim", "tuple-of-inputs"])
def test_dim_names_as_strings_name_the_graphs_dims(spec: object) -> None:
    model, x, y = AddMatmul(), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    program = onnxsight.export(model, (x, y), dynamic_shapes=spec, verify=True)
    assert program.verification.passed
    assert _dims(program) == {"x": ["batch", "sequence", 4], "y": ["batch", "sequence", 4]}
    _check_at(program, model, x, y)
    _check_at(program, model, torch.randn(3, 7, 4), torch.randn(3, 7, 4))  # one name: one size


def test_a_dim_name_that_is_not_an_identifier_is_kept_as_written() -> None:
    model, x, y = AddMatmul(), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    program = onnxsight.export(model, (x, y), dynamic_shapes={"x": {0: "batch size"}, "y": {0: "batch size"}})
    assert _dims(program) == {"x": ["batch size", 5, 4], "y": ["batch size", 5, 4]}
    _check_at(program, model, torch.randn(6, 5, 4), torch.randn(6, 5, 4))


def test_dim_names_mix_with_dims_auto_and_ints() -> None:
    from torch.export import Dim

    model, x, y = AddMatmul(), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    program = onnxsight.export(model, (x, y), dynamic_shapes={"x": {0: "batch", 1: Dim.AUTO, 2: 4},
                                                             "y": (Dim("batch"), Dim("sequence"), None)})
    dims = _dims(program)
    assert dims["x"][0] == dims["y"][0] == "batch"
    assert dims["x"][1] == dims["y"][1] == "sequence"  # AUTO found equal to y's named dim
    _check_at(program, model, torch.randn(3, 8, 4), torch.randn(3, 8, 4))


def test_dim_names_on_nested_inputs() -> None:
    class Nested(torch.nn.Module):
        def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
            return inputs["ids"].float() * inputs["mask"]

    model = Nested()
    inputs = {"ids": torch.randint(0, 9, (2, 6)), "mask": torch.ones(2, 6)}
    program = onnxsight.export(model, (inputs,), dynamic_shapes={"inputs": {"ids": {0: "batch", 1: "sequence"},
                                                                            "mask": ("batch", "sequence")}})
    assert sorted(map(tuple, _dims(program).values())) == [("batch", "sequence")] * 2
    other = {"ids": torch.randint(0, 9, (3, 9)), "mask": torch.rand(3, 9)}
    (out,) = program(other)
    torch.testing.assert_close(out, model(other))


def test_an_invalid_dynamic_shapes_entry_is_one_arg003_without_capture_warnings() -> None:
    with pytest.raises(ExportError) as info:
        onnxsight.export(AddMatmul(), (torch.randn(2, 5, 4), torch.randn(2, 5, 4)),
                         dynamic_shapes={"x": {0: 2.5}, "y": None})
    codes = [d.code for d in info.value.diagnostics]
    assert codes == ["ARG003"], codes
