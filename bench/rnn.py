"""RNN benchmark: ONNX Runtime latency of an exported LSTM / GRU, three ways, same models, same run.

- ``onnxsight``: one ONNX LSTM/GRU node per layer (ops/rnn.py), exported with a
  dynamic batch and sequence;
- ``onnxsight unrolled``: the same exporter with the RNN translations taken out
  (``registry=`` without ``ops.rnn``, the ops not kept from decomposition), i.e.
  torch's decomposition unrolled over the example's length: what onnxsight
  exported before issue 13, static shapes only;
- ``torch.onnx``: ``torch.onnx.export(dynamo=True)`` at the same opset, static
  shapes; ``torch.onnx dynamic`` is the same call with the batch and sequence
  asked dynamic (the last column says whether each model runs at another
  batch and sequence length).

Every model runs on one ONNX Runtime thread (intra- and inter-op), CPU provider,
the same input; the sessions are timed round-robin (one run of each per round,
after warm-up) so that load on a shared machine falls on all of them alike.
Prints median and spread (min-max, and the interquartile range) in ms, and each
model's max abs difference from eager PyTorch.

    .venv/bin/python bench/rnn.py [--runs 20] [--warmup 5] [--opset 18] [--seq 128] [--batch 8]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from typing import Any, Callable, Iterator

import numpy as np
import torch

HIDDEN, LAYERS = 256, 2
RNN_OPS = (torch.ops.aten.lstm.input, torch.ops.aten.gru.input, torch.ops.aten.rnn_tanh.input,
           torch.ops.aten.rnn_relu.input)


def _models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {
        "LSTM": torch.nn.LSTM(HIDDEN, HIDDEN, num_layers=LAYERS, batch_first=True).eval(),
        "GRU": torch.nn.GRU(HIDDEN, HIDDEN, num_layers=LAYERS, batch_first=True).eval(),
    }


@contextlib.contextmanager
def _unrolled() -> Iterator[Any]:
    """A registry without onnxsight's RNN translations, and the RNN ops decomposed again (for this block).

    NOTE: KEPT_OPS is the exporter's private table; a benchmark may reach into it
    to reproduce the pre-issue-13 export without keeping a second exporter around.
    """
    from onnxsight.exporter import default_registry
    from onnxsight.exporter.decompose import _core_aten as _decompose
    from onnxsight.exporter._registry import OP_MODULES

    kept = _decompose.KEPT_OPS
    _decompose.KEPT_OPS = tuple(op for op in kept if op not in RNN_OPS)
    try:
        yield default_registry(tuple(m for m in OP_MODULES if not m.endswith(".rnn")))
    finally:
        _decompose.KEPT_OPS = kept


def _export_all(model: torch.nn.Module, x: torch.Tensor, opset: int, folder: str, name: str) -> dict[str, str]:
    """Every variant's .onnx path (or the reason it could not be exported)."""
    import onnxsight
    from onnxsight.exporter import export as core_export

    dims = {"input": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}}
    paths: dict[str, str] = {}

    def attempt(label: str, fn: Callable[[str], None]) -> None:
        path = os.path.join(folder, f"{name}_{label.replace(' ', '_')}.onnx")
        try:
            fn(path)
            paths[label] = path
        except Exception as exc:  # noqa: BLE001 - a variant that cannot export is reported, not fatal
            paths[label] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"

    attempt("onnxsight", lambda p: onnxsight.export(model, (x,), opset_version=opset, dynamic_shapes=dims).save(p))

    def unrolled(path: str) -> None:
        with _unrolled() as registry:
            core_export(model, (x,), opset_version=opset, registry=registry).save(path)

    attempt("onnxsight unrolled", unrolled)
    attempt("torch.onnx", lambda p: torch.onnx.export(model, (x,), dynamo=True, verbose=False,
                                                       opset_version=opset).save(p))
    attempt("torch.onnx dynamic", lambda p: torch.onnx.export(model, (x,), dynamo=True, verbose=False,
                                                               opset_version=opset, dynamic_shapes=dims).save(p))
    return paths


def _session(path: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _time(sessions: dict[str, Any], feed: np.ndarray, runs: int, warmup: int) -> dict[str, list[float]]:
    """Round-robin: each round runs every session once, so drift on a shared machine hits all alike."""
    feeds = {label: {s.get_inputs()[0].name: feed} for label, s in sessions.items()}
    for _ in range(warmup):
        for label, session in sessions.items():
            session.run(None, feeds[label])
    times: dict[str, list[float]] = {label: [] for label in sessions}
    for _ in range(runs):
        for label, session in sessions.items():
            start = time.perf_counter()
            session.run(None, feeds[label])
            times[label].append((time.perf_counter() - start) * 1000)
    return times


def _runs_elsewhere(session: Any, batch: int, seq: int) -> str:
    """Whether the model runs at another (batch, sequence): "yes", or the dims ONNX Runtime refused."""
    other = np.random.default_rng(0).standard_normal((batch + 1, seq // 2, HIDDEN)).astype(np.float32)
    try:
        session.run(None, {session.get_inputs()[0].name: other})
        return "yes"
    except Exception:  # noqa: BLE001 - ONNX Runtime's refusal is the answer
        dims = [d if isinstance(d, str) else str(d) for d in session.get_inputs()[0].shape]
        return f"no (input {' x '.join(dims)})"


def _row(name: str, label: str, path: str, samples: list[float] | None, diff: float | None,
         elsewhere: str | None) -> str:
    if samples is None:
        return f"| {name} | {label} | {path} | | | | | |"
    import onnx

    proto = onnx.load(path, load_external_data=False)
    nodes = len(proto.graph.node)
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return (f"| {name} | {label} | {nodes} | {statistics.median(samples):.2f} | {min(samples):.2f}-{max(samples):.2f} "
            f"| {q1:.2f}-{q3:.2f} | {diff:.1e} | {elsewhere} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--opset", type=int, default=18)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    options = parser.parse_args()
    torch.set_num_threads(1)
    print(f"hidden {HIDDEN}, {LAYERS} layers, batch {options.batch}, seq {options.seq}, opset {options.opset}, "
          f"ONNX Runtime CPU, 1 thread, {options.warmup} warm-up + {options.runs} timed runs (round-robin)\n")
    print(f"| model | exported by | ONNX nodes | median ms | min-max ms | IQR ms | max abs diff vs eager "
          f"| runs at batch {options.batch + 1}, seq {options.seq // 2} |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name, model in _models().items():
            x = torch.randn(options.batch, options.seq, HIDDEN)
            with torch.no_grad():
                expected = model(x)[0].numpy()
            paths = _export_all(model, x, options.opset, folder, name)
            sessions = {label: _session(p) for label, p in paths.items() if not p.startswith("failed")}
            diffs = {label: float(np.abs(s.run(None, {s.get_inputs()[0].name: x.numpy()})[0] - expected).max())
                     for label, s in sessions.items()}
            elsewhere = {label: _runs_elsewhere(s, options.batch, options.seq) for label, s in sessions.items()}
            times = _time(sessions, x.numpy(), options.runs, options.warmup)
            for label, path in paths.items():
                print(_row(name, label, path, times.get(label), diffs.get(label), elsewhere.get(label)))


if __name__ == "__main__":
    main()
