"""``make demo``'s zoo step: run the smoke suite and hand back the dashboard and merged SARIF paths."""

from __future__ import annotations

import io
import os

from onnxsight.zoo._runner import RunOptions, run


def demo(out_dir: str) -> tuple[str, str]:
    """Run the smoke suite into ``out_dir`` (quietly, never failing on model results).

    Returns ``(dashboard_path, merged_sarif_path)``; opens nothing.
    """
    outcome = run(RunOptions(suites=("smoke",), out_dir=os.fspath(out_dir), jobs=2, timeout=600.0,
                             baseline="auto", fail_on="never"), stream=io.StringIO(), progress=False)
    return outcome.paths["dashboard"], outcome.paths["merged_sarif"]
