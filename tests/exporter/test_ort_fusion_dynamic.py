"""Dynamic-batch (and sequence) exports get ORT's transformer-optimizer fusions too.

With a dynamic batch, transformers' all-attend mask is ``Expand(constant, [batch, 1, L, S])`` (no longer one
folded constant) and the attention output's ``Reshape`` to its own shape has symbolic dims; the optimize stage
sees through both (``_attention._mask_rows``, ``Graph.symbolic_shape``), so the graph keeps the form ORT's
fusers match: SkipLayerNormalization twice per layer and one Attention per layer, as with static shapes.
"""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn

import onnxsight

HIDDEN, HEADS, LAYERS = 32, 4, 2


def _fused(path: str, model_type: str) -> Counter:
    from onnxruntime.transformers.optimizer import optimize_model

    with contextlib.redirect_stdout(io.StringIO()):
        optimized = optimize_model(path, model_type=model_type, num_heads=HEADS, hidden_size=HIDDEN)
    return Counter(n.op_type for n in optimized.model.graph.node)


def test_a_dynamic_batch_and_sequence_bert_fuses_and_matches_pytorch(tmp_path: Any) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, max_position_embeddings=32, num_hidden_layers=LAYERS,
                                     hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=4 * HIDDEN)
    model = transformers.BertModel(config, add_pooling_layer=False)
    model.config.return_dict = False
    model.eval()
    ids = torch.randint(0, 100, (2, 8))
    program = onnxsight.export(model, (ids,), dynamic_shapes={"input_ids": {0: "batch", 1: "seq"}})
    ops = Counter(n.op_type for n in program.model_proto.graph.node)
    assert "TopK" not in ops and "Where" not in ops, ops  # the all-attend mask and its guard are gone
    path = str(tmp_path / "bert-dynamic.onnx")
    program.save(path)
    fused = _fused(path, "bert")
    assert fused["SkipLayerNormalization"] == 2 * LAYERS and fused["Attention"] == LAYERS, fused
    for shape in ((2, 8), (3, 5), (1, 12)):
        other = torch.randint(0, 100, shape)
        assert onnxsight.verify(program, (other,)).passed, shape
        with torch.no_grad():
            expected = model(other)[0]
        torch.testing.assert_close(program(other)[0], expected, rtol=1e-4, atol=1e-4)


class ConstantMaskAttention(nn.Module):
    """sdpa with a constant bool mask expanded over a dynamic batch; ``dead`` masks the first query's row."""

    def __init__(self, dead: bool) -> None:
        super().__init__()
        mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
        if dead:
            mask[..., 0, :] = False
        self.register_buffer("mask", mask)

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        mask = self.mask.expand(q.shape[0], 1, 4, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)


@pytest.mark.parametrize("dead", [False, True], ids=["all-attend", "dead-row"])
def test_an_expanded_constant_mask_drops_the_guard_only_without_a_dead_row(dead: bool) -> None:
    q = torch.randn(2, 2, 4, 8)
    program = onnxsight.export(ConstantMaskAttention(dead), (q,), dynamic_shapes={"q": {0: "batch"}})
    ops = Counter(n.op_type for n in program.model_proto.graph.node)
    assert ("Where" in ops) == dead, ops
    for batch in (2, 3):
        other = torch.randn(batch, 2, 4, 8)
        got = program(other)
        got = got[0] if isinstance(got, (list, tuple)) else got
        torch.testing.assert_close(got, ConstantMaskAttention(dead)(other), rtol=1e-5, atol=1e-5)
        assert onnxsight.verify(program, (other,)).passed
