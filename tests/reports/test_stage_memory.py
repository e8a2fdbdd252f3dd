"""Time and memory per stage: recorded by ExportRecord, carried by the run record, shown in both reports."""

from __future__ import annotations

import json

import pytest
import torch

import onnxsight
from onnxsight.exporter._record import ExportRecord
from onnxsight.pipeline._run_record import build_run_record
from onnxsight.reports import html, markdown

MB = 1024**2


def _hold(record: ExportRecord, megabytes: int, *, fail: bool) -> torch.Tensor | None:
    kept = None
    try:
        with record.stage("translate"):
            kept = torch.ones(megabytes * MB // 4)  # written, so its pages are resident
            if fail:
                raise RuntimeError("boom")
    except RuntimeError:
        pass
    return kept


@pytest.mark.parametrize("fail", [False, True], ids=["ok", "failed"])
def test_stage_records_peak_and_final_rss(fail: bool) -> None:
    record = ExportRecord()
    with record.stage("capture"):
        pass
    kept = _hold(record, 64, fail=fail)
    before, stage = record.stages
    assert stage.status == ("failed" if fail else "ok")
    assert stage.rss_after - before.rss_after >= 60 * MB  # the 64 MB held past the stage's end
    assert stage.peak_rss >= stage.rss_after >= 60 * MB
    assert record.to_dict()["stages"][1]["peak_rss"] == stage.peak_rss
    del kept


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> object:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).eval()
    path = tmp_path_factory.mktemp("stage_memory") / "m.onnx"
    return onnxsight.export(model, (torch.randn(2, 4),), path, verify=True)


@pytest.mark.parametrize("name", ["capture", "decompose", "translate", "check", "save", "accuracy"])
def test_every_stage_carries_memory_in_the_run_record(exported: object, name: str) -> None:
    run = build_run_record(record=exported.record, program=exported)
    stages = {s["name"]: s for s in json.loads(run.to_json())["stages"]}
    stage = stages[name]
    assert stage["status"] == ("skipped" if name == "decompose" else "ok")  # already core ATen
    assert stage["seconds"] > 0
    assert isinstance(stage["peak_rss"], int) and isinstance(stage["rss_after"], int)
    assert stage["peak_rss"] >= stage["rss_after"] > 10 * MB  # a Python process with torch loaded


@pytest.mark.parametrize("render", [markdown.render, html.render], ids=["markdown", "html"])
def test_stage_table_shows_time_and_memory(exported: object, render) -> None:
    run = build_run_record(record=exported.record, program=exported)
    text = render(run)
    for column in ("time", "peak RSS", "RSS after"):
        assert column in text
    capture = next(s for s in run.stages if s["name"] == "capture")
    mb = f"{capture['rss_after'] / MB:.1f} MB"
    assert mb in text


def test_old_run_records_without_memory_still_render() -> None:
    from onnxsight.reports._record import RunRecord

    run = RunRecord(model="m", created="now", kind="export",
                    stages=[{"name": "capture", "status": "ok", "seconds": 0.5, "detail": ""}])
    assert "| capture | ok | 500 ms |  |  |  |" in markdown.render(run)
    assert "peak RSS" in html.render(run)
