"""Packed sequences (``pack_padded_sequence`` -> LSTM/GRU/RNN -> ``pad_packed_sequence``) under torch.export.

NOTE: torch.export cannot capture a packed sequence: ``_pack_padded_sequence``
lays the rows out by the lengths' values, and the RNN reads ``batch_sizes[0]``
as a size (CAP006 ``zeros(): argument 'size' ... got FakeTensor``). The
TorchScript exporter mapped the pattern onto the ONNX recurrent ops'
``sequence_lens`` input; this module does the same with torch.export. For the
duration of a capture (:func:`packed_sequences`):

- ``torch._VF._pack_padded_sequence``, the kernel ``pack_padded_sequence`` calls
  after it has converted and (``enforce_sorted=False``) sorted the lengths,
  returns the padded input time-major as ``data`` and a placeholder
  ``batch_sizes`` of the time length, remembered with the lengths;
- ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN``'s ``forward``, given such a sequence,
  call one ``onnxsight::packed_*`` op (``_packed_ops``) on (data, lengths), with
  torch's own handling of the initial state's order around it;
- ``torch._VF._pad_packed_sequence`` sets every step at or after a sequence's
  length to ``padding_value``, pads to ``total_length`` and returns the lengths.

The sorting by length and the restoring of the caller's order stay torch's
own code (``index_select`` with ``sorted_indices``/``unsorted_indices``), so
every way of calling it (lengths as a list or a tensor, ``enforce_sorted``
either way, ``batch_first``, ``pack_sequence``) is captured as written.
The padded output's time length is the padded input's (or ``total_length``),
as the TorchScript exporter made it: PyTorch's is the longest length, the
same whenever the input is padded to its longest sequence (``pad_sequence``).

Refused, with CAP014 at the user's line: a packed sequence that did not come
from ``pack_padded_sequence``/``pack_sequence`` in the captured code (built
from ``data``/``batch_sizes`` by hand, or passed in as an input), and an LSTM
with ``proj_size`` on a packed sequence (ONNX LSTM has no projection).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch import Tensor
from torch.nn.utils.rnn import PackedSequence

from onnxsight.exporter.capture import _packed_ops as packed_ops


class PackedSequenceRefused(Exception):
    """A packed-sequence form the capture cannot turn into ``sequence_lens`` (CAP014)."""


class _Deferred:
    """The lengths of the packed sequences made during one capture, by their placeholder ``batch_sizes``."""

    def __init__(self) -> None:
        self.lengths: dict[int, tuple[Tensor, Tensor]] = {}

    def add(self, batch_sizes: Tensor, lengths: Tensor) -> None:
        self.lengths[id(batch_sizes)] = (batch_sizes, lengths)  # the placeholder is kept alive: ids stay unique

    def get(self, batch_sizes: Any, what: str) -> Tensor:
        entry = self.lengths.get(id(batch_sizes))
        if entry is None or entry[0] is not batch_sizes:
            raise PackedSequenceRefused(
                f"{what} received a PackedSequence that was not made by pack_padded_sequence or pack_sequence "
                "in the captured code (built from data and batch_sizes, or passed in as an input): its layout "
                "depends on values torch.export cannot trace; pack the padded batch with "
                "pack_padded_sequence(x, lengths) inside forward()")
        return entry[1]


def _pack(deferred: _Deferred) -> Callable[..., Any]:
    def pack_padded(input: Tensor, lengths: Tensor, batch_first: bool) -> tuple[Tensor, Tensor]:
        data = input.transpose(0, 1) if batch_first else input
        batch_sizes = torch.empty(data.shape[0], dtype=torch.int64, device="cpu")
        deferred.add(batch_sizes, lengths.to(device=input.device))
        return data, batch_sizes
    return pack_padded


def _pad(deferred: _Deferred) -> Callable[..., Any]:
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    def pad_packed(data: Tensor, batch_sizes: Tensor, batch_first: bool, padding_value: float,
                   total_length: Any) -> tuple[Tensor, Tensor]:
        lengths = deferred.get(batch_sizes, "pad_packed_sequence")
        steps = torch.arange(data.shape[0], device=data.device).unsqueeze(1)
        valid = (steps < lengths.unsqueeze(0)).reshape(*data.shape[:2], *([1] * (data.dim() - 2)))
        padded = torch.where(valid, data, padding_value)
        extra = total_length - data.shape[0]
        if not statically_known_true(extra == 0):
            padded = torch.nn.functional.pad(padded, [0, 0] * (data.dim() - 1) + [0, extra], value=padding_value)
        return (padded.transpose(0, 1) if batch_first else padded), lengths
    return pad_packed


def _rnn_forward(deferred: _Deferred, original: Callable[..., Any]) -> Callable[..., Any]:
    def forward(self: torch.nn.RNNBase, input: Any, hx: Any = None) -> Any:
        if not isinstance(input, PackedSequence):
            return original(self, input, hx)
        name = type(self).__name__
        lengths = deferred.get(input.batch_sizes, f"{name}.forward")
        if getattr(self, "proj_size", 0) > 0:
            raise PackedSequenceRefused(f"{name} with proj_size={self.proj_size} on a packed sequence: ONNX LSTM "
                                        "has no output projection to apply per step with sequence_lens")
        self._update_flat_weights()
        data, batch_sizes, sorted_indices, unsorted_indices = input
        shape = (self.num_layers * (2 if self.bidirectional else 1), data.shape[1], self.hidden_size)
        args = (self._flat_weights, self.bias, self.num_layers, float(self.dropout), self.training,
                self.bidirectional)
        if self.mode == "LSTM":
            if hx is None:
                hx = (data.new_zeros(shape), data.new_zeros(shape))
            else:
                hx = self.permute_hidden(hx, sorted_indices)
            output, h_n, c_n = packed_ops.packed_lstm(data, lengths, list(hx), *args)
            hidden: Any = (h_n, c_n)
        else:
            op = {"GRU": packed_ops.packed_gru, "RNN_TANH": packed_ops.packed_rnn_tanh,
                  "RNN_RELU": packed_ops.packed_rnn_relu}[self.mode]
            hx = data.new_zeros(shape) if hx is None else self.permute_hidden(hx, sorted_indices)
            output, hidden = op(data, lengths, hx, *args)
        return (PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices),
                self.permute_hidden(hidden, unsorted_indices))
    return forward


@contextlib.contextmanager
def packed_sequences() -> Iterator[None]:
    """Within this block, packed RNN calls are captured as ``onnxsight::packed_*`` ops (see the module note)."""
    vf = torch._VF
    deferred = _Deferred()
    saved_vf = {name: vars(vf).get(name) for name in ("_pack_padded_sequence", "_pad_packed_sequence")}
    classes = (torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU)
    saved_forward = {cls: vars(cls)["forward"] for cls in classes}
    try:
        setattr(vf, "_pack_padded_sequence", _pack(deferred))
        setattr(vf, "_pad_packed_sequence", _pad(deferred))
        for cls, original in saved_forward.items():
            cls.forward = _rnn_forward(deferred, original)
        yield
    finally:
        for name, value in saved_vf.items():
            if value is None:
                vars(vf).pop(name, None)
            else:
                setattr(vf, name, value)
        for cls, original in saved_forward.items():
            cls.forward = original
        deferred.lengths.clear()
