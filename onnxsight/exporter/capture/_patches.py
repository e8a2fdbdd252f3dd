"""Capture patches: library functions replaced for the duration of capture, kept as data.

torch.export (the current torch.onnx exporter too) stops in torchvision's detection
post-processing: ``batched_nms`` branches on the number of boxes, the transform
computes the resized image size with Python floats and ``min()`` (a guard that
makes the image size static), the RoI pooler calls ``len()`` on a data-dependent
number of boxes. torchvision's own ``_is_tracing()`` paths were written for the
TorchScript tracer (tensors where sizes belong, ``scale_factor`` as a tensor) and
do not trace either. Each entry of :data:`PATCHES` names the library function,
its replacement (``_patches_torchvision``) and why; :func:`applied` installs the
entries whose scope the model uses, reports each (CAP010, or CAP011 when the
library does not have the function), and restores the originals when capture ends.
A library is never imported here: a model that uses it has imported it.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter.capture import _patches_torchvision as tv


@dataclass(frozen=True)
class Patch:
    """``module``'s ``attribute`` (``Class.method`` for a method) replaced by ``make(original)``.

    Applied only to a model with a submodule whose class is defined under ``scope``.
    """

    module: str
    attribute: str
    make: Callable[[Callable[..., Any]], Callable[..., Any]]
    why: str
    scope: str

    @property
    def function(self) -> str:
        return f"{self.module}.{self.attribute}"


_DETECTION = "torchvision.models.detection"

PATCHES: tuple[Patch, ...] = (
    Patch("torchvision.ops.boxes", "batched_nms", tv.make_batched_nms,
          "it picks a per-class loop over torch.unique(idxs) when there are more than 4000 box coordinates, "
          "a branch on the data-dependent number of boxes; the replacement always runs torchvision's "
          "coordinate-offset form (its path for tracing and for GPUs)", _DETECTION),
    Patch("torchvision.models.detection.transform", "_resize_image_and_masks", tv.make_resize,
          "it computes the resized size with min() and float() of the image size, which makes the image "
          "size static; the replacement computes the same floor(size * scale) with torch.sym_min", _DETECTION),
    Patch("torchvision.models.detection.transform", "GeneralizedRCNNTransform.batch_images", tv.make_batch_images,
          "it rounds the padded size up with float() and math.ceil, which makes the image size static; the "
          "replacement pads with F.pad to the size from integer ceil-division", _DETECTION),
    Patch("torchvision.models.detection._utils", "_topk_min", tv.make_topk_min,
          "min(k, size) guards on the symbolic number of candidates; the replacement uses torch.sym_min",
          _DETECTION),
    Patch("torchvision.ops.poolers", "_multiscale_roi_align", tv.make_multiscale_roi_align,
          "it calls len() on the data-dependent number of RoIs; the replacement reads rois.shape[0]", _DETECTION),
    Patch("torchvision.models.detection.transform", "paste_masks_in_image", tv.make_paste_masks,
          "it pastes each detection's mask in a Python loop with int() of its box; the replacement pastes "
          "all masks at once with the same bilinear weights as two matrix products", _DETECTION),
    Patch("torchvision.models.detection.roi_heads", "heatmaps_to_keypoints", tv.make_heatmaps_to_keypoints,
          "it resizes each RoI's heatmaps to int(box size) in a Python loop; the replacement resizes all at once "
          "with the same bicubic weights onto the largest RoI's canvas and masks the rest", _DETECTION),
)


def uses(model: torch.nn.Module, scope: str) -> bool:
    """Whether any submodule of ``model`` is an instance of a class defined under ``scope``."""
    prefix = scope + "."
    return any(type(m).__module__ == scope or type(m).__module__.startswith(prefix) for m in model.modules())


def _resolve(patch: Patch) -> tuple[Any, str, Any]:
    """(owner object, attribute name, original); raises LookupError naming what is missing."""
    owner: Any = sys.modules.get(patch.module)
    if owner is None:
        raise LookupError(f"module {patch.module} is not imported")
    *path, name = patch.attribute.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            raise LookupError(f"{patch.module} has no attribute {part}")
    if name not in vars(owner):
        raise LookupError(f"{patch.module}.{'.'.join(path + [''])}{name} does not exist in this version")
    return owner, name, vars(owner)[name]


@contextlib.contextmanager
def applied(model: torch.nn.Module, ctx: DiagnosticContext,
            patches: tuple[Patch, ...] = PATCHES) -> Iterator[list[Patch]]:
    """Install the patches ``model`` needs until the block ends; yields those installed."""
    installed: list[tuple[Any, str, Any]] = []
    done: list[Patch] = []
    scopes = {scope: uses(model, scope) for scope in {p.scope for p in patches}}
    try:
        for patch in patches:
            if not scopes[patch.scope]:
                continue
            try:
                owner, name, original = _resolve(patch)
                replacement = patch.make(original)
            except Exception as exc:  # noqa: BLE001 - a library that changed is reported, capture goes on
                ctx.emit(rules.CAPTURE_PATCH_FAILED, function=patch.function, error=str(exc))
                continue
            setattr(owner, name, replacement)
            installed.append((owner, name, original))
            done.append(patch)
            ctx.emit(rules.CAPTURE_PATCH_APPLIED, function=patch.function,
                     replacement=f"{tv.__name__}.{patch.make.__name__}", why=patch.why)
        yield done
    finally:
        for owner, name, original in reversed(installed):
            setattr(owner, name, original)
