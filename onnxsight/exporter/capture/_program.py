"""An ``ExportedProgram`` as the model: already captured, so export goes straight to decompose.

People who ran torch.export themselves (their own decompositions, quantization, a program loaded
with ``torch.export.load``) pass the program, as torch.onnx accepts. Capturing ``program.module()``
again would trace a second time what torch.export already traced, and could trace it differently.
The later stages rewrite the graph in place (``x.relu_()`` -> ``relu(x)``), so they get a copy of
the graph; the weights are shared, never copied. ``program.module()`` stands in for the model
where an ``nn.Module`` is read: forward()'s argument names, the example inputs' binding.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext


def adopt_program(ctx: DiagnosticContext, program: torch.export.ExportedProgram, args: Any, kwargs: Any,
                  dynamic_shapes: Any, dynamic_axes: Any
                  ) -> tuple[torch.export.ExportedProgram, torch.nn.Module, Any, Any]:
    """(a copy of ``program`` to transform, ``program.module()``, args, kwargs: the program's examples if none).

    ARG005 for ``dynamic_shapes``/``dynamic_axes``: the program's dims were decided when it was captured.
    """
    for argument, value in (("dynamic_shapes", dynamic_shapes), ("dynamic_axes", dynamic_axes)):
        if value is not None:
            ctx.emit(rules.INVALID_ARGUMENT, argument=argument,
                     error="the model is an ExportedProgram, whose dynamic dims were decided when it was "
                           "captured: pass dynamic_shapes to torch.export.export (its Dim names name the "
                           "ONNX dims), and none here")
    if (args is None or args == ()) and not kwargs and program.example_inputs is not None:
        args, kwargs = program.example_inputs
    with warnings.catch_warnings():  # torch's own deprecation noise from copying its TreeSpecs
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
        graph_module = copy.deepcopy(program.graph_module)
        for original, copied in zip(program.graph_module.graph.nodes, graph_module.graph.nodes):
            copied.name = original.name  # the copy renames nodes that shadow builtins (input -> input_1)
        graph_module.recompile()
        own = program._update(graph_module, copy.deepcopy(program.graph_signature))
        return own, program.module(), args, kwargs
