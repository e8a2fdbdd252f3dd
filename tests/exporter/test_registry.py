"""The translation Registry: explicit, opset-aware, no import side effects."""

from __future__ import annotations

import operator
import types

import pytest
import torch

import onnxsight
from onnxsight.exporter import Registry, default_registry, target_key, translation

aten = torch.ops.aten


@pytest.mark.parametrize("target, key", [
    (aten.add.Tensor, "aten::add.Tensor"),
    (aten.relu.default, "aten::relu.default"),
    (aten.relu, "aten::relu.default"),
    ("aten::relu", "aten::relu.default"),
    ("aten.add.Tensor", "aten::add.Tensor"),
    ("mylib::op", "mylib::op.default"),
    (torch.ops.higher_order.cond, "higher_order::cond"),
    (operator.mul, "_operator.mul"),
])
def test_target_keys(target, key) -> None:
    assert target_key(target) == key


def test_opset_variants_pick_the_newest_that_applies() -> None:
    @translation(aten.gelu.default, until=19)
    def old(b, x):  # noqa: ANN001
        return "old"

    @translation(aten.gelu.default, since=20)
    def new(b, x):  # noqa: ANN001
        return "new"

    module = types.ModuleType("fake_ops")
    old.__module__ = new.__module__ = "fake_ops"
    module.old, module.new = old, new
    registry = Registry()
    registry.add_module(module)
    assert registry.lookup(aten.gelu.default, 18).fn is old
    assert registry.lookup(aten.gelu.default, 20).fn is new
    assert registry.lookup(aten.gelu.default, 23).fn is new
    assert registry.min_opset(aten.gelu.default) == 1


def test_overlapping_variants_are_rejected() -> None:
    registry = Registry()
    registry.register(aten.relu.default, lambda b, x: x)
    with pytest.raises(ValueError, match="overlaps"):
        registry.register(aten.relu.default, lambda b, x: x, since=20)


def test_op_only_in_newer_opset_reports_ops003() -> None:
    registry = Registry()
    registry.add_module(__import__("onnxsight.exporter.ops.linalg", fromlist=["*"]))
    registry.register(aten.relu.default, lambda b, x: b.op("Relu", x), since=21)

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x)

    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.exporter.export(M(), (torch.randn(2),), registry=registry)
    assert "OPS003 operator aten.relu.default needs opset 21 or newer; the export targets opset 18" in str(info.value)
    program = onnxsight.exporter.export(M(), (torch.randn(2),), registry=registry, opset_version=21)
    assert [n.op_type for n in program.model_proto.graph.node] == ["Relu"]


def test_default_registry_is_a_new_object_each_time_and_custom_entries_do_not_leak() -> None:
    first, second = default_registry(), default_registry()
    assert first is not second
    first.register("mylib::thing", lambda b, x: x, custom=True)
    assert "mylib::thing" in first and "mylib::thing" not in second
    assert "mylib::thing" not in default_registry()


def test_translations_are_registered_only_by_building_a_registry() -> None:
    registry = Registry()
    assert aten.add.Tensor not in registry
    import onnxsight.exporter.ops.elementwise as elementwise  # importing registers nothing anywhere

    assert aten.add.Tensor not in registry
    registry.add_module(elementwise)
    assert aten.add.Tensor in registry
