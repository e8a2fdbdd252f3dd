"""Creation ops: OpInfo samples that take a tensor, then arange/full/eye/random by hand.

OpInfo's factory samples (arange, full, zeros, eye, linspace...) have no tensor
input, so the harness skips them; here they are combined with an input.
"""

from __future__ import annotations

import pytest
import torch

import onnxsight
from tests.exporter.ops.opinfo_harness import assert_op_passes
from tests.exporter.ops.test_shape import Fn, assert_like_eager

OPS = [
    "full_like", "zeros_like", "ones_like", "new_full", "new_zeros", "new_ones", "fill", "linspace.tensor_overload",
    "logspace.tensor_overload", "tril", "triu", "diag", "diag_embed", "diagflat", "block_diag", "kron",
]

X = torch.randn(2, 3)


@pytest.mark.parametrize("name", OPS)
def test_opinfo(name: str) -> None:
    assert_op_passes(name)


@pytest.mark.parametrize("args,dtype", [
    ((5,), None), ((2, 9), None), ((9, 2, -2), None), ((0.5, 4.0, 0.3), None), ((1, 2.5, 0.25), None),
    ((-3.0, 3.0, 0.7), torch.float64), ((0, 10, 3), torch.float32), ((0.0, 5.0, 1.0), torch.int64),
    ((3, 3), None), ((1e-3, 1.0, 1e-3), None),
], ids=str)
def test_arange(args: tuple, dtype: torch.dtype | None) -> None:
    assert_like_eager(lambda x: (torch.arange(*args, dtype=dtype), x + 0), X)


@pytest.mark.parametrize("make", [
    lambda: torch.full((2, 3), 2.5), lambda: torch.full((2, 3), 7, dtype=torch.int32),
    lambda: torch.full((), True), lambda: torch.zeros(2, 3, dtype=torch.int64), lambda: torch.ones(3),
    lambda: torch.eye(3), lambda: torch.eye(2, 3, dtype=torch.int64), lambda: torch.linspace(-1, 1, 7),
    lambda: torch.scalar_tensor(4.0), lambda: torch.scalar_tensor(3, dtype=torch.int64),
    lambda: torch.empty(0, 3), lambda: torch.full((2, 3), float("-inf")),
], ids=["full", "full-int", "full-bool", "zeros", "ones", "eye", "eye-int", "linspace", "scalar", "scalar-int",
        "empty", "full-inf"])
def test_factories(make) -> None:  # noqa: ANN001 - a lambda building the tensor
    assert_like_eager(lambda x: (make(), x + 0), X)


def test_like_ops_keep_or_change_dtype() -> None:
    x = torch.arange(6).reshape(2, 3)
    assert_like_eager(lambda t: (torch.zeros_like(t), torch.ones_like(t, dtype=torch.float16),
                                 torch.full_like(t, 3.7), t.new_full((4,), 2), t.new_zeros(1, 2),
                                 torch.empty_like(t).fill_(5)), x)


@pytest.mark.parametrize("make,dtype,support", [
    (lambda x: torch.rand(64, 32), torch.float32, "unit"),
    (lambda x: torch.randn_like(x), torch.float32, "real"),
    (lambda x: torch.rand_like(x, dtype=torch.float64), torch.float64, "unit"),
    (lambda x: torch.randint(2, 9, (64, 4)), torch.int64, "2..8"),
    (lambda x: torch.randperm(50), torch.int64, "permutation"),
    (lambda x: torch.bernoulli(torch.full_like(x, 0.5)), torch.float32, "0/1"),
    (lambda x: torch.randint_like(x, 2, 9), torch.float32, "2..8"),
    (lambda x: torch.randint_like(x, 9, dtype=torch.int32) + 2, torch.int32, "2..10"),
    (lambda x: torch.nn.init.normal_(torch.empty_like(x), 5.0, 10.0), torch.float32, "N(5, 10)"),
], ids=["rand", "randn_like", "rand_like", "randint", "randperm", "bernoulli", "randint_like.low_dtype",
        "randint_like", "normal_functional"])
def test_random_ops_have_the_right_shape_dtype_and_support(make, dtype: torch.dtype,  # noqa: ANN001
                                                           support: str) -> None:
    """Random ops never match eager element for element: check shape, dtype and the values' support."""
    x = torch.randn(64, 32)
    expected = make(x)
    (actual,) = onnxsight.export(Fn(make), (x,))(x)
    assert actual.shape == expected.shape and actual.dtype == dtype
    values = set(actual.unique().tolist())
    if support == "unit":
        assert actual.min() >= 0 and actual.max() < 1 and len(values) > 100
    elif support == "2..8":
        assert values <= set(range(2, 9)) and len(values) > 1
    elif support == "permutation":
        assert sorted(actual.tolist()) == list(range(50))
    elif support == "2..10":
        assert values <= set(range(2, 11)) and len(values) > 1
    elif support == "0/1":
        assert values == {0.0, 1.0}
    elif support == "N(5, 10)":   # 2048 draws: the mean's standard error is 0.22, the spread's about 0.16
        assert abs(actual.mean().item() - 5.0) < 1.0 and abs(actual.std().item() - 10.0) < 1.0
    else:
        assert actual.isfinite().all() and len(values) > 100


@pytest.mark.parametrize("make", [
    lambda mean, std: torch.normal(mean, std),
    lambda mean, std: torch.normal(mean, 3.0),
    lambda mean, std: torch.normal(2.0, std),
    lambda mean, std: torch.distributions.Normal(0.0, 1.0).sample(mean.shape) * std + mean,   # as torch.onnx's test
], ids=["Tensor_Tensor", "Tensor_float", "float_Tensor", "distributions.Normal"])
def test_normal_with_tensor_parameters_has_their_mean_and_spread(make) -> None:  # noqa: ANN001
    """torch.normal(mean, std): each element from N(mean_i, std_i); checked by the sample's moments."""
    mean, std = torch.full((200, 100), 2.0), torch.full((200, 100), 3.0)
    expected = make(mean, std)
    (actual,) = onnxsight.export(Fn(make), (mean, std))(mean, std)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    # 20000 draws: the mean's standard error is 3 / sqrt(20000) = 0.02, the spread's about 0.015
    assert abs(actual.mean().item() - 2.0) < 0.1 and abs(actual.std().item() - 3.0) < 0.1
    assert len(set(actual.flatten().tolist())) > 10000


@pytest.mark.parametrize("replacement, samples", [(True, 4000), (False, 1), (False, 3)],
                         ids=["with-replacement", "one-draw", "without-replacement"])
@pytest.mark.parametrize("rank", [1, 2])
def test_multinomial_draws_with_the_weights_probabilities(replacement: bool, samples: int, rank: int) -> None:
    """torch.multinomial: int64 category indices of the right shape, zero-weight categories never drawn, each
    category as often as its weight says (with replacement: 4000 draws a row; without: all draws distinct)."""
    weights = torch.tensor([[0.0, 1.0, 3.0, 0.0, 4.0], [2.0, 0.0, 0.0, 2.0, 4.0]])
    weights = weights if rank == 2 else weights[0]
    model = Fn(lambda w: torch.multinomial(w, samples, replacement=replacement))
    (actual,) = onnxsight.export(model, (weights,))(weights)
    assert actual.shape == model(weights).shape and actual.dtype == torch.int64
    rows, draws = weights.reshape(-1, 5), actual.reshape(-1, samples)
    for row, drawn in zip(rows, draws):
        assert set(drawn.tolist()) <= set(row.nonzero().flatten().tolist())
        if replacement:
            frequency = torch.bincount(drawn, minlength=5) / samples
            # 4000 draws: a frequency's standard error is at most 0.008
            torch.testing.assert_close(frequency, row / row.sum(), atol=0.04, rtol=0)
        else:
            assert len(set(drawn.tolist())) == samples


def test_multinomial_without_replacement_draws_heavy_categories_first() -> None:
    """Without replacement the first draw follows the weights: over 3000 rows, category 2 (weight 6 of 8)
    comes first in about 75 % of them, as in eager."""
    weights = torch.tensor([1.0, 1.0, 6.0]).expand(3000, 3).contiguous()
    model = Fn(lambda w: torch.multinomial(w, 2))
    (actual,) = onnxsight.export(model, (weights,))(weights)
    first = (actual[:, 0] == 2).float().mean().item()
    assert abs(first - 0.75) < 0.04 and (actual[:, 0] != actual[:, 1]).all()


def test_multinomial_is_noted_random_and_verified_downstream_with_pytorch_s_draw() -> None:
    """OPS007 notes the random op; verification feeds PyTorch's draw to what reads it (no false mismatch)."""
    weights = torch.tensor([[1.0, 10.0, 3.0, 1.0], [5.0, 0.0, 100.0, 1.0]])
    program = onnxsight.export(Fn(lambda w: torch.multinomial(w, 3, replacement=True) * 2 + 1), (weights,),
                               verify=True)
    assert "OPS007" in {d.rule.code for d in program.diagnostics}
    assert program.verification.passed
