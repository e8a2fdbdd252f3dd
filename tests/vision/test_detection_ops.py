"""torchvision's detection ops (nms, batched_nms, roi_align, roi_pool) against torchvision eager.

Each function is exported once with a dynamic number of boxes and run in ONNX
Runtime at two box counts, so the NonMaxSuppression/RoiAlign graphs are checked
for sizes other than the example's.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

torchvision = pytest.importorskip("torchvision")
from torchvision.ops import boxes as box_ops  # noqa: E402

import onnxsight  # noqa: E402
from onnxsight.exporter import default_registry  # noqa: E402


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *tensors: torch.Tensor) -> Any:
        return self.fn(*tensors)


def _boxes(n: int, seed: int, extent: float = 60.0) -> torch.Tensor:
    """``n`` boxes (x1, y1, x2, y2) with x1 < x2, y1 < y2, crowded enough to overlap."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * extent
    wh = torch.rand(n, 2, generator=g) * 30 + 1
    return torch.cat([xy, xy + wh], dim=1)


def _export(fn: Callable[..., Any], example: tuple[torch.Tensor, ...], dims: tuple[dict[int, Any], ...],
            opset: int | None = None) -> onnxsight.ONNXProgram:
    return onnxsight.export(_Fn(fn), example, dynamic_shapes={"tensors": dims}, opset_version=opset)


def _ops(program: onnxsight.ONNXProgram) -> list[str]:
    return [node.op_type for node in program.model_proto.graph.node]


N = torch.export.Dim("n", min=2, max=4096)


def test_translations_registered() -> None:
    registry = default_registry()
    for key in ("torchvision::nms.default", "torchvision::roi_align.default", "torchvision::roi_pool.default"):
        assert key in registry


@pytest.mark.parametrize("iou", [0.2, 0.35, 0.5])
def test_nms_matches_eager_at_two_box_counts(iou: float) -> None:
    program = _export(lambda b, s: torchvision.ops.nms(b, s, iou), (_boxes(40, 0), torch.rand(40)), ({0: N}, {0: N}))
    assert _ops(program).count("NonMaxSuppression") == 1
    for n, seed in ((40, 1), (97, 2)):
        boxes, scores = _boxes(n, seed), torch.rand(n, generator=torch.Generator().manual_seed(seed))
        want = torchvision.ops.nms(boxes, scores, iou)
        (got,) = program(boxes, scores)
        assert 1 < want.numel() < n, "the case should keep some boxes and drop others"
        assert got.dtype == torch.int64
        assert torch.equal(got, want), f"n={n}: kept {got.tolist()}, torch kept {want.tolist()}"


def test_nms_ties_and_duplicates() -> None:
    """Equal scores keep torch's order (lower index first); identical boxes suppress each other."""
    program = _export(lambda b, s: torchvision.ops.nms(b, s, 0.5), (_boxes(8, 0), torch.rand(8)), ({0: N}, {0: N}))
    boxes = _boxes(30, 3)
    boxes[10] = boxes[3]                  # a duplicate box
    scores = torch.rand(30, generator=torch.Generator().manual_seed(4))
    scores[[2, 7, 19, 25]] = 0.5          # tied scores, boxes far apart below
    boxes[[2, 7, 19, 25]] = torch.tensor([[100., 100, 110, 110], [200, 200, 210, 210], [300, 300, 310, 310],
                                          [400, 400, 410, 410]])
    want = torchvision.ops.nms(boxes, scores, 0.5)
    (got,) = program(boxes, scores)
    assert torch.equal(got, want), f"kept {got.tolist()}, torch kept {want.tolist()}"


def test_batched_nms_coordinate_trick() -> None:
    """torchvision's per-class NMS by offsetting each class's boxes (what detection models run)."""
    def fn(b: torch.Tensor, s: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return box_ops._batched_nms_coordinate_trick(b, s, c, 0.5)

    example = (_boxes(40, 0), torch.rand(40), torch.randint(0, 4, (40,)))
    program = _export(fn, example, ({0: N}, {0: N}, {0: N}))
    for n, seed in ((40, 5), (120, 6)):
        g = torch.Generator().manual_seed(seed)
        boxes, scores, classes = _boxes(n, seed), torch.rand(n, generator=g), torch.randint(0, 4, (n,), generator=g)
        want = box_ops.batched_nms(boxes, scores, classes, 0.5)
        (got,) = program(boxes, scores, classes)
        assert torch.equal(got, want), f"n={n}: kept {got.tolist()}, torch kept {want.tolist()}"


def _rois(k: int, seed: int, batch: int, extent: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(0, batch, (k, 1), generator=g).float()
    xy = torch.rand(k, 2, generator=g) * extent * 0.8 - extent * 0.05   # a few corners outside the image
    wh = torch.rand(k, 2, generator=g) * extent * 0.5 + 0.3
    return torch.cat([index, xy, xy + wh], dim=1)


ROI_ALIGN = [  # (output size, spatial_scale, sampling_ratio, aligned)
    ((7, 7), 0.25, 2, False),
    ((7, 7), 0.25, 2, True),
    ((5, 3), 0.5, 0, False),
    ((5, 3), 0.5, 0, True),
    ((14, 14), 0.125, -1, True),
]


@pytest.mark.parametrize(("size", "scale", "sampling", "aligned"), ROI_ALIGN)
def test_roi_align_matches_eager(size: tuple[int, int], scale: float, sampling: int, aligned: bool) -> None:
    features = torch.randn(2, 3, 24, 20)
    extent = 20 / scale

    def fn(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torchvision.ops.roi_align(x, r, size, spatial_scale=scale, sampling_ratio=sampling, aligned=aligned)

    program = _export(fn, (features, _rois(6, 0, 2, extent)), ({}, {0: N}))
    assert _ops(program).count("RoiAlign") == 1
    for k, seed in ((6, 1), (23, 2)):
        rois = _rois(k, seed, 2, extent)
        want = fn(features, rois)
        (got,) = program(features, rois)
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize(("size", "scale"), [((7, 7), 0.25), ((3, 5), 0.5)])
def test_roi_pool_matches_eager(size: tuple[int, int], scale: float) -> None:
    features = torch.randn(2, 3, 24, 20)
    extent = 20 / scale

    def fn(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torchvision.ops.roi_pool(x, r, size, spatial_scale=scale)

    program = _export(fn, (features, _rois(6, 0, 2, extent)), ({}, {0: N}))
    assert _ops(program).count("MaxRoiPool") == 1
    for k, seed in ((6, 1), (23, 2)):
        rois = _rois(k, seed, 2, extent)
        want = fn(features, rois)
        (got,) = program(features, rois)
        torch.testing.assert_close(got, want)


UNTRANSLATED = [  # (call, op, words of the advice)
    (lambda x, r: torchvision.ops.ps_roi_align(x, r, 2), "ps_roi_align", "position-sensitive"),
    (lambda x, r: torchvision.ops.ps_roi_pool(x, r, 2), "ps_roi_pool", "position-sensitive"),
]


@pytest.mark.parametrize(("fn", "op", "advice"), UNTRANSLATED)
def test_untranslated_vision_op_is_ops008(fn: Callable[..., Any], op: str, advice: str) -> None:
    features, rois = torch.randn(1, 8, 10, 10), torch.tensor([[0.0, 1, 1, 6, 6]])
    with pytest.raises(onnxsight.TranslationError) as info:
        onnxsight.export(_Fn(fn), (features, rois))
    [found] = [d for d in info.value.diagnostics if d.rule.code in ("OPS001", "OPS008")]
    assert found.rule.code == "OPS008"
    assert f"torchvision.{op}" in found.message and advice in found.message
    assert "nms, roi_align, roi_pool" in found.message
    assert found.location is not None and found.location.file.endswith("test_detection_ops.py")
