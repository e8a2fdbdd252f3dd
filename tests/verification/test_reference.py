"""reference="float64": PyTorch's own rounding error is the noise floor, a translation error is still a root cause."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch import nn

import onnxsight
from onnxsight.verification import Bounds, Tolerance
from onnxsight.verification._reference import NOISE_FACTOR, float64_program, judge_with_floor
from tests.verification.faults import scale_value
from tests.verification.models import exported


class Cancelling(nn.Module):
    """One linear layer computed twice (Gemm, and a broadcast multiply + sum) at scale 1000, subtracted.

    The exact result is 0; in float32 each side carries ~1e-3 of rounding, which PyTorch and
    ONNX Runtime round differently: far above atol, but only rounding.
    """

    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x) * 1000.0
        g = (x.unsqueeze(-1) * self.lin.weight.t()).sum(-2) * 1000.0 + self.lin.bias * 1000.0
        return torch.tanh(h - g) + x


class Deep(nn.Module):
    """24 residual linear/tanh blocks: rounding drift accumulates with depth."""

    def __init__(self, width: int = 64, depth: int = 24) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + torch.tanh(block(x)) * 4.0
        return x.sum(-1)


@functools.lru_cache(maxsize=None)
def program(name: str):  # noqa: ANN201 - an ONNXProgram
    torch.manual_seed(0)
    model = {"cancelling": lambda: Cancelling(), "deep": lambda: Deep()}[name]().eval()
    return onnxsight.export(model, (torch.randn(4, 256 if name == "cancelling" else 64) * 3,))


def _roots(result) -> list[str]:  # noqa: ANN001
    return list(result.root_causes["value"])


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
def test_rounding_that_default_mode_calls_a_root_cause_is_clean_against_float64(mode: str) -> None:
    prog = program("cancelling")
    if mode == "propagated":  # isolated mode feeds PyTorch's inputs: no drift to call a root cause
        default = onnxsight.verify(prog, mode=mode)
        # float32 rounding alone, above atol at the output; the subtraction that cancels is no root cause: on
        # PyTorch's inputs ONNX Runtime subtracts as PyTorch does, it amplifies its inputs' rounding (ACC014)
        assert not default.passed and not _roots(default)
        assert any(d.code == "ACC014" and "sub" in str(d) for d in default.diagnostics)
        assert any(d.code == "ACC001" for d in default.diagnostics)
    noise_floor = onnxsight.verify(prog, mode=mode, reference="float64")
    assert noise_floor.passed, noise_floor.nodes[~noise_floor.nodes["passed"]]
    assert noise_floor.root_causes.empty
    assert noise_floor.info["noise_floor"] == "float64"
    assert not [d for d in noise_floor.diagnostics if d.code.startswith("ACC") and d.code != "ACC008"]


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
@pytest.mark.parametrize(("name", "k"), [("cancelling", 0), ("cancelling", 1), ("deep", 5), ("deep", -4), ("deep", 40)])
def test_translation_error_is_still_the_root_cause_against_float64(name: str, k: int, mode: str) -> None:
    prog = program(name)
    rows = onnxsight.verify(prog, reference="float64").nodes
    value = rows[rows["dtype"] == "float32"]["value"].iloc[k]
    result = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, value, 1.01), mode=mode,
                              reference="float64")
    assert _roots(result)[:1] == [value], result.nodes[~result.nodes["passed"]]


def test_rescaled_rounding_residue_is_within_the_noise_floor() -> None:
    """h - g is exactly 0 in real arithmetic: 1.01 x its float32 residue is still only rounding."""
    prog = program("cancelling")
    value = next(n for n in prog.model_proto.graph.node if n.op_type == "Sub")
    faulty = scale_value(prog.model_proto, value.output[0], 1.01)
    assert onnxsight.verify(prog, onnx_model=faulty, reference="float64").passed


def test_float16_model_is_judged_against_float64() -> None:
    prog = exported("mlp", torch.float16)
    clean = onnxsight.verify(prog, reference="float64")
    assert clean.passed, clean.nodes[~clean.nodes["passed"]]
    faulty = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, "linear_1", 1.1), reference="float64")
    assert _roots(faulty)[:1] == ["linear_1"]


def test_float64_copy_leaves_the_program_alone() -> None:
    prog = program("deep")
    twin = float64_program(prog.exported_program)
    assert {t.dtype for t in twin.state_dict.values()} == {torch.float64}
    assert {t.dtype for t in prog.exported_program.state_dict.values()} == {torch.float32}
    assert [n.name for n in twin.graph_module.graph.nodes] == [n.name for n in prog.exported_program.graph.nodes]


BOUNDS = Bounds(atol=1e-4, rtol=1e-4, max_mismatch_fraction=0.0, exact=False)


@pytest.mark.parametrize(("model", "actual", "passed"), [
    ([1.0, 2.0], [1.0, 2.0], True),                       # equal to the model-precision result
    ([1.01, 2.0], [0.97, 2.0], True),                     # within k * the value's worst rounding (0.01)
    ([1.01, 2.0], [0.95, 2.0], False),                    # beyond it
    ([1.0, 2.0], [1.00005, 2.0], True),                   # within the tolerance itself
    ([1.0, 2.0], [1.001, 2.0], False),                    # no rounding to hide behind
    ([1.0, float("nan")], [1.0, float("nan")], True),     # the same NaN as the model-precision run
    ([1.0, 2.0], [1.0, float("inf")], False),             # an Inf introduced
])
def test_judge_with_floor(model: list[float], actual: list[float], passed: bool) -> None:
    exact = np.array([1.0, 2.0])
    metrics = judge_with_floor(exact, np.array(model), np.array(actual, dtype=np.float32), BOUNDS, NOISE_FACTOR)
    assert metrics.passed is passed


def test_unknown_reference_is_rejected() -> None:
    with pytest.raises(ValueError, match="float64"):
        onnxsight.verify(program("deep"), reference="float128")


def test_per_value_overrides_still_apply() -> None:
    prog = program("deep")
    value = onnxsight.verify(prog).nodes["value"].iloc[3]
    loose = Tolerance(overrides={value: (1.0, 0.0)})
    result = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, value, 1.0001), reference="float64",
                              tolerance=loose)
    assert value not in _roots(result)


class DefaultDtypeCast(nn.Module):
    """``(idx / 2).to(float32)``: the division makes a default-dtype (float32) value in the float64 twin
    too, and torch.export records an ``_assert_tensor_metadata`` check of its dtype before ``.to``."""

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return x * (idx / 2).to(torch.float32)


def test_dtype_assertions_do_not_stop_the_float64_run() -> None:
    prog = onnxsight.export(DefaultDtypeCast(), (torch.randn(3, 4), torch.arange(4)))
    targets = {str(n.target) for n in prog.exported_program.graph.nodes}
    assert "aten._assert_tensor_metadata.default" in targets  # the case this test is about
    result = onnxsight.verify(prog, reference="float64")
    assert result.passed, result.nodes[~result.nodes["passed"]]
    faulty = onnxsight.verify(prog, reference="float64", onnx_model=scale_value(prog.model_proto, "mul", 1.01))
    assert list(faulty.root_causes["value"]) == ["mul"]


class TieBreak(nn.Module):
    """argmax over [a + b, c]: a tie in float32 (0.1f + 0.2f == 0.3f), c larger in float64."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        pick = torch.cat([a + b, c]).argmax()
        return table[pick] * 2.0


def test_float64_twin_follows_the_model_precision_decisions() -> None:
    """A float64 run that picks another row would measure PyTorch's 'rounding error' as the distance
    between two rows; the twin takes the float32 run's integer results, so the floor stays rounding."""
    args = (torch.tensor([0.1]), torch.tensor([0.2]), torch.tensor([0.3]), torch.tensor([[1.0, 2.0], [5.0, 7.0]]))
    assert torch.cat([args[0] + args[1], args[2]]).argmax() == 0
    assert torch.cat([args[0].double() + args[1].double(), args[2].double()]).argmax() == 1
    prog = onnxsight.export(TieBreak(), args)
    result = onnxsight.verify(prog, reference="float64")
    assert result.passed
    rows = result.nodes.set_index("target")
    assert rows.loc["aten.mul.Tensor", "max_abs_diff"] < 1e-6
