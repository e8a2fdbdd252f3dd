"""A migrating user's calls, as torch.onnx documents them, after the one-word change (issue 25).

The export call's inputs (a trailing dict of keyword arguments, ``ShapesCollection``/``AdditionalInputs``
as ``dynamic_shapes``) and what users call on the returned program (``optimize()``, ``call_reference``,
``release()``, ...): each works as in torch.onnx, checked against eager PyTorch, or is refused with a
rule naming the method and onnxsight's way (ARG020).
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import onnxsight


class Masked(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = self.fc(x)
        return y if mask is None else y * mask


X, MASK = torch.randn(2, 4), torch.rand(2, 3)


def _model() -> Masked:
    torch.manual_seed(0)
    return Masked().eval()


# --- the export call --------------------------------------------------------------------------------------------

def test_a_trailing_dict_in_args_is_keyword_arguments_as_torch_onnx_reads_it() -> None:
    model = _model()
    # torch.onnx.export(model, (x, {"mask": mask})): the last dict holds forward()'s keyword arguments
    program = onnxsight.export(model, (X, {"mask": MASK}), verify=True)
    assert program.verification.passed
    assert [v.name for v in program.model_proto.graph.input] == ["x", "mask"]
    (out,) = program(X, mask=MASK)
    torch.testing.assert_close(out, model(X, mask=MASK))


def test_a_dict_argument_stays_positional_when_its_keys_are_not_keyword_arguments() -> None:
    class Gate(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: dict[str, torch.Tensor]) -> torch.Tensor:
            return a + b["x"] * b["y"]

    a, b = torch.randn(2, 3), {"x": torch.randn(2, 3), "y": torch.randn(2, 3)}
    program = onnxsight.export(Gate(), (a, b), verify=True)
    assert program.verification.passed and len(program.model_proto.graph.input) == 3


@pytest.mark.parametrize("collection", ["shapes", "additional-inputs"])
def test_shapes_collection_and_additional_inputs_as_dynamic_shapes(collection: str) -> None:
    model = _model()
    if collection == "shapes":
        spec = torch.export.ShapesCollection()
        spec[X] = {0: Dim("batch")}
    else:
        spec = torch.export.AdditionalInputs()
        spec.add((torch.randn(5, 4),))
    program = onnxsight.export(model, (X,), dynamic_shapes=spec, verify=True)
    assert program.verification.passed
    dim = program.model_proto.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param and not dim.dim_value
    other = torch.randn(7, 4)
    (out,) = program(other)
    torch.testing.assert_close(out, model(other))


# --- the program's methods --------------------------------------------------------------------------------------

def test_optimize_as_the_torch_onnx_tutorial_calls_it() -> None:
    model = _model()
    program = onnxsight.export(model, (X,))
    before = program.model_proto.SerializeToString()
    assert program.optimize() is None                     # export already ran the optimize stage: same model
    assert program.model_proto.SerializeToString() == before
    (out,) = program(X)
    torch.testing.assert_close(out, model(X))


def test_optimize_runs_the_stage_export_skipped() -> None:
    class Chain(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x.reshape(2, 4).reshape(8).reshape(2, 4) + 1).clone()

    model, x = Chain(), torch.randn(8)
    program = onnxsight.export(model, (x,), optimize=False)
    (before,) = program(x)
    nodes = len(program.model_proto.graph.node)
    program.optimize()
    assert len(program.model_proto.graph.node) < nodes
    assert [s.status for s in program.record.stages if s.name == "optimize"] == ["ok"]
    (after,) = program(x)
    torch.testing.assert_close(before, model(x))
    torch.testing.assert_close(after, model(x))


def test_call_reference_runs_onnx_reference_evaluator() -> None:
    model = _model()
    program = onnxsight.export(model, (X,), kwargs={"mask": MASK})
    outputs = program.call_reference(X, mask=MASK)
    assert isinstance(outputs, tuple) and len(outputs) == 1
    torch.testing.assert_close(outputs[0], model(X, mask=MASK))


def test_call_reference_runs_what_onnxruntime_cannot() -> None:
    class Float4(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.arange(256, dtype=torch.uint8).reshape(4, 64).view(torch.float4_e2m1fn_x2))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x + self.w.view(torch.uint8), (self.w.view(torch.uint8) ^ 0x88).view(torch.float4_e2m1fn_x2)

    model, x = Float4(), torch.randn(4, 64)
    total, flipped = onnxsight.export(model, (x,)).call_reference(x)
    expected = model(x)
    torch.testing.assert_close(total, expected[0], rtol=0, atol=0)
    assert flipped.dtype is torch.float4_e2m1fn_x2 and flipped.shape == (4, 64)
    assert torch.equal(flipped.view(torch.uint8), expected[1].view(torch.uint8))


def test_release_and_initialize_inference_session() -> None:
    model = _model()
    program = onnxsight.export(model, (X,))
    program.initialize_inference_session()
    (out,) = program(X)
    program.release()
    (again,) = program(X)                                  # a new session, as in torch.onnx
    torch.testing.assert_close(out, model(X))
    torch.testing.assert_close(again, out)


@pytest.mark.parametrize("use, words", [
    (lambda p: p.model, ["ONNXProgram.model", "prog.model_proto"]),
    (lambda p: p.apply_weights({"fc.weight": torch.zeros(3, 4)}), ["ONNXProgram.apply_weights", "weights="]),
    (lambda p: p.rename_axes({"s0": "batch"}), ["ONNXProgram.rename_axes", "dynamic_shapes"]),
    (lambda p: p.compute_values(["linear"], (X,)), ["ONNXProgram.compute_values", "onnxsight.verify"]),
    (lambda p: p.initialize_inference_session(lambda model: None), ["initialize_inference_session(initializer)",
                                                                   "providers"]),
], ids=["model", "apply_weights", "rename_axes", "compute_values", "session-initializer"])
def test_torch_onnx_only_program_api_is_refused_naming_onnxsights_way(use, words: list[str]) -> None:
    program = onnxsight.export(_model(), (X,))
    with pytest.raises(AttributeError) as info:
        use(program)
    message = str(info.value)
    assert message.startswith("ARG020 ")
    for word in words:
        assert word in message, message
    assert not hasattr(program, "model")                   # hasattr stays a plain False


def test_save_keep_initializers_as_inputs_is_refused(tmp_path) -> None:
    program = onnxsight.export(_model(), (X,))
    with pytest.raises(TypeError) as info:
        program.save(tmp_path / "m.onnx", keep_initializers_as_inputs=True)
    assert str(info.value).startswith("ARG020 ") and "keep_initializers_as_inputs" in str(info.value)
    assert not (tmp_path / "m.onnx").exists()
    program.save(tmp_path / "m.onnx", keep_initializers_as_inputs=False)   # torch.onnx's default: the same file
    assert (tmp_path / "m.onnx").exists()


# --- a model left in training mode ------------------------------------------------------------------------------

class Regularised(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.norm = torch.nn.BatchNorm1d(4)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.norm(self.fc(x)))


def test_a_model_in_training_mode_is_exported_as_eval_and_says_so() -> None:
    """torch.onnx exports the training graph of a model left in train(), with a warning; onnxsight its
    inference behaviour (verified against eval()), and says which modules it concerns (CAP015)."""
    model, x = Regularised(), torch.randn(8, 4)
    program = onnxsight.export(model, (x,), verify=True)
    assert program.verification.passed and model.training            # the model's mode is left alone
    (warning,) = [d for d in program.diagnostics if d.code == "CAP015"]
    assert warning.level.value == "warning"
    assert "norm (BatchNorm1d)" in warning.message and "drop (Dropout)" in warning.message
    assert "fc" not in warning.message.split("training mode")[1]
    (out,) = program(x)
    torch.testing.assert_close(out, model.eval()(x))


def test_no_word_for_a_training_model_whose_modules_do_not_depend_on_the_mode() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())     # train() changes nothing here
    program = onnxsight.export(model, (X,))
    assert not [d for d in program.diagnostics if d.code == "CAP015"]
    assert not [d for d in onnxsight.export(Regularised().eval(), (X,)).diagnostics if d.code == "CAP015"]
