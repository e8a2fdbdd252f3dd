"""Ctrl-C stops a run cleanly, keeping finished results; --resume finishes it without redoing them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from onnxsight.zoo import ResultsStore, RunOptions, run

HERE = os.path.dirname(os.path.abspath(__file__))
RESUMABLE = os.path.join(HERE, "suites", "resumable.py")
WAIT_LIMIT_S = 240.0


def _wait_for(path: str, process: subprocess.Popen, content: str | None = None) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while time.monotonic() < deadline:
        if os.path.exists(path) and (content is None or open(path, encoding="utf-8").read().strip() == content):
            return
        assert process.poll() is None, process.communicate()[0]
        time.sleep(0.2)
    process.kill()
    raise AssertionError(f"{path} did not appear")


def test_interrupt_then_resume(tmp_path) -> None:
    out = tmp_path / "nightly"
    block = tmp_path / "block"
    block.write_text("hold the second model")
    env = dict(os.environ, ONNXSIGHT_ZOO_TEST_BLOCK=str(block))
    # A job started in the background by a non-interactive shell (CI's `cmd &`) inherits SIGINT *ignored*,
    # and Python then installs no Ctrl-C handler: the job a user starts at a terminal has the default.
    job = subprocess.Popen([sys.executable, "-m", "onnxsight.zoo", "run", "--suite", RESUMABLE, "--out", str(out)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    models = out / "models" / "resumable"
    _wait_for(str(models / "first" / "result.json"), job)
    _wait_for(str(models / "second" / "stage"), job, content="build")
    job.send_signal(signal.SIGINT)  # what Ctrl-C sends
    output, _ = job.communicate(timeout=WAIT_LIMIT_S)
    assert job.returncode == 130, output
    assert "interrupted: 1 of 2 models finished and kept" in output
    assert not (models / "second" / "result.json").exists()

    store = ResultsStore(str(tmp_path / "onnxsight-zoo.sqlite"))
    [run_id] = store.runs()["run_id"]
    assert store.runs()["status"].tolist() == ["interrupted"]
    assert store.results(run_id)["model"].tolist() == ["first"]

    first_written = os.stat(models / "first" / "result.json").st_mtime_ns
    block.unlink()
    os.environ["ONNXSIGHT_ZOO_TEST_BLOCK"] = str(block)
    try:
        outcome = run(RunOptions(suites=(), out_dir=str(out), resume=True), progress=False)
    finally:
        del os.environ["ONNXSIGHT_ZOO_TEST_BLOCK"]
    assert outcome.run_id == run_id
    assert [r.name for r in outcome.results] == ["first", "second"]
    assert all(r.status == "passed" for r in outcome.results)
    assert os.stat(models / "first" / "result.json").st_mtime_ns == first_written  # not redone
    assert store.runs()["status"].tolist() == ["finished"]
    assert sorted(store.results(run_id)["model"]) == ["first", "second"]
