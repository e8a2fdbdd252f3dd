"""Threshold decisions: ops whose result flips with input differences far below any tolerance.

An op that turns floating-point values into integers or booleans decides: NMS keeps a
box when its IoU with every higher-scored box is at most a threshold, a comparison or a
cast to an integer flips at a boundary, argmax picks among near-equal values, floor and
round jump at integers. Two runtimes whose inputs agree to 1e-6 decide differently when a
value lies within that of the boundary (random weights make thousands of near-duplicate
boxes, so a detector meets such an IoU on most images). In a propagated per-node run,
such an op that fails while all its inputs match is judged once more on PyTorch's exact
inputs: a match there makes its difference a borderline decision (ACC011, with the values
downstream that follow from it) instead of a root cause; graph outputs are still compared
end to end.
"""

from __future__ import annotations

from typing import Any

from onnxsight.verification._coverage import op_name

# op name -> what it decides, for the ACC011 message; any other op with an integer or bool result
# computed from floating-point inputs is a decision too (a comparison, a cast, argmax)
_DECISIONS = {
    "nms": "keeps a box when its IoU with every higher-scored box is at most the threshold",
    "floor": "rounds down to an integer", "ceil": "rounds up to an integer", "round": "rounds to an integer",
    "trunc": "rounds towards zero",
}
_FROM_FLOATS = "turns floating-point values into integers or booleans"


def decision(node: Any) -> str | None:
    """What ``node`` decides at a threshold or an integer boundary (``None`` for an op that does not)."""
    if getattr(node, "op", None) != "call_function":
        return None
    known = _DECISIONS.get(op_name(node.target))
    if known is not None:
        return known
    if discrete(node.meta.get("val")) and any(_floating(arg.meta.get("val")) for arg in node.all_input_nodes):
        return _FROM_FLOATS
    return None


def discrete(value: Any) -> bool:
    """An integer or bool tensor (or its fake): a decision (indices, counts, a mask), not a rounded quantity."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and not (dtype.is_floating_point or dtype.is_complex)


def _floating(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and dtype.is_floating_point
