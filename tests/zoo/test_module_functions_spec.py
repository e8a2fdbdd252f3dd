"""A zoo spec with ``module_functions=True``: exported with ONNX functions, run and verified through them."""

from __future__ import annotations

import pytest

from onnxsight.cli import main
from onnxsight.zoo import ResultsStore


def test_a_module_functions_spec_exports_functions_and_passes(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["zoo", "run", "--suite", "tricky", "--filter", "encoder_functions", "--out", str(tmp_path / "out"),
                 "--store", str(tmp_path / "zoo.sqlite"), "--jobs", "1", "--fail-on", "never", "--quiet"])
    assert code == 0, capsys.readouterr().err
    store = ResultsStore(str(tmp_path / "zoo.sqlite"))
    [result] = store.records(store.results()["run_id"].iloc[0])
    assert result.status == "passed", result.error
    # the ops inside the functions are counted, not the calls: the same table as a flat export
    assert not any(op.startswith("pkg.onnxsight.modules") for op in result.op_counts)
    assert result.op_counts["MatMul"] >= 4 and result.verification is not None


def test_op_counts_descend_into_module_functions() -> None:
    import torch

    import onnxsight
    from onnxsight.zoo._worker import op_counts

    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = (torch.randn(2, 6, 16),)
    nested = onnxsight.export(model, x, module_functions=True).model_proto
    flat = onnxsight.export(model, x, optimize=False).model_proto  # module functions are not optimised
    assert nested.functions
    counts = op_counts(nested.graph, {(f.domain, f.name): f for f in nested.functions})
    expected = op_counts(flat.graph)
    assert counts.pop("Constant", 0) >= expected.pop("Constant", 0)   # shared constants: a copy per body
    assert counts == expected
