"""dynamic_shapes="auto" with examples: the dims that vary become dynamic, named for the user, verified at each."""

from __future__ import annotations

import pytest
import torch

import onnxsight
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter import infer_dynamic_shapes


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x * mask.unsqueeze(-1)


class Pair(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a.sum(0), b.sum(0)


class Nested(torch.nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["x"] * inputs["gate"]


class Scaled(torch.nn.Module):
    def forward(self, x: torch.Tensor, alpha: float) -> torch.Tensor:
        return x * alpha


class Fixed(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(2, -1).sum(-1)


def _names(dynamic_shapes: dict) -> dict:
    """{(argument, axis or (key, axis)): dim name} of an inferred dynamic_shapes."""
    found = {}
    for arg, spec in dynamic_shapes.items():
        if isinstance(spec, dict) and all(isinstance(k, int) for k in spec):
            found.update({(arg, axis): dim.__name__ for axis, dim in spec.items()})
        elif isinstance(spec, dict):
            for key, inner in spec.items():
                found.update({(arg, key, axis): dim.__name__ for axis, dim in (inner or {}).items()})
    return found


@pytest.mark.parametrize("model, args, examples, expected", [
    # batch and sequence vary together on both inputs: one shared Dim each; the feature axis stays static
    (Scale(), (torch.randn(2, 5, 4), torch.ones(2, 5)), [(torch.randn(3, 7, 4), torch.ones(3, 7))],
     {("x", 0): "batch", ("x", 1): "x_dim1", ("mask", 0): "batch", ("mask", 1): "x_dim1"}),
    # axis 0 varies differently on the two inputs: two Dims, named after their arguments
    (Pair(), (torch.randn(2, 3), torch.randn(2, 3)), [(torch.randn(3, 3), torch.randn(4, 3))],
     {("a", 0): "a_dim0", ("b", 0): "b_dim0"}),
    # only the second input's axis 1 varies
    (Pair(), (torch.randn(2, 3), torch.randn(2, 3)), [(torch.randn(2, 3), torch.randn(2, 5))],
     {("b", 1): "b_dim1"}),
    # a dict input: every tensor in it carries the batch
    (Nested(), ({"x": torch.randn(2, 6), "gate": torch.rand(2, 6)},),
     [({"x": torch.randn(5, 6), "gate": torch.rand(5, 6)},)], {("inputs", "x", 0): "batch", ("inputs", "gate", 0): "batch"}),
])
def test_inferred_dims_are_named_for_the_user(model, args, examples, expected):
    ctx = DiagnosticContext()
    shapes = infer_dynamic_shapes(ctx, model, args, {}, [(e, {}) for e in examples])
    assert not ctx.errors
    assert _names(shapes) == expected


def test_nothing_varies_means_a_static_export():
    x = torch.randn(2, 3)
    assert infer_dynamic_shapes(DiagnosticContext(), Pair(), (x, x), {}, [((x, x), {})]) is None


def test_export_auto_verifies_at_every_example_and_names_the_onnx_dims():
    prog = onnxsight.export(Scale(), (torch.randn(2, 5, 4), torch.ones(2, 5)), dynamic_shapes="auto",
                            examples=[(torch.randn(3, 7, 4), torch.ones(3, 7)), (torch.randn(1, 2, 4), torch.ones(1, 2))])
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in prog.model_proto.graph.input]
    assert dims == [["batch", "x_dim1", 4], ["batch", "x_dim1"]]
    assert prog.verification.passed
    assert [r.passed for r in prog.example_verifications] == [True, True]
    assert [r.sizes_checked[0] for r in prog.example_verifications] == [{"batch": 3, "x_dim1": 7},
                                                                        {"batch": 1, "x_dim1": 2}]
    assert {d["dim"]: d["status"] for d in prog.record.facts["dynamic_dims"]} == {"batch": "dynamic",
                                                                                  "x_dim1": "dynamic"}


def test_kwargs_examples_are_args_kwargs_pairs():
    prog = onnxsight.export(Scale(), (torch.randn(2, 5, 4),), kwargs={"mask": torch.ones(2, 5)},
                            dynamic_shapes="auto", examples=[((torch.randn(4, 5, 4),), {"mask": torch.ones(4, 5)})])
    assert [r.passed for r in prog.example_verifications] == [True]
    assert prog.model_proto.graph.input[1].type.tensor_type.shape.dim[0].dim_param == "batch"


@pytest.mark.parametrize("model, args, kwargs, examples, message", [
    (Scale(), (torch.randn(2, 5, 4), torch.ones(2, 5)), {"dynamic_shapes": "auto"}, None, "needs examples"),
    (Scale(), (torch.randn(2, 5, 4), torch.ones(2, 5)), {"dynamic_shapes": "auto"},
     [(torch.randn(3, 5), torch.ones(3, 5))], "argument x: rank 3"),
    (Scale(), (torch.randn(2, 5, 4), torch.ones(2, 5)), {"dynamic_shapes": "auto"},
     [(torch.randn(3, 5, 4), torch.ones(3, 5, dtype=torch.long))], "argument mask: rank 2 torch.float32"),
    (Scaled(), (torch.randn(2, 3), 0.5), {"dynamic_shapes": "auto"}, [(torch.randn(3, 3), 0.7)],
     "argument alpha: 0.5 in the export's args but 0.7 in example 1"),
    (Nested(), ({"x": torch.randn(2, 6), "gate": torch.rand(2, 6)},), {"dynamic_shapes": "auto"},
     [({"x": torch.randn(5, 6)},)], "argument inputs of example 1 is nested differently"),
    (Scale(), (torch.randn(2, 5, 4), torch.ones(2, 5)),
     {"dynamic_shapes": "auto", "dynamic_axes": {"x": {0: "batch"}}}, [(torch.randn(3, 5, 4), torch.ones(3, 5))],
     "give it or dynamic_axes, not both"),
    (Scale(), (torch.randn(2, 5, 4), torch.ones(2, 5)), {"dynamic_shapes": "dynamic"}, None,
     "the only string accepted is 'auto'"),
])
def test_examples_that_cannot_be_compared_are_arg003(model, args, kwargs, examples, message):
    with pytest.raises(onnxsight.InvalidArgumentError) as info:
        onnxsight.export(model, args, examples=examples, **kwargs)
    assert [d.rule.code for d in info.value.diagnostics] == ["ARG003"]
    assert message in info.value.diagnostics[0].message


def test_an_example_the_program_cannot_take_names_the_input():
    # exported static (no auto): the example at another size is refused with VER003, not a traceback
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(Fixed(), (torch.randn(2, 4),), examples=[(torch.randn(3, 4),)])
    assert "example 1 does not run on the exported program" in str(info.value)
    assert "VER003" in [d.rule.code for d in info.value.diagnostics]


def test_report_lists_the_inferred_dims(tmp_path):
    prog = onnxsight.export(Scale(), (torch.randn(2, 5, 4), torch.ones(2, 5)), dynamic_shapes="auto",
                            examples=[(torch.randn(3, 5, 4), torch.ones(3, 5))], report=True, artifacts_dir=tmp_path)
    assert prog.verification.passed
    text = next(tmp_path.glob("*_report.md")).read_text()
    section = text.split("## Dynamic dims", 1)[1].split("\n## ", 1)[0]
    assert "| x | 0 | `batch` | kept dynamic |" in section and "| mask | 0 | `batch` | kept dynamic |" in section
    assert "x_dim1" not in section  # the sequence did not vary between the examples: it stays static


class Heads(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y.add_(1)  # an in-place op: the decomposition re-traces the captured program
        return y.view(x.shape[0], -1, 2, 4).transpose(1, 2).reshape(-1, 8)


@pytest.mark.parametrize("example, other", [(1, 2), (1, 3), (2, 5)])
def test_a_size_one_example_stays_dynamic_through_the_decomposition(example, other):
    # the batch-1 example is captured size-oblivious (CAP009); the decomposition's re-trace must not
    # specialise it back to 1 inside the graph (a view's -1 solved for batch 1: wrong at any other batch)
    prog = onnxsight.export(Heads(), (torch.randn(example, 3, 8),),
                            dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    x = torch.randn(other, 3, 8)
    torch.testing.assert_close(prog(x)[0], Heads()(x))
