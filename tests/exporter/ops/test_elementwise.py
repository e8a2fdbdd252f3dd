"""Elementwise ops: OpInfo samples (float32), then dtypes, scalar overloads and edge values by hand."""

from __future__ import annotations

import math

import pytest
import torch

import onnxsight
from tests.exporter.ops.eager_check import assert_matches_eager, run_onnx
from tests.exporter.ops.opinfo_harness import assert_op_passes

OPS = [
    # arithmetic
    "add", "sub", "mul", "rsub", "div.no_rounding_mode", "div.floor_rounding", "div.trunc_rounding",
    "true_divide", "floor_divide", "neg", "positive", "abs", "sign", "sgn", "reciprocal", "pow", "float_power",
    "square", "fmod", "remainder", "__radd__", "__rsub__", "__rmul__", "__rdiv__", "__rpow__", "__rmod__",
    # rounding
    "floor", "ceil", "round", "round.decimals_0", "round.decimals_3", "round.decimals_neg_3", "trunc", "frac",
    # min/max/clamp/select
    "clamp", "clamp_min", "clamp_max", "minimum", "maximum", "max.binary", "min.binary", "fmin", "fmax",
    "where", "masked_fill", "nan_to_num", "lerp", "heaviside", "nn.functional.relu",
    # math
    "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "logaddexp", "logaddexp2",
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "erf", "erfc", "erfinv", "sigmoid", "logit", "hypot", "copysign", "signbit", "xlogy", "special.xlog1py",
    "sinc", "deg2rad", "rad2deg", "ldexp", "special.ndtr", "special.entr",
    # comparisons and logic
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "logical_xor",
    "isnan", "isinf", "isfinite", "isposinf", "isneginf",
]


@pytest.mark.parametrize("name", OPS)
def test_opinfo(name: str) -> None:
    assert_op_passes(name)


# -- integer division and remainders: PyTorch's rounding for negatives ------------------------------

INT_NUM = torch.tensor([-7, 7, -7, 7, 0, -1, 9], dtype=torch.int64)
INT_DEN = torch.tensor([2, -2, -2, 2, 3, 5, -4], dtype=torch.int64)
FLOAT_NUM = torch.tensor([-7.5, 7.5, -7.5, 7.5, 0.0, -1.0, 5.25])
FLOAT_DEN = torch.tensor([2.0, -2.0, -2.0, 2.0, 3.0, 5.0, -0.5])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
@pytest.mark.parametrize("mode", ["floor", "trunc", None])
def test_integer_division(dtype: torch.dtype, mode: str | None) -> None:
    assert_matches_eager(lambda a, b: torch.div(a, b, rounding_mode=mode), INT_NUM.to(dtype), INT_DEN.to(dtype))


@pytest.mark.parametrize("mode", ["floor", "trunc"])
def test_float_division_rounding(mode: str) -> None:
    assert_matches_eager(lambda a, b: torch.div(a, b, rounding_mode=mode), FLOAT_NUM, FLOAT_DEN)


@pytest.mark.parametrize("fn", [torch.remainder, torch.fmod], ids=["remainder", "fmod"])
@pytest.mark.parametrize("num,den", [(INT_NUM, INT_DEN), (FLOAT_NUM, FLOAT_DEN),
                                     (INT_NUM.to(torch.int32), INT_DEN.to(torch.int32))])
def test_remainder_signs(fn, num: torch.Tensor, den: torch.Tensor) -> None:
    assert_matches_eager(fn, num, den)


@pytest.mark.parametrize("fn", [
    lambda x: torch.remainder(x, -3), lambda x: torch.fmod(x, -3), lambda x: torch.remainder(x, 2.5),
    lambda x: x // 2, lambda x: x // -2.0, lambda x: torch.div(x, 3, rounding_mode="floor"),
], ids=["remainder_scalar", "fmod_scalar", "remainder_float_scalar", "floordiv", "floordiv_float", "div_scalar_floor"])
def test_scalar_division_overloads(fn) -> None:
    assert_matches_eager(fn, INT_NUM)


def test_true_division_of_integers_is_float() -> None:
    assert_matches_eager(lambda a, b: a / b, INT_NUM, INT_DEN)
    assert_matches_eager(lambda a: a / 4, INT_NUM)


# -- scalar overloads and type promotion --------------------------------------------------------------

X = torch.tensor([[-1.5, 0.0, 2.25], [3.0, -4.0, 0.5]])
I32 = torch.tensor([[-3, 0, 2], [7, -8, 5]], dtype=torch.int32)
I64 = torch.tensor([[1, 2, -3], [4, 0, 6]], dtype=torch.int64)
U8 = torch.tensor([[0, 1, 200], [3, 255, 6]], dtype=torch.uint8)
B = torch.tensor([[True, False, True], [False, False, True]])


@pytest.mark.parametrize("fn", [
    lambda x: x + 2, lambda x: x - 2.5, lambda x: x * 3, lambda x: 3 - x, lambda x: torch.add(x, x, alpha=2),
    lambda x: torch.sub(x, 1, alpha=3), lambda x: x ** 2, lambda x: 2 ** x, lambda x: x / 2,
], ids=["add", "sub", "mul", "rsub", "add_alpha", "sub_alpha", "pow", "rpow", "div"])
@pytest.mark.parametrize("x", [X, I32, I64], ids=["f32", "i32", "i64"])
def test_scalar_overloads(fn, x: torch.Tensor) -> None:
    assert_matches_eager(fn, x)


@pytest.mark.parametrize("a,b", [(I32, X), (I32, I64), (U8, I32), (B, I32), (B, X), (U8, B),
                                 (I32, torch.tensor(2.5)), (X, torch.tensor(3, dtype=torch.int64))],
                         ids=["i32+f32", "i32+i64", "u8+i32", "bool+i32", "bool+f32", "u8+bool", "i32+0d_f32",
                              "f32+0d_i64"])
@pytest.mark.parametrize("fn", [torch.add, torch.mul, torch.maximum, torch.eq, torch.lt, torch.where],
                         ids=["add", "mul", "maximum", "eq", "lt", "where"])
def test_type_promotion(fn, a: torch.Tensor, b: torch.Tensor) -> None:
    if fn is torch.where:
        assert_matches_eager(lambda a, b: torch.where(a > 0, a, b), a, b)
    else:
        assert_matches_eager(fn, a, b)


@pytest.mark.parametrize("fn", [torch.add, torch.mul, torch.maximum, torch.minimum, torch.eq, torch.lt, torch.ge,
                                torch.ne], ids=["add", "mul", "maximum", "minimum", "eq", "lt", "ge", "ne"])
def test_bool_operands(fn) -> None:
    assert_matches_eager(fn, B, B.flip(0))


@pytest.mark.parametrize("fn", [
    lambda x: x == 2, lambda x: x != 0, lambda x: x < 1.5, lambda x: x <= 2, lambda x: x > -1, lambda x: x >= 0.5,
], ids=["eq", "ne", "lt", "le", "gt", "ge"])
@pytest.mark.parametrize("x", [X, I32, U8], ids=["f32", "i32", "u8"])
def test_comparison_scalars(fn, x: torch.Tensor) -> None:
    assert_matches_eager(fn, x)


@pytest.mark.parametrize("fn", [torch.sqrt, torch.exp, torch.log1p, torch.sin, torch.sigmoid, torch.reciprocal,
                                torch.erf, torch.rsqrt, torch.expm1, torch.atan],
                         ids=["sqrt", "exp", "log1p", "sin", "sigmoid", "reciprocal", "erf", "rsqrt", "expm1", "atan"])
def test_unary_math_of_integers_is_float(fn) -> None:
    assert_matches_eager(fn, I64.abs())


@pytest.mark.parametrize("fn", [torch.abs, torch.neg, torch.sign, torch.floor, torch.ceil, torch.round, torch.trunc,
                                torch.square, torch.relu],
                         ids=["abs", "neg", "sign", "floor", "ceil", "round", "trunc", "square", "relu"])
@pytest.mark.parametrize("x", [I32, I64], ids=["i32", "i64"])
def test_integer_unary(fn, x: torch.Tensor) -> None:
    assert_matches_eager(fn, x)


def test_sign_of_bool() -> None:
    assert_matches_eager(torch.sign, B)


# -- NaN and infinity ----------------------------------------------------------------------------------

NAN_A = torch.tensor([1.0, math.nan, 3.0, math.nan, -math.inf, 0.0])
NAN_B = torch.tensor([math.nan, 2.0, 1.0, math.nan, 5.0, -0.0])


@pytest.mark.parametrize("fn", [torch.maximum, torch.minimum, torch.fmax, torch.fmin, torch.eq, torch.ne,
                                torch.logical_and, torch.logical_xor, torch.copysign, torch.atan2, torch.hypot],
                         ids=["maximum", "minimum", "fmax", "fmin", "eq", "ne", "logical_and", "logical_xor",
                              "copysign", "atan2", "hypot"])
def test_nan_semantics(fn) -> None:
    assert_matches_eager(fn, NAN_A, NAN_B)


@pytest.mark.parametrize("fn", [torch.isnan, torch.isinf, torch.isfinite, torch.signbit, torch.logical_not,
                                torch.nan_to_num, lambda x: torch.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-2.0)],
                         ids=["isnan", "isinf", "isfinite", "signbit", "logical_not", "nan_to_num", "nan_to_num_args"])
@pytest.mark.parametrize("x", [torch.tensor([1.0, math.nan, math.inf, -math.inf, -0.0, 0.0]), I32],
                         ids=["f32", "i32"])
def test_nan_inf_tests(fn, x: torch.Tensor) -> None:
    assert_matches_eager(fn, x)


@pytest.mark.parametrize("low,high", [(-1.0, 1.0), (2.0, -2.0), (None, 0.0), (0.5, None)])
def test_clamp(low: float | None, high: float | None) -> None:
    x = torch.tensor([-3.0, -1.0, 0.0, 0.7, 1.0, 4.0, math.nan])
    assert_matches_eager(lambda x: torch.clamp(x, low, high), x)


def test_clamp_tensor_bounds_and_integers() -> None:
    low, high = torch.tensor([-1.0, 0.0, 1.0]), torch.tensor([2.0, 0.5, 0.0])
    assert_matches_eager(lambda x, lo, hi: torch.clamp(x, lo, hi), X, low, high)
    assert_matches_eager(lambda x: torch.clamp(x, -2, 3), I32)
    assert_matches_eager(lambda x: torch.clamp(x, min=-2.5), I64)  # int tensor, float bound: float result
    assert_matches_eager(lambda x: torch.clamp_max(x, 100), U8)


# -- rounding -------------------------------------------------------------------------------------------

HALVES = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 1234.5678, -0.049])


@pytest.mark.parametrize("decimals", [0, 1, 2, -1, -2])
def test_round_half_to_even(decimals: int) -> None:
    assert_matches_eager(lambda x: torch.round(x, decimals=decimals), HALVES)


@pytest.mark.parametrize("fn", [torch.trunc, torch.frac, torch.floor, torch.ceil], ids=["trunc", "frac", "floor", "ceil"])
def test_rounding_negatives(fn) -> None:
    assert_matches_eager(fn, HALVES)


# -- precision-sensitive math -----------------------------------------------------------------------------

def test_expm1_log1p_keep_tiny_values() -> None:
    x = torch.tensor([1e-10, -1e-8, 3e-7, 1e-3, -0.5, 20.0, -math.inf, math.inf, -1.0])
    for fn in (torch.expm1, torch.log1p):
        got = run_onnx(fn, x)[0]
        want = fn(x)
        assert torch.allclose(got, want, rtol=1e-6, atol=0, equal_nan=True), (fn, got, want)


def test_erfinv_edges() -> None:
    x = torch.tensor([-1.0, -0.999, -0.5, 0.0, 1e-4, 0.3, 0.9, 0.99999, 1.0, 1.5])
    got = run_onnx(torch.erfinv, x)[0]
    assert torch.allclose(got, torch.erfinv(x), rtol=1e-5, atol=1e-6, equal_nan=True)


def test_atan2_every_quadrant_axis_zero_and_infinity() -> None:
    special = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 2.5]
    y = torch.tensor([a for a in special for _ in special])
    x = torch.tensor([c for _ in special for c in special])
    assert_matches_eager(torch.atan2, y, x)


def test_copysign_negative_zero_and_scalar() -> None:
    assert_matches_eager(torch.copysign, X, torch.tensor([-0.0, 0.0, -1.0]))
    assert_matches_eager(lambda x: torch.copysign(x, -1.0), X)
    assert_matches_eager(torch.copysign, I32, torch.tensor([-0.0, 0.0, -1.0]))


# -- logical and bitwise ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [torch.logical_and, torch.logical_or, torch.logical_xor],
                         ids=["and", "or", "xor"])
@pytest.mark.parametrize("a,b", [(X, I32), (B, U8), (I64, B)], ids=["f32,i32", "bool,u8", "i64,bool"])
def test_logical_any_dtype(fn, a: torch.Tensor, b: torch.Tensor) -> None:
    assert_matches_eager(fn, a, b)


@pytest.mark.parametrize("x", [B, I32, I64, U8], ids=["bool", "i32", "i64", "u8"])
@pytest.mark.parametrize("fn", [torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor,
                                lambda a, b: torch.bitwise_not(a), lambda a, b: a & 3, lambda a, b: a | 1],
                         ids=["and", "or", "xor", "not", "and_scalar", "or_scalar"])
def test_bitwise(fn, x: torch.Tensor) -> None:
    assert_matches_eager(fn, x, x.flip(1))


def test_bitwise_at_opset_17_bool_only() -> None:
    assert_matches_eager(torch.bitwise_and, B, B.flip(0), opset=17)
    with pytest.raises(onnxsight.ExportError, match="OPS006 .*opset 18"):
        run_onnx(torch.bitwise_and, I32, I32.flip(0), opset=17)


# -- selection --------------------------------------------------------------------------------------------

def test_where_and_masked_fill() -> None:
    assert_matches_eager(lambda x: torch.where(x > 0, x, 0.0), X)
    assert_matches_eager(lambda x: torch.where(x > 0, 1, x), I32)
    assert_matches_eager(lambda x, m: x.masked_fill(m, -7), I32, B)
    assert_matches_eager(lambda x, m: x.masked_fill(m, torch.tensor(2.5)), X, B)


# -- opset range ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [17, 18, 21, 23])
def test_opsets(opset: int) -> None:
    fn = lambda a, b: (torch.remainder(a, b) + torch.atan2(a, b) * torch.clamp(a, -1, 1),  # noqa: E731
                       torch.erfinv(torch.tanh(a) * 0.5), a < b, torch.div(a, b, rounding_mode="floor"))
    assert_matches_eager(fn, FLOAT_NUM, FLOAT_DEN, opset=opset)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8], ids=str)
def test_shifts_wrap_and_saturate_like_aten(dtype: torch.dtype) -> None:
    signed = torch.iinfo(dtype).min < 0
    a = torch.tensor([torch.iinfo(dtype).min, -5, 7, 100, 3, -1] if signed else [200, 5, 7, 100, 3, 255], dtype=dtype)
    counts = torch.tensor([1, 70, -1, 7, 0, 3] if signed else [1, 70, 255, 7, 0, 3], dtype=dtype)
    assert_matches_eager(lambda a, b: (a << b, a >> b), a, counts)
    assert_matches_eager(lambda a: (a << 2, a >> 1, torch.bitwise_right_shift(a, 3)), a)
