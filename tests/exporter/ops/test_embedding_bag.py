"""embedding_bag (_embedding_bag, _embedding_bag_forward_only): sum/mean/max bags through ScatterND."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.exporter.ops.nn_checks import assert_samples_pass, export_and_compare

WEIGHT = torch.randn(10, 4)
# Bags [0:2], [2:2] (empty), [2:5], [5:7]; index 3 is used as padding_idx below.
INDICES = torch.tensor([1, 3, 0, 3, 9, 2, 2])
OFFSETS = torch.tensor([0, 2, 2, 5])


def test_opinfo() -> None:
    """OpInfo's samples, less the ones with max_norm (an in-place renorm of the weight)."""
    assert_samples_pass("nn.functional.embedding_bag", keep=lambda s: "max_norm" not in s.kwargs, limit=12)


@pytest.mark.parametrize("opset", [17, 18, 23])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 3])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag(mode: str, padding_idx: int | None, include_last_offset: bool, opset: int) -> None:
    weight = WEIGHT - 0.5  # negative maxima, to tell an empty bag's 0 from a max
    offsets = torch.cat([OFFSETS, torch.tensor([INDICES.shape[0]])]) if include_last_offset else OFFSETS
    export_and_compare(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx,
                                                       include_last_offset=include_last_offset),
                       weight, INDICES, offsets, opset=opset)


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_per_sample_weights(padding_idx: int | None) -> None:
    weights = torch.rand(INDICES.shape[0])
    export_and_compare(lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p,
                                                          padding_idx=padding_idx),
                       WEIGHT, INDICES, OFFSETS, weights)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_module_2d_input(mode: str) -> None:
    """nn.EmbeddingBag with (B, L) indices: fixed-length bags, offsets made by F.embedding_bag."""
    bag = torch.nn.EmbeddingBag(20, 6, mode=mode, padding_idx=0)
    export_and_compare(bag, torch.randint(0, 20, (5, 3)))


def test_module_with_offsets_training_graph() -> None:
    """With grad mode on, export keeps _embedding_bag (not the forward-only overload)."""
    bag = torch.nn.EmbeddingBag(10, 4, mode="mean")
    with torch.enable_grad():
        export_and_compare(bag, INDICES, OFFSETS)


def test_dynamic_sizes() -> None:
    n, bags = torch.export.Dim("n", min=2), torch.export.Dim("bags", min=2)
    bag = torch.nn.EmbeddingBag(10, 4, mode="sum")
    export_and_compare(bag, INDICES, OFFSETS, dynamic_shapes=({0: n}, {0: bags}))


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("mode, weighted", [("sum", False), ("sum", True), ("mean", False), ("max", False)])
@pytest.mark.parametrize("padding_idx", [None, 3, 9])
def test_last_offset_short_of_the_indices(mode: str, padding_idx: int | None, weighted: bool, opset: int) -> None:
    """include_last_offset with a last offset before the end (PyTorch's test_embedding_bag): eager's sums stop
    there without padding_idx (its mean still counts to the end); with padding_idx, and for max, it runs on."""
    offsets = torch.cat([OFFSETS, torch.tensor([INDICES.shape[0] - 2])])
    weights = torch.rand(INDICES.shape[0]) if weighted else None
    export_and_compare(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx,
                                                       include_last_offset=True, per_sample_weights=weights),
                       WEIGHT - 0.5, INDICES, offsets, opset=opset)
