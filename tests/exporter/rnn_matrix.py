"""The recurrent-network matrix of PyTorch's own ONNX export tests, written again for both exporters.

PyTorch's ``test/onnx/test_pytorch_onnx_onnxruntime.py`` runs ``test_rnn_*``: Elman RNN (relu, tanh),
LSTM and GRU, each with 1 or 3 layers, forward or bidirectional, with or without an initial state,
without lengths / packed with variable lengths / packed batch-first, and dropout 0.2 or 0 (in eval):
4 x 2 x 2 x 2 x 3 x 2 = 192 cases. Each case is exported the way those tests export it: the legacy
``input_names`` + ``dynamic_axes`` (``{"input": [0, 1], "seq_lengths": [0]}`` for every case, so the
cases without lengths pass a key that names nothing, plus ``h0``/``c0`` axis 1 with an initial state),
the inputs a batch of 7 sequences padded to the longest (lengths 1..11, sorted, int32), then run
again with a batch of 8 (another longest length), compared with ``rtol=1e-3, atol=1e-7`` as the
tests compare. The models are this module's own: the same layers and wrappers, not torch's code.

    .venv/bin/python -m tests.exporter.rnn_matrix --out docs/rnn-matrix.json   # both exporters

``torch.onnx, keys cleaned`` is torch.onnx given only the ``dynamic_axes`` keys that name an input
(it refuses a table with ``seq_lengths`` for a model without lengths, which onnxsight warns about).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

BATCH, OTHER_BATCH, MAX_LENGTH, FEATURES, HIDDEN = 7, 8, 11, 5, 3
RTOL, ATOL = 1e-3, 1e-7


@dataclass(frozen=True)
class Case:
    kind: str            # elman_relu, elman_tanh, lstm, gru
    layers: int          # 1, 3
    bidirectional: bool
    initial_state: bool
    packed: int          # 0 no lengths, 1 packed, 2 packed batch-first
    dropout: float       # 0.2 (eval: no effect), 0.0

    @property
    def id(self) -> str:
        return "_".join([self.kind, "unilayer" if self.layers == 1 else "trilayer",
                         "bidirectional" if self.bidirectional else "forward",
                         "with_initial_state" if self.initial_state else "no_initial_state",
                         ("without_sequence_lengths", "with_variable_length_sequences",
                          "with_batch_first_sequence_lengths")[self.packed],
                         "with_dropout" if self.dropout else "without_dropout"])


CASES: tuple[Case, ...] = tuple(
    Case(kind, layers, bidirectional, initial, packed, dropout)
    for kind in ("elman_relu", "elman_tanh", "lstm", "gru")
    for layers, bidirectional, initial, packed, dropout in itertools.product(
        (1, 3), (False, True), (True, False), (0, 1, 2), (0.2, 0.0)))


class Recurrent(torch.nn.Module):
    """The layer, its outputs flattened to (output, h_n[, c_n]); optionally packed around it."""

    def __init__(self, case: Case) -> None:
        super().__init__()
        batch_first = case.packed == 2
        common = dict(num_layers=case.layers, bidirectional=case.bidirectional, dropout=case.dropout,
                      batch_first=batch_first)
        if case.kind.startswith("elman"):
            self.rnn: torch.nn.RNNBase = torch.nn.RNN(FEATURES, HIDDEN, nonlinearity=case.kind.split("_")[1],
                                                      **common)
        else:
            self.rnn = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[case.kind](FEATURES, HIDDEN, **common)
        self.packed, self.batch_first = case.packed != 0, batch_first

    def compute(self, input: torch.Tensor, state: list[torch.Tensor],
                lengths: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        if lengths is not None:
            input = pack_padded_sequence(input, lengths, self.batch_first)
        hx = None if not state else tuple(state) if isinstance(self.rnn, torch.nn.LSTM) else state[0]
        output, hidden = self.rnn(input, hx)
        if lengths is not None:
            output, _ = pad_packed_sequence(output, self.batch_first)
        return (output, *(hidden if isinstance(hidden, tuple) else (hidden,)))


# One signature per combination, as the tests' wrappers have (input[, h0[, c0]][, seq_lengths]).
class NoState(Recurrent):
    def forward(self, input: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.compute(input, [], None)


class NoStateLengths(Recurrent):
    def forward(self, input: torch.Tensor, seq_lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.compute(input, [], seq_lengths)


class State(Recurrent):
    def forward(self, input: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.compute(input, [h0], None)


class StateLengths(Recurrent):
    def forward(self, input: torch.Tensor, h0: torch.Tensor, seq_lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.compute(input, [h0], seq_lengths)


class States(Recurrent):
    def forward(self, input: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.compute(input, [h0, c0], None)


class StatesLengths(Recurrent):
    def forward(self, input: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor,
                seq_lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.compute(input, [h0, c0], seq_lengths)


def build(case: Case) -> Recurrent:
    states = 0 if not case.initial_state else 2 if case.kind == "lstm" else 1
    cls = {(0, False): NoState, (0, True): NoStateLengths, (1, False): State, (1, True): StateLengths,
           (2, False): States, (2, True): StatesLengths}[(states, case.packed != 0)]
    return cls(case)


def make_inputs(case: Case, batch: int, rng: np.random.Generator) -> tuple[tuple[torch.Tensor, ...], list[str]]:
    """Sequences of random lengths padded to the longest; (h0[, c0]); lengths as int32: and their names."""
    lengths = sorted((int(n) for n in rng.integers(1, MAX_LENGTH + 1, size=batch)), reverse=True)
    generator = torch.Generator().manual_seed(int(rng.integers(0, 2**31)))
    padded = pad_sequence([torch.randn(n, FEATURES, generator=generator) for n in lengths],
                          batch_first=case.packed == 2)
    inputs, names = [padded], ["input"]
    if case.initial_state:
        states = ("h0", "c0") if case.kind == "lstm" else ("h0",)
        directions = 2 if case.bidirectional else 1
        for name in states:
            inputs.append(torch.randn(case.layers * directions, batch, HIDDEN, generator=generator))
            names.append(name)
    if case.packed:
        inputs.append(torch.tensor(lengths, dtype=torch.int32))
        names.append("seq_lengths")
    return tuple(inputs), names


def dynamic_axes(case: Case) -> dict[str, list[int]]:
    axes = {"input": [0, 1], "seq_lengths": [0]}
    if case.initial_state:
        axes.update({name: [1] for name in (("h0", "c0") if case.kind == "lstm" else ("h0",))})
    return axes


@dataclass
class Outcome:
    case: str
    exporter: str
    status: str          # passed, export, mismatch, runtime
    detail: str = ""
    seconds: float = 0.0


def _export_onnxsight(model: torch.nn.Module, args: tuple, names: list[str], axes: dict) -> Callable[..., list]:
    import onnxsight

    program = onnxsight.export(model, args, input_names=names, dynamic_axes=axes)
    return lambda *inputs: [np.asarray(v) for v in program(*inputs)]


def _export_torch_onnx(model: torch.nn.Module, args: tuple, names: list[str], axes: dict) -> Callable[..., list]:
    import contextlib
    import io
    import warnings

    import onnxruntime

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):  # torch.onnx prints its reports and graphs
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, args, dynamo=True, input_names=names, dynamic_axes=axes,
                                    opset_version=18, verbose=False)
    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    inputs_meta = session.get_inputs()

    def run(*inputs: torch.Tensor) -> list:
        feed = {meta.name: t.numpy() for meta, t in zip(inputs_meta, inputs)}
        return session.run(None, feed)
    return run


def _export_torch_onnx_clean(model: torch.nn.Module, args: tuple, names: list[str],
                             axes: dict) -> Callable[..., list]:
    """torch.onnx given only the dynamic_axes keys that name an input (it refuses the others)."""
    return _export_torch_onnx(model, args, names, {k: v for k, v in axes.items() if k in names})


EXPORTERS: dict[str, Callable[..., Callable[..., list]]] = {
    "onnxsight": _export_onnxsight, "torch.onnx": _export_torch_onnx,
    "torch.onnx, keys cleaned": _export_torch_onnx_clean}


def run_case(case: Case, exporter: str = "onnxsight") -> Outcome:
    """Export ``case`` with ``exporter``, run at batch 7 and 8, compare every output with eager."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = build(case).eval()
    args, names = make_inputs(case, BATCH, rng)
    other, _ = make_inputs(case, OTHER_BATCH, rng)
    start = time.perf_counter()
    try:
        run = EXPORTERS[exporter](model, args, names, dynamic_axes(case))
    except Exception as exc:  # noqa: BLE001 - a refused export is an outcome
        first = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()[0][:300]
        return Outcome(case.id, exporter, "export", f"{type(exc).__name__}: {first}",
                       time.perf_counter() - start)
    seconds = time.perf_counter() - start
    for inputs in (args, other):
        with torch.no_grad():
            expected = [t.numpy() for t in model(*inputs)]
        try:
            actual = run(*inputs)
        except Exception as exc:  # noqa: BLE001
            return Outcome(case.id, exporter, "runtime", f"{type(exc).__name__}: {str(exc)[:300]}", seconds)
        if len(actual) != len(expected):
            return Outcome(case.id, exporter, "mismatch", f"{len(actual)} outputs, expected {len(expected)}",
                           seconds)
        for index, (want, got) in enumerate(zip(expected, actual)):
            try:
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
            except AssertionError as exc:
                return Outcome(case.id, exporter, "mismatch",
                               f"output {index} at batch {inputs[0].shape[0 if case.packed == 2 else 1]}: "
                               f"{str(exc).strip().splitlines()[0][:200]}", seconds)
    return Outcome(case.id, exporter, "passed", "", seconds)


def _isolated(case: Case, exporter: str) -> Outcome:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "tests.exporter.rnn_matrix", "--child", exporter, case.id],
                          capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("OUTCOME ")]
    if not lines:
        return Outcome(case.id, exporter, "crash", (done.stderr or done.stdout)[-300:])
    return Outcome(**json.loads(lines[-1][len("OUTCOME "):]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write every outcome and the totals as JSON")
    parser.add_argument("--exporters", default="onnxsight;torch.onnx;torch.onnx, keys cleaned",
                        help="';'-separated: onnxsight, torch.onnx, 'torch.onnx, keys cleaned'")
    parser.add_argument("--filter", default="", help="only cases whose id contains this")
    parser.add_argument("--append", action="store_true", help="add to the outcomes already in --out")
    parser.add_argument("--isolate", action="store_true",
                        help="each case in a process of its own (torch keeps state between torch.onnx exports)")
    parser.add_argument("--child", nargs=2, metavar=("EXPORTER", "CASE"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        exporter, case_id = options.child
        print("OUTCOME " + json.dumps(asdict(run_case(next(c for c in CASES if c.id == case_id), exporter))))
        return
    outcomes: list[Outcome] = []
    if options.append and options.out:
        with open(options.out, encoding="utf-8") as handle:
            outcomes = [Outcome(**o) for o in json.load(handle)["outcomes"]]
    for exporter in options.exporters.split(";"):
        for case in CASES:
            if options.filter in case.id:
                try:
                    outcomes.append(_isolated(case, exporter) if options.isolate else run_case(case, exporter))
                except Exception:  # noqa: BLE001
                    outcomes.append(Outcome(case.id, exporter, "crash", traceback.format_exc()[-300:]))
                print(f"{exporter:10} {outcomes[-1].status:8} {case.id}", flush=True)
    totals = {e: {s: sum(1 for o in outcomes if o.exporter == e and o.status == s)
                  for s in sorted({o.status for o in outcomes})} for e in dict.fromkeys(o.exporter for o in outcomes)}
    print(json.dumps(totals, indent=1))
    if options.out:
        with open(options.out, "w", encoding="utf-8") as handle:
            json.dump({"how": "python -m tests.exporter.rnn_matrix --out docs/rnn-matrix.json (make test-rnn-matrix)",
                       "torch": torch.__version__, "cases": len([c for c in CASES if options.filter in c.id]),
                       "totals": totals, "outcomes": [asdict(o) for o in outcomes]}, handle, indent=1)


if __name__ == "__main__":
    main()
