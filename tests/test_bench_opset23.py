"""``bench/opset23.py``'s grouped-query variants time the graphs they name: the default export gives ONNX's Attention
K and V with their own 2 heads (transformers' repeat_kv dropped by the grouped-query pass), as the ``enable_gqa`` one
does; ``repeat_kv kept`` (that pass off) repeats them to the query heads; the rotary and repeat_kv written out keep
neither RotaryEmbedding nor the 2 heads; each is checked against PyTorch (per node, after ORT's optimizer too) before
it is timed."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

import opset23  # noqa: E402
import ort_fusion  # noqa: E402


@pytest.mark.parametrize("variant, ops", [
    ("direct ops", "RotaryEmbedding 8, K/V heads 2"), ("direct ops, enable_gqa", "RotaryEmbedding 8, K/V heads 2"),
    (opset23.REPEATED, "RotaryEmbedding 8, K/V heads 4"), (opset23.WRITTEN, "K/V heads 4")])
def test_grouped_query_variants_hold_the_attention_they_name(tmp_path, variant: str, ops: str) -> None:
    import torch

    model, _ = ort_fusion.build("llama-gqa")
    args = (torch.randint(0, 1000, (1, 8)),)
    path = str(tmp_path / "m.onnx")
    program = opset23._export(model, args, path, variant)
    assert opset23.FORCE_GQA not in os.environ   # set only while exporting
    assert opset23._direct_ops(path) == f"Attention {ort_fusion.LAYERS}, RMSNormalization 9, {ops}"
    out = str(tmp_path / "opt.onnx")
    _, optimized = ort_fusion.optimize(path, ort_fusion.MODEL_TYPES["llama-gqa"], out)
    text = opset23.check(model, args, out, program, optimized.model, gqa=variant.endswith("enable_gqa"))
    assert text.endswith("verify passed") and float(text.split()[2].rstrip(",")) < 1e-4, text


def test_gqa_table_compares_each_export_with_onnxsights_default() -> None:
    rows = [{"model": "llama-gqa", "seq": 16, "stage": "exported", "variant": variant, "nodes": nodes,
             "median_ms": ms, "spread": 0.1}
            for variant, nodes, ms in (("direct ops", 181, 2.0), ("direct ops, enable_gqa", 157, 1.5),
                                       ("torch.onnx opset 18", 264, 3.0))]
    rows.append({"model": "llama-gqa", "seq": 16, "stage": "exported", "variant": "torch.onnx",
                 "error": "export failed: X"})
    lines = opset23.gqa_table(rows).splitlines()[2:]
    assert lines == ["| llama-gqa | 16 | exported | onnxsight 23 | 181 | 2.00 ±5% | 1.00 |",
                     "| llama-gqa | 16 | exported | onnxsight 23, enable_gqa | 157 | 1.50 ±5% | 0.75 |",
                     "| llama-gqa | 16 | exported | torch.onnx 18 | 264 | 3.00 ±5% | 1.50 |",
                     "| llama-gqa | 16 | exported | torch.onnx 23 | - | export failed: X | - |"]
