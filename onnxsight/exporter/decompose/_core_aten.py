"""Decomposition to core ATen, keeping ops that have a better ONNX form."""

from __future__ import annotations

import operator
import warnings
from typing import Any

import torch

from onnxsight.exporter.capture._rnn_kernels import rnn_shape_kernels

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
    # alpha/beta given as tensors reach the graph as symbolic numbers (item()), on which torch's
    # decomposition guards (beta == 0: DEC001); the translation takes them as values (ops/linalg.py).
    aten.baddbmm.default,
    # Its decomposition guards on the index's sign, which an index carried by a while_loop (unbacked)
    # does not have: `x.select(0, i).copy_(...)` in a loop body (ops/indexing.py takes it at run time).
    aten.select_scatter.default,
    # One ONNX LSTM/GRU/RNN node each, with a dynamic sequence length (ops/rnn.py).
    aten.lstm.input,
    aten.gru.input,
    aten.rnn_tanh.input,
    aten.rnn_relu.input,
)


# Quantization primitives of torchao (loaded only where torchao is imported): their composite kernels
# would turn a QuantizeLinear into Mul/Round/Add/Clip, which ONNX Runtime does not fuse (ops/quantize_affine.py).
KEPT_QUANTIZATION_OPS = ("torchao.quantize_affine.default", "torchao.dequantize_affine.default",
                         "torchao.choose_qparams_affine.default")


def decomposition_table(keep: tuple = KEPT_OPS) -> dict:
    """torch.export's default core-ATen table without the ops we translate directly."""
    table = torch.export.default_decompositions()
    for op in keep:
        if op in table:
            table.pop(op)
    for op in [op for op in table if str(op) in KEPT_QUANTIZATION_OPS]:
        table.pop(op)
    return table


def decompose(program: torch.export.ExportedProgram, extra_keep: tuple = ()) -> torch.export.ExportedProgram:
    """Run decompositions; ops in ``extra_keep`` (custom translations' targets) are kept too."""
    # NOTE: torch's own pytree code warns (FutureWarning, `isinstance(treespec, LeafSpec)` is
    # deprecated) while re-tracing: a message about torch's internals that the user can do nothing
    # about. Silenced here, for this call only, as capture does (exporter/capture/_strategies.py).
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


def _returns_alias(target: Any) -> bool:
    """An op whose output may share memory with an input (view, reshape, to, alias...): torch's schema
    annotates every such return, the maybe-aliasing ones included."""
    schema = getattr(target, "_schema", None)
    return schema is None or any(ret.alias_info is not None for ret in schema.returns)


def _functional_twin(target: Any) -> Any:
    """``aten.relu_.default`` -> ``aten.relu.default``: the out-of-place overload of an op that writes only
    to its first argument and returns it; None for any other mutating op."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.arguments or len(schema.returns) != 1:
        return None
    written = [arg for arg in schema.arguments if arg.alias_info is not None and arg.alias_info.is_write]
    if written != [schema.arguments[0]] or not schema.name.endswith("_"):
        return None
    packet = getattr(torch.ops.aten, schema.name.split("::")[-1][:-1], None)
    twin = getattr(packet, schema.overload_name or "default", None) if packet is not None else None
    twin_schema = getattr(twin, "_schema", None)
    if twin_schema is None or twin_schema.is_mutable or len(twin_schema.arguments) != len(schema.arguments):
        return None
    return twin


def functionalize_inplace(program: torch.export.ExportedProgram, registry: Any, opset: int) -> int:
    """Rewrite ``x.relu_()`` as ``relu(x)`` where no one else can see the write; the number rewritten.

    NOTE: torch.export keeps torchvision's ``ReLU(inplace=True)``, ``Hardswish(inplace=True)`` and
    ``out += identity`` as in-place ops, and those alone used to send a program to run_decompositions,
    a whole re-trace: 21 s of MobileNetV3-S's dynamic-shape export here. Rewriting is safe when the
    written tensor is an intermediate that owns its memory (not an input, weight or buffer, not made by
    an op that may alias another tensor) and no view of it exists: then only the uses after the write
    see it, and they are pointed at the functional op's result. Only ops whose functional form has a
    translation are rewritten (``resize_`` has none: it goes to run_decompositions, as anything else
    that is not safe to rewrite).
    """
    graph = program.graph_module.graph
    order = {node: index for index, node in enumerate(graph.nodes)}
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not getattr(getattr(node.target, "_schema", None), "is_mutable", False):
            continue
        twin = _functional_twin(node.target)
        written = node.args[0] if node.args else None
        if twin is None or registry.lookup(twin, opset) is None or not isinstance(written, torch.fx.Node) \
                or written.op != "call_function":
            continue
        source = written.args[0] if written.target is operator.getitem else written
        if not isinstance(source, torch.fx.Node) or _returns_alias(source.target) or any(
                user is not node and user.op == "call_function" and _returns_alias(user.target)
                for user in written.users):
            continue
        with graph.inserting_before(node):
            functional = graph.call_function(twin, node.args, node.kwargs)
        functional.meta = dict(node.meta)
        node.replace_all_uses_with(functional)
        for user in [u for u in written.users if u is not functional and order.get(u, -1) > order[node]]:
            user.replace_input_with(written, functional)
        order[functional] = order[node]
        graph.erase_node(node)
        rewritten += 1
    if rewritten:
        program.graph_module.recompile()
    return rewritten


def storage_swaps(program: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    """The ``Tensor.set_`` calls on an input of forward() (DEC003): torch's decomposition refuses them."""
    inputs = {spec.arg.name for spec in program.graph_signature.input_specs
              if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT}
    return [node for node in program.graph.nodes
            if node.op == "call_function" and getattr(node.target, "overloadpacket", None) is aten.set_
            and node.args and isinstance(node.args[0], torch.fx.Node) and node.args[0].name in inputs]
