"""Fake mode: export a model whose weights never exist in memory (issue 11).

``with onnxsight.fake_mode(): model = build(); x = make_inputs()`` builds the
model with fake tensors (shapes, dtypes and devices only); the exporter
captures and translates it as any other, and the program's weights are fake
until ``save(path, weights=checkpoint)`` streams the real ones
(``_checkpoint.py``). Every place that would read a weight's bytes asks
:func:`dataless` first and refuses with VAL007 instead of failing inside torch.

NOTE: torch.onnx had ``enable_fake_mode()`` (a FakeTensorMode plus patches of
``torch.load`` and ``transformers``); torch 2.13 no longer has it, and its
exporter now takes a model built under torch's own ``FakeTensorMode`` and
fails on the first fake tensor it serialises. Ours is the plain mode, with
``allow_non_fake_inputs`` so a real tensor made before the block (a mask, a
table) can still be used inside it; a model built under torch's mode, or on
the meta device, is handled the same way because we look at the tensors, not
at which mode made them.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import weakref
from typing import Any, Iterator, Mapping, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, caller_location
from onnxsight.exporter._errors import WeightsError

LISTED = 8  # names shown in a message before "and N more"
# A module rebuilt for its non-persistent buffers holds its parameters for real meanwhile: not above this.
REBUILD_LIMIT = 256 * 1024**2

# NOTE: a non-persistent buffer (a rotary embedding's ``inv_freq``, a causal mask) is computed from the
# configuration when the model is built and is in no checkpoint, so a model built in fake mode has no
# source for it. While ``fake_mode()`` is active we note, for each such buffer registered from a
# module's ``__init__``, the class and the arguments that ``__init__`` was called with (read from its
# frame); the export builds that module again for real, outside fake mode, and takes the buffer
# (``materialise_buffers``). Only modules whose own parameters are small are rebuilt (REBUILD_LIMIT);
# a buffer we cannot rebuild stays fake and ``save(weights=)`` names it (VAL008).
_RECIPES: weakref.WeakKeyDictionary[torch.nn.Module, tuple[type, tuple, dict, set[str]]] = \
    weakref.WeakKeyDictionary()


@contextlib.contextmanager
def fake_mode() -> Iterator[FakeTensorMode]:
    """Build models and inputs under fake tensors: no memory for their data, then export as usual.

    ``with onnxsight.fake_mode(): model = build(); x = make_inputs()`` then
    ``prog = onnxsight.export(model, (x,))`` (inside or after the block), and
    ``prog.save("model.onnx", weights="model.safetensors")`` writes the real
    weights one tensor at a time; non-persistent buffers computed at build time
    are computed again for real by the export. Yields torch's ``FakeTensorMode``.
    """
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    register = torch.nn.Module.register_buffer

    def noting(module: torch.nn.Module, name: str, tensor: Any, persistent: bool = True) -> None:
        register(module, name, tensor, persistent)
        if not persistent and tensor is not None and not has_data(tensor):
            _note(module, name, sys._getframe(1))

    torch.nn.Module.register_buffer = noting  # type: ignore[method-assign]
    try:
        with mode:
            yield mode
    finally:
        torch.nn.Module.register_buffer = register  # type: ignore[method-assign]


def _note(module: torch.nn.Module, name: str, frame: Any) -> None:
    """Remember how ``module`` was built: the arguments of the ``__init__`` frame that registered ``name``."""
    while frame is not None and not (frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is module):
        frame = frame.f_back
    if frame is None:
        return
    if module in _RECIPES:
        _RECIPES[module][3].add(name)
        return
    info = inspect.getargvalues(frame)
    args = tuple(info.locals[a] for a in info.args[1:]) + tuple(info.locals.get(info.varargs, ()) or ())
    kwargs = dict(info.locals.get(info.keywords, {}) or {}) if info.keywords else {}
    _RECIPES[module] = (type(module), args, kwargs, {name})


def materialise_buffers(model: Any, constants: dict[str, Any]) -> list[str]:
    """Replace fake non-persistent buffers in ``constants`` (FQN -> tensor) by real ones; returns their names.

    Each module noted by :func:`fake_mode` is built again for real from the same arguments, once, and
    its buffer taken when it has the fake one's dtype and shape. ``model`` itself is left unchanged.
    """
    if not isinstance(model, torch.nn.Module) or not _RECIPES:
        return []
    done = []
    for prefix, module in model.named_modules():
        recipe = _RECIPES.get(module)
        if recipe is None:
            continue
        wanted = {n: f"{prefix}.{n}" if prefix else n for n in recipe[3]}
        wanted = {n: fqn for n, fqn in wanted.items() if fqn in constants and not has_data(constants[fqn])}
        if not wanted or sum(p.numel() * p.element_size() for p in module.parameters()) > REBUILD_LIMIT:
            continue
        real = _rebuild(recipe)
        for name, fqn in wanted.items():
            value = getattr(real, "_buffers", {}).get(name)
            fake = constants[fqn]
            if has_data(value) and value.dtype == fake.dtype and tuple(value.shape) == tuple(fake.shape):
                constants[fqn] = value
                done.append(fqn)
    return done


def _rebuild(recipe: tuple[type, tuple, dict, set[str]]) -> Any:
    cls, args, kwargs, _ = recipe
    try:
        with unset_fake_temporarily(), torch.random.fork_rng(devices=[]):  # its random init: not the user's RNG
            return cls(*args, **kwargs)
    except Exception:  # noqa: BLE001 - a module that cannot be built again keeps its fake buffer (VAL008)
        return None


def real_mode() -> contextlib.AbstractContextManager[Any]:
    """Leave any ambient fake mode while exporting: constants the exporter makes must hold data.

    An export called inside ``with fake_mode():`` would otherwise make every
    ``torch.tensor`` of the translations (a Reshape's shape, a scale) fake.
    """
    return unset_fake_temporarily()


def has_data(tensor: Any) -> bool:
    """True for a tensor with bytes behind it (not fake, not on the meta device)."""
    return isinstance(tensor, torch.Tensor) and not isinstance(tensor, FakeTensor) and not tensor.is_meta


def dataless(tensors: Mapping[str, Any]) -> list[str]:
    """Names of the tensors without data, in order."""
    return [name for name, tensor in tensors.items() if not has_data(tensor)]


def model_is_fake(model: Any) -> list[str]:
    """The parameters and buffers of ``model`` without data (empty for a real model)."""
    if not isinstance(model, torch.nn.Module):
        return []
    named = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    return dataless(named)


def listing(names: Sequence[str], limit: int = LISTED) -> str:
    """``a, b, c and 12 more``: a message names the first few of many."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def fake_weights_error(action: str, names: Sequence[str]) -> WeightsError:
    """VAL007 for ``action`` (``prog(...)``, ``save()``) on a program whose weights ``names`` are fake."""
    ctx = DiagnosticContext(fallback_location=caller_location())
    rule = rules.FAKE_WEIGHTS_USED
    ctx.emit(rule, action=action, count=len(names), weights=listing(names))
    return WeightsError(f"{action} needs the real weights. {rule.fix}", diagnostics=ctx.diagnostics)


def refuse_fake_file(ctx: DiagnosticContext, model: Any, f: Any) -> None:
    """export(fake_model, args, f): VAL007 in the arguments stage, before any work (the save would fail last)."""
    if f is None:
        return
    names = model_is_fake(model)
    if names:
        ctx.emit(rules.FAKE_WEIGHTS_USED, action="export(..., f=...)", count=len(names), weights=listing(names))
