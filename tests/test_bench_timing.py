"""``bench/ort_latency.py``'s interleaved timing loop as the other latency scripts use it: a variant's own number
of calls per round (``bench/mask_guard.py`` sizes them by time), and mask_guard's output check before timing."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import mask_guard  # noqa: E402
import ort_latency  # noqa: E402


def _model(path: str, scale: float = 1.0) -> str:
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.array(scale, np.float32), "scale")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_measure_makes_a_variants_own_calls_per_round(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _model(str(tmp_path / "m.onnx"))
    made: dict[str, list[int]] = {}

    def counting(session: Any, feeds: dict, device: str) -> Any:
        count = made.setdefault(f"variant {len(made)}", [0])
        return lambda: count.__setitem__(0, count[0] + 1)

    monkeypatch.setattr(ort_latency, "_caller", counting)
    feeds = [np.ones((2, 3), np.float32)]
    variants = [{"model": "m", "path": path, "feeds": feeds, "calls": 4}, {"model": "m", "path": path, "feeds": feeds}]
    ort_latency.measure(variants, runs=3, iters=2)
    # one untimed warm-up, then 3 rounds of the variant's own 4 calls, or of iters (2) without them
    assert made == {"variant 0": [1 + 3 * 4], "variant 1": [1 + 3 * 2]}
    assert all(len(v["times"]) == 3 and v["median_ms"] > 0 for v in variants)


def test_mask_guards_check_sizes_the_rounds_and_refuses_other_numbers(tmp_path: Any) -> None:
    feeds = [np.ones((2, 3), np.float32)]
    same = [{"variant": name, "path": _model(str(tmp_path / f"{name}.onnx")), "feeds": feeds} for name in "ab"]
    mask_guard.agree(same, calls=7, seconds=1.0)
    assert [row["calls"] for row in same] == [7, 7]
    mask_guard.agree(same, calls=0, seconds=1e-9)     # by time: at least one call
    assert [row["calls"] for row in same] == [1, 1]
    other = [same[0], {"variant": "c", "path": _model(str(tmp_path / "c.onnx"), scale=2.0), "feeds": feeds}]
    with pytest.raises(AssertionError, match="c computes other numbers than a"):
        mask_guard.agree(other, calls=1, seconds=1.0)


def test_the_ratio_is_the_median_of_the_rounds_ratios() -> None:
    # round 2 ran under load for both tools: its ratio is like the others, the medians' ratio is not
    ours, theirs = {"times": [1.0, 5.0, 1.1, 0.9, 1.0]}, {"times": [1.25, 6.0, 1.3, 1.0, 1.1]}
    assert ort_latency.round_ratio(ours, theirs) == "0.85 (0.80-0.91)"
    assert ort_latency.round_ratio(ours, {"error": "optimizer failed"}) == "-"
    assert ort_latency.round_ratio(None, theirs) == "-"
