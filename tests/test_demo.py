"""`make demo`: every case ends as the demo says it will, with its three report files."""

from __future__ import annotations

import os

from onnxsight import demo


def test_every_demo_case_ends_as_expected_with_its_reports(tmp_path, capsys) -> None:
    assert demo.main(["--out", str(tmp_path), "--no-zoo"]) == 0
    printed = capsys.readouterr().out
    assert "UNEXPECTED" not in printed
    statuses = {case.expect for case in demo.cases()}
    assert statuses == {"ok", "export failed", "verification failed"}  # success and both failure kinds
    for case in demo.cases():
        files = os.listdir(tmp_path / case.name)
        for suffix in ("_report.md", "_report.html", ".sarif"):
            matching = [f for f in files if f.endswith(suffix)]
            assert len(matching) == 1, (case.name, suffix, files)
            assert str(tmp_path / case.name / matching[0]) in printed  # the demo prints every report path
