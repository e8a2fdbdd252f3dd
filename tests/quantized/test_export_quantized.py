"""PT2E-quantized models export to QDQ ONNX and agree with the quantized eager model within one step."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from onnxsight.exporter._api import export

models = pytest.importorskip("tests.quantized.models", reason="torchao is not installed: pip install onnxsight[quant]")


@pytest.fixture(scope="module", params=sorted(models.MODELS))
def quantized(request: pytest.FixtureRequest) -> tuple:
    return (request.param, *models.MODELS[request.param]())


def _ops(program: object) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in program.model_proto.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


@pytest.mark.parametrize("opset", [17, 18, 21, 23])
def test_qdq_graph_with_integer_weights(quantized: tuple, opset: int) -> None:
    name, _, module, args, dynamic_shapes = quantized
    program = export(module, args, dynamic_shapes=dynamic_shapes, opset_version=opset)
    ops = _ops(program)
    assert ops.get("QuantizeLinear") and ops.get("DequantizeLinear"), ops
    assert not {"Round", "Floor"} & set(ops) or name == "mlp_dynamic_activations", ops  # Q/DQ kept as such
    weights = {k: v for k, v in program.initializers.items() if v.dtype == torch.int8}
    assert weights, "the quantized weights are int8 initializers"
    readers = {(name, n.op_type) for n in program.model_proto.graph.node for name in n.input if name in weights}
    assert {op for _, op in readers} == {"DequantizeLinear"}
    assert any(v.dim() >= 2 for v in weights.values())
    assert not any(v.dtype == torch.int64 and v.numel() > 1 for v in program.initializers.values())
    onnx.checker.check_model(program.model_proto)


def _assert_within_one_step(program: object, module: torch.nn.Module, args: tuple) -> None:
    integers = models.quantized_integers(program, args)
    assert integers
    flips = 0
    for name, (expected, actual) in integers.items():
        steps = np.abs(expected.astype(np.int64) - actual.astype(np.int64))
        assert steps.max() <= 1, f"{name}: {steps.max()} steps apart"
        flips += int(steps.sum())
    with torch.no_grad():
        expected = module(*args)
    actual = torch.as_tensor(np.asarray(program(*args)[0]))
    if not flips:  # every integer equal: the float outputs agree to float32 rounding
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


def test_matches_quantized_eager_model(quantized: tuple) -> None:
    name, _, module, args, dynamic_shapes = quantized
    program = export(module, args, dynamic_shapes=dynamic_shapes)
    _assert_within_one_step(program, module, args)
    torch.manual_seed(1)
    _assert_within_one_step(program, module, models.other_size(args))


def test_weight_quantize_folded_at_export() -> None:
    """convert_pt2e(fold_quantize=False) leaves the weight's quantize in the graph: it is evaluated at export."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    torch.manual_seed(0)
    model, args = models.MLP().eval(), (torch.randn(4, 16),)
    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, args).module(), quantizer)
    prepared(*args)
    module = convert_pt2e(prepared, fold_quantize=False)
    program = export(module, args)
    assert _ops(program)["QuantizeLinear"] == 3  # activations only
    assert not any(v.dtype == torch.float32 and v.dim() == 2 for v in program.initializers.values())
    assert sum(v.dtype == torch.int8 and v.dim() == 2 for v in program.initializers.values()) == 3
    _assert_within_one_step(program, module, args)


def test_narrow_range_is_clipped() -> None:
    """quant_min/quant_max narrower than the dtype (symmetric int8 -127..127) clip after QuantizeLinear."""
    class Narrow(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = torch.ops.quantized_decomposed.quantize_per_tensor(x, 0.01, 0, -127, 127, torch.int8)
            return torch.ops.quantized_decomposed.dequantize_per_tensor(q, 0.01, 0, -127, 127, torch.int8)

    x = torch.linspace(-2, 2, 50)
    program = export(Narrow(), (x,))
    assert "Clip" in _ops(program)
    torch.testing.assert_close(torch.as_tensor(np.asarray(program(x)[0])), Narrow()(x))


def test_unsupported_dtype_names_the_argument() -> None:
    class Int32(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.quantized_decomposed.quantize_per_tensor(x, 0.01, 0, -1000, 1000, torch.int32)

    with pytest.raises(Exception) as info:
        export(Int32(), (torch.randn(4),))
    messages = [d.message for d in info.value.diagnostics if d.code == "OPS006"]
    assert messages and "int32" in messages[0] and "int8" in messages[0], messages


def test_dynamic_quantization_parameters_are_not_a_float64_computation() -> None:
    """choose_qparams returns torch.ao's float64 scale: no DTY004 for it (the model computes in float32)."""
    _, module, args, dynamic_shapes = models.mlp_dynamic_activations()
    program = export(module, args, dynamic_shapes=dynamic_shapes)
    assert not [d.message for d in program.diagnostics if d.code == "DTY004"]
