"""The vision suites' BatchNorm calibration (pure torch: runs without torchvision or timm)."""

from __future__ import annotations

import pytest
import torch

from onnxsight.zoo.suites._vision import calibrate_batchnorm, scene


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.norm = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.5)
        self.head = torch.nn.Linear(4, 2)
        torch.nn.init.zeros_(self.head.weight)  # timm's zero-initialized heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.norm(self.conv(x)).mean((2, 3))))


def test_statistics_are_the_examples_and_affine_is_random() -> None:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 3, 8, 8) * 3 + 1
    calibrate_batchnorm(model, (x,), {})
    features = model.conv(x)
    torch.testing.assert_close(model.norm.running_mean, features.mean((0, 2, 3)))
    torch.testing.assert_close(model.norm.running_var, features.var((0, 2, 3), unbiased=True))
    assert not torch.allclose(model.norm.weight, torch.ones(4)) and model.norm.bias.abs().sum() > 0
    assert model.head.weight.abs().sum() > 0, "a zero head hides the network behind an output of 0"
    assert not model.training and not model.norm.training and model.norm.momentum == 0.1


@pytest.mark.parametrize("seed", [0, 1])
def test_calibrated_model_is_deterministic_in_eval(seed: int) -> None:
    """Dropout stays off during calibration and after it: two eval calls agree, and outputs have a scale."""
    torch.manual_seed(seed)
    model, x = Net(), torch.randn(2, 3, 8, 8)
    calibrate_batchnorm(model, (x,), {})
    with torch.no_grad():
        first, second = model(x), model(x)
    assert torch.equal(first, second) and first.abs().max() > 1e-3


def test_scene_has_several_objects() -> None:
    image = scene(64, 80)
    assert image.shape == (3, 64, 80) and 0 <= image.min() and image.max() <= 1
    assert (image.amax(0) > 0.4).float().mean() > 0.05  # bright rectangles on a dim background
    assert torch.equal(image, scene(64, 80)) and not torch.equal(image, scene(64, 80, seed=1))


def test_statistics_average_over_every_calibration_input() -> None:
    """Several inputs (more images, a second size): the running statistics are their average, not the last's."""
    torch.manual_seed(0)
    model, x, y = Net(), torch.randn(2, 3, 8, 8), torch.randn(4, 3, 12, 12) * 2 + 3
    calibrate_batchnorm(model, (x,), {}, more=[((y,), {})])
    means = [model.conv(t).mean((0, 2, 3)) for t in (x, y)]
    torch.testing.assert_close(model.norm.running_mean, (means[0] + means[1]) / 2)
