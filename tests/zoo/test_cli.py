"""``onnxsight zoo`` command line: registration, options, report of an existing run folder."""

from __future__ import annotations

import argparse

import pytest

from onnxsight.zoo import ModelResult, ResultsStore, RunOptions
from onnxsight.zoo._runner import finish
from onnxsight.zoo.cli import main, register


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnxsight")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def test_run_options_parse() -> None:
    args = _parser().parse_args(["zoo", "run", "--suite", "smoke,tricky", "--suite", "x.py", "--out", "o",
                                 "--jobs", "3", "--timeout", "60", "--memory-limit", "2048", "--providers",
                                 "CUDAExecutionProvider", "CPUExecutionProvider", "--per-node", "--baseline", "auto",
                                 "--executor", "ray", "--ray-address", "ray://head:10001", "--filter", "tag:text",
                                 "--resume", "--store", "s.sqlite", "--fail-on", "never"])
    assert args.func.__name__ == "cmd_run"
    assert (args.jobs, args.timeout, args.memory_limit, args.executor, args.fail_on) == (3, 60.0, 2048.0, "ray",
                                                                                          "never")
    assert args.suite == ["smoke,tricky", "x.py"] and args.providers[0] == "CUDAExecutionProvider"


def test_bad_fail_on_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(["zoo", "run", "--suite", "smoke", "--out", "o", "--fail-on", "sometimes"])
    assert info.value.code == 2


def test_run_without_suite_is_a_usage_error(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "run", "--out", str(tmp_path / "o"), "--quiet"]) == 3
    assert "no suite given" in capsys.readouterr().err


def test_report_rewrites_the_dashboard(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "night"
    out.mkdir()
    store = ResultsStore(str(tmp_path / "onnxsight-zoo.sqlite"))
    store.begin_run("night", out_dir=str(out), suites=["s"])
    results = [ModelResult(name="m", suite="s", status="passed", stage="done")]
    store.add_results("night", results)
    finish("night", RunOptions(suites=("s",), out_dir=str(out)), results, store, skipped=[], interrupted=False)
    (out / "dashboard.html").unlink()
    assert main(["zoo", "report", str(out)]) == 0
    assert "dashboard:" in capsys.readouterr().out
    page = (out / "dashboard.html").read_text()
    assert 'title="history over the stored runs">m</a><div' in page and 'id="history-0"' in page
    assert main(["zoo", "report", str(tmp_path / "empty")]) == 3


CUSTOM_SUITE = '''
import torch
from onnxsight.zoo import ModelSpec

@torch.library.custom_op("zoo_cli_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2

@twice.register_fake
def _(x):
    return torch.empty_like(x)

class Twice(torch.nn.Module):
    def forward(self, x):
        return torch.ops.zoo_cli_test.twice(x)

def twice_onnx(b, x):
    return b.op("Add", x, x)

def build():
    return Twice(), (torch.randn(2, 3),)

def suite():
    return [ModelSpec("with_translation", build, custom_translations={"zoo_cli_test::twice": twice_onnx}),
            ModelSpec("without_translation", build)]
'''


def test_model_spec_custom_translations_reach_the_export(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "custom_suite.py"
    suite.write_text(CUSTOM_SUITE)
    code = main(["zoo", "run", "--suite", str(suite), "--out", str(tmp_path / "out"), "--jobs", "1",
                 "--fail-on", "never", "--quiet"])
    assert code == 0, capsys.readouterr().err
    store = ResultsStore(str(tmp_path / "onnxsight-zoo.sqlite"))
    status = dict(store.results()[["model", "status"]].itertuples(index=False))
    assert status == {"with_translation": "passed", "without_translation": "failed"}
