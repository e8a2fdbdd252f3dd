"""pack_padded_sequence -> LSTM/GRU/RNN -> pad_packed_sequence exports onto ONNX's sequence_lens.

One export with dynamic batch and time must match eager at other batch sizes, lengths and orders:
outputs past a sequence's length (PyTorch leaves zeros, or padding_value), the final states at each
sequence's last step, the caller's order restored when the lengths were unsorted.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.export import Dim
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

import onnxsight
from onnxsight.exporter import CaptureError

from tests.exporter.ops.op_tolerances import CURATED
from tests.exporter.ops.opinfo_harness import compare

INPUT, HIDDEN = 4, 5


class Packed(torch.nn.Module):
    def __init__(self, kind: str, *, layers: int = 1, bidirectional: bool = False, batch_first: bool = False,
                 enforce_sorted: bool = True, initial: bool = False, dropout: float = 0.0,
                 total_length: int | None = None, padding_value: float = 0.0, nonlinearity: str = "tanh") -> None:
        super().__init__()
        cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[kind]
        extra = {"nonlinearity": nonlinearity} if kind == "rnn" else {}
        self.rnn = cls(INPUT, HIDDEN, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first,
                       dropout=dropout, **extra)
        self.kind, self.batch_first, self.enforce_sorted, self.initial = kind, batch_first, enforce_sorted, initial
        self.total_length, self.padding_value = total_length, padding_value

    def forward(self, x: torch.Tensor, lengths: Any, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        packed = pack_padded_sequence(x, lengths, batch_first=self.batch_first, enforce_sorted=self.enforce_sorted)
        hx = (state if self.kind == "lstm" else state[0]) if state else None
        out, hidden = self.rnn(packed, hx)
        padded, out_lengths = pad_packed_sequence(out, batch_first=self.batch_first,
                                                  padding_value=self.padding_value, total_length=self.total_length)
        finals = hidden if isinstance(hidden, tuple) else (hidden,)
        return (padded, *finals, out_lengths)


def _inputs(model: Packed, batch: int, time: int, *, seed: int) -> tuple[Any, ...]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, time + 1, (batch,), generator=generator)
    lengths[torch.randint(0, batch, (1,), generator=generator)] = time  # padded to the longest, as pad_sequence
    if model.enforce_sorted:
        lengths = lengths.sort(descending=True).values
    shape = (batch, time, INPUT) if model.batch_first else (time, batch, INPUT)
    x = torch.randn(shape, generator=generator)
    args: tuple[Any, ...] = (x, lengths)
    if model.initial:
        rnn = model.rnn
        states = 2 if model.kind == "lstm" else 1
        args += tuple(torch.randn(rnn.num_layers * (2 if rnn.bidirectional else 1), batch, HIDDEN,
                                  generator=generator) for _ in range(states))
    return args


def _dynamic(model: Packed, args: tuple[Any, ...]) -> tuple[Any, ...]:
    batch_axis, time_axis = (0, 1) if model.batch_first else (1, 0)
    spec: list[Any] = [{batch_axis: Dim.DYNAMIC, time_axis: Dim.DYNAMIC}, {0: Dim.DYNAMIC}]
    if len(args) > 2:  # *state: one entry holding a tuple
        spec.append(tuple({1: Dim.DYNAMIC} for _ in args[2:]))
    return tuple(spec)


def assert_matches_eager(model: Packed, sizes: list[tuple[int, int]]) -> onnxsight.ONNXProgram:
    model.eval()
    example = _inputs(model, 3, 6, seed=0)
    program = onnxsight.export(model, example, dynamic_shapes=_dynamic(model, example))
    for seed, (batch, time) in enumerate(sizes, start=1):
        args = _inputs(model, batch, time, seed=seed)
        with torch.no_grad():
            expected = model(*args)
        actual = program(*args)
        assert len(actual) == len(expected)
        for index, (want, got) in enumerate(zip(expected, actual)):
            problem = compare(want, got, tolerance=CURATED)
            assert not problem, f"output {index} at batch {batch}, time {time}: {problem}"
    return program


SIZES = [(3, 6), (5, 9), (1, 4), (2, 1)]

CASES = {
    "lstm": dict(kind="lstm"),
    "lstm-unsorted": dict(kind="lstm", enforce_sorted=False),
    "lstm-2layers-bidirectional-batch-first-unsorted-initial": dict(kind="lstm", layers=2, bidirectional=True,
                                                                    batch_first=True, enforce_sorted=False,
                                                                    initial=True),
    "lstm-3layers-dropout-eval": dict(kind="lstm", layers=3, dropout=0.3),
    "gru-bidirectional-initial": dict(kind="gru", bidirectional=True, initial=True),
    "gru-2layers-batch-first-unsorted": dict(kind="gru", layers=2, batch_first=True, enforce_sorted=False),
    "rnn-tanh-bidirectional-unsorted": dict(kind="rnn", bidirectional=True, enforce_sorted=False),
    "rnn-relu-2layers-initial": dict(kind="rnn", layers=2, initial=True, nonlinearity="relu"),
    "lstm-padding-value": dict(kind="lstm", padding_value=-1.5, enforce_sorted=False),
}


@pytest.mark.parametrize("options", CASES.values(), ids=list(CASES))
def test_packed_rnn_matches_eager_at_other_sizes(options: dict[str, Any]) -> None:
    program = assert_matches_eager(Packed(**options), SIZES)
    op_type = {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}[options["kind"]]
    nodes = [n for n in program.model_proto.graph.node if n.op_type == op_type]
    assert nodes and all(len(n.input) > 4 and n.input[4] for n in nodes), "every layer gets sequence_lens"


def test_total_length_pads_past_the_input() -> None:
    model = Packed("lstm", batch_first=True, total_length=12).eval()
    assert_matches_eager(model, [(3, 6), (4, 9)])


def test_lengths_as_a_list_are_constants() -> None:
    """A Python list of lengths is part of the program, as in eager: fixed batch, the values baked in."""
    class ListLengths(Packed):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
            return super().forward(x, [5, 2, 4])

    model = ListLengths("gru", enforce_sorted=False).eval()
    x = torch.randn(5, 3, INPUT)
    program = onnxsight.export(model, (x,))
    for want, got in zip(model(x), program(x)):
        assert not compare(want, got, tolerance=CURATED)


def test_export_leaves_the_rnn_classes_and_the_model_as_they_were() -> None:
    forwards = {cls: cls.forward for cls in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN)}
    model = Packed("lstm", enforce_sorted=False)
    model.train()
    onnxsight.export(model, _inputs(model, 3, 6, seed=0))
    assert model.training
    assert {cls: cls.forward for cls in forwards} == forwards
    assert "_pack_padded_sequence" not in vars(torch._VF) and "_pad_packed_sequence" not in vars(torch._VF)
    x, lengths = _inputs(model.eval(), 3, 6, seed=0)
    assert model(x, lengths)[0].shape == (6, 3, HIDDEN)  # eager packing still works after export


class HandBuilt(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(INPUT, HIDDEN)

    def forward(self, data: torch.Tensor, batch_sizes: torch.Tensor) -> torch.Tensor:
        return self.rnn(PackedSequence(data, batch_sizes))[1]  # CAP014 here


class Projected(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.LSTM(INPUT, HIDDEN, proj_size=2)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.rnn(pack_padded_sequence(x, lengths))[1][0]  # CAP014 here


class PackedInput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(INPUT, HIDDEN)

    def forward(self, packed: PackedSequence) -> torch.Tensor:
        return self.rnn(packed)[1]  # CAP014 here


@pytest.mark.parametrize("model, args, words", [
    (HandBuilt, (torch.randn(7, INPUT), torch.tensor([3, 2, 2])), ("GRU.forward", "not made by pack_padded_sequence")),
    (Projected, (torch.randn(4, 2, INPUT), torch.tensor([4, 3])), ("proj_size=2", "no output projection")),
    (PackedInput, (pack_padded_sequence(torch.randn(5, 2, INPUT), torch.tensor([5, 3])),),
     ("GRU.forward", "passed in as an input")),
], ids=["built-by-hand", "lstm-proj-size", "packed-input"])
def test_refused_forms_name_the_rule_and_the_line(model: type, args: tuple, words: tuple[str, ...]) -> None:
    with pytest.raises(CaptureError) as info:
        onnxsight.export(model(), args)
    errors = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert [d.rule.code for d in errors] == ["CAP014"], [str(d) for d in errors]
    for word in words:
        assert word in errors[0].message
    assert errors[0].location is not None and errors[0].location.file == __file__
    source = open(__file__).read().splitlines()[errors[0].location.line - 1]
    assert "CAP014 here" in source


class RowWiseOnData(torch.nn.Module):
    """A GRU without bias, a Linear applied to the packed rows, an LSTM on top, padding_value -2."""

    def __init__(self) -> None:
        super().__init__()
        self.gru, self.fc, self.lstm = torch.nn.GRU(INPUT, 6, bias=False), torch.nn.Linear(6, 6), torch.nn.LSTM(6, 3)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        packed, _ = self.gru(pack_padded_sequence(x, lengths, enforce_sorted=False))
        packed = PackedSequence(torch.relu(self.fc(packed.data)) + 1.0, packed.batch_sizes, packed.sorted_indices,
                                packed.unsorted_indices)
        out, (h, _) = self.lstm(packed)
        return pad_packed_sequence(out, padding_value=-2.0)[0], h


class FromList(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.RNN(INPUT, HIDDEN)

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        packed = torch.nn.utils.rnn.pack_sequence([a, b, c], enforce_sorted=False)
        return torch.nn.utils.rnn.unpack_sequence(self.rnn(packed)[0])[1]


def test_row_wise_work_on_packed_data_between_layers() -> None:
    model = RowWiseOnData().eval()
    program = onnxsight.export(model, (torch.randn(6, 3, INPUT), torch.tensor([2, 6, 3])),
                               dynamic_shapes={"x": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, "lengths": {0: Dim.DYNAMIC}})
    for time, batch in [(6, 3), (9, 5)]:
        x, lengths = torch.randn(time, batch, INPUT), torch.randint(1, time + 1, (batch,))
        lengths[1] = time
        for want, got in zip(model(x, lengths), program(x, lengths)):
            assert not compare(want, got, tolerance=CURATED)


def test_pack_sequence_and_unpack_sequence() -> None:
    model = FromList().eval()
    args = (torch.randn(3, INPUT), torch.randn(5, INPUT), torch.randn(2, INPUT))
    program = onnxsight.export(model, args)
    got = program(*args)[0]
    assert tuple(got.shape) == (5, HIDDEN)
    assert not compare(model(*args), got, tolerance=CURATED)
