"""Capture in eval semantics without changing the user's module.

``model.eval()`` then ``model.train(was_training)`` is not a no-op: ``train()``
sets every submodule to the top module's mode, so a BatchNorm the user froze
with ``bn.eval()`` inside a training model came back training. And a graph
module from torch.export / PT2E (``torch.export.export(...).module()``,
``convert_pt2e``) forbids both calls, while its graph has the modes baked in.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

# the mode-dependent modules whose training graph an export keeps: their ops (native_dropout, sdpa's dropout_p)
# translate to draws (ops/_nn_common.dropout)
_DRAWN = (torch.nn.modules.dropout._DropoutNd, torch.nn.MultiheadAttention)


def is_exported_graph(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a graph module of ATen ops (torch.export's ``.module()``, PT2E's prepare/convert).

    Its behaviour no longer depends on ``training``: the mode it was captured in is in the graph.
    A ``torch.fx.symbolic_trace`` module calls submodules and torch functions instead, and its
    submodules' modes still matter.
    """
    if not isinstance(model, torch.fx.GraphModule):
        return False
    return any(node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
               for node in model.graph.nodes)


@contextlib.contextmanager
def eval_semantics(model: torch.nn.Module, modes: str = "eval") -> Iterator[None]:
    """Every submodule's ``training`` is False inside; each submodule's own flag comes back after.

    ``modes="train"``: every submodule's is True instead (torch.onnx's ``training=TrainingMode.TRAINING``),
    ``"preserve"``: each keeps its own (``TrainingMode.PRESERVE``); the pipeline refuses both where a module
    whose training graph onnxsight does not export would train (:func:`training_dependent`).

    NOTE: the attribute is set directly, never through ``train()``/``eval()``: ``train()``
    recurses (it would overwrite submodules' own modes when restoring), a module may
    override it, and PT2E's graph modules raise from it. An exported graph is left alone.
    """
    if is_exported_graph(model):
        yield
        return
    saved = [(module, module.training) for module in model.modules()]
    try:
        for module, flag in saved:
            module.training = modes == "train" or (modes == "preserve" and flag)
        yield
    finally:
        for module, flag in saved:
            module.training = flag


def training_dependent(model: torch.nn.Module, *, in_any_mode: bool = False, exported: bool = True) -> list[str]:
    """``name (Class)`` of each submodule in training mode whose behaviour depends on the mode.

    Dropout, batch norm, instance norm with running statistics, recurrent layers and attention with
    dropout: the modules whose training graph differs from the one :func:`eval_semantics` captures.
    ``in_any_mode``: such submodules whatever their mode (what ``training=TrainingMode.TRAINING`` would switch).
    ``exported=False``: only those whose training graph onnxsight does not export (dropout's it does: it draws).
    """
    if is_exported_graph(model):
        return []
    found = []
    for name, module in model.named_modules():
        drawn = isinstance(module, _DRAWN)
        if (module.training or in_any_mode) and _mode_dependent(module) and (exported or not drawn):
            found.append(f"{name or 'the model'} ({type(module).__name__})")
    return found


def _mode_dependent(module: torch.nn.Module) -> bool:
    nn = torch.nn
    if isinstance(module, (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)):
        return True
    if isinstance(module, nn.modules.instancenorm._InstanceNorm):
        return bool(module.track_running_stats)
    if isinstance(module, (nn.RNNBase, nn.MultiheadAttention)):
        return bool(module.dropout)
    return False
