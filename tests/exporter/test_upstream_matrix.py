"""The harness that runs PyTorch's own ONNX export tests with both exporters (tests/exporter/upstream_matrix.py).

Upstream's files are not part of the repository: the checks here run the harness's own pieces (the
stand-in ``run_test``, the torch.onnx view of onnxsight's program, the tables) on models of this file;
``PYTORCH=<checkout>`` adds a run of a few upstream cases.
"""

from __future__ import annotations

import os
import subprocess
import sys
import unittest
from pathlib import Path

import pytest
import torch

from tests.exporter import upstream_matrix, upstream_shims
from tests.exporter.upstream_matrix import Outcome

ROOT = Path(__file__).resolve().parents[2]


class _Case:
    opset_version, check_shape, check_dtype = 18, True, True


def _exporter():
    import onnxsight

    return lambda model, args, **options: onnxsight.export(model, args, **options)


def test_run_model_test_exports_runs_and_compares_every_input_set(monkeypatch) -> None:
    monkeypatch.setattr(upstream_shims, "EXPORT", _exporter())

    class Model(torch.nn.Module):
        def forward(self, x, y):
            return x + y, (x * y, None)

    upstream_shims.run_model_test(_Case(), Model(), (torch.randn(2, 3), torch.randn(2, 3)),
                                  input_names=["x", "y"], dynamic_axes={"x": [0], "y": [0]},
                                  additional_test_inputs=[(torch.randn(5, 3), torch.randn(5, 3))])
    assert upstream_shims.STATE["phase"] == "test"


def test_run_model_test_fails_on_a_wrong_number(monkeypatch) -> None:
    import onnxsight

    def wrong(model, args, **options):
        program = onnxsight.export(model, args, **options)
        return lambda *inputs, **kw: [t + 1 for t in program(*inputs, **kw)]

    monkeypatch.setattr(upstream_shims, "EXPORT", wrong)
    with pytest.raises(AssertionError):
        upstream_shims.run_model_test(_Case(), torch.nn.ReLU(), torch.randn(3))
    assert upstream_shims.STATE["phase"] == "compare"


def test_the_view_answers_torch_onnx_attributes() -> None:
    import onnxsight

    view = upstream_matrix.TorchOnnxView(onnxsight.export(torch.nn.ReLU(), (torch.randn(1, 3),)))
    assert [v.name for v in view.model.graph.inputs] == [i.name for i in view.model_proto.graph.input]
    assert view._capture_strategy == "TorchExportNonStrictStrategy"
    torch.testing.assert_close(view(torch.tensor([[-1.0, 2.0, 3.0]]))[0], torch.tensor([[0.0, 2.0, 3.0]]))


def test_decorators_skip_as_upstreams() -> None:
    common = upstream_shims._pytorch_test_common()

    class Case(unittest.TestCase):
        opset_version, is_script = 20, False

        @common.skipIfUnsupportedMinOpsetVersion(21)
        def test_new(self) -> None: ...

        @common.skipTraceTest()
        def test_script_only(self) -> None: ...

        @common.skipScriptTest()
        def test_trace(self) -> None: ...

    result = unittest.TestResult()
    unittest.TestLoader().loadTestsFromTestCase(Case).run(result)
    assert sorted(t._testMethodName for t, _ in result.skipped) == ["test_new", "test_script_only"]


def test_tables_group_the_cases_by_outcome() -> None:
    outcomes = [Outcome("ort", "a", "onnxsight", "failed", "export"), Outcome("ort", "a", "torch.onnx", "passed", exports=1),
                Outcome("ort", "b", "onnxsight", "failed"), Outcome("ort", "b", "torch.onnx", "timeout"),
                Outcome("ort", "c", "onnxsight", "passed", exports=1), Outcome("ort", "c", "torch.onnx", "skipped"),
                Outcome("ort", "d", "onnxsight", "passed"), Outcome("ort", "d", "torch.onnx", "passed")]
    assert upstream_matrix.differences(outcomes) == {"both_fail": ["ort:b"], "torch_onnx_only": ["ort:a"],
                                                     "onnxsight_only": []}
    table = upstream_matrix.totals(outcomes)["ort"]
    assert table["onnxsight"] == {"cases": 4, "run": 4, "passed": 2, "passed_exporting": 1, "failed": 2, "skipped": 0}
    assert table["torch.onnx"]["run"] == 3 and table["torch.onnx"]["failed"] == 1


def test_without_a_checkout_it_says_so() -> None:
    done = subprocess.run([sys.executable, "-m", "tests.exporter.upstream_matrix", "--pytorch", str(ROOT / "nowhere")],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    assert "skipped: give a PyTorch checkout" in done.stdout


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("PYTORCH"), reason="PYTORCH=<a PyTorch checkout> runs upstream's cases")
def test_upstream_cases_run_with_both_exporters(tmp_path) -> None:
    out = tmp_path / "matrix.json"
    subprocess.run([sys.executable, "-m", "tests.exporter.upstream_matrix", "--pytorch", os.environ["PYTORCH"],
                    "--files", "ort", "--filter", "test_fuse_conv_bn", "--out", str(out)], cwd=ROOT, check=True)
    import json

    record = json.loads(out.read_text())
    assert {(o["exporter"], o["status"]) for o in record["outcomes"]} == {("onnxsight", "passed"),
                                                                          ("torch.onnx", "passed")}


def test_the_migration_page_quotes_the_committed_matrix() -> None:
    """docs/migration.md's figures are docs/upstream-matrix.json's totals (make upstream-matrix writes both)."""
    import json
    import re

    record = json.loads((ROOT / "docs" / "upstream-matrix.json").read_text(encoding="utf-8"))
    totals = record["totals"]
    page = (ROOT / "docs" / "migration.md").read_text(encoding="utf-8")

    def row(name: str) -> list[int]:
        found = re.search(rf"^\| {re.escape(name)} \| (\d+) \| (\d+) \| (\d+) \|$", page, re.M)
        assert found, f"no figures for {name} in docs/migration.md"
        return [int(n) for n in found.groups()]

    def figures(files: tuple[str, ...]) -> list[int]:
        return [sum(totals[f]["onnxsight"]["run"] for f in files),
                sum(totals[f]["onnxsight"]["passed"] for f in files),
                sum(totals[f]["torch.onnx"]["passed"] for f in files)]

    assert row("test_pytorch_onnx_onnxruntime.py") == figures(("ort",))
    assert row("test_small_models_e2e.py + test_api.py") == figures(("small", "api"))
