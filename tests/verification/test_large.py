"""Verification above 2 GB: a program whose weights exceed protobuf's limit, and its saved file, verified per node.

Marked ``large`` (about 8 GB of memory at its peak): skipped unless selected with ``-m large``,
which ``make bench-large`` does. Before, every path here failed: the chunk model went through
``SerializeToString`` (protobuf's 2 GB limit), after the program had been embedded whole once more.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

import onnxsight

WIDTH, LAYERS = 8192, 9   # 9 x 256 MiB = 2.25 GiB of float32 weights

pytestmark = pytest.mark.large


def _status(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        return int(next(line for line in handle if line.startswith(key)).split()[1]) * 1024


@pytest.fixture(scope="module")
def large_program() -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)]).eval()
    prog = onnxsight.export(model, (torch.randn(1, WIDTH),))
    assert prog.weights_size > 2 * 1024**3
    return prog


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="reads the peak resident set from /proc")
def test_a_program_above_2gb_verifies_per_node_holding_its_weights_once(large_program: Any) -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")   # reset the peak resident set (VmHWM) to the current one
    before = _status("VmRSS:")
    result = onnxsight.verify(large_program)
    growth = _status("VmHWM:") - before
    assert result.passed, result.nodes
    assert len(result.nodes) == LAYERS
    assert growth < 0.25 * large_program.weights_size, growth   # activations and chunk models only


@pytest.mark.parametrize("runner", ["verify", "verify_onnx"])
def test_a_saved_model_above_2gb_verifies_by_path(runner: str, large_program: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "large.onnx")
    files = large_program.save(path)          # external data: chosen automatically above 2 GB
    assert files == [path, path + ".data"]
    if runner == "verify":
        result = onnxsight.verify(large_program, onnx_model=path)
    else:
        result = onnxsight.verify_onnx(path, target="CPUExecutionProvider")
    assert result.passed, result.nodes
    assert len(result.nodes) == LAYERS
