"""Turn compared rows into diagnostics: root causes (ACC002-ACC005), propagation (ACC006), borderline
decisions (ACC011), outputs (ACC001).

Each diagnostic is emitted with the FX node, so it is located at the user's source line.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext


def _fmt(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _properties(row: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("max_abs_diff", "max_rel_diff", "mismatch_fraction", "cosine", "dtype", "onnx_dtype")
    steps = row.get("max_diff_steps")  # a quantized value's difference in quantization steps
    return {"onnx_value": row["value"], "onnx_node": row.get("onnx_op"), "shape": list(row["shape"]),
            **{k: row.get(k) for k in keys}, **({"max_diff_steps": steps} if steps is not None else {})}


def emit_diagnostics(rows: Sequence[Mapping[str, Any]], nodes: Mapping[str, Any], outputs: Sequence[str],
                     ctx: DiagnosticContext, *, reference: str = "PyTorch",
                     borderline: Mapping[str, str] | None = None, rounding: Mapping[str, str] | None = None,
                     fused: Mapping[str, Any] | None = None, amplified: Mapping[str, str] | None = None) -> None:
    """Emit the diagnostics for ``rows`` (topological order); ``nodes`` maps value -> FX node (or None);
    ``borderline``: value -> what each threshold decision that differs only by its inputs' rounding decided;
    ``rounding``: quantize value -> its elements one step apart (ACC012); ``fused``: value -> what the
    optimised model's node making it replaced (a ``_fused.Replaced``); ``amplified``: value -> how close its
    ONNX nodes come on PyTorch's inputs, where they amplify their inputs' rounding (ACC014)."""
    borderline, rounding, fused, amplified = borderline or {}, rounding or {}, fused or {}, amplified or {}
    counts: dict[str, int] = {}
    for row in rows:
        for root in filter(None, str(row.get("propagated_from") or "").split(", ")):
            counts[root] = counts.get(root, 0) + 1
    output_set = set(outputs)
    noted: set[str] = set()
    for row in rows:
        node = nodes.get(row["value"])
        props = _properties(row)
        if row.get("dtype_mismatch"):
            ctx.emit(rules.DTYPE_MISMATCH, node=node, properties=props, value=row["value"],
                     actual=row["onnx_dtype"], expected=row["dtype"])
        if row["value"] in borderline:
            ctx.emit(rules.BORDERLINE_DECISION, node=node, properties={**props, "value": row["value"]},
                     value=row["value"], target=row["target"], reference=reference,
                     detail=borderline[row["value"]], count=counts.get(row["value"], 0))
        if row["value"] in amplified:
            ctx.emit(rules.ROUNDING_AMPLIFIED, node=node, properties={**props, "value": row["value"]},
                     value=row["value"], target=row["target"], reference=reference,
                     detail=amplified[row["value"]], count=counts.get(row["value"], 0))
        if row["value"] in rounding and row["value"] not in noted:  # once: an FX view of it shares the value
            noted.add(row["value"])
            ctx.emit(rules.QUANTIZE_ROUNDING, node=node, properties={**props, "value": row["value"]},
                     value=row["value"], target=row["target"], reference=reference, detail=rounding[row["value"]])
        if not row["root_cause"]:
            continue
        replaced = fused.get(row["value"])
        extra = {} if replaced is None else {"replaced_onnx_nodes": list(replaced.onnx_nodes),
                                             "replaced_fx_nodes": list(replaced.fx_nodes),
                                             "replaced_lines": list(replaced.lines)}
        ctx.emit(rules.NODE_DIVERGENCE, node=node, properties={**props, **extra}, value=row["value"],
                 target=row["target"], onnx_op=row.get("onnx_op"), max_abs_diff=_fmt(row["max_abs_diff"]),
                 fused=replaced.text() if replaced is not None else "")
        if row.get("nonfinite_introduced"):
            ctx.emit(rules.NAN_INF_INTRODUCED, node=node, properties=props, value=row["value"], target=row["target"],
                     count=row["nonfinite_introduced"], reference=reference)
        if row.get("shape_mismatch"):
            ctx.emit(rules.SHAPE_MISMATCH, node=node, properties=props, value=row["value"],
                     actual=list(row["onnx_shape"]), expected=list(row["shape"]))
        if counts.get(row["value"]):
            ctx.emit(rules.DIVERGENCE_PROPAGATED, node=node, properties=props, count=counts[row["value"]],
                     root=row["value"])
    for row in rows:
        if row["value"] in output_set and not row["passed"]:
            ctx.emit(rules.OUTPUT_MISMATCH, node=nodes.get(row["value"]), properties=_properties(row),
                     output=row["value"], reference=reference, max_abs_diff=_fmt(row["max_abs_diff"]),
                     max_rel_diff=_fmt(row["max_rel_diff"]), atol=row["atol"], rtol=row["rtol"])
