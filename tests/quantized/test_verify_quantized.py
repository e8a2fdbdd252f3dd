"""Verification of quantized models: rounding at a half step is not a root cause, a wrong scale or zero point is."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

import onnxsight
from onnxsight.exporter._api import export

models = pytest.importorskip("tests.quantized.models", reason="torchao is not installed: pip install onnxsight[quant]")


@pytest.fixture(scope="module", params=sorted(models.MODELS))
def exported(request: pytest.FixtureRequest) -> tuple:
    _, module, args, dynamic_shapes = models.MODELS[request.param]()
    return export(module, args, dynamic_shapes=dynamic_shapes), args


def _codes(result: object) -> set[str]:
    return {d.code for d in result.diagnostics}


def test_passes_with_no_root_cause(exported: tuple) -> None:
    program, args = exported
    torch.manual_seed(2)
    for inputs in (args, models.other_size(args)):
        result = onnxsight.verify(program, inputs)
        assert result.passed, [d.message for d in result.diagnostics]
        assert result.root_causes.empty
        steps = result.nodes.set_index("value")["max_diff_steps"]
        quantized = result.nodes["target"].str.contains(r"^quantized_decomposed\.(?:de)?quantize_per_")
        assert steps[quantized.values].notna().all() and steps[~quantized.values].isna().all()


class HalfStep(torch.nn.Module):
    """Quantizes 1.55 with scale 0.1: PyTorch's x * (1 / scale) rounds to 16, ONNX's x / scale to 15."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = torch.ops.quantized_decomposed.quantize_per_tensor(x, 0.1, 0, -128, 127, torch.int8)
        return torch.ops.quantized_decomposed.dequantize_per_tensor(q, 0.1, 0, -128, 127, torch.int8) * 2


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
def test_one_step_at_a_half_step_is_rounding(mode: str) -> None:
    x = torch.tensor([1.55, 0.3, -0.72, 2.0])
    program = export(HalfStep(), (x,))
    result = onnxsight.verify(program, (x,), mode=mode)
    assert result.passed, [d.message for d in result.diagnostics]
    assert result.root_causes.empty
    notes = [d for d in result.diagnostics if d.code == "ACC012"]
    assert len(notes) == 1 and "1 of 4 elements one step apart" in notes[0].message
    row = result.nodes.set_index("value").loc["quantize_per_tensor"]
    assert row["max_diff_steps"] == 1 and bool(row["borderline"])


def _with_initializer(program: object, name: str, edit: object) -> onnx.ModelProto:
    model = onnx.ModelProto()
    model.CopyFrom(program.model_proto)
    tensor = next(t for t in model.graph.initializer if t.name == name)
    tensor.CopyFrom(numpy_helper.from_array(edit(numpy_helper.to_array(tensor)), name))
    return model


def _weight_qparams(program: object) -> tuple[str, str, str]:
    """(scale, zero point, the value it dequantizes into) of the first weight's DequantizeLinear."""
    inits = set(program.initializers)
    node = next(n for n in program.model_proto.graph.node
                if n.op_type == "DequantizeLinear" and n.input[0] in inits and n.input[1] in inits)
    return node.input[1], node.input[2], node.output[0]


@pytest.mark.parametrize("which", ["scale", "zero_point"])
def test_wrong_weight_qparams_are_the_root_cause(which: str) -> None:
    _, module, args, dynamic_shapes = models.conv_bn_residual()
    program = export(module, args, dynamic_shapes=dynamic_shapes)
    scale, zero_point, value = _weight_qparams(program)
    if which == "scale":
        model = _with_initializer(program, scale, lambda a: a * np.float32(1.5))
    else:
        model = _with_initializer(program, zero_point, lambda a: (a + 3).astype(a.dtype))
    result = onnxsight.verify(program, args, onnx_model=model)
    assert not result.passed
    assert list(result.root_causes["value"]) == [value]
    assert result.root_causes.iloc[0]["max_diff_steps"] > 1
    [divergence] = [d for d in result.diagnostics if d.code == "ACC002"]
    assert divergence.properties["max_diff_steps"] > 1   # in the SARIF result's properties too


def test_wrong_activation_scale_is_the_root_cause() -> None:
    """A QuantizeLinear with a wrong scale moves its integers by many steps: a root cause, not rounding."""
    _, module, args, dynamic_shapes = models.mlp_dynamic_batch()
    program = export(module, args, dynamic_shapes=dynamic_shapes)
    model = onnx.ModelProto()
    model.CopyFrom(program.model_proto)
    quantize = next(n for n in model.graph.node if n.op_type == "QuantizeLinear")
    scale = quantize.input[1]
    wrong = numpy_helper.from_array(np.array(0.5, dtype=np.float32), scale + "_wrong")
    model.graph.initializer.append(wrong)
    quantize.input[1] = wrong.name
    result = onnxsight.verify(program, args, onnx_model=model)
    assert not result.passed
    causes = list(result.root_causes["value"])
    assert causes[0] == quantize.output[0], causes
    assert "ACC012" not in _codes(result)


def test_group_wise_dequantize_is_measured_per_group() -> None:
    from tests.quantized.test_export_quantized import GroupWise

    x = torch.randn(3, 8)
    result = onnxsight.verify(export(GroupWise(), (x,), opset_version=21), (x,))
    assert result.passed, [d.message for d in result.diagnostics]
    steps = result.nodes.set_index("value")["max_diff_steps"]
    assert steps["dequantize_per_channel_group"] == 0


@pytest.fixture(scope="module")
def dynamic_transformer_block() -> tuple:
    """The zoo's dynamically quantized transformer block with static shapes: ONNX Runtime's default session
    fuses its weights' DequantizeLinear and MatMul into MatMulNBits, which rounds its activations its own way."""
    from onnxsight.zoo.suites.quantized import TransformerBlock, quantize

    torch.manual_seed(0)
    args = (torch.randn(2, 8, 32),)
    return export(quantize(TransformerBlock().eval(), args, dynamic=True), args), args


def test_integer_kernels_of_the_deployed_session_are_reported(dynamic_transformer_block: tuple) -> None:
    program, args = dynamic_transformer_block
    result = onnxsight.verify(program, args)
    assert not result.passed and result.root_causes.empty        # every node matches per node
    found = [d for d in result.diagnostics if d.code == "ACC013"]
    assert len(found) == 1
    message, props = found[0].message, found[0].properties
    assert found[0].fields["output"] == program.output_names[0]
    assert "quantization steps of dequantize_per_tensor" in message and props["max_diff_steps"] > 1
    assert "integer kernels" in message and "MatMulNBits" in message
    assert any(k.startswith("MatMulNBits") for k in result.info["deployed"]["fused_kernels"])
    assert props["baseline_max_abs_diff"] < 1e-5 and props["added_steps"] > 1   # the unoptimised graph matches


def test_the_same_graph_deployed_unfused_passes(dynamic_transformer_block: tuple) -> None:
    import onnxruntime as ort

    program, args = dynamic_transformer_block
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    result = onnxsight.verify(program, args, session_options=options)
    assert result.passed, [d.message for d in result.diagnostics]
    assert result.info["deployed"]["compared"]


def test_half_step_rounding_in_the_deployed_session_is_not_blamed_on_it() -> None:
    """The whole-model run rounds 1.55 / 0.1 to 15 where PyTorch has 16 (ACC012); the unoptimised graph
    gives the same, so the deployed session is not what differs."""
    x = torch.tensor([1.55, 0.3, -0.72, 2.0])
    result = onnxsight.verify(export(HalfStep(), (x,)), (x,))
    assert result.passed and not any(d.code == "ACC013" for d in result.diagnostics)
    row = result.info["deployed"]["outputs"][0]
    assert row["max_abs_diff"] == pytest.approx(0.2) and "ACC012" in row["explained_by"]


def test_integer_kernels_within_the_steps_tolerance_are_a_note(dynamic_transformer_block: tuple) -> None:
    program, args = dynamic_transformer_block
    result = onnxsight.verify(program, args, tolerance=onnxsight.Tolerance(quantization_steps=2))
    assert result.passed, [d.message for d in result.diagnostics]
    notes = [d for d in result.diagnostics if d.code == "ACC013"]
    assert len(notes) == 1 and notes[0].level.name == "NOTE" and "within the tolerance of 2" in notes[0].message
    assert result.info["deployed"]["outputs"][0]["passed"]
