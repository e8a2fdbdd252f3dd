"""A LLaMA layer's cos/sin and causal mask in ORT's constant-cache form, where the sequence length is known at
export (``_rotary.py``'s forms for static shapes, and for a dynamic batch alone).

The translated graph then holds cos/sin as constants (the model's positions are known): they are evaluated,
checked to be one pair for every layer with equal halves, and written as ``Gather(Slice(Constant cache, 0,
Shape(x)[1]), position_ids)``, the form ``FusionRotaryEmbeddings`` takes its cos/sin caches from; the causal
mask as transformers combined it with an all-ones padding mask (a constant: it broadcasts over the batch). A
known batch keeps the position ids constants; a batch known at run time expands them to ``Shape(hidden)[0]``
rows (the first layer's sizes).
"""

from __future__ import annotations

import numpy as np
import onnx
import torch

from onnxsight.exporter._builder import torch_to_tensor_proto
from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._emit import Emitter
from onnxsight.exporter.optimize._fold import _from_numpy
from onnxsight.exporter.optimize._graph import Graph, parent
from onnxsight.exporter.optimize._rotary_dynamic import Sizes, all_attend
from onnxsight.exporter.optimize._sized_mask import mask_subgraph, subgraph_model


def evaluate(graph: Graph, name: str) -> torch.Tensor | None:
    """The value of ``name`` where it is computed from constants only (cos/sin of the positions known at
    export), evaluated with ONNX's reference implementation; None where it reads a graph input."""
    from onnx.reference import ReferenceEvaluator

    value = graph.constant(name)
    if value is not None:
        return value if has_data(value) else None
    found = mask_subgraph(graph, name, weights=True)
    if found is None or found[1] or found[2] or len(found[0]) > 17:
        return None
    try:
        return _from_numpy(np.asarray(ReferenceEvaluator(subgraph_model(graph, found[0], [], name)).run(None, {})[0]))
    except Exception:  # noqa: BLE001 - what the reference cannot run is left as it is
        return None


def constant_tables(graph: Graph, muls: list[tuple[onnx.NodeProto, onnx.NodeProto]], length: int,
                    head_size: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The (length, head size) cos and sin rows every ``(x * cos, rotate_half(x) * sin)`` pair of ``muls`` reads
    (as its second input, unsqueezed), where they are one pair of known values with equal halves; None
    otherwise (the layers are then left as they are)."""
    found: list[torch.Tensor] = []   # cos, sin, cos, sin, ...
    for mul in (mul for pair in muls for mul in pair):
        unsqueeze = parent(graph, mul, 1, "Unsqueeze")
        value = evaluate(graph, unsqueeze.input[0]) if unsqueeze is not None else None
        if value is None or value.dim() != 3 or value.shape[1:] != (length, head_size) \
                or not bool((value == value[:1]).all()):
            return None
        found.append(value[0])
    half = head_size // 2
    if not found or any(not torch.equal(value, found[i % 2]) for i, value in enumerate(found)) \
            or any(not torch.equal(value[:, :half], value[:, half:]) for value in found[:2]):
        return None
    return found[0], found[1]


def _per_batch_row(emit: Emitter, sizes: Sizes, batch: int | str, row: torch.Tensor, hint: str) -> str:
    """``row`` (1, length) repeated for each batch row: a constant for a known batch, else expanded to
    ``(Shape(root)[0], Shape(root)[1])`` (the length is the row's, known at export)."""
    if isinstance(batch, int):
        return emit.const(hint, row.expand(batch, *row.shape[1:]).contiguous())
    return emit.op("Expand", emit.const(hint, row), sizes.pair(emit), hint=hint)


def gathered_tables(emit: Emitter, sizes: Sizes, tables: tuple[torch.Tensor, torch.Tensor], batch: int | str,
                     length: int) -> tuple[str, str]:
    """cos and sin as ``Unsqueeze(Gather(Slice(Constant cache, 0, Shape(root)[1]), position_ids), 1)``.

    The Slice's end is a ``Shape(root)`` of its own, not the first layer's ``sizes``: ``FusionRotaryEmbeddings``
    removes the whole cos/sin path it matched (``self.add_nodes_to_remove(sin_path)``, ``Shape`` included)
    before ``FusionRotaryAttention`` looks for the first layer's Reshape shapes."""
    rows = emit.op("Unsqueeze", emit.op("Gather", emit.op("Shape", sizes.root), emit.const("_one", 1), axis=0),
                   emit.const("_axis0", [0]), hint="length")
    # NOTE: RotaryEmbedding wants one row of position ids per batch row
    positions = _per_batch_row(emit, sizes, batch, torch.arange(length)[None], "_position_ids")
    out = []
    for kind, table in zip(("cos", "sin"), tables):
        cache = emit.op("Constant", hint=f"{kind}_cached", value=torch_to_tensor_proto(table, f"{kind}_cached"))
        sliced = emit.op("Slice", cache, emit.const("_axis0", [0]), rows, emit.const("_axis0", [0]))
        out.append(emit.op("Unsqueeze", emit.op("Gather", sliced, positions, axis=0), emit.const("_axis1", [1]),
                           hint=kind))
    return out[0], out[1]


def padding_mask_form(emit: Emitter, length: int, fill: float, dtype: int) -> str:
    """The causal mask as transformers combined it with an all-ones padding mask:
    ``Where(causal blocked, fill, 1 - Cast(Expand(Unsqueeze(Unsqueeze(ones)))))``, of shape (1, 1, length,
    length)."""
    return all_attend(emit, emit.const("_causal_blocked", ~torch.ones(length, length, dtype=torch.bool).tril()), fill,
                      dtype)
