"""Every bad command line ends with its exit code and one clear message, never a traceback.

Each row: the arguments, the exit code, and words stderr must contain. The
model file, a translations module and a folder are fixtures in tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from onnxsight import _cli_inputs, cli

MODEL = textwrap.dedent('''
    import torch

    class Net(torch.nn.Module):
        def forward(self, x, y):
            return torch.relu(x) + y

    def build():
        return Net(), (torch.randn(2, 3, 4), torch.randn(2, 3, 4))

    class Accumulate(torch.nn.Module):
        def forward(self, x, y):
            x.add_(y)
            return x * y

    def same_twice():
        x = torch.randn(2, 3, 4)
        return Accumulate(), (x, x)

    def relu_translation(b, x):
        return b.op("Relu", x)

    TRANSLATIONS = {"aten::relu": relu_translation}
    BARE = {"relu": relu_translation}
    MISSPELT = {"aten::reluu": relu_translation}
    NOT_A_DICT = 3
''')


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad_cli")
    (root / "model.py").write_text(MODEL)
    (root / "folder").mkdir()
    return root


# (id, argv with {d} for the fixture folder, exit code, words in stderr)
BAD = [
    ("opset-out-of-range", "export {d}/model.py -o {d}/m.onnx --opset 99", 3,
     ["opset 99 is not supported", "15..25"]),
    ("opset-not-a-number", "export {d}/model.py -o {d}/m.onnx --opset eighteen", 3, ["'eighteen' is not an opset"]),
    ("verify-opset-out-of-range", "verify {d}/model.py --opset 5", 3, ["opset 5 is not supported"]),
    ("dynamic-malformed", "export {d}/model.py -o {d}/m.onnx --dynamic x", 3, ["'x' is not NAME:AXIS[:DIMNAME]"]),
    ("dynamic-axis-not-int", "export {d}/model.py -o {d}/m.onnx --dynamic x:first", 3, ["is not NAME:AXIS"]),
    ("dynamic-with-dynamic-batch", "export {d}/model.py -o {d}/m.onnx --dynamic x:0 --dynamic-batch", 3,
     ["not allowed with"]),
    ("dynamic-unknown-input", "export {d}/model.py -o {d}/m.onnx --dynamic nope:0", 3,
     ["ARG003", "--dynamic names 'nope'", "['x', 'y']"]),
    ("dynamic-axis-out-of-range", "export {d}/model.py -o {d}/m.onnx --dynamic y:7:b", 3,
     ["ARG003", "axis 7 of input y does not exist", "rank 3"]),
    ("input-names-empty-entry", "export {d}/model.py -o {d}/m.onnx --input-names a,,b", 3,
     ["give comma-separated names"]),
    ("translations-no-attr", "export {d}/model.py -o {d}/m.onnx --translations {d}/model.py:MISSING", 3,
     ["has no attribute 'MISSING'"]),
    ("translations-not-a-dict", "export {d}/model.py -o {d}/m.onnx --translations {d}/model.py:NOT_A_DICT", 3,
     ["must be a dict", "got int"]),
    ("translations-no-module", "export {d}/model.py -o {d}/m.onnx --translations no_such_module_xyz:T", 3,
     ["cannot import 'no_such_module_xyz'"]),
    ("translations-malformed", "export {d}/model.py -o {d}/m.onnx --translations just_a_module", 3,
     ["expected MODULE:ATTR"]),
    ("translations-bare-key", "export {d}/model.py -o {d}/m.onnx --translations {d}/model.py:BARE", 3,
     ["ARG010", "'relu' has no namespace"]),
    ("translations-misspelt", "export {d}/model.py -o {d}/m.onnx --translations {d}/model.py:MISSPELT", 3,
     ["ARG011", "no operator 'reluu'"]),
    ("output-is-a-folder", "export {d}/model.py -o {d}/folder", 3, ["ARG008", "it is a folder"]),
    ("same-tensor-twice", "export {d}/model.py:same_twice -o {d}/m.onnx", 3, ["ARG012", "as x and as y", "writes to x in place"]),
    ("no-function", "export {d}/model.py:nothing -o {d}/m.onnx", 3, ["has no function 'nothing'"]),
    ("verify-onnx-with-export-flag", "verify {d}/m.onnx --dynamic x:0", 3, ["applies to FILE.py"]),
    ("verify-not-onnx", "verify {d}/model.py.txt", 3, ["no such file"]),
]


def _argv(template: str, root: Path) -> list[str]:
    return template.format(d=root).split()


@pytest.mark.parametrize("template, code, words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_command_line(template: str, code: int, words: list[str], files: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    (files / "m.onnx").write_bytes(b"")  # exists, for the verify rows that must stop before reading it
    result = cli.main(_argv(template, files))
    err = capsys.readouterr().err
    assert result == code, err
    for word in words:
        assert word in err, f"{word!r} not in stderr:\n{err}"
    assert "Traceback" not in err


def test_each_diagnostic_is_printed_once_even_with_verbose(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("-v", "--no-color"):
        assert cli.main(_argv(f"export {{d}}/model.py -o {{d}}/m.onnx --dynamic nope:0 {flag}", files)) == 3
        err = capsys.readouterr().err
        assert err.count("--dynamic names 'nope'") == 1, err


def test_verify_writes_sarif_and_report_when_verification_cannot_run(files: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(_argv("export {d}/model.py -o", files) + [str(tmp_path / "ok.onnx"), "-q"]) == 0
    code = cli.main(["verify", str(tmp_path / "ok.onnx"), "--target", "NoSuchExecutionProvider",
                     "--sarif", str(tmp_path / "v.sarif"), "--report", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == cli.EXIT_EXPORT
    assert err.count("NoSuchExecutionProvider") >= 1 and "Traceback" not in err
    lines_with_rule = [line for line in err.splitlines() if "ORT003" in line]
    assert len(lines_with_rule) == 2, err  # the diagnostic once, then the one-line summary naming its code
    log = json.loads((tmp_path / "v.sarif").read_text())
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["ORT003"]
    assert list((tmp_path / "r").glob("ok_*_report.html"))


@pytest.mark.parametrize("available, expected, note", [
    (["CUDAExecutionProvider", "CPUExecutionProvider"], "CUDAExecutionProvider", False),
    (["ROCMExecutionProvider", "CPUExecutionProvider"], "ROCMExecutionProvider", False),
    (["AzureExecutionProvider", "CPUExecutionProvider"], "CPUExecutionProvider", True),
])
def test_verify_default_target_exists_on_the_machine(available: list[str], expected: str, note: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    import onnxsight.verification

    monkeypatch.setattr(onnxsight.verification, "available_providers", lambda: available)
    err = io.StringIO()
    assert cli.default_target(cli.Console(err=err)) == expected
    assert ("no GPU provider" in err.getvalue() and "loads and runs" in err.getvalue()) is note


def test_cli_opsets_are_the_exporters() -> None:
    from onnxsight.exporter.inputs._arguments import SUPPORTED_OPSETS

    assert _cli_inputs.OPSETS == SUPPORTED_OPSETS


LAUNCHER = os.path.join(os.path.dirname(sys.executable), "onnxsight")


@pytest.mark.skipif(not os.path.exists(LAUNCHER), reason="no onnxsight console script next to this python")
def test_launcher_diagnostics_point_at_the_model_file(files: Path, tmp_path: Path) -> None:
    """Through the real `.venv/bin/onnxsight` script, from a folder outside the repository."""
    done = subprocess.run([LAUNCHER, "export", str(files / "model.py"), "-o", str(tmp_path / "m.onnx"),
                           "--dynamic", "y:7:b", "--report", str(tmp_path / "r")],  # ARG003 from export()
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and "bin/onnxsight" not in done.stderr
    assert f"{files / 'model.py'}:8: error ARG003" in done.stderr  # line 8: `def build():`
    log = json.loads(next((tmp_path / "r").glob("*.sarif")).read_text())
    run = log["runs"][0]
    location = run["results"][0]["locations"][0]["physicalLocation"]
    base = run["originalUriBaseIds"][location["artifactLocation"]["uriBaseId"]]["uri"]
    assert base + location["artifactLocation"]["uri"] == (files / "model.py").as_uri()
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == tmp_path.as_uri() + "/"
    assert not any("bin" in b["uri"].split("/") for b in run["originalUriBaseIds"].values())
