"""Repro bundles: a diverging node as a standalone ONNX model with its reference inputs and outputs.

The layout is ONNX's backend test-data layout, which runtime maintainers
already know how to run::

    <dir>/model.onnx
    <dir>/test_data_set_0/input_0.pb ... output_0.pb
    <dir>/repro.py      runs it with ONNX Runtime and prints the difference (onnx, onnxruntime, numpy only)
    <dir>/README.md     the value, the ONNX nodes, the FX nodes and user lines behind them
    <dir>/README.json   the same, for tools
"""

from __future__ import annotations

import json
import os
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsight.verification._graph import GraphIndex, build_model, chunk_inputs, elem_type_name, elem_type_of
from onnxsight.verification._tolerance import Tolerance, dtype_name


@dataclass(frozen=True)
class ReproCase:
    """The nodes producing one diverging value, with the reference's inputs and expected output."""

    value: str
    model: onnx.ModelProto
    inputs: tuple[tuple[str, np.ndarray], ...]
    expected: np.ndarray
    info: Mapping[str, Any] = field(default_factory=dict)  # what the reducer found (level, nodes, diff)

    def annotated(self, **info: Any) -> "ReproCase":
        """A copy with more ``info``."""
        return dataclasses.replace(self, info={**self.info, **info})

    def write(self, directory: str | os.PathLike, *, extra: dict[str, Any] | None = None) -> list[str]:
        """Write ``model.onnx`` and ``test_data_set_0/{input,output}_*.pb``; return the paths."""
        directory = os.fspath(directory)
        data_dir = os.path.join(directory, "test_data_set_0")
        os.makedirs(data_dir, exist_ok=True)
        paths = [os.path.join(directory, "model.onnx")]
        onnx.save_model(self.model, paths[0])
        declared = {v.name: v.type.tensor_type.elem_type for v in self.model.graph.input}
        for i, (name, array) in enumerate(self.inputs):
            path = os.path.join(data_dir, f"input_{i}.pb")
            _save_tensor(array, name, declared.get(name), path)
            paths.append(path)
        out_type = self.model.graph.output[0].type.tensor_type.elem_type or None
        path = os.path.join(data_dir, "output_0.pb")
        _save_tensor(self.expected, self.value, out_type, path)
        paths.append(path)
        info = {"value": self.value, "inputs": [n for n, _ in self.inputs], **self.info, **(extra or {})}
        with open(os.path.join(directory, "README.json"), "w", encoding="utf-8") as handle:
            json.dump(info, handle, indent=2, default=str)
        paths.append(os.path.join(directory, "README.json"))
        if not info.get("atol_rtol"):
            bounds = Tolerance().for_value(self.value, dtype_name(self.expected.dtype))
            info["atol_rtol"] = (bounds.atol, bounds.rtol)
        paths.extend(write_docs(directory, info))
        return paths


def write_docs(directory: str, info: Mapping[str, Any]) -> list[str]:
    """``repro.py`` and ``README.md`` of a bundle; return their paths."""
    from onnxsight.verification._bundle_text import readme, script

    atol, rtol = info["atol_rtol"]
    paths = [os.path.join(directory, "repro.py"), os.path.join(directory, "README.md")]
    for path, text in zip(paths, (script(float(atol), float(rtol)), readme(info))):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return paths


def _save_tensor(array: np.ndarray, name: str, elem_type: int | None, path: str) -> None:
    array = np.asarray(array)
    if elem_type:
        target = elem_type_name(elem_type)
        if target == "bfloat16":
            import ml_dtypes

            array = array.astype(ml_dtypes.bfloat16)
        elif dtype_name(array.dtype) != target and target != "unknown":
            array = array.astype(target if target != "bool" else np.bool_)
    tensor = numpy_helper.from_array(array, name)
    with open(path, "wb") as handle:
        handle.write(tensor.SerializeToString())


def capture_repro(index: GraphIndex, value: str, stop: set[str], expected: np.ndarray,
                  lookup: Callable[[str], np.ndarray | None]) -> ReproCase | None:
    """The slice producing ``value`` from the nearest compared values, fed with the reference's values.

    ``lookup`` returns the reference's value of a name (graph input or compared value), or None.
    """
    nodes = index.slice([value], stop - {value})
    names = chunk_inputs(index, nodes, {})
    inputs: list[tuple[str, np.ndarray]] = []
    for name in names:
        array = lookup(name)
        if array is None:
            return None
        inputs.append((name, np.asarray(array)))
    declared = [(n, index.elem_types.get(n) or elem_type_of(dtype_name(a.dtype))) for n, a in inputs]
    model = build_model(index, nodes, declared, [value], name=f"repro_{value}")
    # Concrete shapes: the bundle is one test case, and onnx.checker wants typed inputs/outputs.
    for info, (name, array), (_, elem_type) in zip(model.graph.input, inputs, declared):
        info.CopyFrom(onnx.helper.make_tensor_value_info(name, elem_type, list(array.shape)))
    out_type = index.elem_types.get(value) or elem_type_of(dtype_name(np.asarray(expected).dtype))
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info(value, out_type, list(np.shape(expected))))
    return ReproCase(value, model, tuple(inputs), np.asarray(expected))
