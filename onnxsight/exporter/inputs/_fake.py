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
from typing import Any, Iterator, Mapping, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, caller_location
from onnxsight.exporter._errors import WeightsError

LISTED = 8  # names shown in a message before "and N more"


@contextlib.contextmanager
def fake_mode() -> Iterator[FakeTensorMode]:
    """Build models and inputs under fake tensors: no memory for their data, then export as usual.

    ``with onnxsight.fake_mode(): model = build(); x = make_inputs()`` then
    ``prog = onnxsight.export(model, (x,))`` (inside or after the block), and
    ``prog.save("model.onnx", weights="model.safetensors")`` writes the real
    weights one tensor at a time. Yields torch's ``FakeTensorMode``.
    """
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        yield mode


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
