"""QNT001: eager-mode quantized modules and quantized tensors are refused, named, with the PT2E flow to use.

These need no torchao: eager-mode quantization is torch.ao's own.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from onnxsight.exporter._api import export
from onnxsight.exporter._errors import CaptureError, TranslationError


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.fc(x))


class Stubs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.dequant = torch.ao.quantization.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dequant(self.conv(self.quant(x)))


def _dynamic() -> torch.nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(MLP().eval(), {torch.nn.Linear}, dtype=torch.qint8)


def _static() -> torch.nn.Module:
    model = Stubs().eval()
    model.qconfig = torch.ao.quantization.get_default_qconfig("x86")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = torch.ao.quantization.prepare(model)
        prepared(torch.randn(1, 3, 8, 8))
        return torch.ao.quantization.convert(prepared)


@pytest.mark.parametrize(("build", "args", "expected"), [
    (_dynamic, (torch.randn(2, 8),), {"fc": "torch.ao.nn.quantized.dynamic.modules.linear.Linear",
                                      "head.1": "torch.ao.nn.quantized.dynamic.modules.linear.Linear"}),
    (_static, (torch.randn(1, 3, 8, 8),), {"quant": "torch.ao.nn.quantized.modules.Quantize",
                                           "conv": "torch.ao.nn.quantized.modules.conv.Conv2d",
                                           "dequant": "torch.ao.nn.quantized.modules.DeQuantize"}),
])
def test_eager_quantized_modules_are_named(build: object, args: tuple, expected: dict[str, str]) -> None:
    with pytest.raises(CaptureError) as info:
        export(build(), args)
    found = [d for d in info.value.diagnostics if d.code == "QNT001"]
    assert {d.fields["submodule"]: d.fields["kind"] for d in found} == expected
    assert not [d for d in info.value.diagnostics if d.code.startswith("CAP")]  # torch.export was not tried
    assert "prepare_pt2e" in found[0].rule.fix and "onnxsight[quant]" in found[0].rule.fix
    assert found[0].location.file == __file__


def test_quantized_input_is_named_by_its_argument() -> None:
    class Dequantize(torch.nn.Module):
        def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
            return x.dequantize() * scale

    with pytest.raises(CaptureError) as info:
        export(Dequantize(), (torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.quint8), 2.0))
    [found] = [d for d in info.value.diagnostics if d.code == "QNT001"]
    assert found.message.startswith("input x (a torch.quint8 tensor) is eager-mode quantization")


def test_float_model_with_float_functional_is_not_refused() -> None:
    """torch.ao.nn.quantized.FloatFunctional in a float model is plain float arithmetic: it exports."""
    class Residual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            self.add = torch.ao.nn.quantized.FloatFunctional()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.add.add(self.fc(x), x)

    program = export(Residual().eval(), (torch.randn(2, 4),))
    assert not [d for d in program.diagnostics if d.code == "QNT001"]


def test_quantize_op_in_forward_is_named_at_its_line() -> None:
    """upstream's test_quantize_per_tensor: torch.quantize_per_tensor in forward() captures (its fake kernel
    returns float32) but makes a quantized tensor: QNT001 at the line, not a missing translation (OPS002)."""
    class Quantize(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.quantize_per_tensor(x, 0.2, 0, torch.qint8)

    with pytest.raises(TranslationError) as info:
        export(Quantize(), (torch.randn(4, 6),))
    [found] = [d for d in info.value.diagnostics if d.level.name == "ERROR"]
    assert found.code == "QNT001" and found.location.file == __file__
    assert found.message.startswith("aten.quantize_per_tensor.default (makes torch.qint8 tensors)")


def test_eager_qat_fake_quantize_is_named() -> None:
    """upstream's test_fake_quantize_activation: prepare_qat's FakeQuantize branches on its switch buffers
    (a data-dependent branch in torch's code): QNT001 names it before capture, with the PT2E flow."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 3))
    model.qconfig = torch.ao.quantization.get_default_qat_qconfig("x86")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.ao.quantization.prepare_qat(model.train(), inplace=True)
    model.apply(torch.ao.quantization.disable_observer)
    with pytest.raises(CaptureError) as info:
        export(model.eval(), (torch.randn(4, 2),))
    found = {d.fields["submodule"]: d.fields["kind"] for d in info.value.diagnostics if d.code == "QNT001"}
    fused = "torch.ao.quantization.fake_quantize.FusedMovingAvgObsFakeQuantize"
    assert found == {"0.weight_fake_quant": fused, "0.activation_post_process": fused}
    assert not [d for d in info.value.diagnostics if d.code.startswith("CAP")]
