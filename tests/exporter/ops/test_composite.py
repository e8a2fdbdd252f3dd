"""Composite ATen ops translated as captured, so that export can skip run_decompositions."""

from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.nn.functional as F

import onnxsight


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor], params: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__()
        self.fn = fn
        for name, value in (params or {}).items():
            self.register_buffer(name, value)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(self, *xs)


W2, W1 = torch.randn(6, 3, 3, 3), torch.randn(4, 3, 5)
CASES: dict[str, tuple[Fn, tuple]] = {
    "conv2d": (Fn(lambda m, x: F.conv2d(x, m.w, m.b, stride=2, padding=1), {"w": W2, "b": torch.randn(6)}),
               (torch.randn(1, 3, 9, 9),)),
    "conv1d": (Fn(lambda m, x: F.conv1d(x, m.w, dilation=2), {"w": W1}), (torch.randn(2, 3, 16),)),
    "conv2d-same": (Fn(lambda m, x: F.conv2d(x, m.w, padding="same"), {"w": torch.randn(2, 3, 4, 3)}),
                    (torch.randn(1, 3, 8, 7),)),
    "conv2d-valid": (Fn(lambda m, x: F.conv2d(x, m.w, padding="valid"), {"w": W2}), (torch.randn(1, 3, 8, 8),)),
    "conv_transpose2d": (Fn(lambda m, x: F.conv_transpose2d(x, m.w, stride=2, output_padding=1),
                            {"w": torch.randn(3, 2, 3, 3)}), (torch.randn(1, 3, 5, 5),)),
    "batch_norm": (Fn(lambda m, x: F.batch_norm(x, m.rm, m.rv, m.w, m.b, eps=1e-3),
                      {"rm": torch.randn(3), "rv": torch.rand(3) + 0.5, "w": torch.randn(3), "b": torch.randn(3)}),
                   (torch.randn(2, 3, 4, 4),)),
    "max_pool2d": (Fn(lambda m, x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True)), (torch.randn(1, 2, 9, 9),)),
    "max_pool1d": (Fn(lambda m, x: F.max_pool1d(x, 2)), (torch.randn(1, 2, 9),)),
    "adaptive_avg_pool2d": (Fn(lambda m, x: F.adaptive_avg_pool2d(x, 1)), (torch.randn(2, 4, 7, 7),)),
    "adaptive_avg_pool1d": (Fn(lambda m, x: F.adaptive_avg_pool1d(x, 3)), (torch.randn(2, 4, 9),)),
    "pad-constant": (Fn(lambda m, x: F.pad(x, (1, 2, 0, 1), value=-3.0)), (torch.randn(2, 3, 4),)),
    "pad-reflect": (Fn(lambda m, x: F.pad(x, (2, 1), mode="reflect")), (torch.randn(2, 3, 5),)),
    "pad-replicate": (Fn(lambda m, x: F.pad(x, (1, 1, 2, 0), mode="replicate")), (torch.randn(1, 2, 4, 4),)),
    "pad-replicate-negative": (Fn(lambda m, x: F.pad(x, (-3, 4, 1, -2), mode="replicate")),
                               (torch.randn(1, 2, 4, 4),)),
    "pad-constant-negative": (Fn(lambda m, x: F.pad(x, (-1, 2), value=0.5)), (torch.randn(2, 5),)),
    "conv2d-unbatched": (Fn(lambda m, x: F.conv2d(x, m.w, padding=1), {"w": W2}), (torch.randn(3, 6, 6),)),
    "conv_transpose1d-unbatched": (Fn(lambda m, x: F.conv_transpose1d(x, m.w), {"w": torch.randn(3, 2, 3)}),
                                   (torch.randn(3, 7),)),
    "pad-circular": (Fn(lambda m, x: F.pad(x, (1, 2), mode="circular")), (torch.randn(1, 2, 5),)),
    "to-dtype": (Fn(lambda m, x: x.to(torch.int32) + 1), (torch.randn(3, 4) * 10,)),
    "to-dtype-layout": (Fn(lambda m, x: x.to(dtype=torch.float16, device="cpu")), (torch.randn(3),)),
    "flatten": (Fn(lambda m, x: torch.flatten(x, 1)), (torch.randn(2, 3, 4, 5),)),
    "flatten-middle": (Fn(lambda m, x: x.flatten(1, 2)), (torch.randn(2, 3, 4, 5),)),
    "unflatten": (Fn(lambda m, x: x.unflatten(1, (3, -1))), (torch.randn(2, 12, 5),)),
    "and": (Fn(lambda m, x: ((x > 0) & (x < 1)).to(torch.float32)), (torch.randn(10),)),
    "or": (Fn(lambda m, x: ((x > 1) | (x < -1)).to(torch.float32)), (torch.randn(10),)),
    "min-other": (Fn(lambda m, x, y: torch.min(x, y)), (torch.randn(5), torch.randn(5))),
    "max-other": (Fn(lambda m, x, y: torch.max(x, y)), (torch.randn(5), torch.randn(5))),
    "no-grad-block": (Fn(lambda m, x: _no_grad_twice(x)), (torch.randn(4),)),
}


def _no_grad_twice(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        y = x * 2
    return y + 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_translated_without_decomposition(name: str) -> None:
    model, args = CASES[name]
    program = onnxsight.export(model, args)
    decompose = next(s for s in program.record.stages if s.name == "decompose")
    assert decompose.status == "skipped", decompose.detail
    expected = model(*args)
    (actual,) = program(*args)
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-4)


def test_batch_norm_in_training_uses_batch_statistics() -> None:
    model = Fn(lambda m, x: F.batch_norm(x, None, None, training=True))
    x = torch.randn(4, 3, 2, 2)
    program = onnxsight.export(model, (x,))
    torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kwargs", [{}, {"n": 2}, {"dim": 0}, {"prepend": True}, {"append": True}])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_diff(kwargs: dict, dtype: torch.dtype) -> None:
    extra = {k: (torch.ones(3, 1) > 0).to(dtype) for k, v in kwargs.items() if v is True}
    options = {k: v for k, v in kwargs.items() if v is not True}
    x = (torch.randn(3, 5) * 4).to(dtype) if dtype != torch.bool else torch.randn(3, 5) > 0
    model = Fn(lambda m, t: torch.diff(t, **options, **extra))
    program = onnxsight.export(model, (x,))
    assert next(s for s in program.record.stages if s.name == "decompose").status == "skipped"
    torch.testing.assert_close(program(x)[0], model(x))
