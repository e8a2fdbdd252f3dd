"""Writing a model with embedded weights without building it in memory (issue 11).

``model.SerializeToString()`` of a ModelProto that embeds its weights needs the
weights copied into protobuf (``raw_data``) and then once more into the
serialised bytes: two copies on top of the model's own tensors. This module
writes the same bytes, field by field in protobuf's wire format, from a
ModelProto without initializers and the initializers' headers (name, dims,
data type, metadata), streaming each weight's bytes straight from its tensor.

The output is byte-for-byte what ``SerializeToString()`` of the embedded model
gives (fields in field-number order, as protobuf writes them), so a reader
cannot tell it apart; ``tests/exporter/test_export_memory.py`` pins that.
"""

from __future__ import annotations

from typing import Any, BinaryIO, Iterable

import onnx
import torch

from onnxsight.exporter._builder import tensor_bytes_view

_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_INITIALIZER = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
_RAW_DATA = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
_LENGTH_DELIMITED = 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _key(number: int, length: int) -> bytes:
    """A length-delimited field's tag and length."""
    return _varint(number << 3 | _LENGTH_DELIMITED) + _varint(length)


def _split(message: Any, number: int) -> tuple[bytes, bytes]:
    """``message`` serialised as (the fields numbered below ``number``, those above it)."""
    parts = []
    for keep in (lambda n: n < number, lambda n: n > number):
        part = type(message)()
        for field, value in message.ListFields():
            if keep(field.number):
                if hasattr(value, "extend"):       # a repeated field
                    getattr(part, field.name).extend(value)
                elif field.type == field.TYPE_MESSAGE:
                    getattr(part, field.name).CopyFrom(value)
                else:
                    setattr(part, field.name, value)
        parts.append(part.SerializeToString())
    return parts[0], parts[1]


class _Entry:
    """One initializer: its header fields, then raw_data from the tensor, then its later fields."""

    def __init__(self, header: onnx.TensorProto, tensor: torch.Tensor) -> None:
        self.before, self.after = _split(header, _RAW_DATA)
        self.tensor = tensor
        self.nbytes = int(tensor.numel() * tensor.element_size())
        self.data_key = _key(_RAW_DATA, self.nbytes) if self.nbytes else b""
        self.size = len(self.before) + len(self.data_key) + self.nbytes + len(self.after)

    def write(self, handle: BinaryIO) -> None:
        handle.write(_key(_INITIALIZER, self.size))
        handle.write(self.before)
        if self.nbytes:
            handle.write(self.data_key)
            handle.write(memoryview(tensor_bytes_view(self.tensor)))   # the tensor's own bytes: no copy
        handle.write(self.after)


def _layout(model: onnx.ModelProto, weights: Iterable[tuple[onnx.TensorProto, torch.Tensor]]
            ) -> tuple[list[bytes], list[_Entry], list[bytes]]:
    """(the bytes before the initializers, the initializers, the bytes after them)."""
    if len(model.graph.initializer):
        raise ValueError("write_embedded takes the initializers apart from the model")
    entries = [_Entry(header, tensor) for header, tensor in weights]
    model_before, model_after = _split(model, _GRAPH)
    graph_before, graph_after = _split(model.graph, _INITIALIZER)
    body = sum(len(_key(_INITIALIZER, e.size)) + e.size for e in entries)
    head = [model_before, _key(_GRAPH, len(graph_before) + body + len(graph_after)), graph_before]
    return head, entries, [graph_after, model_after]


def embedded_size(model: onnx.ModelProto, weights: Iterable[tuple[onnx.TensorProto, torch.Tensor]]) -> int:
    """The byte size of what :func:`write_embedded` writes (the embedded model's ``ByteSize()``), computed."""
    head, entries, tail = _layout(model, weights)
    return sum(map(len, head + tail)) + sum(len(_key(_INITIALIZER, e.size)) + e.size for e in entries)


def write_embedded(handle: BinaryIO, model: onnx.ModelProto,
                   weights: Iterable[tuple[onnx.TensorProto, torch.Tensor]]) -> None:
    """Write ``model`` with ``weights`` appended to its graph's initializers, as one serialised ModelProto.

    ``model``'s graph must hold no initializer (they come from ``weights``: each a TensorProto
    without data, whose ``raw_data`` is the tensor's bytes).
    """
    head, entries, tail = _layout(model, weights)
    for part in head:
        handle.write(part)
    for entry in entries:
        entry.write(handle)
    for part in tail:
        handle.write(part)
