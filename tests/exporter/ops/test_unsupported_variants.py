"""OPS006: an argument variant a translation does not implement is reported at the user's line.

Translations raise ``UnsupportedVariant(argument, got, supported)``; the node
translator turns it into OPS006 naming the op and the argument (a real crash in
a translation stays OPS004).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

import onnxsight
from onnxsight.exporter import GraphBuilder, Value
from onnxsight.exporter import UnsupportedVariant


class Fn(torch.nn.Module):
    """Defined here so the diagnostics' user line is in this file."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *tensors: torch.Tensor) -> Any:
        return self.fn(*tensors)


DYNAMIC_0 = ({0: torch.export.Dim("n", min=3, max=64)},)

# (id, fn, inputs, export kwargs, op, argument, got fragment)
CASES: list[tuple[str, Callable[..., Any], tuple, dict, str, str, str]] = [
    ("antialias_with_align_corners",
     lambda x: F.interpolate(x, size=(3, 3), mode="bilinear", antialias=True, align_corners=True),
     (torch.randn(1, 2, 6, 6),), {}, "aten._upsample_bilinear2d_aa", "align_corners", "True"),
    ("scatter_reduce_amax_at_opset_17",
     lambda x, i: x.scatter_reduce(0, i, x, reduce="amax"),
     (torch.randn(4), torch.tensor([0, 1, 0, 1])), {"opset_version": 17}, "aten.scatter_reduce.two", "reduce",
     "'amax'"),
    ("bitwise_and_on_integers_at_opset_17",
     lambda x, y: torch.bitwise_and(x, y),
     (torch.tensor([3, 5]), torch.tensor([1, 4])), {"opset_version": 17}, "aten.bitwise_and.Tensor", "self",
     "torch.int64"),
]


@pytest.mark.parametrize(("case", "fn", "inputs", "options", "op", "argument", "got"), CASES,
                         ids=[c[0] for c in CASES])
def test_unsupported_variant_is_ops006_at_the_users_line(case: str, fn: Callable[..., Any], inputs: tuple,
                                                         options: dict, op: str, argument: str, got: str) -> None:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(Fn(fn), inputs, **options)
    (diagnostic,) = [d for d in info.value.diagnostics if d.code.startswith("OPS")]
    assert diagnostic.code == "OPS006", str(diagnostic)
    assert diagnostic.message.startswith(op), diagnostic.message
    assert f"argument {argument}=" in diagnostic.message and got in diagnostic.message, diagnostic.message
    assert diagnostic.fields["argument"] == argument
    assert diagnostic.location is not None and diagnostic.location.file == __file__


@torch.library.custom_op("variant_test::shift", mutates_args=())
def shift(x: torch.Tensor, mode: str) -> torch.Tensor:
    return x + 1


@shift.register_fake
def _(x: torch.Tensor, mode: str) -> torch.Tensor:
    return torch.empty_like(x)


def shift_onnx(b: GraphBuilder, x: Value, mode: str) -> Value:
    if mode != "up":
        raise UnsupportedVariant("mode", repr(mode), "'up'")
    if x.rank != 1:
        raise RuntimeError("a bug in the translation")  # any other exception stays OPS004
    return b.op("Add", x, b.scalar(1.0, x))


@pytest.mark.parametrize(("mode", "shape", "code"), [("up", (3,), None), ("down", (3,), "OPS006"),
                                                     ("up", (2, 3), "OPS004")])
def test_custom_translations_raise_it_too(mode: str, shape: tuple, code: str | None) -> None:
    model = Fn(lambda x: torch.ops.variant_test.shift(x, mode))
    x = torch.randn(shape)
    if code is None:
        torch.testing.assert_close(onnxsight.export(model, (x,), custom_translations={
            "variant_test::shift": shift_onnx})(x)[0], x + 1)
        return
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(model, (x,), custom_translations={"variant_test::shift": shift_onnx})
    assert [d.code for d in info.value.diagnostics if d.code.startswith("OPS")] == [code]
