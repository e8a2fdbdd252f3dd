"""``onnxsight::packed_lstm`` / ``packed_gru`` / ``packed_rnn_tanh`` / ``packed_rnn_relu``: one op per packed RNN call.

A packed sequence's layout (``data`` of sum(lengths) rows, ``batch_sizes`` per
step) depends on the lengths' values, which torch.export cannot trace. During
capture (``_packed.py``) a packed RNN call becomes one of these ops on the
padded, time-major input and the lengths, which torch.export keeps as one node
and the translator maps onto ONNX LSTM/GRU/RNN with ``sequence_lens``
(``ops/rnn.py``). Their eager kernels run PyTorch's own packed kernels (used
when the exported program runs, as in verification), so the captured graph
computes what the model does: outputs at and after a sequence's length are
zero, the final state of each sequence is the state at its last step.
"""

from __future__ import annotations

import torch
from torch import Tensor

_VARIABLE_FUNCTIONS = torch._C._VariableFunctions  # torch's kernels, never the capture-time replacements


def _run_packed(kernel: str, input: Tensor, lengths: Tensor, hx: list[Tensor], params: list[Tensor],
                has_biases: bool, num_layers: int, dropout: float, train: bool,
                bidirectional: bool) -> list[Tensor]:
    """PyTorch's packed kernel on a padded time-major batch in any order of lengths; padded outputs back."""
    lengths = lengths.to("cpu", torch.int64)
    order = torch.sort(lengths, descending=True).indices
    restore = torch.argsort(order)
    data, batch_sizes = _VARIABLE_FUNCTIONS._pack_padded_sequence(input.index_select(1, order.to(input.device)),
                                                                  lengths[order], False)
    states = [state.index_select(1, order.to(state.device)) for state in hx]
    state_arg = states if kernel == "lstm" else states[0]
    result = getattr(_VARIABLE_FUNCTIONS, kernel)(data, batch_sizes, state_arg, params, has_biases, num_layers,
                                                  dropout, train, bidirectional)
    padded, _ = _VARIABLE_FUNCTIONS._pad_packed_sequence(result[0], batch_sizes, False, 0.0, input.shape[0])
    back = restore.to(input.device)
    return [padded.index_select(1, back), *(state.index_select(1, back) for state in result[1:])]


@torch.library.custom_op("onnxsight::packed_lstm", mutates_args=())
def packed_lstm(input: Tensor, lengths: Tensor, hx: list[Tensor], params: list[Tensor], has_biases: bool,
                num_layers: int, dropout: float, train: bool, bidirectional: bool) -> tuple[Tensor, Tensor, Tensor]:
    """LSTM over a padded time-major batch [T, B, I] with ``lengths`` [B]: (output [T, B, D*H], h_n, c_n)."""
    output, h_n, c_n = _run_packed("lstm", input, lengths, hx, params, has_biases, num_layers, dropout, train,
                                   bidirectional)
    return output, h_n, c_n


@packed_lstm.register_fake
def _(input: Tensor, lengths: Tensor, hx: list[Tensor], params: list[Tensor], has_biases: bool, num_layers: int,
      dropout: float, train: bool, bidirectional: bool) -> tuple[Tensor, Tensor, Tensor]:
    output = input.new_empty((input.shape[0], input.shape[1], (2 if bidirectional else 1) * hx[0].shape[-1]))
    return output, hx[0].new_empty(hx[0].shape), hx[1].new_empty(hx[1].shape)


def _define_single_state(kernel: str):  # noqa: ANN202 - a custom op object
    """packed_gru / packed_rnn_tanh / packed_rnn_relu: one state tensor in, one out."""
    @torch.library.custom_op(f"onnxsight::packed_{kernel}", mutates_args=())
    def op(input: Tensor, lengths: Tensor, hx: Tensor, params: list[Tensor], has_biases: bool, num_layers: int,
           dropout: float, train: bool, bidirectional: bool) -> tuple[Tensor, Tensor]:
        output, h_n = _run_packed(kernel, input, lengths, [hx], params, has_biases, num_layers, dropout, train,
                                  bidirectional)
        return output, h_n

    @op.register_fake
    def _(input: Tensor, lengths: Tensor, hx: Tensor, params: list[Tensor], has_biases: bool, num_layers: int,
          dropout: float, train: bool, bidirectional: bool) -> tuple[Tensor, Tensor]:
        output = input.new_empty((input.shape[0], input.shape[1], (2 if bidirectional else 1) * hx.shape[-1]))
        return output, hx.new_empty(hx.shape)

    return op


packed_gru = _define_single_state("gru")
packed_rnn_tanh = _define_single_state("rnn_tanh")
packed_rnn_relu = _define_single_state("rnn_relu")
