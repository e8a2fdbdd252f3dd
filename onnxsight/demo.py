"""``python -m onnxsight.demo --out DIR`` (``make demo``): export and verify a few built-in models.

Each model is exported with ``report=True`` (and verified where it exports),
and the paths of its markdown, HTML and SARIF reports are printed. The set
covers the outcomes a user meets: clean exports, a model whose custom
operator has no ONNX translation, a model that torch.export cannot capture,
and a model whose export computes a slightly wrong result (an injected
numerical problem, found by per-node verification).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

import onnxsight

DEMO_NAMESPACE = "onnxsight_demo"


class TinyMLP(torch.nn.Module):
    """Linear -> ReLU -> Linear: exports and verifies cleanly."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, width)
        self.fc2 = torch.nn.Linear(width, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class GatedResidual(torch.nn.Module):
    """A gated residual block with a buffer: more ops, two inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.gate = torch.nn.Linear(16, 16)
        self.register_buffer("scale", torch.full((16,), 0.5))

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        gated = self.proj(x) * torch.sigmoid(self.gate(x))
        return torch.relu(gated * self.scale + skip)


class CustomOpModel(torch.nn.Module):
    """Calls a torch.library custom op that has no ONNX translation: fails at translation."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        op = getattr(torch.ops, DEMO_NAMESPACE).fancy_activation
        return op(self.fc(x)) + 1.0


class DataDependentModel(torch.nn.Module):
    """Branches on a tensor's value in Python: torch.export cannot capture it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if y.sum() > 0:
            return y * 2
        return -y


def sloppy_relu(b: Any, self: Any) -> Any:
    """A custom translation of aten.relu that is 1% off: the injected numerical problem."""
    return b.op("Mul", b.op("Relu", self), b.scalar(1.01, like=self))


def define_custom_op() -> None:
    """Register ``onnxsight_demo::fancy_activation`` with torch.library (once per process)."""
    namespace = getattr(torch.ops, DEMO_NAMESPACE)
    if hasattr(namespace, "fancy_activation"):
        return

    @torch.library.custom_op(f"{DEMO_NAMESPACE}::fancy_activation", mutates_args=())
    def fancy_activation(x: torch.Tensor) -> torch.Tensor:
        return x * torch.tanh(torch.nn.functional.softplus(x))

    @fancy_activation.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)


@dataclass(frozen=True)
class DemoCase:
    """One demo model: how to build it and what the demo expects of it."""

    name: str
    build: Callable[[], tuple[torch.nn.Module, tuple[Any, ...]]]
    expect: str                                     # "ok" | "export failed" | "verification failed"
    custom_translations: Mapping[Any, Callable[..., Any]] | None = None


def cases() -> list[DemoCase]:
    """The demo models, in the order they run."""
    def seeded(build: Callable[[], tuple[torch.nn.Module, tuple[Any, ...]]]) -> Callable[..., Any]:
        def wrapped() -> tuple[torch.nn.Module, tuple[Any, ...]]:
            torch.manual_seed(0)
            return build()
        return wrapped

    return [
        DemoCase("tiny_mlp", seeded(lambda: (TinyMLP(), (torch.randn(4, 16),))), "ok"),
        DemoCase("gated_residual", seeded(lambda: (GatedResidual(), (torch.randn(4, 16), torch.randn(4, 16)))), "ok"),
        DemoCase("custom_op", seeded(lambda: (CustomOpModel(), (torch.randn(4, 16),))), "export failed"),
        DemoCase("data_dependent", seeded(lambda: (DataDependentModel(), (torch.randn(4, 16),))), "export failed"),
        DemoCase("sloppy_relu", seeded(lambda: (TinyMLP(), (torch.randn(4, 16),))), "verification failed",
                 custom_translations={torch.ops.aten.relu.default: sloppy_relu}),
    ]


def run_case(case: DemoCase, out: str) -> dict[str, Any]:
    """Export (and verify) one case with report=True; returns its outcome and report paths."""
    model, args = case.build()
    start = time.perf_counter()
    directory = os.path.join(out, case.name)
    try:
        program = onnxsight.export(model, args, os.path.join(directory, f"{case.name}.onnx"), report=True,
                                   verify=True, artifacts_dir=directory,
                                   custom_translations=case.custom_translations)
    except onnxsight.ExportError as exc:
        return {"name": case.name, "status": "export failed", "expect": case.expect, "paths": exc.report_paths,
                "seconds": time.perf_counter() - start, "summary": exc.summary}
    verification = getattr(program, "verification", None)
    status = "ok" if verification is None or verification.passed else "verification failed"
    return {"name": case.name, "status": status, "expect": case.expect, "paths": _reports_in(directory),
            "seconds": time.perf_counter() - start, "summary": repr(verification) if verification else ""}


def _reports_in(directory: str) -> list[str]:
    """The newest run's report files in ``directory`` (markdown, HTML, SARIF)."""
    records = sorted((f for f in os.listdir(directory) if f.endswith("_run.json")),
                     key=lambda f: os.path.getmtime(os.path.join(directory, f)))
    if not records:
        return []
    stem = records[-1][: -len("_run.json")]
    return [os.path.join(directory, stem + suffix) for suffix in ("_report.md", "_report.html", ".sarif")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onnxsight.demo", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="example:\n  python -m onnxsight.demo --out demo-out")
    parser.add_argument("--out", default="demo-out", help="folder for models and reports (default: demo-out)")
    parser.add_argument("--only", action="append", default=None, help="run only this case (repeatable)")
    parser.add_argument("--verbose", action="store_true", help="show every diagnostic and torch's log as they come")
    parser.add_argument("--no-zoo", action="store_true", help="skip the closing smoke-suite run of the zoo job")
    options = parser.parse_args(argv)
    if not options.verbose:  # the reports hold every finding; keep the terminal to the outcomes
        for name in ("onnxsight", "torch"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    define_custom_op()
    os.makedirs(options.out, exist_ok=True)
    unexpected = 0
    for case in cases():
        if options.only and case.name not in options.only:
            continue
        print(f"== {case.name}: exporting and verifying ...", flush=True)
        with contextlib.redirect_stderr(sys.stderr if options.verbose else io.StringIO()):
            result = run_case(case, options.out)  # torch prints failed graphs to stderr; the reports keep them
        mark = "as expected" if result["status"] == result["expect"] else f"UNEXPECTED (expected {result['expect']})"
        unexpected += result["status"] != result["expect"]
        print(f"   {result['status']} in {result['seconds']:.1f} s, {mark}")
        for path in result["paths"]:
            if not path.endswith("_run.json"):
                print(f"   {os.path.abspath(path)}")
    if not options.no_zoo and not options.only:
        from onnxsight.zoo import demo as zoo_demo

        print("== zoo: the smoke suite, as the nightly job runs it ...", flush=True)
        dashboard, merged_sarif = zoo_demo(os.path.join(options.out, "zoo"))
        print(f"   dashboard:    {os.path.abspath(dashboard)}\n   merged SARIF: {os.path.abspath(merged_sarif)}")
    print(f"demo finished: reports under {os.path.abspath(options.out)}"
          + (f"; {unexpected} case(s) did not end as expected" if unexpected else ""))
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
