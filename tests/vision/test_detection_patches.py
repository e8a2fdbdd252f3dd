"""Each capture patch computes what the torchvision function it replaces computes (eager, no export)."""

from __future__ import annotations

import pytest
import torch

torchvision = pytest.importorskip("torchvision")
from torchvision.models.detection import _utils as det_utils  # noqa: E402
from torchvision.models.detection import roi_heads  # noqa: E402
from torchvision.models.detection import transform as det_transform  # noqa: E402
from torchvision.ops import boxes as box_ops  # noqa: E402
from torchvision.ops import poolers  # noqa: E402

from onnxsight.exporter.capture import _patches_torchvision as tv  # noqa: E402


def _boxes(n: int, extent: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * extent
    return torch.cat([xy, xy + torch.rand(n, 2, generator=g) * extent / 3 + 0.5], dim=1)


@pytest.mark.parametrize("n", [0, 1, 30, 1500])   # 1500 boxes: torchvision's per-class loop (> 4000 coordinates)
def test_batched_nms(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    boxes, scores, classes = _boxes(n, 300, n), torch.rand(n, generator=g), torch.randint(0, 5, (n,), generator=g)
    want = box_ops.batched_nms(boxes, scores, classes, 0.5)
    got = tv.make_batched_nms(box_ops.batched_nms)(boxes, scores, classes, 0.5)
    assert torch.equal(got, want)


@pytest.mark.parametrize("size", [(320, 320), (256, 384), (300, 400), (500, 333), (123, 457), (1000, 90)])
def test_resize(size: tuple[int, int]) -> None:
    image = torch.rand(3, *size)
    want, _ = det_transform._resize_image_and_masks(image, 320, 384)
    got, _ = tv.make_resize(det_transform._resize_image_and_masks)(image, 320, 384)
    assert got.shape == want.shape
    assert torch.equal(got, want)


@pytest.mark.parametrize("size", [(3, 320, 320), (3, 250, 301), (3, 33, 64)])
def test_batch_images(size: tuple[int, ...]) -> None:
    transform = det_transform.GeneralizedRCNNTransform(320, 384, [0.0] * 3, [1.0] * 3)
    images = [torch.rand(*size)]
    want = transform.batch_images(images, 32)
    got = tv.make_batch_images(det_transform.GeneralizedRCNNTransform.batch_images)(transform, images, 32)
    assert torch.equal(got, want)


@pytest.mark.parametrize(("k", "length"), [(1000, 40), (10, 40), (5, 0)])
def test_topk_min(k: int, length: int) -> None:
    x = torch.rand(2, length)
    assert tv.make_topk_min(det_utils._topk_min)(x, k, 1) == det_utils._topk_min(x, k, 1)


@pytest.mark.parametrize("n", [0, 1, 17])
def test_multiscale_roi_align(n: int) -> None:
    pooler = poolers.MultiScaleRoIAlign(["0", "1", "2"], 7, 2)
    features = {str(i): torch.randn(1, 4, 64 // 2**i, 48 // 2**i) for i in range(3)}
    boxes = [_boxes(n, 150, 7).clamp(max=190)]
    want = pooler(features, boxes, [(256, 192)])
    original = poolers._multiscale_roi_align
    try:
        poolers._multiscale_roi_align = tv.make_multiscale_roi_align(original)
        got = pooler(features, boxes, [(256, 192)])
    finally:
        poolers._multiscale_roi_align = original
    assert torch.equal(got, want)


@pytest.mark.parametrize(("n", "size"), [(0, (20, 30)), (7, (50, 60)), (12, (97, 41))])
def test_paste_masks(n: int, size: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(n)
    masks = torch.rand(n, 1, 28, 28, generator=g)
    xy = torch.rand(n, 2, generator=g) * torch.tensor([size[1], size[0]])
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=g) * 40 + 0.2], dim=1)
    # clipped to the image as the models' boxes are; the mask's padding still crosses the edges
    boxes = torch.min(boxes, torch.tensor([size[1], size[0], size[1], size[0]]).float())
    want = roi_heads.paste_masks_in_image(masks, boxes, size)
    got = tv.make_paste_masks(roi_heads.paste_masks_in_image)(masks, boxes, size)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize(("n", "extent"), [(0, 50.0), (1, 30.0), (9, 120.0)])
def test_heatmaps_to_keypoints(n: int, extent: float) -> None:
    g = torch.Generator().manual_seed(n)
    maps = torch.randn(n, 17, 56, 56, generator=g)
    rois = _boxes(n, extent, n)
    rois[:1, 2:] = rois[:1, :2] + 0.4     # an RoI smaller than a pixel (clamped to 1)
    want = roi_heads.heatmaps_to_keypoints(maps, rois)
    got = tv.make_heatmaps_to_keypoints(roi_heads.heatmaps_to_keypoints)(maps, rois)
    assert torch.equal(got[0], want[0])   # the argmax cell: exact
    torch.testing.assert_close(got[1], want[1])


class _Transform(torch.nn.Module):
    """The detection models' input transform alone: normalize, resize (patched), pad to a multiple of 32."""

    def __init__(self) -> None:
        super().__init__()
        self.transform = det_transform.GeneralizedRCNNTransform(320, 384, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.transform([image])[0].tensors


def test_exported_transform_resizes_as_eager_at_many_sizes() -> None:
    """The resized size is floor(size * scale) computed from the symbolic image size in the ONNX graph."""
    import onnxsight

    model = _Transform().eval()
    dims = {"image": {1: torch.export.Dim("height", min=32, max=2048), 2: torch.export.Dim("width", min=32, max=2048)}}
    program = onnxsight.export(model, (torch.rand(3, 320, 320),), dynamic_shapes=dims)
    for size in [(320, 320), (256, 384), (300, 400), (500, 333), (123, 457), (1000, 90), (479, 641), (33, 1999)]:
        image = torch.rand(3, *size)
        want = model(image)
        (got,) = program(image)
        assert got.shape == want.shape, f"{size}: ONNX {tuple(got.shape)}, eager {tuple(want.shape)}"
        # NOTE: ONNX Runtime maps an output pixel to (x + 0.5) / (out / in) - 0.5 in float32, torch to
        # (x + 0.5) * (in / out) - 0.5: about 1e-7 apart relative, 5e-5 of a pixel at x = 400, which moves
        # a bilinear sample of this noise image by up to 5e-5, 2.2e-4 once divided by the std 0.229.
        torch.testing.assert_close(got, want, rtol=1e-4, atol=5e-4, msg=lambda m: f"{size}: {m}")
