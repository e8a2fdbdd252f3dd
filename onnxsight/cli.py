"""The ``onnxsight`` command line: a thin layer over the library.

Exit codes (stable, for CI): 0 success, 1 verification failed, 2 export failed
(or verification could not run), 3 usage error (bad arguments, missing file,
unknown rule, and arguments export() rejects before any work: the ARG rules).
Results go to stdout; progress and diagnostics to stderr, coloured only on a
terminal (and never with ``NO_COLOR`` set). The parser is in ``_cli_parser``,
the loading of the user's model and flags in ``_cli_inputs``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator, Sequence, TextIO

from onnxsight._cli_inputs import (UsageError, batch_dynamic_shapes, dynamic_axes, load_model,
                                   load_translations, model_location, split_target)
from onnxsight._cli_parser import EXIT_CODES, EXIT_EXPORT, EXIT_OK, EXIT_USAGE, EXIT_VERIFY, build_parser

__all__ = ["EXIT_CODES", "EXIT_EXPORT", "EXIT_OK", "EXIT_USAGE", "EXIT_VERIFY", "Console", "UsageError",
           "build_parser", "load_model", "main", "split_target"]


class Console:
    """Where the command line writes: results to stdout, progress and findings to stderr."""

    COLORS = {"error": "31;1", "warning": "33", "note": "34", "ok": "32", "failed": "31;1", "dim": "2"}

    def __init__(self, *, quiet: bool = False, verbose: bool = False, color: bool | None = None,
                 out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out, self.err = out or sys.stdout, err or sys.stderr
        self.quiet, self.verbose = quiet, verbose
        if color is None:
            color = bool(getattr(self.err, "isatty", lambda: False)()) and not os.environ.get("NO_COLOR")
        self.color = color

    def paint(self, text: str, style: str) -> str:
        return f"\033[{self.COLORS[style]}m{text}\033[0m" if self.color and style in self.COLORS else text

    def result(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def info(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.err, flush=True)

    def error(self, text: str) -> None:
        print(self.paint("error: ", "error") + text, file=self.err, flush=True)

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        """Progress of one long step: ``label ...`` then ``label: done in 1.2 s`` (or failed)."""
        self.info(self.paint(f"{label} ...", "dim"))
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            self.info(f"{label}: {self.paint('failed', 'failed')} after {time.perf_counter() - start:.1f} s")
            raise
        self.info(f"{label}: {self.paint('done', 'ok')} in {time.perf_counter() - start:.1f} s")

    def diagnostics(self, diagnostics: Sequence[Any]) -> None:
        """Errors and warnings (notes too with --verbose), one line each."""
        from onnxsight.diagnostics import repeats

        for diagnostic, count in repeats(diagnostics):
            level = diagnostic.level.value
            if self.quiet and level != "error" or level == "note" and not self.verbose:
                continue
            where = f"{diagnostic.location}: " if diagnostic.location else ""
            times = f" ({count} times)" if count > 1 else ""
            print(f"{where}{self.paint(level, level)} {diagnostic.rule.code} [{diagnostic.rule.name}] "
                  f"{diagnostic.message}{times}", file=self.err, flush=True)


# -- commands --------------------------------------------------------------------------------------------

def cmd_export(options: argparse.Namespace, console: Console) -> int:
    import onnxsight

    model, args, kwargs, arguments = _load(options, console)
    try:
        with console.step(f"exporting {type(model).__name__}" + (" and verifying" if options.verify else "")):
            program = onnxsight.export(model, args, options.output, verify=options.verify, **arguments)
    except onnxsight.ExportError as exc:
        return _export_failed(options, console, exc, (model, args, kwargs))
    console.diagnostics(program.diagnostics)
    console.result(os.path.abspath(options.output))
    result = getattr(program, "verification", None)
    _finish(options, console, program=program, inputs=(model, args, kwargs), record=program.record,
            diagnostics=program.diagnostics)
    return _verdict(result, console)


def _load(options: argparse.Namespace, console: Console) -> tuple[Any, tuple, dict, dict[str, Any]]:
    """Run the user's FUNCTION() and turn the flags into export() keyword arguments."""
    with console.step(f"loading {options.model}"):
        model, args, kwargs = load_model(options.model)
        arguments: dict[str, Any] = {"kwargs": kwargs, "opset_version": options.opset,
                                     "input_names": options.input_names, "output_names": options.output_names}
        if options.translations:
            arguments["custom_translations"] = load_translations(options.translations)
        if options.module_functions:
            arguments["module_functions"] = True
        if getattr(options, "verbose", False):
            arguments["verbose"] = True  # torch's own log output too
    if options.dynamic:
        arguments["dynamic_axes"] = dynamic_axes(options.dynamic)
    elif options.dynamic_batch:
        arguments["dynamic_shapes"] = batch_dynamic_shapes(model, args, kwargs)
    return model, args, kwargs, arguments


# Providers `onnxsight verify model.onnx` tests by default, in order, when this onnxruntime has them.
ACCELERATORS = ("CUDAExecutionProvider", "ROCMExecutionProvider", "DmlExecutionProvider", "CoreMLExecutionProvider")


def default_target(console: Console) -> str:
    """The provider under test when --target is not given: a GPU one when there is one, else CPU (said so)."""
    from onnxsight.verification import available_providers

    available = available_providers()
    for provider in ACCELERATORS:
        if provider in available:
            return provider
    console.info(f"note: this onnxruntime has no GPU provider (available: {', '.join(available)}): running on "
                 "CPUExecutionProvider against itself checks that the model loads and runs, not that two "
                 "providers agree; pass --target PROVIDER to compare")
    return "CPUExecutionProvider"


def cmd_verify(options: argparse.Namespace, console: Console) -> int:
    if split_target(options.model)[0].endswith(".py"):
        return _verify_python(options, console)
    if options.mode != "propagated":
        raise UsageError("--mode isolated needs the PyTorch model: pass FILE.py[:FUNCTION]")
    for flag in ("opset", "translations", "dynamic", "input_names", "output_names", "module_functions"):
        if getattr(options, flag):
            raise UsageError(f"--{flag.replace('_', '-')} applies to FILE.py[:FUNCTION] (it exports the model); "
                             f"{options.model} is already ONNX")
    import onnx

    import onnxsight
    from onnxsight.verification import VerificationError

    if not os.path.isfile(options.model):
        raise UsageError(f"{options.model}: no such file")
    target = options.target or default_target(console)
    name = os.path.splitext(os.path.basename(options.model))[0]
    try:
        structure = onnx.load(options.model, load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - the user's file
        raise UsageError(f"{options.model}: not an ONNX model ({type(exc).__name__}: {exc})") from exc
    try:
        with console.step(f"verifying {os.path.basename(options.model)} on {target} against {options.reference}"):
            result = onnxsight.verify_onnx(options.model, reference=options.reference, target=target,
                                           per_node=options.per_node)
    except VerificationError as exc:
        return _verification_failed(options, console, exc, kind="verify", model_name=name, onnx_model=structure)
    console.diagnostics(result.diagnostics)
    _finish(options, console, verification=result, diagnostics=result.diagnostics, kind="verify", model_name=name,
            onnx_model=structure)
    return _verdict(result, console)


def _verification_failed(options: argparse.Namespace, console: Console, exc: Exception, **record_args: Any) -> int:
    """Verification could not run: its diagnostics once, the reports asked for, exit 2."""
    diagnostics = list(getattr(exc, "diagnostics", ()))
    console.diagnostics(diagnostics)
    _finish(options, console, diagnostics=[*record_args.pop("diagnostics", ()), *diagnostics], error=exc,
            **record_args)
    code = getattr(exc, "rule", None)
    console.error(f"verification could not run ({code})" if diagnostics and code else str(exc))
    return EXIT_EXPORT


def _verify_python(options: argparse.Namespace, console: Console) -> int:
    import onnxsight
    from onnxsight.verification import VerificationError

    model, args, kwargs, arguments = _load(options, console)
    try:
        with console.step(f"exporting {type(model).__name__}"):
            program = onnxsight.export(model, args, **arguments)
    except onnxsight.ExportError as exc:
        return _export_failed(options, console, exc, (model, args, kwargs))
    providers = (options.target,) if options.target else ("CPUExecutionProvider",)
    try:
        with console.step(f"verifying against PyTorch ({options.mode} mode, {', '.join(providers)})"):
            result = onnxsight.verify(program, args, kwargs, mode=options.mode, per_node=options.per_node,
                                      providers=providers, reference="float64" if options.float64 else None,
                                      repro_dir=options.repro)
    except VerificationError as exc:
        return _verification_failed(options, console, exc, program=program, inputs=(model, args, kwargs),
                                    record=program.record, diagnostics=program.diagnostics)
    program.verification = result
    diagnostics = list(program.diagnostics) + list(result.diagnostics)
    console.diagnostics(result.diagnostics)
    _finish(options, console, program=program, inputs=(model, args, kwargs), record=program.record,
            diagnostics=diagnostics, verification=result)
    return _verdict(result, console)


def _verdict(result: Any, console: Console) -> int:
    if result is None:
        return EXIT_OK
    if result.passed:
        console.info(console.paint("verification passed", "ok"))
        return EXIT_OK
    roots = result.root_causes
    console.info(console.paint("verification failed", "failed") + f": {len(roots)} root cause(s)")
    for _, row in roots.head(5).iterrows():
        where = f" at {row['file']}:{row['line']}" if row.get("file") else ""
        console.info(f"  {row['value']} ({row['target']} -> {row['onnx_op']}): max abs diff {row['max_abs_diff']}"
                     f"{where}")
    return EXIT_VERIFY


def _export_failed(options: argparse.Namespace, console: Console, exc: onnxsight.ExportError, inputs: tuple) -> int:
    """Show an ExportError's diagnostics once, write the reports asked for, and give the exit code."""
    console.diagnostics(exc.diagnostics)
    _finish(options, console, error=exc, inputs=inputs, record=exc.record, diagnostics=exc.diagnostics)
    console.error(exc.summary)
    # Arguments export() rejected before any work (ARG rules) are the command line's to fix: a usage error.
    return EXIT_USAGE if getattr(exc, "stage", None) == "arguments" else EXIT_EXPORT


def _finish(options: argparse.Namespace, console: Console, *, diagnostics: Sequence[Any], **record_args: Any) -> None:
    """Write the reports (--report), the SARIF (--sarif) and the CI summary (--summary) asked for."""
    from onnxsight.pipeline import build_run_record
    from onnxsight.reports import markdown, write_reports

    wants = getattr(options, "report", None) or getattr(options, "summary", None) or getattr(options, "sarif", None)
    if not wants:
        return
    record = record_args.pop("record", None)
    run = build_run_record(record=record, diagnostics=diagnostics, **record_args)
    if getattr(options, "report", None):
        paths = write_reports(run, options.report, diagnostics=diagnostics, export_record=record)
        for path in paths:
            if not path.endswith("_run.json"):
                console.result(path)
    if getattr(options, "sarif", None):
        from onnxsight.reports.sarif import write_sarif

        console.result(write_sarif(list(diagnostics), os.path.abspath(options.sarif), record=record))
    if getattr(options, "summary", None):
        with open(options.summary, "a", encoding="utf-8") as handle:
            handle.write(markdown.render_summary(run) + "\n")


def cmd_report(options: argparse.Namespace, console: Console) -> int:
    from onnxsight.reports import rerender

    path = options.path
    if os.path.isdir(path):
        records = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith("_run.json"))
        if not records:
            raise UsageError(f"{path}: no run records (*_run.json) in this folder")
    elif os.path.isfile(path):
        records = [path]
    else:
        raise UsageError(f"{path}: no such file or folder")
    for record in records:
        try:
            written = rerender(record)
        except ValueError as exc:
            raise UsageError(f"{record}: {exc}") from exc
        for output in written:
            if not output.endswith("_run.json"):
                console.result(output)
    return EXIT_OK


def cmd_rules(options: argparse.Namespace, console: Console) -> int:
    from onnxsight import rules

    if options.code is None:
        for rule in rules.CATALOG.values():
            removed = " (removed)" if rule.removed else ""
            console.result(f"{rule.code}  {rule.level.value:<7}  {rule.name}{removed}")
        return EXIT_OK
    try:
        rule = rules.get(options.code)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from exc
    try:
        from onnxsight.rules.docs import render_text
    except ImportError:  # NOTE: fallback until onnxsight/rules/docs.py is available everywhere
        console.result(f"{rule.code} {rule.name} ({rule.level.value})\n{rule.message}\nFix: {rule.fix}")
        return EXIT_OK
    console.result(render_text(rule))
    return EXIT_OK


def cmd_verify_generation(options: argparse.Namespace, console: Console) -> int:
    from onnxsight._cli_generation import cmd_verify_generation as run

    return run(options, console)


COMMANDS = {"export": cmd_export, "verify": cmd_verify, "verify-generation": cmd_verify_generation,
            "report": cmd_report, "rules": cmd_rules}


# 128 + SIGPIPE: what a shell reports for a process whose reader went away (`seq 1000000 | head -1`).
EXIT_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (141 when the reader of stdout has gone away)."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # a broken pipe surfaces here, not in the interpreter's own flush at exit
        return code
    except BrokenPipeError:
        # NOTE: `onnxsight rules | head` closes the pipe after its lines: not a failure to report with a
        # traceback. Python flushes stdout again at exit; pointing it at /dev/null keeps that quiet too
        # (the recipe in Python's docs, "Note on SIGPIPE").
        _stdout_to_devnull()
        return EXIT_PIPE


def _stdout_to_devnull() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stdout without a file descriptor (captured in tests)
        pass


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        options = parser.parse_args(argv)
    except SystemExit as exc:  # --help / --version (0) or a usage error (3)
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    if options.command == "zoo" or options.command not in COMMANDS:
        return int(options.func(options) or 0)
    console = Console(quiet=options.quiet, verbose=options.verbose, color=False if options.no_color else None)
    _configure_logging(console)
    try:
        with _located_at_model_file(options):
            return COMMANDS[options.command](options, console)
    except UsageError as exc:
        console.error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        console.error("interrupted")
        return 130


@contextmanager
def _located_at_model_file(options: argparse.Namespace) -> Iterator[None]:
    """Diagnostics without a source line of their own point at the model file given (never the launcher)."""
    spec = getattr(options, "model", None)
    if not spec or not split_target(spec)[0].endswith(".py"):
        yield
        return
    from onnxsight.diagnostics import Location, user_entry_point

    file, line, function = model_location(spec)
    with user_entry_point(Location(file=file, line=line, function=function)):
        yield


class _NotDiagnostics(logging.Filter):
    """--verbose shows onnxsight's log, but each diagnostic is printed once, by Console.diagnostics."""

    def filter(self, record: logging.LogRecord) -> bool:
        from onnxsight.diagnostics import Diagnostic

        return not any(isinstance(arg, Diagnostic) for arg in (record.args or ()))


def _configure_logging(console: Console) -> None:
    """onnxsight logs each diagnostic as it is found: shown live with --verbose, otherwise summarised."""
    logger = logging.getLogger("onnxsight")
    if console.verbose:
        handler = logging.StreamHandler(console.err)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler.addFilter(_NotDiagnostics())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    else:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
        logger.setLevel(logging.CRITICAL)
