"""The bytes of a constant, as the builder and the optimize stage's Emitter write and compare them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from onnxsight.exporter._builder import tensor_bytes_view


@pytest.mark.parametrize("tensor", [
    torch.tensor([1.0, 2.0, 3.0, 4.0])[::2],                       # a strided slice
    torch.arange(6.0).reshape(2, 3).t(),                             # a transpose
    torch.tensor([5.0, 7.0]).as_strided((1,), (2,), 1),              # one element, stride 2: contiguous() keeps it
    torch.empty_strided((0,), (2,)),                                 # no element, stride 2
    torch.tensor(3.0),                                               # 0-d
    torch.tensor([True, False, True]),                               # bool as bytes
], ids=["slice", "transpose", "one-element-strided", "empty-strided", "scalar", "bool"])
def test_the_bytes_are_the_values_in_order(tensor: torch.Tensor) -> None:
    expected = tensor.contiguous().numpy().astype(np.uint8 if tensor.dtype == torch.bool else tensor.numpy().dtype)
    assert tensor_bytes_view(tensor).tobytes() == np.ascontiguousarray(expected).tobytes()
