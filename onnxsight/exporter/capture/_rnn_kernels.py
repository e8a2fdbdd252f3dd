"""Shape-only kernels for the RNN ops while torch.export traces (not translations).

NOTE: ``aten.lstm.input``, ``gru.input``, ``rnn_tanh.input`` and ``rnn_relu.input``
are CompositeImplicitAutograd ops. torch.export keeps them as one node in the
captured graph, but it computes that node's output (a FakeTensor) by running
torch's Python decomposition (``torch/_decomp/decompositions.py``), which loops
over ``input.unbind(0)``: the loop guards the sequence length to the example's,
so ``dynamic_shapes={"x": {1: T}}`` fails with a constraint violation (CAP005)
although the ONNX translation (ops/rnn.py) never needs a static length.

:func:`rnn_shape_kernels` swaps, for the duration of a capture or a re-trace,
the ops' Python kernels for ones that only compute the output shapes when the
inputs are fake/meta/functional tensors; real tensors still run torch's own
kernel. torch.onnx's dynamo exporter, for comparison, patches the same kernels
with a ``while_loop`` decomposition (``torch/export/_patches.py``) and exports
an ONNX Loop; here the op itself reaches the translator and becomes one ONNX
LSTM/GRU/RNN node. Everything is restored on exit.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

aten = torch.ops.aten
_KEYS = (torch._C.DispatchKey.CompositeImplicitAutograd, torch._C.DispatchKey.Autograd,
         torch._C.DispatchKey.Meta)


def _is_real(tensor: Any) -> bool:
    """A tensor with data (not fake, not meta, not a tracing wrapper around a fake)."""
    from torch._subclasses.fake_tensor import is_fake

    return isinstance(tensor, torch.Tensor) and not tensor.is_meta and not is_fake(tensor)


def _states(hx: Any) -> list[torch.Tensor]:
    return list(hx) if isinstance(hx, (list, tuple)) else [hx]


def _shape_kernel(original: Callable[..., Any], multi_state: bool) -> Callable[..., Any]:
    """``original`` for real tensors; otherwise empty outputs of the right (symbolic) shapes.

    Outputs: ``output`` is the input's shape with the last dim ``num_directions * h_out``
    (``h_out`` is the last dim of ``hx[0]``, proj_size for a projected LSTM); each final
    state has its initial state's shape.
    """
    def kernel(input: torch.Tensor, hx: Any, params: Any, has_biases: bool, num_layers: int, dropout: float,
               train: bool, bidirectional: bool, batch_first: bool) -> tuple[torch.Tensor, ...]:
        states = _states(hx)
        if _is_real(input):
            return original(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        directions = 2 if bidirectional else 1
        output = input.new_empty((*input.shape[:-1], directions * states[0].shape[-1]))
        finals = tuple(state.new_empty(state.shape) for state in (states if multi_state else states[:1]))
        return (output, *finals)
    return kernel


_OPS: tuple[tuple[Any, bool], ...] = (
    (aten.lstm.input, True),
    (aten.gru.input, False),
    (aten.rnn_tanh.input, False),
    (aten.rnn_relu.input, False),
)


@contextlib.contextmanager
def rnn_shape_kernels() -> Iterator[None]:
    """Within this block, tracing an RNN op records it without guarding on the sequence length."""
    import torch._decomp.decompositions  # noqa: F401 - registers the kernels this block swaps

    saved: list[tuple[Any, dict]] = []
    try:
        for op, multi_state in _OPS:
            saved.append((op, dict(op.py_kernels)))
            for key in _KEYS:
                original = op.py_kernels.get(key)
                if callable(original):
                    op.py_kernels[key] = _shape_kernel(original, multi_state)
            op._dispatch_cache.clear()
        yield
    finally:
        for op, kernels in saved:
            op.py_kernels.clear()
            op.py_kernels.update(kernels)
            op._dispatch_cache.clear()
