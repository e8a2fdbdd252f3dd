"""The verifier measures itself: injected faults must be named as the first root cause, clean models reported clean.

The fast subset (``make test``) sweeps the smoke suite with a few values per fault kind;
the full sweep (``make test-mutation``, slow) is every dev-zoo model, and its numbers are
docs/mutation.json and the README's.
"""

from __future__ import annotations

import onnx
import pytest
import torch
from onnx import helper

import onnxsight

from tests.verification import faults, mutation
from tests.verification.models import exported


def _assert_all_detected(report: dict) -> None:
    assert not report["misses"], report["misses"]
    for mode, rates in report["modes"].items():
        assert rates["faults"] > 0, mode
        assert rates["detection_rate"] == 1.0, (mode, rates)
        assert rates["clean_rate"] == 1.0, (mode, report["clean_models_not_clean"])


@pytest.mark.parametrize("model", ["mlp", "residual_mlp", "small_cnn"])
def test_smoke_models_fast_subset(model: str) -> None:
    (name, prog, reason), = mutation.zoo_programs(("smoke",), f"smoke/{model}")
    assert reason is None
    found, clean = mutation.sweep_model(name, prog, tuple(mutation.MODES), per_kind=3)
    report = mutation.summarise(found, {name: clean}, {}, tuple(mutation.MODES), 0.0)
    _assert_all_detected(report)
    assert "add_constant" in report["by_kind"]
    assert {f.kind for f in found} >= {"add_constant", "change_attribute"}  # Gemm's transB at least


def test_no_op_fault_is_excluded_with_its_reason() -> None:
    prog = exported("mlp")
    feeds = {n: t.numpy() for n, t in zip(prog.input_names, prog.exported_program.example_inputs[0])}
    clean = mutation.run_values(prog.model_proto, feeds, ["relu"])["relu"]
    noop = faults.add_constant(prog.model_proto, "relu", 0.0)
    assert "no-op" in mutation.exclusion(noop, feeds, "relu", clean)
    broken = faults.change_attribute(prog.model_proto, "linear", "transB", 0)
    assert "does not run" in mutation.exclusion(broken, feeds, "linear", mutation.run_values(
        prog.model_proto, feeds, ["linear"])["linear"])
    assert mutation.exclusion(faults.add_constant(prog.model_proto, "relu", 0.5), feeds, "relu", clean) is None


@pytest.mark.parametrize(("attrs", "expected"), [
    ({"perm": [0, 2, 1]}, ("perm", [2, 1, 0])),
    ({"axis": -1}, ("axis", 1)),
    ({"epsilon": 1e-5}, ("epsilon", pytest.approx(0.2))),
    ({"transB": 1}, ("transB", 0)),
    ({}, None),
])
def test_attribute_mutation(attrs: dict, expected: tuple | None) -> None:
    node = helper.make_node("Op", ["x"], ["y"], **attrs)
    assert faults.attribute_mutation(node, 3) == expected


def test_drop_cast_only_drops_casts() -> None:
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.INT64)], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT64, [2])]))
    assert faults.drop_cast(model, "y").graph.node[0].op_type == "Identity"
    with pytest.raises(ValueError, match="not Cast"):
        faults.drop_cast(faults.drop_cast(model, "y"), "y")


@pytest.mark.slow
def test_every_dev_zoo_model_full_sweep() -> None:
    report = mutation.summarise(*_full_sweep(), tuple(mutation.MODES), 0.0)
    _assert_all_detected(report)


def _full_sweep() -> tuple[list, dict, dict]:
    found, clean, skipped = [], {}, {}
    for name, prog, reason in mutation.zoo_programs(mutation.SUITES, None):
        if prog is None:
            skipped[name] = reason
            continue
        faults_of, clean[name] = mutation.sweep_model(name, prog, tuple(mutation.MODES), per_kind=8)
        found.extend(faults_of)
    return found, clean, skipped


# -- misses the sweep found, pinned ----------------------------------------------------------------------
class _ScalarGate(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x.sum() > 0, x, -x) * (x.mean() + 1)


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
def test_zero_dim_values_fed_to_onnx_runtime_stay_zero_dim(mode: str) -> None:
    """Isolated mode fed PyTorch's 0-d values as shape [1] (np.ascontiguousarray promotes 0-d to 1-d),
    so the consumers of every scalar (a comparison, a cond predicate) were false root causes."""
    prog = onnxsight.export(_ScalarGate(), (torch.randn(3, 4),))
    result = onnxsight.verify(prog, mode=mode)
    assert result.passed, result.nodes[~result.nodes["passed"]]


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
def test_complex_values_compare_with_onnx_real_layout(mode: str) -> None:
    """ONNX holds a complex value as reals with a trailing dimension of 2 (DFT): PyTorch's complex64
    value is compared in that layout, and fed in it (isolated mode), not reported as a shape mismatch."""
    (name, prog, reason), = mutation.zoo_programs(("tricky",), "tricky/stft")
    assert reason is None
    result = onnxsight.verify(prog, mode=mode)
    assert result.passed, result.nodes[~result.nodes["passed"]]
    fft = result.nodes.set_index("target").loc["aten._fft_r2c.default"]
    # a static n_fft is a MatMul with a DFT basis, its pairs split off by a Reshape (ops/_dft_basis.py)
    assert fft["onnx_op"] in ("DFT", "Reshape") and fft["shape"] == fft["onnx_shape"] and fft["shape"][-1] == 2
