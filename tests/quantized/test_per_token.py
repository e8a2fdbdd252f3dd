"""quantized_decomposed's per-token primitives (one scale a row of the last dim) against eager.

No torchao 0.18 flow emits them (its 8da4w modules quantize activations with choose_qparams_affine), but
ExecuTorch-style code calls them directly: quantize_per_token, dequantize_per_token,
choose_qparams_per_token and choose_qparams_per_token_asymmetric, at several sizes of a dynamic batch.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch

import onnxsight
from onnxsight.exporter._api import export

with contextlib.redirect_stderr(io.StringIO()):
    pytest.importorskip("torchao", reason="torchao is not installed: pip install onnxsight[quant]")
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines torch.ops.quantized_decomposed

qd = torch.ops.quantized_decomposed


class PerTokenQDQ(torch.nn.Module):
    """Dynamic per-token activation quantization in front of a Linear, as XNNPACK's 8da4w computes it."""

    def __init__(self, symmetric: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(16, 8)
        self.symmetric = symmetric

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        choose = qd.choose_qparams_per_token if self.symmetric else qd.choose_qparams_per_token_asymmetric
        scales, zero_points = choose(x, torch.int8)
        q = qd.quantize_per_token(x, scales, zero_points, -128, 127, torch.int8)
        y = qd.dequantize_per_token(q, scales, zero_points, -128, 127, torch.int8, torch.float32)
        return q, self.fc(y)


@pytest.mark.parametrize("opset", [17, 21])
@pytest.mark.parametrize("symmetric", [False, True])
def test_per_token_quantization_matches_eager_at_several_sizes(symmetric: bool, opset: int) -> None:
    model = PerTokenQDQ(symmetric).eval()
    x = torch.randn(2, 5, 16)
    program = export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch", max=64)},), opset_version=opset)
    assert not [d for d in program.diagnostics if d.code == "OPS001"]
    for batch_size in (2, 1, 7):
        x = torch.randn(batch_size, 5, 16) * 3
        q, y = model(x)
        onnx_q, onnx_y = (np.asarray(v) for v in program(x))
        assert onnx_q.dtype == np.int8
        assert np.abs(onnx_q.astype(np.int32) - q.numpy()).max() <= 1   # one step at most (a half step)
        assert np.mean(onnx_q != q.numpy()) < 0.01
        result = onnxsight.verify(program, (x,))
        assert result.root_causes.empty, [d.message for d in result.diagnostics]
        if symmetric:   # PyTorch's meta declares float64/int64 qparams where its kernel returns float32: the
            # traced graph (and so the ONNX graph) has the declared types, which verification names
            mismatched = sorted(d.message for d in result.diagnostics if "has dtype" in d.message)
            assert mismatched == ["choose_qparams_per_token__0 has dtype float64, expected float32",
                                  "choose_qparams_per_token__1 has dtype int64, expected float32"], mismatched
        else:
            assert result.passed, [d.message for d in result.diagnostics]


def test_choose_qparams_per_token_refuses_a_dtype_pytorch_refuses() -> None:
    class Uint8(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return qd.choose_qparams_per_token(x, torch.uint8)[0]

    with pytest.raises(onnxsight.ExportError) as info:
        export(Uint8(), (torch.randn(3, 4),))
    assert any(d.code in ("OPS006", "CAP001") for d in info.value.diagnostics), [d.code for d in info.value.diagnostics]
