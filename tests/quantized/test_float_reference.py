"""verify(float_model=): the quantized ONNX model against the float model, per layer, and in the reports."""

from __future__ import annotations

import glob
import json
import math
import os

import pytest
import torch

import onnxsight
from onnxsight.exporter._api import export

models = pytest.importorskip("tests.quantized.models", reason="torchao is not installed: pip install onnxsight[quant]")

FIELDS = {"layer", "module_type", "location", "file", "line", "sqnr_db", "sqnr_drop_db", "max_error_steps"}


def test_layers_ranked_worst_first_at_the_users_lines() -> None:
    float_model, module, args, dynamic_shapes = models.conv_bn_residual()
    program = export(module, args, dynamic_shapes=dynamic_shapes)
    result = onnxsight.verify(program, args, float_model=float_model)
    assert result.passed
    layers = result.quantization_layers
    assert set(layers["layer"]) == {"conv", "conv2", "fc"}   # bn is folded into conv by PT2E
    assert list(layers["sqnr_db"]) == sorted(layers["sqnr_db"])
    assert (layers["sqnr_db"] > 15).all() and layers["sqnr_db"].map(math.isfinite).all()
    records = result.info["quantization_layers"]
    assert FIELDS <= set(records[0])
    source = open(models.__file__).read().splitlines()
    conv = layers.set_index("layer").loc["conv"]
    assert conv["file"] == models.__file__ and "self.conv(x)" in source[int(conv["line"]) - 1]
    assert conv["location"] == f"{models.__file__}:{int(conv['line'])}"
    assert conv["max_error_steps"] > 0 and math.isfinite(conv["max_error_steps"])
    assert math.isnan(layers.set_index("layer").loc["fc", "max_error_steps"])  # its output is not quantized


class Outlier(models.MLP):
    """fc2 holds one huge weight per row: its per-channel step is coarse, so it adds the most error."""

    def __init__(self) -> None:
        super().__init__()
        with torch.no_grad():
            self.fc2.weight[:, 0] = 40.0


def test_the_layer_that_loses_accuracy_adds_the_most_noise() -> None:
    torch.manual_seed(0)
    model = Outlier().eval()
    args = (torch.randn(8, 16),)
    module = models.quantize(model, args)
    result = onnxsight.verify(export(module, args), args, float_model=model)
    layers = result.quantization_layers.set_index("layer")
    assert layers["sqnr_drop_db"].idxmax() == "fc2", layers[["sqnr_db", "sqnr_drop_db"]]


def test_reports_show_the_table_and_the_run_record_holds_the_rows(tmp_path: object) -> None:
    float_model, module, args, dynamic_shapes = models.mlp_dynamic_batch()
    program = onnxsight.export(module, args, dynamic_shapes=dynamic_shapes, report=True, float_model=float_model,
                               artifacts_dir=str(tmp_path))
    assert program.verification.passed and not program.verification.quantization_layers.empty
    markdown = open(glob.glob(os.path.join(str(tmp_path), "*.md"))[0]).read()
    assert "Error quantization adds, per layer" in markdown and "| fc2 | Linear |" in markdown
    html = open(glob.glob(os.path.join(str(tmp_path), "*.html"))[0]).read()
    assert 'id="quantization-table"' in html
    chart = html[html.index('id="quantization-chart"'):html.index('id="quantization-table"')]
    assert "<svg" in chart and all(f">{layer}<" in chart for layer in ("fc1", "fc2", "fc3"))  # the chart of the rows
    record = json.load(open(glob.glob(os.path.join(str(tmp_path), "*_run.json"))[0]))
    rows = record["verification"]["quantization_layers"]
    assert {r["layer"] for r in rows} == {"fc1", "fc2", "fc3"} and FIELDS <= set(rows[0])
