"""nn.LSTM / nn.GRU / nn.RNN exported with a dynamic batch and sequence as ONNX LSTM / GRU / RNN nodes.

Each row exports once at (batch 2, length 5), checks the graph holds one ONNX
recurrent node per layer (not the unrolled per-step MatMuls), then runs the
model in ONNX Runtime at two other (batch, length) sizes and compares with
eager at float32's default tolerance.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

import onnxsight
from tests.exporter.test_rnn import WithState

ONNX_OP = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}
OTHER_SIZES = ((1, 9), (3, 2))
FEATURES, HIDDEN = 4, 6


def _layer(cell: str, num_layers: int, bidirectional: bool, batch_first: bool, bias: bool) -> torch.nn.Module:
    options = dict(num_layers=num_layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias)
    if cell == "lstm":
        return torch.nn.LSTM(FEATURES, HIDDEN, **options)
    if cell == "gru":
        return torch.nn.GRU(FEATURES, HIDDEN, **options)
    return torch.nn.RNN(FEATURES, HIDDEN, nonlinearity=cell.split("_")[1], **options)


def _inputs(cell: str, layer: torch.nn.Module, with_state: bool, batch: int, length: int) -> tuple:
    x = torch.randn(batch, length, FEATURES) if layer.batch_first else torch.randn(length, batch, FEATURES)
    if not with_state:
        return (x,)
    states = layer.num_layers * (2 if layer.bidirectional else 1)
    count = 2 if cell == "lstm" else 1
    return (x, *(torch.randn(states, batch, HIDDEN) for _ in range(count)))


def _dynamic_shapes(inputs: tuple, batch_first: bool) -> tuple:
    batch, length = Dim("batch"), Dim("seq")
    x = {0: batch, 1: length} if batch_first else {0: length, 1: batch}
    return (x, tuple({1: batch} for _ in inputs[1:])) if len(inputs) > 1 else (x,)


# (cell, num_layers, bidirectional, batch_first, with_state, bias): every option appears on and off,
# for every cell.
ROWS = [
    ("lstm", 1, False, False, False, True),
    ("lstm", 2, True, True, True, True),
    ("lstm", 2, False, True, False, False),
    ("lstm", 1, True, False, True, False),
    ("gru", 1, False, True, False, True),
    ("gru", 2, True, False, True, True),
    ("gru", 2, False, False, True, False),
    ("gru", 1, True, True, False, False),
    ("rnn_tanh", 2, True, True, False, True),
    ("rnn_tanh", 1, False, False, True, False),
    ("rnn_relu", 1, True, False, True, True),
    ("rnn_relu", 2, False, True, False, False),
]


@pytest.mark.parametrize("cell,num_layers,bidirectional,batch_first,with_state,bias", ROWS)
def test_dynamic_batch_and_sequence(cell: str, num_layers: int, bidirectional: bool, batch_first: bool,
                                    with_state: bool, bias: bool) -> None:
    torch.manual_seed(0)
    layer = _layer(cell, num_layers, bidirectional, batch_first, bias)
    model = (WithState(layer) if with_state else layer).eval()
    example = _inputs(cell, layer, with_state, 2, 5)
    program = onnxsight.export(model, example, dynamic_shapes=_dynamic_shapes(example, batch_first))

    op_types = [node.op_type for node in program.model_proto.graph.node]
    assert op_types.count(ONNX_OP[cell]) == num_layers
    assert "MatMul" not in op_types and "Gemm" not in op_types  # not unrolled
    for batch, length in OTHER_SIZES:
        inputs = _inputs(cell, layer, with_state, batch, length)
        with torch.no_grad():
            expected = [t for t in pytree.tree_leaves(model(*inputs)) if isinstance(t, torch.Tensor)]
        actual = program(*inputs)
        assert len(actual) == len(expected)
        for want, got in zip(expected, actual):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("bidirectional,bias", [(True, True), (False, False)])
def test_lstm_projection_is_one_scan_per_layer_and_direction(bidirectional: bool, bias: bool) -> None:
    """ONNX LSTM has no projection: proj_size > 0 becomes a Scan over the sequence, still dynamic."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(FEATURES, HIDDEN, num_layers=2, proj_size=3, bidirectional=bidirectional, bias=bias,
                         batch_first=True).eval()
    program = onnxsight.export(lstm, (torch.randn(2, 5, FEATURES),),
                               dynamic_shapes={"input": {0: Dim("batch"), 1: Dim("seq")}})
    op_types = [node.op_type for node in program.model_proto.graph.node]
    assert op_types.count("Scan") == 2 * (2 if bidirectional else 1) and "LSTM" not in op_types
    for batch, length in OTHER_SIZES:
        x = torch.randn(batch, length, FEATURES)
        with torch.no_grad():
            expected = pytree.tree_leaves(lstm(x))
        for want, got in zip(expected, program(x)):
            torch.testing.assert_close(got, want)


def test_weights_are_initializers_in_onnx_gate_order() -> None:
    """The ONNX LSTM reads W/R/B initializers computed at export, not Split/Concat of PyTorch's weights."""
    lstm = torch.nn.LSTM(FEATURES, HIDDEN).eval()
    program = onnxsight.export(lstm, (torch.randn(5, 2, FEATURES),))
    graph = program.model_proto.graph
    node = next(n for n in graph.node if n.op_type == "LSTM")
    initializers = {t.name: t for t in graph.initializer}
    assert list(node.input[1:4]) == ["weight_ih_l0__onnx_LSTM_W", "weight_hh_l0__onnx_LSTM_R",
                                     "bias_ih_l0__onnx_LSTM_B"]
    assert all(name in initializers for name in node.input[1:4])
    w = torch.from_numpy(__import__("onnx").numpy_helper.to_array(initializers[node.input[1]]).copy())
    i, f, g, o = lstm.weight_ih_l0.detach().chunk(4)
    torch.testing.assert_close(w[0], torch.cat([i, o, f, g]))
    assert not {"Split", "Concat"} & {n.op_type for n in graph.node}
    assert "weight_ih_l0" not in initializers  # PyTorch's layout is not shipped as well


class WeightsAsInputs(torch.nn.Module):
    """The layer run with weights passed as inputs: the ONNX op's W/R/B are reordered in the graph."""

    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.layer = layer
        self.names = [name for name, _ in layer.named_parameters()]

    def forward(self, x: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(self.layer, dict(zip(self.names, weights)), (x,))[0]


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn_tanh"])
@pytest.mark.parametrize("opset", [17, 23])
def test_weights_given_as_inputs_are_reordered_in_the_graph(cell: str, opset: int) -> None:
    torch.manual_seed(0)
    layer = _layer(cell, 1, True, False, True).eval()
    weights = tuple(p.detach().clone() for p in layer.parameters())
    model = WeightsAsInputs(layer)
    x = torch.randn(5, 2, FEATURES)
    shapes = ({0: Dim("seq"), 1: Dim("batch")}, tuple(None for _ in weights))
    program = onnxsight.export(model, (x, *weights), opset_version=opset, dynamic_shapes=shapes)
    op_types = [node.op_type for node in program.model_proto.graph.node]
    assert op_types.count(ONNX_OP[cell]) == 1 and "Concat" in op_types
    other = torch.randn(8, 3, FEATURES)
    with torch.no_grad():
        torch.testing.assert_close(program(other, *weights)[0], layer(other)[0])


def test_a_layer_called_twice_ships_its_weights_once() -> None:
    class Twice(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = torch.nn.GRU(FEATURES, HIDDEN, bidirectional=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.gru(x)[0] + self.gru(x.flip(0))[0]

    model = Twice().eval()
    program = onnxsight.export(model, (torch.randn(5, 2, FEATURES),), dynamic_shapes={"x": {0: Dim("seq")}})
    graph = program.model_proto.graph
    assert [n.op_type for n in graph.node].count("GRU") == 2
    assert sorted(t.name for t in graph.initializer if t.name.startswith("gru.")) == [  # the rest: constants
        "gru.bias_ih_l0__onnx_GRU_B", "gru.weight_hh_l0__onnx_GRU_R", "gru.weight_ih_l0__onnx_GRU_W"]
    x = torch.randn(8, 2, FEATURES)
    with torch.no_grad():
        torch.testing.assert_close(program(x)[0], model(x))


def test_lstm_dynamic_sequence_through_decomposition() -> None:
    """A model that needs decomposition (a mutated buffer) keeps the LSTM and its dynamic length."""
    class Counted(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(FEATURES, HIDDEN, batch_first=True)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls.add_(1)
            return self.lstm(x)[0]

    model = Counted().eval()
    program = onnxsight.export(model, (torch.randn(2, 5, FEATURES),),
                               dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("seq")}})
    assert [n.op_type for n in program.model_proto.graph.node].count("LSTM") == 1
    x = torch.randn(3, 11, FEATURES)
    with torch.no_grad():
        torch.testing.assert_close(program(x)[0], model.lstm(x)[0])


class TrainModeDropout(torch.nn.Module):
    """Calls the ATen op with train=True (export runs models in eval mode, so only a direct call gets here)."""

    def __init__(self, cell: str) -> None:
        super().__init__()
        self.cell = cell
        self.rnn = _layer(cell, 2, False, True, True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h0 = torch.zeros(2, x.shape[0], HIDDEN)
        hx = [h0, torch.zeros_like(h0)] if self.cell == "lstm" else h0
        op = torch.ops.aten.lstm.input if self.cell == "lstm" else torch.ops.aten.gru.input
        return op(x, hx, self.rnn._flat_weights, True, 2, 0.5, True, False, True)[0]


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_train_mode_dropout_between_layers_is_ops006(cell: str) -> None:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(TrainModeDropout(cell), (torch.randn(2, 5, FEATURES),))
    errors = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert [d.code for d in errors] == ["OPS006"]
    assert "dropout" in errors[0].message and f"aten.{cell}.input" in errors[0].message


def test_shape_kernels_run_eager_within_and_are_restored_after() -> None:
    """Inside capture, real tensors still run torch's kernels; afterwards the ops' kernels are torch's again."""
    from onnxsight.exporter.capture._rnn_kernels import rnn_shape_kernels

    ops = (torch.ops.aten.lstm.input, torch.ops.aten.gru.input, torch.ops.aten.rnn_tanh.input,
           torch.ops.aten.rnn_relu.input)
    before = [dict(op.py_kernels) for op in ops]
    lstm = torch.nn.LSTM(FEATURES, HIDDEN, num_layers=2).eval()
    x = torch.randn(5, 2, FEATURES)
    with torch.no_grad():
        expected = lstm(x)
        with rnn_shape_kernels():
            inside = lstm(x)
    for want, got in zip(pytree.tree_leaves(expected), pytree.tree_leaves(inside)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    onnxsight.export(lstm, (x,), dynamic_shapes={"input": {0: Dim("seq")}})
    assert [dict(op.py_kernels) for op in ops] == before
