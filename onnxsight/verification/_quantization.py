"""Quantization-aware comparison: quantize nodes as rounding decisions, differences in quantization steps.

A quantize node rounds to an integer grid. PyTorch computes ``round(x * (1 / scale))``, ONNX's
QuantizeLinear ``round(x / scale)``: where ``x / scale`` lies within float32 rounding of a half
step, the two land one step apart although their inputs agree. Such a node (its inputs matching,
every element within one step) is rounding (ACC012), not a root cause, and in a propagated run ONNX
Runtime goes on from PyTorch's integers, so the values after it show translation errors only. A
wrong scale, zero point, axis or dtype moves many elements by more than a step: a root cause.

The step of a value is 1 for a quantize node's integers and the scale (per channel along the
axis) for a dequantize node's floats; differences are also reported in those units.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

_PREFIX = "quantized_decomposed."
_AFFINE = {"torchao.quantize_affine.default": "quantize", "torchao.dequantize_affine.default": "dequantize"}


def kind(node: Any) -> str | None:
    """``"quantize"`` or ``"dequantize"`` for PT2E's and torchao's quantization primitives, else None."""
    target = str(getattr(node, "target", ""))
    if getattr(node, "op", None) != "call_function":
        return None
    if target in _AFFINE:
        return _AFFINE[target]
    if not target.startswith(_PREFIX):
        return None
    name = target[len(_PREFIX):]
    if name.startswith("quantize_per_"):
        return "quantize"
    if name.startswith("dequantize_per_"):
        return "dequantize"
    return None


def _affine(node: Any) -> bool:
    return str(node.target) in _AFFINE


def _scale_of(node: Any, value_of: Callable[[Any], Any]) -> Any:
    """The node's scale as a float64 array (or a Python float); None when PyTorch's value is gone."""
    scale = node.args[2] if _affine(node) else node.args[1]
    if hasattr(scale, "op"):  # a tensor argument: the scale PyTorch computed or holds
        scale = value_of(scale)
        if scale is None:
            return None
        scale = np.asarray(scale.detach().cpu().double().numpy() if hasattr(scale, "detach") else scale)
    return scale


def _blocks(node: Any, shape: tuple[int, ...]) -> list[int]:
    """An affine op's block sizes for an input of ``shape`` (a symbolic entry is its whole dim)."""
    return [block if isinstance(block, int) else size for block, size in zip(node.args[1], shape)]


def _affine_step(scale: Any, node: Any, shape: tuple[int, ...] | None) -> Any:
    """A dequantize_affine's scale spread over its blocks: one step per element of the output."""
    if shape is None:
        return None
    blocks = _blocks(node, shape)
    grid = [size // block for size, block in zip(shape, blocks)]
    spread = np.asarray(scale, dtype=np.float64).reshape(grid)
    for axis, block in enumerate(blocks):
        spread = np.repeat(spread, block, axis=axis)
    return spread


def step(node: Any, value_of: Callable[[Any], Any], shape: tuple[int, ...] | None = None) -> Any:
    """The size of one quantization step of ``node``'s output (broadcastable array or float); None without one.

    ``shape``: the output's shape, which a torchao ``dequantize_affine``'s blocks are laid over."""
    what = kind(node)
    if what == "quantize":
        return 1.0
    if what != "dequantize":
        return None
    scale = _scale_of(node, value_of)
    if scale is None:
        return None
    if _affine(node):
        return _affine_step(scale, node, shape)
    if "per_channel_group" in str(node.target):  # [rows, columns / group_size]: one scale per group of columns
        return np.repeat(np.asarray(scale, dtype=np.float64), int(node.args[6]), axis=-1)
    if "per_channel" in str(node.target):
        meta = node.meta.get("val")
        rank = len(getattr(meta, "shape", ())) or 1
        axis = int(node.args[3]) % rank
        shape = [1] * rank
        shape[axis] = -1
        return np.asarray(scale, dtype=np.float64).reshape(shape)
    return float(np.asarray(scale, dtype=np.float64).reshape(-1)[0])


def steps_apart(node: Any, expected: np.ndarray, actual: np.ndarray, value_of: Callable[[Any], Any]) -> float | None:
    """The largest difference in quantization steps of ``node``'s output; None where no step exists."""
    size = step(node, value_of, np.shape(expected))
    if size is None or np.shape(expected) != np.shape(actual) or not np.size(expected):
        return None
    diff = np.abs(np.asarray(expected, dtype=np.float64) - np.asarray(actual, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.max(diff / size))


def rounding(node: Any, expected: np.ndarray, actual: np.ndarray) -> str | None:
    """For a quantize node whose inputs match: what its rounding did, when every element is within one step."""
    if kind(node) != "quantize" or np.shape(expected) != np.shape(actual):
        return None
    diff = np.abs(np.asarray(expected, dtype=np.int64) - np.asarray(actual, dtype=np.int64))
    if diff.max(initial=0) > 1:
        return None
    apart = int(np.count_nonzero(diff))
    return f"{apart} of {diff.size} element{'s' if diff.size != 1 else ''} one step apart"


def output_grids(pairs: Any) -> dict[str, Any]:
    """For each graph output (``Pair`` of the engine), the per-tensor quantize or dequantize node nearest
    before it, whose grid its differences are measured in; outputs of a float model have none.

    NOTE: per-channel dequantizes (weights) are passed over: an activation's grid is what a deployed
    integer kernel rounds to, and a weight's per-channel scales do not broadcast to the output.
    """
    grids: dict[str, Any] = {}
    pairs = list(pairs)
    if not pairs or not any(kind(node) for node in pairs[0].node.graph.nodes):
        return grids
    for pair in pairs:
        frontier, seen = [pair.node], {pair.node}
        while frontier and pair.value not in grids:
            following = []
            for node in frontier:
                if kind(node) is not None and _per_tensor(node):
                    grids[pair.value] = node
                    break
                for source in node.all_input_nodes:
                    if source not in seen:
                        seen.add(source)
                        following.append(source)
            frontier = following
    return grids


def _per_tensor(node: Any) -> bool:
    """One scale for the whole tensor (``*_per_tensor``, or an affine op whose one block is the tensor)."""
    if not _affine(node):
        return "per_tensor" in str(node.target)
    shape = getattr(node.args[0].meta.get("val"), "shape", None) if hasattr(node.args[0], "meta") else None
    return shape is not None and all(not isinstance(b, int) or b == s for b, s in zip(node.args[1], shape))


def grid_step(node: Any, value_of: Callable[[Any], Any]) -> float | None:
    """The step of ``node``'s grid in float units (its scale), for a per-tensor quantize or dequantize."""
    scale = _scale_of(node, value_of)
    return None if scale is None else float(np.asarray(scale, dtype=np.float64).reshape(-1)[0])
