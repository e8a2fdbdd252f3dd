"""Charts for the reports and the zoo dashboard: matplotlib figures rendered as inline SVG.

Every function here is a pure function of records (plain numbers and strings: a run's verification
nodes, the zoo store's runs, quantization rows) and returns one ``<svg>`` element as a string, ready to
put into a self-contained HTML page: no network, no script, no ``<style>`` element or ``style=``
attribute (the pages' Content-Security-Policy allows only their own style, so the SVG's colours and
fonts are written as presentation attributes). Text stays text (``svg.fonttype: none``), so the page
can be searched and tests can read the ticks. matplotlib is imported inside the functions, never at
``import onnxsight``, and torch is never imported here.

The charts answer the questions their pages ask:

- ``error_along_graph``: how far each compared value is from PyTorch, in graph order, against the
  tolerance (log scale; failures and root causes marked).
- ``run_trend``: one number per stored zoo run (pass rate, export time), on a value range that
  starts at zero so noise is not drawn as a trend, with run dates on the x axis.
- ``difference_history``: one model's max abs difference over the stored runs, against its tolerance.
- ``layer_error_bars``: per-layer quantization error (SQNR in dB, max error in quantization steps).
- ``difference_per_step``: a verified generation's largest logit (and cache) difference at each step,
  against the tolerance, with near-ties and the first divergence marked.
"""

from __future__ import annotations

import hashlib
import html
import io
import math
import re
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

__all__ = ["difference_history", "difference_per_step", "error_along_graph", "layer_error_bars", "run_trend"]

BLUE, RED, GREY, GREEN = "#3b6fd8", "#b42318", "#8a94a6", "#1a7f37"
FLOOR = 1e-12  # differences below this are drawn on the floor of a log axis
MAX_DATE_TICKS = 8
ROOTS_NAMED = 3
DOTS_LIMIT = 200  # above this many values the line alone (a dot each would weigh the page down)

_RC = {
    "svg.fonttype": "none",          # text as <text>, not glyph paths
    "svg.hashsalt": "onnxsight",     # the same record gives the same SVG
    "text.parse_math": False,        # a "$" in a model's name is a dollar sign
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e4e7ec",
    "grid.linewidth": 0.6,
}


@contextmanager
def _figure(width: float, height: float, *, margins: dict[str, float] | None = None) -> Iterator[Any]:
    """A matplotlib Figure (no pyplot: no global figure state, no GUI backend).

    Laid out by matplotlib's constrained layout, or with fixed ``margins`` (fractions of the figure, as
    ``Figure.subplots_adjust`` takes them) for the small charts drawn once per model, where the layout
    pass would be a third of the time.
    """
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_RC):
        if margins is None:
            yield Figure(figsize=(width, height), layout="constrained")
            return
        figure = Figure(figsize=(width, height))
        figure.subplots_adjust(**margins)
        yield figure


def _log_axis(axes: Any, bottom: float, top: float) -> None:
    """A log y axis from ``bottom`` to ``top`` (powers of ten), ticks labelled ``1e-4`` (plain text)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    axes.set_yscale("log")
    axes.set_ylim(bottom, top * 1.5)
    low, high = round(math.log10(bottom)), round(math.log10(top))
    step = max(1, math.ceil((high - low) / 6))
    axes.yaxis.set_major_locator(FixedLocator([10.0 ** e for e in range(low, high + 1, step)]))
    axes.yaxis.set_minor_locator(NullLocator())
    axes.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"1e{round(math.log10(v))}"))


def _date_ticks(axes: Any, dates: Sequence[str]) -> None:
    """Runs at x = 0, 1, ...; at most ``MAX_DATE_TICKS`` of their dates as labels, the last one always."""
    positions = list(range(len(dates)))
    step = max(1, math.ceil(len(dates) / MAX_DATE_TICKS))
    ticks = positions[::step]
    if ticks[-1] != positions[-1]:  # the latest run is always labelled, in place of a label too close to it
        ticks = [*ticks[:-1], positions[-1]] if positions[-1] - ticks[-1] < step else [*ticks, positions[-1]]
    axes.set_xticks(ticks)
    tilted = len(ticks) > 3
    axes.set_xticklabels([dates[i] for i in ticks], rotation=30 if tilted else 0, ha="right" if tilted else "center",
                         fontsize=7)


def _number(value: Any) -> float | None:
    """A finite or infinite float, or None for what is not a number (text, None, NaN)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


_STYLE = re.compile(r'style="([^"]*)"')
_ID = re.compile(r'id="([^"]+)"')


def _attributes(match: re.Match[str]) -> str:
    """``style="fill: #fff; stroke: #000"`` as presentation attributes ``fill="#fff" stroke="#000"``."""
    pairs = [part.split(":", 1) for part in match.group(1).split(";") if ":" in part]
    return " ".join(f'{name.strip()}="{value.strip()}"' for name, value in pairs)


def _svg(figure: Any, title: str) -> str:
    """The figure as one inline ``<svg>`` element: no XML prolog, metadata, style or clashing ids."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None,
                                                   "Type": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    text = re.sub(r"<style[^>]*>.*?</style>\s*", "", text, flags=re.S)
    text = _STYLE.sub(_attributes, text)
    # Several charts share a page: every id gets this chart's own prefix (matplotlib's ids are
    # content hashes, so two charts could otherwise define the same id differently).
    prefix = "c" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:8] + "-"
    for name in set(_ID.findall(text)):
        text = text.replace(f'id="{name}"', f'id="{prefix}{name}"').replace(f"#{name}\"", f"#{prefix}{name}\"") \
                   .replace(f"#{name})", f"#{prefix}{name})")
    return text.replace("<svg ", f'<svg class="chart" role="img" aria-label="{html.escape(title)}" ', 1)


def error_along_graph(nodes: Sequence[Mapping[str, Any]], *, width: float = 9.0,
                      height: float = 2.8) -> str | None:
    """Max abs difference of every compared value in graph order (log scale), with the tolerance.

    ``nodes`` are the run record's verification nodes: ``index`` (the value's position in the graph's
    order), ``value``, ``max_abs_diff``, ``atol``, ``passed``, ``root_cause``. The absolute tolerance
    is drawn as a dashed step line (its value when every node has the same); values out of tolerance
    are red dots, root causes large red circles, non-finite differences sit on the top edge. None
    when no value has a numeric difference.
    """
    points = []
    for position, node in enumerate(nodes):
        diff = _number(node.get("max_abs_diff"))
        if diff is None:
            continue
        index = _number(node.get("index"))
        points.append((int(index) if index is not None else position, diff, node))
    if not points:
        return None
    finite = [abs(d) for _, d, _ in points if math.isfinite(d)]
    tolerances = [(x, _number(n.get("atol"))) for x, _, n in points if _number(n.get("atol")) is not None]
    top = max([*finite, *(t for _, t in tolerances)], default=1.0)
    top = 10 ** math.ceil(math.log10(max(top, FLOOR * 10)))
    bottom = max(min([*(max(d, FLOOR) for d in finite), top / 100]), FLOOR)
    bottom = 10 ** math.floor(math.log10(bottom))

    def y_of(diff: float) -> float:
        return top if not math.isfinite(diff) else min(max(abs(diff), bottom), top)

    from matplotlib.ticker import MaxNLocator

    with _figure(width, height) as figure:
        axes = figure.add_subplot()
        xs = [x for x, _, _ in points]
        axes.plot(xs, [y_of(d) for _, d, _ in points], color=BLUE, linewidth=1.2,
                  marker="." if len(points) <= DOTS_LIMIT else "", markersize=3,
                  label="max abs difference", gid="differences")
        if tolerances:
            levels = {t for _, t in tolerances}
            label = f"atol {levels.pop():g}" if len(levels) == 1 else "atol of each value"
            axes.step([x for x, _ in tolerances], [t for _, t in tolerances], where="mid", color=GREY,
                      linestyle="--", linewidth=1.0, label=label, gid="tolerance")
        failing = [(x, y_of(d)) for x, d, n in points
                   if n.get("passed") is False and not n.get("root_cause") and math.isfinite(d)]
        roots = [(x, y_of(d), str(n.get("value") or "")) for x, d, n in points if n.get("root_cause")]
        if failing:
            axes.plot(*zip(*failing), linestyle="none", marker="o", markersize=3.5, color=RED,
                      label="out of tolerance", gid="out-of-tolerance")
        nonfinite = [x for x, d, _ in points if not math.isfinite(d)]
        if nonfinite:
            axes.plot(nonfinite, [top] * len(nonfinite), linestyle="none", marker="^", markersize=6, color=RED,
                      label="NaN/Inf", gid="non-finite")
        if roots:
            axes.plot(*[[x for x, _, _ in roots], [y for _, y, _ in roots]], linestyle="none", marker="o",
                      markersize=9, markerfacecolor="none", markeredgecolor=RED, markeredgewidth=1.6,
                      label="root cause", gid="root-causes")
            for x, y, name in roots[:ROOTS_NAMED]:  # the first root causes named on the chart
                axes.annotate(name, (x, y), textcoords="offset points", xytext=(7, 4), color=RED, fontsize=8)
        _log_axis(axes, bottom, top)
        axes.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
        axes.set_xlabel(f"position in the graph (compared values in graph order, {len(points)} drawn)")
        axes.set_ylabel("max abs difference")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        figure.legend(loc="outside upper left", fontsize=8, frameon=False, ncols=5)
        return _svg(figure, "max abs difference of each compared value along the graph, with the tolerance")


def run_trend(runs: Sequence[Mapping[str, Any]], *, value: str, label: str, unit: str,
              percent: bool = False, width: float = 4.6, height: float = 2.1) -> str | None:
    """One number per stored zoo run (``runs``: oldest first, each with ``value`` and ``date``).

    A percentage is drawn on a fixed 0-100% axis (a constant 100% is a line at the top labelled so);
    any other value on an axis from zero to a little above its largest value, so an export time that
    moves from 4.1 s to 4.0 s reads as flat. Run dates label the x axis (at most ``MAX_DATE_TICKS``).
    None with fewer than two runs.
    """
    rows = [(str(run.get("date") or run.get("run_id") or i), _number(run.get(value))) for i, run in enumerate(runs)]
    rows = [(date, number) for date, number in rows if number is not None and math.isfinite(number)]
    if len(rows) < 2:
        return None
    scale = 100.0 if percent else 1.0
    ys = [number * scale for _, number in rows]
    with _figure(width, height) as figure:
        axes = figure.add_subplot()
        xs = list(range(len(rows)))
        axes.plot(xs, ys, color=BLUE, linewidth=1.5, marker="o", markersize=3.5, gid="trend")
        if percent:
            axes.set_ylim(0, 105)
            axes.set_yticks([0, 25, 50, 75, 100])
            axes.set_yticklabels(["0%", "25%", "50%", "75%", "100%"])
            if len(set(ys)) == 1:
                axes.annotate(f"{ys[0]:.0f}% in every run", (xs[-1], ys[-1]), textcoords="offset points",
                              xytext=(0, -12), ha="right", color=GREEN if ys[0] == 100 else RED, fontsize=8)
        else:
            axes.set_ylim(0, max(ys) * 1.2 or 1.0)
            axes.axhline(ys[-1], color=GREY, linewidth=0.6, linestyle=":")
        _date_ticks(axes, [date for date, _ in rows])
        axes.set_xlim(-0.4, len(rows) - 0.6)
        axes.set_ylabel(f"{label} ({unit})")
        axes.set_xlabel("run (start date)")
        return _svg(figure, f"{label} per stored run ({unit})")


def difference_history(rows: Sequence[Mapping[str, Any]], *, width: float = 4.6,
                       height: float = 2.0) -> str | None:
    """One model's max abs difference per stored run (``rows``: ``date``, ``max_abs_diff``, ``atol``,
    ``status``), log scale, with its tolerance dashed and failed runs in red. None without two
    numeric differences."""
    points = [(str(r.get("date")), _number(r.get("max_abs_diff")), _number(r.get("atol")), r.get("status"))
              for r in rows]
    drawn = [(i, p) for i, p in enumerate(points) if p[1] is not None]
    if len(drawn) < 2:
        return None
    values = [abs(p[1]) for _, p in drawn if math.isfinite(p[1])] + [p[2] for _, p in drawn if p[2]]
    top = 10 ** math.ceil(math.log10(max(max(values, default=1.0), FLOOR * 10)))
    bottom = 10 ** math.floor(math.log10(max(min([*(max(v, FLOOR) for v in values), top / 100]), FLOOR)))
    with _figure(width, height, margins={"left": 0.2, "right": 0.97, "top": 0.86, "bottom": 0.34}) as figure:
        axes = figure.add_subplot()
        xs = [i for i, _ in drawn]
        ys = [top if not math.isfinite(p[1]) else min(max(abs(p[1]), bottom), top) for _, p in drawn]
        axes.plot(xs, ys, color=BLUE, linewidth=1.2, marker="o", markersize=3, label="max abs difference",
                  gid="differences")
        tolerance = [(i, p[2]) for i, p in drawn if p[2]]
        if tolerance:
            axes.step(*zip(*tolerance), where="mid", color=GREY, linestyle="--", linewidth=1.0,
                      label="atol" if len({t for _, t in tolerance}) > 1 else f"atol {tolerance[0][1]:g}")
        failed = [(x, y) for x, y, (_, p) in zip(xs, ys, drawn) if p[3] not in (None, "passed")]
        if failed:
            axes.plot(*zip(*failed), linestyle="none", marker="o", markersize=5, color=RED, label="not passed",
                      gid="not-passed")
        _log_axis(axes, bottom, top)
        _date_ticks(axes, [point[0] for point in points])
        axes.set_xlim(-0.4, len(points) - 0.6)
        axes.set_ylabel("max abs difference")
        axes.legend(loc="lower left", bbox_to_anchor=(0, 1), fontsize=7, frameon=False, ncols=3, borderaxespad=0.2)
        return _svg(figure, "max abs difference per stored run, with the tolerance")


def layer_error_bars(rows: Sequence[Mapping[str, Any]], *, width: float = 8.0) -> str | None:
    """Per-layer quantization error: SQNR (dB, higher is better) and max error in quantization steps.

    ``rows``: ``layer``, ``sqnr_db``, ``max_error_steps`` (either number may be missing), one per
    layer in model order. Two horizontal bar panels sharing the layer axis, the worst layer by SQNR
    in red. None when no row has a number.
    """
    table = [(str(r.get("layer")), _number(r.get("sqnr_db")), _number(r.get("max_error_steps"))) for r in rows]
    table = [row for row in table if row[1] is not None or row[2] is not None]
    if not table:
        return None
    height = 1.0 + 0.22 * len(table)
    with _figure(width, height) as figure:
        sqnr_axes, steps_axes = figure.subplots(1, 2, sharey=True)
        positions = list(range(len(table)))
        finite = [row[1] for row in table if row[1] is not None and math.isfinite(row[1])]
        exact = max(max(finite, default=0.0) * 1.1, 1.0)  # an infinite SQNR (no error at all): the longest bar
        sqnr = [0.0 if row[1] is None else row[1] if math.isfinite(row[1]) else exact for row in table]
        worst = min((i for i in positions if table[i][1] is not None), key=lambda i: sqnr[i], default=None)
        bars = sqnr_axes.barh(positions, sqnr, color=[RED if i == worst else BLUE for i in positions], height=0.7)
        sqnr_axes.set_xlabel("SQNR (dB, higher is better)")
        steps = steps_axes.barh(positions, [row[2] or 0.0 for row in table], color=GREY, height=0.7)
        for index, (sqnr_bar, steps_bar) in enumerate(zip(bars, steps)):
            sqnr_bar.set_gid(f"sqnr-{index}")
            steps_bar.set_gid(f"steps-{index}")
            if table[index][1] is not None and math.isinf(table[index][1]):
                sqnr_axes.annotate("exact", (sqnr[index], index), textcoords="offset points", xytext=(3, -3),
                                   fontsize=7, color=GREEN)
        steps_axes.set_xlabel("max error (quantization steps)")
        for axes in (sqnr_axes, steps_axes):
            axes.grid(axis="y", visible=False)
        sqnr_axes.set_yticks(positions)
        sqnr_axes.set_yticklabels([row[0] for row in table], fontsize=7)
        sqnr_axes.invert_yaxis()
        return _svg(figure, "per-layer quantization error: SQNR in dB and max error in quantization steps")


def difference_per_step(steps: Sequence[Mapping[str, Any]], *, atol: float | None = None, width: float = 8.0,
                        height: float = 2.6) -> str | None:
    """A generation's largest logit difference per step (log scale), the largest cache difference in grey,
    the absolute tolerance dashed; a step whose token differs at a near-tie is an orange triangle, the first
    real divergence a large red circle. ``steps`` are the record's step rows (``step``, ``max_logit_diff``,
    ``max_cache_diff``, ``divergence``). None when no step has a numeric difference.
    """
    logits = [(int(r["step"]), _number(r.get("max_logit_diff"))) for r in steps if _number(r.get("step")) is not None]
    logits = [(x, d) for x, d in logits if d is not None]
    cache = [(int(r["step"]), _number(r.get("max_cache_diff"))) for r in steps]
    cache = [(x, d) for x, d in cache if d is not None]
    if not logits:
        return None
    finite = [abs(d) for _, d in logits + cache if math.isfinite(d)] + ([atol] if atol else [])
    top = 10 ** math.ceil(math.log10(max(max(finite, default=1.0), FLOOR * 10)))
    bottom = 10 ** math.floor(math.log10(max(min([*(max(d, FLOOR) for d in finite), top / 100]), FLOOR)))

    def y_of(diff: float) -> float:
        return top if not math.isfinite(diff) else min(max(abs(diff), bottom), top)

    from matplotlib.ticker import MaxNLocator

    with _figure(width, height) as figure:
        axes = figure.add_subplot()
        axes.plot([x for x, _ in logits], [y_of(d) for _, d in logits], color=BLUE, linewidth=1.4, marker="o",
                  markersize=3, label="max logit difference", gid="logits")
        if cache:
            axes.plot([x for x, _ in cache], [y_of(d) for _, d in cache], color=GREY, linewidth=1.0, marker=".",
                      markersize=3, label="max cache difference", gid="cache")
        if atol:
            axes.axhline(atol, color=GREY, linestyle="--", linewidth=1.0, label=f"atol {atol:g}", gid="tolerance")
        by_step = dict(logits)
        ties = [x for x in (int(r["step"]) for r in steps if r.get("divergence") == "near-tie") if x in by_step]
        if ties:
            axes.plot(ties, [y_of(by_step[x]) for x in ties], linestyle="none", marker="^", markersize=7,
                      color="#d97706", label="token differs at a near-tie", gid="near-ties")
        first = next((int(r["step"]) for r in steps if r.get("divergence") in ("logits", "cache", "tokens", "error")),
                     None)
        if first is not None:
            y = y_of(by_step.get(first, float("inf")))
            axes.plot([first], [y], linestyle="none", marker="o", markersize=10, markerfacecolor="none",
                      markeredgecolor=RED, markeredgewidth=1.6, label="first divergence", gid="divergence")
            axes.annotate(f"step {first}", (first, y), textcoords="offset points", xytext=(7, 4), color=RED,
                          fontsize=8)
        _log_axis(axes, bottom, top)
        xs = [x for x, _ in logits]
        axes.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlabel("generation step (0: the prompt)")
        axes.set_ylabel("max abs difference")
        figure.legend(loc="outside upper left", fontsize=8, frameon=False, ncols=5)
        return _svg(figure, "largest logit and cache difference per generation step, with the tolerance")
