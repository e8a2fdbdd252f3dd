"""One torch symbol, one ONNX dim name, everywhere (issue 13).

torch.export gives two inputs that share ``Dim("batch")`` two symbols (``s97`` replaced by
``s52`` once it proves them equal); each must export as ``batch`` on the inputs, the outputs
and the value_info, and ``verify(dim_sizes={"batch": 7})`` must find it.
"""

from __future__ import annotations

import warnings
from pathlib import Path
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


def test_unnamed_dims_follow_the_input_names_the_user_gave() -> None:
    """``input_names`` renames ``x`` to ``features``: its unnamed dim is ``features_dim_0``, not ``x_dim_0``."""
    from torch.export import Dim

    program = onnxsight.export(Auto(), (torch.randn(3, 4), torch.randn(4, 5)), input_names=["features", "weight"],
                               dynamic_shapes={"x": {0: Dim.DYNAMIC}, "y": {1: Dim.AUTO}})
    shapes = _shapes(program)
    assert shapes["inputs"] == {"features": ["features_dim_0", 4], "weight": [4, "weight_dim_1"]}
    assert list(shapes["outputs"].values()) == [["features_dim_0", "weight_dim_1"]]
    assert onnxsight.verify(program, random_inputs=True, dim_sizes={"features_dim_0": 6, "weight_dim_1": 2}).passed


@pytest.mark.parametrize("torch_form,readable", [
    ("TruncToInt(2.1*ToFloat((height//2)))", "floor(2.1*(height//2))"),
    ("TruncToInt(2.1*ToFloat((((height - 1)//2)) + 1))", "floor(2.1*(((height - 1)//2) + 1))"),
    ("TruncToInt(0.5*ToFloat(h + 1))", "floor(0.5*(h + 1))"),
    ("CeilToInt(ToFloat(a)/3)", "ceil(a/3)"),
    ("(((height - 1)//2)) + 1", "((height - 1)//2) + 1"),
    ("2*batch", "2*batch"), ("Max(1, h)", "Max(1, h)"),
])
def test_derived_dims_read_as_arithmetic(torch_form: str, readable: str) -> None:
    from onnxsight.exporter.inputs._dim_names import readable_dim

    assert readable_dim(torch_form) == readable


class SegNet(torch.nn.Module):
    """The README's example: a CNN with dynamic height/width, upsampled by 2.1 and back to the input's size."""

    def __init__(self) -> None:
        super().__init__()
        self.encode = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.head = torch.nn.Conv2d(16, 4, 1)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        features = torch.nn.functional.relu(self.encode(image))
        logits = self.head(torch.nn.functional.interpolate(features, scale_factor=2.1, mode="bilinear"))
        return torch.nn.functional.interpolate(logits, size=image.shape[-2:], mode="bilinear")


def test_cnn_with_dynamic_height_width_and_interpolation() -> None:
    height, width = torch.export.Dim("height", min=4, max=2048), torch.export.Dim("width", min=4, max=2048)
    model = SegNet().eval()
    program = onnxsight.export(model, (torch.randn(2, 3, 30, 44),),
                               dynamic_shapes={"image": {0: torch.export.Dim("batch", max=64), 2: height, 3: width}})
    shapes = _shapes(program)
    assert shapes["inputs"] == {"image": ["batch", 3, "height", "width"]}
    assert list(shapes["outputs"].values()) == [["batch", 4, "height", "width"]]
    assert shapes["value_info"]["conv2d"] == ["batch", 16, "((height - 1)//2) + 1", "((width - 1)//2) + 1"]
    assert shapes["value_info"]["upsample_bilinear2d"][2:] == ["floor(2.1*(((height - 1)//2) + 1))",
                                                               "floor(2.1*(((width - 1)//2) + 1))"]
    for shape in [(1, 3, 30, 30), (3, 3, 47, 61)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(program(x)[0], model(x), rtol=1e-4, atol=1e-4)
    assert onnxsight.verify(program, random_inputs=True, dim_sizes={"batch": 3, "height": 47, "width": 61}).passed


def test_a_caches_past_length_is_one_name_on_every_layer() -> None:
    # issue 33: torch.export left two layers' key lengths symbols of their own although all share Dim("past"),
    # and the graph said past_2, past_3; onnxscript's attention rule then fused the first layer's attention only
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)
    model = transformers.LlamaModel(config).eval()
    model.config.return_dict, model.config.use_cache = False, True
    cache = transformers.DynamicCache([(torch.randn(1, 2, 16, 16), torch.randn(1, 2, 16, 16)) for _ in range(4)])
    ids = torch.randint(0, 100, (1, 16))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = onnxsight.export(model, (), kwargs={"input_ids": ids, "cache": cache},
                                   dynamic_shapes={"input_ids": {0: "batch", 1: "seq"},
                                                   "cache": [{0: "batch", 2: "past"}] * 8})
    # naming the dims read torch's deprecated ShapeEnv.var_to_val, whose FutureWarning reached the user's console
    assert not [f"{w.filename}:{w.lineno}: {w.message}" for w in caught
                if Path(w.filename).is_relative_to(Path(onnxsight.__file__).parent)]
    shapes = _shapes(program)
    assert {tuple(s) for n, s in shapes["inputs"].items() if n.startswith("past_key_values")} == \
        {("batch", 2, "past", 16)}
    assert {tuple(s) for n, s in shapes["outputs"].items() if n.startswith("present")} == \
        {("batch", 2, "past + seq", 16)}
