"""The inputs and outputs of a generation step, by name: what each ONNX input is fed, and which output
feeds which cache input at the next step.

A step program (``onnxsight.export`` of a transformers model called with its cache, optimum's
``decoder_model.onnx``/``decoder_with_past_model.onnx``, ONNX Runtime GenAI's decoder) names its
inputs after the model's arguments: ``input_ids`` (``decoder_input_ids``), ``attention_mask``,
``position_ids``, ``cache_position``, the encoder's hidden states, and the cache as
``past_key_values.{layer}.key``/``.value`` (``past_key_values.{layer}.decoder.key`` and
``.encoder.key`` for an encoder-decoder's self- and cross-attention caches), returned as
``present.{...}``. The loop feeds each input by that role (``ROLES``). Which cache input each output of a
step feeds at the next step is the exporter's one naming rule (``onnxsight.exporter.past_name`` and
``present_name``, the names its step programs have); an input no step returns keeps what it was fed last
(the cross-attention cache the first step computed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from onnxsight import rules
from onnxsight.exporter import past_name, present_name
from onnxsight.verification._runners import refuse

PRESENT = "present."  # the prefix of a cache output: PyTorch's cache tensors are named as the exporter names them
TOKENS = ("input_ids", "decoder_input_ids")
ENCODER_STATES = ("encoder_hidden_states", "encoder_outputs", "encoder_last_hidden_state", "last_hidden_state")
# role -> the input names that play it (a name ending in ``_0``: a tuple argument flattened by the exporter)
ROLES: dict[str, tuple[str, ...]] = {
    "tokens": TOKENS,
    "attention_mask": ("attention_mask", "encoder_attention_mask"),  # an encoder-decoder's: the encoder's mask
    "decoder_attention_mask": ("decoder_attention_mask",),
    "position_ids": ("position_ids", "decoder_position_ids"),
    "cache_position": ("cache_position",),
    "encoder_states": ENCODER_STATES,
}
LOGITS = "logits"


def logits_output(output_names: Sequence[str]) -> str | None:
    """``logits``, else the first output that is not a cache output (the language-model head's)."""
    if LOGITS in output_names:
        return LOGITS
    return next((name for name in output_names if past_name(name) is None), None)


def role_of(name: str) -> str | None:
    """The role an input plays in the loop (``ROLES``), ``cache`` for a cache input, None when unknown."""
    if present_name(name) is not None:
        return "cache"
    for role, names in ROLES.items():
        if any(name == known or name.startswith(f"{known}_") or name.startswith(f"{known}.") for known in names):
            return role
    return None


@dataclass(frozen=True)
class StepSignature:
    """One step program's inputs by role, and its outputs: what the loop feeds and reads."""

    which: str                          # "decoder" | "first_step"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    roles: Mapping[str, str] = field(default_factory=dict)     # input name -> role
    logits: str = LOGITS

    def has(self, role: str) -> bool:
        return role in self.roles.values()

    @property
    def cache_inputs(self) -> list[str]:
        return [name for name, role in self.roles.items() if role == "cache"]

    @property
    def cross_inputs(self) -> list[str]:
        """The encoder-decoder's cross-attention cache inputs (``past_key_values.N.encoder.*``)."""
        return [name for name in self.cache_inputs if ".encoder." in name]


def step_signature(which: str, input_names: Sequence[str], output_names: Sequence[str]) -> StepSignature:
    """The signature of a step program; GEN003 names an input the loop cannot feed, GEN004 a missing logits."""
    roles: dict[str, str] = {}
    for name in input_names:
        role = role_of(name)
        if role is None:
            raise refuse(rules.GENERATION_INPUT_UNKNOWN, program=which, input=name,
                         known=", ".join(sorted({n for names in ROLES.values() for n in names})))
        roles[name] = role
    if "tokens" not in roles.values():
        raise refuse(rules.GENERATION_INPUT_UNKNOWN, program=which, input="(no token ids input)",
                     known=", ".join(TOKENS))
    logits = logits_output(output_names)
    if logits is None:
        raise refuse(rules.GENERATION_NO_LOGITS, program=which, outputs=", ".join(output_names) or "none")
    return StepSignature(which, tuple(input_names), tuple(output_names), roles, logits)


def grown_mask(mask: Any, new: int) -> Any:
    """The attention mask of the next step: ``new`` ones appended (the tokens just generated attend)."""
    import torch

    return torch.cat([mask, mask.new_ones((mask.shape[0], new))], dim=-1)


def positions(mask: Any, new: int) -> Any:
    """Position ids of the last ``new`` tokens as transformers' ``generate()`` computes them: the count of
    attended tokens before each one (left padding does not advance the position), 1 on padding."""
    ids = mask.long().cumsum(-1) - 1
    ids = ids.masked_fill(mask == 0, 1)
    return ids[:, -new:]


def cache_position(past: int, new: int) -> Any:
    import torch

    return torch.arange(past, past + new, dtype=torch.long)


def read_prompt(model: Any, inputs: Any, encoder_decoder: bool, start_id: int | None,
                encoder: Any) -> dict[str, Any]:
    """The prompt: the decoder's first tokens and mask, an encoder-decoder's encoder inputs (``encoder``: the
    encoder's StepModel, whose inputs the prompt must hold)."""
    import torch

    from onnxsight.verification._inputs import _from_numpy

    given = dict(inputs) if isinstance(inputs, Mapping) else {"input_ids": inputs}
    given = {k: _from_numpy(v) for k, v in given.items() if v is not None}
    if not encoder_decoder:
        ids = given.get("input_ids")
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            raise refuse(rules.GENERATION_INPUT_UNKNOWN, program="prompt", input="input_ids (a [batch, length] tensor)",
                         known="input_ids, attention_mask")
        mask = given.get("attention_mask", torch.ones_like(ids))
        return {"tokens": ids, "mask": mask.to(torch.long), "length": ids.shape[1], "encoder": {}}
    encoder_inputs = {k: v for k, v in given.items() if not k.startswith("decoder_")}
    batch = next(iter(encoder_inputs.values())).shape[0]
    tokens = given.get("decoder_input_ids")
    if tokens is None:
        start = start_id if start_id is not None else start_token(model)
        if start is None:
            raise refuse(rules.GENERATION_INPUT_UNKNOWN, program="prompt", input="decoder_input_ids",
                         known="decoder_input_ids, or decoder_start_token_id= (the model's config has none)")
        tokens = torch.full((batch, 1), int(start), dtype=torch.long)
    names = set(encoder.input_names) if encoder is not None else set(encoder_inputs)
    missing = sorted(names - set(encoder_inputs))
    if missing:
        raise refuse(rules.GENERATION_INPUT_UNKNOWN, program="encoder", input=missing[0],
                     known=", ".join(sorted(encoder_inputs)) + " (the prompt's inputs)")
    return {"tokens": tokens, "mask": torch.ones_like(tokens), "length": tokens.shape[1],
            "encoder": encoder_inputs, "encoder_mask": encoder_inputs.get("attention_mask")}


def start_token(model: Any) -> int | None:
    """The decoder's start token from the model's generation config or config; None when neither has one."""
    for config in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(config, "decoder_start_token_id", None)
        if value is not None:
            return int(value)
    return None
