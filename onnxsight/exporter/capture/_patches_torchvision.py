"""Replacements for torchvision's detection functions that torch.export cannot trace with dynamic shapes.

Each ``make_*`` takes the library's function and returns one that computes the
same values in a form torch.export traces: sizes as SymInts (``torch.sym_min``,
integer ceil-division) instead of Python floats or ``min()`` guards, ``shape[0]``
instead of ``len()``, no branch on a data-dependent count. The table that says
where each goes and why is ``_patches.PATCHES``. torchvision is imported only
when a patched function runs, i.e. when the model already uses torchvision.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
from torch import Tensor


def make_batched_nms(original: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """torchvision's coordinate trick for every box count, without its empty-input branch."""
    def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
        from torchvision.ops import nms

        # NOTE: boxes.max() of no boxes raises; a -inf row leaves the max of any other box unchanged.
        max_coordinate = torch.cat([boxes.reshape(-1), boxes.new_full((1,), float("-inf"))]).max()
        offsets = idxs.to(boxes) * (max_coordinate + torch.tensor(1).to(boxes))
        return nms(boxes + offsets[:, None], scores, iou_threshold)

    return batched_nms


def make_resize(original: Callable[..., Any]) -> Callable[..., Any]:
    """The eval-mode resize with the output size computed from SymInts (same floor of the same product)."""
    def resize_image_and_masks(image: Tensor, self_min_size: int, self_max_size: int,
                               target: Optional[dict[str, Tensor]] = None,
                               fixed_size: Optional[tuple[int, int]] = None) -> Any:
        if target is not None or fixed_size is not None:
            return original(image, self_min_size, self_max_size, target, fixed_size)
        height, width = image.shape[-2:]
        scale = torch.sym_min(self_min_size / torch.sym_min(height, width),
                              self_max_size / torch.sym_max(height, width))
        # F.interpolate(scale_factor=scale, recompute_scale_factor=True) computes floor(size * scale).
        size = [math.floor(height * scale), math.floor(width * scale)]
        resized = torch.nn.functional.interpolate(image[None], size=size, mode="bilinear", align_corners=False)
        return resized[0], target

    return resize_image_and_masks


def make_batch_images(original: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Zero padding to a multiple of ``size_divisible`` by F.pad, the size by integer ceil-division."""
    def batch_images(self: Any, images: list[Tensor], size_divisible: int = 32) -> Tensor:
        padded = []
        for image in images:
            height, width = image.shape[-2:]
            pad_h = (height + size_divisible - 1) // size_divisible * size_divisible - height
            pad_w = (width + size_divisible - 1) // size_divisible * size_divisible - width
            padded.append(torch.nn.functional.pad(image, (0, pad_w, 0, pad_h)))
        # NOTE: torchvision pads every image to the batch's largest; onnxsight exports one image per call.
        if any(p.shape != padded[0].shape for p in padded[1:]):
            return original(self, images, size_divisible)
        return torch.stack(padded)

    return batch_images


def make_topk_min(original: Callable[..., int]) -> Callable[..., Any]:
    """``min(k, size)`` as ``torch.sym_min``: no guard on the symbolic size."""
    def topk_min(input: Tensor, orig_kval: int, axis: int) -> Any:
        return torch.sym_min(orig_kval, input.size(axis))

    return topk_min


def make_multiscale_roi_align(original: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """torchvision's multi-level RoIAlign with ``rois.shape[0]`` where it calls ``len(rois)``."""
    def multiscale_roi_align(x_filtered: list[Tensor], boxes: list[Tensor], output_size: list[int],
                             sampling_ratio: int, scales: Optional[list[float]], mapper: Any) -> Tensor:
        from torchvision.ops import poolers

        if scales is None or mapper is None:
            return original(x_filtered, boxes, output_size, sampling_ratio, scales, mapper)
        rois = poolers._convert_to_roi_format(boxes)
        if len(x_filtered) == 1:
            return poolers.roi_align(x_filtered[0], rois, output_size=output_size, spatial_scale=scales[0],
                                     sampling_ratio=sampling_ratio)
        levels = mapper(boxes)
        first = x_filtered[0]
        result = first.new_zeros((rois.shape[0], first.shape[1], *output_size))
        for level, (feature, scale) in enumerate(zip(x_filtered, scales)):
            index = torch.where(levels == level)[0]
            pooled = poolers.roi_align(feature, rois[index], output_size=output_size, spatial_scale=scale,
                                       sampling_ratio=sampling_ratio)
            result[index] = pooled.to(result.dtype)
        return result

    return multiscale_roi_align


def make_paste_masks(original: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Every mask pasted at once: its bilinear resize to the box and the paste as two weight matrices.

    torchvision loops over the detections in Python (``int(box[2] - box[0] + 1)`` per box).
    Here row ``y`` of a detection's image mask is ``rows[y] @ mask @ cols.T``, where ``rows``
    holds, for each image row inside the box, the two bilinear weights F.interpolate
    (align_corners=False) gives the mask rows, and zeros outside the box: the same sums
    as resizing then pasting.
    """
    def paste_masks_in_image(masks: Tensor, boxes: Tensor, img_shape: tuple[int, int], padding: int = 1) -> Tensor:
        from torchvision.models.detection import roi_heads

        masks, scale = roi_heads.expand_masks(masks, padding=padding)
        boxes = roi_heads.expand_boxes(boxes, scale).to(dtype=torch.int64)
        im_h, im_w = img_shape
        size = masks.shape[-1]
        rows = _paste_weights(boxes[:, 1], boxes[:, 3], im_h, size, masks.dtype)
        cols = _paste_weights(boxes[:, 0], boxes[:, 2], im_w, size, masks.dtype)
        return (rows @ masks[:, 0] @ cols.transpose(1, 2))[:, None]

    return paste_masks_in_image


def _paste_weights(start: Tensor, end: Tensor, length: Any, size: int, dtype: torch.dtype) -> Tensor:
    """[N, length, size]: bilinear weights of the ``size`` mask samples for each pixel of [start, end]."""
    extent = torch.clamp(end - start + 1, min=1)
    pixel = torch.arange(length, device=start.device)[None, :]
    offset = pixel - start[:, None]
    inside = (offset >= 0) & (pixel <= end[:, None])
    # NOTE: ATen's upsample_bilinear2d: src = (in / out) * (dst + 0.5) - 0.5 in float, clamped at 0.
    ratio = (torch.tensor(float(size), dtype=torch.float32) / extent.to(torch.float32))[:, None]
    source = torch.clamp(ratio * (offset.to(torch.float32) + 0.5) - 0.5, min=0)
    low = source.to(torch.int64)
    high = low + (low < size - 1).to(torch.int64)
    frac = (source - low.to(torch.float32))[..., None]
    sample = torch.arange(size, device=start.device)
    weights = (1 - frac) * (sample == low[..., None]) + frac * (sample == high[..., None])
    return (weights * inside[..., None]).to(dtype)


def make_heatmaps_to_keypoints(original: Callable[..., Any]) -> Callable[..., Any]:
    """Every RoI's keypoints at once: its bicubic resize as two weight matrices on a shared canvas.

    torchvision resizes each RoI's heatmaps to ceil(box size) in a Python loop
    (``int(widths_ceil[i].item())``). Here all RoIs are resized onto a canvas of the
    largest size; cells outside an RoI's own size are -inf, so the argmax (first
    maximum in row-major order, as torch's) and the score are those of its own map.
    """
    def heatmaps_to_keypoints(maps: Tensor, rois: Tensor) -> tuple[Tensor, Tensor]:
        widths = (rois[:, 2] - rois[:, 0]).clamp(min=1)
        heights = (rois[:, 3] - rois[:, 1]).clamp(min=1)
        widths_ceil, heights_ceil = widths.ceil(), heights.ceil()
        count, keypoints, size = maps.shape[0], maps.shape[1], maps.shape[-1]
        one = widths.new_ones(1)   # a canvas of at least 1x1 when there are no RoIs
        width = int(torch.cat([widths_ceil, one]).max().item())
        height = int(torch.cat([heights_ceil, one]).max().item())
        rows = _cubic_weights(heights_ceil, height, size)       # [N, height, size]
        cols = _cubic_weights(widths_ceil, width, size)         # [N, width, size]
        roi_map = rows[:, None] @ maps @ cols[:, None].transpose(-1, -2)   # [N, K, height, width]
        inside = (torch.arange(height)[None, :] < heights_ceil[:, None])[:, :, None] & \
            (torch.arange(width)[None, :] < widths_ceil[:, None])[:, None, :]
        flat = roi_map.masked_fill(~inside[:, None], float("-inf")).reshape(count, keypoints, height * width)
        pos = flat.argmax(dim=2)
        x_int, y_int = pos % width, torch.div(pos, width, rounding_mode="floor")
        x = (x_int.float() + 0.5) * (widths / widths_ceil)[:, None] + rois[:, 0:1]
        y = (y_int.float() + 0.5) * (heights / heights_ceil)[:, None] + rois[:, 1:2]
        xy_preds = torch.stack([x, y, torch.ones_like(x)], dim=2)
        return xy_preds, flat.gather(2, pos[..., None])[..., 0]

    return heatmaps_to_keypoints


_A = -0.75   # ATen's bicubic convolution parameter


def _cubic_weights(extent: Tensor, length: Any, size: int) -> Tensor:
    """[N, length, size]: F.interpolate's bicubic weights (align_corners=False) from ``size`` samples to
    ``extent`` (per RoI) outputs; rows at or beyond an RoI's extent are zero."""
    pixel = torch.arange(length, device=extent.device)[None, :].to(torch.float32)
    ratio = (torch.tensor(float(size), dtype=torch.float32) / extent)[:, None]
    source = ratio * (pixel + 0.5) - 0.5   # no clamp at 0 for cubic
    base = torch.floor(source)
    t = (source - base)[..., None]
    taps = base.to(torch.int64)[..., None] + torch.arange(-1, 3, device=extent.device)    # [N, L, 4]
    x1, x2 = t + 1, 2 - t
    near = lambda x: ((_A + 2) * x - (_A + 3)) * x * x + 1                                  # noqa: E731
    far = lambda x: ((_A * x - 5 * _A) * x + 8 * _A) * x - 4 * _A                           # noqa: E731
    coeffs = torch.cat([far(x1), near(t), near(1 - t), far(x2)], dim=-1)                   # [N, L, 4]
    onehot = taps.clamp(0, size - 1)[..., None] == torch.arange(size, device=extent.device)  # [N, L, 4, size]
    weights = (coeffs[..., None] * onehot).sum(dim=2)
    return weights * (pixel < extent[:, None])[..., None]
