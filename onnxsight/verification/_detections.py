"""Ranked outputs (a detector's boxes, scores, labels, masks) compared row by row, order free only among ties.

A detector returns one row per detection in every output (boxes [N, 4], scores [N],
labels [N], masks [N, 1, H, W], ...), sorted by descending score. Two runtimes compute
a score a few ulps apart, so where two of eager's scores lie within the tolerance of
each other their order is not the model's but float noise, and an export that swaps
them is right; everywhere else the order is part of the output and must match.
:func:`compare_detections` pairs each eager row with an ONNX row at a position within
its run of tied scores (the same position when that row matches), then compares every
output with the rows so paired, under the usual :class:`Tolerance`. The number of rows
must be equal: a detection kept by one side only is a difference, not a tie.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from onnxsight.verification._metrics import Metrics, compare, to_numpy
from onnxsight.verification._tolerance import Tolerance


@dataclass(frozen=True)
class DetectionComparison:
    """``order[i]``: the ONNX row paired with eager row ``i``; ``outputs``: each output compared so paired."""

    passed: bool
    order: tuple[int, ...]
    outputs: tuple[Metrics, ...]
    reason: str = ""

    @property
    def reordered(self) -> int:
        """How many rows were paired out of position (within tied scores)."""
        return sum(1 for i, j in enumerate(self.order) if i != j)

    @property
    def max_abs_diff(self) -> float:
        diffs = [m.max_abs_diff for m in self.outputs if m.max_abs_diff == m.max_abs_diff]
        return max(diffs, default=float("inf") if not self.passed else 0.0)


def compare_detections(expected: Sequence[Any], actual: Sequence[Any], *, scores: int,
                       tolerance: Tolerance | None = None, names: Sequence[str] | None = None
                       ) -> DetectionComparison:
    """Compare per-row outputs ranked by output ``scores`` (eager's, descending), allowing swaps within ties.

    Two eager scores tie when they differ by at most twice the scores' tolerance (each side may be off by
    one tolerance); a run of scores tied pairwise in a chain is one group, and a row may only be paired
    with a row of its own group. ``names`` name the outputs for the per-output tolerance (default
    ``output {i}``).
    """
    tolerance = tolerance if tolerance is not None else Tolerance()
    names = list(names) if names is not None else [f"output {i}" for i in range(len(expected))]
    want = [to_numpy(e) for e in expected]
    got = [to_numpy(a) for a in actual]
    bounds = [tolerance.for_value(name, e.dtype) for name, e in zip(names, want)]
    reason = _shape_problem(want, got, scores)
    if reason:
        return DetectionComparison(False, (), (), reason)
    order = list(range(len(want[scores])))
    for start, end in _tie_groups(want[scores], bounds[scores].atol, bounds[scores].rtol):
        free = list(range(start, end))
        for row in range(start, end):
            match = next((j for j in ([row] if row in free else []) + free
                          if _rows_match(want, got, bounds, row, j)), None)
            if match is None:
                return DetectionComparison(False, tuple(order), _compared(want, got, bounds, order),
                                           f"eager detection {row} (score {float(want[scores][row]):.6g}) has no "
                                           f"matching ONNX detection among rows {start}..{end - 1}, its tied scores")
            free.remove(match)
            order[row] = match
    outputs = _compared(want, got, bounds, order)
    failed = [names[i] for i, m in enumerate(outputs) if not m.passed]
    return DetectionComparison(not failed, tuple(order), outputs, f"{', '.join(failed)} differ" if failed else "")


def _shape_problem(want: list[np.ndarray], got: list[np.ndarray], scores: int) -> str:
    """Why the outputs cannot be compared row by row ('' when they can)."""
    if len(want) != len(got):
        return f"ONNX returned {len(got)} outputs, eager {len(want)}"
    if not 0 <= scores < len(want) or want[scores].ndim != 1:
        raise ValueError(f"scores={scores} must index a 1-D output of the {len(want)}")
    counts = {len(e) for e in want}
    if len(counts) != 1:
        raise ValueError(f"eager's outputs do not have one row per detection (leading dims {sorted(counts)})")
    for index, (e, a) in enumerate(zip(want, got)):
        if e.shape != a.shape:
            return f"output {index}: ONNX shape {tuple(a.shape)}, eager {tuple(e.shape)} " \
                   f"(ONNX kept {len(a) if a.ndim else '?'} detections, eager {len(e)})"
    return ""


def _tie_groups(scores: np.ndarray, atol: float, rtol: float) -> list[tuple[int, int]]:
    """[start, end) runs of consecutive scores, each within twice the tolerance of the next."""
    groups, start = [], 0
    values = scores.astype(np.float64)
    for i in range(1, len(values) + 1):
        if i == len(values) or abs(values[i] - values[i - 1]) > 2 * (atol + rtol * abs(values[i - 1])):
            groups.append((start, i))
            start = i
    return groups


def _rows_match(want: list[np.ndarray], got: list[np.ndarray], bounds: list[Any], row: int, other: int) -> bool:
    return all(compare(e[row:row + 1], a[other:other + 1], b).passed for e, a, b in zip(want, got, bounds))


def _compared(want: list[np.ndarray], got: list[np.ndarray], bounds: list[Any], order: list[int]) -> tuple:
    return tuple(compare(e, a[order], b) for e, a, b in zip(want, got, bounds))
