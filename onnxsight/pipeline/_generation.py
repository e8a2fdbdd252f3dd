"""A generation, exported and verified: the step programs of a transformers model, and the loop over them.

``export_generation`` exports what a generation loop deploys: a decoder-only model's step over its KV
cache (``input_ids``, ``attention_mask``, ``position_ids`` where forward() takes them, and the cache
``past_key_values.N.key``/``.value``; batch, new tokens and past length dynamic, down to an empty cache,
so that the same program runs the prompt and every later token), or an encoder-decoder's encoder, first
decoder step (which computes the cross-attention cache) and decoder step over both caches.
``verify_generation`` (``onnxsight.verify_generation``) exports them when not given, then runs the loop
of ``onnxsight.verification`` over them and, with ``report=True``, writes the reports.
"""

from __future__ import annotations

import inspect
import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # verification loads ONNX Runtime and pandas: only when a generation is verified
    from onnxsight.verification import GenerationPrograms, GenerationResult

STEPS = 16  # as many as the users verify; onnxsight.verification's run_generation has the same default

# Example sizes of the export, all different so that torch.export ties no two dims by their value.
_BATCH, _NEW, _PAST, _ENCODER = 2, 3, 5, 7


def export_generation(model: Any, inputs: Any, *, opset_version: int | None = None, optimize: bool | str = True,
                      report: bool = False, artifacts_dir: str | os.PathLike = ".") -> GenerationPrograms:
    """Export the step programs of ``model`` (a transformers model with its LM head) for a generation loop.

    ``inputs`` is the prompt as a tokenizer or processor returns it: its dtypes and an encoder-decoder's
    encoder inputs shape the examples; the examples themselves are random, at sizes chosen so every dim
    that varies during generation is dynamic. ``report=True`` writes each program's export report.
    """
    from onnxsight.exporter import ExportError
    from onnxsight.pipeline._export import _write_reports, export
    from onnxsight.verification import GenerationPrograms

    try:
        examples = step_examples(model, inputs)
    except ExportError as error:  # the model raised when run for its cache's shapes (CAP025): reported as export's
        if report:
            _write_reports(error, error.diagnostics, error.record, artifacts_dir, program=None,
                           inputs=(model, (), dict(inputs) if isinstance(inputs, Mapping) else {"input_ids": inputs}))
        raise
    options = {"opset_version": opset_version, "optimize": optimize, "report": report, "artifacts_dir": artifacts_dir}
    return GenerationPrograms(**{name: export(module, (), kwargs=kwargs, dynamic_shapes=shapes, **options)
                                 for name, module, kwargs, shapes in examples})


def step_examples(model: Any, inputs: Any) -> list[tuple[str, Any, dict[str, Any], dict[str, Any]]]:
    """``(program name, module, example kwargs, dynamic_shapes)`` of each step program ``export_generation``
    exports, in the order a loop runs them (``bench/generation.py`` exports the same with torch.onnx)."""
    prompt = dict(inputs) if isinstance(inputs, Mapping) else {"input_ids": inputs}
    if not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return [("decoder", model, *_causal_example(model, prompt))]
    accepted = _forward_parameters(model.get_encoder())  # a tokenizer's token_type_ids: not T5's
    encoder_inputs = {k: v for k, v in prompt.items()
                      if not k.startswith("decoder_") and v is not None and (k in accepted or not accepted)}
    encoder_kwargs, encoder_shapes = _encoder_example(encoder_inputs, _vocab_size(model, prompt))
    states = _encoder_states(model, encoder_kwargs)
    return [("encoder", model.get_encoder(), encoder_kwargs, encoder_shapes),
            ("first_step", model, *_decoder_example(model, states, encoder_kwargs, cache=False)),
            ("decoder", model, *_decoder_example(model, states, encoder_kwargs, cache=True))]


def verify_generation(model: Any, inputs: Any, programs: Any = None, *, steps: int = STEPS,
                      providers: Sequence[str] = ("CPUExecutionProvider",), tolerance: Any = None,
                      per_node: bool = True, onnx_models: Mapping[str, Any] | None = None,
                      decoder_start_token_id: int | None = None, provider_fallback: bool = False,
                      report: bool = False, artifacts_dir: str | os.PathLike = ".") -> GenerationResult:
    """Verify a greedy generation of ``steps`` steps: ``model`` in PyTorch against its ONNX step programs in
    ONNX Runtime, each step fed the previous step's cache, compared per step (tokens, logits, cache).

    ``programs``: a :class:`~onnxsight.verification.GenerationPrograms` (``export_generation``'s), a dict
    ``{"decoder": ..., "encoder": ..., "first_step": ...}`` or one decoder, each an ONNXProgram, an ``.onnx``
    path or an ``onnx.ModelProto``; None exports them first (``result.programs``). ``inputs``: the prompt,
    padding included, as the tokenizer returns it. At the first step that really diverges (not a near-tie
    in PyTorch's own logits) that step is compared per node, fed PyTorch's cache: ``result.root_causes``
    name the value and the user's line. ``report=True`` writes the markdown, HTML and SARIF reports and
    the run record into ``artifacts_dir`` (``result.report_paths``), and with ``programs=None`` each exported
    program's export report: a failed export raises its ``ExportError`` with them (``.report_paths``).
    """
    from onnxsight.verification import run_generation

    if programs is None:  # report=True: each program's export report too, written when its export fails
        programs = export_generation(model, inputs, report=report, artifacts_dir=artifacts_dir)
    result = run_generation(model, inputs, programs, steps=steps, providers=providers, tolerance=tolerance,
                            per_node=per_node, onnx_models=onnx_models, provider_fallback=provider_fallback,
                            decoder_start_token_id=decoder_start_token_id)
    if report:
        from onnxsight.pipeline._generation_record import write_generation_reports

        result.report_paths = write_generation_reports(model, result, artifacts_dir)
    return result


def _cache_argument(model: Any) -> str:
    from onnxsight.verification import cache_argument

    return cache_argument(model)


def _forward_parameters(model: Any) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _cache_shapes(model: Any, call: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Each cache tensor's (shape, dtype) as the model returns it for ``call``: heads and head sizes as
    the model has them (grouped-query attention, GPT-2's, T5's), every position kept (``step_cache``: a
    sliding-window layer too, so that every layer's past has the example's length)."""
    from onnxsight.exporter import run_model
    from onnxsight.verification import named_cache, step_cache

    encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    given = step_cache(model, encoder_decoder=encoder_decoder)
    out = run_model(model, (), {**call, _cache_argument(model): given, **_use_cache(model, always=True)})
    # a transformers ModelOutput names its cache; a user's forward() returning (logits, cache) filled ``given``
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None) or given
    return [(tuple(t.shape), t.dtype) for t in named_cache(cache).values()]


def _use_cache(model: Any, *, always: bool = False) -> dict[str, Any]:
    """``use_cache=True`` where the model's config does not return its cache by default (``always``: wherever
    forward() takes it); nothing for a forward() without that argument (a user's own decoder)."""
    from onnxsight.verification import forward_takes

    if not forward_takes(model, "use_cache"):
        return {}
    return {"use_cache": True} if always or not getattr(getattr(model, "config", None), "use_cache", True) else {}


def _vocab_size(model: Any, prompt: Mapping[str, Any]) -> int:
    """The token ids the examples draw from: the config's vocabulary, else (a user's own decoder) up to the
    prompt's largest id, which the model takes."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if not size:
        size = int(prompt["input_ids"].max()) + 1 if hasattr(prompt.get("input_ids"), "max") else 2
    return max(int(size), 2)


def _causal_example(model: Any, prompt: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A decoder-only model's step: new tokens over a past of ``_PAST`` positions, every length dynamic."""
    import torch
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(0)
    vocab = _vocab_size(model, prompt)
    positions = "position_ids" in _forward_parameters(model)
    call = {"input_ids": torch.randint(1, vocab, (_BATCH, _PAST), generator=generator),
            "attention_mask": torch.ones(_BATCH, _PAST, dtype=torch.long)}
    if positions:
        call["position_ids"] = torch.arange(_PAST).expand(_BATCH, _PAST).contiguous()
    shapes = _cache_shapes(model, call)
    ids = torch.randint(1, vocab, (_BATCH, _NEW), generator=generator)
    tensors = [torch.randn(shape, generator=generator).to(dtype) for shape, dtype in shapes]
    cache = DynamicCache([(tensors[i], tensors[i + 1]) for i in range(0, len(tensors), 2)])
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones(_BATCH, _PAST + _NEW, dtype=torch.long)}
    dynamic: dict[str, Any] = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total"}}
    if positions:
        kwargs["position_ids"] = torch.arange(_PAST, _PAST + _NEW).expand(_BATCH, _NEW).contiguous()
        dynamic["position_ids"] = {0: "batch", 1: "sequence"}
    name = _cache_argument(model)
    kwargs[name] = cache
    dynamic[name] = [{0: "batch", 2: "past"}] * len(tensors)
    kwargs.update(_use_cache(model))
    return kwargs, dynamic


def _encoder_example(inputs: Mapping[str, Any], vocab: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The encoder's inputs at batch ``_BATCH`` (and ``_ENCODER`` tokens for a text encoder), token ids below
    ``vocab`` (Marian pads with its last id: a few above the prompt's largest would be out of the vocabulary)."""
    import torch

    kwargs, dynamic = {}, {}
    for name, value in inputs.items():
        value = torch.as_tensor(value)
        text = value.dim() == 2 and not value.is_floating_point()
        size = (_BATCH, _ENCODER) if text else (_BATCH, *value.shape[1:])
        if value.is_floating_point():
            kwargs[name] = torch.randn(size, generator=torch.Generator().manual_seed(0)).to(value.dtype)
        elif name == "attention_mask":
            kwargs[name] = torch.ones(size, dtype=value.dtype)
        else:
            kwargs[name] = torch.randint(3, max(min(int(value.max()) + 4, vocab), 4), size, dtype=value.dtype,
                                         generator=torch.Generator().manual_seed(0))
        dynamic[name] = {0: "batch", 1: "encoder_sequence"} if text else {0: "batch"}
    return kwargs, dynamic


def _encoder_states(model: Any, encoder_kwargs: Mapping[str, Any]) -> Any:
    from onnxsight.exporter import run_model

    out = run_model(model.get_encoder(), (), encoder_kwargs)
    return out[0] if isinstance(out, (tuple, list)) else out.last_hidden_state


def _decoder_example(model: Any, states: Any, encoder_kwargs: Mapping[str, Any], *,
                     cache: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """An encoder-decoder's decoder step: the first (no cache: it computes the cross-attention cache), or a
    later one over a self-attention cache of ``_PAST`` positions and the cross-attention cache."""
    import torch
    from transformers import DynamicCache, EncoderDecoderCache

    generator = torch.Generator().manual_seed(0)
    vocab = int(getattr(model.config, "vocab_size", 4) or 4)
    # token ids (a text encoder's length varies, with or without a mask); Whisper's features have a fixed length
    text = any(not value.is_floating_point() for value in encoder_kwargs.values())
    encoder_dims = {0: "batch", 1: "encoder_sequence"} if text else {0: "batch"}
    kwargs: dict[str, Any] = {"decoder_input_ids": torch.randint(3, vocab, (_BATCH, _NEW), generator=generator),
                              "encoder_outputs": (states,)}
    dynamic: dict[str, Any] = {"decoder_input_ids": {0: "batch", 1: "decoder_sequence"},
                               "encoder_outputs": (encoder_dims,)}
    if "attention_mask" in encoder_kwargs:
        kwargs["attention_mask"] = encoder_kwargs["attention_mask"]
        dynamic["attention_mask"] = encoder_dims
    if cache:
        call = {"decoder_input_ids": torch.randint(3, vocab, (_BATCH, _PAST), generator=generator),
                "encoder_outputs": (states,),
                **({"attention_mask": kwargs["attention_mask"]} if "attention_mask" in kwargs else {})}
        shapes = _cache_shapes(model, call)
        tensors = [torch.randn(shape, generator=generator).to(dtype) for shape, dtype in shapes]
        half = len(tensors) // 2  # the self-attention cache's tensors, then the cross-attention cache's
        own = DynamicCache([(tensors[i], tensors[i + 1]) for i in range(0, half, 2)])
        cross = DynamicCache([(tensors[i], tensors[i + 1]) for i in range(half, len(tensors), 2)])
        name = _cache_argument(model)
        kwargs[name] = EncoderDecoderCache(own, cross)
        cross = {0: "batch", 2: "encoder_sequence"} if text else {0: "batch"}  # Whisper's encoder length is fixed
        dynamic[name] = [{0: "batch", 2: "past"}] * half + [cross] * half
    kwargs.update(_use_cache(model))
    return kwargs, dynamic

