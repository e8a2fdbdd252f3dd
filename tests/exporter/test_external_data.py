"""External data: automatic above the threshold, explicit on request, weights streamed from torch."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import torch

import onnxsight
from onnxsight.exporter.program import _onnx_program as _program


class Wide(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)
        self.register_buffer("offset", torch.linspace(-1, 1, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + self.offset


def _run(path: str, x: torch.Tensor) -> torch.Tensor:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {"x": x.numpy()})[0])


def test_explicit_external_data_round_trips(tmp_path) -> None:
    model, x = Wide().eval(), torch.randn(3, 64)
    program = onnxsight.export(model, (x,))
    files = program.save(tmp_path / "m.onnx", external_data=True)
    assert [f.rsplit("/", 1)[-1] for f in files] == ["m.onnx", "m.onnx.data"]
    loaded = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert all(i.data_location == onnx.TensorProto.EXTERNAL for i in loaded.graph.initializer)
    assert (tmp_path / "m.onnx").stat().st_size < 64 * 64 * 4  # the weights are not in the graph file
    torch.testing.assert_close(_run(str(tmp_path / "m.onnx"), x), model(x))


def test_automatic_external_data_above_threshold(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(_program, "EXTERNAL_DATA_THRESHOLD", 1024)
    model, x = Wide().eval(), torch.randn(3, 64)
    program = onnxsight.export(model, (x,), tmp_path / "big.onnx")
    assert (tmp_path / "big.onnx.data").exists()
    assert any(d.code == "ONX003" for d in program.diagnostics)
    torch.testing.assert_close(_run(str(tmp_path / "big.onnx"), x), model(x))
    torch.testing.assert_close(program(x)[0], model(x))  # __call__ goes through a saved copy


def test_small_model_embeds_weights(tmp_path) -> None:
    program = onnxsight.export(Wide(), (torch.randn(1, 64),))
    files = program.save(tmp_path / "small.onnx")
    assert len(files) == 1 and not (tmp_path / "small.onnx.data").exists()
