"""The charts are drawn from the record's numbers: each point sits where its value puts it on the axis.

The SVG is read back: the tick labels and their positions give the axis's scale, and each marker's
position is checked against the number in the record it came from.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from onnxsight.reports import charts

pytest.importorskip("matplotlib")


def _texts(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def _group(svg: str, gid: str) -> str:
    match = re.search(rf'<g id="c[0-9a-f]+-{re.escape(gid)}">(.*?)</g>', svg, re.S)
    assert match, f"no {gid} in the chart"
    return match.group(1)


def _marks(svg: str, gid: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r'<use [^>]*x="([-\d.]+)" y="([-\d.]+)"', _group(svg, gid))]


def _yticks(svg: str) -> dict[str, float]:
    """Tick label -> its y position on the y axis (matplotlib.axis_2)."""
    axis = svg[svg.index("matplotlib.axis_2"):]
    ticks = re.findall(r'<use [^>]*y="([-\d.]+)"[^>]*/>\s*</g>\s*</g>\s*<g[^>]*>\s*<text[^>]*>([^<]*)</text>', axis)
    return {label: float(y) for y, label in ticks}


def _y_of_log(ticks: dict[str, float], value: float) -> float:
    (low_label, low_y), (high_label, high_y) = sorted(ticks.items(), key=lambda kv: kv[1], reverse=True)[:2]
    low, high = math.log10(float(low_label)), math.log10(float(high_label))
    return low_y + (math.log10(value) - low) / (high - low) * (high_y - low_y)


def _y_of_linear(ticks: dict[str, float], value: float, strip: str = "") -> float:
    (low_label, low_y), (high_label, high_y) = sorted(ticks.items(), key=lambda kv: kv[1], reverse=True)[:2]
    low, high = float(low_label.rstrip(strip)), float(high_label.rstrip(strip))
    return low_y + (value - low) / (high - low) * (high_y - low_y)


def _is_inline_svg(svg: str) -> None:
    assert svg.startswith("<svg ") and svg.rstrip().endswith("</svg>")
    assert "style=" not in svg and "<style" not in svg and "<script" not in svg and "http://" not in svg.split(">", 1)[1].replace("http://www.w3.org", "")


NODES = [{"index": i, "value": f"v{i}", "max_abs_diff": d, "atol": 1e-4, "passed": d < 1e-4, "root_cause": i == 3}
         for i, d in enumerate([1e-7, 2e-7, 5e-8, 2e-2, 3e-2, 1e-6])]


def test_error_along_the_graph_is_built_from_the_nodes() -> None:
    svg = charts.error_along_graph(NODES)
    assert svg is not None
    _is_inline_svg(svg)
    ticks = _yticks(svg)
    assert "1e-4" in ticks
    dots = _marks(svg, "differences")
    assert len(dots) == len(NODES)
    for (x, y), node in zip(dots, NODES):
        assert y == pytest.approx(_y_of_log(ticks, node["max_abs_diff"]), abs=0.6), node
    assert [x for x, _ in dots] == sorted(x for x, _ in dots)          # graph order, left to right
    tolerance = re.search(r'<path d="M [-\d.]+ ([-\d.]+)', _group(svg, "tolerance")).group(1)
    assert float(tolerance) == pytest.approx(ticks["1e-4"], abs=0.6)     # the tolerance drawn at atol
    [root] = _marks(svg, "root-causes")
    assert root == dots[3] and "v3" in _texts(svg)                      # the root cause marked and named
    assert _marks(svg, "out-of-tolerance") == [dots[4]]
    assert "atol 0.0001" in _texts(svg)


def test_error_along_the_graph_edge_cases() -> None:
    nodes = [{"index": 0, "max_abs_diff": 0.0}, {"index": 1, "max_abs_diff": "inf", "passed": False},
             {"index": 2, "max_abs_diff": None}, {"index": 3, "max_abs_diff": "nan"}]
    svg = charts.error_along_graph(nodes)
    assert svg is not None and len(_marks(svg, "differences")) == 2 and len(_marks(svg, "non-finite")) == 1
    assert charts.error_along_graph([]) is None
    assert charts.error_along_graph([{"max_abs_diff": None}]) is None


def test_text_from_records_is_escaped() -> None:
    svg = charts.error_along_graph([{"index": 0, "value": '<script>alert("x")</script>', "max_abs_diff": 1.0,
                                     "root_cause": True, "passed": False}])
    assert "<script" not in svg and "&lt;script&gt;" in svg
    trend = charts.run_trend([{"date": "<b>a</b>", "v": 1.0}, {"date": "$x$", "v": 2.0}], value="v", label="l",
                             unit="s")
    assert "<b>" not in trend and "&lt;b&gt;a&lt;/b&gt;" in trend and "$x$" in _texts(trend)


def test_a_constant_pass_rate_is_a_line_at_100_percent() -> None:
    runs = [{"date": f"11-2{i} 02:00", "pass_rate": 1.0} for i in range(3)]
    svg = charts.run_trend(runs, value="pass_rate", label="pass rate", unit="%", percent=True)
    _is_inline_svg(svg)
    ticks = _yticks(svg)
    assert list(ticks) == ["0%", "25%", "50%", "75%", "100%"]
    for _, y in _marks(svg, "trend"):
        assert y == pytest.approx(ticks["100%"], abs=0.6)
    assert "100% in every run" in _texts(svg)
    assert {"11-20 02:00", "11-21 02:00", "11-22 02:00"} <= set(_texts(svg))  # run dates on the x axis


def test_an_export_time_within_noise_reads_flat() -> None:
    """4.1 s then 4.0 s: on an axis from zero the two points are 2% of the height apart, not all of it."""
    runs = [{"date": "a", "export": 4.1}, {"date": "b", "export": 4.0}]
    svg = charts.run_trend(runs, value="export", label="export time", unit="s")
    ticks = _yticks(svg)
    assert "0" in ticks and "export time (s)" in _texts(svg)
    (_, first), (_, second) = _marks(svg, "trend")
    assert first == pytest.approx(_y_of_linear(ticks, 4.1), abs=0.6)
    assert second == pytest.approx(_y_of_linear(ticks, 4.0), abs=0.6)
    height = ticks["0"] - min(ticks.values())
    assert abs(second - first) < 0.05 * height
    assert charts.run_trend(runs[:1], value="export", label="export time", unit="s") is None


def test_difference_history_marks_the_tolerance_and_failures() -> None:
    rows = [{"date": "n1", "max_abs_diff": 1e-7, "atol": 1e-4, "status": "passed"},
            {"date": "n2", "max_abs_diff": 3e-3, "atol": 1e-4, "status": "failed"},
            {"date": "n3", "max_abs_diff": None, "atol": None, "status": "crashed"}]
    svg = charts.difference_history(rows)
    _is_inline_svg(svg)
    ticks = _yticks(svg)
    dots = _marks(svg, "differences")
    assert [y for _, y in dots] == pytest.approx([_y_of_log(ticks, 1e-7), _y_of_log(ticks, 3e-3)], abs=0.6)
    assert _marks(svg, "not-passed") == [dots[1]]
    assert {"n1", "n2"} <= set(_texts(svg)) and "atol 0.0001" in _texts(svg)
    assert charts.difference_history(rows[:1]) is None


def _bar_width(svg: str, gid: str) -> float:
    xs = [float(x) for x in re.findall(r"[ML] ([-\d.]+) [-\d.]+", _group(svg, gid))]
    return max(xs) - min(xs)


def test_layer_error_bars_are_the_rows_numbers() -> None:
    """Rows as the quantization report will give them: layer, SQNR in dB, max error in quantization steps."""
    rows = [{"layer": "conv1", "sqnr_db": 40.0, "max_error_steps": 1.0},
            {"layer": "layer1.0.conv2", "sqnr_db": 20.0, "max_error_steps": 4.0},
            {"layer": "fc", "sqnr_db": 30.0, "max_error_steps": None}]
    svg = charts.layer_error_bars(rows)
    _is_inline_svg(svg)
    assert {"conv1", "layer1.0.conv2", "fc"} <= set(_texts(svg))
    assert "SQNR (dB, higher is better)" in _texts(svg) and "max error (quantization steps)" in _texts(svg)
    widths = [_bar_width(svg, f"sqnr-{i}") for i in range(3)]
    assert widths[0] / widths[1] == pytest.approx(2.0, rel=0.01) and widths[2] / widths[1] == pytest.approx(1.5, rel=0.01)
    assert _bar_width(svg, "steps-1") / _bar_width(svg, "steps-0") == pytest.approx(4.0, rel=0.01)
    assert 'fill="#b42318"' in _group(svg, "sqnr-1")                  # the worst layer in red
    assert charts.layer_error_bars([{"layer": "x"}]) is None
    exact = charts.layer_error_bars([*rows, {"layer": "identity", "sqnr_db": float("inf"), "max_error_steps": 0}])
    assert _bar_width(exact, "sqnr-3") > _bar_width(exact, "sqnr-0") and "exact" in _texts(exact)
    assert 'fill="#b42318"' in _group(exact, "sqnr-1")                 # an exact layer is not the worst


def test_charts_on_one_page_do_not_share_ids() -> None:
    one = charts.error_along_graph(NODES)
    two = charts.error_along_graph(NODES[:3])
    assert not set(re.findall(r'id="([^"]+)"', one)) & set(re.findall(r'id="([^"]+)"', two))


def test_import_onnxsight_does_not_load_matplotlib() -> None:
    code = "import sys, onnxsight, onnxsight.reports, onnxsight.reports.charts; print('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


STEPS = [{"step": i, "max_logit_diff": d, "max_cache_diff": c, "divergence": v} for i, (d, c, v) in enumerate([
    (6e-8, 9e-8, None), (2e-7, 1e-7, None), (3e-6, 2e-7, "near-tie"), (2e-3, 0.6, "cache"), ("inf", "inf", "error")])]


def test_difference_per_step_is_built_from_the_steps() -> None:
    svg = charts.difference_per_step(STEPS, atol=1e-4)
    assert svg is not None
    _is_inline_svg(svg)
    ticks = _yticks(svg)
    dots = _marks(svg, "logits")
    assert len(dots) == len(STEPS) and [x for x, _ in dots] == sorted(x for x, _ in dots)
    for (_, y), row in zip(dots[:4], STEPS):
        assert y == pytest.approx(_y_of_log(ticks, row["max_logit_diff"]), abs=0.6), row
    assert dots[4][1] == pytest.approx(_y_of_log(ticks, 1.0), abs=0.6)  # a failed run: the top edge (1e0)
    tolerance = re.search(r'<path d="M [-\d.]+ ([-\d.]+)', _group(svg, "tolerance")).group(1)
    assert float(tolerance) == pytest.approx(_y_of_log(ticks, 1e-4), abs=0.6)
    assert _marks(svg, "near-ties") == [dots[2]]
    assert _marks(svg, "divergence") == [dots[3]] and "step 3" in _texts(svg)
    assert len(_marks(svg, "cache")) == len(STEPS)
    assert charts.difference_per_step([]) is None
