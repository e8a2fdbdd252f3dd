"""A generation verified: the same greedy loop in PyTorch and over the step programs in ONNX Runtime.

Each step, both sides get the same new tokens, attention mask and positions; PyTorch its own cache,
ONNX Runtime the cache the previous step's programs returned (``present.X`` fed as
``past_key_values.X``). The step's logits and cache are compared, and the top-1 tokens. A token that
differs where PyTorch's own two best logits are closer than the tolerance is a near-tie (GEN007): noted,
not a defect; both loops go on with PyTorch's token, so later steps stay comparable. The first real
divergence (logits or cache beyond tolerance, another token without a near-tie, a failed run) is run
again through the one-call engine (:func:`onnxsight.verify`) on that step's inputs with PyTorch's own
cache, which names the first value that diverges and the user's line (GEN001); when every value agrees
there, the exported program is checked against the eager model on the same inputs (GEN008).
"""

from __future__ import annotations

import fnmatch
import time
from typing import Any, Mapping, Sequence

import numpy as np

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, caller_location
from onnxsight.exporter import past_name, present_name
from onnxsight.verification._generation_io import (ENCODER_STATES, LOGITS, StepSignature, cache_position,
                                                   grown_mask, positions, read_prompt, step_signature)
from onnxsight.verification._generation_replay import compare_per_node, describe
from onnxsight.verification._generation_result import GenerationPrograms, GenerationResult
from onnxsight.verification._generation_sides import OrtSide, StepModel, TorchSide, call_failure, step_model
from onnxsight.verification._metrics import compare, to_numpy
from onnxsight.verification._runners import refuse
from onnxsight.verification._tolerance import Bounds, Tolerance

DEFAULT_STEPS = 16


def run_generation(model: Any, inputs: Any, programs: Any, *, steps: int = DEFAULT_STEPS,
                   providers: Sequence[str] = ("CPUExecutionProvider",), tolerance: Tolerance | None = None,
                   per_node: bool = True, onnx_models: Mapping[str, Any] | None = None,
                   provider_fallback: bool = False, decoder_start_token_id: int | None = None) -> GenerationResult:
    """Greedy decoding for ``steps`` steps in PyTorch (``model``, a transformers model with its LM head) and
    over ``programs`` in ONNX Runtime, compared step by step (see the module docstring).

    ``programs``: a :class:`GenerationPrograms`, a dict with ``decoder`` (and ``encoder``, ``first_step``
    for an encoder-decoder), or one decoder program; each an ONNXProgram, an ``.onnx`` path or a ModelProto.
    ``inputs``: the prompt as a tokenizer returns it (``input_ids``, ``attention_mask`` with its padding;
    an encoder-decoder's encoder inputs, ``input_features`` for Whisper, and ``decoder_input_ids`` when the
    decoder starts from more than its start token). ``onnx_models``: per program name, the ONNX model to run
    instead of the program's own (an optimised copy), compared per node against the program as
    ``verify(onnx_model=)`` does.
    """
    start = time.perf_counter()
    _check_options(steps, tolerance, providers)
    tolerance = tolerance or Tolerance()
    given = as_programs(programs)
    replacements = dict(onnx_models or {})
    models = {name: step_model(name, value, replacements.get(name)) for name, value in given.items()}
    encoder_decoder = "encoder" in models
    signatures = {name: step_signature(name, m.input_names, m.output_names)
                  for name, m in models.items() if name != "encoder"}
    _check_cache(signatures, encoder_decoder)
    ctx = DiagnosticContext(fallback_location=caller_location())
    prompt = read_prompt(model, inputs, encoder_decoder, decoder_start_token_id, models.get("encoder"))
    torch_side = TorchSide(model, encoder_decoder=encoder_decoder)
    ort = OrtSide(list(models.values()), providers, ctx, fallback=provider_fallback)
    loop = _Loop(torch_side, ort, models, signatures, tolerance, ctx, steps)
    encoder, rows = None, []
    try:
        if ort.error is None:  # else no session: ORT001 (DTY002 at the line of an op without a kernel) said why
            encoder = loop.encode(prompt) if encoder_decoder else None
            _warn_positions(prompt, signatures, ctx, encoder_decoder)
            rows = loop.run(prompt) if encoder is None or encoder.get("ran") else []
    finally:
        ort.close()
    error = ort.error or loop.stopped
    result = GenerationResult(rows, [], requested=steps, encoder=encoder, programs=given,
                              info={"providers": list(ort.providers), "requested_providers": list(providers),
                                    "tolerance": tolerance.to_dict(), "encoder_decoder": encoder_decoder,
                                    "batch": int(prompt["tokens"].shape[0]),
                                    "prompt_length": int(prompt["length"]),
                                    "programs": {name: _describe(m) for name, m in models.items()},
                                    **({"error": error} if error else {})})
    first = result.first_divergence
    if first is not None:
        which, feeds, eager = loop.replays[first["step"]]
        result.step_inputs = feeds
        if per_node:
            logits = signatures[which].logits if which in signatures else None
            result.verification = compare_per_node(models[which], feeds, eager, first, result, ctx,
                                                   providers=ort.providers,
                                                   tolerance=logits_tolerance(tolerance, logits or LOGITS),
                                                   logits=logits)
        else:
            ctx.emit(rules.GENERATION_DIVERGED, step=first["step"], phase=first["phase"], what=describe(first, result),
                     cause="it was not compared per node (per_node=False)", properties={"step": first["step"]})
    result.diagnostics = list(ctx.diagnostics)
    result.info["seconds"] = time.perf_counter() - start
    return result


def as_programs(programs: Any) -> GenerationPrograms:
    """``programs`` as :class:`GenerationPrograms` (GEN002 for an unknown key)."""
    if isinstance(programs, GenerationPrograms):
        return programs
    if isinstance(programs, Mapping):
        unknown = sorted(set(programs) - {"decoder", "encoder", "first_step"})
        if unknown or "decoder" not in programs:
            raise refuse(rules.GENERATION_PROGRAM_INVALID, program=", ".join(unknown) or "decoder",
                         given="missing" if not unknown else "an unknown key",
                         detail="the keys are decoder (required), encoder and first_step")
        return GenerationPrograms(**dict(programs))
    return GenerationPrograms(decoder=programs)


def _check_options(steps: Any, tolerance: Any, providers: Any) -> None:
    from onnxsight.verification._checks import _check_providers

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise refuse(rules.VERIFY_INVALID_OPTION, argument="steps", given=repr(steps),
                     expected="a positive number of generation steps")
    if tolerance is not None and not isinstance(tolerance, Tolerance):
        raise refuse(rules.VERIFY_TOLERANCE_TYPE, given=f"{type(tolerance).__name__} {tolerance!r}",
                     use="onnxsight.Tolerance.uniform(atol, rtol)")
    _check_providers(providers)


def _check_cache(signatures: Mapping[str, StepSignature], encoder_decoder: bool) -> None:
    """GEN006 for a cache input no step returns; GEN005 for a cross-attention cache without a first step."""
    returned = {past_name(name) for sig in signatures.values() for name in sig.outputs} - {None}
    decoder = signatures["decoder"]
    if encoder_decoder and decoder.cross_inputs and "first_step" not in signatures:
        raise refuse(rules.GENERATION_FIRST_STEP_NEEDED, inputs=", ".join(decoder.cross_inputs[:2]) + (
            ", ..." if len(decoder.cross_inputs) > 2 else ""))
    for which, sig in signatures.items():
        for name in sig.cache_inputs:
            if name not in returned:
                outputs = [n for n in sig.outputs if past_name(n) is not None]
                raise refuse(rules.GENERATION_CACHE_UNPAIRED, program=which, input=name,
                             output=present_name(name), outputs=", ".join(outputs) or "none")


def _warn_positions(prompt: Mapping[str, Any], signatures: Mapping[str, StepSignature], ctx: DiagnosticContext,
                    encoder_decoder: bool) -> None:
    """GEN010: a left-padded prompt fed to a decoder that takes no position_ids."""
    mask = prompt["mask"]
    padded = [int(r) for r in range(mask.shape[0]) if mask[r, 0] == 0 and bool(mask[r].any())]
    if encoder_decoder or not padded:
        return
    for which, sig in signatures.items():
        if not sig.has("position_ids"):
            ctx.emit(rules.GENERATION_POSITIONS_COUNT_PADDING, rows=", ".join(map(str, padded)), program=which)
            return


def _describe(model: StepModel) -> dict[str, Any]:
    return {"inputs": model.input_names, "outputs": model.output_names, "program": model.program is not None,
            "replaced": model.replaced}


class _Loop:
    """The lockstep loop: each step run on both sides, compared, and its inputs kept where it diverges."""

    def __init__(self, torch_side: TorchSide, ort: OrtSide, models: Mapping[str, StepModel],
                 signatures: Mapping[str, StepSignature], tolerance: Tolerance, ctx: DiagnosticContext,
                 steps: int) -> None:
        self.torch, self.ort, self.models, self.signatures = torch_side, ort, models, signatures
        self.tolerance, self.ctx, self.steps = tolerance, ctx, steps
        self.states: tuple[Any, Any] | None = None   # the encoder's states: PyTorch's, ONNX Runtime's
        # step -> (program, its inputs with PyTorch's cache, PyTorch's logits), for the first real divergence
        self.replays: dict[int, tuple[str, dict[str, Any], Any]] = {}
        self.stopped: str | None = None   # why the loop ended before its last step (PyTorch's step failed)

    def encode(self, prompt: Mapping[str, Any]) -> dict[str, Any]:
        """Run the encoder on both sides once; compare its states (a divergence there is step -1)."""
        encoder = self.models["encoder"]
        feeds = {name: prompt["encoder"][name] for name in encoder.input_names}
        try:
            expected = self.torch.encode(prompt["encoder"])
        except Exception as exc:  # noqa: BLE001 - the user's model: a refusal naming it, not a traceback
            raise refuse(rules.GENERATION_MODEL_CALL_FAILED, phase="encoder", model=type(self.torch.model).__name__,
                         error=f"{type(exc).__name__}: {exc}"[:400]) from exc
        try:
            outputs = self.ort.run("encoder", feeds)
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime's error, reported as the encoder's divergence
            self.replays[-1] = ("encoder", feeds, expected)
            return {"ran": False, "passed": False, "error": str(exc)[:400]}
        name = next((n for n in encoder.output_names if n in ENCODER_STATES), encoder.output_names[0])
        metrics = compare(to_numpy(expected), outputs[name], self.tolerance.for_value(name, expected.dtype))
        self.states = (expected, outputs[name])
        if not metrics.passed:
            self.replays[-1] = ("encoder", feeds, expected)
        return {"ran": True, "passed": metrics.passed, "output": name, "max_abs_diff": metrics.max_abs_diff,
                "shape_mismatch": metrics.shape_mismatch}

    def run(self, prompt: Mapping[str, Any]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        tokens, mask, past = prompt["tokens"], prompt["mask"], 0
        for step in range(self.steps):
            which = "first_step" if step == 0 and "first_step" in self.signatures else "decoder"
            row, chosen = self.step(step, which, prompt, tokens, mask, past)
            if row is None:  # PyTorch's step failed after others ran: the steps that ran are kept
                break
            rows.append(row)
            if row["divergence"] == "error":
                break
            past += tokens.shape[1]
            tokens, mask = chosen[:, None], grown_mask(mask, 1)
        return rows

    def values(self, sig: StepSignature, prompt: Mapping[str, Any], tokens: Any, mask: Any,
               past: int) -> dict[str, Any]:
        """The step's inputs by role (PyTorch's side; the encoder's states are each side's own)."""
        new = tokens.shape[1]
        values: dict[str, Any] = {"tokens": tokens, "position_ids": positions(mask, new),
                                  "cache_position": cache_position(past, new)}
        if self.states is None:
            values["attention_mask"] = mask
        else:
            values["decoder_attention_mask"] = mask
            values["encoder_states"] = self.states[0]
            if prompt.get("encoder_mask") is not None:
                values["attention_mask"] = prompt["encoder_mask"]
        taken = set(sig.roles.values()) | {"tokens", "encoder_states"}
        return {role: value for role, value in values.items() if role in taken}

    def step(self, step: int, which: str, prompt: Mapping[str, Any], tokens: Any, mask: Any,
             past: int) -> tuple[dict[str, Any] | None, Any]:
        sig = self.signatures[which]
        values = self.values(sig, prompt, tokens, mask, past)
        torch_past = self.torch.past()
        try:
            logits, present = self.torch.step(values)
        except Exception as exc:  # noqa: BLE001 - the user's model: said naming it, not a traceback
            fields = {"phase": "prompt" if step == 0 else f"decode (step {step})",
                      "model": type(self.torch.model).__name__,
                      "error": call_failure(self.torch.model, exc, past + tokens.shape[1])}
            if step == 0:  # a model the loop cannot call at all
                raise refuse(rules.GENERATION_MODEL_CALL_FAILED, **fields) from exc
            self.ctx.emit(rules.GENERATION_MODEL_CALL_FAILED, **fields)
            self.stopped = rules.GENERATION_MODEL_CALL_FAILED.format(**fields)
            return None, None
        chosen = logits[:, -1].argmax(-1).cpu()
        row: dict[str, Any] = {"step": step, "phase": "prompt" if step == 0 else "decode",
                               "new_tokens": tokens.shape[1],
                               "past_length": past, "torch_tokens": [int(t) for t in chosen]}

        def keep() -> None:  # the first divergence's inputs, PyTorch's cache included, for its per-node run
            if not self.replays:
                replay = {name: _torch_feed(name, role, values, torch_past, present)
                          for name, role in sig.roles.items()}
                self.replays[step] = (which, replay, logits.cpu())

        feeds = {name: _ort_feed(name, role, values, self.ort.cache, present, self.states)
                 for name, role in sig.roles.items()}
        try:
            outputs = self.ort.run(which, feeds)
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime's error is this step's divergence
            row.update(divergence="error", error=str(exc)[:400], tokens_agree=False)
            keep()
            return row, chosen
        self.ort.keep_cache(outputs)
        row.update(self.judge(sig, logits, outputs, present))
        if row["divergence"] in ("logits", "cache", "tokens"):
            keep()
        if row["divergence"] == "near-tie":
            self.note_near_tie(step, sig, logits, row)
        return row, chosen

    def judge(self, sig: StepSignature, logits: Any, outputs: Mapping[str, np.ndarray],
              present: Mapping[str, Any]) -> dict[str, Any]:
        """Compare the step's logits, cache and tokens; name the divergence, if any."""
        expected = to_numpy(logits)
        actual = outputs[sig.logits]
        bounds = logits_bounds(self.tolerance, sig.logits, logits.dtype)
        metrics = compare(expected, actual, bounds)
        worst, worst_diff, cache_passed = None, 0.0, True
        for name in (n for n in sig.outputs if n in present):
            cache = compare(to_numpy(present[name]), outputs[name], self.tolerance.for_value(name, present[name].dtype))
            diff = float("inf") if cache.shape_mismatch else cache.max_abs_diff
            if not cache.passed and cache_passed or (cache.passed == cache_passed and diff > worst_diff):
                worst, worst_diff = name, diff
            cache_passed = cache_passed and cache.passed
        last = expected[:, -1]
        theirs = actual[:, -1].argmax(-1) if actual.ndim == 3 and actual.shape[0] == expected.shape[0] else None
        ours = last.argmax(-1)
        agree = theirs is not None and bool((theirs == ours).all())
        top2 = np.sort(last, axis=-1)[:, -2:]
        margins = top2[:, 1] - top2[:, 0]
        row = int(margins.argmin())
        near = bool(margins[row] <= _allowed(bounds, top2[row, 1], top2[row, 0]))
        ties = [] if agree or theirs is None else [
            r for r in range(len(ours)) if ours[r] != theirs[r]
            and last[r, ours[r]] - last[r, theirs[r]] <= _allowed(bounds, last[r, ours[r]], last[r, theirs[r]])]
        differ = 0 if agree or theirs is None else int((ours != theirs).sum())
        divergence = ("logits" if not metrics.passed else "cache" if not cache_passed
                      else None if agree else "near-tie" if len(ties) == differ else "tokens")
        return {"onnx_tokens": None if theirs is None else [int(t) for t in theirs], "tokens_agree": agree,
                "max_logit_diff": float("inf") if metrics.shape_mismatch else metrics.max_abs_diff,
                "logits_passed": metrics.passed, "max_cache_diff": worst_diff, "worst_cache": worst,
                "cache_passed": cache_passed, "margin": float(margins[row]), "near_tie": near,
                "divergence": divergence}

    def note_near_tie(self, step: int, sig: StepSignature, logits: Any, row: Mapping[str, Any]) -> None:
        last = to_numpy(logits)[:, -1]
        bounds = logits_bounds(self.tolerance, sig.logits, logits.dtype)
        for r, (ours, theirs) in enumerate(zip(row["torch_tokens"], row["onnx_tokens"])):
            if ours != theirs:
                gap = float(last[r, ours] - last[r, theirs])
                self.ctx.emit(rules.GENERATION_NEAR_TIE, step=step, onnx_token=theirs, torch_token=ours, row=r,
                              torch_logit=f"{last[r, ours]:.6g}", other_logit=f"{last[r, theirs]:.6g}",
                              gap=f"{gap:.3g}", allowed=f"{_allowed(bounds, last[r, ours], last[r, theirs]):.3g}",
                              properties={"step": step})


def logits_bounds(tolerance: Tolerance, name: str, dtype: Any) -> Bounds:
    """The logits' bounds: an override keyed ``logits`` applies whatever the graph calls that output."""
    if name != LOGITS and any(fnmatch.fnmatchcase(LOGITS, pattern) for pattern in tolerance.overrides):
        return tolerance.for_value(LOGITS, dtype)
    return tolerance.for_value(name, dtype)


def logits_tolerance(tolerance: Tolerance, name: str) -> Tolerance:
    """``tolerance`` with a ``logits`` override under the graph's name too (for the per-node run)."""
    found = next((bounds for pattern, bounds in tolerance.overrides.items() if fnmatch.fnmatchcase(LOGITS, pattern)),
                 None)
    return tolerance.with_overrides({name: found}) if found is not None and name != LOGITS else tolerance


def _allowed(bounds: Bounds, first: float, second: float) -> float:
    """How far apart two logits may be and still swap places: each may move by its tolerance."""
    return 2 * bounds.atol + bounds.rtol * (abs(float(first)) + abs(float(second)))


def _torch_feed(name: str, role: str, values: Mapping[str, Any], past: Mapping[str, Any],
                present: Mapping[str, Any]) -> Any:
    """What PyTorch's side was fed for input ``name``: the step replayed with PyTorch's own cache."""
    value = (past[name] if name in past else _empty_cache(name, present)) if role == "cache" else values[role]
    return value.cpu() if hasattr(value, "cpu") else value  # the per-node run is on the CPU


def _ort_feed(name: str, role: str, values: Mapping[str, Any], cache: Mapping[str, np.ndarray],
              present: Mapping[str, Any], states: tuple[Any, Any] | None) -> Any:
    """What ONNX Runtime is fed for input ``name``: its own cache and encoder states, else PyTorch's values."""
    if role == "cache":
        return cache[name] if name in cache else _empty_cache(name, present)
    if role == "encoder_states" and states is not None:
        return states[1]
    return values[role]


def _empty_cache(name: str, present: Mapping[str, Any]) -> Any:
    """The empty cache of the first step: PyTorch's returned cache of the same name with no positions."""
    import torch

    tensor = present.get(present_name(name))
    if tensor is None:
        raise refuse(rules.GENERATION_CACHE_UNPAIRED, program="decoder", input=name,
                     output=present_name(name),
                     outputs=", ".join(present) or "none (PyTorch's model returned no cache)")
    shape = list(tensor.shape)
    shape[-2] = 0
    return torch.zeros(shape, dtype=tensor.dtype)
