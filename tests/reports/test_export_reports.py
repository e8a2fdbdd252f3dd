"""export(..., report=True): report files on success and on failure at every stage, and re-rendering."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Sequence

import pytest
import torch

import onnxsight
import onnxsight.pipeline
import onnxsight.verification
from onnxsight.reports import RunRecord, rerender
from onnxsight.reports._record import paths_for, reserve_paths

EVIL = "<script>__pwned=1</script>"
EVIL_IMG = "<img src=x onerror=__pwned=1>"
NAME_RE = re.compile(r"^(?P<model>[A-Za-z0-9._-]+)_(?P<stamp>\d{8}-\d{6}(-\d+)?)(_report\.md|_report\.html|\.sarif|_run\.json)$")


class TinyMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)
        self.register_buffer("steps", torch.zeros(3, dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class DataDependent(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # the line the capture diagnostic points at
            return x * 2
        return -x


@torch.library.custom_op("onnxsight_report_test::wobble", mutates_args=())
def wobble(x: torch.Tensor) -> torch.Tensor:
    return x.sin()


@wobble.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class CustomOp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.onnxsight_report_test.wobble(x)  # first use of the unsupported op
        return torch.ops.onnxsight_report_test.wobble(y) + 1


class EvilModule(torch.nn.Module):
    """<script>__pwned=1</script> in a docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.add_module(EVIL_IMG, torch.nn.Linear(4, 4))
        self.register_parameter("w" + EVIL, torch.nn.Parameter(torch.ones(4)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(getattr(self, EVIL_IMG)(x) * getattr(self, "w" + EVIL))


EvilModule.__name__ = "Evil" + EVIL


def exploding_relu(b: Any, self: Any) -> Any:
    raise ValueError("translation exploded: " + EVIL)


def sloppy(b: Any, self: Any) -> Any:
    return b.op("Mul", b.op("Relu", self), b.scalar(1.01, like=self))


def invalid_node(b: Any, self: Any) -> Any:
    return b.op("NoSuchOnnxOp", self)


def tiny_mlp() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return TinyMLP(), (torch.randn(3, 8),)


def sloppy_relu(directory: str | os.PathLike) -> list[str]:
    """Export TinyMLP with a 1%-off relu translation and verify: a report with a root cause."""
    model, args = tiny_mlp()
    onnxsight.export(model, args, report=True, verify=True, artifacts_dir=directory,
                     custom_translations={torch.ops.aten.relu.default: sloppy})
    files = report_files(directory)
    bundles = [p for p in files if p.endswith("_repro")]   # the failed comparison's minimal repro, beside them
    assert len(bundles) == 1 and os.path.isfile(os.path.join(bundles[0], "repro.py"))
    return [p for p in files if p not in bundles]


def export_failing(model: torch.nn.Module, args: tuple[Any, ...], directory: str | os.PathLike) -> list[str]:
    """Export with a relu translation that raises (its message holds HTML); returns the report paths."""
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(model, args, report=True, artifacts_dir=directory, input_names=[EVIL],
                         custom_translations={torch.ops.aten.relu.default: exploding_relu})
    return info.value.report_paths


def report_files(directory: str | os.PathLike) -> list[str]:
    return sorted(str(p) for p in Path(directory).iterdir() if not p.name.startswith("."))


def assert_reports(paths: Sequence[str], error: onnxsight.ExportError | None = None) -> RunRecord:
    assert len(paths) == 4
    suffixes = sorted(os.path.basename(p).rsplit("_", 1)[-1] if not p.endswith(".sarif") else ".sarif" for p in paths)
    assert suffixes == [".sarif", "report.html", "report.md", "run.json"]
    for path in paths:
        assert os.path.getsize(path) > 0, path
        assert NAME_RE.match(os.path.basename(path)), path
    assert not [p for p in os.listdir(os.path.dirname(paths[0])) if p.endswith(".tmp")]
    if error is not None:
        assert str(error).endswith(", ".join(paths))
        assert error.report_path == paths[0]
    sarif = json.loads(Path(next(p for p in paths if p.endswith(".sarif"))).read_text())
    assert sarif["version"] == "2.1.0"
    return RunRecord.load(next(p for p in paths if p.endswith("_run.json")))


def test_success_writes_three_reports_and_the_record(tmp_path: Path) -> None:
    model, args = tiny_mlp()
    program = onnxsight.export(model, args, tmp_path / "m.onnx", report=True, artifacts_dir=tmp_path / "reports")
    run = assert_reports(report_files(tmp_path / "reports"))
    assert run.status == "ok" and run.error is None and run.model == "TinyMLP"
    assert [s["name"] for s in run.stages][:6] == ["arguments", "capture", "decompose", "translate", "optimize",
                                                  "check"]
    assert all(s["status"] in ("ok", "skipped") and s["seconds"] >= 0 for s in run.stages)
    assert run.attempts and run.attempts[0]["success"] is True
    facts = run.facts
    assert facts["parameters"]["float32"] == {"tensors": 4, "elements": 8 * 16 + 16 + 16 * 4 + 4,
                                             "bytes": 4 * (8 * 16 + 16 + 16 * 4 + 4)}
    assert facts["buffers"]["int64"]["elements"] == 3
    assert facts["inputs"] == [{"name": program.input_names[0], "dtype": "float32", "shape": [3, 8]}]
    assert facts["outputs"][0]["shape"] == [3, 4]
    assert sum(facts["aten_ops"].values()) >= 3 and sum(facts["onnx_ops"].values()) >= 3
    assert facts["onnx_size"] == program.model_proto.ByteSize() and facts["opset"] == 18
    assert {"python", "torch", "onnx", "onnxsight", "providers"} <= set(run.environment)
    assert "CPUExecutionProvider" in run.environment["providers"]
    assert "graph" in run.program_text.lower()


def test_two_runs_never_share_files(tmp_path: Path) -> None:
    first = reserve_paths(tmp_path, "M", "20250101-000000")
    second = reserve_paths(tmp_path, "M", "20250101-000000")
    assert set(first.values()).isdisjoint(second.values())
    Path(first["html"]).unlink(missing_ok=True)
    third = reserve_paths(tmp_path, "M", "20250101-000000")
    assert third["record"] not in (first["record"], second["record"])
    model, args = tiny_mlp()
    for _ in range(2):
        onnxsight.export(model, args, report=True, artifacts_dir=tmp_path / "two")
    assert len(report_files(tmp_path / "two")) == 8


def test_capture_failure(tmp_path: Path) -> None:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(DataDependent(), (torch.randn(2, 3),), report=True, artifacts_dir=tmp_path)
    run = assert_reports(info.value.report_paths, info.value)
    assert run.status == "export failed" and run.error["stage"] == "capture"
    assert [s["status"] for s in run.stages if s["name"] == "capture"] == ["failed"]
    assert len(run.attempts) >= 1 and not any(a["success"] for a in run.attempts)
    assert run.facts["inputs"][0]["shape"] == [2, 3]  # from the arguments: nothing was captured
    markdown = Path(info.value.report_paths[0]).read_text()
    assert "CAP" in markdown and "if x.sum() > 0:" in markdown
    assert "| decompose | not run |" in markdown


def test_translation_failure_lists_unsupported_ops(tmp_path: Path) -> None:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(CustomOp(), (torch.randn(2, 3),), report=True, artifacts_dir=tmp_path)
    run = assert_reports(info.value.report_paths, info.value)
    assert run.error["stage"] == "translate"
    [row] = run.unsupported
    assert row["count"] == 2 and row["rule"] == "OPS001" and "wobble" in row["op"]
    assert row["first_location"]["file"] == __file__
    assert "first use of the unsupported op" in row["first_location"]["code"]
    diagnostic = next(d for d in run.diagnostics if d["rule"] == "OPS001")
    assert any("first use" in text for _, text in diagnostic["snippet"]) and "custom_translations" in diagnostic["fix"]
    assert "wobble" in run.program_text  # the decomposed program is kept for the report
    html = Path(next(p for p in info.value.report_paths if p.endswith(".html"))).read_text()
    assert 'id="unsupported-table"' in html


def test_checker_failure(tmp_path: Path) -> None:
    model, args = tiny_mlp()
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(model, args, report=True, artifacts_dir=tmp_path,
                         custom_translations={torch.ops.aten.relu.default: invalid_node})
    run = assert_reports(info.value.report_paths, info.value)
    assert run.error["stage"] == "check"
    assert any(d["rule"] == "ONX001" for d in run.diagnostics)


def test_verification_failure_report(tmp_path: Path) -> None:
    paths = sloppy_relu(tmp_path)
    run = assert_reports(paths)
    assert run.status == "verification failed"
    v = run.verification
    assert v is not None and v["passed"] is False and v["root_causes"]
    assert v["root_causes"][0]["target"] == "aten.relu.default"
    assert v["outputs"] and v["worst_nodes"] and v["nodes"]
    html = Path(next(p for p in paths if p.endswith(".html"))).read_text()
    assert '<svg class="chart"' in html and '-root-causes"' in html
    markdown = Path(next(p for p in paths if p.endswith(".md"))).read_text()
    assert "Root causes" in markdown and "ACC002" in markdown


def test_hostile_strings_are_escaped(tmp_path: Path) -> None:
    paths = export_failing(EvilModule(), (torch.randn(2, 4),), tmp_path)
    run = assert_reports(paths)
    assert EVIL in json.dumps(run.to_dict())  # the record keeps the text as it was
    html = Path(next(p for p in paths if p.endswith(".html"))).read_text()
    assert "<script>__pwned" not in html and "<img" not in html
    assert "&lt;script&gt;__pwned=1&lt;/script&gt;" in html
    markdown = Path(next(p for p in paths if p.endswith(".md"))).read_text()
    outside_fences = re.sub(r"```.*?```", "", markdown, flags=re.S)
    assert "<script>" not in outside_fences and "<img" not in outside_fences


def test_rerender_from_the_run_record(tmp_path: Path) -> None:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(CustomOp(), (torch.randn(2, 3),), report=True, artifacts_dir=tmp_path)
    record = next(p for p in info.value.report_paths if p.endswith("_run.json"))
    before = {p: Path(p).read_text() for p in info.value.report_paths if not p.endswith(".sarif")}
    for path in before:
        if not path.endswith(".json"):
            os.unlink(path)
    written = rerender(record)
    assert sorted(written) == sorted(paths_for(record).values())
    for path, text in before.items():
        assert Path(path).read_text() == text, path
    with pytest.raises(ValueError):
        bad = tmp_path / "x_run.json"
        bad.write_text("{}")
        rerender(bad)


# -- the orchestration lives in onnxsight.pipeline: the exporter core knows nothing of reports or verification --

PUBLIC_EXPORT = ["model", "args", "f", "kwargs", "input_names", "output_names", "opset_version", "dynamic_shapes",
                 "dynamic_axes", "external_data", "custom_translations", "module_functions", "report", "verify",
                 "artifacts_dir"]
WITH_OPTIMIZE = [*PUBLIC_EXPORT[:PUBLIC_EXPORT.index("module_functions") + 1], "optimize",
                 *PUBLIC_EXPORT[PUBLIC_EXPORT.index("module_functions") + 1:]]


@pytest.mark.parametrize(("function", "expected"), [
    # DESIGN.md's public contract, plus examples= (dynamic_shapes="auto": dims inferred from real calls),
    # verbose= (torch's own log output on the console), float_model= (a quantized model's float original) and
    # torch.onnx.export's other keywords (**torch_onnx: accepted, noted or refused by rule)
    # optimize= (the optimize stage: on by default) sits beside module_functions= in both
    (onnxsight.pipeline.export, [*WITH_OPTIMIZE, "examples", "verbose", "float_model", "torch_onnx"]),
    (onnxsight.exporter.export, [p for p in WITH_OPTIMIZE if p not in ("report", "verify", "artifacts_dir")]
     + ["registry", "verbose", "modes"]),        # the core: no reports, no verification; registry= as extension;
    # modes= the modules' training modes at capture (torch.onnx's training=, judged by the pipeline)
])
def test_export_signatures(function: Any, expected: list[str]) -> None:
    import inspect

    assert list(inspect.signature(function).parameters) == expected


def test_verification_crash_still_writes_the_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_verify(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the engine fell over")

    monkeypatch.setattr(onnxsight.verification, "verify", broken_verify)
    model, args = tiny_mlp()
    with pytest.raises(onnxsight.ExportError, match="the engine fell over") as info:
        onnxsight.pipeline.export(model, args, report=True, verify=True, artifacts_dir=tmp_path)
    run = assert_reports(info.value.report_paths, info.value)
    assert run.status == "export failed"
    [internal] = [d for d in info.value.diagnostics if d.rule.code == "INT001"]
    assert internal.fields["stage"] == "accuracy" and internal.fields["error_type"] == "RuntimeError"
    assert [s["status"] for s in run.stages if s["name"] == "accuracy"] == ["failed"]
    assert run.facts["onnx_nodes"] >= 3  # the program existed: its facts are in the report


def test_write_sarif_is_given_by_the_pipeline(tmp_path: Path) -> None:
    model, args = tiny_mlp()
    core = onnxsight.exporter.export(model, args)
    with pytest.raises(RuntimeError, match=r"onnxsight\.reports\.write_sarif\(program\.diagnostics"):
        core.write_sarif(tmp_path / "core.sarif")
    program = onnxsight.pipeline.export(model, args)
    path = program.write_sarif(tmp_path / "m.sarif")
    assert json.loads(Path(path).read_text())["runs"][0]["tool"]["driver"]["name"] == "onnxsight"
