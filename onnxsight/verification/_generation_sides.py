"""The two sides of a verified generation: the PyTorch model driving its own cache, and the step
programs in ONNX Runtime fed the previous step's outputs.

Both sides are called with the same inputs by role (``_generation_io.ROLES``): the PyTorch model gets
only the arguments the ONNX step program takes, so that a loop over the exported files is compared
with the same loop in PyTorch (a decoder exported without ``position_ids`` computes its positions as
the model does when it is not given them, on both sides).
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter import past_name
from onnxsight.verification._checks import is_program
from onnxsight.verification._chunks import OrtFailure
from onnxsight.verification._engine import report_ort_error
from onnxsight.verification._generation_io import PRESENT
from onnxsight.verification._graph import GraphIndex
from onnxsight.verification._runners import OrtRunner, VerificationError, full_float32, refuse

# role -> the keyword the transformers model's forward() takes it by (encoder-decoders: decoder_*)
_DECODER_ONLY = {"tokens": "input_ids", "attention_mask": "attention_mask", "position_ids": "position_ids",
                 "cache_position": "cache_position", "encoder_states": "encoder_hidden_states"}
_ENCODER_DECODER = {"tokens": "decoder_input_ids", "attention_mask": "attention_mask",
                    "decoder_attention_mask": "decoder_attention_mask", "position_ids": "decoder_position_ids",
                    "cache_position": "cache_position", "encoder_states": "encoder_outputs"}


def cache_argument(model: Any) -> str:
    """forward()'s name for the KV cache: ``cache`` (transformers 5.24 and later 5.x), else ``past_key_values``."""
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


def forward_takes(module: Any, name: str) -> bool:
    """Whether ``module.forward`` takes keyword ``name`` (by name, or through ``**kwargs``)."""
    try:
        parameters = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return True
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def named_cache(cache: Any) -> dict[str, Any]:
    """A transformers cache's tensors by the name the exporter gives them after ``present.``/``past_key_values.``
    (``0.key``, ``0.decoder.key``, ``0.encoder.value``): the exporter's own flattening, so both agree."""
    from torch.utils import _pytree as pytree

    from onnxsight.exporter import library_pytrees

    if cache is None:
        return {}
    with library_pytrees():
        leaves, _ = pytree.tree_flatten_with_path(cache)
    named: dict[str, Any] = {}
    for path, leaf in leaves:
        name = ".".join(str(getattr(key, "key", getattr(key, "idx", key))) for key in path)
        named[name] = leaf
    return named


def step_cache(model: Any, *, encoder_decoder: bool) -> Any:
    """An empty cache in the layout the step programs are exported with: a layer per the model's config,
    every attention layer keeping every position.

    NOTE: generate() gives a sliding-window layer (Mistral, Gemma2's local layers) a cache that drops the
    positions outside its window; the exported step keeps them and its mask leaves them out, as optimum's
    and ONNX Runtime GenAI's decoders do (a fixed window would be specialised on the export's example). The
    logits are the same; so that the cache is compared position by position, PyTorch's side (and the
    export's example, ``export_generation``) keep every position too.
    """
    from transformers import DynamicCache, EncoderDecoderCache
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    def dynamic() -> Any:
        config = getattr(model, "config", None)
        try:
            cache = DynamicCache(config=config) if config is not None else DynamicCache()
        except (TypeError, AttributeError, ValueError):  # not a transformers config: layers made as used
            return DynamicCache()
        cache.layers = [DynamicLayer() if isinstance(layer, DynamicSlidingWindowLayer) else layer
                        for layer in cache.layers]
        return cache

    return EncoderDecoderCache(dynamic(), dynamic()) if encoder_decoder else dynamic()


class TorchSide:
    """The user's model (a transformers model, or a decoder of the user's over a ``DynamicCache``), driving its
    own cache (``DynamicCache``/``EncoderDecoderCache``, in ``step_cache``'s layout)."""

    def __init__(self, model: Any, *, encoder_decoder: bool) -> None:
        self.model = model
        self.encoder_decoder = encoder_decoder
        self.keywords = _ENCODER_DECODER if encoder_decoder else _DECODER_ONLY
        self.cache_argument = cache_argument(model)
        self.cache: Any = None

    @property
    def device(self) -> Any:
        """Where the model's weights are (the step's inputs are moved there; CUDA runs without TF32)."""
        import torch

        first = next(iter(self.model.parameters()), None)
        return first.device if first is not None else torch.device("cpu")

    def encode(self, inputs: Mapping[str, Any]) -> Any:
        """The encoder's last hidden state for the prompt (encoder-decoders)."""
        import torch

        encoder = self.model.get_encoder()
        accepted = _parameters(encoder)
        kwargs = {k: self._placed(v) for k, v in inputs.items() if k in accepted or not accepted}
        with torch.no_grad(), full_float32(str(self.device)):
            out = encoder(**kwargs)
        return out[0] if isinstance(out, (tuple, list)) else out.last_hidden_state

    def _placed(self, value: Any) -> Any:
        return value.to(self.device) if hasattr(value, "to") and hasattr(value, "device") else value

    def new_cache(self) -> Any:
        return step_cache(self.model, encoder_decoder=self.encoder_decoder)

    def past(self) -> dict[str, Any]:
        """The cache the next step reads, by ONNX input name (``past_key_values.0.key``)."""
        return {past_name(name): tensor for name, tensor in _presents(self.cache).items()}

    def step(self, values: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """One call of the model with ``values`` by role; (logits, the cache it returns by output name)."""
        import torch

        if self.cache is None:
            self.cache = self.new_cache()
        kwargs = {self.keywords[role]: self._placed(value) for role, value in values.items() if role in self.keywords}
        if "encoder_outputs" in kwargs:
            kwargs["encoder_outputs"] = (kwargs["encoder_outputs"],)
        kwargs[self.cache_argument] = self.cache
        if forward_takes(self.model, "use_cache"):  # transformers' models; a user's own decoder may not take it
            kwargs["use_cache"] = True
        with torch.no_grad(), full_float32(str(self.device)):
            out = self.model(**kwargs)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        if cache is not None:
            self.cache = cache
        logits = out.logits if hasattr(out, "logits") else out[0]
        return logits, _presents(self.cache)


def call_failure(model: Any, exc: Exception, positions: int) -> str:
    """PyTorch's error for a step that failed, with the model's position limit where the step went past it
    (GPT-2's learned positions: an IndexError at the step whose tokens pass ``n_positions``)."""
    text = f"{type(exc).__name__}: {exc}"[:400]
    config = getattr(model, "config", None)
    for attribute in ("n_positions", "max_target_positions", "max_position_embeddings"):
        limit = getattr(config, attribute, None)
        if isinstance(limit, int) and positions > limit:
            return (f"{text} (this step's tokens reach position {positions - 1}, past the model's "
                    f"config.{attribute} = {limit}: ask for fewer steps or a shorter prompt)")
    return text


def _presents(cache: Any) -> dict[str, Any]:
    """A transformers cache's tensors by the output names of a step that returns it (``present.0.key``)."""
    return {PRESENT + name: tensor for name, tensor in named_cache(cache).items()}


def _parameters(module: Any) -> set[str]:
    try:
        return set(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return set()


@dataclass
class StepModel:
    """One ONNX model of the loop: what ONNX Runtime runs, and the ONNXProgram for the per-node comparison."""

    which: str                     # "encoder" | "first_step" | "decoder"
    model: Any                     # onnx.ModelProto
    program: Any = None            # the ONNXProgram (None: given as a file; no per-node comparison)
    replaced: bool = False         # the ONNX model is not the program's own (verify(onnx_model=...))

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.model.graph.input if i.name not in _initializers(self.model)]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.model.graph.output]


def _initializers(model: Any) -> set[str]:
    return {t.name for t in model.graph.initializer}


def step_model(which: str, given: Any, replacement: Any = None) -> StepModel:
    """A program, an ONNX file or an ``onnx.ModelProto`` as a :class:`StepModel`; GEN002 for anything else."""
    import onnx

    program = given if is_program(given) else None
    if program is None and replacement is not None:
        raise refuse(rules.GENERATION_PROGRAM_INVALID, program=which, given=type(given).__name__,
                     detail="onnx_models replaces a program's own ONNX model: pass the ONNXProgram here")
    source = replacement if replacement is not None else given
    if is_program(source):
        return StepModel(which, source.model_proto, program)
    if isinstance(source, (str, os.PathLike)):
        if not os.path.isfile(source):
            raise refuse(rules.GENERATION_PROGRAM_INVALID, program=which, given=repr(os.fspath(source)),
                         detail="no such file")
        return StepModel(which, onnx.load(os.fspath(source)), program, replaced=replacement is not None)
    if isinstance(source, onnx.ModelProto):
        return StepModel(which, source, program, replaced=replacement is not None)
    raise refuse(rules.GENERATION_PROGRAM_INVALID, program=which, given=type(source).__name__,
                 detail="expected an onnxsight.ONNXProgram, an .onnx path or an onnx.ModelProto")


class OrtSide:
    """The step models in ONNX Runtime (one session each), with the cache the previous step returned."""

    def __init__(self, models: Sequence[StepModel], providers: Sequence[str], ctx: DiagnosticContext, *,
                 fallback: bool = False) -> None:
        self.runners: dict[str, OrtRunner] = {}
        self.error: str | None = None   # a session ONNX Runtime could not create (ORT001 says why)
        for model in models:
            runner = OrtRunner(providers, ctx=ctx, fallback=fallback)
            runner.activate()
            try:
                runner.load(model.model)
            except VerificationError:  # a provider that is not there: a bad call
                raise
            except Exception as exc:  # noqa: BLE001 - ORT001, and DTY002 at the line of an op without a kernel
                error = report_ort_error(OrtFailure("session", exc), runner, ctx, GraphIndex.build(model.model))
                self.error = f"ONNX Runtime could not load the {model.which}: {error}"
                break
            self.runners[model.which] = runner
        self.providers = list(next(iter(self.runners.values())).providers) if self.runners else list(providers)
        self.cache: dict[str, np.ndarray] = {}   # cache input name -> what the next step is fed

    def run(self, which: str, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        from onnxsight.verification._metrics import to_numpy

        return self.runners[which].infer({name: to_numpy(value) for name, value in feeds.items()})

    def keep_cache(self, outputs: Mapping[str, np.ndarray]) -> None:
        """Remember what the next step's cache inputs are fed: each ``present.X`` output becomes
        ``past_key_values.X`` (the exporter's ``past_name``); an input no step returns keeps its value (the
        cross-attention cache the first step computed)."""
        for name, value in outputs.items():
            past = past_name(name)
            if past is not None:
                self.cache[past] = value

    def close(self) -> None:
        for runner in self.runners.values():
            runner.deactivate()
