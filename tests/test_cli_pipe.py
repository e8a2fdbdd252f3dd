"""``onnxsight rules | head``: when the reader of stdout goes away, no BrokenPipeError traceback.

The reader here closes its end before the command writes anything, so every
write meets a closed pipe (``head`` does the same after its lines, which is
timing-dependent). Exit code 141 is 128 + SIGPIPE, what a shell reports for
``seq 1000000 | head -1``; pipelines with ``set -o pipefail`` see the same
as for any Unix tool.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("argv, exit_code", [
    (["rules"], 141),
    (["rules", "OPS001"], 141),
    # argparse prints help and version itself and ignores a write that fails (its _print_message)
    (["--help"], 0),
    (["rules", "--help"], 0),
    (["--version"], 0),
], ids=lambda value: " ".join(value) if isinstance(value, list) else str(value))
def test_a_closed_stdout_ends_quietly(argv: list[str], exit_code: int) -> None:
    process = subprocess.Popen([sys.executable, "-m", "onnxsight", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # the reader is gone before the first line
    stderr = process.stderr.read()
    code = process.wait(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr and "Exception ignored" not in stderr, stderr
    assert code == exit_code, stderr


def test_a_reader_that_stays_sees_everything() -> None:
    done = subprocess.run([sys.executable, "-m", "onnxsight", "rules"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split()[0] == "ACC001" and done.stderr == ""
