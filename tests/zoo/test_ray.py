"""The smoke suite on a local Ray (``make test-ray`` installs the ``ray`` extra and runs this)."""

from __future__ import annotations

import pytest

from onnxsight.zoo import RunOptions, load_suite, run

pytestmark = pytest.mark.slow


def test_smoke_suite_on_local_ray(tmp_path) -> None:
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'onnxsight[ray]' (or make test-ray)")
    outcome = run(RunOptions(suites=("smoke",), out_dir=str(tmp_path / "ray"), jobs=2, executor="ray",
                             timeout=600.0, fail_on="never"), progress=False)
    expected = {spec.name for spec in load_suite("smoke").specs}
    assert {r.name for r in outcome.results} == expected
    assert all(r.status in ("passed", "failed") for r in outcome.results), [(r.name, r.error) for r in outcome.results]
    assert any(r.status == "passed" for r in outcome.results)
    assert outcome.exit_code == 0 and not outcome.interrupted
    assert (tmp_path / "ray" / "dashboard.html").exists()
