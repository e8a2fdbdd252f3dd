"""Fault localisation: inject one fault into one ONNX node; verify must name that value first.

Values are picked from a clean verification of each model (the k-th compared value), so
the cases follow the exporter as translations change, without naming ONNX values here.
"""

from __future__ import annotations

import functools

import pandas as pd
import pytest

import onnxsight
from tests.verification.faults import scale_value, swap_inputs
from tests.verification.models import exported

VALUES_PER_MODEL = {"mlp": 16, "attention": 10, "gated": 8}
SWAPPED_OPS = ("Sub", "Div", "MatMul")
MODES = ("propagated", "isolated")


@functools.lru_cache(maxsize=None)
def clean_rows(model: str) -> pd.DataFrame:
    result = onnxsight.verify(exported(model))
    assert result.passed
    return result.nodes[result.nodes["dtype"].str.startswith("float")].reset_index(drop=True)


def _assert_first_root_cause(model: str, faulty, value: str, mode: str) -> None:
    result = onnxsight.verify(exported(model), onnx_model=faulty, mode=mode)
    assert not result.passed
    assert list(result.root_causes["value"])[:1] == [value]
    if mode == "isolated":  # PyTorch's inputs everywhere: nothing else diverges
        assert list(result.nodes.loc[~result.nodes["passed"], "value"]) == [value]
    root = next(d for d in result.diagnostics if d.code == "ACC002")
    row = clean_rows(model).set_index("value").loc[value]
    assert root.properties["fx_node"] == row["fx_node"] and root.properties["onnx_value"] == value
    assert root.location is not None and root.location.file.endswith("models.py")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("model", "k"), [(m, k) for m, n in VALUES_PER_MODEL.items() for k in range(n)])
def test_scaled_value_is_the_first_root_cause(model: str, k: int, mode: str) -> None:
    rows = clean_rows(model)
    if k >= len(rows):
        pytest.skip(f"{model} has {len(rows)} compared values")
    value = rows["value"][k]
    _assert_first_root_cause(model, scale_value(exported(model).model_proto, value), value, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("model", "op"), [(m, op) for m in VALUES_PER_MODEL for op in SWAPPED_OPS])
def test_swapped_inputs_are_the_first_root_cause(model: str, op: str, mode: str) -> None:
    rows = clean_rows(model)
    values = [v for v, o, shape in zip(rows["value"], rows["onnx_op"], rows["shape"])
              if o == op and (op != "MatMul" or len(set(shape)) == 1)]
    if not values:
        pytest.skip(f"{model} has no {op} node with swappable inputs")
    for value in values:
        _assert_first_root_cause(model, swap_inputs(exported(model).model_proto, value), value, mode)


@pytest.mark.parametrize("model", sorted(VALUES_PER_MODEL))
def test_downstream_mismatches_are_propagated_from_the_root(model: str) -> None:
    value = clean_rows(model)["value"][0]
    result = onnxsight.verify(exported(model), onnx_model=scale_value(exported(model).model_proto, value))
    failed = result.nodes[~result.nodes["passed"]]
    assert set(failed.loc[~failed["root_cause"], "propagated_from"]) <= {value}
    codes = [d.code for d in result.diagnostics]
    assert "ACC006" in codes and "ACC001" in codes
