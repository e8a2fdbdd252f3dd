"""torch.float4_e2m1fn_x2 (packed MX/NVFP4 weights) exported as torch.onnx does: FLOAT4E2M1 at opset 23.

ONNX Runtime 1.32 runs no op on FLOAT4E2M1 (its CPU provider has no Cast for it), so the values are
checked against eager PyTorch with ONNX's reference evaluator, bit for bit; ``verify=True`` must list
what it could not compare and fail, never pass.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxsight
from onnxsight.exporter import ExportError

FLOAT4 = torch.float4_e2m1fn_x2
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def every_byte(rows: int = 4) -> torch.Tensor:
    """All 256 bytes (every pair of the 16 float4 codes, -0 included) as float4 pairs, [rows, 256 / rows]."""
    return torch.arange(256, dtype=torch.uint8).reshape(rows, -1).view(FLOAT4)


class PackedLinear(torch.nn.Module):
    """An MXFP4-style weight: float4 pairs read as bytes and unpacked by the model's own code."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("weight", every_byte(8))   # 8 x 32 pairs: 8 x 64 values
        self.register_buffer("scale", torch.rand(8, 1) + 0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        packed = self.weight.view(torch.uint8)            # @float4-view
        codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(8, 64)
        weight = E2M1.to(x.device)[codes.long()] * self.scale
        return weight, x @ weight.t()


def _run(program: onnxsight.ONNXProgram, *inputs: torch.Tensor) -> list[np.ndarray]:
    model = program.model_proto
    onnx.checker.check_model(model, full_check=True)
    feeds = {value.name: _onnx_array(t) for value, t in zip(model.graph.input, inputs)}
    return ReferenceEvaluator(model).run(None, feeds)


def _onnx_array(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as ONNX's reference evaluator takes it (float4 pairs as ml_dtypes float4 values)."""
    if tensor.dtype is FLOAT4:
        import ml_dtypes

        packed = tensor.view(torch.uint8).numpy()
        codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
        return codes.view(ml_dtypes.float4_e2m1fn)
    return tensor.numpy()


def _packed(values: np.ndarray) -> np.ndarray:
    """ONNX float4 values packed back into torch's pairs (uint8), through onnx's own packing."""
    data = numpy_helper.from_array(values, "v")
    return np.frombuffer(data.raw_data, dtype=np.uint8).reshape(*values.shape[:-1], -1)


def test_a_packed_weight_unpacked_by_the_model_matches_eager_bit_for_bit() -> None:
    model, x = PackedLinear(), torch.randn(3, 64)
    program = onnxsight.export(model, (x,))
    assert [o.version for o in program.model_proto.opset_import if o.domain == ""] == [23]
    (note,) = [d for d in program.diagnostics if d.code == "DTY006"]
    assert "float4_e2m1fn_x2" in note.message and "opset 23" in note.message and "buffer weight" in note.message
    weight = next(t for t in program.model_proto.graph.initializer if t.name == "weight")
    assert weight.data_type == onnx.TensorProto.FLOAT4E2M1 and list(weight.dims) == [8, 64]  # values, not pairs
    assert weight.raw_data == model.weight.view(torch.uint8).numpy().tobytes()             # the same bytes
    weight, out = _run(program, x)
    expected = model(x)
    np.testing.assert_array_equal(weight, expected[0].numpy())      # every value exact: bit for bit
    np.testing.assert_allclose(out, expected[1].numpy(), rtol=1e-5, atol=1e-5)   # a float32 matmul


class Views(torch.nn.Module):
    """Both byte views of a float4 weight, and bytes computed by the model returned as float4 pairs."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("weight", every_byte())

    def forward(self, flip: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        as_uint8 = self.weight.view(torch.uint8)
        return as_uint8, self.weight.view(torch.int8), (as_uint8 ^ flip).view(FLOAT4)


@pytest.mark.parametrize("flip", [0x00, 0x88, 0x5A], ids=["same", "signs", "mixed"])
def test_byte_views_both_ways_match_eager(flip: int) -> None:
    model, flips = Views(), torch.full((4, 64), flip, dtype=torch.uint8)
    program = onnxsight.export(model, (flips,))
    as_uint8, as_int8, as_float4 = _run(program, flips)
    expected = model(flips)
    np.testing.assert_array_equal(as_uint8, expected[0].numpy())
    np.testing.assert_array_equal(as_int8, expected[1].numpy())
    output = program.model_proto.graph.output[2].type.tensor_type
    assert output.elem_type == onnx.TensorProto.FLOAT4E2M1
    assert [d.dim_value for d in output.shape.dim] == [4, 128]
    np.testing.assert_array_equal(_packed(as_float4), expected[2].view(torch.uint8).numpy())


def test_a_float4_input_is_a_float4e2m1_graph_input() -> None:
    class Unpack(torch.nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            packed = q.view(torch.uint8)
            return E2M1[(packed & 0xF).long()] + E2M1[(packed >> 4).long()] * 10

    model, q = Unpack(), every_byte(16)
    program = onnxsight.export(model, (q,))
    (value,) = program.model_proto.graph.input
    assert value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT4E2M1
    assert [d.dim_value for d in value.type.tensor_type.shape.dim] == [16, 32]
    (out,) = _run(program, q)
    np.testing.assert_array_equal(out, model(q).numpy())


def test_empty_float4_as_torch_onnx_exports_it() -> None:
    class Empty(torch.nn.Module):   # torch.onnx's own float4 test
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.empty([3, 1], dtype=FLOAT4), x + 1

    program = onnxsight.export(Empty(), (torch.randn(2),))
    output = program.model_proto.graph.output[0].type.tensor_type
    assert output.elem_type == onnx.TensorProto.FLOAT4E2M1
    assert [d.dim_value for d in output.shape.dim] == [3, 2]
    empty, _ = _run(program, torch.randn(2))
    assert empty.shape == (3, 2)


def test_at_a_chosen_opset_below_23_it_is_refused_at_the_users_line() -> None:
    with pytest.raises(ExportError) as info:
        onnxsight.export(PackedLinear(), (torch.randn(3, 64),), opset_version=18)
    (error,) = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert error.code == "DTY005"
    assert "float4_e2m1fn_x2" in error.message and "opset 23" in error.message and "opset 18" in error.message
    assert error.location is not None and error.location.file == __file__
    assert "@float4-view" in (error.location.code or "")


def test_verify_lists_what_onnxruntime_cannot_run_and_does_not_pass() -> None:
    program = onnxsight.export(PackedLinear(), (torch.randn(3, 64),), verify=True)
    result = program.verification
    assert not result.passed
    assert not result.coverage["compared"].any()
    assert set(result.coverage["reason"]) == {"weight", "graph input", "not reached"}
    (missing,) = {d.message for d in program.diagnostics if d.code == "DTY002"}
    assert "Cast" in missing and "float4e2m1" in missing
    assert any(d.code == "ORT001" for d in program.diagnostics)


def test_a_shape_op_on_packed_pairs_is_refused_naming_the_op() -> None:
    class Slice(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("weight", every_byte())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.weight[:, :2].view(torch.uint8)   # slices pairs: 4 values in ONNX's count

    with pytest.raises(ExportError) as info:
        onnxsight.export(Slice(), (torch.randn(4, 2),))
    (error,) = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert error.code == "DTY007" and "aten.slice.Tensor on weight of dtype" in error.message
    assert error.location is not None and error.location.file == __file__


def test_saved_with_external_data_the_weight_keeps_its_bytes(tmp_path) -> None:
    model = PackedLinear()
    program = onnxsight.export(model, (torch.randn(3, 64),))
    path = tmp_path / "m.onnx"
    program.save(path, external_data=True)
    loaded = onnx.load(path)
    weight = next(t for t in loaded.graph.initializer if t.name == "weight")
    assert weight.data_type == onnx.TensorProto.FLOAT4E2M1 and list(weight.dims) == [8, 64]
    np.testing.assert_array_equal(_packed(numpy_helper.to_array(weight)), model.weight.view(torch.uint8).numpy())
