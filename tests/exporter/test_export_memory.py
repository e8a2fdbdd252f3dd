"""Export + save of a model below 2 GB holds at most about one extra copy of its weights (issue 11).

Below 2 GB the exporter used to build the embedded ModelProto (every weight copied into
protobuf) for the checker, then serialise it again to save: two to three copies of the
weights on top of the model's own. The checks now run on the weight-free structure and
``save`` streams each weight from the model's tensors into the file, embedded or not.

Each case runs in a fresh process: the peak resident set of export+save alone is read from
the kernel (VmHWM after resetting it through /proc/self/clear_refs, once the model is built
and imports are warm), as bench/large_model.py measures it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import onnx
import pytest
import torch

import onnxsight

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's clear_refs")

_CHILD = r"""
import json, os, sys
import torch
import onnxsight

def status_mb(key):
    with open("/proc/self/status") as handle:
        return int(next(line for line in handle if line.startswith(key)).split()[1]) / 1024

mode, out = sys.argv[1], sys.argv[2]
external = {"default": None, "embedded": False, "external": True}[mode]
onnxsight.export(torch.nn.Linear(4, 4), (torch.randn(1, 4),)).save(out + ".warm.onnx", external_data=external)
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096, bias=False) for _ in range(4)]).eval()
weights_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 1024**2
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
before = status_mb("VmRSS:")
onnxsight.export(model, (torch.randn(1, 4096),)).save(out, external_data=external)
print(json.dumps({"weights_mb": weights_mb, "growth_mb": status_mb("VmHWM:") - before}))
"""


@pytest.mark.parametrize("mode", ["default", "embedded", "external"])
def test_export_and_save_hold_at_most_one_extra_copy(tmp_path, mode: str) -> None:
    out = str(tmp_path / "m.onnx")
    proc = subprocess.run([sys.executable, "-c", _CHILD, mode, out], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    assert measured["growth_mb"] < 1.3 * measured["weights_mb"], measured
    assert os.path.exists(out + ".data") == (mode == "external")
    model = onnx.load(out)   # the file holds every weight, loadable as written
    assert len(model.graph.initializer) == 4


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.register_buffer("scale", torch.full((8,), 0.5, dtype=torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale.float()


_MODELS = {
    "linear": (lambda: torch.nn.Linear(6, 3), lambda: (torch.randn(2, 6),), {}),
    "mixed dtypes": (lambda: _Block(), lambda: (torch.randn(2, 8),), {}),
    "module functions": (lambda: torch.nn.Sequential(_Block(), _Block()), lambda: (torch.randn(2, 8),),
                         {"module_functions": True}),
}


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("name", list(_MODELS))
def test_streamed_file_is_the_embedded_model_byte_for_byte(tmp_path, name: str, inline: bool) -> None:
    build, args, options = _MODELS[name]
    prog = onnxsight.export(build().eval(), args(), **options)
    path = tmp_path / "m.onnx"
    prog.save(path, external_data=False, inline_functions=inline)
    expected = prog.model_proto
    if inline:
        from onnxsight.exporter.translate._inline import inline_functions
        expected = inline_functions(expected)
    assert path.read_bytes() == expected.SerializeToString()
    if not inline:
        assert prog.embedded_size == expected.ByteSize()   # computed without building the model


def test_export_does_not_build_the_embedded_model(monkeypatch) -> None:
    from onnxsight.exporter.program import _onnx_program as _program

    built = []
    original = _program.assemble

    def spy(translated, *, with_data=True, external=None):
        built.append(with_data and external is None)
        return original(translated, with_data=with_data, external=external)

    from onnxsight.exporter import _api

    monkeypatch.setattr(_program, "assemble", spy)
    monkeypatch.setattr(_api, "assemble", spy)
    prog = onnxsight.export(torch.nn.Linear(6, 3), (torch.randn(2, 6),))
    buffer = io.BytesIO()
    prog.save(buffer, external_data=False)
    prog.model_structure()
    assert not any(built), "export/save built the embedded ModelProto"
    assert len(prog.model_proto.graph.initializer) == 2     # still there, lazily, when asked for
    assert any(built)
    assert buffer.getvalue() == prog.model_proto.SerializeToString()


@pytest.mark.parametrize("target", ["path", "file object"])
def test_embedded_save_over_protobufs_limit_is_refused_before_writing(tmp_path, monkeypatch, target: str) -> None:
    from onnxsight.exporter.program import _onnx_program as _program

    prog = onnxsight.export(torch.nn.Linear(6, 3), (torch.randn(2, 6),))
    monkeypatch.setattr(_program, "PROTOBUF_LIMIT", 100)   # the 84 bytes of weights stand for 2 GB
    path = tmp_path / "m.onnx"
    buffer = io.BytesIO()
    with pytest.raises(ValueError, match="external_data=True"):
        prog.save(path if target == "path" else buffer, external_data=False)
    assert not path.exists() and not buffer.getvalue()
    assert prog.save(path, external_data=True) == [str(path), str(path) + ".data"]
