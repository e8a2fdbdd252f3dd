"""What a user's console shows during an export: onnxsight's findings, once each; torch's output only when asked.

torch prints graph dumps ("class GraphModule(torch.nn.Module): def forward(self, L_flat_args_0_: ...")
and advice ("Explanation: Detected data-dependent branching ...") when a capture fails; onnxsight keeps them
in the run record (``record.attempts[i].log``/``.error``) unless ``verbose=True`` or ``TORCH_LOGS`` asks.
"""

from __future__ import annotations

import logging
import re

import pytest
import torch

import onnxsight
from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, Location

TORCH_OUTPUT = re.compile(r"GraphModule|def forward\(|Explanation:|^[IWE]\d{4} |torch/", re.M)


class Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent: both capture strategies fail
            return x * 2
        return x - 1


def _failing_export(**options) -> onnxsight.ExportError:
    with pytest.raises(onnxsight.ExportError) as failure:
        onnxsight.export(Branchy(), (torch.randn(3, 4),), **options)
    return failure.value


def _onnxsight_lines(caplog) -> str:
    # pytest's logging plugin holds the records a plain process prints on stderr (logging's last resort)
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "onnxsight")


def test_a_failed_export_prints_onnxsights_message_and_nothing_from_torch(capfd, caplog, monkeypatch) -> None:
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    error = _failing_export()
    out, err = capfd.readouterr()
    assert not TORCH_OUTPUT.search(out + err), out + err
    printed = _onnxsight_lines(caplog)
    assert re.search(r"test_console\.py:\d+: error CAP002 ", printed) and not TORCH_OUTPUT.search(printed), printed
    assert "CAP002" in str(error) and not TORCH_OUTPUT.search(str(error))
    # torch's own words are kept for the record and the report
    attempts = error.record.attempts
    assert any(re.search(r"GraphModule|def forward\(", line) for a in attempts for line in a.log)
    assert any("Explanation:" in (a.error or "") for a in attempts)


def test_verbose_shows_torchs_output(capfd, caplog, monkeypatch) -> None:
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    _failing_export(verbose=True)
    assert "def forward(" in capfd.readouterr().err
    assert "error CAP002 " in _onnxsight_lines(caplog)


def test_torch_logs_is_the_user_asking(capfd, monkeypatch) -> None:
    monkeypatch.setenv("TORCH_LOGS", "dynamic")
    assert DiagnosticContext().verbose and not DiagnosticContext(verbose=False).verbose
    monkeypatch.delenv("TORCH_LOGS")
    assert not DiagnosticContext().verbose


def test_the_same_diagnostic_is_logged_once_with_a_count(caplog) -> None:
    ctx = DiagnosticContext()
    here = Location("model.py", 12)
    with caplog.at_level(logging.INFO, logger="onnxsight"), ctx.logging_once():
        for _ in range(3):
            ctx.emit(rules.INTERNAL_ERROR, location=here, stage="translate", error_type="E", error="same")
        ctx.emit(rules.INTERNAL_ERROR, location=Location("model.py", 13), stage="translate", error_type="E",
                 error="same")
        assert not caplog.records  # nothing before the block ends
    assert [r.getMessage().endswith("(3 times)") for r in caplog.records] == [True, False]
    assert len(ctx.diagnostics) == 4  # every finding stays in the record
    error = onnxsight.ExportError("failed", diagnostics=ctx.diagnostics)
    assert str(error).count("model.py:12") == 1 and "(3 times)" in str(error)


def test_a_plain_process_sees_one_line_per_finding(tmp_path) -> None:
    """Outside pytest: what `python script.py` prints (logging's last resort writes onnxsight's records)."""
    import os
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text("import torch, onnxsight\n"
                      "from tests.exporter.test_console import Branchy\n"
                      "try:\n"
                      "    onnxsight.export(Branchy(), (torch.randn(3, 4),))\n"
                      "except onnxsight.ExportError as error:\n"
                      "    print(error)\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"}
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=root,
                          timeout=300)
    lines = [line for line in done.stderr.splitlines() if "torchao" not in line and "_pytree.py" not in line
             and "triton" not in line]  # other packages' import-time noise, not the export's
    assert [re.search(r"(warning|error) (CAP\d+)", line).groups() for line in lines] == [
        ("warning", "CAP001"), ("warning", "CAP001"), ("error", "CAP002")], done.stderr
    assert done.stdout.startswith("torch.export could not capture Branchy\n  CAP002 ")
    assert not TORCH_OUTPUT.search(done.stdout + "\n".join(lines))
