"""Fake quantization as PyTorch's float arithmetic: outputs and masks equal to eager's, bit for bit."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import onnxsight
from tests.exporter.ops.eager_check import FunctionModule as _Fn

aten = torch.ops.aten



def _assert_exact(fn: Callable[..., Any], *args: torch.Tensor) -> list[str]:
    module = _Fn(fn)
    expected = module(*args)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    program = onnxsight.export(module, args)
    actual = program(*args)
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual):
        assert got.dtype == want.dtype and torch.equal(got, want), (want, got)
    return [node.op_type for node in program.model_proto.graph.node]


def _inputs(*shape: int) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(*shape) * 1.5
    x[0].view(-1)[:3] = torch.tensor([0.5, 1.5, -2.5]) / 127   # half steps: nearbyint rounds them to even
    return x


@pytest.mark.parametrize(("zero_point", "quant_min", "quant_max"), [(0, -128, 127), (3, 0, 255), (-2, -8, 7)])
def test_per_tensor(zero_point: int, quant_min: int, quant_max: int) -> None:
    ops = _assert_exact(lambda x: aten.fake_quantize_per_tensor_affine_cachemask(x, 1.0 / 127, zero_point,
                                                                                 quant_min, quant_max),
                        _inputs(6, 4, 3))
    assert "QuantizeLinear" not in ops and "Round" in ops


def test_per_tensor_through_the_public_function() -> None:
    """upstream's test_fake_quantize_per_tensor: the decomposed op, its mask unused."""
    _assert_exact(lambda x: torch.fake_quantize_per_tensor_affine(x, 1.0 / 127, 0, -128, 127), _inputs(6, 4, 3, 3))


@pytest.mark.parametrize("enabled", [1, 0])
def test_per_tensor_tensor_qparams(enabled: int) -> None:
    """Scale and zero point as tensors (QAT); fake_quant_enabled 0 passes the input through, mask all true."""
    scale, zero_point = torch.tensor([0.02]), torch.tensor([4], dtype=torch.int32)
    _assert_exact(lambda x, s, z, e: aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
        x, s, z, e, 0, 255), _inputs(5, 7), scale, zero_point, torch.tensor([enabled]))


def test_per_tensor_tensor_qparams_public_function() -> None:
    """upstream's test_fake_quantize_per_tensor_dynamic_scale_zeropoint."""
    _assert_exact(lambda x, s, z: torch.fake_quantize_per_tensor_affine(x, s, z, -128, 127),
                  _inputs(6, 4, 3, 3), torch.tensor(1.0 / 127), torch.tensor(0))


@pytest.mark.parametrize("axis", [0, 1, 3])
def test_per_channel(axis: int) -> None:
    x = _inputs(4, 5, 2, 3)
    channels = x.shape[axis]
    scale = torch.linspace(0.01, 0.05, channels)
    zero_point = torch.arange(channels, dtype=torch.int32) - 1
    _assert_exact(lambda t, s, z: aten.fake_quantize_per_channel_affine_cachemask(t, s, z, axis, -128, 127),
                  x, scale, zero_point)


def test_per_channel_float_zero_point() -> None:
    """A float zero point is added before rounding, as PyTorch's per-channel kernel does."""
    x = _inputs(3, 4)
    scale, zero_point = torch.tensor([0.1, 0.2, 0.3, 0.05]), torch.tensor([0.4, 1.6, -2.5, 3.0])
    _assert_exact(lambda t, s, z: aten.fake_quantize_per_channel_affine_cachemask(t, s, z, 1, 0, 255),
                  x, scale, zero_point)


def test_per_channel_twice_upstream() -> None:
    """upstream's test_fake_quantize_per_channel: two ranges on one input, the qparams computed in forward."""
    def twice(x: torch.Tensor) -> torch.Tensor:
        amax = torch.ones(4)
        scale = amax / 127.0
        zero_point = torch.zeros_like(amax, dtype=torch.int)
        y = torch.fake_quantize_per_channel_affine(x, scale, zero_point, 1, 0, 255)
        return torch.fake_quantize_per_channel_affine(y, scale, zero_point, 1, -128, 127)

    _assert_exact(twice, _inputs(6, 4, 3, 3))
