"""One program, one set of weights: a weight changed in place after export is refused everywhere (VAL006)."""

from __future__ import annotations

import io

import onnx
import pytest
import torch

import onnxsight
from onnxsight.exporter.program._onnx_program import WeightsChangedError


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def _exported() -> tuple[_Net, torch.Tensor, object]:
    torch.manual_seed(0)
    model = _Net().eval()
    x = torch.randn(2, 4)
    return model, x, onnxsight.export(model, (x,))


_USES = {
    "call": lambda prog, x, tmp: prog(x),
    "model_proto": lambda prog, x, tmp: prog.model_proto,
    "verify": lambda prog, x, tmp: onnxsight.verify(prog),
    "save_embedded": lambda prog, x, tmp: prog.save(tmp / "m.onnx"),
    "save_external": lambda prog, x, tmp: prog.save(tmp / "m.onnx", external_data=True),
    "save_file_object": lambda prog, x, tmp: prog.save(io.BytesIO()),
}


@pytest.mark.parametrize("use", sorted(_USES))
def test_weight_changed_in_place_is_refused(use: str, tmp_path) -> None:
    model, x, prog = _exported()
    prog(x)  # build and cache the embedded model and the session with the exported weights
    with torch.no_grad():
        model.fc.weight.add_(1)
    with pytest.raises(WeightsChangedError) as info:
        _USES[use](prog, x, tmp_path)
    assert info.value.rule == "VAL006"
    message = str(info.value)
    assert "VAL006" in message and "fc.weight" in message and "fc.bias" not in message
    assert "export" in message  # says how to get a program with the new weights
    assert not (tmp_path / "m.onnx.data").exists() and not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("use", sorted(_USES))
def test_unchanged_weights_agree_everywhere(use: str, tmp_path) -> None:
    model, x, prog = _exported()
    _USES[use](prog, x, tmp_path)  # no error when nothing changed


def test_embedded_and_external_saves_hold_the_same_weights(tmp_path) -> None:
    model, x, prog = _exported()
    expected = model(x)
    prog.save(tmp_path / "a.onnx")
    prog.save(tmp_path / "b.onnx", external_data=True)
    import onnxruntime as ort
    for name in ("a.onnx", "b.onnx"):
        session = ort.InferenceSession(str(tmp_path / name), providers=["CPUExecutionProvider"])
        (out,) = session.run(None, {prog.input_names[0]: x.numpy()})
        torch.testing.assert_close(torch.from_numpy(out), expected.detach())
    torch.testing.assert_close(prog(x)[0], expected.detach())


def test_replaced_parameter_keeps_the_exported_weights(tmp_path) -> None:
    """Rebinding ``model.fc.weight`` leaves the program's tensor untouched: it stays consistent."""
    model, x, prog = _exported()
    expected = model(x).detach()
    model.fc.weight = torch.nn.Parameter(torch.zeros(3, 4))
    torch.testing.assert_close(prog(x)[0], expected)
    prog.save(tmp_path / "m.onnx", external_data=True)
    loaded = onnx.load(str(tmp_path / "m.onnx"))
    weight = next(t for t in loaded.graph.initializer if t.name == "fc.weight")
    assert onnx.numpy_helper.to_array(weight).any()  # the exported weights, not the new zeros
    assert onnxsight.verify(prog).passed
