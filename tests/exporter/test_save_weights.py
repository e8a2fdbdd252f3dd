"""prog.save(path, weights=...): the real weights streamed into external data (issue 11).

A program exported in fake mode is saved with the weights of a ``state_dict``, a
``torch.save`` file or safetensors files (one file, a list of shards, a folder),
read one tensor at a time; ONNX Runtime then computes what the real model
computes. A checkpoint that does not fit the program is refused before anything
is written, naming the keys: missing (VAL008), unexpected (VAL009), another shape
or dtype (VAL010); a ``weights=`` that is no checkpoint at all is ARG014.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from safetensors.torch import save_file
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import onnxsight

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Net(torch.nn.Module):
    """Tied embedding/head (checkpoints keep one of them), norms, BatchNorm buffers (one never read)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(20, 16)
        self.fc = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.bn = torch.nn.BatchNorm1d(5)
        self.head = torch.nn.Linear(16, 20, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("shift", torch.zeros(16))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc(self.embed(ids))) + self.shift
        return self.head(self.bn(self.norm(h)))


def _real() -> tuple[_Net, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = _Net()
    with torch.no_grad():   # non-trivial buffers, so a wrong mapping shows in the outputs
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
        model.shift.uniform_(-1, 1)
    return model.eval(), model.state_dict()


def _fake_program() -> Any:
    with onnxsight.fake_mode():
        model = _Net()
    ids = torch.randint(0, 20, (2, 5))
    return onnxsight.exporter.export(model, (ids,)), ids


def _untied(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """As Hugging Face writes safetensors: one copy of tied weights, contiguous tensors."""
    return {k: v.contiguous() for k, v in state.items() if k != "head.weight"}


def _state_dict(state: dict[str, torch.Tensor], tmp) -> Any:
    return dict(state)


def _torch_file(state: dict[str, torch.Tensor], tmp) -> Any:
    torch.save(state, tmp / "ckpt.pt")
    return str(tmp / "ckpt.pt")


def _safetensors_file(state: dict[str, torch.Tensor], tmp) -> Any:
    save_file(_untied(state), tmp / "model.safetensors")
    return tmp / "model.safetensors"


def _shards(state: dict[str, torch.Tensor], tmp) -> list[str]:
    keys = sorted(_untied(state))
    paths = []
    for n, part in enumerate((keys[::2], keys[1::2])):
        paths.append(str(tmp / f"model-{n + 1:05d}-of-00002.safetensors"))
        save_file({k: state[k].contiguous() for k in part}, paths[-1])
    return paths


def _folder(state: dict[str, torch.Tensor], tmp) -> Any:
    _shards(state, tmp)
    return str(tmp)


_SOURCES: dict[str, Callable[[dict[str, torch.Tensor], Any], Any]] = {
    "state_dict": _state_dict, "torch_file": _torch_file, "safetensors": _safetensors_file,
    "safetensors_shards": _shards, "safetensors_folder": _folder,
}


def _run(path: str, ids: torch.Tensor) -> np.ndarray:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: ids.numpy()})[0]


@pytest.mark.parametrize("source", sorted(_SOURCES))
def test_fake_export_saved_with_real_weights_matches_eager(source: str, tmp_path) -> None:
    model, state = _real()
    prog, ids = _fake_program()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    path = str(tmp_path / "out" / "m.onnx")
    files = prog.save(path, weights=_SOURCES[source](state, ckpt))
    assert files == [path, path + ".data"]
    proto = onnx.load(path, load_external_data=False)
    assert proto.graph.initializer and all(t.data_location == onnx.TensorProto.EXTERNAL
                                           for t in proto.graph.initializer)
    expected = model(ids).detach().numpy()
    np.testing.assert_allclose(_run(path, ids), expected, rtol=1e-5, atol=1e-5)


def test_weights_override_a_real_program(tmp_path) -> None:
    model, state = _real()
    ids = torch.randint(0, 20, (2, 5))
    prog = onnxsight.exporter.export(model, (ids,))
    before = prog(ids)[0]
    other = {k: (v + 0.5 if v.is_floating_point() else v) for k, v in state.items()}
    path = str(tmp_path / "m.onnx")
    prog.save(path, weights=other)
    changed = _Net().eval()
    changed.load_state_dict(other)
    np.testing.assert_allclose(_run(path, ids), changed(ids).detach().numpy(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(prog(ids)[0], before)   # the program keeps its own weights


def _drop(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if k not in ("fc.bias", "norm.weight")}


def _extra(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {**state, "fc.scale": torch.ones(3), "decoder.weight": torch.ones(2, 2)}


def _reshaped(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {**state, "fc.weight": torch.ones(16, 8)}


def _retyped(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {**state, "fc.weight": state["fc.weight"].half()}


_PROBLEMS = {
    "missing": (_drop, "VAL008", ["fc.bias", "norm.weight"]),
    "unexpected": (_extra, "VAL009", ["fc.scale", "decoder.weight"]),
    "shape": (_reshaped, "VAL010", ["fc.weight", "[16, 8]", "[16, 16]"]),
    "dtype": (_retyped, "VAL010", ["fc.weight", "float16", "float32"]),
}


@pytest.mark.parametrize("source", ["state_dict", "torch_file", "safetensors"])
@pytest.mark.parametrize("problem", sorted(_PROBLEMS))
def test_checkpoint_that_does_not_fit_is_refused_naming_the_keys(problem: str, source: str, tmp_path) -> None:
    change, code, names = _PROBLEMS[problem]
    _, state = _real()
    prog, _ = _fake_program()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    weights = _SOURCES[source](change(state), ckpt)
    with pytest.raises(onnxsight.WeightsError) as info:
        prog.save(tmp_path / "out" / "m.onnx", weights=weights)
    message = str(info.value)
    assert [d.rule.code for d in info.value.diagnostics] == [code], message
    for name in names:
        assert name in message
    assert "Traceback" not in message
    assert not (tmp_path / "out").exists()   # refused before anything was written


def test_every_problem_is_reported_at_once(tmp_path) -> None:
    _, state = _real()
    prog, _ = _fake_program()
    with pytest.raises(onnxsight.WeightsError) as info:
        prog.save(tmp_path / "m.onnx", weights=_retyped(_extra(_drop(state))))
    assert sorted(d.rule.code for d in info.value.diagnostics) == ["VAL008", "VAL009", "VAL010"]


def test_a_long_list_of_missing_keys_is_truncated(tmp_path) -> None:
    class Deep(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(12))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
            return x

    with onnxsight.fake_mode():
        model = Deep()
    prog = onnxsight.exporter.export(model, (torch.randn(1, 4),))
    with pytest.raises(onnxsight.WeightsError) as info:
        prog.save(tmp_path / "m.onnx", weights={})
    message = str(info.value)
    assert "24 weights" in message and "layers.0.weight" in message and "and 16 more" in message
    assert "layers.11.bias" not in message


def test_strict_false_takes_real_weights_from_the_program_and_ignores_extra_keys(tmp_path) -> None:
    model, state = _real()
    ids = torch.randint(0, 20, (2, 5))
    prog = onnxsight.exporter.export(model, (ids,))
    path = str(tmp_path / "m.onnx")
    prog.save(path, weights={"fc.bias": state["fc.bias"] + 1, "unknown": torch.ones(1)}, strict=False)
    changed = _Net().eval()
    changed.load_state_dict({**state, "fc.bias": state["fc.bias"] + 1})
    with torch.no_grad():
        expected = changed(ids).numpy()
    np.testing.assert_allclose(_run(path, ids), expected, rtol=1e-5, atol=1e-5)


def test_strict_false_still_needs_every_fake_weight(tmp_path) -> None:
    prog, _ = _fake_program()
    with pytest.raises(onnxsight.WeightsError, match="VAL008"):
        prog.save(tmp_path / "m.onnx", weights={}, strict=False)


class _WithNonPersistent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.register_buffer("inv_freq", torch.arange(4.0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.inv_freq


_WITH_BUFFER = {
    "merged dict": lambda real, tmp: {**real.state_dict(), "inv_freq": real.inv_freq},
    "file and dict": lambda real, tmp: [_safetensors_file(real.state_dict(), tmp), {"inv_freq": real.inv_freq}],
    "folder and dict": lambda real, tmp: [_folder(real.state_dict(), tmp), {"inv_freq": real.inv_freq}],
}


def test_a_non_persistent_buffer_is_computed_again_under_onnxsights_fake_mode(tmp_path) -> None:
    """Built from the module's own arguments, for real: the state_dict alone is enough to save."""
    torch.manual_seed(0)
    real = _WithNonPersistent().eval()
    with onnxsight.fake_mode():
        model = _WithNonPersistent()
    x = torch.randn(2, 4)
    prog = onnxsight.exporter.export(model, (x,))
    assert prog.fake_weights == ["fc.weight", "fc.bias"]
    assert isinstance(model.inv_freq, FakeTensor)   # the user's model is left as it was
    path = str(tmp_path / "m.onnx")
    prog.save(path, weights=real.state_dict())
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0],
                               real(x).detach().numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("weights", sorted(_WITH_BUFFER))
def test_non_persistent_buffer_missing_from_a_checkpoint_is_named_as_such(weights: str, tmp_path) -> None:
    """torch's own FakeTensorMode leaves no way to compute the buffer again: VAL008 names it, a dict adds it."""
    torch.manual_seed(0)
    real = _WithNonPersistent().eval()
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = _WithNonPersistent()
    x = torch.randn(2, 4)
    prog = onnxsight.exporter.export(model, (x,))
    with pytest.raises(onnxsight.WeightsError) as info:
        prog.save(tmp_path / "m.onnx", weights=real.state_dict())
    assert "inv_freq" in str(info.value) and "non-persistent buffer" in str(info.value)
    path = str(tmp_path / "m.onnx")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    prog.save(path, weights=_WITH_BUFFER[weights](real, ckpt))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0],
                               real(x).detach().numpy(), rtol=1e-6, atol=1e-6)


def _not_a_checkpoint(tmp) -> Any:
    (tmp / "notes.txt").write_text("hello")
    return str(tmp / "notes.txt")


def _empty_folder(tmp) -> Any:
    (tmp / "empty").mkdir()
    return str(tmp / "empty")


_BAD = {
    "a number": (lambda tmp: 42, {}, ["int"]),
    "an empty list": (lambda tmp: [], {}, ["empty"]),
    "no such file": (lambda tmp: str(tmp / "missing.pt"), {}, ["missing.pt", "does not exist"]),
    "not a checkpoint": (_not_a_checkpoint, {}, ["notes.txt"]),
    "folder without safetensors": (_empty_folder, {}, ["empty", ".safetensors"]),
    "a value that is no tensor": (lambda tmp: {"fc.weight": [1.0, 2.0]}, {}, ["fc.weight", "list"]),
    "embedded": (lambda tmp: {}, {"external_data": False}, ["external_data=False"]),
}


@pytest.mark.parametrize("case", sorted(_BAD))
def test_weights_that_are_no_checkpoint_are_arg014(case: str, tmp_path) -> None:
    make, options, names = _BAD[case]
    prog, _ = _fake_program()
    with pytest.raises(onnxsight.WeightsError) as info:
        prog.save(tmp_path / "out" / "m.onnx", weights=make(tmp_path), **options)
    message = str(info.value)
    assert [d.rule.code for d in info.value.diagnostics] == ["ARG014"], message
    for name in names:
        assert name in message
    assert not (tmp_path / "out").exists()


_STREAM_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    import torch
    import onnxsight

    class Big(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4096, 4096) for _ in range(16))
        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    kind, ckpt, out = sys.argv[1:4]
    if kind == "make":
        state = {}
        for n in range(16):
            state[f"layers.{n}.weight"] = torch.full((4096, 4096), n / 100)
            state[f"layers.{n}.bias"] = torch.full((4096,), -n / 100)
        if ckpt.endswith(".pt"):
            torch.save(state, ckpt)
        else:
            from safetensors.torch import save_file
            save_file(state, ckpt)
        sys.exit(0)
    onnxsight.exporter.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))   # warm every import
    with onnxsight.fake_mode():
        model = Big()
    prog = onnxsight.export(model, (torch.randn(1, 4096),))
    before = peak()
    files = prog.save(out, weights=ckpt)
    print(json.dumps({"before": before, "after": peak(), "weights": prog.weights_size, "files": files}))
""")


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_save_streams_one_tensor_at_a_time(suffix: str, tmp_path) -> None:
    """1.07 GB of weights from a checkpoint file: saving grows the peak RSS by far less than the weights."""
    script = tmp_path / "stream.py"
    script.write_text(_STREAM_SCRIPT)
    ckpt, out = str(tmp_path / f"ckpt{suffix}"), str(tmp_path / "m.onnx")
    made = subprocess.run([sys.executable, str(script), "make", ckpt, out], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    done = subprocess.run([sys.executable, str(script), "save", ckpt, out], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["files"] == [out, out + ".data"]
    assert os.path.getsize(out + ".data") >= facts["weights"]
    grown = facts["after"] - facts["before"]
    assert grown < facts["weights"] / 10, f"peak RSS grew by {grown / 1e6:.0f} MB for {facts['weights'] / 1e9:.2f} GB"
    proto = onnx.load(out, load_external_data=False)
    layer3 = next(t for t in proto.graph.initializer if t.name == "layers.3.weight")
    info = {e.key: e.value for e in layer3.external_data}
    with open(out + ".data", "rb") as handle:
        handle.seek(int(info["offset"]))
        values = np.frombuffer(handle.read(16), dtype=np.float32)
    np.testing.assert_array_equal(values, np.full(4, 0.03, dtype=np.float32))


def test_tiny_llama_fake_export_saved_from_safetensors_matches_eager(tmp_path) -> None:
    """The issue's flow on a transformers LLaMA: fake build, export, save from safetensors alone (the rotary
    embedding's non-persistent inv_freq is computed again by the export)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=100)
    torch.manual_seed(0)
    real = LlamaForCausalLM(config).eval()
    save_file({k: v.contiguous() for k, v in real.state_dict().items()}, tmp_path / "model.safetensors")
    with onnxsight.fake_mode():
        model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 100, (1, 8))
    prog = onnxsight.exporter.export(model, (ids,), kwargs={"use_cache": False})
    assert "model.rotary_emb.inv_freq" not in prog.fake_weights   # in no checkpoint, computed again
    path = str(tmp_path / "llama.onnx")
    prog.save(path, weights=tmp_path / "model.safetensors")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    logits = session.run(None, {session.get_inputs()[0].name: ids.numpy()})[0]
    with torch.no_grad():
        expected = real(ids, use_cache=False).logits.numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
