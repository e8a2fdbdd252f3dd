"""Tolerance, metrics and root-cause analysis on their own (no model, no runtime)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxsight.verification import Tolerance, compare
from onnxsight.verification._root_cause import analyse


@pytest.mark.parametrize(("dtype", "atol", "rtol"), [
    ("float32", 1e-4, 1e-4), ("float16", 1e-3, 1e-2), ("bfloat16", 1e-2, 4e-2), ("float64", 1e-7, 1e-7),
    ("torch.float16", 1e-3, 1e-2), ("tensor(float)", 1e-4, 1e-4), ("tensor(bfloat16)", 1e-2, 4e-2),
])
def test_per_dtype_defaults(dtype: str, atol: float, rtol: float) -> None:
    bounds = Tolerance().for_value("v", dtype)
    assert (bounds.atol, bounds.rtol, bounds.exact) == (atol, rtol, False)


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool", "uint8"])
def test_integers_and_bool_are_exact(dtype: str) -> None:
    bounds = Tolerance().for_value("v", dtype)
    assert (bounds.atol, bounds.rtol, bounds.exact) == (0.0, 0.0, True)


def test_overrides_by_name_and_glob_win_over_dtype() -> None:
    tol = Tolerance(dtypes={"float32": (1.0, 0.0)}, overrides={"exact_one": (0.5, 0.0), "layers.*": (0.25, 0.0)})
    assert tol.for_value("exact_one", "float32").atol == 0.5
    assert tol.for_value("layers.3.mul", "float16").atol == 0.25
    assert tol.for_value("other", "float32").atol == 1.0
    assert tol.with_overrides({"other": (2.0, 0.0)}).for_value("other", "float32").atol == 2.0


def test_an_override_for_the_ith_output_applies_to_its_name_in_the_program() -> None:
    """A suite writes ``output 0`` before any export exists; verify and the zoo see ``cat_32``."""
    tol = Tolerance(overrides={"output 1": (0.5, 0.0), "cat_9": (0.125, 0.0)}).for_outputs(["cat_9", "add_3"])
    assert tol.for_value("add_3", "float32").atol == 0.5
    assert tol.for_value("cat_9", "float32").atol == 0.125       # an override by the name itself is kept
    assert tol.for_value("output 1", "float32").atol == 0.5
    assert Tolerance(overrides={"output 4": (0.5, 0.0)}).for_outputs(["a"]).for_value("a", "float32").atol < 0.5


def test_verify_applies_an_output_index_override() -> None:
    import torch

    import onnxsight
    from tests.verification.faults import scale_value

    class Two(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x * 2, x + 100

    prog = onnxsight.export(Two(), (torch.rand(4),))
    wrong = scale_value(prog.model_proto, prog.output_names[1], 1.001)   # 0.1 off on values near 100
    assert not onnxsight.verify(prog, onnx_model=wrong).passed
    assert onnxsight.verify(prog, onnx_model=wrong, tolerance=Tolerance(overrides={"output 1": (0.5, 0.0)})).passed


def _cmp(expected, actual, dtype="float32", **kw):
    e, a = np.asarray(expected, dtype=dtype), np.asarray(actual, dtype=dtype)
    return compare(e, a, Tolerance(**kw).for_value("v", dtype))


@pytest.mark.parametrize(("expected", "actual", "passed"), [
    ([1.0, 2.0], [1.0, 2.0], True),
    ([1.0, 2.0], [1.0, 2.00001], True),
    ([1.0, 2.0], [1.0, 2.02], False),
    ([0.0, 1e-6], [1e-5, 0.0], True),           # within atol near zero
    ([np.nan, 1.0], [np.nan, 1.0], True),       # NaN where the reference has NaN
    ([np.inf, 1.0], [np.inf, 1.0], True),
    ([np.inf, 1.0], [-np.inf, 1.0], False),
    ([1.0, 1.0], [np.nan, 1.0], False),
])
def test_compare_verdicts(expected, actual, passed) -> None:
    assert _cmp(expected, actual).passed is passed


def test_relative_difference_is_guarded_near_zero() -> None:
    metrics = _cmp([0.0, 1.0], [1e-9, 1.0])
    assert metrics.passed and math.isfinite(metrics.max_rel_diff) and metrics.max_rel_diff < 1e-4


def test_metrics_values() -> None:
    metrics = _cmp([1.0, 2.0, 4.0, 0.0], [1.0, 2.2, 4.0, 0.0])
    assert metrics.max_abs_diff == pytest.approx(0.2, rel=1e-5)
    assert metrics.max_rel_diff == pytest.approx(0.1, rel=1e-5)
    assert metrics.mismatch_fraction == 0.25
    assert 0.99 < metrics.cosine < 1.0


def test_nan_inf_introduced_shape_and_dtype_disagreements() -> None:
    metrics = _cmp([1.0, 2.0], [np.inf, np.nan])
    assert (metrics.nan_inf_mismatch, metrics.nonfinite_introduced, metrics.passed) == (2, 2, False)
    shape = compare(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), Tolerance().for_value("v", "float32"))
    assert shape.shape_mismatch and not shape.passed
    dtype = compare(np.zeros(3, np.float32), np.zeros(3, np.float16), Tolerance().for_value("v", "float16"))
    assert dtype.dtype_mismatch and dtype.passed


def test_integer_comparison_is_exact() -> None:
    assert not _cmp([1, 2, 3], [1, 2, 4], dtype="int64").passed
    assert _cmp([1, 2, 3], [1, 2, 3], dtype="int64").passed


def test_mismatch_fraction_allowance() -> None:
    assert not _cmp([1.0] * 10, [1.0] * 9 + [2.0]).passed
    assert _cmp([1.0] * 10, [1.0] * 9 + [2.0], max_mismatch_fraction=0.1).passed


@pytest.mark.parametrize(("rows", "roots", "propagated"), [
    # a -> b -> c, a fails: a is the root, b and c follow from it
    ([("a", False, ()), ("b", False, ("a",)), ("c", False, ("b",))], ["a"], {"b": ("a",), "c": ("a",)}),
    # b fails with a matching input: b is the root
    ([("a", True, ()), ("b", False, ("a",)), ("c", False, ("b",))], ["b"], {"c": ("b",)}),
    # two independent roots joined downstream
    ([("a", False, ()), ("b", False, ()), ("c", False, ("a", "b"))], ["a", "b"], {"c": ("a", "b")}),
    # a matching value stops propagation: d's input c matched, so d is a root of its own
    ([("a", False, ()), ("c", True, ("a",)), ("d", False, ("c",))], ["a", "d"], {}),
    # all match
    ([("a", True, ()), ("b", True, ("a",))], [], {}),
])
def test_root_cause_table(rows, roots, propagated) -> None:
    verdicts = analyse(rows)
    assert [v for v, verdict in verdicts.items() if verdict.root_cause] == roots
    assert {v: verdict.propagated_from for v, verdict in verdicts.items() if verdict.propagated_from} == propagated


def test_isolated_analysis_makes_every_mismatch_a_root() -> None:
    verdicts = analyse([("a", False, ()), ("b", False, ("a",))], independent=True)
    assert all(v.root_cause for v in verdicts.values())


# -- randomness per node (not by torch's nondeterministic_seeded tag) ----------------------------------------
def _call(op_path: str, args: tuple = (), kwargs: dict | None = None):
    import torch

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    op = torch.ops.aten
    for part in op_path.split("."):
        op = getattr(op, part)
    return graph.call_function(op, tuple(x if a == "x" else a for a in args), kwargs or {})


@pytest.mark.parametrize(("op", "args", "kwargs", "expected"), [
    ("dropout.default", ("x", 0.5, True), {}, "random op"),
    ("dropout.default", ("x", 0.5, False), {}, None),
    ("dropout.default", ("x", 0.0, True), {}, None),
    ("native_dropout.default", ("x", 0.5, True), {}, "random op"),
    ("native_dropout.default", ("x", 0.5, False), {}, None),
    ("alpha_dropout.default", ("x", 0.2, True), {}, "random op"),
    ("scaled_dot_product_attention.default", ("x", "x", "x"), {}, None),
    ("scaled_dot_product_attention.default", ("x", "x", "x"), {"dropout_p": 0.1}, "random op"),
    ("scaled_dot_product_attention.default", ("x", "x", "x", None, 0.1), {}, "random op"),
    ("_scaled_dot_product_flash_attention_for_cpu.default", ("x", "x", "x", 0.0), {}, None),
    ("_fused_dropout.default", ("x", 1.0), {}, None),
    ("_fused_dropout.default", ("x", 0.9), {}, "random op"),
    ("rand_like.default", ("x",), {}, "random op"),
    ("randn.default", ([2, 3],), {}, "random op"),
    ("bernoulli.p", ("x", 0.5), {}, "random op"),
    ("multinomial.default", ("x", 2), {}, "random op"),
    ("uniform.default", ("x",), {}, "random op"),
    ("empty.memory_format", ([2, 3],), {}, "uninitialised"),
    ("empty_like.default", ("x",), {}, "uninitialised"),
    ("add.Tensor", ("x", "x"), {}, None),
    ("softmax.int", ("x", -1), {}, None),
])
def test_randomness_is_decided_by_op_and_arguments(op: str, args: tuple, kwargs: dict, expected) -> None:
    from onnxsight.verification._coverage import randomness

    assert randomness(_call(op, args, kwargs)) == expected


def test_bounds_of_ranges() -> None:
    import sympy
    from torch.utils._sympy.numbers import int_oo

    from onnxsight.verification._inputs import bound

    assert [bound(v) for v in (int_oo, sympy.oo, -int_oo, sympy.Integer(8), 3, None)] == [None, None, None, 8, 3, None]


@pytest.mark.parametrize(("shape", "target"), [((3, 2), (5, 2)), ((3, 2), (1, 2)), ((3, 2), (3, 2)), ((2, 4), (4, 1))])
def test_resize_repeats_or_cuts_the_users_own_slices(shape, target) -> None:
    import torch

    from onnxsight.verification._sizes import _resize

    x = torch.arange(int(np.prod(shape))).reshape(shape)
    y = _resize(x, target)
    assert tuple(y.shape) == target
    assert set(y.flatten().tolist()) <= set(x.flatten().tolist())
    assert torch.equal(y[: min(shape[0], target[0]), : min(shape[1], target[1])],
                       x[: min(shape[0], target[0]), : min(shape[1], target[1])])
