"""Crashing, hanging and out-of-memory models are recorded and the job goes on."""

from __future__ import annotations

import json
import os

import pytest

from onnxsight.zoo import RunOptions, run

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTY = os.path.join(HERE, "suites", "faulty.py")
TIMEOUT_S = 45.0          # far above a tiny model's run, far below the hanging model's sleep
MEMORY_LIMIT_MB = 1200.0  # torch + onnxsight + onnxruntime stay well below it


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("zoo") / "faulty"
    return run(RunOptions(suites=(FAULTY,), out_dir=str(out), jobs=2, timeout=TIMEOUT_S,
                          memory_limit_mb=MEMORY_LIMIT_MB, fail_on="any-error"), progress=False)


def _by_name(outcome) -> dict:
    return {r.name: r for r in outcome.results}


@pytest.mark.parametrize("model, status, stage, error_part", [
    ("ok_linear", "passed", "done", None),
    ("aborts", "crashed", "build", "SIGABRT"),
    ("segfaults", "crashed", "build", "SIGSEGV"),
    ("hangs", "timeout", "build", "no result after"),
    ("eats_memory", "oom", "build", "exceeded the limit"),
    ("raises", "error", "build", "ValueError"),
])
def test_each_model_recorded(outcome, model: str, status: str, stage: str, error_part: str | None) -> None:
    result = _by_name(outcome)[model]
    assert (result.status, result.stage) == (status, stage)
    if error_part:
        assert error_part in result.error


def test_every_model_finished_despite_crashes(outcome) -> None:
    assert sorted(_by_name(outcome)) == ["aborts", "eats_memory", "hangs", "ok_linear", "raises", "segfaults"]
    assert not outcome.interrupted
    assert outcome.exit_code == 1  # --fail-on any-error


def test_crash_keeps_stderr_tail(outcome) -> None:
    results = _by_name(outcome)
    assert "Fatal Python error" in results["segfaults"].stderr_tail  # faulthandler's dump
    assert "_segfault" in results["segfaults"].stderr_tail
    assert "Aborted" in results["aborts"].stderr_tail or "_abort" in results["aborts"].stderr_tail
    assert "ValueError" in results["raises"].stderr_tail


@pytest.mark.parametrize("model, rule", [("aborts", "ZOO001"), ("segfaults", "ZOO001"), ("hangs", "ZOO002"),
                                         ("eats_memory", "ZOO003")])
def test_zoo_diagnostics_point_at_the_model(outcome, model: str, rule: str) -> None:
    result = _by_name(outcome)[model]
    [diag] = [d for d in result.diagnostics if d["rule"] == rule]
    assert diag["location"]["file"] == FAULTY
    assert model in diag["message"] and "build" in diag["message"]


def test_oom_model_was_stopped_near_the_limit(outcome) -> None:
    peak = _by_name(outcome)["eats_memory"].peak_mb
    assert MEMORY_LIMIT_MB < peak < 2 * MEMORY_LIMIT_MB


def test_outputs_written(outcome) -> None:
    with open(outcome.paths["merged_sarif"], encoding="utf-8") as handle:
        log = json.load(handle)
    results = [r for run in log["runs"] for r in run["results"]]
    assert {"ZOO001", "ZOO002", "ZOO003"} <= {r["ruleId"] for r in results}
    assert all(r["baselineState"] == "new" for r in results)
    for model in ("aborts", "ok_linear"):
        assert os.path.exists(os.path.join(outcome.out_dir, "models", "faulty", model, "model.sarif"))
    html = open(outcome.paths["dashboard"], encoding="utf-8").read()
    assert "eats_memory" in html and "&lt;b&gt;here&lt;/b&gt;" in html and "<b>here</b>" not in html
