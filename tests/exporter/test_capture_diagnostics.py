"""Capture diagnostics: why a dim cannot stay dynamic, torch.export's safe fixes applied, no torch noise.

Each case is a model, its example and dynamic_shapes, and the diagnostic it must
produce: code, level, the line of this file it points at (``# @marker``) and
the words its message must contain (the input, the axis, the file:line, the fix).
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch.export import Dim

import onnxsight
from onnxsight.exporter.capture._strategies import classify

HERE = os.path.abspath(__file__)
NAME = os.path.basename(HERE)


def _line(marker: str) -> int:
    with open(HERE, encoding="utf-8") as handle:
        numbers = [n for n, text in enumerate(handle, 1) if text.rstrip().endswith(f"# @{marker}")]
    assert len(numbers) == 1, f"marker @{marker} must appear once, found {numbers}"
    return numbers[0]


# -- models ---------------------------------------------------------------------------------------
class BertEmbeddings(torch.nn.Module):
    """BERT's embedding block: position ids sliced to the sequence length (at most 32 here)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(100, 16), torch.nn.Embedding(32, 16)
        self.register_buffer("position_ids", torch.arange(32)[None])
        self.query = torch.nn.Linear(16, 16)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[1]
        h = self.tokens(input_ids) + self.positions(self.position_ids[:, :seq])  # @bert
        scores = self.query(h) @ h.transpose(1, 2)
        return torch.softmax(scores, -1) @ h


class MaskedEmbeddings(BertEmbeddings):
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(input_ids) * attention_mask[..., None]


class PadToMultipleOf8(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(x, (0, (8 - x.shape[1] % 8) % 8))
        return x.view(x.shape[0], -1, 8).sum(-1)  # @pad8


class DataDependentCount(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int((x > 0).sum())  # @datadep-int
        return x * n if n > 2 else x


class DataDependentBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x > 0).sum() > 2:  # @datadep
            return x * 2
        return x


class ViewFour(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(4, 6)  # @view4


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.conv(x))).mean((2, 3))


class SqueezeSingleBatch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze(0) if x.shape[0] == 1 else x  # @squeeze


class NestedInputs(torch.nn.Module):
    def forward(self, inputs: dict[str, Any]) -> torch.Tensor:
        return inputs["a"].view(2, 6).sum() + inputs["b"]["c"].sum()  # @nested


class PooledUnlessTiny(torch.nn.Module):
    """A pyramid that treats a pooled width of 1 differently: guard ``(w // 4) != 1``, no fix from torch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.avg_pool2d(x, 4)  # @pool4
        return y * 2 if y.shape[-1] != 1 else y.sum((2, 3), keepdim=True)


@dataclass(frozen=True)
class Case:
    id: str
    model: Callable[[], torch.nn.Module]
    args: tuple
    dynamic_shapes: Any
    code: str
    marker: str | None                  # the model line the diagnostic points at; None: the export call
    words: tuple[str, ...] = ()
    exported: bool = False              # the export succeeds (a warning or note, not an error)
    status: dict[tuple[str, int], str] = field(default_factory=dict)


def _where(marker: str) -> str:
    return f"{NAME}:{_line(marker)}"


CASES = (
    Case("bert-seq-max", BertEmbeddings, (torch.randint(0, 100, (2, 5)),), {"input_ids": {1: Dim("seq")}},
         "CAP007", "bert", ("input `input_ids` axis 1 (seq)", "seq = Dim('seq', max=32)",
                            "dynamic_shapes = {'input_ids': {1: seq}}"),
         exported=True, status={("input_ids", 1): "narrowed"}),
    Case("bert-shared-seq", MaskedEmbeddings, (torch.randint(0, 100, (2, 5)), torch.ones(2, 5)),
         {"input_ids": {1: Dim("seq")}, "attention_mask": {1: Dim("seq")}}, "CAP007", "bert",
         ("input `input_ids` axis 1 (seq), input `attention_mask` axis 1 (seq)", "`seq = Dim('seq', max=32)`",
          "dynamic_shapes = {'input_ids': {1: seq}, 'attention_mask': {1: seq}}"),
         exported=True, status={("input_ids", 1): "narrowed", ("attention_mask", 1): "narrowed"}),
    Case("pad-to-8", PadToMultipleOf8, (torch.randn(2, 13),), {"x": {1: Dim("seq")}},
         "CAP007", "pad8", ("input `x` axis 1 (seq)", "_seq = Dim('_seq', min=1)",
                            "dynamic_shapes = {'x': {1: 8*_seq - 3}}"),
         exported=True, status={("x", 1): "narrowed"}),
    Case("derived-min", PooledUnlessTiny, (torch.randn(2, 3, 8, 32),), {"x": {0: Dim("batch"), 3: Dim("w")}},
         "CAP007", "pool4", ("input `x` axis 3 (w)", "derived by onnxsight from the guard `(w // 4) != 1`",
                             "dynamic_shapes = {'x': {0: batch, 3: w}}", "w = Dim('w', min=8)"),
         exported=True, status={("x", 3): "narrowed"}),
    Case("data-dependent", DataDependentBranch, (torch.randn(4, 3),), None, "CAP002", "datadep",
         ("data",)),
    Case("data-dependent-integer", DataDependentCount, (torch.randn(4, 3),), None, "CAP018", "datadep-int",
         ("needs a Python number computed from tensor data",)),
    Case("view-specialises-batch", ViewFour, (torch.randn(4, 6),), {"x": {0: Dim("batch")}}, "CAP005", "view4",
         ("input `x` axis 0 (batch)", "fixes it to 4", "`batch = 4`", "x.view(4, 6)",
          "dynamic_shapes = {'x': {0: 4}}"),
         status={("x", 0): "refused"}),
    Case("cnn-batch-1", lambda: SmallCNN().eval(), (torch.randn(1, 3, 8, 8),),
         {"x": {0: Dim("batch"), 2: Dim("h"), 3: Dim("w")}}, "CAP009", None,
         ("input `x` axis 0 (batch)", "size 1", "stays dynamic"),
         exported=True, status={("x", 0): "dynamic", ("x", 2): "dynamic", ("x", 3): "dynamic"}),
    Case("squeeze-batch-1", SqueezeSingleBatch, (torch.randn(1, 3),), {"x": {0: Dim("batch")}}, "CAP008", "squeeze",
         ("input `x` axis 0 (batch)", "size 1", "shape (2, 3)"), status={("x", 0): "refused"}),
    Case("nested-dict", NestedInputs, ({"a": torch.randn(2, 6), "b": {"c": torch.randn(3, 5)}},),
         {"inputs": {"a": {0: Dim("rows")}, "b": {"c": {1: Dim("cols")}}}}, "CAP005", "nested",
         ("input `inputs['a']` axis 0 (rows)", "fixes it to 2", "`rows = 2`",
          "dynamic_shapes = {'inputs': {'a': {0: 2}, 'b': {'c': {1: cols}}}}"),
         status={("inputs['a']", 0): "refused"}),
)


def _export(case: Case) -> tuple[Any, list[Any], Any]:
    """(program or None, diagnostics, record)."""
    try:
        program = onnxsight.export(case.model(), case.args, dynamic_shapes=case.dynamic_shapes)  # @export
    except onnxsight.ExportError as exc:
        return None, exc.diagnostics, exc.record
    return program, program.diagnostics, program.record


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_capture_diagnostic(case: Case, capfd: pytest.CaptureFixture[str]) -> None:
    program, diagnostics, record = _export(case)
    assert (program is not None) == case.exported, [str(d) for d in diagnostics]
    found = [d for d in diagnostics if d.code == case.code]
    assert found, f"{case.code} not emitted; got {[str(d) for d in diagnostics]}"
    diagnostic = found[0]
    assert not [d for d in diagnostics if d.code == "CAP005" and case.code != "CAP005"]
    where = _line(case.marker or "export")
    assert diagnostic.location is not None and (diagnostic.location.file, diagnostic.location.line) == (HERE, where)
    if case.marker:
        assert f"{NAME}:{where}" in diagnostic.message
    for word in case.words:
        assert word in diagnostic.message, (word, diagnostic.message)
    assert not re.search(r"<\w+\?>|\?", diagnostic.message.replace("?)", "")), diagnostic.message
    audit = {(e["input"], e["axis"]): e for e in record.facts.get("dynamic_dims", [])}
    for key, status in case.status.items():
        assert audit[key]["status"] == status, audit
        if status in ("refused", "narrowed"):
            assert (audit[key]["file"], audit[key]["line"]) == (HERE, where)
    assert record.attempts[-1].success == case.exported
    if not case.exported and case.code in ("CAP005", "CAP008"):  # the attempt says what became of it
        assert record.attempts[-1].rule == case.code
    err = capfd.readouterr().err
    assert not re.search(r"^[IWE]\d{4} |torch/|def forward\(", err, re.M), err


def test_failed_capture_keeps_torch_log_in_the_record(capfd: pytest.CaptureFixture[str]) -> None:
    _, _, record = _export(next(c for c in CASES if c.id == "data-dependent"))
    assert [a.success for a in record.attempts] == [False, False]
    assert any("def forward(" in line or "torch" in line for a in record.attempts for line in a.log)
    assert "torch/" not in capfd.readouterr().err


def test_the_models_own_warnings_still_reach_the_user() -> None:
    class Warns(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            warnings.warn("this model is deprecated", DeprecationWarning)
            return x + 1

    with pytest.warns(DeprecationWarning, match="this model is deprecated"):
        onnxsight.export(Warns(), (torch.randn(2),))


def test_fix_applied_model_runs_at_the_sizes_the_fix_allows() -> None:
    model = BertEmbeddings().eval()
    program = onnxsight.export(model, (torch.randint(0, 100, (2, 5)),),
                               dynamic_shapes={"input_ids": {1: Dim("seq")}})
    for seq in (3, 17, 32):
        ids = torch.randint(0, 100, (2, seq))
        torch.testing.assert_close(program(ids)[0], model(ids), atol=1e-4, rtol=1e-4)


def test_batch_one_example_and_a_narrowed_seq_together() -> None:
    """Size-oblivious capture finds no fix for `seq <= 32`; the example grown to batch 2 does."""
    model = BertEmbeddings().eval()
    program = onnxsight.export(model, (torch.randint(0, 100, (1, 5)),),
                               dynamic_shapes={"input_ids": {0: Dim("batch"), 1: Dim("seq")}})
    assert [d.code for d in program.diagnostics if d.code.startswith("CAP")] == ["CAP009", "CAP007"]
    assert "grown to size 2" in program.diagnostics[0].message
    assert [(e["dim"], e["status"]) for e in program.record.facts["dynamic_dims"]] == [
        ("batch", "dynamic"), ("seq", "narrowed")]
    for batch, seq in ((1, 5), (3, 32), (2, 1)):
        ids = torch.randint(0, 100, (batch, seq))
        torch.testing.assert_close(program(ids)[0], model(ids), atol=1e-4, rtol=1e-4)


def test_a_derived_range_exports_a_model_right_at_every_size_it_accepts() -> None:
    """The range onnxsight derives (w >= 8) keeps w dynamic; below it the model rejects the input."""
    model = PooledUnlessTiny()
    program = onnxsight.export(model, (torch.randn(2, 3, 8, 32),), dynamic_shapes={"x": {0: Dim("batch"), 3: Dim("w")}})
    for batch, width in ((1, 8), (3, 13), (2, 64)):
        x = torch.randn(batch, 3, 8, width)
        torch.testing.assert_close(program(x)[0], model(x))
    assert onnxsight.verify(program, (torch.randn(2, 3, 8, 9),)).passed
    with pytest.raises(onnxsight.VerificationError, match="w"):
        onnxsight.verify(program, (torch.randn(2, 3, 8, 7),))


def test_a_batch_one_example_with_a_derived_range_keeps_both_dims_dynamic() -> None:
    """Size-oblivious capture reports ``batch == 1`` next to the width guard; the grown example
    gets the derived range and the batch stays dynamic (was CAP008, 'pass an example of batch 2',
    which failed the same way: the segformer case)."""
    model = PooledUnlessTiny()
    program = onnxsight.export(model, (torch.randn(1, 3, 8, 32),), dynamic_shapes={"x": {0: Dim("batch"), 3: Dim("w")}})
    assert [d.code for d in program.diagnostics if d.code.startswith("CAP")] == ["CAP009", "CAP007"]
    for batch, width in ((1, 32), (3, 12)):
        x = torch.randn(batch, 3, 8, width)
        torch.testing.assert_close(program(x)[0], model(x))


@pytest.mark.parametrize(("guard", "example", "expected"), [
    ("(L['x'].size()[3] // 4) != 1", 32, "w = Dim('w', min=8)"),
    ("(1 + (((-1) + (((-1) + L['x'].size()[3]) // 4)) // 2)) != 1", 32, "w = Dim('w', min=13)"),
    ("(L['x'].size()[3] // 4) != 1", 5, None),          # the example itself fails the guard: no proposal
    ("(L['x'].size()[3] % 2) == 0", 32, None),          # every other size: only the example's own run, static
    ("Max(1, 61 - L['x'].size()[3]) != 1", 8, "w = Dim('w', min=4, max=59)"),  # a maximum
    ("(L['x'].size()[3] * L['y'].size()[0]) != 1", 32, None),  # two dims: not ours to guess
])
def test_derive_range_fixes(guard: str, example: int, expected: str | None) -> None:
    from onnxsight.exporter.capture._fixes import derive_range_fixes

    message = (f"Constraints violated (w)!\n  - Not all values of w = L['x'].size()[3] in the specified range "
               f"4 <= w satisfy the generated guard {guard}.\n")
    fixes = derive_range_fixes(message, {"w": example})
    assert [f.text for f in fixes] == ([expected] if expected else [])


def test_grown_example_repeats_size_one_axes_of_the_requested_dims_only() -> None:
    from onnxsight.exporter.capture._audit import grown
    from onnxsight.exporter.capture._fixes import requested_dims

    x, mask = torch.randn(1, 3, 1), torch.ones(1, 0)
    dims = requested_dims(torch.nn.Bilinear(1, 1, 1), (x, mask), {}, {"input1": {0: Dim("b"), 2: Dim("w")},
                                                                        "input2": {1: Dim("n")}})
    (a, b), _ = grown((x, mask), {}, dims)
    assert a.shape == (2, 3, 2) and torch.equal(a[1, :, 1], x[0, :, 0]) and b.shape == (1, 2)


def test_batch_one_example_exports_a_model_right_at_batch_two() -> None:
    model = SmallCNN().eval()
    program = onnxsight.export(model, (torch.randn(1, 3, 8, 8),),
                               dynamic_shapes={"x": {0: Dim("batch"), 2: Dim("h"), 3: Dim("w")}})
    shape = program.model_proto.graph.input[0].type.tensor_type.shape
    assert [d.dim_param or d.dim_value for d in shape.dim] == ["batch", 3, "h", "w"]
    for size in ((2, 3, 8, 8), (3, 3, 5, 7), (1, 3, 8, 8)):
        x = torch.randn(*size)
        torch.testing.assert_close(program(x)[0], model(x), atol=1e-4, rtol=1e-4)


# -- classification by exception type ------------------------------------------------------------------
def _user_error(kind: str, message: str = "failed", cause: BaseException | None = None) -> BaseException:
    from torch._dynamo.exc import UserError, UserErrorType

    error = UserError(UserErrorType[kind], message)
    error.__cause__ = cause
    return error


def _exceptions() -> list[tuple[str, Callable[[], BaseException], str]]:
    from torch._dynamo.exc import UncapturedHigherOrderOpError, Unsupported
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError, GuardOnDataDependentSymNode

    nonzero = torch.ops.aten.nonzero.default
    return [
        ("UserError-CONSTRAINT_VIOLATION", lambda: _user_error("CONSTRAINT_VIOLATION"), "CAP004"),
        ("UserError-DYNAMIC_DIM", lambda: _user_error("DYNAMIC_DIM"), "CAP004"),
        ("UserError-DYNAMIC_CONTROL_FLOW", lambda: _user_error("DYNAMIC_CONTROL_FLOW"), "CAP002"),
        ("UserError-INVALID_INPUT-dynamic_shapes",
         lambda: _user_error("INVALID_INPUT", "mismatch between `inputs` and `dynamic_shapes`"), "ARG003"),
        ("UserError-ANTI_PATTERN-from-guard",
         lambda: _user_error("ANTI_PATTERN", cause=GuardOnDataDependentSymNode(sympy.Eq(sympy.Symbol("u0"), 1),
                                                                              "Eq(u0, 1)")),
         "CAP002"),
        ("ConstraintViolationError", lambda: ConstraintViolationError("s0 not in range"), "CAP004"),
        ("GuardOnDataDependentSymNode", lambda: GuardOnDataDependentSymNode(sympy.Eq(sympy.Symbol("u0"), 1),
                                                                            "Eq(u0, 1)"), "CAP002"),
        # the guard asks for the value itself (a size, an index), not a branch's direction
        ("GuardOnDataDependentSymNode-integer", lambda: GuardOnDataDependentSymNode(sympy.Symbol("u0"), "u0"),
         "CAP018"),
        ("DataDependentOutputException", lambda: DataDependentOutputException(nonzero), "CAP002"),
        ("DynamicOutputShapeException", lambda: DynamicOutputShapeException(nonzero), "CAP002"),
        ("Unsupported", lambda: Unsupported("generator"), "CAP003"),
        ("UncapturedHigherOrderOpError", lambda: UncapturedHigherOrderOpError("cond"), "CAP003"),
        # torch's words alone never decide: these read like CAP005/CAP002 but are plain RuntimeErrors.
        ("RuntimeError-specialized-words",
         lambda: RuntimeError("You marked batch as dynamic but your code specialized it"), "CAP006"),
        ("RuntimeError-data-dependent-words",
         lambda: RuntimeError("Could not extract specialized integer from data-dependent expression"), "CAP006"),
    ]


@pytest.mark.parametrize("name,make,code", _exceptions(), ids=[n for n, _, _ in _exceptions()])
def test_classify_by_exception_type(name: str, make: Callable[[], BaseException], code: str) -> None:
    assert classify(make()).code == code


# -- torch.export's suggested fixes -------------------------------------------------------------------
@pytest.mark.parametrize("line,kind,value", [
    ("seq = Dim('seq', max=32)", "range", None),
    ("_seq = Dim('_seq', min=1, max=oo)", "root", None),
    ("seq = 8*_seq - 3", "relation", None),
    ("other = seq", "relation", None),
    ("batch = 4", "static", 4),
    ("seq = Dim('seq', min=4, max=4)", "static", 4),
    ("L['x'].size()[0] = 1", "static", 1),
])
def test_suggested_fix_kinds(line: str, kind: str, value: int | None) -> None:
    from onnxsight.exporter.capture._fixes import parse_fixes

    message = f"Constraints violated (seq)!\nSuggested fixes:\n  {line}\n\nThe error above occurred ..."
    [fix] = parse_fixes(message, {"seq", "batch", "other", "L['x'].size()[0]"})
    assert (fix.kind, fix.value, fix.text) == (kind, value, line)


@pytest.mark.parametrize("shapes,code", [
    ({"x": {0: Dim("batch"), 1: Dim("seq", max=32)}},
     "batch = Dim('batch'); seq = Dim('seq', max=32); dynamic_shapes = {'x': {0: batch, 1: seq}}"),
    ({"x": {1: 8 * Dim("k", min=1) - 3}}, "k = Dim('k', min=1); dynamic_shapes = {'x': {1: 8*k - 3}}"),
    (({0: Dim.DYNAMIC}, None), "dynamic_shapes = ({0: Dim.DYNAMIC}, None)"),
])
def test_dynamic_shapes_code_to_write(shapes: Any, code: str) -> None:
    from onnxsight.exporter.capture._fixes import render

    assert render(shapes) == code


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_each_strategy_finds_the_model_line_and_keeps_torch_quiet(strict: bool,
                                                                   capfd: pytest.CaptureFixture[str]) -> None:
    from onnxsight.exporter.capture import _audit as audit
    from onnxsight.exporter.capture._strategies import _run
    from onnxsight.exporter.capture._fixes import requested_dims

    model, args, shapes = ViewFour(), (torch.randn(4, 6),), {"x": {0: Dim("batch")}}
    dims = requested_dims(model, args, {}, shapes)
    attempt = _run(model, args, {}, shapes, strict, False, frozenset(s for d in dims for s in d.sources))
    assert classify(attempt.error).code == "CAP004"
    location, _ = audit.where(attempt.log, dims, specialised=True)
    assert (location.file, location.line, location.code) == (HERE, _line("view4"), "return x.view(4, 6)  # @view4")
    if strict:  # strict capture logs "Error while creating guard" from torch/_guards.py: kept, not printed
        assert any("torch._guards" in line for line in attempt.log.log_lines())
    assert not re.search(r"^[IWE]\d{4} |torch/", capfd.readouterr().err, re.M)


def test_a_model_built_by_library_code_alone_is_located_at_the_librarys_line(monkeypatch) -> None:
    """The zoo job exports torchvision's RAFT from onnxsight's own worker: no user frame on the stack.
    CAP005 said "the model's code fixes it to 2"; it names the library's line now (here a transformers
    file stands for torchvision, which this venv does not have)."""
    from transformers.models.llama import modeling_llama

    from onnxsight.exporter.capture import _torchlog

    library = modeling_llama.__file__
    worker = os.path.join(os.path.dirname(onnxsight.__file__), "zoo", "_worker.py")
    monkeypatch.setattr(_torchlog, "_frames", lambda: [(library, 493, "forward"), (worker, 300, "_export")])
    user, origin = _torchlog._locations()
    assert (user.file, user.line, origin) == (library, 493, None)
    monkeypatch.setattr(_torchlog, "_frames", lambda: [(library, 493, "forward"), (__file__, 7, "test")])
    user, origin = _torchlog._locations()  # a user's line calling into the library: both, as before
    assert (user.file, user.line, origin.file, origin.line) == (__file__, 7, library, 493)


def test_a_data_dependent_branch_inside_a_librarys_model_names_the_librarys_line() -> None:
    """transformers' dynamic rope (rope_type="dynamic") recomputes its frequencies when the positions' values pass
    the cached length: a branch on tensor data in transformers' code, no line of the user's on torch.export's stack.
    CAP002 said "the model's code depends on tensor data"; it names transformers' line now."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=8,
                                      rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    model = transformers.LlamaForCausalLM(config).eval()
    with pytest.raises(onnxsight.exporter.CaptureError) as info:
        onnxsight.export(model, (torch.randint(0, 64, (1, 6)),))
    (error,) = [d for d in info.value.diagnostics if d.code == "CAP002"]
    assert "modeling_rope_utils.py:" in error.message and "`if seq_len > max_seq_len_cached" in error.message
    assert "the model's code" not in error.message
    assert error.location.file == __file__   # the SARIF result stays on the user's call


def test_a_model_that_does_not_run_eagerly_is_said_so_at_the_line_that_raised() -> None:
    """transformers' OPTModel with config.return_dict=False reads .last_hidden_state from a tuple: it raises
    when PyTorch runs it, before any export. CAP006 said every capture strategy failed; CAP025 names the
    model's error and transformers' line, and the user's inputs (a cache among them) are left as they were."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.OPTConfig(vocab_size=64, hidden_size=32, num_attention_heads=4, ffn_dim=64,
                                    num_hidden_layers=1, word_embed_proj_dim=32)
    model = transformers.OPTModel(config).eval()
    model.config.return_dict = False
    with pytest.raises(onnxsight.exporter.CaptureError) as info:
        onnxsight.export(model, (torch.randint(0, 64, (1, 6)),))
    codes = [d.code for d in info.value.diagnostics]
    assert "CAP025" in codes and "CAP006" not in codes
    (error,) = [d for d in info.value.diagnostics if d.code == "CAP025"]
    assert "OPTModel.forward raises AttributeError" in error.message
    assert "last_hidden_state" in error.message and "modeling_opt.py:" in error.message


def test_a_users_model_that_raises_is_located_at_the_users_line() -> None:
    class Broken(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.relu().sum(dim="rows")  # @broken

    with pytest.raises(onnxsight.exporter.CaptureError) as info:
        onnxsight.export(Broken(), (torch.randn(2, 3),))
    (error,) = [d for d in info.value.diagnostics if d.code == "CAP025"]
    assert (error.location.file, error.location.line) == (HERE, _line("broken"))
    assert "Broken.forward raises TypeError" in error.message


def test_a_model_that_runs_eagerly_but_does_not_capture_keeps_cap006() -> None:
    """A custom op without a fake kernel runs eagerly and fails every capture: the exporter's limit, CAP006."""

    @torch.library.custom_op("onnxsight_test::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    class CustomOp(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return twice(x) + 1

    with pytest.raises(onnxsight.exporter.CaptureError) as info:
        onnxsight.export(CustomOp(), (torch.randn(2, 3),))
    codes = [d.code for d in info.value.diagnostics]
    assert "CAP006" in codes and "CAP025" not in codes


def test_cap006_names_the_library_line_that_raised() -> None:
    """transformers' Autoformer with a dynamic batch: a `view` in its attention raises while tracing (it runs
    eagerly, so not CAP025). CAP006 named only the user's call; it names the modeling file's line too."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.AutoformerConfig(prediction_length=4, context_length=24, lags_sequence=[1, 2, 3],
                                           num_time_features=2, d_model=16, encoder_layers=1, decoder_layers=1,
                                           encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
                                           decoder_ffn_dim=16)
    model = transformers.AutoformerModel(config).eval()
    inputs = {"past_values": torch.randn(2, 27), "past_time_features": torch.randn(2, 27, 2),
              "past_observed_mask": torch.ones(2, 27), "future_time_features": torch.randn(2, 4, 2),
              "future_values": torch.randn(2, 4)}
    with pytest.raises(onnxsight.exporter.CaptureError) as info:
        onnxsight.export(model, (), kwargs=inputs, dynamic_shapes={name: {0: "batch"} for name in inputs})
    [found] = [d for d in info.value.diagnostics if d.code == "CAP006"]
    assert "(raised at `attn_weights = attn_weights.view(" in found.message
    assert "modeling_autoformer.py:" in found.message
    assert found.location.file == __file__   # the user's call


def test_the_eager_call_that_finds_the_models_error_leaves_its_buffers_as_they_were() -> None:
    class CountsThenBreaks(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))
            self.register_buffer("seen", torch.zeros(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            self.seen = self.seen + x[0]   # replaced, not written into
            return x.sum(dim="rows")

    model = CountsThenBreaks()
    calls, seen = model.calls, model.seen
    with pytest.raises(onnxsight.exporter.CaptureError) as info:
        onnxsight.export(model, (torch.randn(2, 3),))
    assert "CAP025" in [d.code for d in info.value.diagnostics]
    assert model.calls is calls and model.seen is seen
    assert float(model.calls) == 0 and not model.seen.any()
