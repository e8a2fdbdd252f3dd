"""embedding_renorm (nn.Embedding(max_norm=...)): the rows looked up, scaled down to max_norm, as eager's."""

from __future__ import annotations

import copy

import pytest
import torch

import onnxsight


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("indices", [torch.tensor([4, 3, 4, 2]), torch.tensor([[0, 6], [6, 1]])],
                         ids=["repeated", "2-D"])
def test_lookup_renormalises_like_eager(norm_type: float, indices: torch.Tensor) -> None:
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(7, 5, max_norm=0.6, norm_type=norm_type)
    with torch.no_grad():
        embedding.weight[6] *= 0.01   # one row already short of max_norm: left alone
    weight = embedding.weight.detach().clone()
    program = onnxsight.export(embedding, (indices,))
    assert torch.equal(embedding.weight, weight), "export changed the user's weight"
    # eager renormalises its weight in place (the program would see that: VAL006), so on a copy
    eager = copy.deepcopy(embedding)
    for lookup in (indices, (indices + 5) % 7, indices):   # the ONNX model keeps no state
        (actual,) = program(lookup)
        torch.testing.assert_close(actual, eager(lookup))


def test_dynamic_number_of_indices() -> None:
    embedding = torch.nn.Embedding(7, 5, max_norm=0.2)
    program = onnxsight.export(embedding, (torch.tensor([2, 1, 2]),),
                               dynamic_shapes={"input": {0: torch.export.Dim("n")}})
    eager = copy.deepcopy(embedding)
    for lookup in (torch.tensor([3]), torch.tensor([0, 1, 2, 3, 4, 5, 6, 0])):
        torch.testing.assert_close(program(lookup)[0], eager(lookup))
