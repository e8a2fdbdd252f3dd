"""PyTorch's own ONNX export tests, run with onnxsight and with torch.onnx (dynamo=True) the same way.

The cases are upstream's, read from a PyTorch checkout given with ``--pytorch`` (its ``test/onnx``
folder; upstream's code is never part of this repository):

- ``ort``: ``test_pytorch_onnx_onnxruntime.py``, its tracing class at opset 20
  (``TestONNXRuntime_opset_version_20_is_script_False_keep_initializers_as_inputs_False``). Upstream's
  ``run_test`` exports with the TorchScript exporter; here it exports with the exporter under test and
  compares as upstream's ``verification.verify`` does (``tests/exporter/upstream_shims.py``). The file's
  own ``torch.onnx.export(..., dynamo=False)`` calls export with the exporter under test too.
- ``small``, ``api``: ``exporter/test_small_models_e2e.py`` and ``exporter/test_api.py``, written for
  ``torch.onnx.export(..., dynamo=True)``. For onnxsight, ``torch.onnx.export`` becomes
  ``onnxsight.export`` and the program answers torch.onnx's ``.model`` with
  ``onnx_ir.from_proto(program.model_proto)``, the replacement ARG020 names.

Every case runs in a worker process (restarted after a crash), each with a time limit; a case is
``passed``, ``failed`` (with the phase: export, run, compare, test), ``skipped`` (upstream's own skip
decorators: opset, tracing/scripting, missing packages) or ``timeout``. ``exports`` counts the exports
a case made (upstream's tracing class runs nothing for a ScriptModule, so a case can pass with none).

    nice -n 10 .venv-vision/bin/python -m tests.exporter.upstream_matrix --pytorch ../upstream-torch \\
        --out docs/upstream-matrix.json            # make upstream-matrix PYTORCH=...; --slice 1/4 --append
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

FILES = {"ort": "test_pytorch_onnx_onnxruntime.py", "small": "exporter/test_small_models_e2e.py",
         "api": "exporter/test_api.py"}
ORT_CLASS = "TestONNXRuntime_opset_version_20_is_script_False_keep_initializers_as_inputs_False"
EXPORTERS = ("onnxsight", "torch.onnx")
CASE_SECONDS = 300


@dataclass
class Outcome:
    file: str
    case: str
    exporter: str
    status: str          # passed, failed, skipped, timeout, crash
    phase: str = ""      # of a failure: export, run, compare, test
    detail: str = ""
    exports: int = 0
    seconds: float = 0.0


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0][:400] if lines else ""


def _error_text(traceback_text: str) -> str:
    """The exception's own lines from a formatted traceback (its type and whole message), on one line."""
    lines = traceback_text.rstrip().splitlines()
    header = max((i for i, line in enumerate(lines) if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b",
                                                               line)), default=len(lines) - 1)
    text = " | ".join(line.strip() for line in lines[header:] if line.strip())
    if "## Exception summary" in text:  # torch.onnx's error: its summary names the cause
        text = text.split(" | ", 1)[0] + " | " + text.split("## Exception summary", 1)[1].lstrip(" |")
    return text[:500]


def _capture_strategy(program: Any) -> str | None:
    """torch.onnx's name for the capture that succeeded (None for an ExportedProgram: no capture)."""
    for attempt in program.record.attempts:
        if attempt.success:
            return "TorchExportStrictStrategy" if "strict=True" in attempt.strategy else "TorchExportNonStrictStrategy"
    return None


class TorchOnnxView:
    """onnxsight's program where the tests read torch.onnx's: ``.model`` as ARG020 says to write it."""

    def __init__(self, program: Any) -> None:
        self._program = program
        self._capture_strategy = _capture_strategy(program)

    @property
    def model(self) -> Any:
        import onnx_ir

        model = onnx_ir.from_proto(self._program.model_proto)
        # NOTE: test_api compares dim names with assertIs: torch.onnx's are the caller's own str objects,
        # onnx_ir's are read from the proto; interned, equal names are the same object, as there.
        for value in (*model.graph.inputs, *model.graph.outputs):
            if value.shape is not None:
                value.shape = onnx_ir.Shape([sys.intern(d.value) if isinstance(getattr(d, "value", None), str)
                                             else d for d in value.shape])
        return model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._program, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """As torch.onnx's program answers: a complex output as its real pairs (the ONNX output itself)."""
        import torch

        return tuple(torch.view_as_real(o) if o.is_complex() else o for o in self._program(*args, **kwargs))


def _onnxsight(view: bool) -> Any:
    import onnxsight

    def export(model: Any, args: Any = (), f: Any = None, **options: Any) -> Any:
        program = onnxsight.export(model, args, f, **options)
        return TorchOnnxView(program) if view else program
    return export


def _torch_onnx(original: Any) -> Any:
    def export(model: Any, args: Any = (), f: Any = None, **options: Any) -> Any:
        options.setdefault("dynamo", True)
        if options.get("fallback") is False:
            options.pop("fallback")  # the older test files' fallback=False: torch.onnx 2.13 has no such argument
        return original(model, args, f, **options)
    return export


def _load(pytorch: Path, file: str, exporter: str) -> list[unittest.TestCase]:
    """Import upstream's test module with the stand-ins installed; its cases, in file order."""
    import torch

    from tests.exporter import upstream_shims

    original = torch.onnx.export
    view = file != "ort"
    export = _onnxsight(view) if exporter == "onnxsight" else _torch_onnx(original)
    upstream_shims.install(export, route=True, force_dynamo=file == "ort")
    folder = pytorch / "test" / "onnx" / Path(FILES[file]).parent
    for path in (str(pytorch / "test" / "onnx"), str(folder)):
        if path not in sys.path:
            sys.path.insert(0, path)
    module = importlib.import_module(Path(FILES[file]).stem)
    classes = [getattr(module, ORT_CLASS)] if file == "ort" else [
        c for c in vars(module).values() if isinstance(c, type) and issubclass(c, unittest.TestCase)
        and c.__module__ == module.__name__]
    loader = unittest.TestLoader()
    return [cls(name) for cls in classes for name in loader.getTestCaseNames(cls)]


def case_ids(pytorch: Path, file: str) -> list[str]:
    return [_case_id(t) for t in _load(pytorch, file, "torch.onnx")]


def _case_id(test: unittest.TestCase) -> str:
    return f"{type(test).__name__}.{test._testMethodName}"


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"the case ran past {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_case(test: unittest.TestCase, file: str, exporter: str, seconds: int = CASE_SECONDS) -> Outcome:
    from tests.exporter.upstream_shims import STATE

    STATE.update(phase="test", exports=0)
    result = unittest.TestResult()
    start = time.perf_counter()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()), _time_limit(seconds):
        warnings.simplefilter("ignore")
        test.run(result)
    elapsed = time.perf_counter() - start
    outcome = Outcome(file, _case_id(test), exporter, "passed", exports=STATE["exports"], seconds=round(elapsed, 2))
    method = getattr(test, test._testMethodName)
    expected_failure = any(m.name == "xfail" for m in getattr(method, "pytestmark", ()))
    if result.skipped:
        outcome.status, outcome.detail = "skipped", _first_line(result.skipped[0][1])
    elif result.errors or result.failures:
        text = (result.errors or result.failures)[0][1]
        outcome.status = "timeout" if "TimeoutError: the case ran past" in text else "failed"
        outcome.phase = STATE["phase"]
        outcome.detail = _error_text(text)
        if expected_failure:
            outcome.status = "xfail"
    elif expected_failure:
        outcome.status = "xpass"
    return outcome


def worker(pytorch: Path, file: str, exporter: str, cases: list[str]) -> None:
    """Run ``cases`` in this process, one JSON line each on stdout."""
    sys.argv = sys.argv[:1]  # common_utils reads the command line when it is imported
    wanted = set(cases)
    stdout = sys.stdout
    for test in _load(pytorch, file, exporter):
        if _case_id(test) in wanted:
            try:
                outcome = run_case(test, file, exporter)
            except BaseException as exc:  # noqa: BLE001 - a case that escapes unittest is an outcome
                outcome = Outcome(file, _case_id(test), exporter, "failed", "harness", f"{type(exc).__name__}: {exc}")
            print("OUTCOME " + json.dumps(asdict(outcome)), file=stdout, flush=True)


def run_cases(pytorch: Path, file: str, exporter: str, cases: list[str], python: str) -> Iterator[Outcome]:
    """Workers over ``cases``; a worker that dies is restarted after the case it was running."""
    remaining = list(cases)
    while remaining:
        process = subprocess.Popen(
            [python, "-m", "tests.exporter.upstream_matrix", "--pytorch", str(pytorch), "--worker", file, exporter,
             *remaining], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=Path(__file__).resolve().parents[2])
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("OUTCOME "):
                outcome = Outcome(**json.loads(line[len("OUTCOME "):]))
                remaining.remove(outcome.case)
                yield outcome
        process.wait()
        if remaining and process.returncode != 0:
            yield Outcome(file, remaining.pop(0), exporter, "crash", "", f"worker exited with {process.returncode}")
        elif remaining:
            raise RuntimeError(f"the worker left {len(remaining)} cases of {file} unrun")


def totals(outcomes: list[Outcome]) -> dict[str, dict[str, dict[str, int]]]:
    """Per file and exporter: cases, run (not skipped), passed, passed with at least one export."""
    table: dict[str, dict[str, dict[str, int]]] = {}
    for o in outcomes:
        row = table.setdefault(o.file, {}).setdefault(o.exporter, dict.fromkeys(
            ("cases", "run", "passed", "passed_exporting", "failed", "skipped"), 0))
        row["cases"] += 1
        row["run"] += o.status != "skipped"
        row["passed"] += o.status in ("passed", "xfail")
        row["passed_exporting"] += o.status == "passed" and o.exports > 0
        row["failed"] += o.status in ("failed", "timeout", "crash", "xpass")
        row["skipped"] += o.status == "skipped"
    return table


def differences(outcomes: list[Outcome]) -> dict[str, list[str]]:
    """Cases by how the two exporters fared: both failed, torch.onnx only, onnxsight only."""
    by_case: dict[tuple[str, str], dict[str, str]] = {}
    for o in outcomes:
        by_case.setdefault((o.file, o.case), {})[o.exporter] = o.status
    passed = {"passed", "xfail"}
    failed = {"failed", "timeout", "crash", "xpass"}
    groups: dict[str, list[str]] = {"both_fail": [], "torch_onnx_only": [], "onnxsight_only": []}
    for (file, case), status in sorted(by_case.items()):
        a, b = status.get("onnxsight"), status.get("torch.onnx")
        key = ("both_fail" if a in failed and b in failed else "torch_onnx_only" if b in passed and a in failed
               else "onnxsight_only" if a in passed and b in failed else None)
        if key:
            groups[key].append(f"{file}:{case}")
    return groups


def write(path: str, outcomes: list[Outcome], pytorch: Path) -> None:
    import torch

    import onnxsight

    outcomes.sort(key=lambda o: (list(FILES).index(o.file), o.case, o.exporter))
    # the machine's paths out of the committed record: upstream's files as test/onnx/..., this repository's
    # as tests/..., installed packages from site-packages/
    site = os.path.dirname(os.path.dirname(torch.__file__))
    prefixes = [(str(pytorch.resolve()) + os.sep, ""), (str(Path(__file__).resolve().parents[2]) + os.sep, ""),
                (site + os.sep, "site-packages/")]
    for outcome in outcomes:
        for prefix, short in prefixes:
            outcome.detail = outcome.detail.replace(prefix, short)
            # a path the detail's length limit cut short
            cut = next((k for k in range(len(prefix) - 1, 1, -1) if outcome.detail.endswith(prefix[:k])), 0)
            if cut and prefix[:cut].startswith(os.sep):
                outcome.detail = outcome.detail[:-cut] + "..."
    record = {"how": "nice -n 10 .venv-vision/bin/python -m tests.exporter.upstream_matrix --pytorch PATH "
                     "--out docs/upstream-matrix.json (make upstream-matrix PYTORCH=PATH)",
              "upstream": {f: FILES[f] for f in FILES}, "ort_class": ORT_CLASS, "torch": torch.__version__,
              "onnxsight": onnxsight.__version__, "totals": totals(outcomes), "differences": differences(outcomes),
              "outcomes": [asdict(o) for o in outcomes]}
    Path(path).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pytorch", default=os.environ.get("PYTORCH"),
                        help="a PyTorch checkout (its test/onnx folder is read)")
    parser.add_argument("--files", default="ort,small,api", help="comma-separated: " + ", ".join(FILES))
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument("--slice", default="1/1", help="K/N: the K-th of N equal parts of each file's cases")
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--only", default="", help="comma-separated test names: only these cases")
    parser.add_argument("--out", default=None, help="write every outcome, the totals and the differences as JSON")
    parser.add_argument("--append", action="store_true", help="merge into the outcomes already in --out")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if not options.pytorch or not (Path(options.pytorch) / "test" / "onnx").is_dir():
        print("upstream-matrix: skipped: give a PyTorch checkout with --pytorch PATH (or PYTORCH=PATH); "
              f"{options.pytorch!r} has no test/onnx folder")
        return
    pytorch = Path(options.pytorch).resolve()
    if options.worker:
        file, exporter, *cases = options.worker
        worker(pytorch, file, exporter, cases)
        return
    outcomes: list[Outcome] = []
    if options.append and options.out and Path(options.out).exists():
        outcomes = [Outcome(**o) for o in json.loads(Path(options.out).read_text(encoding="utf-8"))["outcomes"]]
    part, parts = (int(n) for n in options.slice.split("/"))
    for file in options.files.split(","):
        only = set(filter(None, options.only.split(",")))
        ids = [c for c in _list(pytorch, file) if options.filter in c and (not only or c.split(".")[-1] in only)]
        ids = ids[(part - 1) * len(ids) // parts: part * len(ids) // parts]
        for exporter in options.exporters.split(","):
            outcomes = [o for o in outcomes if not (o.file == file and o.exporter == exporter and o.case in ids)]
            for outcome in run_cases(pytorch, file, exporter, ids, sys.executable):
                outcomes.append(outcome)
                print(f"{exporter:10} {file:5} {outcome.status:8} {outcome.case} {outcome.detail[:120]}", flush=True)
            if options.out:
                write(options.out, outcomes, pytorch)
    print(json.dumps(totals(outcomes), indent=1))


def _list(pytorch: Path, file: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", "import json, sys; from pathlib import Path; "
                           "from tests.exporter.upstream_matrix import case_ids; sys.argv = sys.argv[:1]; "
                           f"print(json.dumps(case_ids(Path({str(pytorch)!r}), {file!r})))"],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
