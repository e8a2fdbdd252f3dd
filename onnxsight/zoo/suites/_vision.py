"""What the torchvision and timm suites share: a model table entry, BatchNorm calibration, example images.

Random weights alone make vision models a weak test: BatchNorm layers keep
their initial statistics (mean 0, variance 1) and affine (1, 0), so a
translation that drops the running mean, or swaps weight and bias, still
matches eager; deep CNNs can also collapse to outputs of ~1e-25, where every
comparison passes; timm zero-initializes some classifier heads (MLP-Mixer's),
which makes the output exactly 0. :func:`calibrate_batchnorm` gives every
all-zero Linear/Conv weight a random one, every BatchNorm random affine
parameters and the statistics of one train-mode pass over the example, then
puts the model back in eval mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

BATCH: Mapping[str, Mapping[int, str]] = {"x": {0: "batch"}}
BATCH_HW: Mapping[str, Mapping[int, str]] = {"x": {0: "batch", 2: "height", 3: "width"}}


@dataclass(frozen=True)
class VisionModel:
    """One row of a vision suite: the library's model name and how to build and call it.

    ``inputs`` makes the example inputs ``(args, kwargs)``; ``options`` go to the library's
    constructor (``weights=None`` and friends are added by the suite); ``dynamic`` is the
    ModelSpec's ``{input: {axis: name}}``; ``calibration`` makes the inputs BatchNorm statistics
    are taken from (default: the example), for models whose example is too small for that.
    """

    name: str
    tags: tuple[str, ...]
    inputs: Callable[[], tuple[tuple, dict]]
    dynamic: Mapping[str, Mapping[int, str]] | None = field(default_factory=lambda: BATCH_HW)
    options: Mapping[str, Any] = field(default_factory=dict)
    calibration: Callable[[], tuple[tuple, dict]] | None = None


def images(batch: int = 2, size: int | tuple[int, int] = 64, channels: int = 3) -> Callable[[], tuple[tuple, dict]]:
    """A batch of normalized random images, ``(batch, channels, H, W)``, as the only positional input.

    Its ``calibration`` attribute makes 16 other such images: statistics from the 2 example images alone
    fit them so closely (a late stage has 2x2 values per image) that the model blows up on any other
    input (timm's EfficientNet-B0: outputs of 7 at the example, 1253 at 65x65, where float32 eager itself
    is 2e-2 off float64), and the second-size comparison measures that instead of the export. A model that
    takes any size is also calibrated at 1.5x the size: at 64x64 the last stage is 2x2, every position a
    corner, and the centre positions of a 3x3 map (at 65x65) would meet statistics that never saw one."""
    height, width = (size, size) if isinstance(size, int) else size

    def make(count: int = batch) -> tuple[tuple, dict]:
        import torch

        return (torch.randn(count, channels, height, width),), {}

    def calibration(any_size: bool) -> list[tuple[tuple, dict]]:
        import torch

        sizes = [(height, width)] + ([(height * 3 // 2, width * 3 // 2)] if any_size else [])
        return [((torch.randn(16, channels, h, w),), {}) for h, w in sizes]

    make.calibration = calibration  # type: ignore[attr-defined]
    return make


def scene(height: int, width: int, *, objects: int = 5, seed: int = 0) -> Any:
    """One ``(3, H, W)`` image in [0, 1] with several bright rectangles on a dim noisy background:
    something for a detector's proposals to fire on, so post-processing keeps several boxes."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    image = torch.rand(3, height, width, generator=generator) * 0.2
    for _ in range(objects):
        h = int(torch.randint(height // 6, height // 2, (1,), generator=generator))
        w = int(torch.randint(width // 6, width // 2, (1,), generator=generator))
        top = int(torch.randint(0, height - h, (1,), generator=generator))
        left = int(torch.randint(0, width - w, (1,), generator=generator))
        image[:, top:top + h, left:left + w] = torch.rand(3, 1, 1, generator=generator) * 0.6 + 0.4
    return image


def calibrate_batchnorm(model: Any, args: tuple, kwargs: Mapping[str, Any], *, seed: int = 0,
                        more: Sequence[tuple[tuple, Mapping[str, Any]]] = ()) -> Any:
    """Random BatchNorm affine parameters and running statistics from one pass over the example.

    Only the BatchNorm layers run in train mode (``momentum=None``: the statistics become the
    average over the passes, one per input in ``(args, kwargs)`` and ``more``); everything else stays in eval mode, so dropout is off and detection
    models take the inference path without targets. Returns the model, in eval mode.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    _randomize_zero_weights(model, generator)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    model.eval()
    with torch.no_grad():
        for norm in norms:
            if norm.affine:
                norm.weight.copy_(torch.rand(norm.weight.shape, generator=generator) + 0.5)
                norm.bias.copy_(torch.randn(norm.bias.shape, generator=generator) * 0.1)
            if norm.track_running_stats:
                norm.reset_running_stats()
                norm.momentum, norm.saved_momentum = None, norm.momentum
                norm.train()
        for call_args, call_kwargs in [(args, kwargs), *more] if norms else []:
            model(*call_args, **call_kwargs)
        for norm in norms:
            if hasattr(norm, "saved_momentum"):
                norm.momentum = norm.saved_momentum
                del norm.saved_momentum
    return model.eval()


def _randomize_zero_weights(model: Any, generator: Any) -> None:
    """An all-zero Linear/Conv weight (a zero-initialized head) gets N(0, 0.02): a zero head hides the whole
    network behind an output of exactly 0."""
    import torch

    with torch.no_grad():
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if isinstance(module, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)) and weight is not None \
                    and weight.numel() and not weight.any():
                weight.copy_(torch.randn(weight.shape, generator=generator) * 0.02)


def calibration_inputs(entry: VisionModel, example: tuple[tuple, dict]) -> list[tuple[tuple, dict]]:
    """What BatchNorm statistics are taken from: the entry's own inputs, else its images' larger batches (and
    sizes, for a model whose height and width are dynamic), else the example."""
    if entry.calibration:
        return [entry.calibration()]
    make = getattr(entry.inputs, "calibration", None)
    any_size = any(2 in axes and 3 in axes for axes in (entry.dynamic or {}).values())
    return make(any_size) if make else [example]


def builder(entry: VisionModel, build_model: Callable[[VisionModel], tuple[Any, ...]]) -> Callable[[], tuple[Any, ...]]:
    """The zero-argument ``build`` a ModelSpec takes (it runs in the model's own process)."""
    def build() -> tuple[Any, ...]:
        return build_model(entry)
    build.__name__ = f"build_{entry.name}"
    return build
