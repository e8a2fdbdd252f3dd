"""The ``onnxsight`` command line: commands, exit codes, reports, summaries, help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from onnxsight import cli

MODEL_FILE = textwrap.dedent('''
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x, *, scale=None):
            y = torch.relu(self.fc(x))
            return y * scale if scale is not None else y

    def build():
        torch.manual_seed(0)
        return Net(), (torch.randn(2, 4),)

    def build_kwargs():
        torch.manual_seed(0)
        return Net(), (torch.randn(2, 4),), {"scale": torch.tensor(2.0)}

    def sloppy_relu(b, self):
        return b.op("Mul", b.op("Relu", self), b.scalar(1.01, like=self))

    @torch.library.custom_op("onnxsight_cli_test::mystery", mutates_args=())
    def mystery(x: torch.Tensor) -> torch.Tensor:
        return x.cos()

    @mystery.register_fake
    def _(x):
        return torch.empty_like(x)

    class Custom(torch.nn.Module):
        def forward(self, x):
            return torch.ops.onnxsight_cli_test.mystery(x)

    def custom():
        return Custom(), (torch.randn(2, 4),)

    def not_a_pair():
        return 3
''')


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "model.py"
    path.write_text(MODEL_FILE)
    return path


def run(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_export_with_report_and_summary(model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = tmp_path / "summary.md"
    code, out, err = run("export", model_file, "-o", tmp_path / "m.onnx", "--report", tmp_path / "r",
                         "--summary", summary, "--verify", "--dynamic-batch", capsys=capsys)
    assert code == cli.EXIT_OK, err
    lines = out.split()
    assert lines[0] == str(tmp_path / "m.onnx") and (tmp_path / "m.onnx").is_file()
    assert [Path(p).suffix for p in lines[1:]] == [".md", ".html", ".sarif"]
    assert all(Path(p).is_file() for p in lines[1:])
    assert "exporting Net" in err and "done" in err and "\033[" not in err  # progress, no colour off a TTY
    text = summary.read_text()
    assert "### onnxsight: Net: ok" in text and "| accuracy | ok |" in text
    record = json.loads(next((tmp_path / "r").glob("*_run.json")).read_text())
    assert record["facts"]["inputs"][0]["shape"][0] == "batch"
    assert record["verification"]["passed"] is True


def test_export_kwargs_function_and_quiet(model_file: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run("export", f"{model_file}:build_kwargs", "-o", tmp_path / "k.onnx", "--quiet", capsys=capsys)
    assert code == cli.EXIT_OK and out.strip() == str(tmp_path / "k.onnx") and err == ""


def test_export_failure_exit_code_and_report(model_file: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run("export", f"{model_file}:custom", "-o", tmp_path / "c.onnx", "--report", tmp_path / "r",
                         "--summary", tmp_path / "s.md", capsys=capsys)
    assert code == cli.EXIT_EXPORT
    assert "OPS001" in err and "error:" in err
    assert len(out.split()) == 3 and not (tmp_path / "c.onnx").exists()
    assert "export failed" in (tmp_path / "s.md").read_text()


def test_verification_failure_exit_code(model_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    import onnxsight
    import torch

    real_export = onnxsight.export

    def sloppy_export(*args, **kwargs):  # inject a 1%-off relu translation into the CLI's export
        kwargs["custom_translations"] = {torch.ops.aten.relu.default: lambda b, x: b.op(
            "Mul", b.op("Relu", x), b.scalar(1.01, like=x))}
        return real_export(*args, **kwargs)

    monkeypatch.setattr(onnxsight, "export", sloppy_export)
    code, out, err = run("verify", model_file, "--report", tmp_path / "r", "--sarif", tmp_path / "v.sarif",
                         capsys=capsys)
    assert code == cli.EXIT_VERIFY
    assert "verification failed" in err and "relu" in err
    sarif = json.loads((tmp_path / "v.sarif").read_text())
    assert any(r["ruleId"] == "ACC002" for r in sarif["runs"][0]["results"])
    code, _, _ = run("export", model_file, "-o", tmp_path / "s.onnx", "--verify", capsys=capsys)
    assert code == cli.EXIT_VERIFY


def test_verify_onnx_file_across_providers(model_file: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert run("export", model_file, "-o", tmp_path / "m.onnx", "-q", capsys=capsys)[0] == cli.EXIT_OK
    code, out, err = run("verify", tmp_path / "m.onnx", "--target", "CPUExecutionProvider", "--report",
                         tmp_path / "r", capsys=capsys)
    assert code == cli.EXIT_OK, err
    html = next((tmp_path / "r").glob("m_*_report.html")).read_text()
    assert "verify run" in html
    code, out, err = run("verify", tmp_path / "m.onnx", "--target", "NoSuchExecutionProvider", capsys=capsys)
    assert code == cli.EXIT_EXPORT and "NoSuchExecutionProvider" in err
    code, out, err = run("verify", tmp_path / "m.onnx", "--mode", "isolated", capsys=capsys)
    assert code == cli.EXIT_USAGE


def test_verify_isolated_mode(model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run("verify", model_file, "--mode", "isolated", capsys=capsys)
    assert code == cli.EXIT_OK, err
    assert "isolated mode" in err


@pytest.mark.parametrize("argv", [
    ("export", "missing.py", "-o", "x.onnx"),
    ("export", "{model}:nope", "-o", "x.onnx"),
    ("export", "{model}:not_a_pair", "-o", "x.onnx"),
    ("export", "{model}"),                     # -o is required
    ("export", "{model}", "-o", "x.onnx", "--opset", "many"),
    ("verify", "missing.onnx"),
    ("report", "missing_run.json"),
    ("rules", "XYZ999"),
    ("frobnicate",),
    (),
])
def test_usage_errors_exit_3(argv: tuple[str, ...], model_file: Path, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(*(a.format(model=model_file) for a in argv), capsys=capsys)
    assert code == cli.EXIT_USAGE
    assert "error" in err


def test_report_rerenders_from_run_record(model_file: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    run("export", f"{model_file}:custom", "-o", tmp_path / "c.onnx", "--report", tmp_path / "r", capsys=capsys)
    record = next((tmp_path / "r").glob("*_run.json"))
    html = next((tmp_path / "r").glob("*_report.html"))
    original = html.read_text()
    html.unlink()
    code, out, _ = run("report", record, capsys=capsys)
    assert code == cli.EXIT_OK and str(html) in out.split()
    assert html.read_text() == original
    code, out, _ = run("report", tmp_path / "r", capsys=capsys)
    assert code == cli.EXIT_OK and len(out.split()) == 3
    (tmp_path / "bad_run.json").write_text("[1, 2]")
    assert run("report", tmp_path / "bad_run.json", capsys=capsys)[0] == cli.EXIT_USAGE


def test_rules(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run("rules", capsys=capsys)
    assert code == cli.EXIT_OK and "OPS001" in out and "ACC002" in out
    code, out, _ = run("rules", "ops001", capsys=capsys)
    assert code == cli.EXIT_OK and "OPS001" in out and "How to fix" in out


@pytest.mark.parametrize("command", ["export", "verify", "report", "rules", "zoo"])
def test_help_for_every_command(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(command, "--help", capsys=capsys)
    assert code == 0 and "usage: onnxsight" in out
    if command != "zoo":
        assert "examples:" in out and "exit codes" in out


def test_colours_only_when_asked_for() -> None:
    import io

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert cli.Console(err=Tty()).color is True
    assert cli.Console(err=io.StringIO()).color is False
    assert cli.Console(err=Tty(), color=False).color is False


def test_split_target() -> None:
    assert cli.split_target("a/b.py") == ("a/b.py", "build")
    assert cli.split_target("a/b.py:make") == ("a/b.py", "make")
    assert cli.split_target("C:/x/m.onnx") == ("C:/x/m.onnx", "build")


def test_python_dash_m_entry_point() -> None:
    done = subprocess.run([sys.executable, "-m", "onnxsight", "rules", "NOPE000"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == cli.EXIT_USAGE and "unknown rule" in done.stderr


TRANSLATIONS_FILE = textwrap.dedent('''
    import torch

    def relu_as_max(b, x):
        """relu as Max(x, 0): visible in the graph, so the test knows this translation was used."""
        return b.op("Max", x, b.scalar(0.0, like=x))

    TRANSLATIONS = {torch.ops.aten.relu.default: relu_as_max}

    def translations():
        return {"aten::relu": relu_as_max}

    def build():
        """Sequence model: axes 0 (batch) and 1 (sequence) can both be dynamic."""
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()), (torch.randn(2, 5, 4),)
''')


@pytest.mark.parametrize("spec", ["{d}/ops.py:TRANSLATIONS", "{d}/ops.py:translations", "cli_test_ops:TRANSLATIONS"])
def test_export_covers_the_readme_example(spec: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--translations, --input-names/--output-names and --dynamic on any axis, as export() takes them."""
    import onnx

    (tmp_path / "ops.py").write_text(TRANSLATIONS_FILE)
    (tmp_path / "cli_test_ops.py").write_text(TRANSLATIONS_FILE)
    monkeypatch.chdir(tmp_path)  # MODULE:ATTR imports from the working directory
    code, out, err = run("export", tmp_path / "ops.py", "-o", tmp_path / "m.onnx", "--translations",
                         spec.format(d=tmp_path), "--input-names", "features", "--output-names", "scores",
                         "--dynamic", "features:0:batch", "--dynamic", "features:1", "--opset", "20",
                         capsys=capsys)
    assert code == cli.EXIT_OK, err
    model = onnx.load(str(tmp_path / "m.onnx"))
    assert [i.name for i in model.graph.input] == ["features"] and [o.name for o in model.graph.output] == ["scores"]
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "features_dim_1", 4]
    assert "Max" in [n.op_type for n in model.graph.node] and "Relu" not in [n.op_type for n in model.graph.node]
    assert model.opset_import[0].version == 20


def test_verify_python_takes_the_export_options(model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run("verify", model_file, "--opset", "21", "--dynamic", "x:0:batch", capsys=capsys)
    assert code == cli.EXIT_OK, err
    assert "verification passed" in err


def test_verify_onnx_without_target_says_what_it_compares(model_file: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from onnxsight.verification import available_providers

    assert run("export", model_file, "-o", tmp_path / "m.onnx", "-q", capsys=capsys)[0] == cli.EXIT_OK
    code, out, err = run("verify", tmp_path / "m.onnx", "--sarif", tmp_path / "v.sarif", capsys=capsys)
    assert code == cli.EXIT_OK, err
    target = cli.default_target(cli.Console(err=open(os.devnull, "w")))
    assert target in available_providers()
    assert f"on {target} against CPUExecutionProvider" in err
    if target == "CPUExecutionProvider":
        assert "no GPU provider" in err
    assert (tmp_path / "v.sarif").exists()


def test_verify_float64_and_repro(model_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """--float64 judges against PyTorch's own rounding; --repro DIR gets the minimal bundle of a failure."""
    import onnxsight
    import torch

    code, _, err = run("verify", model_file, "--float64", "--repro", tmp_path / "clean", capsys=capsys)
    assert code == cli.EXIT_OK, err
    assert not (tmp_path / "clean").exists()          # nothing to reproduce
    real_export = onnxsight.export

    def sloppy_export(*args, **kwargs):
        kwargs["custom_translations"] = {torch.ops.aten.relu.default: lambda b, x: b.op(
            "Mul", b.op("Relu", x), b.scalar(1.01, like=x))}
        return real_export(*args, **kwargs)

    monkeypatch.setattr(onnxsight, "export", sloppy_export)
    code, _, err = run("verify", model_file, "--float64", "--repro", tmp_path / "bundle", capsys=capsys)
    assert code == cli.EXIT_VERIFY, err
    assert {"model.onnx", "repro.py"} <= {p.name for p in (tmp_path / "bundle").iterdir()}
