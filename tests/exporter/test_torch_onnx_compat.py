"""Calls written for torch.onnx.export, made with onnxsight.export (issue 25): the same call, the same model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import onnxsight
from onnxsight.exporter import ExportError


SEEN: list[bool] = []  # what forward() saw, each time it ran (a module attribute would be traced away)


class ExportFriendly(torch.nn.Module):
    """Takes another path while an ONNX exporter runs: torch.onnx.is_in_onnx_export()'s documented use."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SEEN.append(torch.onnx.is_in_onnx_export())
        if torch.onnx.is_in_onnx_export():
            return x.sin()
        return x.cos()


def test_is_in_onnx_export_is_true_while_exporting_and_false_after() -> None:
    model, x = ExportFriendly(), torch.randn(2, 3)
    SEEN.clear()
    program = onnxsight.export(model, (x,))
    assert SEEN and all(SEEN)  # capture ran forward() with the flag set
    assert torch.onnx.is_in_onnx_export() is False
    assert [n.op_type for n in program.model_proto.graph.node] == ["Sin"]
    (out,) = program(x)
    torch.testing.assert_close(out, x.sin())


def test_is_in_onnx_export_is_false_after_a_failed_export() -> None:
    class Fails(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if torch.onnx.is_in_onnx_export():
                raise NotImplementedError("no export path yet")  # both strategies fail: strict sees True too
            return x

    with pytest.raises(ExportError):
        onnxsight.export(Fails(), (torch.randn(2, 3),))
    assert torch.onnx.is_in_onnx_export() is False
    with pytest.raises(ExportError):
        onnxsight.export(ExportFriendly(), (torch.randn(2, 3),), dynamic_shapes={"x": {5: "batch"}})
    assert torch.onnx.is_in_onnx_export() is False


def test_is_in_onnx_export_keeps_an_enclosing_exporters_flag() -> None:
    from torch.onnx._internal.exporter import _flags

    _flags._is_onnx_exporting = True
    try:
        onnxsight.export(ExportFriendly(), (torch.randn(2, 3),))
        assert torch.onnx.is_in_onnx_export() is True
    finally:
        _flags._is_onnx_exporting = False


# --- dimension names as strings in dynamic_shapes ------------------------------------------------------------

class AddMatmul(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x + y) @ y.transpose(-1, -2)


def _dims(program: onnxsight.ONNXProgram) -> dict[str, list[object]]:
    return {value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
            for value in program.model_proto.graph.input}


def _check_at(program: onnxsight.ONNXProgram, model: torch.nn.Module, *inputs: torch.Tensor) -> None:
    (out,) = program(*inputs)
    torch.testing.assert_close(out, model(*inputs), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("spec", [
    {"x": {0: "batch", 1: "sequence"}, "y": {0: "batch", 1: "sequence"}},
    {"x": ("batch", "sequence", None), "y": ["batch", "sequence", None]},
    ({0: "batch", 1: "sequence"}, ("batch", "sequence", None)),
], ids=["dicts", "tuples-per-dim", "tuple-of-inputs"])
def test_dim_names_as_strings_name_the_graphs_dims(spec: object) -> None:
    model, x, y = AddMatmul(), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    program = onnxsight.export(model, (x, y), dynamic_shapes=spec, verify=True)
    assert program.verification.passed
    assert _dims(program) == {"x": ["batch", "sequence", 4], "y": ["batch", "sequence", 4]}
    _check_at(program, model, x, y)
    _check_at(program, model, torch.randn(3, 7, 4), torch.randn(3, 7, 4))  # one name: one size


def test_a_dim_name_that_is_not_an_identifier_is_kept_as_written() -> None:
    model, x, y = AddMatmul(), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    program = onnxsight.export(model, (x, y), dynamic_shapes={"x": {0: "batch size"}, "y": {0: "batch size"}})
    assert _dims(program) == {"x": ["batch size", 5, 4], "y": ["batch size", 5, 4]}
    _check_at(program, model, torch.randn(6, 5, 4), torch.randn(6, 5, 4))


def test_dim_names_mix_with_dims_auto_and_ints() -> None:
    from torch.export import Dim

    model, x, y = AddMatmul(), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    program = onnxsight.export(model, (x, y), dynamic_shapes={"x": {0: "batch", 1: Dim.AUTO, 2: 4},
                                                             "y": (Dim("batch"), Dim("sequence"), None)})
    dims = _dims(program)
    assert dims["x"][0] == dims["y"][0] == "batch"
    assert dims["x"][1] == dims["y"][1] == "sequence"  # AUTO found equal to y's named dim
    _check_at(program, model, torch.randn(3, 8, 4), torch.randn(3, 8, 4))


def test_dim_names_on_nested_inputs() -> None:
    class Nested(torch.nn.Module):
        def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
            return inputs["ids"].float() * inputs["mask"]

    model = Nested()
    inputs = {"ids": torch.randint(0, 9, (2, 6)), "mask": torch.ones(2, 6)}
    program = onnxsight.export(model, (inputs,), dynamic_shapes={"inputs": {"ids": {0: "batch", 1: "sequence"},
                                                                            "mask": ("batch", "sequence")}})
    assert sorted(map(tuple, _dims(program).values())) == [("batch", "sequence")] * 2
    other = {"ids": torch.randint(0, 9, (3, 9)), "mask": torch.rand(3, 9)}
    (out,) = program(other)
    torch.testing.assert_close(out, model(other))


class Concat(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.cat((x, y), 1) + z


@pytest.mark.parametrize("spec", [
    ({0: "batch", 1: "sequence"},) * 3,
    {"x": ("batch", "sequence"), "y": ["batch", "sequence"], "z": {0: "batch", 1: "sequence"}},
], ids=["tuple-of-inputs", "dict-of-inputs"])
def test_one_name_on_axes_of_different_sizes_is_a_dim_per_size(spec: object) -> None:
    """PyTorch's test_export_successful_when_dynamic_dimension_is_one: 'sequence' names axes of 3, 5 and 8:
    they cannot be one dim (ARG023 says which is which), and the export keeps each dynamic."""
    model = Concat()
    program = onnxsight.export(model, (torch.randn(1, 3), torch.randn(1, 5), torch.randn(1, 8)), dynamic_shapes=spec)
    (warning,) = [d for d in program.diagnostics if d.rule.code == "ARG023"]
    assert warning.message == ("dim name 'sequence' is given to axes of different sizes in the example (x axis 1: 3, "
                               "y axis 1: 5, z axis 1: 8); one dim has one size, so each size is a dim of its own: "
                               "'sequence' (x axis 1), 'sequence_2' (y axis 1), 'sequence_3' (z axis 1)")
    dims = _dims(program)
    assert dims["x"] == ["batch", "sequence"] and dims["y"] == ["batch", "sequence_2"]
    assert dims["z"][0] == "batch"   # z's axis is found to be the other two's sum
    _check_at(program, model, torch.randn(4, 2), torch.randn(4, 6), torch.randn(4, 8))


def test_one_name_on_axes_of_the_same_size_stays_one_dim() -> None:
    model = Concat()
    program = onnxsight.export(model, (torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 6)),
                               dynamic_shapes=({1: "half"}, {1: "half"}, {1: "whole"}))
    assert not [d for d in program.diagnostics if d.rule.code == "ARG023"]
    assert _dims(program)["x"][1] == _dims(program)["y"][1] == "half"


def test_an_invalid_dynamic_shapes_entry_is_one_arg003_without_capture_warnings() -> None:
    with pytest.raises(ExportError) as info:
        onnxsight.export(AddMatmul(), (torch.randn(2, 5, 4), torch.randn(2, 5, 4)),
                         dynamic_shapes={"x": {0: 2.5}, "y": None})
    codes = [d.code for d in info.value.diagnostics]
    assert codes == ["ARG003"], codes


# --- torch.onnx.export's other keyword arguments -------------------------------------------------------------

class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.fc(x)))


def test_torch_onnx_keywords_that_mean_the_same_are_accepted(tmp_path) -> None:
    model, x = Small().eval(), torch.randn(2, 4)
    program = onnxsight.export(model, (x,), str(tmp_path / "m.onnx"), dynamo=True, optimize=True,
                               export_params=True, do_constant_folding=True, keep_initializers_as_inputs=False,
                               training=torch.onnx.TrainingMode.EVAL, fallback=False, autograd_inlining=True,
                               operator_export_type=torch.onnx.OperatorExportTypes.ONNX, custom_opsets=None,
                               custom_translation_table=None, profile=False, dump_exported_program=False,
                               input_names=["x"], output_names=["y"], verify=True)
    assert program.verification.passed
    (out,) = program(x)
    torch.testing.assert_close(out, model(x))
    notes = {d.fields["argument"]: d.message for d in program.diagnostics if d.code == "ARG019"}
    assert sorted(notes) == ["autograd_inlining", "do_constant_folding", "dynamo", "fallback"]  # optimize=: ours
    assert "always captures with torch.export" in notes["dynamo"]
    assert all(d.level.value == "note" for d in program.diagnostics if d.code == "ARG019")


@pytest.mark.parametrize(("argument", "value", "instead"), [
    ("dynamo", False, "drop dynamo=False"),
    ("fallback", True, "drop fallback=True"),
    ("export_params", False, "external_data=True"),
    ("keep_initializers_as_inputs", True, "argument of forward()"),
    ("operator_export_type", torch.onnx.OperatorExportTypes.ONNX_ATEN_FALLBACK, "custom_translations="),
    ("custom_opsets", {"mydomain": 2}, "custom_translations="),
    ("profile", True, "report=True"),
    ("dump_exported_program", True, "torch.export.save(program.exported_program"),
])
def test_torch_onnx_keywords_onnxsight_cannot_honour_are_refused_by_name(argument: str, value: object,
                                                                          instead: str) -> None:
    with pytest.raises(onnxsight.exporter.InvalidArgumentError) as info:
        onnxsight.export(Small().eval(), (torch.randn(2, 4),), **{argument: value})
    (diagnostic,) = info.value.diagnostics
    assert diagnostic.code == "ARG018"
    assert f"{argument}=" in diagnostic.message and instead in diagnostic.message


def test_training_eval_of_a_model_in_training_mode_exports_eval_semantics_and_keeps_the_mode() -> None:
    torch.manual_seed(0)
    model, x = DropoutNet().train(), torch.randn(2, 4)
    program = onnxsight.export(model, (x,), training=torch.onnx.TrainingMode.EVAL)
    assert model.training and model.drop.training
    (out,) = program(x)
    torch.testing.assert_close(out, model.eval()(x))


def _ort_run(program: onnxsight.ONNXProgram, x: torch.Tensor, tmp_path: Any) -> np.ndarray:
    import onnxruntime as ort

    program.save(tmp_path / "m.onnx")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


def test_dropout_training_exports_a_dropout_that_draws(tmp_path: Any) -> None:
    """Upstream's test_dropout_training, as written: a model in training mode, training=TRAINING."""

    class MyModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dropout = torch.nn.Dropout(0.4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.dropout(x)

    model, x = MyModule(), torch.randn(10)
    model.train()
    program = onnxsight.export(model, (x,), training=torch.onnx.TrainingMode.TRAINING)
    assert not torch.all(torch.eq(x, torch.from_numpy(_ort_run(program, x, tmp_path))))
    assert "RandomUniformLike" in [n.op_type for n in program.model_proto.graph.node]
    assert model.training and model.dropout.training
    assert not [d for d in program.diagnostics if d.code == "CAP015"]   # the training graph is what was asked


def test_dropout_training_zero_drops_as_many_as_pytorch(tmp_path: Any) -> None:
    """Upstream's test_dropout_training_zero: the share of zeros in ONNX Runtime's output is PyTorch's."""
    model = torch.nn.Sequential(torch.nn.Dropout(0.5)).train()
    torch.manual_seed(0)
    x = torch.randn(10, 3, 128, 128)
    x = torch.where(x == 0, torch.ones_like(x), x)
    program = onnxsight.export(model, (x,), training=torch.onnx.TrainingMode.TRAINING)
    ratio_ort = float((_ort_run(program, x, tmp_path) != 0).mean())
    ratio_pytorch = float((model(x) != 0).float().mean())
    np.testing.assert_allclose(ratio_pytorch, ratio_ort, rtol=0.01, atol=0.01)


def test_training_mode_training_of_an_eval_model_draws_and_leaves_it_in_eval(tmp_path: Any) -> None:
    model, x = DropoutNet().eval(), torch.randn(64, 4)
    program = onnxsight.export(model, (x,), training=torch.onnx.TrainingMode.TRAINING)
    out = _ort_run(program, x, tmp_path)
    assert (out == 0).any() and not model.training and not model.drop.training
    kept = out != 0   # the kept elements are PyTorch's linear layer scaled by 1 / (1 - p)
    np.testing.assert_allclose(out[kept], (model(x) * 2).detach().numpy()[kept], rtol=1e-5, atol=1e-6)


def test_a_dropout_inside_the_graph_still_draws_in_onnx_runtimes_default_session(tmp_path: Any) -> None:
    """ONNX Runtime's inference builds remove every Dropout node whose output is not a graph output
    (EliminateDropout), training mode or not: a training-mode Dropout there would silently not draw."""
    import onnxruntime as ort

    layer = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.3,
                                             batch_first=True).train()
    x = torch.randn(2, 5, 8)
    program = onnxsight.export(layer, (x,), training=torch.onnx.TrainingMode.TRAINING)
    assert layer.training and layer.self_attn.training and layer.dropout1.training
    program.save(tmp_path / "m.onnx")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    first, second = (session.run(None, {session.get_inputs()[0].name: x.numpy()})[0] for _ in range(2))
    assert np.abs(first - second).max() > 0   # two runs draw differently
    eval_out = program.model_proto   # and the attention's own dropout draws too (MultiheadAttention's dropout_p)
    assert sum(n.op_type == "RandomUniformLike" for n in eval_out.graph.node) == 4


def test_training_preserve_of_an_eval_model_draws_in_the_one_dropout_left_training(tmp_path: Any) -> None:
    model, x = DropoutNet().eval(), torch.randn(64, 4)
    model.drop.train()
    program = onnxsight.export(model, (x,), training=torch.onnx.TrainingMode.PRESERVE)
    assert (_ort_run(program, x, tmp_path) == 0).any()
    assert not model.training and model.drop.training


def test_training_preserve_draws_in_the_dropout_the_user_left_training(tmp_path: Any) -> None:
    model, x = DropoutNet().train(), torch.randn(64, 4)
    program = onnxsight.export(model, (x,), training=torch.onnx.TrainingMode.PRESERVE)
    assert (_ort_run(program, x, tmp_path) == 0).any()
    assert model.training and model.drop.training
    model.drop.eval()   # PRESERVE: a dropout the user switched off stays off
    program = onnxsight.export(model, (x,), training=torch.onnx.TrainingMode.PRESERVE)
    np.testing.assert_allclose(_ort_run(program, x, tmp_path), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert model.training and not model.drop.training


def test_a_dropout_training_export_verifies_with_the_drawn_output_not_compared(caplog: Any) -> None:
    model, x = DropoutNet().train(), torch.randn(8, 4)
    with caplog.at_level("WARNING", logger="onnxsight"):
        program = onnxsight.export(model, (x,), training=torch.onnx.TrainingMode.TRAINING, verify=True)
    assert len([r for r in caplog.records if "ACC009" in r.getMessage()]) == 1   # logged once, not again by export
    result = program.verification   # a pass means every output compared: a drawn one is listed, not passed
    assert not result.passed and result.coverage_summary["random op"] == 1
    (missing,) = [d for d in result.diagnostics if d.code == "ACC009"]
    assert "dropout" in missing.message and "random op" in missing.message


def test_training_mode_training_of_a_model_with_batch_norm_is_refused_naming_it() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5)).eval()
    with pytest.raises(onnxsight.exporter.InvalidArgumentError) as info:
        onnxsight.export(model, (torch.randn(2, 4),), training=torch.onnx.TrainingMode.TRAINING)
    (diagnostic,) = info.value.diagnostics
    assert diagnostic.code == "ARG018" and "1 (BatchNorm1d)" in diagnostic.message
    assert "model.eval()" in diagnostic.message and "2 (Dropout)" not in diagnostic.message
    assert not model.training


@pytest.mark.parametrize("mode", ["TRAINING", "PRESERVE"])
def test_training_modes_of_a_model_no_module_of_which_depends_on_the_mode_export_its_training_graph(mode: str) -> None:
    """Upstream's test_embedding and test_instancenorm_training (instance norm without running statistics): the
    model is captured in training mode, as asked, which here computes what eval mode does."""
    model = torch.nn.Sequential(torch.nn.InstanceNorm1d(4, affine=True), torch.nn.Linear(4, 4)).train()
    x = torch.randn(2, 4, 4)
    program = onnxsight.export(model, (x,), training=getattr(torch.onnx.TrainingMode, mode))
    assert not [d for d in program.diagnostics if d.code in ("ARG018", "CAP015")]
    assert model.training
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)


def test_training_mode_training_runs_the_models_own_training_branches(tmp_path: Any) -> None:
    """No dropout module: forward() reads self.training itself (F.dropout(..., self.training)), as torch.onnx's
    TRAINING export runs it; eval mode's graph would be the wrong one."""

    class OwnDropout(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.dropout(x * 2, 0.5, self.training)

    model, x = OwnDropout().eval(), torch.randn(64, 8)
    program = onnxsight.export(model, (x,), training=torch.onnx.TrainingMode.TRAINING)
    assert (_ort_run(program, x, tmp_path) == 0).any() and not model.training


class DropoutNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.drop = torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc(x))


def test_export_modules_as_functions_is_module_functions() -> None:
    model, x = Small().eval(), torch.randn(2, 4)
    program = onnxsight.export(model, (x,), export_modules_as_functions={torch.nn.Linear})
    assert [f.name for f in program.model_proto.functions] == ["Linear"]
    (out,) = program(x)
    torch.testing.assert_close(out, model(x))


def test_a_keyword_neither_exporter_takes_is_arg005_with_the_closest_names() -> None:
    with pytest.raises(onnxsight.exporter.InvalidArgumentError, match="did you mean dynamic_shapes"):
        onnxsight.export(Small().eval(), (torch.randn(2, 4),), dynamic_shape={"x": {0: "batch"}})


# --- an ExportedProgram as the model -------------------------------------------------------------------------

class InPlace(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        y.relu_()
        return y * self.scale


def test_an_exported_program_is_exported_without_a_second_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.export import Dim

    x = torch.randn(2, 4)
    program = torch.export.export(InPlace().eval(), (x,), dynamic_shapes={"x": {0: Dim("batch")}})
    before = program.graph_module.code

    def no_capture(*args: object, **kwargs: object) -> None:
        raise AssertionError("captured again")

    monkeypatch.setattr(torch.export, "export", no_capture)
    onnx_program = onnxsight.export(program, (x,), verify=True)
    assert onnx_program.verification.passed
    assert program.graph_module.code == before  # the user's program is not rewritten (relu_ -> relu)
    assert _dims(onnx_program) == {"x": ["batch", 4]}
    other = torch.randn(5, 4)
    (out,) = onnx_program(other)
    torch.testing.assert_close(out, program.module()(other))
    capture = next(s for s in onnx_program.record.stages if s.name == "capture")
    assert capture.status == "skipped"


def test_an_exported_program_without_args_uses_its_example_inputs() -> None:
    x = torch.randn(3, 4)
    program = torch.export.export(InPlace().eval(), (x,))
    onnx_program = onnxsight.export(program)
    (out,) = onnx_program(x)
    torch.testing.assert_close(out, program.module()(x))


def test_an_exported_program_with_dynamic_shapes_is_refused_naming_where_they_belong() -> None:
    program = torch.export.export(InPlace().eval(), (torch.randn(3, 4),))
    with pytest.raises(onnxsight.exporter.InvalidArgumentError, match="torch.export.export"):
        onnxsight.export(program, dynamic_shapes={"x": {0: "batch"}})


def test_an_exported_program_keeps_its_input_names() -> None:
    model, x = torch.nn.Linear(3, 2), torch.randn(2, 3)  # forward(input): a name that shadows a builtin
    onnx_program = onnxsight.export(torch.export.export(model, (x,)), verify=True)
    assert onnx_program.verification.passed and onnx_program.input_names == ["input"]


# --- dynamic_axes naming the leaves of nested inputs ---------------------------------------------------------

class DictInput(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: dict[str, torch.Tensor]) -> torch.Tensor:
        return a + b["x"] * b["y"]


def test_dynamic_axes_name_the_leaves_of_a_dict_input_through_input_names() -> None:
    model = DictInput()
    a, b = torch.randn(2, 3), {"x": torch.randn(2, 3), "y": torch.randn(2, 3)}
    program = onnxsight.export(model, (a, b), input_names=["a", "x", "y"], verify=True,
                               dynamic_axes={"a": {0: "batch"}, "x": {0: "batch"}, "y": {0: "batch"}})
    assert program.verification.passed
    assert _dims(program) == {"a": ["batch", 3], "x": ["batch", 3], "y": ["batch", 3]}
    other = (torch.randn(5, 3), {"x": torch.randn(5, 3), "y": torch.randn(5, 3)})
    (out,) = program(*other)
    torch.testing.assert_close(out, model(*other))


def test_dynamic_axes_name_the_leaves_of_a_list_input() -> None:
    class ListInput(torch.nn.Module):
        def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
            return xs[0].sum(1) + xs[1].sum(1)

    model, xs = ListInput(), [torch.randn(2, 4), torch.randn(2, 6)]
    program = onnxsight.export(model, (xs,), input_names=["first", "second"],
                               dynamic_axes={"first": [0, 1], "second": {0: "batch", 1: "width"}})
    dims = _dims(program)
    assert dims["second"] == ["batch", "width"] and dims["first"][1] == "first_dim_1"
    other = [torch.randn(3, 5), torch.randn(3, 7)]
    (out,) = program(other)
    torch.testing.assert_close(out, model(other))


def test_a_dynamic_axes_key_naming_a_nested_input_lists_its_leaves() -> None:
    with pytest.raises(onnxsight.exporter.InvalidArgumentError, match=r"b\['x'\].*b\['y'\]"):
        onnxsight.export(DictInput(), (torch.randn(2, 3), {"x": torch.randn(2, 3), "y": torch.randn(2, 3)}),
                         dynamic_axes={"b": {0: "batch"}})


# --- opset_version below 17 ----------------------------------------------------------------------------------

class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        first, second = y.split(4, dim=1)
        return torch.nn.functional.gelu(first).mean((2, 3)) + second.amax((2, 3))


@pytest.mark.parametrize("opset", [16, 15])
def test_a_lower_opset_is_converted_and_verified(opset: int) -> None:
    model, x = ConvNet().eval(), torch.randn(2, 3, 8, 8)
    program = onnxsight.export(model, (x,), opset_version=opset, dynamic_shapes={"x": {0: "batch"}}, verify=True)
    assert program.verification.passed
    assert [o.version for o in program.model_proto.opset_import if o.domain == ""] == [opset]
    other = torch.randn(3, 3, 8, 8)
    (out,) = program(other)
    torch.testing.assert_close(out, model(other), atol=1e-5, rtol=1e-5)
    conv = next(n for n in program.model_proto.graph.node if n.op_type == "Conv")
    assert any(p.key == "pkg.torch.onnx.stack_trace" and __file__ in p.value for p in conv.metadata_props)


@pytest.mark.parametrize("opset", [16, 15])
def test_an_op_new_in_17_with_an_onnx_function_body_is_expanded(opset: int) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8),
                                torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)).eval()
    program = onnxsight.export(model, (torch.randn(2, 5, 8),), opset_version=opset, verify=True,
                               dynamic_shapes={"input": {0: "batch", 1: "sequence"}})
    assert program.verification.passed
    nodes = program.model_proto.graph.node
    assert "LayerNormalization" not in {n.op_type for n in nodes}
    expanded = [n for n in nodes if "/" in n.name]  # the function body's nodes: "<node>/<op>_<index>"
    assert expanded and all(any(p.key == "pkg.torch.onnx.fx_node" for p in n.metadata_props) for n in expanded)
    other = torch.randn(3, 7, 8)
    (out,) = program(other)
    torch.testing.assert_close(out, model(other), atol=1e-5, rtol=1e-5)


def test_an_op_a_lower_opset_lacks_is_refused_naming_it_and_the_opset_that_has_it() -> None:
    class Sample(torch.nn.Module):
        def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.grid_sample(x, grid, align_corners=False)

    with pytest.raises(ExportError) as info:
        onnxsight.export(Sample(), (torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1), opset_version=15)
    (error,) = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert error.code == "OPS003"
    assert "GridSample" in error.message and "opset 16" in error.message and "opset 15" in error.message
    assert "grid_sampler" in error.message


def test_a_conversion_the_converter_cannot_make_names_the_ops_defined_anew() -> None:
    class ScatterAdd(torch.nn.Module):
        def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
            return torch.zeros(3, 4).scatter_add(0, index, x)  # ScatterElements(reduction="add"): opset 16

    with pytest.raises(ExportError) as info:
        onnxsight.export(ScatterAdd(), (torch.randn(2, 4), torch.randint(0, 3, (2, 4))), opset_version=15)
    (error,) = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert error.code == "ONX007" and "ScatterElements (changed in opset 16)" in error.message
    program = onnxsight.export(ScatterAdd(), (torch.randn(2, 4), torch.randint(0, 3, (2, 4))), opset_version=16,
                               verify=True)
    assert program.verification.passed


# --- float8 at the default opset -----------------------------------------------------------------------------

class Float8RoundTrip(torch.nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.dtype).to(torch.float32) * 2  # @float8


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_without_an_opset_targets_the_opset_that_has_it(dtype: torch.dtype) -> None:
    model, x = Float8RoundTrip(dtype), torch.randn(16) * 10
    program = onnxsight.export(model, (x,), verify=True)
    assert program.verification.passed
    assert [o.version for o in program.model_proto.opset_import if o.domain == ""] == [19]
    (note,) = [d for d in program.diagnostics if d.code == "DTY006"]
    assert "opset 19" in note.message and str(dtype).removeprefix("torch.") in note.message
    (out,) = program(x)
    torch.testing.assert_close(out, model(x))


def test_float8_at_a_chosen_opset_that_lacks_it_is_refused_at_the_users_line() -> None:
    with pytest.raises(ExportError) as info:
        onnxsight.export(Float8RoundTrip(torch.float8_e4m3fn), (torch.randn(4),), opset_version=18)
    (error,) = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert error.code == "DTY005" and "float8_e4m3fn" in error.message and "opset 19" in error.message
    assert error.location is not None and error.location.file == __file__
    assert "@float8" in (error.location.code or "")


# --- export gaps torch.onnx handles --------------------------------------------------------------------------

def test_sym_sum_of_sizes() -> None:
    class Stack(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            rows = torch.sym_sum([x.shape[0], y.shape[0], 1])
            return torch.cat([x, y, x[:1]]).reshape(rows, -1) * rows

    model = Stack()
    program = onnxsight.export(model, (torch.randn(2, 3), torch.randn(4, 3)), verify=True,
                               dynamic_shapes={"x": {0: "a"}, "y": {0: "b"}})
    assert program.verification.passed
    other = (torch.randn(5, 3), torch.randn(3, 3))
    (out,) = program(*other)
    torch.testing.assert_close(out, model(*other))


class ComplexArithmetic(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("phase", torch.randn(3, dtype=torch.complex64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.view_as_complex(x)
        constant = torch.tensor([1 + 2j, 3j, 1], dtype=torch.complex64)
        mixed = z * self.phase + constant - z * (0.5 - 1j) + 2.0
        mixed = torch.sub(mixed, self.phase, alpha=2) + (1 - 1j)
        return torch.view_as_real(mixed + x[:, 0])


def test_complex_buffers_and_constants_in_arithmetic() -> None:
    model, x = ComplexArithmetic(), torch.randn(3, 2)
    program = onnxsight.export(model, (x,), verify=True)
    assert program.verification.passed
    (out,) = program(x)
    torch.testing.assert_close(out, model(x))


def test_while_loop_with_an_int_carry() -> None:
    from torch._higher_order_ops.while_loop import while_loop

    class Doubling(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            def cond(steps: int, value: torch.Tensor) -> torch.Tensor:
                return value.sum() < 100

            def body(steps: int, value: torch.Tensor) -> tuple[int, torch.Tensor]:
                return steps + 1, value * 2

            steps, value = while_loop(cond, body, (0, x))
            return value, steps

    model, x = Doubling(), torch.ones(3)
    program = onnxsight.export(model, (x,), verify=True)
    assert program.verification.passed
    value, steps = program(torch.full((3,), 0.5))
    expected_value, expected_steps = model(torch.full((3,), 0.5))
    torch.testing.assert_close(value, expected_value)
    assert int(steps) == int(expected_steps)
