"""VerificationResult: true when everything passed, with one table row per compared value."""

from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping, Sequence

import pandas as pd

from onnxsight.diagnostics import Diagnostic
from onnxsight.rules import Level
from onnxsight.verification._bundle import ReproCase

NODE_COLUMNS = (
    "value", "fx_node", "target", "onnx_op", "dtype", "onnx_dtype", "shape", "onnx_shape",
    "max_abs_diff", "max_rel_diff", "mean_abs_diff", "mismatch_fraction", "cosine",
    "nan_inf_mismatch", "nonfinite_introduced", "shape_mismatch", "dtype_mismatch", "numel",
    "atol", "rtol", "passed", "root_cause", "borderline", "propagated_from", "file", "line",
    "max_diff_steps",   # in quantization steps, where the value has one (_quantization.py); else NaN
)


class VerificationResult:
    """The outcome of :func:`onnxsight.verify` or :func:`onnxsight.verify_onnx`.

    ``nodes``: one row per compared value (topological order); ``outputs``: the
    rows of the model outputs; ``root_causes``: the rows that are first divergences.
    ``coverage``: one row per value of the program (value, fx_node, target, compared,
    reason) and ``coverage_summary`` its counts by reason; ``sizes_checked``: the
    dynamic-dim sizes verified (the example's first).
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]], outputs: Sequence[str],
                 diagnostics: Sequence[Diagnostic], *, repros: Mapping[str, ReproCase] | None = None,
                 info: Mapping[str, Any] | None = None, graph_name: str = "main_graph",
                 coverage: pd.DataFrame | None = None,
                 sizes_checked: Sequence[Mapping[str, int]] | None = None) -> None:
        frame = pd.DataFrame([{k: row.get(k) for k in NODE_COLUMNS} for row in rows], columns=list(NODE_COLUMNS))
        self.nodes: pd.DataFrame = frame
        order = {name: i for i, name in enumerate(outputs)}
        out = frame[frame["value"].isin(order)].copy()
        out.insert(0, "output", out["value"])
        self.outputs: pd.DataFrame = out.sort_values("output", key=lambda s: s.map(order)).reset_index(drop=True)
        self.output_names = list(outputs)
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        self.repros: dict[str, ReproCase] = dict(repros or {})
        self.info: dict[str, Any] = dict(info or {})
        self.graph_name = graph_name
        self.repro_dir: str | None = None  # where verify(repro_dir=) wrote the first root cause's bundle
        self.coverage: pd.DataFrame = coverage if coverage is not None else _coverage_of(frame)
        self.sizes_checked: list[dict[str, int]] = [dict(s) for s in (sizes_checked or [{}])]

    @property
    def coverage_summary(self) -> dict[str, int]:
        """How many values were compared, and how many were not, by reason."""
        from onnxsight.verification._coverage import summary

        return summary(self.coverage)

    @property
    def root_causes(self) -> pd.DataFrame:
        """The rows of :attr:`nodes` that are first divergences, in topological order."""
        return self.nodes[self.nodes["root_cause"].astype(bool)].reset_index(drop=True)

    @property
    def quantization_layers(self) -> pd.DataFrame:
        """Per layer, the quantized ONNX model against the float model (``verify(..., float_model=)``),
        worst SQNR first; empty without a float model."""
        from onnxsight.verification._float_model import LAYER_FIELDS

        return pd.DataFrame(self.info.get("quantization_layers") or [], columns=list(LAYER_FIELDS))

    @property
    def passed(self) -> bool:
        """True when every compared value matched, with its dtype, every graph output was compared,
        and nothing failed to run. A value that is not a graph output and differs only because of a
        borderline threshold decision (ACC011: an nms box kept at an IoU within rounding) does not fail it."""
        if self.info.get("error"):
            return False
        if any(d.level is Level.ERROR for d in self.diagnostics):
            return False
        if not set(self.output_names) <= set(self.nodes["value"]) and not self._outputs_exact():
            return False
        if self.nodes["dtype_mismatch"].fillna(False).astype(bool).any():
            return False
        # a value that differs only because of a borderline decision (ACC011) is excused, a graph output never
        excused = (self.nodes["borderline"].fillna(False).astype(bool)
                   & ~self.nodes["value"].isin(list(self.output_names)))
        return bool(len(self.nodes)) and bool((self.nodes["passed"].astype(bool) | excused).all())

    def _outputs_exact(self) -> bool:
        """True when every output without a row is an input or weight (identical on both sides)."""
        from onnxsight.verification._coverage import exact_by_construction

        missing = set(self.output_names) - set(self.nodes["value"])
        reasons = dict(zip(self.coverage["value"], self.coverage["reason"]))
        return all(exact_by_construction(reasons.get(name)) for name in missing)

    def __bool__(self) -> bool:
        return self.passed

    def write_repro(self, directory: str | os.PathLike, value: str | None = None) -> list[str]:
        """Write the repro bundle of ``value`` (default: the first root cause) under ``directory``."""
        if value is None:
            if not self.repros:
                raise ValueError("no root cause to write a repro bundle for")
            value = next(iter(self.repros))
        if value not in self.repros:
            raise KeyError(f"no repro captured for {value!r}; captured: {', '.join(self.repros) or 'none'}")
        row = self.nodes[self.nodes["value"] == value].iloc[0].to_dict()
        extra = {k: _jsonable(row.get(k)) for k in ("fx_node", "target", "onnx_op", "max_abs_diff", "file", "line")}
        return self.repros[value].write(directory, extra={**extra, "providers": self.info.get("providers")})

    def write_model_explorer(self, path: str | os.PathLike, *, metric: str = "max_abs_diff") -> str:
        """Write a Model Explorer node-data overlay of ``metric`` per value; return the path."""
        from onnxsight.verification._explorer import write_node_data

        return write_node_data(self.nodes, path, graph_name=self.graph_name, metric=metric)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (NaN and infinities as strings)."""
        return {
            "passed": self.passed,
            "info": {k: _jsonable(v) for k, v in self.info.items()},
            "outputs": [{k: _jsonable(v) for k, v in r.items()} for r in self.outputs.to_dict("records")],
            "nodes": [{k: _jsonable(v) for k, v in r.items()} for r in self.nodes.to_dict("records")],
            "root_causes": list(self.root_causes["value"]),
            "coverage": {"summary": self.coverage_summary,
                         "not_compared": [{k: _jsonable(v) for k, v in r.items()} for r in
                                          self.coverage[~self.coverage["compared"].astype(bool)].to_dict("records")]},
            "sizes_checked": self.sizes_checked,
            "diagnostics": [d.to_dict() for d in self.diagnostics],
        }

    def to_json(self, path: str | os.PathLike | None = None, *, indent: int | None = 2) -> str:
        return dump_json(self.to_dict(), path, indent=indent)

    def __repr__(self) -> str:
        roots = ", ".join(self.root_causes["value"]) or "none"
        return (f"VerificationResult(passed={self.passed}, values={len(self.nodes)}, "
                f"failed={int((~self.nodes['passed'].astype(bool)).sum())}, root_causes=[{roots}])")


def dump_json(data: Any, path: str | os.PathLike | None = None, *, indent: int | None = 2) -> str:
    """``data`` as JSON text, also written to ``path`` when given."""
    text = json.dumps(data, indent=indent)
    if path is not None:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return text


def _coverage_of(nodes: pd.DataFrame) -> pd.DataFrame:
    """Coverage of a result built from rows alone (verify_onnx): every row's value was compared."""
    from onnxsight.verification._coverage import COLUMNS, COMPARED

    table = pd.DataFrame({"value": nodes["value"], "fx_node": nodes["fx_node"], "target": nodes["target"],
                          "compared": True, "reason": COMPARED}, columns=list(COLUMNS))
    return table.reset_index(drop=True)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if hasattr(value, "item") and not isinstance(value, (list, tuple)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            return str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value if isinstance(value, (bool, int, str)) else str(value)
