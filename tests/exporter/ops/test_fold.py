"""fold (col2im -> ONNX Col2Im from opset 18; the index_put decomposition before) and unfold (decomposed)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.exporter.ops.nn_checks import count, export_and_compare

FOLDS = {
    "plain": (lambda a: F.fold(a, (4, 5), (2, 2)), (1, 8, 12)),
    "strided_dilated_padded": (lambda a: F.fold(a, (6, 7), (3, 2), dilation=(1, 2), padding=1, stride=(2, 1)),
                               (2, 12, 21)),
    "unbatched": (lambda a: F.fold(a, (5, 5), 3, padding=1), (18, 25)),
}


@pytest.mark.parametrize("opset", [17, 18, 20, 23])
@pytest.mark.parametrize("case", list(FOLDS))
def test_fold(case: str, opset: int) -> None:
    fn, shape = FOLDS[case]
    ops = export_and_compare(fn, torch.randn(*shape), opset=opset)
    assert count(ops, "Col2Im") == (1 if opset >= 18 else 0)


@pytest.mark.parametrize("opset", [17, 18])
def test_unfold_fold_roundtrip(opset: int) -> None:
    """unfold has no ONNX op and goes through its decomposition; fold after it still becomes Col2Im."""
    x = torch.randn(2, 3, 6, 7)
    export_and_compare(lambda a: F.fold(F.unfold(a, (2, 3), padding=1, stride=2), (6, 7), (2, 3), padding=1,
                                        stride=2), x, opset=opset)


def test_unfold() -> None:
    export_and_compare(lambda a: F.unfold(a, (2, 3), dilation=(2, 1), padding=1, stride=2), torch.randn(2, 3, 6, 7))
