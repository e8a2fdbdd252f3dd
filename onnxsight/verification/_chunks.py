"""Chunked ONNX Runtime execution: compute a set of values with one session, keeping only what later chunks need.

Each chunk is one model holding the slice of the graph that produces its
target values, so every node runs once across all chunks (propagated mode),
and a value lives only until its last consumer has run. Weights the index
marks as shared (``_weights.py``) are not copied into the chunk models: every
chunk session is fed the same arrays, so the weights are held once.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from onnxsight.verification._graph import FED_SUFFIX, GraphIndex, build_model, chunk_inputs, elem_type_of
from onnxsight.verification._runners import OrtRunner, VerificationError
from onnxsight.verification._tolerance import dtype_name


class OrtFailure(RuntimeError):
    """ONNX Runtime failed creating a session (``phase="session"``) or running it (``"run"``)."""

    def __init__(self, phase: str, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.phase = phase


class ChunkExecutor:
    """Runs target values of one ONNX graph chunk by chunk on one :class:`OrtRunner`."""

    def __init__(self, index: GraphIndex, runner: OrtRunner, feeds: Mapping[str, np.ndarray]) -> None:
        self.index = index
        self.runner = runner
        self.feeds = dict(feeds)          # graph inputs
        self.env: dict[str, np.ndarray] = {}   # values computed by earlier chunks that later ones read
        self.types: dict[str, str] = {}        # dtype names ONNX Runtime reported for computed values
        self.executed: set[int] = set()
        self.sessions = 0
        self.last_nodes: list[int] = []

    def run(self, targets: Sequence[str], reference: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Compute ``targets``. Values in ``reference`` are fed instead of computed (isolated mode)."""
        reference = reference or {}
        targets = [t for t in targets if self.index.is_computed(t)]
        # NOTE: a value an earlier chunk computed (paired again with an FX view of it) is not computed
        # again: the engine may have replaced it (a quantize's PyTorch integers, ACC012) for later chunks
        ready = {t: self.env[t] for t in targets if t in self.env and t not in reference}
        targets = [t for t in targets if t not in ready]
        if not targets:
            return ready
        stop = set(self.env) | set(reference)
        nodes = self.index.slice(targets, stop)
        renames = {name: name + FED_SUFFIX for name in reference}
        inputs = chunk_inputs(self.index, nodes, renames)
        self.executed.update(nodes)
        produced = [o for i in nodes for o in self.index.nodes[i].output if o]
        keep = [o for o in produced if o not in reference and self._needed_later(o)]
        outputs = list(dict.fromkeys([*targets, *keep]))
        feeds: dict[str, Any] = {}
        declared: list[tuple[str, int]] = []
        for name in inputs:
            original = name[: -len(FED_SUFFIX)] if name.endswith(FED_SUFFIX) else name
            if name in self.feeds:
                value = self.feeds[name]
            elif name in self.env:
                value = self.env[name]
            else:
                value = reference[original]
            feeds[name] = value
            declared.append((name, self._elem_type(original, value)))
        shared = self.index.shared_weights(nodes)
        feeds.update((name, self.index.weights[name]) for name in shared)
        model = build_model(self.index, nodes, declared, outputs, renames=renames, shared=shared)
        try:
            self.runner.load(model)
        except VerificationError:
            raise
        except Exception as exc:  # noqa: BLE001 - the engine reports it as ORT001
            raise OrtFailure("session", exc) from exc
        self.sessions += 1
        self.last_nodes = nodes
        try:
            results = self.runner.infer(feeds)
        except Exception as exc:  # noqa: BLE001 - the engine reports it as ORT002
            raise OrtFailure("run", exc) from exc
        self.types.update(self.runner.output_types)
        for name in keep:
            self.env[name] = results[name]
        for name in [n for n in self.env if not self._needed_later(n)]:
            del self.env[name]
        return {**ready, **{t: results[t] for t in targets}}

    def probe(self, targets: Sequence[str], reference: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Compute ``targets`` from ``reference`` values as a side check: what later chunks read (the values
        kept for them, the nodes already run) is left as it was, so the propagated run goes on unchanged."""
        env, executed = dict(self.env), set(self.executed)
        try:
            return self.run(targets, reference)
        finally:
            self.env, self.executed = env, executed

    def _needed_later(self, name: str) -> bool:
        return any(i not in self.executed for i in self.index.consumers.get(name, ()))

    def _elem_type(self, name: str, value: Any) -> int:
        if name in self.types:
            return elem_type_of(self.types[name])
        if name in self.index.elem_types:
            return self.index.elem_types[name]
        return elem_type_of(dtype_name(np.asarray(value).dtype))
