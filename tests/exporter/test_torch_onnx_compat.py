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
