"""Verification holds the weights once: chunk sessions share one copy, and a model file is read in place.

Every chunk session of the engine used to get its own copy of the weights it reads (copied into
the chunk model, serialised, parsed by ONNX Runtime, prepacked), and a model file was loaded with
all its external data. Now, when those copies would not fit the memory budget, the weights are fed
to every chunk session from one copy: the program's own tensors, or the model file's external
data mapped in place. A file whose external data is missing or short is refused by rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

import onnxsight
from onnxsight.verification import VerificationError

WIDTH, LAYERS = 256, 4


def _program() -> Any:
    torch.manual_seed(0)
    layers = [m for _ in range(LAYERS) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())]
    model = torch.nn.Sequential(*layers).eval()
    return onnxsight.export(model, (torch.randn(3, WIDTH),))


class _Spy:
    """Records the model bytes each ONNX Runtime session was built from and the feeds of each run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.model_bytes: list[int] = []
        self.feeds: list[dict[str, Any]] = []
        spy = self

        class Session(ort.InferenceSession):
            def __init__(self, source: Any, *args: Any, **kwargs: Any) -> None:
                spy.model_bytes.append(len(source) if isinstance(source, bytes) else os.path.getsize(source))
                super().__init__(source, *args, **kwargs)

            def run(self, names: Any, feeds: Any, *args: Any, **kwargs: Any) -> Any:
                spy.feeds.append(dict(feeds))
                return super().run(names, feeds, *args, **kwargs)

        monkeypatch.setattr(ort, "InferenceSession", Session)

    def fed(self, name: str) -> list[np.ndarray]:
        return [feeds[name] for feeds in self.feeds if name in feeds]


def _backing_file(array: np.ndarray) -> str | None:
    """The file an array is a memory map of (walking its bases), None for ordinary memory."""
    base: Any = array
    while base is not None:
        if isinstance(base, np.memmap) and getattr(base, "filename", None):
            return os.fspath(base.filename)
        base = getattr(base, "base", None)
    return None


def _big_weights(prog: Any) -> dict[str, torch.Tensor]:
    return {name: t for name, t in prog.initializers.items() if t.numel() * t.element_size() >= 64 * 1024}


def test_chunk_sessions_share_the_programs_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    prog = _program()
    spy = _Spy(monkeypatch)
    result = onnxsight.verify(prog, memory_budget=1)   # one chunk per value; copies cannot fit the budget
    assert result.passed and result.info["sessions"] >= LAYERS
    # No chunk model carries the weights: together they are a fraction of one copy.
    assert sum(spy.model_bytes) < prog.weights_size / 4, spy.model_bytes
    for name, tensor in _big_weights(prog).items():
        fed = spy.fed(name)
        assert fed, f"{name} was not fed to any chunk session"
        assert all(np.shares_memory(array, tensor.detach().numpy()) for array in fed), name


@pytest.mark.parametrize("runner", ["verify", "verify_onnx"])
def test_a_model_file_with_external_data_is_verified_in_place(runner: str, tmp_path: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    prog = _program()
    path = str(tmp_path / "m.onnx")
    prog.save(path, external_data=True)
    spy = _Spy(monkeypatch)
    if runner == "verify":
        result = onnxsight.verify(prog, onnx_model=path, memory_budget=1)
    else:
        result = onnxsight.verify_onnx(path, target="CPUExecutionProvider", memory_budget=1)
    # verify_onnx's first chunk takes 64 values: one session per provider, both fed the same mapping.
    assert result.passed and result.info["sessions"] >= (LAYERS if runner == "verify" else 2)
    assert sum(spy.model_bytes) < prog.weights_size / 4, spy.model_bytes
    for name in _big_weights(prog):
        fed = spy.fed(name)
        assert fed and {_backing_file(a) for a in fed} == {path + ".data"}, name


def test_small_models_keep_their_weights_as_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the budget, chunk sessions embed the weights as before (ONNX Runtime prepacks constants)."""
    prog = _program()
    spy = _Spy(monkeypatch)
    assert onnxsight.verify(prog).passed
    assert not any(name in feeds for feeds in spy.feeds for name in prog.initializers)


def _damage(path: str, how: str) -> None:
    data = path + ".data"
    if how == "missing":
        os.remove(data)
    else:
        with open(data, "r+b") as handle:
            handle.truncate(os.path.getsize(data) // 2)


@pytest.mark.parametrize(("how", "rule"), [("missing", "VER016"), ("truncated", "VER017")])
@pytest.mark.parametrize("runner", ["verify", "verify_onnx"])
def test_unreadable_external_data_is_refused_by_rule(how: str, rule: str, runner: str, tmp_path: Any) -> None:
    prog = _program()
    path = str(tmp_path / "m.onnx")
    prog.save(path, external_data=True)
    _damage(path, how)
    with pytest.raises(VerificationError) as info:
        if runner == "verify":
            onnxsight.verify(prog, onnx_model=path)
        else:
            onnxsight.verify_onnx(path, target="CPUExecutionProvider")
    assert info.value.rule == rule, str(info.value)
    assert [d.code for d in info.value.diagnostics] == [rule]
    message = str(info.value)
    assert "m.onnx.data" in message and "m.onnx" in message
    last = list(prog.initializers)[-1] if how == "truncated" else list(prog.initializers)[0]
    assert last in message, message      # names a weight the file cannot provide


_RSS_CHILD = r"""
import json, sys
import torch, onnxsight

def status(key):
    return int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1]) * 1024

width, layers = int(sys.argv[1]), int(sys.argv[2])
onnxsight.verify(onnxsight.export(torch.nn.Linear(4, 4), (torch.randn(1, 4),)))   # imports, ONNX Runtime warm
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]).eval()
prog = onnxsight.export(model, (torch.randn(1, width),))
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")                  # reset the peak resident set (VmHWM) to the current one
before = status("VmRSS:")
result = onnxsight.verify(prog, memory_budget=16 * 1024**2)
print(json.dumps({"passed": result.passed, "weights": prog.weights_size, "growth": status("VmHWM:") - before}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak resident set from /proc")
def test_verification_memory_grows_by_a_fraction_of_the_weights() -> None:
    """In a fresh process, per-node verification of a 64 MB model adds well under half its weights.

    Each chunk session holding its own copy made the peak grow by about three times the weights.
    """
    proc = subprocess.run([sys.executable, "-c", _RSS_CHILD, "2048", "4"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    assert measured["passed"]
    assert measured["growth"] < 0.5 * measured["weights"], measured


def test_a_root_cause_in_a_mapped_file_gets_a_standalone_repro(tmp_path: Any) -> None:
    """The repro of a diverging node embeds the weights it reads, taken from the mapped external data."""
    import onnx

    from tests.verification.faults import scale_value

    prog = _program()
    path = str(tmp_path / "m.onnx")
    prog.save(path, external_data=True)
    structure = onnx.load(path, load_external_data=False)
    value = [n.output[0] for n in structure.graph.node if n.op_type == "Gemm"][1]
    onnx.save(scale_value(structure, value, 1.5), path)   # same external data, one faulty value
    result = onnxsight.verify(prog, onnx_model=path, memory_budget=1)
    assert not result.passed
    assert list(result.root_causes["value"]) == [value]
    repro = result.repros[value].model
    weights = [t for t in repro.graph.initializer if t.name in prog.initializers]
    assert weights and all(t.data_location != onnx.TensorProto.EXTERNAL for t in weights)
    for tensor in weights:
        expected = prog.initializers[tensor.name].detach().numpy()
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(tensor), expected)
