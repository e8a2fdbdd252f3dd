"""verify=True's other sizes cut a left-padded example without making a sequence of padding only.

A BERT-like encoder's padding mask is rewritten for attention fusion (the note ONX008): a row whose every key is
padding averages the values where PyTorch gives zeros. Cutting the example ``[0, 0, 1, ...]`` to its first token
made such a row, and verify=True failed the dim (ACC010 "sequence breaks at size 1") on every BERT-family model
exported with dynamic sequence from a left-padded batch (ERNIE, XLM-RoBERTa-XL, CamemBERT, Data2VecText, ...).
"""

from __future__ import annotations

import pytest
import torch

import onnxsight

transformers = pytest.importorskip("transformers")

TOKENS = {0: "batch", 1: "sequence"}


def _left_padded_ernie() -> tuple:
    torch.manual_seed(0)
    config = transformers.ErnieConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=64)
    model = transformers.ErnieModel(config).eval()
    ids = torch.randint(3, 128, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, :2] = 0
    return model, {"input_ids": ids, "attention_mask": mask}


def test_a_left_padded_example_verifies_at_every_other_size() -> None:
    model, inputs = _left_padded_ernie()
    program = onnxsight.export(model, (), kwargs=inputs, dynamic_shapes={"input_ids": TOKENS, "attention_mask": TOKENS},
                               verify=True)
    assert any(d.code == "ONX008" for d in program.diagnostics)
    result = program.verification
    assert result.passed, [d.message for d in result.diagnostics if d.code == "ACC010"]
    assert {"batch": 2, "sequence": 1} in result.sizes_checked    # the short size still ran
    assert not any(d.code == "ACC010" for d in result.diagnostics)


def test_a_sequence_of_padding_only_in_the_users_own_input_still_fails() -> None:
    """The cut keeps the user's tokens; a row the user made all padding is still compared and named (ONX008)."""
    model, inputs = _left_padded_ernie()
    program = onnxsight.export(model, (), kwargs=inputs, dynamic_shapes={"input_ids": TOKENS, "attention_mask": TOKENS})
    padding = dict(inputs, attention_mask=inputs["attention_mask"].clone())
    padding["attention_mask"][1] = 0
    result = onnxsight.verify(program, (), padding)
    assert not result.passed
    assert [r.value for r in result.root_causes.itertuples()] == ["scaled_dot_product_attention"]
