"""The quantized zoo suite: PT2E int8 models exported and verified per node at other batch sizes."""

from __future__ import annotations

import pytest

from onnxsight.zoo import load_suite
from onnxsight.zoo._worker import run_model

pytest.importorskip("tests.quantized.models", reason="torchao is not installed: pip install onnxsight[quant]")


def test_suite_lists_static_and_dynamic_quantization() -> None:
    suite = load_suite("quantized")
    assert suite.skipped is None
    names = {spec.name for spec in suite.specs}
    assert {"int8_residual_cnn", "int8_mlp", "int8_transformer_block", "int8_dynamic_mlp",
            "int8_dynamic_transformer_block"} <= names
    assert all(spec.dynamic == {"x": {0: "batch"}} for spec in suite.specs)


@pytest.mark.parametrize("model", ["int8_residual_cnn", "int8_dynamic_mlp"])
def test_worker_exports_and_verifies_per_node(model: str, tmp_path) -> None:
    result = run_model({"model": model, "suite": "quantized", "model_dir": str(tmp_path),
                        "providers": ["CPUExecutionProvider"], "per_node": True, "opset": None, "source": {}})
    assert result.status == "passed", result.error
    assert len(result.verification["sizes_checked"]) >= 2
    ops = {n.op_type for n in __import__("onnx").load(str(tmp_path / "model.onnx")).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops


def test_torchvision_models_are_listed_or_skipped_with_the_reason() -> None:
    """ResNet-18 and MobileNetV2 run where torchvision imports; elsewhere the suite skips them, saying why."""
    from onnxsight.zoo._spec import SuiteUnavailable, import_or_unavailable

    suite = load_suite("quantized")
    wanted = {"int8_resnet18", "int8_mobilenet_v2"}
    try:
        import_or_unavailable("torchvision", "quantized")
    except SuiteUnavailable as exc:
        assert dict(suite.skipped_models) == {name: str(exc) for name in wanted}
        assert "torchvision" in str(exc) and not wanted & {spec.name for spec in suite.specs}
    else:
        assert wanted <= {spec.name for spec in suite.specs} and not suite.skipped_models


def test_a_skipped_model_is_named_in_the_summary() -> None:
    from onnxsight.zoo._summary import markdown_summary

    text = markdown_summary([], run_id="r", skipped=[("quantized/int8_resnet18", "torchvision does not import")])
    assert "Model **quantized/int8\\_resnet18** skipped: torchvision does not import" in text   # markdown-escaped
