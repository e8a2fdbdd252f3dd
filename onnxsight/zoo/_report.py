"""``onnxsight zoo report DIR``: rebuild a finished (or interrupted) run's dashboard from its folder."""

from __future__ import annotations

import json
import os

from onnxsight.zoo._dashboard import write_dashboard
from onnxsight.zoo._runner import read_run_dir, run_info
from onnxsight.zoo._store import ResultsStore, default_store_path


def report(out_dir: str, *, store_path: str | None = None) -> str:
    """Write ``DIR/dashboard.html`` from the run folder and the store's history; returns its path."""
    results = read_run_dir(out_dir)
    if results is None:
        raise ValueError(f"{out_dir} is not a zoo run folder (no results.json or models/*/result.json)")
    info = run_info(out_dir)
    changes, baseline = [], None
    try:
        with open(os.path.join(out_dir, "changes.json"), encoding="utf-8") as handle:
            saved = json.load(handle)
        changes, baseline = saved.get("changes", []), saved.get("baseline")
    except (OSError, ValueError):
        pass
    path = store_path or default_store_path(out_dir)
    store = ResultsStore(path) if os.path.exists(path) else None
    status = (store.run_info(info["run_id"]) or {}).get("status") if store and info.get("run_id") else None
    return write_dashboard(out_dir, results=results, run_id=info.get("run_id", os.path.basename(out_dir)),
                           changes=changes, baseline=baseline, store=store, started=info.get("started"),
                           interrupted=status in ("interrupted", "running"))
