"""The repro reducer: the smallest subgraph that still diverges, written as a bundle that runs standalone."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

import onnxsight
from onnxsight.verification import Tolerance
from onnxsight.verification._engine import plan_pairs
from onnxsight.verification._graph import GraphIndex
from onnxsight.verification._reduce import levels, reduce_repros
from tests.verification.faults import scale_value, swap_inputs
from tests.verification.models import exported

SINGLE_NODE = [("mlp", "Sub"), ("mlp", "Div"), ("attention", "MatMul"), ("gated", "Sub")]


def _value_of(prog, op: str) -> str:  # noqa: ANN001
    rows = onnxsight.verify(prog).nodes
    return rows[(rows["onnx_op"] == op) & rows["shape"].map(lambda s: len(set(s)) == 1 or op != "MatMul")
                ]["value"].iloc[0]


def _run_script(directory) -> subprocess.CompletedProcess:  # noqa: ANN001
    """repro.py in a fresh interpreter, from another directory, with nothing of onnxsight importable."""
    return subprocess.run([sys.executable, "-I", str(directory / "repro.py")], capture_output=True, text=True,
                          cwd=directory.parent, check=False, timeout=120)


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
@pytest.mark.parametrize(("model", "op"), SINGLE_NODE)
def test_single_node_fault_gives_a_one_node_bundle_that_reproduces(model: str, op: str, mode: str, tmp_path) -> None:
    prog = exported(model)
    value = _value_of(prog, op)
    result = onnxsight.verify(prog, onnx_model=swap_inputs(prog.model_proto, value), mode=mode,
                              repro_dir=tmp_path / "bundle")
    assert result.repro_dir == str(tmp_path / "bundle")
    bundle = tmp_path / "bundle"
    model_proto = onnx.load(bundle / "model.onnx")
    onnx.checker.check_model(model_proto)
    assert [n.op_type for n in model_proto.graph.node] == [op]
    done = _run_script(bundle)
    assert done.returncode == 1, done.stderr
    diff = float(done.stdout.split("max abs diff ")[1].split(",")[0])
    assert diff == pytest.approx(result.nodes.set_index("value").loc[value, "max_abs_diff"], rel=1e-5)
    assert "DIVERGES" in done.stdout
    info = json.loads((bundle / "README.json").read_text())
    assert info["level"] == 0 and info["onnx_nodes"] == 1 and info["reproduced"] is True
    readme = (bundle / "README.md").read_text()
    assert f"`{info['fx_node']}`" in readme and "models.py:" in readme


def test_bundle_data_is_in_onnx_test_layout(tmp_path) -> None:
    prog = exported("mlp")
    result = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, "linear_1", 1.1), repro_dir=tmp_path)
    model = onnx.load(tmp_path / "model.onnx")
    tensors = []
    for kind, infos in (("input", model.graph.input), ("output", model.graph.output)):
        for i, info in enumerate(infos):
            tensor = onnx.TensorProto()
            tensor.ParseFromString((tmp_path / "test_data_set_0" / f"{kind}_{i}.pb").read_bytes())
            assert tensor.name == info.name
            tensors.append(numpy_helper.to_array(tensor))
    assert result.repros["linear_1"].info["onnx_nodes"] == 3  # Gemm, and the injected Constant and Mul


def test_clean_model_writes_no_bundle(tmp_path) -> None:
    result = onnxsight.verify(exported("gated"), repro_dir=tmp_path / "bundle")
    assert result.passed and result.repro_dir is None
    assert not (tmp_path / "bundle").exists()


class Threshold(nn.Module):
    """A comparison against a threshold equal to one of the linear layer's own outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("cut", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.lin(x) >= self.cut).float() * x


def test_divergence_needing_its_producer_grows_one_level() -> None:
    """An in-tolerance change upstream flips the comparison: the comparison alone matches PyTorch."""
    torch.manual_seed(0)
    model, x = Threshold().eval(), torch.randn(2, 4)
    with torch.no_grad():
        model.cut.fill_(float(model.lin(x).max()))
    prog = onnxsight.export(model, (x,))
    gemm = next(n.output[0] for n in prog.model_proto.graph.node if n.op_type == "Gemm")
    faulty = scale_value(prog.model_proto, gemm, 1 - 1e-6)  # in tolerance, but below the cut
    index = GraphIndex.build(faulty)
    compare_op = next(n.output[0] for n in faulty.graph.node if n.op_type in ("GreaterOrEqual", "Less", "Not"))
    pairs = plan_pairs(prog.exported_program.graph, prog.value_names, index, per_node=True)
    found = levels(index, compare_op, {p.value for p in pairs})
    assert len(found) >= 2 and len(found[1].nodes) > len(found[0].nodes)
    cases = reduce_repros(prog, index, pairs, [compare_op], [x], {prog.input_names[0]: x.numpy()}, Tolerance(),
                          ["CPUExecutionProvider"])
    case = cases[compare_op]
    assert case.info["reproduced"] and case.info["level"] == 1
    assert "Gemm" in [n.op_type for n in case.model.graph.node]
    assert case.expected.dtype == np.bool_  # PyTorch's value of the comparison itself
