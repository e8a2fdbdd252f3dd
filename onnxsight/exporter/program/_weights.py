"""``save(path, weights=...)``: check a checkpoint against the program, then stream it into external data.

The program names each weight by its ``state_dict`` key (``_translate_program``:
a parameter or buffer's initializer is its FQN, ``fc.weight``), so a
checkpoint maps onto the initializers by name. Weights tied to each other
(a language model's head and embedding) are separate initializers holding the
same tensor; a checkpoint usually keeps one of them, so each initializer is
looked up under the names of every tensor it is tied to.

Every problem is found before anything is written, from the checkpoint's
keys, dtypes and shapes alone: missing weights (VAL008), keys the model does
not have (VAL009), another shape or dtype (VAL010). Then the weights are
written one at a time, so the peak memory is one tensor (a ``state_dict``) or
one copy chunk (a file), never the model.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, caller_location
from onnxsight.exporter.program._checkpoint import BadWeights, open_weights, write_tensor
from onnxsight.exporter._errors import WeightsError
from onnxsight.exporter.inputs._fake import has_data, listing

ALIGN = 4096  # each tensor starts on a page, for mmap


def save_with_weights(translated: Any, exported: Any, path: Any, weights: Any, *, strict: bool,
                      external_data: bool | None, assemble: Any, embedded_constant: Any) -> list[str]:
    """Write ``path`` and ``path.data`` with the weights of ``weights``; returns the two paths.

    ``assemble`` builds the ModelProto from the external-data table (``_program.assemble``); the tensors
    ``embedded_constant(translated, name, tensor)`` accepts stay in the model.
    Raises :class:`WeightsError` (ARG014, VAL008-VAL010) before writing anything.
    """
    ctx = DiagnosticContext(fallback_location=caller_location())
    try:
        if external_data is False:
            raise BadWeights("streams the weights into external data (model.onnx.data), "
                             "but save() was called with external_data=False")
        if not isinstance(path, (str, os.PathLike)):
            raise BadWeights(f"streams the weights into a file next to the model, but the path is a "
                             f"{type(path).__name__}: pass a path")
        path = os.fspath(path)
        source = open_weights(weights)
    except BadWeights as exc:
        ctx.emit(rules.INVALID_WEIGHTS_ARGUMENT, reason=str(exc))
        raise WeightsError("save(weights=...) was given no checkpoint", diagnostics=ctx.diagnostics) from None
    plan = _plan(ctx, translated, exported, source, strict)
    if ctx.errors:
        raise WeightsError(f"the checkpoint {source.description} does not fit this program",
                           diagnostics=ctx.diagnostics)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    location = os.path.basename(path) + ".data"
    data_path = os.path.join(os.path.dirname(os.path.abspath(path)), location)
    external: dict[str, tuple[str, int, int]] = {}
    written: dict[tuple, tuple[str, int, int]] = {}  # (checkpoint key, permutation) -> entry: tied weights once
    fd = os.open(data_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for name, tensor in translated.initializers.items():
            key = plan[name]
            if name in translated.computed:  # folded by the optimize stage: computed again from the checkpoint's
                offset = os.lseek(fd, 0, os.SEEK_CUR)
                length = write_tensor(_computed(translated.computed[name], source, key), fd)
                external[name] = (location, offset, length)
                os.write(fd, b"\0" * ((-(offset + length)) % ALIGN))
                continue
            if key is None and embedded_constant(translated, name, tensor):
                continue
            perm = translated.derived[name][1] if key is not None and name in translated.derived else None
            if key is not None and (key, perm) in written:
                external[name] = written[(key, perm)]
                continue
            offset = os.lseek(fd, 0, os.SEEK_CUR)
            if key is None:
                length = write_tensor(tensor, fd)
            elif perm is None:
                length = source.write(key, fd)
            else:  # stored transposed by the optimize stage: the checkpoint's tensor, transposed the same way
                length = write_tensor(_read(source, key).permute(perm).contiguous(), fd)
            external[name] = (location, offset, length)
            if key is not None:
                written[(key, perm)] = external[name]
            os.write(fd, b"\0" * ((-(offset + length)) % ALIGN))
    finally:
        os.close(fd)
    model = assemble(translated, with_data=False, external=external)
    with open(path, "wb") as handle:
        handle.write(model.SerializeToString())
    return [path, data_path]


def _plan(ctx: DiagnosticContext, translated: Any, exported: Any, source: Any, strict: bool) -> dict[str, Any]:
    """initializer -> checkpoint key (None: the program's own tensor), or for an initializer computed from
    several weights, a tuple of keys (one per operand); emits VAL008/VAL009/VAL010."""
    keys = set(source.keys())
    expected = set(getattr(exported, "state_dict", {}) or {})
    constants = dict(getattr(exported, "constants", {}) or {})
    tied = _tied_names({**translated.initializers, **(getattr(exported, "state_dict", {}) or {}), **constants})
    non_persistent = set(getattr(exported.graph_signature, "non_persistent_buffers", ()) or ())
    plan: dict[str, Any] = {}
    missing: list[str] = []
    mismatches: list[str] = []

    def lookup(source_name: str, perm: Any, tensor: Any) -> str | None:
        key = next((k for k in tied.get(source_name, [source_name]) if k in keys), None)
        if key is None:
            if not (has_data(tensor) and (not strict or source_name not in expected)):
                missing.append(_describe(source_name, non_persistent, translated.initializer_kinds.get(source_name),
                                         expected))
            return None
        meta = source.meta(key)
        shape = tuple(meta.shape) if perm is None or len(meta.shape) != len(perm) else \
            tuple(meta.shape[i] for i in perm)
        if name in translated.derived and perm is None:  # stored in another shape, the same elements in order
            shape = tuple(tensor.shape) if math.prod(meta.shape) == tensor.numel() else shape
        if meta.dtype != tensor.dtype or shape != tuple(tensor.shape):
            mismatches.append(f"{key}: {_dtype(meta.dtype)} {list(meta.shape)} in the checkpoint, "
                              f"{_dtype(tensor.dtype)} {list(tensor.shape)} in the program")
        return key

    for name, tensor in translated.initializers.items():
        if name in translated.computed:
            recipe = translated.computed[name]
            plan[name] = tuple(None if src is None or operand is None else lookup(src[0], src[1], operand)
                               for src, operand in zip(recipe.sources, recipe.tensors))
            continue
        plan[name] = lookup(*translated.derived.get(name, (name, None)), tensor)
    if missing:
        ctx.emit(rules.CHECKPOINT_MISSING_WEIGHTS, source=source.description, count=len(missing),
                 keys=listing(missing))
    known = expected | set(constants) | set(translated.initializers) | {s for s, _ in translated.derived.values()} \
        | {src[0] for recipe in translated.computed.values() for src in recipe.sources if src is not None}
    unexpected = [k for k in source.keys() if k not in known]
    if unexpected and strict:
        ctx.emit(rules.CHECKPOINT_UNEXPECTED_KEYS, source=source.description, count=len(unexpected),
                 keys=listing(unexpected))
    if mismatches:
        ctx.emit(rules.CHECKPOINT_WEIGHT_MISMATCH, source=source.description, count=len(mismatches),
                 mismatches=listing(mismatches, 4))
    return plan


def _computed(recipe: Any, source: Any, keys: tuple[str | None, ...]) -> torch.Tensor:
    """A folded initializer computed from the checkpoint's tensors (the program's own where ``keys`` has None)."""
    operands = [own if key is None else _read(source, key).permute(src[1]) if src[1] else _read(source, key)
                for key, src, own in zip(keys, recipe.sources, recipe.tensors)]
    return recipe.compute(operands).contiguous()


def _read(source: Any, key: str) -> torch.Tensor:
    """One checkpoint tensor in memory (for a weight the program stores transposed): its bytes, copied out
    through the same ``write`` every other weight is streamed with."""
    import tempfile

    meta = source.meta(key)
    with tempfile.TemporaryFile() as scratch:
        source.write(key, scratch.fileno())
        scratch.seek(0)
        data = bytearray(scratch.read())
    if not data:
        return torch.empty(tuple(meta.shape), dtype=meta.dtype)
    return torch.frombuffer(data, dtype=meta.dtype).reshape(tuple(meta.shape))


def _tied_names(tensors: dict[str, Any]) -> dict[str, list[str]]:
    """name -> itself first, then every other name of the same tensor object (tied weights)."""
    by_id: dict[int, list[str]] = {}
    for name, tensor in tensors.items():
        by_id.setdefault(id(tensor), []).append(name)
    return {name: [name, *(n for n in by_id[id(t)] if n != name)] for name, t in tensors.items()}


def _describe(name: str, non_persistent: set[str], kind: str | None, expected: set[str]) -> str:
    """A missing weight, with why a checkpoint would not have it when that is the reason."""
    if name in non_persistent:
        return f"{name} (a non-persistent buffer: never in a state_dict)"
    if kind == "CONSTANT_TENSOR":
        return f"{name} (a tensor attribute of the model, not in its state_dict)"
    if name not in expected:
        return f"{name} (computed by the exporter from other weights)"
    return name


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
