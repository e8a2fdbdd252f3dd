"""nn.LSTM / nn.GRU / nn.RNN exported with random weights and compared with eager in ONNX Runtime.

aten.lstm.input / gru.input / rnn_tanh.input / rnn_relu.input are kept out of
decomposition and translated to ONNX LSTM / GRU / RNN (exporter/ops/rnn.py;
proj_size as a Scan): these tests cover the layer options at static shapes,
tests/exporter/test_rnn_dynamic.py the dynamic batch and sequence.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

import onnxsight

torch.manual_seed(0)


class WithState(torch.nn.Module):
    """Passes explicit initial states, so they become graph inputs."""

    def __init__(self, rnn: torch.nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor, *state: torch.Tensor) -> Any:
        return self.rnn(x, state if len(state) > 1 else state[0])


def _check(model: torch.nn.Module, *inputs: torch.Tensor) -> None:
    model.eval()
    program = onnxsight.export(model, inputs)
    with torch.no_grad():
        expected = [t for t in pytree.tree_leaves(model(*inputs)) if isinstance(t, torch.Tensor)]
    actual = program(*inputs)
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def _seq(batch_first: bool, batch: int = 2, length: int = 5, features: int = 4) -> torch.Tensor:
    return torch.randn(batch, length, features) if batch_first else torch.randn(length, batch, features)


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_lstm(num_layers: int, bidirectional: bool, batch_first: bool) -> None:
    lstm = torch.nn.LSTM(4, 6, num_layers=num_layers, bidirectional=bidirectional, batch_first=batch_first)
    _check(lstm, _seq(batch_first))


def test_lstm_without_bias_with_projection() -> None:
    lstm = torch.nn.LSTM(4, 6, num_layers=2, bias=False, proj_size=3)
    _check(lstm, _seq(False))


def test_lstm_with_initial_state() -> None:
    lstm = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True)
    h0, c0 = torch.randn(4, 2, 6), torch.randn(4, 2, 6)
    _check(WithState(lstm), _seq(True), h0, c0)


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_gru(num_layers: int, bidirectional: bool, batch_first: bool) -> None:
    gru = torch.nn.GRU(4, 6, num_layers=num_layers, bidirectional=bidirectional, batch_first=batch_first)
    _check(gru, _seq(batch_first))


def test_gru_with_initial_state() -> None:
    gru = torch.nn.GRU(4, 6, num_layers=1, bidirectional=True)
    _check(WithState(gru), _seq(False), torch.randn(2, 2, 6))


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_rnn(nonlinearity: str, bidirectional: bool, num_layers: int) -> None:
    rnn = torch.nn.RNN(4, 6, num_layers=num_layers, nonlinearity=nonlinearity, bidirectional=bidirectional,
                       batch_first=True)
    _check(rnn, _seq(True))


def test_lstm_in_a_model() -> None:
    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(20, 4)
            self.lstm = torch.nn.LSTM(4, 8, batch_first=True, bidirectional=True)
            self.head = torch.nn.Linear(16, 3)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            out, _ = self.lstm(self.embed(tokens))
            return self.head(out)

    _check(Tagger(), torch.randint(0, 20, (2, 7)))


def test_unbatched_gru() -> None:
    _check(torch.nn.GRU(4, 6), torch.randn(5, 4))
