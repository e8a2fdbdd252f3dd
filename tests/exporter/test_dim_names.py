"""One torch symbol, one ONNX dim name, everywhere (issue 13).

torch.export gives two inputs that share ``Dim("batch")`` two symbols (``s97`` replaced by
``s52`` once it proves them equal); each must export as ``batch`` on the inputs, the outputs
and the value_info, and ``verify(dim_sizes={"batch": 7})`` must find it.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnxsight

BATCH = torch.export.Dim("batch", min=2, max=64)


class Pair(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (a + b).relu(), torch.cat([a, b], 0)


class DictInput(torch.nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return (inputs["a"] * 2).relu() + inputs["b"]


class ListInput(torch.nn.Module):
    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return (xs[0] - 1).relu() * xs[1]


class Doubled(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x], 0).relu() + y


class Auto(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.relu() @ y


def _shapes(program: onnxsight.ONNXProgram) -> dict[str, dict[str, list[Any]]]:
    graph = program.model_proto.graph

    def dims(values: Any) -> dict[str, list[Any]]:
        return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}
    return {"inputs": dims(graph.input), "outputs": dims(graph.output), "value_info": dims(graph.value_info)}


def _all_dims(program: onnxsight.ONNXProgram) -> set[Any]:
    return {d for part in _shapes(program).values() for shape in part.values() for d in shape}


def _pair(style: str) -> onnxsight.ONNXProgram:
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    if style == "dynamic_axes":
        return onnxsight.export(Pair(), (a, b), dynamic_axes={"a": {0: "batch"}, "b": {0: "batch"}})
    return onnxsight.export(Pair(), (a, b), dynamic_shapes=({0: BATCH}, {0: BATCH}))


@pytest.mark.parametrize("style", ["dynamic_shapes", "dynamic_axes"])
def test_two_inputs_sharing_a_dim_use_its_name_everywhere(style: str) -> None:
    program = _pair(style)
    shapes = _shapes(program)
    assert shapes["inputs"] == {"a": ["batch", 3], "b": ["batch", 3]}
    assert list(shapes["outputs"].values()) == [["batch", 3], ["2*batch", 3]]
    assert all(shape == ["batch", 3] for shape in shapes["value_info"].values()), shapes["value_info"]


@pytest.mark.parametrize("module,args,dynamic_shapes,expected", [
    (DictInput(), ({"a": torch.randn(4, 3), "b": torch.randn(4, 3)},), ({"a": {0: BATCH}, "b": {0: BATCH}},),
     {"inputs_a": ["batch", 3], "inputs_b": ["batch", 3]}),
    (ListInput(), ([torch.randn(4, 3), torch.randn(4, 3)],), ([{0: BATCH}, {0: BATCH}],),
     {"xs_0": ["batch", 3], "xs_1": ["batch", 3]}),
    (Doubled(), (torch.randn(4, 3), torch.randn(8, 3)), ({0: BATCH}, {0: 2 * BATCH}),
     {"x": ["batch", 3], "y": ["2*batch", 3]}),
    (Auto(), (torch.randn(4, 5), torch.randn(5, 6)), ({0: torch.export.Dim.AUTO}, {1: torch.export.Dim.AUTO}),
     {"x": ["x_dim_0", 5], "y": [5, "y_dim_1"]}),
], ids=["dict", "list", "derived", "auto"])
def test_nested_derived_and_auto_dims_are_named(module: torch.nn.Module, args: tuple, dynamic_shapes: Any,
                                                expected: dict[str, list[Any]]) -> None:
    program = onnxsight.export(module, args, dynamic_shapes=dynamic_shapes)
    assert _shapes(program)["inputs"] == expected
    generated = {d for d in _all_dims(program) if isinstance(d, str) and d[:1] == "s" and d[1:].isdigit()}
    assert not generated, f"torch's symbol names leaked into the model: {generated}"


def test_inputs_that_share_a_name_but_not_a_dim_get_two_names() -> None:
    class Separate(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return a.relu(), b.relu()

    program = onnxsight.export(Separate(), (torch.randn(4, 3), torch.randn(5, 3)),
                               dynamic_axes={"a": {0: "batch"}, "b": {0: "batch"}})
    names = [shape[0] for shape in _shapes(program)["inputs"].values()]
    assert names[0] == "batch" and names[1] != "batch" and names[1].startswith("batch"), names


@pytest.mark.parametrize("style", ["dynamic_shapes", "dynamic_axes"])
def test_verify_finds_the_shared_dim_by_name(style: str) -> None:
    result = onnxsight.verify(_pair(style), random_inputs=True, dim_sizes={"batch": 7})
    assert result.passed


def test_verify_finds_a_dict_inputs_dim_by_name() -> None:
    program = onnxsight.export(DictInput(), ({"a": torch.randn(4, 3), "b": torch.randn(4, 3)},),
                               dynamic_shapes=({"a": {0: BATCH}, "b": {0: BATCH}},))
    assert onnxsight.verify(program, random_inputs=True, dim_sizes={"batch": 7}).passed
