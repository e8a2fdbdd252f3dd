"""Where does quantization lose accuracy: the quantized ONNX model against the float model, per layer.

``verify(prog, args, float_model=model)`` runs the deployed (quantized) ONNX model in ONNX Runtime and
the float model it was quantized from in PyTorch on the same inputs, and compares the output of every
layer (a module of the float model, named by its path) that both have. Per layer: the
signal-to-quantization-noise ratio ``SQNR = 10 log10(sum(f^2) / sum((f - q)^2))`` in dB (lower is
worse), what the layer itself adds to the noise (the drop from its input's SQNR), and the largest
error in quantization steps of the grid the layer's output is quantized to. Layers are ranked worst
first, so a user sees which layers to keep in float.

NOTE: PT2E folds a BatchNorm into the convolution before it; the folded layer is compared with the
float model's BatchNorm output (the convolution's module keeps the layer's name).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from onnxsight.diagnostics import node_location
from onnxsight.verification import _quantization as quant
from onnxsight.verification._chunks import ChunkExecutor
from onnxsight.verification._graph import GraphIndex
from onnxsight.verification._metrics import real_view, to_numpy
from onnxsight.verification._runners import OrtRunner

#: The fields of one per-layer record (``result.info["quantization_layers"]``, the run record's
#: ``verification["quantization_layers"]``): plain values a table or a chart is drawn from.
LAYER_FIELDS = ("layer", "module_type", "location", "file", "line", "onnx_value", "sqnr_db", "sqnr_drop_db",
                "max_error_steps", "max_abs_error", "step")
_FOLDED = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")
_STEP_SEARCH = 4   # ops followed from a layer's output to the quantize that gives its grid (relu, add, ...)


@dataclass(frozen=True)
class _Layer:
    path: str
    node: Any        # the last FX node of the module in the quantized program
    value: str       # its ONNX value


def layer_errors(prog: Any, float_model: Any, call: tuple[tuple, dict], index: GraphIndex,
                 feeds: dict[str, np.ndarray], providers: Sequence[str]) -> list[dict[str, Any]]:
    """One record per layer (fields: :data:`LAYER_FIELDS`), worst SQNR first.

    ``call``: the (args, kwargs) the float model is called with, the same inputs as ``feeds``.
    """
    layers = _layers(prog, index)
    if not layers:
        return []
    float_outputs = _float_outputs(float_model, call, {layer.path for layer in layers})
    steps = {layer.path: _step_source(layer.node) for layer in layers}
    wanted = [layer.value for layer in layers if layer.path in float_outputs]
    wanted += [prog.value_names[s.name] for s in steps.values() if hasattr(s, "name") and s.name in prog.value_names]
    runner = OrtRunner(providers)
    runner.activate()
    try:
        onnx_values = ChunkExecutor(index, runner, feeds).run(list(dict.fromkeys(wanted)))
    finally:
        runner.deactivate()
    records = []
    for layer in layers:
        expected = float_outputs.get(layer.path)
        actual = onnx_values.get(layer.value)
        if expected is None or actual is None or tuple(expected.shape) != tuple(np.shape(actual)):
            continue
        f = expected.detach().double().cpu().numpy()
        q = np.asarray(actual, dtype=np.float64)
        step = steps[layer.path]
        if hasattr(step, "name"):
            step = onnx_values.get(prog.value_names.get(step.name, ""))
            step = None if step is None else float(np.asarray(step).reshape(-1)[0])
        error = np.abs(f - q)
        location = node_location(layer.node)[0]
        records.append({
            "layer": layer.path, "module_type": _module_type(float_model, layer.path),
            "location": f"{location.file}:{location.line}" if location else None,
            "file": location.file if location else None, "line": location.line if location else None,
            "onnx_value": layer.value, "sqnr_db": _sqnr(f, q),
            "max_error_steps": float(error.max() / step) if step and error.size else math.nan,
            "max_abs_error": float(error.max()) if error.size else 0.0, "step": step if step else math.nan,
        })
    _add_drops(records, layers)
    return sorted(records, key=lambda r: (r["sqnr_db"], r["layer"]))


def _layers(prog: Any, index: GraphIndex) -> list[_Layer]:
    """The last floating-point node of every module of the quantized program that ONNX computes, in order."""
    last: dict[str, Any] = {}
    for node in prog.exported_program.graph.nodes:
        stack = node.meta.get("nn_module_stack") or {}
        if node.op != "call_function" or not stack or quant.kind(node) is not None:
            continue
        path = list(stack.values())[-1][0]
        val = node.meta.get("val")
        if path and getattr(val, "dtype", None) is not None and val.dtype.is_floating_point:
            last[path] = node
    found = []
    for path, node in last.items():
        value = prog.value_names.get(node.name)
        if value is not None and index.is_computed(value):
            found.append(_Layer(path, node, value))
    return found


def _float_outputs(model: Any, call: tuple[tuple, dict], paths: set[str]) -> dict[str, Any]:
    """Each wanted module's output in the float model (a BatchNorm right after it: the BatchNorm's)."""
    import torch

    modules = dict(model.named_modules())
    order: list[str] = []
    outputs: dict[str, Any] = {}

    def hook(path: str) -> Any:
        def record(_: Any, __: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                order.append(path)
                outputs[path] = output.detach()
        return record

    handles = [module.register_forward_hook(hook(path)) for path, module in modules.items() if path]
    try:
        with torch.no_grad():
            model(*call[0], **call[1])
    finally:
        for handle in handles:
            handle.remove()
    result = {}
    for i, path in enumerate(order):
        if path not in paths:
            continue
        after = order[i + 1] if i + 1 < len(order) else None
        folded = after is not None and after not in paths and type(modules[after]).__name__ in _FOLDED
        result[path] = outputs[after] if folded else outputs[path]
    return result


def _step_source(node: Any) -> Any:
    """The scale of the quantize the layer's output reaches (a float, or the FX node computing it); None."""
    frontier, seen = [node], set()
    for _ in range(_STEP_SEARCH):
        following = []
        for current in frontier:
            for user in current.users:
                if user in seen:
                    continue
                seen.add(user)
                if quant.kind(user) == "quantize":
                    return user.args[1]
                following.append(user)
        frontier = following
    return None


def _sqnr(f: np.ndarray, q: np.ndarray) -> float:
    noise = float(np.sum((f - q) ** 2))
    signal = float(np.sum(f ** 2))
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def _add_drops(records: list[dict[str, Any]], layers: Sequence[_Layer]) -> None:
    """``sqnr_drop_db``: how much the layer lowers the SQNR of the nearest compared layer before it."""
    by_path = {r["layer"]: r for r in records}
    previous: float | None = None
    for layer in layers:
        record = by_path.get(layer.path)
        if record is None:
            continue
        here = record["sqnr_db"]
        record["sqnr_drop_db"] = (previous - here) if previous is not None and math.isfinite(previous) \
            and math.isfinite(here) else math.nan
        previous = here


def _module_type(model: Any, path: str) -> str:
    try:
        return type(model.get_submodule(path)).__name__
    except AttributeError:
        return ""


def feeds_for(prog: Any, index: GraphIndex, user_inputs: Sequence[Any]) -> dict[str, np.ndarray]:
    names = prog.input_names if set(index.graph_inputs) == set(prog.input_names) else index.graph_inputs
    return {name: real_view(to_numpy(t)) for name, t in zip(names, user_inputs)}
