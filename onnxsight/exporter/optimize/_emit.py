"""New nodes written into a :class:`Graph` by a pass: exporter constants shared by value, named nodes, each
batch put in a topological place.

The passes that write the forms ONNX Runtime's fusers match build small subgraphs
(a mask read from a Shape, a Reshape's shape from Gathers); this keeps the
graph's indexes true while they do, so a later match sees the nodes already written.
"""

from __future__ import annotations

from typing import Any

import onnx
import torch

from onnxsight.exporter._builder import tensor_bytes_view
from onnxsight.exporter.optimize._graph import Graph


class Emitter:
    """Writes nodes and constants into ``graph``: :meth:`op` makes a node, :meth:`place` puts the nodes made
    since the last call just before a node of the graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._constants: dict[tuple, str] = {}
        self._pending: list[onnx.NodeProto] = []

    def const(self, hint: str, value: torch.Tensor | list[int] | int) -> str:
        """An exporter constant holding ``value`` (ints: int64), one initializer per value for the whole pass."""
        if not isinstance(value, torch.Tensor):
            value = torch.tensor(value, dtype=torch.int64)
        key = (str(value.dtype), tuple(value.shape), tensor_bytes_view(value).tobytes())   # bfloat16 too
        if key not in self._constants:
            self._constants[key] = self.graph.fresh(hint)
            self.graph.initializers[self._constants[key]] = value
        return self._constants[key]

    def op(self, op_type: str, *inputs: str, out: str | None = None, hint: str = "", **attrs: Any) -> str:
        """A new ``op_type`` node reading ``inputs``; returns its output (``out``, or a fresh name from ``hint``)."""
        graph = self.graph
        output = out or graph.fresh(f"_{hint or op_type.lower()}")
        node = onnx.helper.make_node(op_type, list(inputs), [output], name=graph.fresh(f"_{op_type}_{output}"),
                                     **attrs)
        graph.index(node)
        self._pending.append(node)
        return output

    def place(self, before: onnx.NodeProto | None) -> None:
        """Put the nodes made since the last call just before ``before`` (they read only what it can read); at the
        start of the graph for None."""
        at = 0 if before is None else next(i for i, n in enumerate(self.graph.nodes) if n is before)
        self.graph.nodes[at:at] = self._pending
        self._pending = []
