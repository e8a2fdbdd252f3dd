"""LSTM with an output projection (``proj_size > 0``) as one ONNX Scan per layer and direction (not a translation).

NOTE: ONNX LSTM has no projection (PyTorch's ``h_t = W_hr (o_t * tanh(c_t))``),
so this variant cannot be one LSTM node. Rather than unrolling the example's
length, the step is an ONNX Scan body over the sequence: the sequence length
and the batch stay dynamic. The input projection ``x W_ih^T + b_ih + b_hh`` is
one MatMul over the whole sequence outside the loop; the body does the
recurrent MatMul, the gates (PyTorch's i, f, g, o order: no reordering) and
the projection.
"""

from __future__ import annotations

from typing import Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value


def _t(b: GraphBuilder, weight: Value) -> Value:
    return b.op("Transpose", weight, perm=[1, 0])


def _step(b: GraphBuilder, dtype: torch.dtype, hidden: int, r_t: Value, hr_t: Value, name: str) -> tuple:
    """The Scan body: (h [B, P], c [B, H], x_t [B, 4H]) -> (h', c', h')."""
    body = b.subgraph()
    h, c, x_t = (Value(b.fresh(n), dtype, None) for n in ("h", "c", "x_t"))
    gates = body.op("Add", x_t, body.op("MatMul", h, r_t))
    i, f, g, o = body.op("Split", gates, body.const([hidden] * 4, torch.int64), axis=-1, outputs=4)
    c_next = body.op("Add", body.op("Mul", body.op("Sigmoid", f), c),
                     body.op("Mul", body.op("Sigmoid", i), body.op("Tanh", g)))
    h_next = body.op("MatMul", body.op("Mul", body.op("Sigmoid", o), body.op("Tanh", c_next)), hr_t)
    y = body.op("Identity", h_next)
    c_next.dtype = h_next.dtype = y.dtype = dtype
    return body.make_graph(name, [h, c, x_t], [h_next, c_next, y])


def _direction(b: GraphBuilder, x: Value, h0: Value, c0: Value, params: Sequence[Value], has_biases: bool,
               reverse: bool) -> tuple[Value, Value, Value]:
    """One direction of one layer: (Y [T, B, P], h_T [B, P], c_T [B, H])."""
    w_ih, w_hh = params[0], params[1]
    w_hr = params[-1]
    hidden = w_ih.shape[0] // 4
    xw = b.op("MatMul", x, _t(b, w_ih))
    if has_biases:
        xw = b.op("Add", xw, b.op("Add", params[2], params[3]))
    body = _step(b, x.dtype, hidden, _t(b, w_hh), _t(b, w_hr), b.fresh(f"{b.node.name}_step"))
    direction = [1 if reverse else 0]
    h_t, c_t, y = b.op("Scan", h0, c0, xw, outputs=3, body=body, num_scan_inputs=1,
                       scan_input_directions=direction, scan_output_directions=direction)
    h_t.dtype = c_t.dtype = y.dtype = x.dtype
    return y, h_t, c_t


def projected_lstm(b: GraphBuilder, x: Value, hx: Sequence[Value], layers: Sequence[Sequence[Sequence[Value]]],
                   has_biases: bool) -> tuple[Value, Value, Value]:
    """Time-major ``x`` [T, B, I] through every layer: (output [T, B, D*P], h_n [L*D, B, P], c_n [L*D, B, H])."""
    finals_h: list[Value] = []
    finals_c: list[Value] = []
    zero = b.const([0], torch.int64)
    for index, layer in enumerate(layers):
        ys = []
        for d, params in enumerate(layer):
            at = b.const(index * len(layer) + d, torch.int64)
            h0, c0 = (b.op("Gather", state, at, axis=0) for state in hx)
            y, h_t, c_t = _direction(b, x, h0, c0, params, has_biases, reverse=d == 1)
            ys.append(y)
            finals_h.append(b.op("Unsqueeze", h_t, zero))
            finals_c.append(b.op("Unsqueeze", c_t, zero))
        x = b.op("Concat", *ys, axis=-1) if len(ys) > 1 else ys[0]
    h_n = b.op("Concat", *finals_h, axis=0) if len(finals_h) > 1 else finals_h[0]
    c_n = b.op("Concat", *finals_c, axis=0) if len(finals_c) > 1 else finals_c[0]
    return x, h_n, c_n
