"""Fake-mode export: a model built under fake tensors exports with no real weights in memory (issue 11).

``with onnxsight.fake_mode(): model = build(); x = make_inputs()`` then
``onnxsight.export(model, (x,))``: every stage that would read weight bytes
(the checker, the reports) works on the structure, and every use that needs
them (running, verifying, saving without ``weights=``) is a VAL007 error, not
a traceback from deep inside torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import onnxsight

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.norm(self.fc(x))))
        return self.head(h) + torch.tensor([1.0, 2.0, 3.0, 4.0])   # a constant lifted with real data


def _onnxsight_mode():
    return onnxsight.fake_mode()


def _torch_mode():
    return FakeTensorMode(allow_non_fake_inputs=True)


_MODES = {"onnxsight.fake_mode": _onnxsight_mode, "FakeTensorMode": _torch_mode}
_EXPORTS = {"onnxsight.export": onnxsight.export, "exporter.export": onnxsight.exporter.export}


@pytest.mark.parametrize("inside", [False, True], ids=["after-with", "inside-with"])
@pytest.mark.parametrize("export", sorted(_EXPORTS))
@pytest.mark.parametrize("mode", sorted(_MODES))
def test_fake_model_exports_without_weights(mode: str, export: str, inside: bool) -> None:
    with _MODES[mode]():
        model = _Net()
        x = torch.randn(2, 8)
        if inside:
            prog = _EXPORTS[export](model, (x,))
    if not inside:
        prog = _EXPORTS[export](model, (x,))
    assert isinstance(model.fc.weight, FakeTensor)
    weights = {"fc.weight", "fc.bias", "norm.weight", "norm.bias", "bn.weight", "bn.bias", "bn.running_mean",
               "bn.running_var", "head.weight", "head.bias"}
    assert weights <= set(prog.initializers)
    assert sorted(prog.fake_weights) == sorted(weights)   # the lifted constant has real data
    structure = prog.model_structure()
    assert {"LayerNormalization", "Relu", "BatchNormalization"} <= {n.op_type for n in structure.graph.node}
    assert not any(i.name in weights for i in structure.graph.initializer)   # no placeholder bytes
    assert [s.name for s in prog.record.stages][:6] == ["arguments", "capture", "decompose", "translate", "optimize",
                                                        "check"]


def test_onnxsight_fake_mode_yields_torch_fake_tensor_mode() -> None:
    with onnxsight.fake_mode() as mode:
        assert isinstance(mode, FakeTensorMode)
        t = torch.ones(3)
    assert isinstance(t, FakeTensor)
    assert not isinstance(torch.ones(3), FakeTensor)   # the mode ends with the block


def test_fake_export_with_report(tmp_path) -> None:
    with onnxsight.fake_mode():
        model, x = _Net(), torch.randn(2, 8)
    prog = onnxsight.export(model, (x,), report=True, artifacts_dir=tmp_path)
    records = [p for p in os.listdir(tmp_path) if p.endswith(".json")]
    assert records, os.listdir(tmp_path)
    assert prog.fake_weights


_USES = {
    "save": lambda prog, x, tmp: prog.save(tmp / "m.onnx"),
    "save_external": lambda prog, x, tmp: prog.save(tmp / "m.onnx", external_data=True),
    "call": lambda prog, x, tmp: prog(x),
    "session": lambda prog, x, tmp: prog.session(),
    "verify": lambda prog, x, tmp: onnxsight.verify(prog, (x,)),
}


@pytest.mark.parametrize("use", sorted(_USES))
def test_using_fake_weights_is_val007(use: str, tmp_path) -> None:
    with onnxsight.fake_mode():
        model = _Net()
    x = torch.randn(2, 8)   # a real input: the comparison would have one
    prog = onnxsight.exporter.export(model, (x,))
    with pytest.raises(onnxsight.WeightsError) as info:
        _USES[use](prog, x, tmp_path)
    message = str(info.value)
    assert "VAL007" in message and "fc.weight" in message
    assert "weights=" in message
    assert [d.rule.code for d in info.value.diagnostics] == ["VAL007"]
    assert not os.listdir(tmp_path)   # nothing half-written


@pytest.mark.parametrize("export", sorted(_EXPORTS))
def test_export_to_a_file_in_fake_mode_is_refused_before_any_work(export: str, tmp_path) -> None:
    with onnxsight.fake_mode():
        model, x = _Net(), torch.randn(2, 8)
    with pytest.raises(onnxsight.InvalidArgumentError) as info:
        _EXPORTS[export](model, (x,), tmp_path / "m.onnx")
    assert "VAL007" in str(info.value)
    assert [s.name for s in info.value.record.stages] == ["arguments"]
    assert not os.listdir(tmp_path)


_RSS_SCRIPT = textwrap.dedent("""
    import json, resource, sys, time
    import torch
    import onnxsight

    class Big(torch.nn.Module):
        def __init__(self, layers, width):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))
        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    onnxsight.exporter.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))   # warm every import
    before = peak()
    start = time.perf_counter()
    with onnxsight.fake_mode():
        model = Big(int(sys.argv[1]), int(sys.argv[2]))
        x = torch.randn(2, int(sys.argv[2]))
    prog = onnxsight.export(model, (x,))
    structure = prog.model_structure()
    print(json.dumps({"before": before, "after": peak(), "weights": prog.weights_size,
                      "nodes": len(structure.graph.node), "seconds": time.perf_counter() - start}))
""")


def test_fake_export_peak_rss_stays_far_below_the_weights(tmp_path) -> None:
    """24 Linear(4096, 4096): 1.6 GB of float32 weights that never exist; the export's peak RSS grows by far less."""
    script = tmp_path / "big.py"
    script.write_text(_RSS_SCRIPT)
    done = subprocess.run([sys.executable, str(script), "24", "4096"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["weights"] == 24 * (4096 * 4096 + 4096) * 4
    assert facts["nodes"] >= 48
    grown = facts["after"] - facts["before"]
    assert grown < facts["weights"] / 10, f"peak RSS grew by {grown / 1e6:.0f} MB for {facts['weights'] / 1e9:.2f} GB"


def test_fake_mode_is_public_and_lazy() -> None:
    assert "fake_mode" in onnxsight.__all__
    assert "WeightsError" in onnxsight.__all__
    code = "import onnxsight, sys; onnxsight.fake_mode; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", "import onnxsight, sys; print('torch' in sys.modules)"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "False", done.stderr
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "True", done.stderr
