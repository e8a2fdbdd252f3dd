"""compare_detections: rows paired out of position only among scores tied within tolerance."""

from __future__ import annotations

import pytest
import torch

from onnxsight.verification import Tolerance, compare_detections

TOL = Tolerance.uniform(1e-4, 1e-4)


def _eager(scores: list[float]) -> list[torch.Tensor]:
    """(boxes, labels, scores, masks) for detections with these scores, each row distinct."""
    count = len(scores)
    boxes = torch.arange(count * 4, dtype=torch.float32).reshape(count, 4) * 10
    labels = torch.arange(count, dtype=torch.int64) % 3
    masks = torch.rand(count, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    return [boxes, labels, torch.tensor(scores), masks]


def _rows(outputs: list[torch.Tensor], order: list[int]) -> list[torch.Tensor]:
    return [o[order] for o in outputs]


def _nudge(outputs: list[torch.Tensor], index: int, delta: float) -> list[torch.Tensor]:
    changed = [o.clone() for o in outputs]
    changed[index] += delta
    return changed


SCORES = [0.9, 0.8, 0.70001, 0.7, 0.6]    # rows 2 and 3 tie within 2 * (1e-4 + 1e-4 * 0.7)
CASES = [
    # (what, make actual from eager, passes, rows paired out of position)
    ("identical", lambda e: e, True, 0),
    ("tied rows swapped", lambda e: _rows(e, [0, 1, 3, 2, 4]), True, 2),
    ("separated rows swapped", lambda e: _rows(e, [1, 0, 2, 3, 4]), False, 0),
    ("a row moved across a tie group", lambda e: _rows(e, [0, 2, 1, 3, 4]), False, 0),
    ("one detection fewer", lambda e: [o[:4] for o in e], False, 0),
    ("boxes off by 1e-2", lambda e: _nudge(e, 0, 1e-2), False, 0),
    ("boxes off by 1e-6", lambda e: _nudge(e, 0, 1e-6), True, 0),
    ("masks off by 1e-2", lambda e: _nudge(e, 3, 1e-2), False, 0),
    ("labels off by one", lambda e: _nudge(e, 1, 1), False, 0),
]


@pytest.mark.parametrize("what,make,passes,reordered", CASES, ids=[c[0] for c in CASES])
def test_compare_detections(what: str, make, passes: bool, reordered: int) -> None:
    eager = _eager(SCORES)
    result = compare_detections(eager, make(eager), scores=2, tolerance=TOL)
    assert result.passed is passes, result.reason
    if passes:
        assert result.reordered == reordered
        assert result.max_abs_diff < 1e-4
    else:
        assert result.reason


def test_tied_rows_swapped_with_other_outputs_wrong_fails() -> None:
    """A tie frees the order, not the values: the swapped rows' masks must still match."""
    eager = _eager(SCORES)
    actual = _rows(eager, [0, 1, 3, 2, 4])
    actual[3] = actual[3].clone()
    actual[3][2] += 0.5
    result = compare_detections(eager, actual, scores=2, tolerance=TOL)
    assert not result.passed and "eager detection" in result.reason


@pytest.mark.parametrize("scores", [0, 3, 4, -1])   # boxes and masks are not 1-D; 4 and -1 are no output
def test_scores_must_name_a_1d_output(scores: int) -> None:
    eager = _eager(SCORES)
    with pytest.raises(ValueError, match="1-D output"):
        compare_detections(eager, eager, scores=scores, tolerance=TOL)
