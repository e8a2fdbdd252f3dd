"""Threshold decisions: ops whose result flips with input differences far below any tolerance.

NMS keeps a box when its IoU with every higher-scored box is at most a threshold. Two
runtimes whose boxes agree to 1e-6 keep different boxes when an IoU lies within that
of the threshold (random weights make thousands of near-duplicate boxes, so a detector
meets such an IoU on most images). In a propagated per-node run, such an op that fails
while all its inputs match is judged once more on PyTorch's exact inputs: a match there
makes its difference a borderline decision (ACC011, with the values downstream that
follow from it) instead of a root cause; graph outputs are still compared end to end.
"""

from __future__ import annotations

from typing import Any

from onnxsight.verification._coverage import op_name

# op name -> what it decides, for the ACC011 message
_DECISIONS = {
    "nms": "keeps a box when its IoU with every higher-scored box is at most the threshold",
}


def decision(node: Any) -> str | None:
    """What ``node`` decides by a threshold (``None`` for an op that decides nothing)."""
    if getattr(node, "op", None) != "call_function":
        return None
    return _DECISIONS.get(op_name(node.target))
