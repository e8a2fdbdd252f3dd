"""Mixture-of-experts routing: aten.histc and transformers' grouped GEMM (transformers::grouped_mm_fallback)."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import onnxsight
from tests.exporter.ops.eager_check import assert_matches_eager
from tests.exporter.ops.opinfo_harness import assert_op_passes


def test_opinfo_histc() -> None:
    assert_op_passes("histc")


HISTC: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]] = {
    # expert ids as floats, the way transformers counts tokens per expert on CPU
    "expert_ids": (lambda x: torch.histc(x, bins=4, min=0, max=3), torch.tensor([0., 3., 3., 1., 0., 3.])),
    "outside_and_at_max": (lambda x: torch.histc(x, bins=5, min=-1, max=1), torch.tensor([-2., -1., 0.3, 1., 1.5])),
    "matrix": (lambda x: torch.histc(x, bins=7, min=-2, max=2), torch.randn(5, 6)),
}


@pytest.mark.parametrize("case", list(HISTC))
def test_histc(case: str) -> None:
    fn, x = HISTC[case]
    assert_matches_eager(fn, x)


def _grouped_mm() -> Any:
    pytest.importorskip("transformers")
    from transformers.integrations import moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

    return torch.ops.transformers.grouped_mm_fallback


@pytest.mark.parametrize("offs", [[2, 2, 5, 7], [0, 3, 3, 4], [7, 7, 7, 7]], ids=["empty_expert", "tail_rows",
                                                                                 "one_expert"])
def test_grouped_mm_fallback(offs: list[int]) -> None:
    op = _grouped_mm()
    weight = torch.randn(4, 3, 5)
    offsets = torch.tensor(offs, dtype=torch.int32)
    assert_matches_eager(lambda x: op(x, weight, offsets), torch.randn(7, 3))


class Mixtral(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from transformers import MixtralConfig, MixtralForCausalLM

        torch.manual_seed(0)
        config = MixtralConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               num_key_value_heads=1, intermediate_size=32, num_local_experts=4,
                               num_experts_per_tok=2, use_cache=False)  # default experts: grouped_mm
        self.model = MixtralForCausalLM(config).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).logits


def test_mixtral_default_experts_export_with_dynamic_tokens() -> None:
    pytest.importorskip("transformers")
    model = Mixtral()
    ids = torch.randint(0, 64, (2, 6))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")
    program = onnxsight.export(model, (ids,), dynamic_shapes=({0: batch, 1: seq},))
    for shape in ((2, 6), (3, 9)):
        other = torch.randint(0, 64, shape)
        with torch.no_grad():
            expected = model(other)
        torch.testing.assert_close(program(other)[0], expected, atol=1e-4, rtol=1e-4)


class _Bincount(torch.nn.Module):
    def __init__(self, minlength: int) -> None:
        super().__init__()
        self.minlength = minlength

    def forward(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        return torch.bincount(x, weights=weights, minlength=self.minlength)


@pytest.mark.parametrize(("x", "weighted", "minlength"), [
    ([0, 3, 3, 1, 7], False, 0),
    ([2, 2, 0], False, 6),           # minlength longer than max + 1
    ([1, 4, 1], True, 0),            # weights: their dtype, summed per bin
    ([], False, 3),                  # empty: minlength zeros
])
def test_bincount_length_is_decided_by_the_data(x: list, weighted: bool, minlength: int) -> None:
    """The output's length is max(max(x) + 1, minlength): another input of the same size, another length."""
    model = _Bincount(minlength)
    x = torch.tensor(x, dtype=torch.long)
    args = (x, torch.rand(x.shape)) if weighted else (x,)
    prog = onnxsight.export(model, args)
    for inputs in (args, (torch.randint(0, 12, x.shape),) + args[1:]):
        got, want = prog(*inputs)[0], model(*inputs)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)
