"""Facts about one run, gathered before anything is rendered: the model, its ONNX form, the environment.

The reports show a :class:`onnxsight.reports.RunRecord` and nothing else; this
module (with ``_run_record.py``) is where the exported program, the FX graph,
the state_dict and the ONNX model are read to fill one. torch objects are read
by duck typing, and every fact is optional: a report about an export that
failed before torch.export ran still gets the facts that exist.
"""

from __future__ import annotations

import platform
import sys
from collections import Counter
from importlib import metadata
from typing import Any, Iterable, Mapping

from onnxsight.reports import jsonable

PROGRAM_TEXT_LIMIT = 300_000


def model_facts(exported: Any, model: Any, args: Any, kwargs: Any, program: Any, onnx_model: Any,
                record: Any) -> dict[str, Any]:
    """Parameters and buffers by dtype, inputs/outputs, op histograms, ONNX size and opset."""
    facts: dict[str, Any] = {"opset": getattr(record, "opset", None)}
    facts.update(_weights_by_dtype(exported, model))
    facts["inputs"] = (_onnx_io(onnx_model, "input") if onnx_model is not None
                       else _inputs(exported, program, args, kwargs, model))
    facts["outputs"] = _onnx_io(onnx_model, "output") if onnx_model is not None else _ep_outputs(exported)
    if exported is not None:
        facts["aten_ops"] = dict(Counter(_aten_targets(exported.graph_module)).most_common())
    if onnx_model is not None:
        functions = {(f.domain, f.name): f for f in onnx_model.functions}
        facts["onnx_ops"] = dict(Counter(_onnx_ops(onnx_model.graph, functions)).most_common())
        facts["onnx_nodes"] = sum(facts["onnx_ops"].values())
        facts["onnx_size"] = int(onnx_model.ByteSize()) if onnx_model.graph.initializer or program is None else int(
            getattr(program, "embedded_size", None) or onnx_model.ByteSize() + getattr(program, "weights_size", 0))
        facts["opset"] = next((o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx")),
                              facts["opset"])
    return jsonable(facts)


def _weights_by_dtype(exported: Any, model: Any) -> dict[str, Any]:
    if exported is not None:
        state = dict(exported.state_dict)
        state.update(getattr(exported, "constants", {}) or {})
        signature = exported.graph_signature
        groups = {"parameters": list(signature.parameters), "buffers": list(signature.buffers)}
        tensors = {kind: [state[n] for n in names if n in state] for kind, names in groups.items()}
    elif model is not None and hasattr(model, "named_parameters"):
        tensors = {"parameters": [p for _, p in model.named_parameters()],
                   "buffers": [b for _, b in model.named_buffers()]}
    else:
        return {}
    out: dict[str, Any] = {}
    for kind, values in tensors.items():
        table: dict[str, dict[str, int]] = {}
        for tensor in values:
            if not hasattr(tensor, "dtype"):
                continue
            row = table.setdefault(_dtype(tensor.dtype), {"tensors": 0, "elements": 0, "bytes": 0})
            row["tensors"] += 1
            row["elements"] += int(tensor.numel())
            row["bytes"] += int(tensor.numel()) * int(tensor.element_size())
        out[kind] = table
    return out


def _dtype(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _shape(shape: Any) -> list[Any]:
    return [int(d) if isinstance(d, int) or str(d).isdigit() else str(d) for d in shape]


def _inputs(exported: Any, program: Any, args: Any, kwargs: Any, model: Any = None) -> list[dict[str, Any]]:
    if exported is not None:
        nodes = {n.name: n for n in exported.graph_module.graph.nodes if n.op == "placeholder"}
        user = [s.arg.name for s in exported.graph_signature.input_specs
                if s.kind.name == "USER_INPUT" and hasattr(s.arg, "name")]
        onnx_names = list(getattr(program, "input_names", []) or [])
        rows = []
        for index, name in enumerate(user):
            val = nodes[name].meta.get("val") if name in nodes else None
            row: dict[str, Any] = {"name": onnx_names[index] if index < len(onnx_names) else name}
            if hasattr(val, "dtype"):
                row.update(dtype=_dtype(val.dtype), shape=_shape(val.shape))
            else:
                row.update(dtype=type(val).__name__, shape=None)
            rows.append(row)
        return rows
    if args is None and kwargs is None:
        return []
    args = args if isinstance(args, (tuple, list)) else (args,)
    rows = []
    for name, leaf in _named_leaves(model, tuple(args), dict(kwargs or {})):
        row = {"name": name}
        if hasattr(leaf, "dtype") and hasattr(leaf, "shape"):
            row.update(dtype=_dtype(leaf.dtype), shape=_shape(leaf.shape))
        else:
            row.update(dtype=type(leaf).__name__, shape=None)
        rows.append(row)
    return rows


def _named_leaves(model: Any, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """Input leaves named by forward()'s arguments (``tokens``, ``pair[0]``), as diagnostics name them.

    Reached when capture failed (no graph to name them): falls back to positional paths
    (``[0][1]``) only when the arguments do not bind to forward().
    """
    import inspect

    from torch.utils import _pytree as pytree

    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs).arguments
    except (TypeError, ValueError, AttributeError):
        return [(pytree.keystr(path), leaf) for path, leaf in pytree.tree_flatten_with_path((args, kwargs))[0]]
    return [(f"{name}{pytree.keystr(path)}", leaf) for name, value in bound.items()
            for path, leaf in pytree.tree_flatten_with_path(value)[0]]


def _ep_outputs(exported: Any) -> list[dict[str, Any]]:
    if exported is None:
        return []
    output = next((n for n in exported.graph_module.graph.nodes if n.op == "output"), None)
    values = output.args[0] if output is not None and output.args else ()
    rows = []
    for spec, node in zip(exported.graph_signature.output_specs, values):
        if spec.kind.name != "USER_OUTPUT":
            continue
        val = getattr(node, "meta", {}).get("val")
        rows.append({"name": getattr(node, "name", str(node)),
                     "dtype": _dtype(val.dtype) if hasattr(val, "dtype") else type(val).__name__,
                     "shape": _shape(val.shape) if hasattr(val, "shape") else None})
    return rows


def _onnx_io(model: Any, which: str) -> list[dict[str, Any]]:
    import onnx

    rows = []
    for value in getattr(model.graph, which):
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
        rows.append({"name": value.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
                     if tensor.elem_type else "?", "shape": dims if tensor.HasField("shape") else None})
    return rows


def _aten_targets(graph_module: Any) -> Iterable[str]:
    for node in graph_module.graph.nodes:
        if node.op == "get_attr":
            sub = getattr(graph_module, str(node.target), None)
            if sub is not None and hasattr(sub, "graph"):
                yield from _aten_targets(sub)
        if node.op == "call_function":
            yield _op_name(node.target)


def _op_name(target: Any) -> str:
    name = getattr(target, "_name", None)  # OpOverload: "aten::add.Tensor"
    if isinstance(name, str) and "::" in name:
        overload = getattr(target, "_overloadname", "default")
        base = name.replace("::", ".", 1)
        return base if base.endswith(f".{overload}") else f"{base}.{overload}"
    return f"{getattr(target, '__module__', '') or ''}.{getattr(target, '__name__', str(target))}".lstrip(".")


def _onnx_ops(graph: Any, functions: Mapping[tuple[str, str], Any]) -> Iterable[str]:
    """The op of every node that runs: a call of a local function (module_functions=) counts its body's ops."""
    for node in graph.node:
        function = functions.get((node.domain, node.op_type))
        if function is not None:
            yield from _onnx_ops(function, functions)
            continue
        yield f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        for attr in node.attribute:
            if attr.g.node:
                yield from _onnx_ops(attr.g, functions)
            for sub in attr.graphs:
                yield from _onnx_ops(sub, functions)


def model_structure(program: Any) -> Any:
    """The program's ModelProto to read facts from; for models over 2 GB the graph without weights."""
    return None if program is None else program.model_structure()


def program_text(exported: Any) -> str:
    if exported is None:
        return ""
    text = str(exported)
    if len(text) > PROGRAM_TEXT_LIMIT:
        text = text[:PROGRAM_TEXT_LIMIT] + f"\n... ({len(text) - PROGRAM_TEXT_LIMIT} more characters)"
    return text


def environment() -> dict[str, Any]:
    """Versions of python and the libraries, and the ONNX Runtime providers available here."""
    env: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for package in ("onnxsight", "torch", "onnx", "onnxruntime", "onnxruntime-gpu", "numpy"):
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    env["providers"] = _providers()
    return env


def _providers() -> list[str]:
    # NOTE: onnxruntime is imported only inside verification (DESIGN.md); the run record asks
    # verification which providers this machine has rather than importing the runtime here.
    from onnxsight.verification import available_providers

    try:
        return available_providers()
    except ImportError:
        return []
