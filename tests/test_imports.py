"""What loads torch, and what must not: the light entry points stay light.

``import onnxsight`` and the rule catalog, diagnostics and reports are used by
tools that never export (``onnxsight rules``, SARIF post-processing, CI
summaries); importing torch costs them seconds. Each case runs in a fresh
interpreter, because the test process itself has torch loaded long ago.
The timings themselves are measured by ``bench/startup.py``, not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("torch", "onnx", "onnxruntime", "pandas")

_PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        result = None
        {body}
    print(json.dumps({{"loaded": sorted(m for m in {heavy!r} if m in sys.modules), "out": out.getvalue(),
                      "result": repr(result)}}))
""")


def _probe(body: str) -> dict:
    """Run ``body`` in a fresh interpreter; which heavy modules it loaded, what it printed and returned."""
    code = _PROBE.format(body=textwrap.indent(body, " " * 8).strip(), heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("what, body", [
    ("import onnxsight", "import onnxsight"),
    ("import onnxsight.rules", "import onnxsight.rules"),
    ("import onnxsight.diagnostics", "import onnxsight.diagnostics"),
    ("import onnxsight.reports", "import onnxsight.reports"),
    ("onnxsight.rules.docs", "from onnxsight.rules import docs"),
    ("an error class", "from onnxsight import TranslationError, ExportError"),
    ("onnxsight.Diagnostic", "import onnxsight; onnxsight.Diagnostic, onnxsight.Level, onnxsight.Location"),
    ("onnxsight.reports.write_sarif", "import onnxsight; onnxsight.reports.write_sarif"),
    ("dir(onnxsight)", "import onnxsight; dir(onnxsight)"),
    ("onnxsight --help", "from onnxsight.cli import main; result = main(['--help'])"),
    ("onnxsight --version", "from onnxsight.cli import main; result = main(['--version'])"),
    ("onnxsight rules", "from onnxsight.cli import main; result = main(['rules'])"),
    ("onnxsight rules OPS001", "from onnxsight.cli import main; result = main(['rules', 'OPS001'])"),
    ("onnxsight zoo --help", "from onnxsight.cli import main; result = main(['zoo', '--help'])"),
])
def test_light_entry_points_do_not_load_torch(what: str, body: str) -> None:
    probe = _probe(body)
    assert probe["loaded"] == [], f"{what} loaded {probe['loaded']}"
    if "main(" in body:
        assert probe["result"] == "0" and probe["out"].strip(), f"{what}: exit {probe['result']}, output {probe['out']!r}"


@pytest.mark.parametrize("body, loads", [
    ("import onnxsight; onnxsight.export", "torch"),
    ("import onnxsight; onnxsight.ONNXProgram", "onnx"),
    ("import onnxsight; onnxsight.verify", "pandas"),
])
def test_the_heavy_names_load_on_first_use(body: str, loads: str) -> None:
    assert loads in _probe(body)["loaded"]
