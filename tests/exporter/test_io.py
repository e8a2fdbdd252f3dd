"""Inputs and outputs: nested structures, kwargs, baked Python values, dropped Nones."""

from __future__ import annotations

import torch

import onnxsight


class DictModel(torch.nn.Module):
    def forward(self, input_dict: dict, scale: float, *, offset: torch.Tensor) -> dict:
        out = input_dict["tensor_x"] * scale + input_dict["pair"][0] + offset
        return {"out": out, "aux": input_dict["pair"][1].relu()}


def _inputs():
    return ({"tensor_x": torch.randn(2, 3), "pair": (torch.randn(2, 3), torch.randn(4))}, 2.5), {"offset": torch.randn(3)}


def test_nested_inputs_get_readable_names_and_run() -> None:
    args, kwargs = _inputs()
    model = DictModel()
    program = onnxsight.export(model, args, kwargs=kwargs)
    assert program.input_names == ["input_dict_tensor_x", "input_dict_pair_0", "input_dict_pair_1", "offset"]
    expected = model(*args, **kwargs)
    out, aux = program(*args, **kwargs)
    torch.testing.assert_close(out, expected["out"])
    torch.testing.assert_close(aux, expected["aux"])


def test_baked_scalar_and_flattened_dict_are_reported() -> None:
    args, kwargs = _inputs()
    program = onnxsight.export(DictModel(), args, kwargs=kwargs)
    by_code = {d.code: d for d in program.diagnostics}
    assert by_code["VAL001"].message == \
        "input scale is a Python float (2.5) and was baked into the graph as a constant"
    assert by_code["VAL001"].level.value == "warning"
    assert "['out'] -> " in by_code["IO002"].message and "['aux'] -> " in by_code["IO002"].message


def test_unused_input_and_none_output_are_reported() -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, unused: torch.Tensor):
            return x.relu(), None

    program = onnxsight.export(M(), (torch.randn(2), torch.randn(2)))
    messages = {d.code: d.message for d in program.diagnostics}
    assert messages["IO001"] == "input unused is not used by the exported graph"
    assert messages["IO003"] == "output [1] is None and has no ONNX counterpart"
    assert len(program.model_proto.graph.output) == 1


def test_returning_an_input_or_the_same_value_twice_gives_distinct_outputs() -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor):
            y = x.relu()
            return x, y, y

    x = torch.randn(3)
    program = onnxsight.export(M(), (x,))
    names = [o.name for o in program.model_proto.graph.output]
    assert len(set(names)) == 3 and "x" not in names
    a, b, c = program(x)
    torch.testing.assert_close(a, x)
    torch.testing.assert_close(b, x.relu())
    torch.testing.assert_close(c, x.relu())


def test_more_output_names_than_outputs_are_an_error() -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor):
            return x.relu(), x + 1

    try:
        onnxsight.export(M(), (torch.randn(2),), output_names=["a", "b", "c"])
    except onnxsight.ExportError as error:
        assert "IO004" in str(error) and "output names ['a', 'b', 'c'] (3) do not match the 2 outputs" in str(error)
    else:
        raise AssertionError("expected an ExportError")


def test_fewer_names_name_the_first_values_as_torch_onnx_does() -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor):
            return x.relu(), x + y, y * 2

    x, y = torch.randn(2), torch.randn(2)
    program = onnxsight.export(M(), (x, y), input_names=["first"], output_names=["only_one"])
    graph = program.model_proto.graph
    assert graph.input[0].name == "first" and graph.input[1].name == "y"
    assert graph.output[0].name == "only_one" and len(graph.output) == 3
    notes = {d.message for d in program.diagnostics if d.rule.code == "ARG022"}
    assert notes == {f"input_names gives 1 names for the 2 inputs of the graph: the first 1 are named, the others "
                     f"keep their names (y)",
                     f"output_names gives 1 names for the 3 outputs of the graph: the first 1 are named, the "
                     f"others keep their names ({graph.output[1].name}, {graph.output[2].name})"}
    for got, want in zip(program(x, y), M()(x, y)):
        torch.testing.assert_close(got, want)
