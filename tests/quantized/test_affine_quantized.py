"""torchao's affine quantization primitives (quantize_affine, dequantize_affine, choose_qparams_affine) as QDQ.

Each granularity against eager at several sizes (a dynamic batch, verified per node), the weights stored as
integers, torchao's quantize_() configs end to end, and what ONNX cannot express refused by rule.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import pytest
import torch

import onnxsight
from onnxsight.exporter._api import export

with contextlib.redirect_stderr(io.StringIO()):
    pytest.importorskip("torchao", reason="torchao is not installed: pip install onnxsight[quant]")

ao = torch.ops.torchao


class DynamicQDQ(torch.nn.Module):
    """choose_qparams_affine -> quantize_affine -> dequantize_affine on an activation; None: the whole dim."""

    def __init__(self, block: list[int | None], mapping: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.block, self.mapping, self.dtype = block, mapping, dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        block = [x.shape[i] if b is None else b for i, b in enumerate(self.block)]
        zp_dtype = torch.int32 if self.mapping == "ASYMMETRIC" else torch.int8
        scale, zp = ao.choose_qparams_affine(x, self.mapping, block, self.dtype, None, None, None, torch.float32,
                                             zp_dtype)
        q = ao.quantize_affine(x, block, scale, zp, self.dtype, None, None)
        return ao.dequantize_affine(q, block, scale, zp, self.dtype, None, None) * 2


CASES = {  # name: (block, mapping, dtype, example shape, opset, ONNX granularity)
    "per_tensor_asymmetric_uint8": ([None, None], "ASYMMETRIC", torch.uint8, (4, 16), 18, None),
    "per_row_symmetric_int8": ([1, None], "SYMMETRIC", torch.int8, (4, 16), 18, "axis"),
    "per_row_no_clipping_err": ([1, None], "SYMMETRIC_NO_CLIPPING_ERR", torch.int8, (4, 16), 17, "axis"),
    "per_token_3d": ([1, 1, None], "SYMMETRIC", torch.int8, (2, 5, 16), 21, "block_size"),
}


def _attribute(program: Any, op: str, name: str) -> Any:
    node = next(n for n in program.model_proto.graph.node if n.op_type == op)
    return next((a for a in node.attribute if a.name == name), None)


def _within_a_step(program: Any, model: torch.nn.Module, x: torch.Tensor) -> None:
    """The ONNX output against eager: equal but where a half step rounds the other way (one step, x2)."""
    expected = model(x).numpy()
    actual = np.asarray(program(x)[0])
    scale = np.abs(expected).max() / 100
    assert np.abs(actual - expected).max() <= 2 * scale + 1e-6
    assert np.mean(actual != expected) < 0.05


@pytest.mark.parametrize("name", sorted(CASES))
def test_dynamic_activation_quantization_matches_eager_at_several_sizes(name: str) -> None:
    block, mapping, dtype, shape, opset, granularity = CASES[name]
    model = DynamicQDQ(block, mapping, dtype)
    torch.manual_seed(0)
    x = torch.randn(*shape)
    batch = {0: torch.export.Dim("batch", min=1, max=64)}
    program = export(model, (x,), dynamic_shapes=(batch,), opset_version=opset)
    ops = {n.op_type for n in program.model_proto.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "ReduceMax"} <= ops
    if granularity is not None:
        assert _attribute(program, "QuantizeLinear", granularity) is not None
    # NOTE: not a batch of 1 for a per-tensor block of the batch: there torchao's block of 1 keeps the dim
    # in the scale's shape ([1], where other sizes give []); the ONNX graph's scale has one shape
    for batch_size in (shape[0], 2, 7):
        inputs = (torch.randn(batch_size, *shape[1:]),)
        _within_a_step(program, model, inputs[0])
        result = onnxsight.verify(program, inputs)
        assert result.passed and result.root_causes.empty, [d.message for d in result.diagnostics]


class AffineWeight(torch.nn.Module):
    """A Linear whose weight is held as integers and dequantized with dequantize_affine, as torchao stores it."""

    def __init__(self, block: list[int], dtype: torch.dtype, quant_min: int | None, quant_max: int | None) -> None:
        super().__init__()
        torch.manual_seed(0)
        weight = torch.randn(24, 32)
        self.block, self.dtype, self.range = block, dtype, (quant_min, quant_max)
        scale, zp = ao.choose_qparams_affine(weight, "ASYMMETRIC", block, dtype, quant_min, quant_max, None,
                                             torch.float32, torch.int32)
        self.register_buffer("q", ao.quantize_affine(weight, block, scale, zp, dtype, quant_min, quant_max))
        self.register_buffer("scale", scale)
        self.register_buffer("zp", zp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = ao.dequantize_affine(self.q, self.block, self.scale, self.zp, self.dtype, *self.range)
        return torch.nn.functional.linear(x, w)


WEIGHTS = {  # name: (block, dtype, quant_min, quant_max, opset, stored dtype)
    "per_channel_int8": ([1, 32], torch.int8, None, None, 18, torch.int8),
    "per_tensor_uint8": ([24, 32], torch.uint8, None, None, 17, torch.uint8),
    "groups_of_8_int8": ([1, 8], torch.int8, None, None, 21, torch.int8),
    "groups_of_16_uint4": ([1, 16], torch.uint4, None, None, 21, torch.uint4),
    "groups_of_8_int4_range": ([1, 8], torch.int8, -8, 7, 23, torch.int4),
    "per_channel_int4_range_opset_20": ([1, 32], torch.int8, -8, 7, 20, torch.int8),
}


def _float_matmul_options() -> Any:
    """Session options whose MatMulNBits (fused from a 4-bit DequantizeLinear + MatMul) computes in float32."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
    return options


def _run(program: Any, x: torch.Tensor, options: Any) -> torch.Tensor:
    import onnxruntime as ort

    session = ort.InferenceSession(program.model_proto.SerializeToString(), options)
    return torch.as_tensor(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


@pytest.mark.parametrize("name", sorted(WEIGHTS))
def test_weights_are_stored_as_integers_and_dequantized_per_block(name: str) -> None:
    from onnxsight.exporter._dtypes import int4_values

    block, dtype, low, high, opset, stored = WEIGHTS[name]
    model = AffineWeight(block, dtype, low, high)
    x = torch.randn(3, 32)
    program = export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch", max=64)},), opset_version=opset)
    node = next(n for n in program.model_proto.graph.node if n.op_type == "DequantizeLinear")
    weight = program.initializers[node.input[0]]
    assert weight.dtype == stored
    proto = next(t for t in program.model_proto.graph.initializer if t.name == node.input[0])
    if stored in (torch.int4, torch.uint4):   # two a byte: half the bytes, ONNX's INT4/UINT4, the same integers
        assert proto.data_type == {torch.int4: 22, torch.uint4: 21}[stored] and len(proto.raw_data) == 24 * 32 // 2
        stored_transposed = list(proto.dims) == [32, 24]
        integers = torch.as_tensor(int4_values(weight))
        torch.testing.assert_close(integers.t() if stored_transposed else integers, model.q, check_dtype=False)
    blocked = block[1] not in (1, 32) and block[0] == 1
    assert (_attribute(program, "DequantizeLinear", "block_size") is not None) == blocked
    for batch_size in (3, 1, 9):
        x = torch.randn(batch_size, 32)
        torch.testing.assert_close(_run(program, x, _float_matmul_options()), model(x), atol=1e-5, rtol=1e-5)
    assert onnxsight.verify(program, (x,), session_options=_float_matmul_options()).passed


def test_4bit_group_weights_reach_matmulnbits_and_its_int8_activations_are_judged() -> None:
    """DequantizeLinear(UINT4 [K, N], blocks along K) -> Transpose -> Gemm is what ONNX Runtime fuses into
    MatMulNBits; at the fusion's default accuracy level it quantizes activations, which ACC013 names."""
    model = AffineWeight([1, 16], torch.uint4, None, None)
    x = torch.randn(3, 32)
    program = export(model, (x,), opset_version=21)
    from onnxsight.verification._deployed import fused_kernels

    assert any(k.startswith("MatMulNBits") for k in fused_kernels(program.model_proto, ["CPUExecutionProvider"]))
    result = onnxsight.verify(program, (x,))
    assert result.root_causes.empty   # the per-node run matches: the graph is right
    messages = [d.message for d in result.diagnostics if d.code == "ACC013"]
    assert not result.passed and messages and "accuracy level 4" in messages[0], messages


def test_4bit_weights_save_to_external_data_and_a_fake_export_keeps_int8(tmp_path: Any) -> None:
    """INT4 initializers stream into external data as their packed bytes; a fake-mode export (weights
    without data, nothing to pack) keeps the int8 form, and save(weights=checkpoint) refuses it by rule:
    the scales the exporter converts (float32 blocks) are not recomputed from a checkpoint (VAL008)."""
    import onnxruntime as ort

    model = AffineWeight([1, 16], torch.int8, -8, 7)
    x = torch.randn(3, 32)
    program = export(model, (x,), opset_version=21)
    program.save(tmp_path / "int4.onnx", external_data=True)
    session = ort.InferenceSession(str(tmp_path / "int4.onnx"), _float_matmul_options())
    torch.testing.assert_close(torch.as_tensor(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]),
                               model(x), atol=1e-5, rtol=1e-5)
    with onnxsight.fake_mode():
        fake = AffineWeight([1, 16], torch.int8, -8, 7)
        fake_x = torch.randn(3, 32)
    fake_program = export(fake, (fake_x,), opset_version=21)
    assert {t.dtype for t in fake_program.initializers.values()} & {torch.int4, torch.uint4} == set()
    with pytest.raises(onnxsight.WeightsError) as info:
        fake_program.save(tmp_path / "fake.onnx", weights=model.state_dict())
    assert "VAL008" in str(info.value) and "scale_float32_blocks" in str(info.value)



class TwoDimBlocks(torch.nn.Module):
    def __init__(self, block: list[int]) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale, zp = ao.choose_qparams_affine(x, "ASYMMETRIC", self.block, torch.uint8, None, None, None, torch.float32,
                                             torch.int32)
        return ao.quantize_affine(x, self.block, scale, zp, torch.uint8, None, None)


@pytest.mark.parametrize(("block", "opset", "words"), [
    ([1, 8], 18, ["blocks along dim 1", "opset 18", "opset 21"]),
    ([2, 8], 21, ["[2, 8]", "blocks along one dim"]),
])
def test_what_qdq_cannot_express_is_refused_naming_it(block: list[int], opset: int, words: list[str]) -> None:
    with pytest.raises(onnxsight.ExportError) as info:
        export(TwoDimBlocks(block), (torch.randn(4, 16),), opset_version=opset)
    messages = [d.message for d in info.value.diagnostics if d.code == "OPS006"]
    assert messages and all(any(w in m for m in messages) for w in words), messages
    assert any("torchao" in m for m in messages)


def _config(name: str) -> Any:
    from torchao import quantization as q

    return {"int8_dynamic_int8_weight": q.Int8DynamicActivationInt8WeightConfig(),
            "intx_weight_only": q.IntxWeightOnlyConfig(),
            "int8_dynamic_intx_weight": q.Int8DynamicActivationIntxWeightConfig()}[name]


@pytest.mark.parametrize("name", ["int8_dynamic_int8_weight", "intx_weight_only", "int8_dynamic_intx_weight"])
def test_quantize_configs_export_and_verify(name: str) -> None:
    """torchao's quantize_() on a float model, then export: QDQ (and MatMulInteger for int8 x int8)."""
    from torchao.quantization import quantize_

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
    quantize_(model, _config(name))
    for batch_size in (4, 1):
        x = torch.randn(batch_size, 32)
        program = export(model, (x,), opset_version=21)
        ops = {n.op_type for n in program.model_proto.graph.node}
        assert "DequantizeLinear" in ops or "MatMulInteger" in ops
        result = onnxsight.verify(program, (x,))
        assert result.passed and result.root_causes.empty, [d.message for d in result.diagnostics]


@pytest.mark.parametrize("granularity", ["per_group_32", "per_channel"])
def test_intx_weight_only_int4_is_stored_as_int4_and_matches_eager_at_several_sizes(granularity: str) -> None:
    """IntxWeightOnlyConfig(weight_dtype=torch.int4): INT4 initializers (half int8's bytes) at opset 21, the
    int8 form below it, the same results as eager at every batch size of one dynamic-batch export."""
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32)).eval()
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32) if granularity ==
                                          "per_group_32" else PerAxis(0)))
    x = torch.randn(4, 128)
    batch = ({0: torch.export.Dim("batch", max=64)},)
    program = export(model, (x,), dynamic_shapes=batch, opset_version=21)
    int4 = [t for t in program.model_proto.graph.initializer if t.data_type == 22]
    assert len(int4) == 2 and {len(t.raw_data) for t in int4} == {128 * 64 // 2, 64 * 32 // 2}
    assert not any(t.data_type == 3 and len(t.dims) == 2 for t in program.model_proto.graph.initializer)
    for batch_size in (4, 1, 9):
        x = torch.randn(batch_size, 128)
        torch.testing.assert_close(_run(program, x, _float_matmul_options()), model(x), atol=1e-5, rtol=1e-5)
        result = onnxsight.verify(program, (x,), session_options=_float_matmul_options())
        assert result.passed and result.root_causes.empty, [d.message for d in result.diagnostics]
    if granularity == "per_channel":   # below opset 21: int8 integers (ONNX has no INT4), the same results
        old = export(model, (x,), dynamic_shapes=batch, opset_version=20)
        assert sum(t.data_type == 3 and len(t.dims) == 2 for t in old.model_proto.graph.initializer) == 2
        torch.testing.assert_close(_run(old, x, _float_matmul_options()), model(x), atol=1e-5, rtol=1e-5)


def test_4bit_weights_verify_when_the_weights_are_shared_across_chunk_sessions() -> None:
    """Under a small memory budget the large weights are fed to every chunk session as inputs; 4-bit ones,
    which ONNX Runtime's Python API cannot take as a feed, stay embedded (unpacked for the chunk models)."""
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)).eval()
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)))
    x = torch.randn(3, 1024)
    program = export(model, (x,), opset_version=21)
    result = onnxsight.verify(program, (x,), session_options=_float_matmul_options(), memory_budget=1000)
    assert result.passed and result.root_causes.empty, [d.message for d in result.diagnostics]


def test_a_4bit_layer_called_twice_shares_one_int4_initializer() -> None:
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    class Twice(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.fc(x)))

    torch.manual_seed(0)
    model = Twice().eval()
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)))
    x = torch.randn(2, 64)
    program = export(model, (x,), opset_version=21)
    assert sum(t.data_type == 22 for t in program.model_proto.graph.initializer) == 1
    torch.testing.assert_close(_run(program, x, _float_matmul_options()), model(x), atol=1e-5, rtol=1e-5)
    reference = program.call_reference(x)[0]   # onnx's reference evaluator reads the INT4 initializer too
    torch.testing.assert_close(torch.as_tensor(np.asarray(reference)), model(x), atol=1e-5, rtol=1e-5)
