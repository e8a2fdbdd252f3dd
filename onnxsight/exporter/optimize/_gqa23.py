"""transformers' ``repeat_kv`` before an ONNX ``Attention`` (opset 23) dropped: the op groups key/value heads itself.

Under ``torch.export`` transformers calls ``scaled_dot_product_attention`` with a mask, and then without
``enable_gqa``: it first repeats each of the ``kv`` key/value heads ``n`` times to the query heads,

    Reshape(Expand(Unsqueeze(k, 2), (B, kv, n, S, D)), (B, kv * n, S, D))

so query head ``h`` reads key/value head ``h // n``. ONNX ``Attention`` takes K and V with fewer heads than Q and
pairs them the same way (onnx's reference implementation: ``np.repeat(K, n, axis=1)``; ONNX Runtime alike,
``tests/exporter/test_opset23_rope.py`` checks both), so the Attention reads ``k`` and ``v`` themselves. Only where
both K and V are repeated so, from 4-D values, by the declared shapes (the same symbol is the same size); the
repeat's nodes go where nothing else reads them, their values listed as optimised away. Ours: onnxscript 0.7.2's
``onnx_fusions`` finds no grouped-query attention in these graphs.
"""

from __future__ import annotations

import onnx

from onnxsight.exporter.optimize._graph import Graph, parent

PASS_NAME = "grouped-query key/value"


def unrepeated_key_values(graph: Graph) -> int:
    """Each Attention reading repeat_kv's K and V reads them un-repeated. Returns the nodes removed (at least one
    per Attention changed)."""
    done = 0
    for attention in list(graph.nodes):
        if attention.op_type != "Attention" or attention.domain or len(attention.input) < 3 \
                or len(attention.input) > 4 or any(attention.output[1:]):
            continue
        query = graph.symbolic_shape(attention.input[0])
        repeats = [_repeat(graph, name) for name in attention.input[1:3]]
        if query is None or len(query) != 4 or None in repeats or repeats[0][1:3] != repeats[1][1:3] \
                or query[1] != repeats[0][1] * repeats[0][2]:
            continue
        removed = 0
        for index, (source, _, _, chain) in zip((1, 2), repeats):
            graph.set_input(attention, index, source)
            for node in chain:   # the Reshape, then the Expand, then the Unsqueeze, where nothing else reads them
                if graph.uses(node.output[0]):
                    break
                graph.removed[node.output[0]] = PASS_NAME
                graph.remove([node])
                removed += 1
        done += max(removed, 1)
    return done


def _repeat(graph: Graph, name: str) -> tuple[str, int, int, list[onnx.NodeProto]] | None:
    """(the un-repeated value, its heads, the repeats, [Reshape, Expand, Unsqueeze]) where ``name`` is repeat_kv's."""
    reshape = graph.made_by(name, "Reshape")
    expand = parent(graph, reshape, 0, "Expand")
    unsqueeze = parent(graph, expand, 0, "Unsqueeze")
    if unsqueeze is None or len(unsqueeze.input) != 2:
        return None
    axes = graph.ints(unsqueeze.input[1])
    source = unsqueeze.input[0]
    shapes = [graph.symbolic_shape(v) for v in (source, expand.output[0], name)]
    if axes is None or len(axes) != 1 or axes[0] % 5 != 2 or None in shapes or len(shapes[0]) != 4:
        return None
    (batch, heads, seq, width), expanded, repeated = shapes[0], shapes[1], shapes[2]
    if len(expanded) != 5 or not isinstance(heads, int) or not isinstance(expanded[2], int):
        return None
    if expanded != (batch, heads, expanded[2], seq, width) or repeated != (batch, heads * expanded[2], seq, width):
        return None
    return source, heads, expanded[2], [reshape, expand, unsqueeze]
