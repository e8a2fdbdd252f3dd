"""A user's own small decoder, not a transformers model: its own attention over a transformers ``DynamicCache``,
learned positions, a forward() that takes no ``use_cache`` and returns ``(logits, cache)``. The generation tests
check that a fault in its step is named at these lines, as a user would see it."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, layer: int) -> None:
        super().__init__()
        self.heads, self.layer = heads, layer
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cache: Any) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        k, v = cache.update(k, v, self.layer)  # CACHE UPDATE
        y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, t, h))


class TinyDecoder(nn.Module):
    def __init__(self, vocab: int = 64, hidden: int = 32, heads: int = 4, layers: int = 2,
                 positions: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(positions, hidden)
        self.layers = nn.ModuleList(Attention(hidden, heads, i) for i in range(layers))
        self.head = nn.Linear(hidden, vocab)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                past_key_values: Any) -> tuple[torch.Tensor, Any]:
        x = self.embed(input_ids) + self.pos(position_ids)  # POSITIONS
        new, total = input_ids.shape[1], attention_mask.shape[1]
        causal = torch.ones(new, total, dtype=torch.bool).tril(total - new)
        mask = causal[None, None] & attention_mask[:, None, None, :].bool()
        for layer in self.layers:
            x = x + layer(x, mask, past_key_values)
        return self.head(x), past_key_values


class LongPastDecoder(TinyDecoder):
    """Doubles its logits when the past is longer than the new tokens: a Python branch on two sizes, which
    torch.export specialises on its example (a past of 5 over 3 new tokens) and the prompt step does not take."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                past_key_values: Any) -> tuple[torch.Tensor, Any]:
        longer = past_key_values.get_seq_length() > input_ids.shape[1]
        logits, cache = super().forward(input_ids, attention_mask, position_ids, past_key_values)
        return (logits * 2 if longer else logits), cache


class PaddedMaskDecoder(TinyDecoder):
    """Reads only the last past + new columns of a mask that may be longer (a Python branch on sizes)."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                past_key_values: Any) -> tuple[torch.Tensor, Any]:
        length = past_key_values.get_seq_length() + input_ids.shape[1]
        if attention_mask.shape[1] > length:
            attention_mask = attention_mask[:, -length:]
            position_ids = position_ids + 1
        return super().forward(input_ids, attention_mask, position_ids, past_key_values)


class DataBranchDecoder(TinyDecoder):
    """Branches in Python on its logits' values: torch.export cannot capture it (CAP002 at this line)."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                past_key_values: Any) -> tuple[torch.Tensor, Any]:
        logits, cache = super().forward(input_ids, attention_mask, position_ids, past_key_values)
        if logits.sum() > 0:  # DATA BRANCH
            logits = logits + 1
        return logits, cache


def build(cls: type[TinyDecoder] = TinyDecoder) -> tuple[TinyDecoder, dict[str, torch.Tensor]]:
    """The decoder with random weights and a batch of two prompts, the first left-padded."""
    torch.manual_seed(0)
    prompt = {"input_ids": torch.tensor([[0, 0, 17, 23, 41, 5], [44, 12, 7, 60, 3, 19]]),
              "attention_mask": torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])}
    return cls().eval(), prompt


def line_of(marker: str) -> int:
    """The line of this file that holds ``# MARKER``."""
    with open(__file__, encoding="utf-8") as handle:
        return next(number for number, text in enumerate(handle, 1) if text.rstrip().endswith(f"# {marker}"))
