"""The results store: every run's records in SQLite, queryable as pandas DataFrames.

Each write is one transaction, so a crash of the job loses nothing already
recorded. Records are stored whole (JSON) next to the columns worth querying.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import closing
from typing import Any, Iterable, Sequence

import pandas as pd

from onnxsight.zoo._result import PASSED, ModelResult

DEFAULT_STORE_NAME = "onnxsight-zoo.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, started REAL NOT NULL, finished REAL, status TEXT NOT NULL,
    out_dir TEXT NOT NULL, suites TEXT NOT NULL, host TEXT, options TEXT
);
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT NOT NULL REFERENCES runs(run_id), model TEXT NOT NULL, suite TEXT, status TEXT NOT NULL,
    stage TEXT, seconds REAL, export_seconds REAL, peak_mb REAL, onnx_bytes INTEGER, max_abs_diff REAL,
    root_cause TEXT, tags TEXT, record TEXT NOT NULL, PRIMARY KEY (run_id, model)
);
CREATE INDEX IF NOT EXISTS results_model ON results(model);
"""


def default_store_path(out_dir: str) -> str:
    """The default store: a file in the output folder's parent, shared by the runs written beside it."""
    return os.path.join(os.path.dirname(os.path.abspath(out_dir)), DEFAULT_STORE_NAME)


class ResultsStore:
    """SQLite store of zoo runs. Open per operation; safe to share a file between processes."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with closing(self._connect()) as conn, conn:
            conn.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    # -- writes ----------------------------------------------------------------------------------
    def begin_run(self, run_id: str, *, out_dir: str, suites: Sequence[str], options: dict[str, Any] | None = None,
                  host: str | None = None) -> None:
        with closing(self._connect()) as conn, conn:
            conn.execute("INSERT OR IGNORE INTO runs (run_id, started, status, out_dir, suites, host, options) "
                         "VALUES (?, ?, 'running', ?, ?, ?, ?)",
                         (run_id, time.time(), os.path.abspath(out_dir), ",".join(suites), host,
                          json.dumps(options or {}, sort_keys=True, default=str)))
            conn.execute("UPDATE runs SET status = 'running', finished = NULL WHERE run_id = ?", (run_id,))

    def add_results(self, run_id: str, results: Iterable[ModelResult]) -> None:
        rows = [(run_id, r.name, r.suite, r.status, r.stage, r.seconds, r.export_seconds, r.peak_mb, r.onnx_bytes,
                 _real(r.max_abs_diff), json.dumps(r.root_cause) if r.root_cause else None, ",".join(r.tags),
                 json.dumps(r.to_dict(), sort_keys=True)) for r in results]
        with closing(self._connect()) as conn, conn:
            conn.executemany("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def finish_run(self, run_id: str, status: str) -> None:
        with closing(self._connect()) as conn, conn:
            conn.execute("UPDATE runs SET status = ?, finished = ? WHERE run_id = ?", (status, time.time(), run_id))

    # -- queries ---------------------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        """Any SQL over the ``runs`` and ``results`` tables, as a DataFrame."""
        with closing(self._connect()) as conn:
            return pd.read_sql_query(sql, conn, params=list(params))

    def runs(self) -> pd.DataFrame:
        """One row per run, oldest first, with pass counts."""
        return self.query(
            "SELECT r.run_id, r.started, r.finished, r.status, r.out_dir, r.suites, r.host, "
            "COUNT(x.model) AS models, SUM(x.status = ?) AS passed, SUM(x.export_seconds) AS export_seconds, "
            "SUM(x.seconds) AS seconds FROM runs r LEFT JOIN results x ON x.run_id = r.run_id "
            "GROUP BY r.run_id ORDER BY r.started, r.run_id", (PASSED,))

    def results(self, run_id: str | None = None) -> pd.DataFrame:
        """The queryable columns of every result (of one run, or of all runs)."""
        columns = ("run_id, model, suite, status, stage, seconds, export_seconds, peak_mb, onnx_bytes, "
                   "max_abs_diff, root_cause, tags")
        if run_id is None:
            return self.query(f"SELECT {columns} FROM results ORDER BY run_id, model")
        return self.query(f"SELECT {columns} FROM results WHERE run_id = ? ORDER BY model", (run_id,))

    def records(self, run_id: str) -> list[ModelResult]:
        with closing(self._connect()) as conn:
            rows = conn.execute("SELECT record FROM results WHERE run_id = ? ORDER BY model", (run_id,)).fetchall()
        return [ModelResult.from_dict(json.loads(row[0])) for row in rows]

    def run_info(self, run_id: str) -> dict[str, Any] | None:
        frame = self.query("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        return None if frame.empty else frame.iloc[0].to_dict()

    def previous_run(self, run_id: str, *, same_suites: bool = True) -> str | None:
        """The latest run started before ``run_id`` that recorded results (over the same suites by default)."""
        frame = self.runs()
        frame = frame[(frame["models"] > 0) & (frame["run_id"] != run_id)]
        current = self.run_info(run_id)
        if current is not None:
            frame = frame[frame["started"] <= current["started"]]
            if same_suites:
                frame = frame[frame["suites"] == current["suites"]]
        return None if frame.empty else str(frame.iloc[-1]["run_id"])

    def history(self, limit: int = 30) -> pd.DataFrame:
        """Per run: pass rate and total export time, the last ``limit`` runs, oldest first."""
        frame = self.runs()
        frame = frame[frame["models"] > 0].tail(limit).reset_index(drop=True)
        frame["pass_rate"] = frame["passed"].fillna(0) / frame["models"]
        return frame

    def model_history(self, limit: int = 30) -> pd.DataFrame:
        """Every model's result in each of the last ``limit`` runs with results, oldest run first: run,
        start time, status, export seconds, peak MB, max abs diff, and the verified outputs (JSON, with
        their tolerances)."""
        runs = self.history(limit)
        ids = [str(run) for run in runs["run_id"]]
        marks = ",".join("?" * len(ids)) or "NULL"
        return self.query(
            "SELECT x.run_id, r.started, x.model, x.status, x.export_seconds, x.peak_mb, x.max_abs_diff, "
            "json_extract(x.record, '$.verification.outputs') AS outputs FROM results x "
            f"JOIN runs r ON r.run_id = x.run_id WHERE x.run_id IN ({marks}) ORDER BY r.started, x.run_id, x.model",
            ids)


def _real(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None
