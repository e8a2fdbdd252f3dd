"""Recurrent layers: aten.lstm / gru / rnn_tanh / rnn_relu as ONNX LSTM / GRU / RNN, one node per layer.

The sequence length and the batch stay dynamic (ONNX's recurrent ops loop
inside the kernel), instead of torch's decomposition that unrolls the example's
length into per-step MatMuls. The ATen ops arrive with the flat parameter list
of ``nn.LSTM._flat_weights``: per layer, per direction, ``w_ih, w_hh[, b_ih,
b_hh][, w_hr]``, gates in PyTorch's order.

NOTE: gate order. PyTorch LSTM stacks i, f, g, o and ONNX LSTM i, o, f, c
(c is PyTorch's g); PyTorch GRU stacks r, z, n and ONNX GRU z, r, h, with
``linear_before_reset=1`` being PyTorch's ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``.
Weights that are the model's parameters are reordered with torch here and
written as new initializers (the ONNX file holds W, R, B ready for the kernel);
weights that are graph values (inputs, a subgraph's captures) are reordered
in the graph with Split/Concat.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.capture import _packed_ops
from onnxsight.exporter.ops._rnn_projection import projected_lstm

aten = torch.ops.aten

# PyTorch gate blocks, in the order ONNX stacks them.
_LSTM_GATES = (0, 3, 1, 2)   # i, f, g, o -> i, o, f, c
_GRU_GATES = (1, 0, 2)       # r, z, n -> z, r, h
_RNN_GATES = (0,)


def _weight(b: GraphBuilder, value: Value) -> torch.Tensor | None:
    """The tensor of a parameter/buffer that the builder holds as an initializer, else None."""
    tensor = b.initializers.get(value.name) if isinstance(value, Value) else None
    return tensor.detach() if tensor is not None else None


def _initializer(b: GraphBuilder, tensor: torch.Tensor, name: str) -> Value:
    """A new initializer; the name derives from the weights it is computed from, so a layer called
    twice shares one copy."""
    existing = b.initializers.get(name)
    if existing is not None and not (existing.shape == tensor.shape and torch.equal(existing, tensor)):
        name = b.fresh(name)
    b.initializers.setdefault(name, tensor)
    return Value(name, tensor.dtype, tuple(tensor.shape))


def _stack(b: GraphBuilder, weights: Sequence[Value], gates: Sequence[int], hint: str) -> Value:
    """ONNX's [num_directions, gates * H, ...] tensor from one PyTorch weight per direction, gates reordered.

    A list entry may be a pair (w_b, r_b) for biases, which ONNX concatenates per direction.
    """
    groups = [list(w) if isinstance(w, (list, tuple)) else [w] for w in weights]
    tensors = [[_weight(b, v) for v in group] for group in groups]
    if all(t is not None for group in tensors for t in group):
        per_dir = [torch.cat([torch.cat([t.chunk(len(gates))[g] for g in gates]) for t in group])
                   for group in tensors]
        return _initializer(b, torch.stack(per_dir).contiguous(), f"{groups[0][0].name}__onnx_{hint}")
    per_dir = []
    for group in groups:
        parts = []
        for value in group:
            size = _hidden_size(value, len(gates))
            chunks = b.op("Split", value, b.const([size] * len(gates), torch.int64), axis=0,
                          outputs=len(gates)) if len(gates) > 1 else (value,)
            parts.extend(chunks[g] for g in gates)
        joined = b.op("Concat", *parts, axis=0) if len(parts) > 1 else parts[0]
        per_dir.append(b.op("Unsqueeze", joined, b.const([0], torch.int64)))
    return b.op("Concat", *per_dir, axis=0) if len(per_dir) > 1 else per_dir[0]


def _check_variant(dropout: float, train: bool, num_layers: int) -> None:
    if train and dropout > 0 and num_layers > 1:
        raise UnsupportedVariant("dropout", f"{dropout} with train=True",
                                 "0.0, or any value in eval mode (dropout between layers draws random masks; "
                                 "export the model after model.eval())")


def _split_params(params: Sequence[Value], per_dir: int, num_layers: int,
                  directions: int) -> list[list[list[Value]]]:
    """params as [layer][direction] -> that direction's ``per_dir`` tensors."""
    if len(params) != num_layers * directions * per_dir:
        raise ValueError(f"{len(params)} parameters for {num_layers} layer(s) x {directions} direction(s)")
    it = iter(params)
    return [[[next(it) for _ in range(per_dir)] for _ in range(directions)] for _ in range(num_layers)]


def _hidden_size(weight: Value, gates: int) -> int:
    rows = weight.shape[0] if weight.shape else None
    if not isinstance(rows, int):
        raise UnsupportedVariant("params", f"weights of symbolic shape {weight.shape}", "weights of static shape")
    return rows // gates


def _layer_state(b: GraphBuilder, state: Value, layer: int, directions: int, num_layers: int) -> Value:
    """The [num_directions, B, H] slice of a [num_layers * num_directions, B, H] initial state."""
    if num_layers == 1:
        return state
    start = layer * directions
    return b.op("Slice", state, b.const([start], torch.int64), b.const([start + directions], torch.int64),
                b.const([0], torch.int64))


def _layer_output(b: GraphBuilder, y: Value, directions: int) -> Value:
    """ONNX's Y [T, num_directions, B, H] as PyTorch's [T, B, num_directions * H]."""
    if directions == 1:
        return b.op("Squeeze", y, b.const([1], torch.int64))
    y = b.op("Transpose", y, perm=[0, 2, 1, 3])
    return b.op("Reshape", y, b.const([0, 0, -1], torch.int64))


def _run_layers(b: GraphBuilder, op_type: str, gates: Sequence[int], input: Value, states: Sequence[Value],
                params: Sequence[Value], has_biases: bool, num_layers: int, bidirectional: bool,
                batch_first: bool, sequence_lens: Value | None = None, **attrs: Any) -> tuple[Value, list[Value]]:
    """One ONNX ``op_type`` node per layer; returns PyTorch's output and the final states (concatenated).

    ``sequence_lens`` (int32 [B]): each sequence's length, for packed sequences; ONNX then stops each
    sequence there (zeros after it, its final state at its last step, the reverse direction from it).
    """
    directions = 2 if bidirectional else 1
    layers = _split_params(params, 4 if has_biases else 2, num_layers, directions)
    hidden = _hidden_size(layers[0][0][0], len(gates))
    x = b.op("Transpose", input, perm=[1, 0, 2]) if batch_first else input
    finals: list[list[Value]] = [[] for _ in states]
    for index, layer in enumerate(layers):
        w = _stack(b, [d[0] for d in layer], gates, f"{op_type}_W")
        r = _stack(b, [d[1] for d in layer], gates, f"{op_type}_R")
        bias = _stack(b, [(d[2], d[3]) for d in layer], gates, f"{op_type}_B") if has_biases else None
        initial = [_layer_state(b, s, index, directions, num_layers) for s in states]
        outs = b.op(op_type, x, w, r, bias, sequence_lens, *initial, outputs=1 + len(states), hidden_size=hidden,
                    direction="bidirectional" if bidirectional else "forward", **attrs)
        for final, value in zip(finals, outs[1:]):
            final.append(value)
        x = _layer_output(b, outs[0], directions)
    output = b.op("Transpose", x, perm=[1, 0, 2]) if batch_first else x
    return output, [b.op("Concat", *f, axis=0) if len(f) > 1 else f[0] for f in finals]


@translation(aten.lstm.input)
def aten_lstm_input(b: GraphBuilder, input: Value, hx: Sequence[Value], params: Sequence[Value], has_biases: bool,
                    num_layers: int, dropout: float, train: bool, bidirectional: bool,
                    batch_first: bool) -> tuple[Value, Value, Value]:
    """lstm.input(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout,
    bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)"""
    _check_variant(dropout, train, num_layers)
    directions, per_dir = 2 if bidirectional else 1, 4 if has_biases else 2
    if len(params) == num_layers * directions * (per_dir + 1):  # w_hr too: proj_size > 0
        layers = _split_params(params, per_dir + 1, num_layers, directions)
        x = b.op("Transpose", input, perm=[1, 0, 2]) if batch_first else input
        output, h_n, c_n = projected_lstm(b, x, list(hx), layers, has_biases)
        return (b.op("Transpose", output, perm=[1, 0, 2]) if batch_first else output), h_n, c_n
    output, (h_n, c_n) = _run_layers(b, "LSTM", _LSTM_GATES, input, list(hx), params, has_biases, num_layers,
                                     bidirectional, batch_first)
    return output, h_n, c_n


@translation(aten.gru.input)
def aten_gru_input(b: GraphBuilder, input: Value, hx: Value, params: Sequence[Value], has_biases: bool,
                   num_layers: int, dropout: float, train: bool, bidirectional: bool,
                   batch_first: bool) -> tuple[Value, Value]:
    """gru.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout,
    bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)"""
    _check_variant(dropout, train, num_layers)
    output, (h_n,) = _run_layers(b, "GRU", _GRU_GATES, input, [hx], params, has_biases, num_layers, bidirectional,
                                 batch_first, linear_before_reset=1)
    return output, h_n


def _rnn(b: GraphBuilder, activation: str, input: Value, hx: Value, params: Sequence[Value], has_biases: bool,
         num_layers: int, dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> tuple[Value, Value]:
    _check_variant(dropout, train, num_layers)
    activations = [activation] * (2 if bidirectional else 1)
    output, (h_n,) = _run_layers(b, "RNN", _RNN_GATES, input, [hx], params, has_biases, num_layers, bidirectional,
                                 batch_first, activations=activations)
    return output, h_n


@translation(aten.rnn_tanh.input)
def aten_rnn_tanh_input(b: GraphBuilder, input: Value, hx: Value, params: Sequence[Value], has_biases: bool,
                        num_layers: int, dropout: float, train: bool, bidirectional: bool,
                        batch_first: bool) -> tuple[Value, Value]:
    """rnn_tanh.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout,
    bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)"""
    return _rnn(b, "Tanh", input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)


@translation(aten.rnn_relu.input)
def aten_rnn_relu_input(b: GraphBuilder, input: Value, hx: Value, params: Sequence[Value], has_biases: bool,
                        num_layers: int, dropout: float, train: bool, bidirectional: bool,
                        batch_first: bool) -> tuple[Value, Value]:
    """rnn_relu.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout,
    bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)"""
    return _rnn(b, "Relu", input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)


# -- packed sequences: onnxsight::packed_* (capture/_packed.py) on the padded time-major batch and its lengths --
def _packed(b: GraphBuilder, op_type: str, gates: Sequence[int], input: Value, lengths: Value,
            states: Sequence[Value], params: Sequence[Value], has_biases: bool, num_layers: int, dropout: float,
            train: bool, bidirectional: bool, **attrs: Any) -> tuple[Value, list[Value]]:
    _check_variant(dropout, train, num_layers)
    directions = 2 if bidirectional else 1
    if len(params) != num_layers * directions * (4 if has_biases else 2):
        raise UnsupportedVariant("params", f"{len(params)} tensors (proj_size > 0)",
                                 "an LSTM without proj_size on a packed sequence")
    return _run_layers(b, op_type, gates, input, states, params, has_biases, num_layers, bidirectional, False,
                       sequence_lens=b.cast(lengths, torch.int32), **attrs)


@translation(_packed_ops.packed_lstm._opoverload)
def onnxsight_packed_lstm(b: GraphBuilder, input: Value, lengths: Value, hx: Sequence[Value],
                          params: Sequence[Value], has_biases: bool, num_layers: int, dropout: float, train: bool,
                          bidirectional: bool) -> tuple[Value, Value, Value]:
    """packed_lstm(Tensor input, Tensor lengths, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers,
    float dropout, bool train, bool bidirectional) -> (Tensor, Tensor, Tensor)"""
    output, (h_n, c_n) = _packed(b, "LSTM", _LSTM_GATES, input, lengths, list(hx), params, has_biases, num_layers,
                                 dropout, train, bidirectional)
    return output, h_n, c_n


@translation(_packed_ops.packed_gru._opoverload)
def onnxsight_packed_gru(b: GraphBuilder, input: Value, lengths: Value, hx: Value, params: Sequence[Value],
                         has_biases: bool, num_layers: int, dropout: float, train: bool,
                         bidirectional: bool) -> tuple[Value, Value]:
    """packed_gru(Tensor input, Tensor lengths, Tensor hx, Tensor[] params, bool has_biases, int num_layers,
    float dropout, bool train, bool bidirectional) -> (Tensor, Tensor)"""
    output, (h_n,) = _packed(b, "GRU", _GRU_GATES, input, lengths, [hx], params, has_biases, num_layers, dropout,
                             train, bidirectional, linear_before_reset=1)
    return output, h_n


def _packed_rnn(b: GraphBuilder, activation: str, input: Value, lengths: Value, hx: Value, params: Sequence[Value],
                has_biases: bool, num_layers: int, dropout: float, train: bool,
                bidirectional: bool) -> tuple[Value, Value]:
    output, (h_n,) = _packed(b, "RNN", _RNN_GATES, input, lengths, [hx], params, has_biases, num_layers, dropout,
                             train, bidirectional, activations=[activation] * (2 if bidirectional else 1))
    return output, h_n


@translation(_packed_ops.packed_rnn_tanh._opoverload)
def onnxsight_packed_rnn_tanh(b: GraphBuilder, input: Value, lengths: Value, hx: Value, params: Sequence[Value],
                              has_biases: bool, num_layers: int, dropout: float, train: bool,
                              bidirectional: bool) -> tuple[Value, Value]:
    """packed_rnn_tanh(Tensor input, Tensor lengths, Tensor hx, Tensor[] params, bool has_biases,
    int num_layers, float dropout, bool train, bool bidirectional) -> (Tensor, Tensor)"""
    return _packed_rnn(b, "Tanh", input, lengths, hx, params, has_biases, num_layers, dropout, train, bidirectional)


@translation(_packed_ops.packed_rnn_relu._opoverload)
def onnxsight_packed_rnn_relu(b: GraphBuilder, input: Value, lengths: Value, hx: Value, params: Sequence[Value],
                              has_biases: bool, num_layers: int, dropout: float, train: bool,
                              bidirectional: bool) -> tuple[Value, Value]:
    """packed_rnn_relu(Tensor input, Tensor lengths, Tensor hx, Tensor[] params, bool has_biases,
    int num_layers, float dropout, bool train, bool bidirectional) -> (Tensor, Tensor)"""
    return _packed_rnn(b, "Relu", input, lengths, hx, params, has_biases, num_layers, dropout, train, bidirectional)
