"""The ONNX names of a KV cache's tensors, and which output of a step feeds which input of the next.

A decode step takes the cache as inputs ``past_key_values.{layer}.key`` / ``.value`` and returns
it as outputs ``present.{layer}.key`` / ``.value``; an encoder-decoder's cache has the decoder's
self-attention part and the cross-attention part over the encoder's states, named apart:
``past_key_values.{layer}.decoder.key`` and ``past_key_values.{layer}.encoder.key`` (and
``present.{layer}.decoder.key`` / ``present.{layer}.encoder.key``). These are the names optimum's
exports and ONNX Runtime GenAI feed, whatever forward() calls the argument (``past_key_values``,
or ``cache`` in transformers 5.24).

The rule is one function each way, so that whoever runs the steps (onnxsight's generation
verification, a user's loop) pairs outputs with inputs by name: ``present.X`` feeds
``past_key_values.X`` at the next step. No torch here: the names are plain strings.
"""

from __future__ import annotations

from typing import Sequence

PAST, PRESENT = "past_key_values", "present"
KINDS = ("key", "value")
SELF_ATTENTION, CROSS_ATTENTION = "decoder", "encoder"


def cache_leaf_names(layers: int, part: str | None = None) -> list[str]:
    """``0.key, 0.value, 1.key, ...`` (``part``: ``0.decoder.key, ...``), one per tensor in flatten order."""
    middle = f"{part}." if part else ""
    return [f"{layer}.{middle}{kind}" for layer in range(layers) for kind in KINDS]


def present_name(input_name: str) -> str | None:
    """The output that returns a cache input updated: ``past_key_values.X`` -> ``present.X``; else None."""
    head = PAST + "."
    return PRESENT + "." + input_name[len(head):] if input_name.startswith(head) else None


def past_name(output_name: str) -> str | None:
    """The input a step's output feeds at the next step: ``present.X`` -> ``past_key_values.X``; else None."""
    head = PRESENT + "."
    return PAST + "." + output_name[len(head):] if output_name.startswith(head) else None


def cache_pairs(input_names: Sequence[str], output_names: Sequence[str]) -> dict[str, str | None]:
    """Each cache input (``past_key_values.X``) -> the output of the same step that feeds it next.

    None where the step returns no such output: that input keeps what it was fed last (a
    cross-attention cache computed once, as optimum's ``decoder_with_past_model.onnx`` takes it
    without returning it).
    """
    outputs = set(output_names)
    pairs: dict[str, str | None] = {}
    for name in input_names:
        present = present_name(name)
        if present is not None:
            pairs[name] = present if present in outputs else None
    return pairs
