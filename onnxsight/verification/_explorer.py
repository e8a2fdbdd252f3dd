"""Google Model Explorer overlay: per-node error as node data over the ONNX graph.

The file is Model Explorer's ``ModelNodeData`` JSON: graph id -> ``results``
keyed by output tensor name (Model Explorer matches a key to a node's
``tensor_name`` output metadata), each ``{"value": number}``, with a colour
``gradient`` from the smallest to the largest value. Load it from the
"Custom node data" panel next to the ONNX model.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import pandas as pd

# Colour stops of the overlay: green (smallest error) to red (largest).
GRADIENT = ({"stop": 0, "bgColor": "#2e7d32"}, {"stop": 0.5, "bgColor": "#fbc02d"}, {"stop": 1, "bgColor": "#c62828"})


def node_data(nodes: pd.DataFrame, *, graph_name: str = "main_graph", metric: str = "max_abs_diff") -> dict[str, Any]:
    """The ModelNodeData dictionary for ``metric`` of every compared value with a finite number."""
    results: dict[str, dict[str, Any]] = {}
    for value, number, failed in zip(nodes["value"], nodes[metric], ~nodes["passed"].astype(bool)):
        try:
            number = float(number)
        except (TypeError, ValueError):
            continue
        if not math.isfinite(number):
            continue
        entry: dict[str, Any] = {"value": number}
        if failed:
            entry["textColor"] = "#ffffff"
        results[str(value)] = entry
    return {graph_name: {"results": results, "gradient": [dict(g) for g in GRADIENT]}}


def write_node_data(nodes: pd.DataFrame, path: str | os.PathLike, *, graph_name: str = "main_graph",
                    metric: str = "max_abs_diff") -> str:
    """Write :func:`node_data` as JSON to ``path``; return the path."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(node_data(nodes, graph_name=graph_name, metric=metric), handle, indent=2)
    return path
