"""Dynamic shapes: torch.export style and torch.onnx style, named dims, other batch sizes in ORT."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnxsight


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _dims(program: onnxsight.ONNXProgram, index: int = 0) -> list:
    shape = program.model_proto.graph.input[index].type.tensor_type.shape
    return [d.dim_param or d.dim_value for d in shape.dim]


@pytest.mark.parametrize("style", ["dynamic_shapes", "dynamic_axes"])
def test_dynamic_batch_runs_at_other_sizes(style: str) -> None:
    model = MLP().eval()
    example = torch.randn(2, 8)
    if style == "dynamic_shapes":
        program = onnxsight.export(model, (example,), dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    else:
        program = onnxsight.export(model, (example,), dynamic_axes={"x": {0: "batch"}})
    assert _dims(program) == ["batch", 8]
    for batch in (1, 3, 7):
        x = torch.randn(batch, 8)
        torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)


def test_dynamic_axes_by_input_name_and_list_form() -> None:
    program = onnxsight.export(MLP(), (torch.randn(2, 8),), input_names=["features"],
                               dynamic_axes={"features": [0]})
    assert _dims(program) == ["features_dim_0", 8]
    assert program.model_proto.graph.input[0].name == "features"


def test_dynamic_axes_leave_a_tuple_argument_static_in_its_own_structure() -> None:
    """Upstream's test_symbolic_shape_inference_time: an LSTM given (input, (h0, c0)), axes on the input only."""
    lstm, h0, c0 = torch.nn.LSTM(5, 3), torch.randn(1, 2, 3), torch.randn(1, 2, 3)
    program = onnxsight.export(lstm, (torch.randn(11, 2, 5), (h0, c0)), input_names=["x", "y"],
                               dynamic_axes={"x": [0]})
    assert _dims(program) == ["x_dim_0", 2, 5]
    x = torch.randn(4, 2, 5)
    for got, want in zip(program(x, (h0, c0)), (lambda o: (o[0], *o[1]))(lstm(x, (h0, c0)))):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(onnxsight.ExportError) as info:  # the batch is h0's, which is static
        onnxsight.export(lstm, (torch.randn(11, 2, 5), (h0, c0)), input_names=["x", "y"], dynamic_axes={"x": [0, 1]})
    assert [d.code for d in info.value.diagnostics if d.level.value == "error"] == ["CAP005"]


@pytest.mark.parametrize("style", ["dynamic_shapes", "dynamic_axes"])
def test_specialised_dynamic_dim_is_a_cap005_at_the_model_line(style: str) -> None:
    class Fixed(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.reshape(2, 8)  # forces the batch to 2

    line = Fixed.forward.__code__.co_firstlineno + 1
    options = ({"dynamic_shapes": {"x": {0: torch.export.Dim("batch")}}} if style == "dynamic_shapes"
               else {"dynamic_axes": {"x": {0: "batch"}}})
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(Fixed(), (torch.randn(2, 8),), **options)
    errors = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert [d.code for d in errors] == ["CAP005"]
    assert (errors[0].location.file, errors[0].location.line) == (__file__, line)
    assert "input `x` axis 0" in errors[0].message and f"test_dynamic_shapes.py:{line}" in errors[0].message
    assert "fixes it to 2" in errors[0].message
    assert [(e["input"], e["axis"], e["status"], e["line"]) for e in info.value.record.facts["dynamic_dims"]] == [
        ("x", 0, "refused", line)]


def test_varargs_module_takes_one_nested_entry_per_bound_argument() -> None:
    class Varargs(torch.nn.Module):
        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return tensors[0] + tensors[1]

    batch = torch.export.Dim("batch")
    program = onnxsight.export(Varargs(), (torch.randn(2, 3), torch.randn(2, 3)),
                               dynamic_shapes=(({0: batch}, {0: batch}),))
    a, b = torch.randn(5, 3), torch.randn(5, 3)
    torch.testing.assert_close(program(a, b)[0], a + b)


def test_dynamic_shapes_structure_that_only_torch_export_checks_is_an_arg003() -> None:
    class Varargs(torch.nn.Module):
        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return tensors[0] + tensors[1]

    with pytest.raises(onnxsight.ExportError) as info:  # `*tensors` needs one nested entry, not a dict
        onnxsight.export(Varargs(), (torch.randn(2, 3), torch.randn(2, 3)),
                         dynamic_shapes=({0: torch.export.Dim("batch")},))
    errors = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert [d.code for d in errors] == ["ARG003"]
    assert "mismatch between the structure of `inputs` and `dynamic_shapes`" in errors[0].message


@pytest.mark.parametrize("style", ["dynamic_shapes", "dynamic_axes"])
def test_batch_one_example_keeps_the_batch_dynamic(style: str) -> None:
    model = MLP().eval()
    example = torch.randn(1, 8)
    options = ({"dynamic_shapes": {"x": {0: torch.export.Dim("batch")}}} if style == "dynamic_shapes"
               else {"dynamic_axes": {"x": {0: "batch"}}})
    program = onnxsight.export(model, (example,), **options)
    assert _dims(program) == ["batch", 8]
    assert [d.code for d in program.diagnostics if d.code.startswith("CAP")] == ["CAP009"]
    assert [(e["input"], e["axis"], e["status"]) for e in program.record.facts["dynamic_dims"]] == [("x", 0, "dynamic")]
    for batch in (1, 2, 5):
        x = torch.randn(batch, 8)
        torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("given", ["tuple", "list"])
def test_a_list_spec_for_a_tuple_argument_and_the_reverse_export(given: str) -> None:
    """The spec's list-or-tuple says nothing about the dims: it takes the argument's type (torch.export's ARG003)."""
    class Pair(torch.nn.Module):
        def forward(self, x: torch.Tensor, pair: Any) -> torch.Tensor:
            return x + pair[0] * pair[1]

    batch = torch.export.Dim("batch")
    pair = [torch.randn(2, 3), torch.randn(2, 3)]
    if given == "tuple":
        pair = tuple(pair)
    spec = [{0: batch}, {0: batch}] if given == "tuple" else ({0: batch}, {0: batch})
    program = onnxsight.export(Pair(), (torch.randn(2, 3), pair), dynamic_shapes={"x": {0: batch}, "pair": spec})
    assert [_dims(program, index)[0] for index in range(3)] == ["batch"] * 3
    assert not [d for d in program.diagnostics if d.code == "ARG003"]
    x, a, b = torch.randn(5, 3), torch.randn(5, 3), torch.randn(5, 3)
    torch.testing.assert_close(program(x, type(pair)([a, b]))[0], x + a * b)


def test_a_dict_that_leaves_out_an_argument_exports_it_static() -> None:
    """An argument the dict does not list has no dynamic axis, as dynamic_axes reads it (torch.export's ARG003).

    transformers' MptForCausalLM is called so by export_generation: ``use_cache=True`` is no tensor at all.
    """
    class Masked(torch.nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor, scale: torch.Tensor | None = None,
                    use_cache: bool = False) -> torch.Tensor:
            return x * mask + (scale if use_cache and scale is not None else 0)

    x, mask, scale = torch.randn(2, 3), torch.ones(3), torch.randn(2, 3)
    program = onnxsight.export(Masked(), (x, mask), kwargs={"scale": scale, "use_cache": True},
                               dynamic_shapes={"x": {0: torch.export.Dim("batch")}, "scale": {0: "batch"}})
    assert [_dims(program, index) for index in range(3)] == [["batch", 3], [3], ["batch", 3]]
    assert not [d for d in program.diagnostics if d.code == "ARG003"]
    x, scale = torch.randn(5, 3), torch.randn(5, 3)
    torch.testing.assert_close(program(x, mask, scale)[0], x * mask + scale)
