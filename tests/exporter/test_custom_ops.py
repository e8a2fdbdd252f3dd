"""custom_translations for torch.library custom ops and for standard ATen ops."""

from __future__ import annotations

import pytest
import torch

import onnxsight
from onnxsight.exporter import GraphBuilder, Value


@torch.library.custom_op("onnxsight_test::scale_add", mutates_args=())
def scale_add(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s + 1


@scale_add.register_fake
def _(x: torch.Tensor, s: float) -> torch.Tensor:
    return torch.empty_like(x)


class UsesCustomOp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.onnxsight_test.scale_add(self.fc(x), 2.0)


def scale_add_standard(b: GraphBuilder, x: Value, s: float) -> Value:
    return b.op("Add", b.op("Mul", x, b.scalar(s, x)), b.scalar(1.0, x))


def scale_add_custom_domain(b: GraphBuilder, x: Value, s: float) -> Value:
    return b.op("ScaleAdd", x, domain="com.example", domain_version=2, scale=float(s))


def test_missing_translation_names_the_op_and_the_fix() -> None:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(UsesCustomOp(), (torch.randn(2, 4),))
    text = str(info.value)
    assert "OPS001 custom operator onnxsight_test.scale_add.default has no ONNX translation (1 call)" in text
    diagnostic = info.value.diagnostics[-1]
    assert diagnostic.rule.fix.startswith("Pass custom_translations")
    assert diagnostic.location.file == __file__


class CallsItThrice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.onnxsight_test.scale_add(x, 2.0)
        y = torch.ops.onnxsight_test.scale_add(y, 3.0)
        return torch.ops.onnxsight_test.scale_add(y, 4.0)


def test_missing_translation_reported_once_per_op_with_its_calls() -> None:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(CallsItThrice(), (torch.randn(2, 4),))
    found = [d for d in info.value.diagnostics if d.code == "OPS001"]
    assert len(found) == 1 and found[0].message.endswith("(3 calls)"), [d.message for d in found]
    first = CallsItThrice.forward.__code__.co_firstlineno + 1
    assert found[0].location.line == first
    assert [loc.line for loc in found[0].related] == [first + 1, first + 2]


@pytest.mark.parametrize("key", ["onnxsight_test::scale_add", "onnxsight_test::scale_add.default",
                                 torch.ops.onnxsight_test.scale_add.default,
                                 torch.ops.onnxsight_test.scale_add])
def test_custom_translation_by_any_key_with_dynamic_batch(key) -> None:
    model = UsesCustomOp().eval()
    program = onnxsight.export(model, (torch.randn(2, 4),), custom_translations={key: scale_add_standard},
                               dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    for batch in (1, 5):
        x = torch.randn(batch, 4)
        torch.testing.assert_close(program(x)[0], model(x))


def test_custom_domain_is_imported_with_its_version() -> None:
    program = onnxsight.export(UsesCustomOp(), (torch.randn(2, 4),),
                               custom_translations={"onnxsight_test::scale_add": scale_add_custom_domain})
    opsets = {o.domain: o.version for o in program.model_proto.opset_import}
    assert opsets == {"": 18, "com.example": 2}
    node = next(n for n in program.model_proto.graph.node if n.op_type == "ScaleAdd")
    assert node.domain == "com.example"


def test_custom_translation_overrides_a_standard_op_and_keeps_it_from_decomposing() -> None:
    calls: list[str] = []

    def my_gelu(b: GraphBuilder, x: Value, approximate: str = "none") -> Value:
        calls.append(approximate)
        return b.op("Mul", x, b.op("Sigmoid", b.op("Mul", x, b.scalar(1.702, x))))

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.gelu(x)

    x = torch.randn(8)
    program = onnxsight.export(M(), (x,), custom_translations={torch.ops.aten.gelu.default: my_gelu})
    assert calls == ["none"]
    torch.testing.assert_close(program(x)[0], x * torch.sigmoid(1.702 * x))


def test_non_callable_translation_is_an_argument_error() -> None:
    with pytest.raises(onnxsight.ExportError, match="ARG005"):
        onnxsight.export(UsesCustomOp(), (torch.randn(2, 4),), custom_translations={"onnxsight_test::scale_add": 3})
