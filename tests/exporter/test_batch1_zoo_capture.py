"""Batch-1 examples of real models keep every requested dim dynamic (issue 13: 'Examples of size 1').

transformers' ConvNeXt and Swin from a 1x3x32x32 example with dynamic batch/height/width used to fail
with CAP004 "Invalid ranges [2:1]": the size-oblivious attempt's `batch <= 1` bound was applied, and the
grown-example retry then asked for batch in [2, 1].
"""

from __future__ import annotations

import pytest
import torch

import onnxsight

pytest.importorskip("transformers")

from onnxsight.zoo.suites.transformers import convnext, swin  # noqa: E402


@pytest.mark.parametrize("build, dims", [
    (convnext, {0: "batch", 2: "height", 3: "width"}),
    (swin, {0: "batch"}),
], ids=["convnext", "swin"])
def test_batch1_example_exports_with_dynamic_batch(build, dims) -> None:
    model, args = build()
    assert args[0].shape[0] == 1
    shapes = {"pixel_values": {axis: torch.export.Dim(name) for axis, name in dims.items()}}
    prog = onnxsight.export(model, args, dynamic_shapes=shapes)
    codes = [d.rule.code for d in prog.diagnostics]
    assert "CAP009" in codes and "CAP004" not in codes
    x = torch.randn(2, *args[0].shape[1:])
    torch.testing.assert_close(prog(x)[0], model(x).last_hidden_state, rtol=1e-4, atol=1e-4)
