"""Decomposition to core ATen, keeping ops that have a better ONNX form."""

from __future__ import annotations

import operator
import warnings
from typing import Any

import torch

from onnxsight.exporter.ops._rnn_capture import rnn_shape_kernels

aten = torch.ops.aten

# NOTE: these have compact ONNX forms (fused kernels in ONNX Runtime); decomposing
# them would turn one node into ten and lose ORT's fusions.
KEPT_OPS: tuple = (
    aten.linear.default,
    aten.layer_norm.default,
    aten.group_norm.default,
    aten.gelu.default,
    aten.silu.default,
    aten.softmax.int,
    aten.log_softmax.int,
    aten.scaled_dot_product_attention.default,
    aten.upsample_nearest2d.vec,
    aten.upsample_nearest2d.default,
    aten.upsample_bilinear2d.vec,
    aten.upsample_bilinear2d.default,
    aten.upsample_bicubic2d.vec,
    aten.upsample_linear1d.vec,
    aten.upsample_nearest1d.vec,
    aten.upsample_trilinear3d.vec,
    aten.upsample_nearest3d.vec,
    aten.pixel_shuffle.default,
    aten.pixel_unshuffle.default,
    aten.instance_norm.default,
    aten.native_layer_norm.default,
    aten.native_group_norm.default,
    aten._softmax.default,
    aten._log_softmax.default,
    aten.matmul.default,
    aten.rms_norm.default,
    aten.hardswish.default,
    aten.hardsigmoid.default,
    aten.mish.default,
    aten.celu.default,
    aten.selu.default,
    aten._prelu_kernel.default,
    aten.reflection_pad1d.default,
    aten.reflection_pad2d.default,
    aten.reflection_pad3d.default,
    aten.replication_pad1d.default,
    aten.replication_pad2d.default,
    aten.replication_pad3d.default,
    aten.tril.default,
    aten.triu.default,
    # One ONNX LSTM/GRU/RNN node each, with a dynamic sequence length (ops/rnn.py).
    aten.lstm.input,
    aten.gru.input,
    aten.rnn_tanh.input,
    aten.rnn_relu.input,
)


def decomposition_table(keep: tuple = KEPT_OPS) -> dict:
    """torch.export's default core-ATen table without the ops we translate directly."""
    table = torch.export.default_decompositions()
    for op in keep:
        if op in table:
            table.pop(op)
    return table


def decompose(program: torch.export.ExportedProgram, extra_keep: tuple = ()) -> torch.export.ExportedProgram:
    """Run decompositions; ops in ``extra_keep`` (custom translations' targets) are kept too."""
    # NOTE: torch's own pytree code warns (FutureWarning, `isinstance(treespec, LeafSpec)` is
    # deprecated) while re-tracing: a message about torch's internals that the user can do nothing
    # about. Silenced here, for this call only, as capture does (exporter/_capture.py).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*", category=FutureWarning)
        # The table is built before the RNN shape kernels are swapped in: it must hold torch's
        # real decompositions of the RNN ops that are not kept; the re-trace must not guard the
        # sequence length of those that are.
        table = decomposition_table(KEPT_OPS + tuple(extra_keep))
        # Size-oblivious, as capture: a dim captured from a size-1 example (CAP009) must not be
        # specialised back to 1 by the re-trace (a view's -1 solved for batch 1 is wrong at batch 2).
        from torch.fx.experimental import _config as shapes_config

        with rnn_shape_kernels(), shapes_config.patch(backed_size_oblivious=True):
            return program.run_decompositions(table)


def needs_decomposition(program: torch.export.ExportedProgram, registry: Any, opset: int) -> str | None:
    """Why the captured program must be decomposed, or None when it can be translated as captured.

    NOTE: run_decompositions re-traces the whole program, which is most of an
    export's time. The captured graph can be translated directly when it is
    already functional (no op mutates its inputs, no buffer is mutated) and
    every op in it, in every subgraph, has a translation.
    """
    signature = program.graph_signature
    if any(spec.kind.name in ("BUFFER_MUTATION", "USER_INPUT_MUTATION") for spec in signature.output_specs):
        return "the program mutates buffers or inputs"
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            schema = getattr(node.target, "_schema", None)
            if schema is not None and schema.is_mutable:
                return f"{node.target} mutates its input"
            if registry.lookup(node.target, opset) is None:
                return f"{node.target} has no direct translation"
    return None
