"""scaled_dot_product_attention: ONNX Attention at opset 23, the MatMul/Softmax formula before."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.exporter.ops.nn_checks import assert_samples_pass, export_and_compare


class SDPA(torch.nn.Module):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *mask: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, *mask, **self.kwargs)


def _qkv(heads_kv: int = 4, length: int = 5, source: int = 7) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, length, 8, generator=generator)
    k = torch.randn(2, heads_kv, source, 8, generator=generator)
    v = torch.randn(2, heads_kv, source, 8, generator=generator)
    return q, k, v


def _bool_mask() -> torch.Tensor:
    mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[2] = False  # a fully masked row: torch gives zeros there
    return mask


def _float_mask() -> torch.Tensor:
    mask = torch.randn(2, 1, 5, 7, generator=torch.Generator().manual_seed(2))
    mask[:, :, 1] = float("-inf")
    mask[:, :, 3, :4] = float("-inf")
    return mask


def _lowest_mask() -> torch.Tensor:
    """transformers' padding mask: torch.finfo(float32).min, not -inf; row 1 and one batch's
    row 3 fully masked (a sequence of padding only: torch averages the values uniformly)."""
    mask = torch.zeros(2, 1, 5, 7)
    mask[:, :, :, 5:] = torch.finfo(torch.float32).min
    mask[:, :, 1] = torch.finfo(torch.float32).min
    mask[1, :, 3] = torch.finfo(torch.float32).min
    return mask


CASES = {
    "plain": ({}, ()),
    "causal": ({"is_causal": True}, ()),
    "scale": ({"scale": 0.3}, ()),
    "bool_mask": ({}, ("bool",)),
    "float_mask": ({}, ("float",)),
    "lowest_mask": ({}, ("lowest",)),
    "gqa": ({"enable_gqa": True}, ()),
    "gqa_causal": ({"enable_gqa": True, "is_causal": True}, ()),
}


def test_opinfo_deterministic_samples() -> None:
    assert_samples_pass("nn.functional.scaled_dot_product_attention", limit=8,
                        keep=lambda s: s.kwargs.get("dropout_p", 0.0) == 0.0)


@pytest.mark.parametrize(("opset", "fused"), [(18, False), (21, False), (23, True)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_sdpa_by_opset(case: str, opset: int, fused: bool) -> None:
    kwargs, masks = CASES[case]
    tensors = _qkv(heads_kv=2 if kwargs.get("enable_gqa") else 4)
    make = {"bool": _bool_mask, "float": _float_mask, "lowest": _lowest_mask}
    tensors += tuple(make[m]() for m in masks)
    ops = export_and_compare(SDPA(**kwargs), *tensors, opset=opset)
    assert ("Attention" in ops) == fused
    if not fused:
        assert "Softmax" in ops


def test_sdpa_causal_square() -> None:
    q, k, v = _qkv(length=7)
    export_and_compare(SDPA(is_causal=True), q, k, v, opset=18)


def test_sdpa_3d_inputs_use_the_formula_at_23() -> None:
    q, k, v = (t[0] for t in _qkv())
    ops = export_and_compare(SDPA(is_causal=True), q, k, v, opset=23)
    assert "Attention" not in ops


def test_sdpa_large_scores_are_stable() -> None:
    q, k, v = (t * 30 for t in _qkv())
    export_and_compare(SDPA(), q, k, v, opset=18)


def test_sdpa_dynamic_sequence() -> None:
    seq = torch.export.Dim("seq", min=2, max=64)
    q, k, v = _qkv(source=5)
    shapes = ({2: seq}, {2: seq}, {2: seq})
    export_and_compare(SDPA(is_causal=True), q, k, v, opset=18, dynamic_shapes=shapes)


def test_sdpa_dropout_uses_the_formula() -> None:
    import onnxsight

    q, k, v = _qkv()
    program = onnxsight.export(SDPA(dropout_p=0.5), (q, k, v), opset_version=23)
    ops = [node.op_type for node in program.model_proto.graph.node]
    assert "RandomUniformLike" in ops and "Attention" not in ops
