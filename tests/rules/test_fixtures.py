"""One fixture model per rule the exporter emits, with the diagnostic it must produce (code, level, line).

Lines are marked in this file with ``# @<id>`` comments; ``@export`` marks the
call of ``onnxsight.export``, which is where diagnostics without a graph node
point (the user's call site). Every case's SARIF is validated and kept for
``make sarif-validate``.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
import torch

import onnxsight
from onnxsight import rules
from onnxsight.diagnostics import Diagnostic
from onnxsight.exporter import Registry
from onnxsight.reports.sarif import to_sarif
from tests.sarif_check import check_sarif

HERE = os.path.abspath(__file__)
aten = torch.ops.aten


def _line(marker: str) -> int:
    with open(HERE, encoding="utf-8") as handle:
        numbers = [n for n, text in enumerate(handle, 1) if text.rstrip().endswith(f"# @{marker}")]
    assert len(numbers) == 1, f"marker @{marker} must appear once, found {numbers}"
    return numbers[0]


@torch.library.custom_op("onnxsight_fixture::scale", mutates_args=())
def _scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_scale.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


# -- fixture models ------------------------------------------------------------------------------------
class Sin(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x)  # @sin


class ViewRows(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(4, -1)  # @CAP013


class Float8(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float8_e4m3fn).float()  # @DTY005


class Float4Slice(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", torch.zeros(4, 4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.w[:, :2].view(torch.uint8)  # @DTY007


class ScatterAdd(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(3, 4).scatter_add(0, torch.tensor([[0, 1, 2, 0]]), x[None])


class KeyPaddingAttention(torch.nn.Module):
    def forward(self, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(x, x, x, attn_mask=keys[:, None, None, :])


class TwoArgs(torch.nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x * 2


class Concat(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat((x, y), 1)


class Accumulate(torch.nn.Module):
    def forward(self, total: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        total.add_(step)  # @ARG012
        return total * step


class CustomOp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.onnxsight_fixture.scale(x)  # @OPS001


class DataDependentBranch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # @CAP002
            return x * 2
        return x


class LinspaceSteps(torch.nn.Module):
    def forward(self, steps: torch.Tensor) -> torch.Tensor:
        return torch.linspace(0, 1, steps)  # @CAP018


class ByteMask(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[torch.tensor([0, 1, 0, 1], dtype=torch.uint8)]  # @CAP019


class Record(dict):
    """A dict subclass no pytree knows (CAP020)."""


class RecordOutput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Record:
        return Record(y=x + 1)


class WithFlag(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        return x * 2, x.shape[0] > 2


class SwapStorage(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.set_(y)  # @DEC003
        return x


class Specialised(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(4, 8)  # @CAP005


class HandPacked(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(4, 3)

    def forward(self, data: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        packed = torch.nn.utils.rnn.PackedSequence(data, batch_sizes)
        return self.rnn(packed)[1]  # @CAP014


class PositionLimit(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.randn(1, 16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table[:, : x.shape[1]]  # @CAP007


class SqueezeBatch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze(0) if x.shape[0] == 1 else x  # @CAP008


class FloorDivide(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.div(x, 3, rounding_mode="floor")  # @OPS005


class Noise(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn_like(x)  # @OPS007


class LongRfft(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft(x).abs()  # @OPS010


class ScaleArg(torch.nn.Module):
    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return x * scale


class NumpyConstant(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.from_numpy(np.arange(4, dtype=np.float32))  # @VAL002


class NonZero(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x > 0)  # @VAL003


class TensorConstant(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.tensor([1.0, 2.0, 3.0, 4.0])  # @VAL005


class Complex32(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.complex32)  # @DTY001


class ComplexOutput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft(x)  # @IO007


class CacheInput(torch.nn.Module):
    def forward(self, x: torch.Tensor, cache: Any) -> torch.Tensor:
        return x + cache.layers[0].keys.sum()


class Broadcast(torch.nn.Module):
    def forward(self, mask: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return mask + keys  # @CAP023


class TiedThroughMask(torch.nn.Module):
    def forward(self, mask: torch.Tensor, keys: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return (mask * 2 + ids) * keys  # @CAP024


class RaisesEagerly(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim="rows")  # @CAP025


def _cache() -> Any:
    from transformers import DynamicCache

    return DynamicCache([(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))])


class BFloat16Mul(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.bfloat16) * 2  # @DTY002


class Float64Constant(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.from_numpy(np.linspace(0.0, 1.0, 4))  # @DTY004


class DictOutput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"double": x * 2, "triple": x * 3}


class NoneOutput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return x * 2, None


class Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)  # @IO005
        return x * 2


class CeluDouble(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.celu(x)  # @ONX004


class ReturnsNumbers(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[int, float]:
        return x.shape[0] * 2, 3.0


def _celu_any_type(b: Any, x: Any, alpha: float = 1.0) -> Any:
    return b.op("Celu", x, alpha=float(alpha))  # Celu's T is tensor(float) only


def _raising_translation(b: Any, x: Any) -> Any:
    raise NotImplementedError("fixture translation refuses")


def _invalid_node(b: Any, x: Any) -> Any:
    return b.op("Relu", x, alpha=0.1)


def _shape_clash(b: Any, x: Any) -> Any:
    return b.op("MatMul", x, x)  # (4, 3) @ (4, 3): the inner dimensions differ


def _sin_registry(since: int) -> Registry:
    registry = Registry()
    registry.register(aten.sin.default, lambda b, x: b.op("Sin", x), since=since)
    return registry


X4 = (torch.randn(4),)


@dataclass(frozen=True)
class Case:
    """A model, export arguments, and the diagnostic they must produce at ``marker``'s line."""

    code: str
    model: Callable[[], Any]
    args: tuple = X4
    marker: str = ""                      # defaults to the code; "export" for the call site
    options: dict = field(default_factory=dict)
    files: tuple[str, ...] = ()           # options that are paths inside tmp_path


CASES: tuple[Case, ...] = (
    Case("ARG001", lambda: (lambda x: x), marker="export"),
    Case("ARG002", TwoArgs, marker="export"),
    Case("ARG003", Sin, marker="export", options={"dynamic_shapes": {"nope": {0: torch.export.Dim("b")}}}),
    Case("ARG004", Sin, marker="export", options={"opset_version": 5}),
    Case("ARG005", Sin, marker="export", options={"kwargs": [1]}),
    Case("ARG006", Sin, marker="export", options={"opset_version": "18"}),
    Case("ARG007", Sin, marker="export", options={"output_names": "y"}),
    Case("ARG008", Sin, marker="export", options={"f": os.path.dirname(HERE)}),
    Case("ARG009", Sin, marker="export", options={"report": True, "artifacts_dir": HERE}),
    Case("ARG010", Sin, marker="export", options={"custom_translations": {"sin": _invalid_node}}),
    Case("ARG011", Sin, marker="export", options={"custom_translations": {"aten::sinn": _invalid_node}}),
    Case("ARG012", Accumulate, args=X4 * 2),
    Case("ARG013", Sin, marker="export", options={"f": io.BytesIO(), "external_data": True}),
    Case("ARG015", Sin, marker="export", options={"module_functions": "Sin"}),
    Case("ARG016", Sin, marker="export", options={"dynamic_axes": {"x": {0: "b"}, "seq_lengths": {0: "b"}}}),
    Case("ARG018", Sin, marker="export", options={"dynamo": False}),
    Case("ARG019", Sin, marker="export", options={"dynamo": True}),
    Case("ARG021", TwoArgs, args=X4 * 2, marker="export"),
    Case("ARG023", Concat, args=(torch.randn(2, 3), torch.randn(2, 5)), marker="export",
         options={"dynamic_shapes": ({1: "sequence"}, {1: "sequence"})}),
    Case("ARG022", TwoArgs, args=(torch.randn(4), torch.randn(4)), marker="export", options={"input_names": ["x"]}),
    Case("CAP001", DataDependentBranch, marker="CAP002"),
    Case("CAP002", DataDependentBranch),
    Case("CAP018", LinspaceSteps, args=(torch.tensor(5),)),
    Case("CAP019", ByteMask),
    Case("CAP020", RecordOutput, marker="export"),
    Case("VAL011", WithFlag, marker="export"),
    Case("DEC003", SwapStorage, args=(torch.ones(2, 3), torch.randn(4, 6))),
    Case("CAP005", Specialised, args=(torch.randn(4, 8),),
         options={"dynamic_shapes": {"x": {0: torch.export.Dim("batch")}}}),
    Case("CAP007", PositionLimit, args=(torch.randn(2, 5, 4),),
         options={"dynamic_shapes": {"x": {1: torch.export.Dim("seq")}}}),
    Case("CAP008", SqueezeBatch, args=(torch.randn(1, 3),),
         options={"dynamic_shapes": {"x": {0: torch.export.Dim("batch")}}}),
    Case("CAP009", Sin, args=(torch.randn(1, 4),), marker="export",
         options={"dynamic_shapes": {"x": {0: torch.export.Dim("batch")}}}),
    Case("CAP013", ViewRows, args=(torch.randn(4, 6),), options={"dynamic_shapes": {"x": {0: torch.export.Dim("batch")}}}),
    Case("CAP014", HandPacked, args=(torch.randn(5, 4), torch.tensor([2, 2, 1]))),
    Case("OPS001", CustomOp),
    Case("OPS002", Sin, marker="sin", options={"registry": Registry()}),
    Case("OPS003", Sin, marker="sin", options={"registry": _sin_registry(since=20)}),
    Case("OPS004", Sin, marker="sin", options={"custom_translations": {aten.sin.default: _raising_translation}}),
    Case("OPS005", FloorDivide),
    Case("OPS007", Noise),
    Case("OPS010", LongRfft, args=(torch.randn(2, 1100),)),
    Case("VAL001", ScaleArg, args=(torch.randn(4), 0.5), marker="export"),
    Case("VAL002", NumpyConstant),
    Case("VAL003", NonZero),
    Case("VAL005", TensorConstant),
    Case("DTY001", Complex32),
    Case("DTY002", BFloat16Mul, options={"verify": True}),
    Case("DTY004", Float64Constant),
    Case("IO001", TwoArgs, args=(torch.randn(4), torch.randn(4)), marker="export"),
    Case("IO002", DictOutput, marker="export"),
    Case("IO003", NoneOutput, marker="export"),
    Case("IO004", Sin, marker="export", options={"input_names": ["a", "b"]}),
    Case("IO005", Counter),
    Case("ONX001", Sin, marker="export", options={"custom_translations": {aten.sin.default: _invalid_node}}),
    Case("ONX002", Sin, args=(torch.randn(4, 3),), marker="export",
         options={"custom_translations": {aten.sin.default: _shape_clash}}),
    Case("ONX003", lambda: torch.nn.Linear(4, 4), marker="model.onnx", options={"external_data": True},
         files=("f",)),
    Case("ONX004", CeluDouble, args=(torch.randn(4, dtype=torch.float64),),
         options={"custom_translations": {aten.celu.default: _celu_any_type}}),
    Case("IO006", ReturnsNumbers, marker="export"),
    Case("DTY005", Float8, options={"opset_version": 18}),
    Case("DTY006", Float8, marker="DTY005"),
    Case("DTY007", Float4Slice, args=(torch.randn(4, 2),)),
    Case("CAP015", lambda: torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)), args=(torch.randn(2, 4),),
         marker="export"),
    Case("ONX007", ScatterAdd, marker="export", options={"opset_version": 15}),
    Case("ONX008", KeyPaddingAttention, args=(torch.randn(2, 2, 6, 8), torch.rand(2, 6) > 0.3), marker="export"),
    Case("ONX006", lambda: torch.nn.Sequential(Sin()), marker="export",
         options={"module_functions": {torch.nn.TransformerEncoderLayer}}),
    Case("IO007", ComplexOutput, args=(torch.randn(2, 16),)),
    Case("CAP012", CacheInput, args=(torch.randn(4), _cache()), marker="export"),
    Case("ARG027", CacheInput, args=(torch.randn(4), _cache()), marker="export",
         options={"dynamic_shapes": {"x": None, "cache": [[{0: torch.export.Dim("batch")}] * 3]}}),
    Case("CAP023", Broadcast, args=(torch.ones(2, 7), torch.ones(2, 3)),
         options={"dynamic_shapes": {"mask": {1: torch.export.Dim.DYNAMIC}, "keys": {1: torch.export.Dim("length")}}}),
    Case("CAP024", TiedThroughMask, args=(torch.ones(5), torch.ones(5), torch.ones(5)),
         options={"dynamic_shapes": {"mask": {0: torch.export.Dim.DYNAMIC}, "keys": {0: torch.export.Dim("cache_length")},
                                     "ids": {0: torch.export.Dim("seq_length")}}}),
    Case("VAL007", lambda: _fake(lambda: torch.nn.Linear(4, 4)), marker="export", files=("f",)),
    Case("CAP025", RaisesEagerly, args=(torch.randn(2, 3),)),
)


def _fake(build: Callable[[], Any]) -> Any:
    with onnxsight.fake_mode():
        return build()


def _export(case: Case, tmp_path: str) -> list[Diagnostic]:
    options = dict(case.options)
    for name in case.files:
        options[name] = os.path.join(tmp_path, "model.onnx")
    try:
        # registry= is the exporter core's extension parameter, not the public export's
        export = onnxsight.exporter.export if "registry" in options else onnxsight.export
        program = export(case.model(), case.args, **options)  # @export
    except onnxsight.ExportError as exc:
        return exc.diagnostics
    return program.diagnostics


@pytest.mark.parametrize("case", CASES, ids=[f"{c.code}-{c.model.__name__}" for c in CASES])
def test_fixture_model_triggers_rule(case: Case, tmp_path: Any) -> None:
    diagnostics = _export(case, str(tmp_path))
    rule = rules.get(case.code)
    found = [d for d in diagnostics if d.rule is rule]
    assert found, f"{case.code} not emitted; got {[str(d) for d in diagnostics]}"
    diagnostic = found[0]
    assert diagnostic.level is rule.level
    assert diagnostic.location is not None
    if case.marker == "model.onnx":
        assert diagnostic.location.file.startswith(str(tmp_path))
    else:
        assert (diagnostic.location.file, diagnostic.location.line) == (HERE, _line(case.marker or case.code))
    assert not re.search(r"<\w+\?>", diagnostic.message), f"a template field was not filled: {diagnostic.message}"
    log = check_sarif(to_sarif(diagnostics), f"fixture_{case.code}")
    levels = {r["ruleId"]: r["level"] for r in log["runs"][0]["results"]}
    assert levels[case.code] == rule.level.value


def test_fixture_table_covers_the_rules_the_exporter_emits() -> None:
    covered = {case.code for case in CASES}
    assert len(covered) >= 28
    exporter_rules = {code for code in rules.CATALOG if code[:3] not in ("ACC", "ORT", "VER", "ZOO", "GEN")}
    untested = exporter_rules - covered
    # Emitted only in conditions a small model cannot create (or tested elsewhere):
    # CAP003/CAP004/CAP006 (torch.export error classes), DEC001, VAL004 (strict capture only),
    # OPS006 (per translation), DTY003 (never: float64 is kept), INT001 (tests/rules/test_analysis.py),
    # VAL006 (raised when a program is used after its weights changed: tests/exporter/test_honest_weights.py),
    # VAL008-VAL010 and ARG014 (raised by save(weights=): tests/exporter/test_save_weights.py),
    # ONX005 (a module call whose nodes interleave with its caller's: tests/exporter/test_module_functions.py),
    # CAP010/CAP011 (capture patches of a library's functions: tests/exporter/test_capture_patches.py),
    # OPS008 (a torchvision op, needs torchvision: tests/vision/test_detection_ops.py),
    # QNT001 (eager-mode quantized modules: tests/quantized/test_eager_quantized.py),
    # ARG020 (raised by torch.onnx's ONNXProgram API on a program: tests/exporter/test_torch_onnx_program_api.py).
    assert untested <= {"CAP003", "CAP004", "CAP006", "DEC001", "VAL004", "OPS006", "DTY003", "INT001", "VAL006",
                        "VAL008", "VAL009", "VAL010", "ARG014", "ONX005", "CAP010", "CAP011", "OPS008", "QNT001",
                        "ARG020"}

