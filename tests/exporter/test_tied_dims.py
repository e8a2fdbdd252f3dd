"""Dims the user named apart that the model's code ties: one dim in the graph, named after the first, with a warning.

Issue 34: upstream's ``test_export_of_rename_dynamic_axes_required_model_with_mixed_type_of_dynamic_shapes``
(pytorch/pytorch test/onnx/exporter/test_api.py) failed with CAP004 naming ``dim_x``, ``custom_name_axis_ys_0`` and
``custom_name_axis_zs_b_0``: torch.export's fixes name the ``Dim.AUTO`` axes by their source
(``L['ys'][1].size()[0] = dim_x``), which its own refinement cannot apply. torch.onnx exports it with one dim.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

import onnxsight


class NestedModel(torch.nn.Module):   # upstream's model, inputs, dynamic shapes and names
    def forward(self, x: torch.Tensor, ys: list[torch.Tensor], zs: dict[str, torch.Tensor], c: torch.Tensor) -> Any:
        y = ys[0] + ys[1] + zs["a"] + zs["b"]
        w = 5
        if x.shape[0] < 3 and c.shape[0] != 4:
            return x + w, x + y, c
        else:
            return x - w, x - y, c


def _inputs(size: int) -> tuple[Any, ...]:
    return (torch.ones(size), [torch.zeros(size), torch.ones(size)], {"a": torch.zeros(size), "b": torch.ones(size)},
            torch.ones(size + 1))


DYNAMIC_SHAPES = (
    {0: Dim("dim_x", min=3)},  # Dim
    [("custom_name_axis_ys_0",), (Dim.AUTO,)],  # custom name
    {"a": {0: Dim.AUTO}, "b": ("custom_name_axis_zs_b_0",)},  # _DimHint
    {0: "custom_name_axis_c_0"},  # custom name
)
EXPECTED_AXIS_NAMES = ["dim_x", "dim_x", "dim_x", "dim_x", "dim_x", "custom_name_axis_c_0"]


def _torch_onnx_available() -> bool:
    try:
        import onnxscript  # noqa: F401  (torch.onnx's dynamo exporter needs it)
    except ImportError:
        return False
    return True


def _export_onnxsight() -> tuple[Any, list[str]]:
    program = onnxsight.export(NestedModel(), _inputs(5), dynamic_shapes=DYNAMIC_SHAPES, optimize=False)
    tied = [d for d in program.diagnostics if d.code == "CAP007"]
    return program.model_proto, [d.message for d in tied]


def _export_torch_onnx() -> tuple[Any, list[str]]:
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        program = torch.onnx.export(NestedModel(), _inputs(5), dynamic_shapes=DYNAMIC_SHAPES, dynamo=True,
                                    optimize=False, verbose=False)
    return program.model_proto, [str(w.message) for w in caught if "will not be used" in str(w.message)]


EXPORTERS = {"onnxsight": _export_onnxsight, "torch.onnx": _export_torch_onnx}


@pytest.mark.parametrize("exporter", list(EXPORTERS))
def test_tied_dims_given_different_names_are_one_dim_named_after_the_first(exporter: str) -> None:
    if exporter == "torch.onnx" and not _torch_onnx_available():
        pytest.skip("torch.onnx's dynamo exporter needs onnxscript, which is not installed")
    model, warned = EXPORTERS[exporter]()
    names = [value.type.tensor_type.shape.dim[0].dim_param for value in model.graph.input]
    assert names == EXPECTED_AXIS_NAMES
    assert warned  # each exporter says that names were not kept
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    inputs = _inputs(4)
    feeds = {value.name: leaf.numpy() for value, leaf in zip(model.graph.input, pytree.tree_leaves(inputs))}
    expected = pytree.tree_leaves(NestedModel()(*inputs))
    for want, got in zip(expected, session.run(None, feeds)):
        np.testing.assert_allclose(got, want.numpy())


def test_onnxsight_names_every_axis_tied_and_the_line() -> None:
    _, (message,) = _export_onnxsight()
    assert "input `ys[0]` axis 0 (custom_name_axis_ys_0)" in message
    assert "input `zs['b']` axis 0 (custom_name_axis_zs_b_0)" in message
    assert "custom_name_axis_ys_0 = dim_x" in message and "L['ys'][1].size()[0] = dim_x" in message
    assert 'y = ys[0] + ys[1] + zs["a"] + zs["b"]' in message


class Tied(torch.nn.Module):
    def forward(self, mask: torch.Tensor, keys: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return (mask * 2 + ids) * keys


def test_dims_torch_ties_without_a_word_get_a_warning() -> None:
    """The first axis met has no name (``Dim.DYNAMIC``): torch.export ties ``cache_length`` and ``seq_length``
    through it and reports nothing; the graph has one dim, named after the first named axis, and CAP024 says so."""
    dynamic_shapes = {"mask": {0: Dim.DYNAMIC}, "keys": {0: Dim("cache_length")}, "ids": {0: Dim("seq_length")}}
    program = onnxsight.export(Tied(), (torch.ones(5), torch.ones(5), torch.ones(5)), dynamic_shapes=dynamic_shapes)
    assert [v.type.tensor_type.shape.dim[0].dim_param for v in program.model_proto.graph.input] == ["cache_length"] * 3
    (warning,) = [d for d in program.diagnostics if d.code == "CAP024"]
    line = inspect.getsourcelines(Tied.forward)[1] + 1
    assert warning.message == (
        "input `keys` axis 0 (cache_length), input `ids` axis 0 (seq_length) were given dims of their own in "
        f"dynamic_shapes, but `return (mask * 2 + ids) * keys` at tests/exporter/test_tied_dims.py:{line} ties them: "
        "in the graph they are one dim, `cache_length`")
    assert warning.location is not None and warning.location.line == line
