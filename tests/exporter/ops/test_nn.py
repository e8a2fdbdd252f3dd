"""Convolution, pooling, resize, pixel shuffle, padding, activations, softmax and dropout."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import onnxsight

from tests.exporter.ops.nn_checks import assert_samples_pass, count, export_and_compare
from tests.exporter.ops.opinfo_harness import assert_op_passes

CONV = ["nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d", "nn.functional.conv_transpose1d",
        "nn.functional.conv_transpose2d", "nn.functional.conv_transpose3d"]
POOL = ["nn.functional.max_pool1d", "nn.functional.max_pool2d", "nn.functional.max_pool3d",
        "nn.functional.avg_pool1d", "nn.functional.avg_pool2d", "nn.functional.avg_pool3d",
        "nn.functional.adaptive_avg_pool1d", "nn.functional.adaptive_avg_pool2d", "nn.functional.adaptive_avg_pool3d",
        "nn.functional.adaptive_max_pool1d", "nn.functional.adaptive_max_pool2d", "nn.functional.adaptive_max_pool3d"]
RESIZE = ["nn.functional.interpolate.nearest", "nn.functional.interpolate.bilinear",
          "nn.functional.interpolate.bicubic", "nn.functional.interpolate.linear",
          "nn.functional.interpolate.trilinear", "nn.functional.interpolate.area",
          "nn.functional.upsample_bilinear", "nn.functional.upsample_nearest",
          "nn.functional.pixel_shuffle", "nn.functional.pixel_unshuffle"]
ACTIVATIONS = ["nn.functional.gelu", "nn.functional.silu", "nn.functional.hardtanh", "nn.functional.relu6",
               "nn.functional.leaky_relu", "nn.functional.elu", "nn.functional.celu", "nn.functional.selu",
               "nn.functional.softplus", "nn.functional.hardswish", "nn.functional.hardsigmoid", "nn.functional.mish",
               "nn.functional.prelu", "nn.functional.glu", "nn.functional.logsigmoid", "softmax", "log_softmax",
               "softmax.with_dtype", "log_softmax.with_dtype"]
PAD = ["nn.functional.pad.reflect", "nn.functional.pad.replicate", "nn.functional.pad.replicate_negative"]


@pytest.mark.parametrize("name", CONV + POOL + RESIZE + ACTIVATIONS + PAD)
def test_opinfo(name: str) -> None:
    assert_op_passes(name)


def test_opinfo_dropout_deterministic_samples() -> None:
    assert_samples_pass("nn.functional.dropout",
                        keep=lambda s: s.kwargs.get("training", True) is False or s.kwargs.get("p", 0.5) == 0)


# -- opset variants -------------------------------------------------------------------------------------
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize(("opset", "fused"), [(18, False), (20, True), (23, True)])
def test_gelu_uses_onnx_gelu_from_opset_20(approximate: str, opset: int, fused: bool) -> None:
    ops = export_and_compare(lambda x: F.gelu(x, approximate=approximate), torch.randn(3, 7) * 3, opset=opset)
    assert ("Gelu" in ops) == fused
    if not fused:
        assert ("Erf" if approximate == "none" else "Tanh") in ops


@pytest.mark.parametrize(("opset", "fused"), [(17, False), (18, True)])
def test_mish_uses_onnx_mish_from_opset_18(opset: int, fused: bool) -> None:
    ops = export_and_compare(F.mish, torch.randn(4, 5) * 3, opset=opset)
    assert ("Mish" in ops) == fused


@pytest.mark.parametrize(("fn", "op_type"), [(F.hardswish, "HardSwish"), (F.hardsigmoid, "HardSigmoid"),
                                             (F.selu, "Selu"), (F.celu, "Celu"), (F.silu, "Sigmoid"),
                                             (F.relu6, "Clip"), (F.elu, "Elu")])
def test_activations_are_single_onnx_ops(fn: object, op_type: str) -> None:
    ops = export_and_compare(fn, torch.randn(3, 8) * 4)
    assert op_type in ops


def test_prelu_is_onnx_prelu() -> None:
    ops = export_and_compare(torch.nn.PReLU(3), torch.randn(2, 3, 4))
    assert "PRelu" in ops


def test_softmax_half_to_float_and_0d() -> None:
    export_and_compare(lambda x: torch.softmax(x, 0), torch.tensor(1.5))
    export_and_compare(lambda x: torch.log_softmax(x, -1, dtype=torch.float64), torch.randn(2, 5))


def test_rrelu_in_eval_is_leaky_relu() -> None:
    ops = export_and_compare(torch.nn.RReLU(0.1, 0.3), torch.randn(4, 6))
    assert "LeakyRelu" in ops


def test_dropout_in_eval_is_identity() -> None:
    ops = export_and_compare(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)), torch.randn(2, 4))
    assert "Dropout" not in ops


# -- convolution -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", [
    torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2),
    torch.nn.Conv1d(3, 3, 2, padding="same"),
    torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1),
    torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=0, output_padding=1, groups=2, dilation=3, bias=True),
])
def test_convolution(module: torch.nn.Module) -> None:
    rank = 3 if isinstance(module, torch.nn.Conv1d) else 4
    x = torch.randn(*[2, module.in_channels, 9, 9][:rank])
    ops = export_and_compare(module, x)
    assert ("ConvTranspose" if isinstance(module, torch.nn.ConvTranspose2d) else "Conv") in ops


class ConvTBC(torch.nn.Module):
    """fairseq's time-batch-channel convolution, as upstream's test_conv_tbc writes it."""

    def __init__(self, pad: int) -> None:
        super().__init__()
        self.weight, self.bias, self.pad = torch.nn.Parameter(torch.randn(5, 3, 4)), torch.nn.Parameter(
            torch.randn(4)), pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.conv_tbc(x.contiguous(), self.weight, self.bias, self.pad)


@pytest.mark.parametrize("pad", [0, 2])
def test_conv_tbc(pad: int) -> None:
    ops = export_and_compare(ConvTBC(pad), torch.randn(10, 7, 3))
    assert count(ops, "Conv") == 1


@pytest.mark.parametrize("transposed", [False, True])
def test_convolution_with_backend_flags(transposed: bool) -> None:
    """aten._convolution (both overloads): torch.jit-era code calling it with cudnn/TF32 flags."""
    weight = torch.randn(4, 3, 3, 3) if not transposed else torch.randn(3, 2, 3, 3)

    def both(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        common = (x, weight, None, [2, 2], [1, 0], [1, 1], transposed, [0, 0], 1, False, False, True)
        return torch._convolution(*common, True), torch._convolution(*common)

    ops = export_and_compare(both, torch.randn(1, 3, 9, 8))
    assert count(ops, "ConvTranspose" if transposed else "Conv") == 2


def test_conv_dynamic_batch() -> None:
    conv = torch.nn.Conv2d(3, 4, 3)
    batch = torch.export.Dim("batch")
    export_and_compare(conv, torch.randn(2, 3, 8, 8), dynamic_shapes=({0: batch},))


# -- pooling -----------------------------------------------------------------------------------------------
def test_max_pool_indices_only_when_used() -> None:
    x = torch.randn(2, 3, 8, 8)
    ops = export_and_compare(lambda t: F.max_pool2d(t, 2), x)
    assert "Mod" not in ops
    ops = export_and_compare(lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True), x)
    assert "Mod" in ops


def test_max_pool_indices_dynamic_shape() -> None:
    size = torch.export.Dim("size", min=4, max=64)
    export_and_compare(lambda t: F.max_pool2d(t, 2, return_indices=True), torch.randn(1, 2, 8, 8),
                       dynamic_shapes=(({2: size},),))


@pytest.mark.parametrize(("output", "op_type"), [(4, "AveragePool"), (3, "MatMul")])
def test_adaptive_avg_pool_forms(output: int, op_type: str) -> None:
    ops = export_and_compare(lambda t: F.adaptive_avg_pool2d(t, output), torch.randn(2, 3, 8, 8))
    assert op_type in ops


def test_adaptive_avg_pool_to_one_is_global() -> None:
    # F.adaptive_avg_pool2d(x, 1) reaches us as mean.dim; the ATen op itself becomes GlobalAveragePool.
    ops = export_and_compare(lambda t: torch.ops.aten._adaptive_avg_pool2d(t, [1, 1]), torch.randn(2, 3, 5, 7))
    assert ops == ["GlobalAveragePool"]


@pytest.mark.parametrize("kwargs", [dict(ceil_mode=True, count_include_pad=True, padding=1),
                                    dict(ceil_mode=True, count_include_pad=False, padding=1),
                                    dict(divisor_override=3), dict(divisor_override=5, ceil_mode=True)])
def test_avg_pool_torch_divisors(kwargs: dict) -> None:
    export_and_compare(lambda t: F.avg_pool2d(t, 3, 2, **kwargs), torch.randn(1, 2, 8, 8))


def test_unbatched_pooling() -> None:
    export_and_compare(lambda t: F.max_pool2d(t, 2, return_indices=True), torch.randn(3, 6, 6))
    export_and_compare(lambda t: F.avg_pool2d(t, 2), torch.randn(3, 6, 6))


# -- resize --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [
    dict(scale_factor=2, mode="nearest"), dict(size=(5, 7), mode="nearest"),
    dict(scale_factor=1.7, mode="bilinear"), dict(size=(3, 11), mode="bilinear", align_corners=True),
    dict(scale_factor=0.5, mode="bilinear"), dict(size=(1, 1), mode="bilinear"),
    dict(scale_factor=2, mode="bicubic"), dict(size=(9, 4), mode="bicubic", align_corners=True),
])
def test_interpolate_2d(kwargs: dict) -> None:
    ops = export_and_compare(lambda t: F.interpolate(t, **kwargs), torch.randn(1, 2, 6, 6))
    assert ops.count("Resize") == 1


@pytest.mark.parametrize("kwargs", [dict(size=(5, 7), mode="bilinear"), dict(scale_factor=0.4, mode="bilinear"),
                                    dict(size=(5, 7), mode="bicubic"), dict(size=(20, 30), mode="bilinear")])
def test_interpolate_antialias(kwargs: dict) -> None:
    ops = export_and_compare(lambda t: F.interpolate(t, antialias=True, **kwargs), torch.randn(1, 2, 12, 15))
    assert ops.count("Resize") == 1


def test_interpolate_antialias_needs_opset_18() -> None:
    import onnxsight

    with pytest.raises(onnxsight.ExportError, match="_upsample_bilinear2d_aa"):
        export_and_compare(lambda t: F.interpolate(t, size=(3, 3), mode="bilinear", antialias=True),
                           torch.randn(1, 2, 6, 6), opset=17)


def test_interpolate_dynamic_size() -> None:
    size = torch.export.Dim("size", min=2, max=64)
    export_and_compare(lambda t: F.interpolate(t, scale_factor=2.0, mode="bilinear"), torch.randn(1, 2, 6, 6),
                       dynamic_shapes=(({2: size, 3: size},),))


# -- pixel shuffle and padding ------------------------------------------------------------------------------
def test_pixel_shuffle_forms() -> None:
    ops = export_and_compare(lambda t: F.pixel_shuffle(t, 2), torch.randn(2, 8, 3, 3))
    assert ops.count("DepthToSpace") == 1
    export_and_compare(lambda t: F.pixel_shuffle(t, 2), torch.randn(2, 2, 8, 3, 3))
    export_and_compare(lambda t: F.pixel_unshuffle(t, 2), torch.randn(2, 3, 4, 6))
    export_and_compare(lambda t: F.pixel_unshuffle(t, 3), torch.randn(2, 2, 3, 6, 9))


def test_pixel_unshuffle_takes_integers_and_a_dynamic_channel_count() -> None:
    """int64 (ONNX Runtime's SpaceToDepth has no integer kernel) and a channel count known only at run time."""
    export_and_compare(lambda t: F.pixel_unshuffle(t, 2), torch.randint(-50, 50, (2, 3, 4, 6)))

    class Unshuffle(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.pixel_unshuffle(x, 2)

    channels = torch.export.Dim("channels")
    prog = onnxsight.export(Unshuffle(), (torch.randn(1, 3, 4, 4),), dynamic_shapes={"x": {1: channels}})
    x = torch.randn(1, 5, 4, 4)
    torch.testing.assert_close(prog(x)[0], F.pixel_unshuffle(x, 2))


@pytest.mark.parametrize(("mode", "pad", "rank"), [("reflect", (1, 2), 3), ("reflect", (1, 2, 2, 0), 4),
                                                   ("replicate", (0, 1, 2, 1, 1, 3), 5),
                                                   ("replicate", (2, 2, 1, 0), 4)])
def test_pads_are_one_onnx_pad(mode: str, pad: tuple, rank: int) -> None:
    ops = export_and_compare(lambda t: F.pad(t, pad, mode=mode), torch.randn(*[2, 3, 4, 5, 6][:rank]))
    assert ops.count("Pad") == 1
