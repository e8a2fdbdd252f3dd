"""Layer, group, batch, instance and RMS normalisation, with the ONNX op each opset allows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.exporter.ops.nn_checks import export_and_compare
from tests.exporter.ops.opinfo_harness import assert_op_passes

aten = torch.ops.aten

OPS = ["nn.functional.layer_norm", "nn.functional.group_norm", "nn.functional.batch_norm",
       "nn.functional.instance_norm", "native_layer_norm",
       "native_group_norm", "native_batch_norm", "_native_batch_norm_legit", "_batch_norm_with_update", "nn.functional.rms_norm",
       "nn.functional.local_response_norm", "nn.functional.normalize"]


@pytest.mark.parametrize("name", OPS)
def test_opinfo(name: str) -> None:
    assert_op_passes(name)


@pytest.mark.parametrize("opset", [18, 23])
def test_rms_norm_opinfo_at_23(opset: int) -> None:
    assert_op_passes("nn.functional.rms_norm", opset=opset)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_norm_opinfo_by_opset(opset: int) -> None:
    assert_op_passes("nn.functional.group_norm", opset=opset)
    assert_op_passes("native_group_norm", opset=opset)


def test_layer_norm_is_layer_normalization() -> None:
    ops = export_and_compare(torch.nn.LayerNorm(6), torch.randn(2, 3, 6))
    assert ops.count("LayerNormalization") == 1
    ops = export_and_compare(lambda x: F.layer_norm(x, (3, 6)), torch.randn(2, 3, 6))
    assert ops.count("LayerNormalization") == 1


def test_native_layer_norm_statistics() -> None:
    def stats(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return aten.native_layer_norm(x, [4], w, b, 1e-5)
    ops = export_and_compare(stats, torch.randn(3, 5, 4), torch.randn(4), torch.randn(4))
    assert ops.count("LayerNormalization") == 1


@pytest.mark.parametrize(("opset", "op_type"), [(18, "InstanceNormalization"), (20, "InstanceNormalization"),
                                                (21, "GroupNormalization"), (23, "GroupNormalization")])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_by_opset(opset: int, op_type: str, affine: bool) -> None:
    module = torch.nn.GroupNorm(3, 6, affine=affine)
    if affine:
        torch.nn.init.normal_(module.weight)
        torch.nn.init.normal_(module.bias)
    ops = export_and_compare(module, torch.randn(2, 6, 4, 5), opset=opset)
    assert op_type in ops


@pytest.mark.parametrize("opset", [18, 21])
def test_native_group_norm_statistics(opset: int) -> None:
    def stats(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return aten.native_group_norm(x, w, b, 2, 6, 20, 3, 1e-5)
    export_and_compare(stats, torch.randn(2, 6, 4, 5), torch.randn(6), torch.randn(6), opset=opset)


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_eval_is_batch_normalization(affine: bool) -> None:
    module = torch.nn.BatchNorm2d(3, affine=affine)
    module.running_mean.normal_()
    module.running_var.uniform_(0.5, 2)
    ops = export_and_compare(module, torch.randn(2, 3, 4, 4))
    assert ops.count("BatchNormalization") == 1


def test_batch_norm_batch_statistics() -> None:
    export_and_compare(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), torch.randn(4, 3, 5),
                       torch.randn(3), torch.randn(3))


@pytest.mark.parametrize("affine", [True, False])
def test_instance_norm(affine: bool) -> None:
    ops = export_and_compare(torch.nn.InstanceNorm2d(3, affine=affine), torch.randn(2, 3, 4, 5))
    assert "InstanceNormalization" in ops


def test_instance_norm_running_stats() -> None:
    module = torch.nn.InstanceNorm1d(3, track_running_stats=True).eval()
    module.running_mean.normal_()
    ops = export_and_compare(module, torch.randn(2, 3, 7))
    assert "BatchNormalization" in ops


@pytest.mark.parametrize(("opset", "fused"), [(18, False), (22, False), (23, True)])
@pytest.mark.parametrize("shape", [(5,), (4, 5)])
def test_rms_norm_by_opset(opset: int, fused: bool, shape: tuple[int, ...]) -> None:
    module = torch.nn.RMSNorm(shape, eps=1e-6)
    torch.nn.init.normal_(module.weight)
    ops = export_and_compare(module, torch.randn(2, 4, 5), opset=opset)
    assert ("RMSNormalization" in ops) == fused
    ops = export_and_compare(lambda x: F.rms_norm(x, shape), torch.randn(2, 4, 5), opset=opset)
    assert ("RMSNormalization" in ops) == fused
