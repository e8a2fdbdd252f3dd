"""Regressions against a stored baseline, baselineState on every SARIF result, --fail-on exit codes."""

from __future__ import annotations

import json

import pytest

from onnxsight.zoo import ModelResult, RegressionPolicy, ResultsStore, RunOptions
from onnxsight.zoo._baseline import apply_baseline_state, compare
from onnxsight.zoo._runner import exit_code, finish
from tests.sarif_check import check_sarif_file

SOURCE = {"file": "/models/zoo.py", "line": 7}


def _result(name: str, status: str = "passed", *, diff: float | None = 1e-7, export: float = 2.0,
            diagnostics: list | None = None) -> ModelResult:
    return ModelResult(name=name, suite="nightly", status=status, stage="done" if status == "passed" else "export",
                       max_abs_diff=diff, timings={"export": export}, source=dict(SOURCE),
                       diagnostics=list(diagnostics or []))


def _unsupported(op: str) -> dict:
    return {"rule": "OPS002", "level": "error", "message": f"operator {op} has no ONNX translation in onnxsight",
            "fields": {"op": op}, "location": {"file": "/models/zoo.py", "line": 30, "function": "forward",
                                               "code": None}, "related": [], "stack": [], "module_path": None,
            "properties": {"fx_node": "conv"}}


@pytest.mark.parametrize("before, after, kinds", [
    (_result("m"), _result("m", "failed", diff=None), ["newly-failing"]),
    (_result("m", "failed", diff=None), _result("m"), ["newly-passing"]),
    (_result("m", diff=1e-6), _result("m", diff=5e-4), ["accuracy-worse"]),
    (_result("m", diff=0.0), _result("m", diff=5e-7), []),          # below the accuracy floor
    (_result("m", export=2.0), _result("m", export=5.0), ["slower"]),
    (_result("m", export=0.1), _result("m", export=0.5), []),       # tiny exports: noise, not regressions
    (_result("m"), _result("m"), []),
])
def test_compare_kinds(before: ModelResult, after: ModelResult, kinds: list[str]) -> None:
    changes = compare([after], [before], RegressionPolicy())
    assert [c["kind"] for c in changes] == kinds
    regressions = [d for d in after.diagnostics if d["rule"] == "ZOO004"]
    assert len(regressions) == sum(c["regression"] for c in changes)


def test_new_and_missing_models() -> None:
    changes = compare([_result("kept"), _result("added")], [_result("kept"), _result("gone")])
    assert {(c["model"], c["kind"]) for c in changes} == {("added", "new-model"), ("gone", "missing")}


def _log(*results: dict) -> dict:
    return {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "onnxsight", "rules": [{"id": "OPS002"}]}},
                                          "results": list(results)}]}


def _sarif_result(model: str, line: int, text: str) -> dict:
    return {"ruleId": "OPS002", "ruleIndex": 0, "level": "error", "message": {"text": text},
            "properties": {"model": model},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": "m.py"}, "region": {"startLine": line}}}]}


def test_baseline_state_on_every_result() -> None:
    baseline = _log(_sarif_result("a", 1, "same"), _sarif_result("a", 2, "old text"), _sarif_result("a", 3, "fixed"),
                    _sarif_result("other", 1, "not run tonight"))
    current = _log(_sarif_result("a", 1, "same"), _sarif_result("a", 2, "new text"), _sarif_result("a", 9, "fresh"))
    states = {(r["properties"]["model"], r["locations"][0]["physicalLocation"]["region"]["startLine"]):
              r["baselineState"] for r in apply_baseline_state(current, baseline, ["a"])["runs"][0]["results"]}
    assert states == {("a", 1): "unchanged", ("a", 2): "updated", ("a", 9): "new", ("a", 3): "absent"}


def test_without_baseline_everything_is_new() -> None:
    log = apply_baseline_state(_log(_sarif_result("a", 1, "x")), None)
    assert [r["baselineState"] for r in log["runs"][0]["results"]] == ["new"]


def test_regression_against_stored_baseline(tmp_path) -> None:
    store = ResultsStore(str(tmp_path / "store.sqlite"))
    night1 = RunOptions(suites=("nightly",), out_dir=str(tmp_path / "night1"), fail_on="never")
    (tmp_path / "night1").mkdir()
    store.begin_run("night1", out_dir=night1.out_dir, suites=["nightly"])
    first = [_result("bert"), _result("gpt2", diff=1e-6), _result("t5", "failed", diff=None,
                                                                   diagnostics=[_unsupported("aten.foo")])]
    store.add_results("night1", first)
    done1 = finish("night1", night1, first, store, skipped=[], interrupted=False)
    assert done1.exit_code == 0 and done1.baseline is None

    night2 = RunOptions(suites=("nightly",), out_dir=str(tmp_path / "night2"), baseline="auto")
    (tmp_path / "night2").mkdir()
    store.begin_run("night2", out_dir=night2.out_dir, suites=["nightly"])
    second = [_result("bert", "failed", diff=None, diagnostics=[_unsupported("aten.bar")]),
              _result("gpt2", diff=1e-3), _result("t5", "failed", diff=None, diagnostics=[_unsupported("aten.foo")])]
    store.add_results("night2", second)
    done2 = finish("night2", night2, second, store, skipped=[], interrupted=False)

    assert done2.baseline == "night1"
    assert {(c["model"], c["kind"]) for c in done2.changes} == {("bert", "newly-failing"), ("gpt2", "accuracy-worse")}
    assert done2.exit_code == 1  # --fail-on new-errors (the default)
    log = json.loads(open(done2.paths["merged_sarif"], encoding="utf-8").read())
    states = {(r["properties"]["model"], r["ruleId"]): r["baselineState"] for run in log["runs"] for r in run["results"]}
    assert states[("t5", "OPS002")] == "unchanged"
    assert states[("bert", "OPS002")] == "new" and states[("bert", "ZOO004")] == "new"
    assert states[("gpt2", "ZOO004")] == "new"
    assert all("baselineState" in r for run in log["runs"] for r in run["results"])
    html = open(done2.paths["dashboard"], encoding="utf-8").read()
    assert "newly-failing" in html and "<svg" in html  # changes at the top, trends from the store
    assert "newly-failing" in open(done2.paths["summary"], encoding="utf-8").read()


@pytest.mark.parametrize("fail_on, has_baseline, changes, expected", [
    ("never", False, [], 0),
    ("any-error", True, [], 1),
    ("new-errors", False, [], 1),                       # no baseline: every failure is new
    ("new-errors", True, [], 0),                        # failing before and now: not new
    ("new-errors", True, [{"model": "m", "kind": "newly-failing", "regression": True}], 1),
    ("new-errors", True, [{"model": "m", "kind": "new-model", "regression": False}], 1),
])
def test_exit_codes(fail_on: str, has_baseline: bool, changes: list, expected: int) -> None:
    results = [_result("m", "failed"), _result("n")]
    assert exit_code(results, changes, fail_on=fail_on, has_baseline=has_baseline) == expected


def test_merged_sarif_is_valid(tmp_path) -> None:
    store = ResultsStore(str(tmp_path / "store.sqlite"))
    options = RunOptions(suites=("nightly",), out_dir=str(tmp_path), fail_on="never")
    store.begin_run("r", out_dir=str(tmp_path), suites=["nightly"])
    results = [_result("a", "failed", diagnostics=[_unsupported("aten.x")]), _result("b")]
    done = finish("r", options, results, store, skipped=[], interrupted=False)
    check_sarif_file(done.paths["merged_sarif"], "zoo_baseline_merged")


@pytest.mark.parametrize("history, now, expected", [
    ([("a", "smoke"), ("b", "tricky")], "smoke", "a"),                    # the latest run of other suites is skipped
    ([("a", "smoke,tricky"), ("b", "smoke")], "tricky,smoke", "a"),       # same suites in another order
    ([("a", "smoke"), ("b", "smoke,tricky")], "smoke", "a"),              # a superset is other suites
    ([("a", "tricky")], "smoke", None),                                   # none: no baseline at all
    ([("a", "smoke"), ("b", "smoke")], "smoke", "b"),                     # the latest of several
    ([("a", "smoke", 0), ("b", "tricky")], "smoke", None),                # a run without results is no baseline
], ids=["other-suites-later", "order", "superset", "none", "latest", "empty-run"])
def test_baseline_auto_compares_the_same_suites(tmp_path, history: list, now: str, expected: str | None) -> None:
    from onnxsight.zoo._runner import _load_baseline

    store = ResultsStore(str(tmp_path / "store.sqlite"))
    for run_id, suites, *count in history:
        store.begin_run(run_id, out_dir=str(tmp_path / run_id), suites=suites.split(","))
        store.add_results(run_id, [_result("m")] * (count[0] if count else 1))
    store.begin_run("now", out_dir=str(tmp_path / "now"), suites=now.split(","))
    assert _load_baseline("auto", store, "now")[0] == expected
