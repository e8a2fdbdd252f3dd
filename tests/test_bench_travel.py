"""``bench/ort_latency.py --save/--load``: models exported on one machine, timed on another (a GPU machine
without this project's torch). What travels must time the same graph: only large float weights are
stripped, refilled with values of their shape and dtype; everything else arrives exactly as exported."""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import ort_latency  # noqa: E402


def _model(path: str) -> dict[str, np.ndarray]:
    inits = {
        "weight": np.random.default_rng(1).standard_normal((64, 96), dtype=np.float32),   # 6144 > STRIP
        "bias": np.arange(96, dtype=np.float32),                                           # small: kept
        "table": np.arange(5000, dtype=np.int64),                                          # not float: kept
    }
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "weight"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["y"]),
         helper.make_node("Shape", ["table"], ["n"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 96]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [1])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return inits


def test_save_strips_only_large_float_weights_and_load_refills_them(tmp_path) -> None:
    inits = _model(str(tmp_path / "m.onnx"))
    feeds = [np.ones((2, 64), dtype=np.float32)]
    variant = {"model": "m", "batch": 2, "tool": "onnxsight", "stage": "exported", "nodes": 3,
               "path": str(tmp_path / "m.onnx"), "feeds": feeds}
    failed = {"model": "m", "batch": 2, "tool": "torch.onnx", "stage": "exported", "error": "export failed: X"}
    ort_latency.save([variant, failed], str(tmp_path / "travel"))

    travelled = onnx.load(str(tmp_path / "travel" / "0.onnx"))
    assert sorted(i.name for i in travelled.graph.initializer) == ["bias", "table"]
    assert os.path.getsize(tmp_path / "travel" / "0.onnx") < \
        os.path.getsize(tmp_path / "m.onnx") - inits["weight"].nbytes + 1024

    (tmp_path / "there").mkdir()
    loaded = ort_latency.load(str(tmp_path / "travel"), str(tmp_path / "there"))
    assert loaded[1] == failed
    assert {k: loaded[0][k] for k in ("model", "batch", "tool", "stage", "nodes")} == \
        {"model": "m", "batch": 2, "tool": "onnxsight", "stage": "exported", "nodes": 3}
    np.testing.assert_array_equal(loaded[0]["feeds"][0], feeds[0])
    refilled = {i.name: numpy_helper.to_array(i) for i in onnx.load(loaded[0]["path"]).graph.initializer}
    assert refilled["weight"].shape == (64, 96) and refilled["weight"].dtype == np.float32
    assert not np.array_equal(refilled["weight"], inits["weight"])      # values are draws, not the originals
    assert 0.01 < float(refilled["weight"].std()) < 0.03
    np.testing.assert_array_equal(refilled["bias"], inits["bias"])
    np.testing.assert_array_equal(refilled["table"], inits["table"])
    y, n = ort.InferenceSession(loaded[0]["path"], providers=["CPUExecutionProvider"]).run(None, {"x": feeds[0]})
    assert y.shape == (2, 96) and n.tolist() == [5000]


def test_measure_times_every_variant_that_has_a_model(tmp_path) -> None:
    _model(str(tmp_path / "m.onnx"))
    variants = [{"model": "m", "batch": 2, "tool": "onnxsight", "stage": "exported",
                 "path": str(tmp_path / "m.onnx"), "feeds": [np.ones((2, 64), dtype=np.float32)]},
                {"model": "m", "batch": 2, "tool": "torch.onnx", "stage": "exported", "error": "export failed: X"}]
    ort_latency.measure(variants, runs=3, iters=2)
    assert len(variants[0]["times"]) == 3 and variants[0]["median_ms"] > 0
    assert "times" not in variants[1]
