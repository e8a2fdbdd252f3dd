"""Output sizes and source coordinates of torch's upsampling, computed as ATen computes them.

ONNX ``Resize`` takes either ``scales`` (float32) or ``sizes``, never both; ONNX Runtime
derives the output size from scales as ``floor(float32(in) * scale)`` in float32, while
torch computes ``floor(in * scale)`` in double (``compute_output_size`` in
aten/src/ATen/native/UpSample.cpp): at 30 x 2.1 torch gives 63 and ONNX Runtime 62.
Torch then maps output to input coordinates with ``1/scale`` when it was given a scale
and with ``in/out`` otherwise (``compute_scales_value`` in UpSample.h), so ``sizes``
alone (ONNX's mapping ``in/out``) would move every sample at 7 x 1.3 -> 9.

The helpers here choose, per axis, the float32 scale closest to the user's whose
output size is torch's in float32 and in double (ONNX's shape inference computes in double) (a few ulps away: the coordinate mapping moves by about
1e-7 of a pixel), and compute torch's nearest-neighbour source indices exactly (float32
products, the ``out == in`` and ``out == 2 * in`` shortcuts of ``nearest_idx``), so that
nearest, whose indices flip on a 1e-7 change, is exported as a Gather of those indices
whenever a Resize would pick different pixels.
"""

from __future__ import annotations

import math

import numpy as np

#: How many float32 ulps a scale may be moved to make ONNX Runtime's size torch's.
MAX_ULPS = 4


def torch_output_size(in_size: int, scale: float) -> int:
    """``floor(in * scale)`` in double, as ``compute_output_size`` does for a scale factor."""
    return int(math.floor(float(in_size) * float(scale)))


def ort_output_size(in_size: int, scale32: np.float32) -> int:
    """ONNX Runtime's output size from a float32 scale: ``floor(float32(in) * scale)`` in float32."""
    return int(np.floor(np.float32(in_size) * np.float32(scale32)))


def double_output_size(in_size: int, scale32: np.float32) -> int:
    """ONNX's shape inference (and runtimes computing in double): ``floor(in * double(scale))``."""
    return int(math.floor(float(in_size) * float(scale32)))


def scale_candidates(scale: float) -> list[np.float32]:
    """float32 scales near ``scale``, nearest first: float32(scale), then one ulp up, one down, ..."""
    base = np.float32(scale)
    found = [base]
    up = down = base
    for _ in range(MAX_ULPS):
        up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(0))
        found += [up, down]
    return sorted(found, key=lambda s: (abs(float(s) - scale), -float(s)))


def exact_scale32(in_size: int, out_size: int, scale: float) -> np.float32 | None:
    """The float32 scale nearest ``scale`` whose output size is ``out_size`` in float32 (ONNX Runtime's
    kernel) and in double (ONNX's shape inference: 20 x float32(0.35) is 7 in one, 6 in the other)."""
    for candidate in scale_candidates(scale):
        if candidate > 0 and ort_output_size(in_size, candidate) == double_output_size(in_size, candidate) == out_size:
            return candidate
    return None


def nearest_scale32(scale: float | None, in_size: int = 0, out_size: int = 1) -> np.float32:
    """The float32 step torch's nearest kernel multiplies output indices by (``compute_scales_value``):
    ``float32(1.0 / scale)`` when given a scale, else ``float32(in) / out``."""
    if scale is not None and scale > 0:
        return np.float32(1.0 / scale)
    return np.float32(np.float32(in_size) / np.float32(out_size))


def torch_nearest_indices(in_size: int, out_size: int, scale: float | None, *, shortcuts: bool = True) -> np.ndarray:
    """Source index of each output index, as torch's CPU kernel computes it.

    ``shortcuts``: ``nearest_idx`` in UpSample.h (the 2-d kernel) copies when out == in and
    halves when out == 2 * in whatever the scale; the 1-d and 3-d kernels of torch 2.13
    always use ``floor(dst * float32(1 / scale))`` (at 10 -> 20 with scale 2.05 output 10
    reads input 4, not 5).
    """
    dst = np.arange(out_size, dtype=np.int64)
    if shortcuts and out_size == in_size:
        return dst
    if shortcuts and out_size == 2 * in_size:
        return dst >> 1
    step = nearest_scale32(scale, in_size, out_size)
    src = np.floor(dst.astype(np.float32) * step).astype(np.int64)
    return np.minimum(src, in_size - 1)


def ort_nearest_indices(in_size: int, out_size: int) -> np.ndarray:
    """Source indices of ONNX Runtime's Resize(sizes, asymmetric, floor): ``floor(dst / float32(out/in))``."""
    scale = np.float32(np.float32(out_size) / np.float32(in_size))
    src = np.floor(np.arange(out_size, dtype=np.float32) / scale).astype(np.int64)
    return np.clip(src, 0, max(in_size - 1, 0))


def resize_picks_torch_pixels(in_size: int, out_size: int, scale: float | None, *, shortcuts: bool = True) -> bool:
    """Whether Resize(sizes) picks the pixels torch's nearest picks along this axis."""
    want = torch_nearest_indices(in_size, out_size, scale, shortcuts=shortcuts)
    return bool(np.array_equal(ort_nearest_indices(in_size, out_size), want))


def power_of_two(scale: float | None) -> bool:
    """1, 2, 4, ...: sizes ``k * in`` and indices ``dst // k`` in every arithmetic."""
    return scale is not None and scale >= 1 and float(scale).is_integer() and (int(scale) & (int(scale) - 1)) == 0
