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
    wide = {k for k, v in program.initializers.items() if v.dtype == torch.int64 and v.numel() > 1}
    qdq_inputs = {i for n in program.model_proto.graph.node if n.op_type in ('QuantizeLinear', 'DequantizeLinear')
                  for i in n.input}
    assert not wide & qdq_inputs, wide & qdq_inputs  # PT2E's int64 zero points are stored in the dtype of the Q/DQ
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
    readers = {n.op_type for n in program.model_proto.graph.node for name in n.input
               if name in program.initializers and program.initializers[name].dtype == torch.int8}
    assert readers == {"DequantizeLinear"}   # the folded integers feed DequantizeLinear directly
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


class GroupWise(torch.nn.Module):
    """A weight quantized in groups of 4 columns (torchao's per-channel-group primitives): blocked Q/DQ."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(6, 8))
        self.register_buffer("scales", self.weight.detach().abs().reshape(6, 2, 4).amax(-1) / 7)
        self.register_buffer("zeros", torch.zeros(6, 2, dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ops = torch.ops.quantized_decomposed
        q = ops.quantize_per_channel_group(self.weight, self.scales, self.zeros, -8, 7, torch.int8, 4)
        w = ops.dequantize_per_channel_group(q, self.scales, self.zeros, -8, 7, torch.int8, 4, torch.float32)
        return x @ w.t()


def test_per_channel_group_is_blocked_from_opset_21() -> None:
    x = torch.randn(3, 8)
    program = export(GroupWise(), (x,), opset_version=21)
    dequantize = next(n for n in program.model_proto.graph.node if n.op_type == "DequantizeLinear")
    assert {a.name: a.i for a in dequantize.attribute} == {"axis": 1, "block_size": 4}
    assert program.initializers[dequantize.input[0]].dtype == torch.int8   # the weight's quantize folded
    torch.testing.assert_close(torch.as_tensor(np.asarray(program(x)[0])), GroupWise()(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception) as info:
        export(GroupWise(), (x,), opset_version=20)
    assert any(d.code == "OPS003" for d in info.value.diagnostics)


class TensorQParams(torch.nn.Module):
    """The .tensor overloads with the scale and zero point held as [1] buffers (float64, int64)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor([0.02], dtype=torch.float64))
        self.register_buffer("zero_point", torch.tensor([3]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ops = torch.ops.quantized_decomposed
        q = ops.quantize_per_tensor.tensor(x, self.scale, self.zero_point, 0, 255, torch.uint8)
        return ops.dequantize_per_tensor.tensor(q, self.scale, self.zero_point, 0, 255, torch.uint8)


def test_constant_tensor_qparams_become_scalar_initializers() -> None:
    x = torch.linspace(-1, 4, 40)
    program = export(TensorQParams(), (x,))
    assert set(_ops(program)) == {"QuantizeLinear", "DequantizeLinear"}   # no Cast/Reshape of the qparams
    quantize = next(n for n in program.model_proto.graph.node if n.op_type == "QuantizeLinear")
    scale, zero_point = (program.initializers[name] for name in quantize.input[1:])
    assert scale.shape == () and scale.dtype == torch.float32
    assert zero_point.shape == () and zero_point.dtype == torch.uint8
    torch.testing.assert_close(torch.as_tensor(np.asarray(program(x)[0])), TensorQParams()(x))
