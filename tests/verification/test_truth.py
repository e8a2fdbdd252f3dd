"""Verification that tells the truth: every false signal the engine gave, pinned as a case.

Each table is one kind of false signal: values it never compared (random-by-tag, multi-output
limits), inputs the deployed model rejects, crashes on ordinary options, warnings that did not
fail the result, dims that only work at the example size, and calls that ended in a raw traceback.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper
from torch import nn
from torch.export import Dim

import onnxsight
from onnxsight.verification import Tolerance, VerificationError
from onnxsight.verification._graph import GraphIndex
from tests.conftest import cuda_available
from tests.verification.faults import scale_value
from tests.verification.models import build, exported


# -- models ------------------------------------------------------------------------------------------
class Fn(nn.Module):
    """forward is ``fn``; ``training`` as given (dropout and sdpa behave by it)."""

    def __init__(self, fn: Callable[..., Any], training: bool = False) -> None:
        super().__init__()
        self.fn = fn
        self.train(training)

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


class Block(nn.Module):
    """Two-head attention between projections, as a transformer layer has it."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(1, 4, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        mixed = F.scaled_dot_product_attention(q, k, v)
        return self.out(mixed.transpose(1, 2).reshape(1, 4, 8))


def _qkv() -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(1, 2, 4, 8) for _ in range(3))


@functools.lru_cache(maxsize=None)
def _export(case: str) -> Any:
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    models: dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]] = {
        "sdpa": (Fn(F.scaled_dot_product_attention), _qkv()),
        "sdpa-dropout": (Fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.3) + 1, True),
                         _qkv()),
        "dropout-train": (Fn(lambda t: F.dropout(t, 0.5, training=True) * 2, True), (x,)),
        "dropout-p0-train": (Fn(lambda t: F.dropout(t, 0.0, training=True) * 2, True), (x,)),
        "rand_like": (Fn(lambda t: t + torch.rand_like(t)), (x,)),
        "empty": (Fn(lambda t: torch.empty_like(t).fill_(2.0) * t), (x,)),
        "unbind70": (Fn(lambda t: [u * 2 for u in t.unbind(0)]), (torch.randn(70, 3),)),
        "block": (Block().eval(), (torch.randn(1, 4, 8),)),
    }
    model, args = models[case]
    return onnxsight.export(model, args)


def _reasons(result: Any) -> dict[str, str]:
    return dict(zip(result.coverage["fx_node"], result.coverage["reason"]))


# -- 1. randomness is decided per node, not by torch's tag ---------------------------------------------
@pytest.mark.parametrize(("case", "expected"), [
    ("sdpa", {"scaled_dot_product_attention": "compared"}),
    ("sdpa-dropout", {"scaled_dot_product_attention": "random op", "add": "compared"}),
    ("dropout-train", {"dropout": "random op", "mul": "compared"}),
    ("dropout-p0-train", {"dropout": "compared", "mul": "compared"}),
    ("rand_like", {"rand_like": "random op", "add": "compared"}),
    # the fill of a static-shape empty tensor is a constant: the optimize stage folds it at export
    ("empty", {"empty_like": "uninitialised", "fill_scalar": "folded constant", "mul": "compared"}),
])
@pytest.mark.parametrize("mode", ["propagated", "isolated"])
def test_only_values_that_really_draw_random_numbers_are_skipped(case: str, expected: dict[str, str],
                                                                  mode: str) -> None:
    result = onnxsight.verify(_export(case), mode=mode)
    reasons = _reasons(result)
    assert {node: reasons.get(node) for node in expected} == expected
    assert result.passed, result.nodes[~result.nodes["passed"].astype(bool)]
    assert set(result.nodes["fx_node"]) == {n for n, r in reasons.items() if r == "compared"}


def test_a_wrong_attention_is_blamed_on_attention_not_the_next_node() -> None:
    prog = _export("block")
    sdpa = prog.value_names["scaled_dot_product_attention"]
    result = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, sdpa))
    assert list(result.root_causes["value"])[:1] == [sdpa]


# -- 2. no value is dropped without a reason -----------------------------------------------------------
def test_every_output_of_a_70_way_unbind_is_compared() -> None:
    prog = _export("unbind70")
    result = onnxsight.verify(prog)
    values = set(result.nodes["value"])
    assert {prog.value_names[f"unbind__{i}"] for i in range(70)} <= values
    faulty = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, prog.value_names["unbind__68"]))
    assert list(faulty.root_causes["value"])[:1] == [prog.value_names["unbind__68"]]


# -- 3. inputs the deployed model rejects are refused before any work --------------------------------------
def _static() -> Any:
    return onnxsight.export(Fn(torch.relu), (torch.randn(1, 3, 16, 16),))


def _ranged() -> Any:
    model, args = build("mlp")
    batch = Dim("batch", min=2, max=8)
    return onnxsight.export(model, args, dynamic_shapes=({0: batch}, {0: batch}))


@pytest.fixture
def no_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if verification starts PyTorch or ONNX Runtime (bad calls are refused before)."""
    from onnxsight.verification import _runners

    def refuse(self: Any) -> None:
        raise AssertionError("a runner was started for a call that should have been refused")

    monkeypatch.setattr(_runners.OrtRunner, "activate", refuse)
    monkeypatch.setattr(_runners.TorchRunner, "activate", refuse)


@pytest.mark.parametrize(("program", "args", "kwargs", "rule", "words"), [
    (_static, (torch.randn(3, 3, 24, 24),), None, "VER003", ["args_0", "[3, 3, 24, 24]", "[1, 3, 16, 16]"]),
    (_ranged, (torch.randn(9, 8), torch.randn(9, 4)), None, "VER003", ["x", "batch", "[2, 8]", "9"]),
    (_ranged, (torch.randn(5, 8), torch.randn(6, 4)), None, "VER003", ["bias", "batch", "5", "6"]),
    (_ranged, (torch.randn(5, 9), torch.randn(5, 4)), None, "VER003", ["x", "axis 1", "8", "9"]),
    (_ranged, (torch.randn(5, 8, dtype=torch.float64), torch.randn(5, 4)), None, "VER004",
     ["x", "float64", "float32"]),
    (_ranged, (np.random.rand(5, 8), np.random.rand(5, 4).astype(np.float32)), None, "VER004", ["x", "float64"]),
    (_ranged, (torch.randn(5, 8),), None, "VER002", ["2", "x, bias", "1"]),
    (_ranged, (torch.randn(5, 8), torch.randn(5, 4), torch.randn(5, 4)), None, "VER002", ["2", "3"]),
    (_ranged, ([[1.0] * 8] * 5, torch.randn(5, 4)), None, "VER006", ["x", "list"]),
    (_ranged, (torch.empty(5, 8, device="meta"), torch.randn(5, 4)), None, "VER005", ["x", "meta", "cpu"]),
    (_ranged, (torch.randn(5, 8),), {"biass": torch.randn(5, 4)}, "VER011", ["biass", "x, bias"]),
])
def test_inputs_the_program_does_not_accept_are_refused(program: Callable[[], Any], args: tuple, kwargs: Any,
                                                        rule: str, words: list[str], no_runtime: None) -> None:
    prog = program()
    with pytest.raises(VerificationError) as info:
        onnxsight.verify(prog, args, kwargs)
    assert info.value.rule == rule and [d.code for d in info.value.diagnostics] == [rule]
    for word in words:
        assert word in str(info.value)
    assert str(info.value).startswith(rule)


@pytest.mark.parametrize("as_numpy", [False, True])
def test_accepted_inputs_run(as_numpy: bool) -> None:
    prog = _ranged()
    args = (torch.randn(3, 8), torch.randn(3, 4))
    result = onnxsight.verify(prog, tuple(a.numpy() for a in args) if as_numpy else args)
    assert result.passed and result.nodes["shape"].iloc[0][0] == 3


# -- 4. random inputs for dims without an upper bound -----------------------------------------------------
@pytest.mark.parametrize("dim", [Dim("batch"), Dim("batch", min=3), Dim.AUTO, Dim.DYNAMIC])
def test_random_inputs_for_unbounded_dims(dim: Any) -> None:
    model, args = build("mlp")
    prog = onnxsight.export(model, args, dynamic_shapes=({0: dim}, {0: dim}))
    result = onnxsight.verify(prog, random_inputs=True, seed=3)
    assert result.passed
    rows = result.nodes.set_index("value")
    assert rows["shape"].iloc[0][0] != args[0].shape[0]


# -- 5. a dtype disagreement fails the result ---------------------------------------------------------------
def _retype(model: onnx.ModelProto, value: str) -> onnx.ModelProto:
    """``value`` computed in float64 (a missing Cast in a translation), cast back for its consumers."""
    faulty = onnx.ModelProto()
    faulty.CopyFrom(model)
    position = GraphIndex.build(faulty).producer[value]
    node = faulty.graph.node[position]
    node.output[list(node.output).index(value)] = f"{value}__f32"
    for consumer in faulty.graph.node:
        consumer.input[:] = [f"{value}__back" if i == value else i for i in consumer.input]
    faulty.graph.node.insert(position + 1, helper.make_node("Cast", [f"{value}__f32"], [value],
                                                            to=onnx.TensorProto.DOUBLE))
    faulty.graph.node.insert(position + 2, helper.make_node("Cast", [value], [f"{value}__back"],
                                                            to=onnx.TensorProto.FLOAT))
    return faulty


def test_a_dtype_disagreement_fails_the_result() -> None:
    prog = exported("mlp")
    result = onnxsight.verify(prog, onnx_model=_retype(prog.model_proto, "relu"))
    assert "ACC005" in {d.code for d in result.diagnostics}
    assert not result.passed
    assert result.nodes.set_index("value").loc["relu", "dtype_mismatch"]


# -- 6. coverage, stated ----------------------------------------------------------------------------------
COVERAGE_COLUMNS = ["value", "fx_node", "target", "compared", "reason"]


@pytest.mark.parametrize(("model", "per_node", "reasons"), [
    ("mlp", True, {"compared": 19, "graph input": 2, "weight": 10}),
    ("mlp", False, {"compared": 1, "outputs only": 18, "graph input": 2, "weight": 10}),
    ("gated", True, {"compared": 11, "graph input": 1, "weight": 2}),
])
def test_coverage_counts_every_fx_value_with_a_reason(model: str, per_node: bool, reasons: dict[str, int]) -> None:
    prog = exported(model)
    result = onnxsight.verify(prog, per_node=per_node)
    assert list(result.coverage.columns) == COVERAGE_COLUMNS
    assert result.coverage_summary == reasons
    assert len(result.coverage) == sum(reasons.values())
    assert int(result.coverage["compared"].sum()) == len(result.nodes)
    (note,) = [d for d in result.diagnostics if d.code == "ACC008"]
    assert note.properties["total"] == len(result.coverage)
    assert note.properties["compared"] == reasons["compared"]
    assert note.properties["reasons"] == {k: v for k, v in reasons.items() if k != "compared"}
    assert result.to_dict()["coverage"]["summary"] == reasons


def test_a_graph_output_without_a_comparison_row_fails() -> None:
    prog = exported("mlp")
    renamed = onnx.ModelProto()
    renamed.CopyFrom(prog.model_proto)
    output = renamed.graph.output[0].name
    for node in renamed.graph.node:
        node.output[:] = ["renamed_output" if o == output else o for o in node.output]
    renamed.graph.output[0].name = "renamed_output"
    result = onnxsight.verify(prog, onnx_model=renamed)
    assert not result.passed
    (missing,) = [d for d in result.diagnostics if d.code == "ACC009"]
    assert missing.fields["value"] == "renamed_output"


def test_coverage_reaches_the_export_summary_and_sarif(tmp_path) -> None:
    import json

    model, args = build("gated")
    prog = onnxsight.export(model, args, verify=True, report=True, artifacts_dir=tmp_path)
    assert prog.verification.coverage_summary["compared"] == 11
    sarif = json.loads(next(tmp_path.glob("*.sarif")).read_text())
    notes = [r for run in sarif["runs"] for r in run["results"] if r["ruleId"] == "ACC008"]
    assert notes and notes[0]["properties"]["compared"] == 11


# -- 7. verification at other sizes ---------------------------------------------------------------------
class Rows(nn.Module):
    """Sums groups of three features, through a reshape that must stay symbolic in the batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], 2, 3).sum(-1) + 1.0


def _rows_program(dim: Any = None) -> Any:
    return onnxsight.export(Rows(), (torch.randn(5, 6),), dynamic_shapes=({0: dim or Dim("batch")},))


def _bake_reshape(model: onnx.ModelProto, shape: list[int]) -> onnx.ModelProto:
    """Every Reshape's target shape replaced by the constant ``shape`` (a dim specialised in the graph)."""
    faulty = onnx.ModelProto()
    faulty.CopyFrom(model)
    faulty.graph.initializer.append(numpy_helper.from_array(np.array(shape, dtype=np.int64), "baked_shape"))
    for node in faulty.graph.node:
        if node.op_type == "Reshape":
            node.input[1] = "baked_shape"
    # the shape computation no Reshape reads any more is removed, so the model loads whole (as deployed)
    needed = {o.name for o in faulty.graph.output}
    kept = []
    for node in reversed(list(faulty.graph.node)):
        if needed & set(node.output):
            kept.append(node)
            needed |= set(node.input)
    del faulty.graph.node[:]
    faulty.graph.node.extend(reversed(kept))
    return faulty


def test_other_sizes_pass_for_a_correct_dynamic_model() -> None:
    result = onnxsight.verify(_rows_program(), other_sizes=True)
    assert result.passed
    assert result.sizes_checked[0] == {"batch": 5}
    assert {"batch": 6} in result.sizes_checked[1:]


def test_a_dim_specialised_in_the_graph_fails_at_another_size(capfd: pytest.CaptureFixture) -> None:
    prog = _rows_program()
    faulty = _bake_reshape(prog.model_proto, [5, 2, 3])
    assert onnxsight.verify(prog, onnx_model=faulty).passed      # the example size cannot see it
    capfd.readouterr()
    result = onnxsight.verify(prog, onnx_model=faulty, other_sizes=True)
    assert not result.passed
    found = [d for d in result.diagnostics if d.code == "ACC010"]
    assert found and found[0].fields["dim"] == "batch" and found[0].fields["size"] != 5
    assert "Reshape" in found[0].message
    assert "[E:onnxruntime" not in capfd.readouterr().err      # the runtime's own log stays off the terminal


def test_export_verify_checks_other_sizes() -> None:
    prog = onnxsight.export(Rows(), (torch.randn(5, 6),), dynamic_shapes=({0: Dim("batch")},), verify=True)
    assert prog.verification.passed
    assert len(prog.verification.sizes_checked) >= 2


def test_static_programs_check_one_size() -> None:
    result = onnxsight.verify(exported("mlp"), other_sizes=True)
    assert result.passed and result.sizes_checked == [{}]


# -- 8. every bad call is a VerificationError with a rule code ---------------------------------------------
def _no_examples() -> Any:
    model, args = build("gated")
    prog = onnxsight.export(model, args)
    prog.exported_program._example_inputs = None
    return prog


def _other_model() -> onnx.ModelProto:
    return exported("mlp").model_proto


needs_no_cuda = pytest.mark.skipif(cuda_available(), reason="checks the error raised where CUDA is missing")


@pytest.mark.parametrize(("make", "options", "rule", "words"), [
    (lambda: build("gated")[0], {}, "VER001", ["Module", "onnxsight.export"]),
    (lambda: "model.onnx", {}, "VER001", ["str", "verify_onnx"]),
    (lambda: exported("gated").model_proto, {}, "VER001", ["ModelProto", "verify_onnx"]),
    (lambda: exported("gated"), {"providers": "CPUExecutionProvider"}, "VER007", ["providers", "str"]),
    (lambda: exported("gated"), {"providers": ()}, "VER014", ["providers"]),
    pytest.param(lambda: exported("gated"), {"torch_device": "cuda"}, "VER008", ["cuda"], marks=needs_no_cuda),
    (lambda: exported("gated"), {"torch_device": "gpu0"}, "VER008", ["gpu0"]),
    (lambda: exported("gated"), {"tolerance": (1e-3, 1e-3)}, "VER009", ["tuple", "Tolerance.uniform"]),
    (lambda: exported("gated"), {"mode": "fast"}, "VER010", ["propagated, isolated", "fast"]),
    (lambda: exported("gated"), {"memory_budget": 0}, "VER014", ["memory_budget"]),
    (lambda: exported("gated"), {"per_node": "yes"}, "VER007", ["per_node", "bool"]),
    (lambda: exported("gated"), {"random_inputs": True, "dim_sizes": {"batch": 3}}, "VER013", ["batch"]),
    (lambda: exported("gated"), {"onnx_model": _other_model()}, "VER012", ["2", "1"]),
    (_no_examples, {}, "VER015", ["x"]),
])
def test_bad_calls_are_verification_errors_with_a_rule(make: Callable[[], Any], options: dict, rule: str,
                                                       words: list[str], no_runtime: None) -> None:
    with pytest.raises(VerificationError) as info:
        onnxsight.verify(make(), **options)
    assert info.value.rule == rule, str(info.value)
    assert [d.code for d in info.value.diagnostics] == [rule]
    for word in words:
        assert word in str(info.value)


def test_a_valid_tolerance_still_works() -> None:
    assert onnxsight.verify(exported("gated"), tolerance=Tolerance.uniform(1e-3, 1e-3)).passed


def test_the_report_summary_carries_coverage_and_sizes() -> None:
    from onnxsight.pipeline._run_record import verification_summary

    result = onnxsight.verify(_rows_program(), other_sizes=True)
    summary = verification_summary(result)["coverage"]
    assert summary["summary"] == result.coverage_summary and summary["summary"]["compared"] > 0
    assert summary["sizes_checked"] == result.sizes_checked and len(summary["sizes_checked"]) >= 2


def test_a_specialised_dim_points_at_the_users_line() -> None:
    prog = _rows_program()
    result = onnxsight.verify(prog, onnx_model=_bake_reshape(prog.model_proto, [5, 2, 3]), other_sizes=True)
    (first, *_) = [d for d in result.diagnostics if d.code == "ACC010"]
    assert first.location is not None and first.location.file.endswith("test_truth.py")
    assert "x.view(x.shape[0], 2, 3)" in (first.location.code or "")


@pytest.mark.parametrize(("per_node", "expected"), [(True, {"compared"}), (False, {"compared", "outputs only"})])
def test_verify_onnx_states_its_coverage(per_node: bool, expected: set[str]) -> None:
    prog = exported("gated")
    result = onnxsight.verify_onnx(prog.model_proto, target="CPUExecutionProvider", per_node=per_node)
    assert result.passed and set(result.coverage_summary) == expected
    assert len(result.coverage) == sum(1 for n in prog.model_proto.graph.node for o in n.output if o)
    (note,) = [d for d in result.diagnostics if d.code == "ACC008"]
    assert note.properties["compared"] == len(result.nodes)


class Masked(nn.Module):
    def forward(self, x: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
        return x * mask


def test_keyword_inputs_by_name_and_a_positional_one_refused() -> None:
    x, mask = torch.randn(3, 4), torch.rand(3, 4)
    prog = onnxsight.export(Masked(), (x,), kwargs={"mask": mask})
    assert onnxsight.verify(prog, (x,), {"mask": mask}).passed
    with pytest.raises(VerificationError) as info:
        onnxsight.verify(prog, (x, mask))
    assert info.value.rule == "VER002" and "mask by keyword" in str(info.value)


def test_a_size_pytorch_itself_cannot_run_is_skipped_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxsight.verification import _runners

    iterate = _runners.TorchRunner.iterate

    def picky(self: Any, inputs: Any) -> Any:
        if inputs[0].shape[0] == 6:
            raise RuntimeError("size 6 is not supported by this model")
        return iterate(self, inputs)

    monkeypatch.setattr(_runners.TorchRunner, "iterate", picky)
    result = onnxsight.verify(_rows_program(), other_sizes=True)
    assert result.passed and {"batch": 6} not in result.sizes_checked
    assert result.info["sizes_skipped"] == [{"sizes": {"batch": 6},
                                             "reason": "RuntimeError: size 6 is not supported by this model"}]


def test_a_refused_shape_carries_the_ranges_in_its_diagnostic(no_runtime: None) -> None:
    with pytest.raises(VerificationError) as info:
        onnxsight.verify(_ranged(), (torch.randn(9, 8), torch.randn(9, 4)))
    (diagnostic,) = info.value.diagnostics
    assert diagnostic.properties["input"] == "x" and diagnostic.properties["ranges"] == {"batch": [2, 8]}
    assert diagnostic.location is not None and diagnostic.location.file.endswith("test_truth.py")


class Scaled(nn.Module):
    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return x * scale


def test_a_python_number_input_baked_at_export_is_not_a_missing_tensor() -> None:
    prog = onnxsight.export(Scaled(), (torch.randn(3, 4), 2.0))
    assert onnxsight.verify(prog).passed and onnxsight.verify(prog, (torch.randn(3, 4), 2.0)).passed


def _scaled_beyond_the_example(model: onnx.ModelProto, scale: float) -> onnx.ModelProto:
    """The output multiplied by ``1 + scale * max(batch - 5, 0)``: exact at the example's batch of 5
    and below, off by ``scale`` (relative) per row above it."""
    faulty = onnx.ModelProto()
    faulty.CopyFrom(model)
    graph = faulty.graph
    out, inp = graph.output[0].name, graph.input[0].name
    for node in graph.node:
        node.output[:] = [f"{o}_pre" if o == out else o for o in node.output]
    graph.initializer.extend(numpy_helper.from_array(np.array(v, dtype=t), n) for n, v, t in (
        ("s_zero", [0], np.int64), ("s_one", [1], np.int64), ("s_five", 5, np.int64),
        ("s_scale", scale, np.float32), ("s_unit", 1.0, np.float32)))
    graph.node.extend([
        onnx.helper.make_node("Shape", [inp], ["s_shape"]),
        onnx.helper.make_node("Slice", ["s_shape", "s_zero", "s_one"], ["s_b1"]),
        onnx.helper.make_node("Squeeze", ["s_b1"], ["s_b"]),
        onnx.helper.make_node("Sub", ["s_b", "s_five"], ["s_d"]),
        onnx.helper.make_node("Cast", ["s_d"], ["s_dc"], to=onnx.TensorProto.FLOAT),
        onnx.helper.make_node("Relu", ["s_dc"], ["s_df"]),
        onnx.helper.make_node("Mul", ["s_df", "s_scale"], ["s_s"]),
        onnx.helper.make_node("Add", ["s_unit", "s_s"], ["s_f"]),
        onnx.helper.make_node("Mul", [f"{out}_pre", "s_f"], [out])])
    return faulty


def test_rounding_at_another_size_is_judged_against_the_float64_noise_floor() -> None:
    """At another size kernels round differently (a GEMM instead of a GEMV): one float32 ulp off at
    batch 6, beyond a zero tolerance but within PyTorch's own float32 error, is not ACC010."""
    torch.manual_seed(0)
    prog = _rows_program()
    exact = Tolerance.uniform(0.0, 0.0)
    ulp = float(np.finfo(np.float32).eps)
    result = onnxsight.verify(prog, onnx_model=_scaled_beyond_the_example(prog.model_proto, ulp),
                              other_sizes=True, tolerance=exact)
    assert result.passed, [d.message for d in result.diagnostics if d.level == "error"]
    (forgiven,) = result.info["sizes_within_noise_floor"]
    assert forgiven["sizes"] == {"batch": 6} and "max abs diff" in forgiven["float32"]
    assert {"batch": 6} in result.sizes_checked


def test_a_real_difference_at_another_size_is_still_acc010() -> None:
    torch.manual_seed(0)
    prog = _rows_program()
    result = onnxsight.verify(prog, onnx_model=_scaled_beyond_the_example(prog.model_proto, 1e-3),
                              other_sizes=True, tolerance=Tolerance.uniform(0.0, 0.0))
    assert not result.passed and result.info["sizes_within_noise_floor"] == []
    (found,) = [d for d in result.diagnostics if d.code == "ACC010"]
    assert found.fields["size"] == 6
