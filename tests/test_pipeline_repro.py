"""export(verify=True, report=True) leaves a minimal repro bundle next to the reports when verification fails."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

import onnxsight


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 8)
        self.fc2 = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _relu_one_percent_off(b, x):
    return b.op("Mul", b.op("Relu", x), b.scalar(1.01, x))


def test_failed_verification_writes_a_repro_bundle_next_to_the_reports(tmp_path) -> None:
    torch.manual_seed(0)
    prog = onnxsight.export(Mlp().eval(), (torch.randn(4, 8),), verify=True, report=True,
                            artifacts_dir=str(tmp_path),
                            custom_translations={torch.ops.aten.relu.default: _relu_one_percent_off})
    result = prog.verification
    assert not result.passed
    assert result.repro_dir is not None and os.path.dirname(result.repro_dir) == str(tmp_path)
    assert os.path.basename(result.repro_dir).startswith("Mlp_")
    names = set(os.listdir(result.repro_dir))
    assert {"model.onnx", "repro.py", "README.md", "test_data_set_0"} <= names
    run = subprocess.run([sys.executable, "repro.py"], cwd=result.repro_dir, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr   # exits 1 while it diverges


def test_passing_verification_writes_no_repro_bundle(tmp_path) -> None:
    prog = onnxsight.export(Mlp().eval(), (torch.randn(4, 8),), verify=True, report=True,
                            artifacts_dir=str(tmp_path))
    assert prog.verification.passed
    assert not [name for name in os.listdir(tmp_path) if name.endswith("_repro")]
