"""``onnxsight verify-generation``: a greedy generation verified from the command line.

FUNCTION() returns ``(model, prompt)`` (or ``(model, (), prompt)``); the step programs are exported
unless ``--decoder`` names them. The per-step table goes to stdout, diagnostics to stderr; the exit
code is verify's: 0 every step agrees, 1 the generation diverged, 2 it could not be exported or run (ONNX
Runtime could not load a step, or PyTorch's step failed before the last one).
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Mapping

from onnxsight._cli_inputs import UsageError, load_model
from onnxsight._cli_parser import EXIT_EXPORT, EXIT_OK, EXIT_VERIFY

STEP_LINE = "{step:>4}  {phase:<6}  {past:>4}  {agree:<6}  {logits:>14}  {cache:>14}  {margin:>9}  {verdict}"


def cmd_verify_generation(options: argparse.Namespace, console: Any) -> int:
    import onnxsight
    from onnxsight.verification import VerificationError

    model, prompt = _load(options, console)
    programs = _given_programs(options)
    providers = (options.target,) if options.target else ("CPUExecutionProvider",)
    try:
        if programs is None:
            with console.step(f"exporting {type(model).__name__}'s step programs"):
                programs = onnxsight.export_generation(model, prompt, opset_version=options.opset)
            for _, program in programs.items():
                console.diagnostics(program.diagnostics)
            if options.save:
                for path in programs.save(options.save).values():
                    console.result(os.path.abspath(path))
        with console.step(f"verifying a {options.steps}-step generation on {', '.join(providers)}"):
            result = onnxsight.verify_generation(model, prompt, programs, steps=options.steps, providers=providers,
                                                 per_node=options.per_node, report=bool(options.report),
                                                 artifacts_dir=options.report or ".")
    except onnxsight.ExportError as exc:  # the export's reports, SARIF and summary, as `onnxsight export` writes them
        from onnxsight.cli import _export_failed

        return _export_failed(options, console, exc, (model, (), prompt))
    except VerificationError as exc:
        console.diagnostics(exc.diagnostics)
        console.error(f"verification could not run ({exc.rule})" if exc.rule else str(exc))
        return EXIT_EXPORT
    console.diagnostics(result.diagnostics)
    _print_steps(result, console)
    _outputs(options, console, model, result)
    return _verdict(result, console)


def _load(options: argparse.Namespace, console: Any) -> tuple[Any, Mapping[str, Any]]:
    with console.step(f"loading {options.model}"):
        model, args, kwargs = load_model(options.model)
    if kwargs:
        return model, kwargs
    if len(args) == 1 and isinstance(args[0], Mapping):
        return model, args[0]
    if len(args) == 1:
        return model, {"input_ids": args[0]}
    raise UsageError(f"{options.model} must return (model, prompt) with the prompt a dict as the tokenizer returns "
                     f"it (input_ids, attention_mask), got {len(args)} positional inputs")


def _given_programs(options: argparse.Namespace) -> dict[str, str] | None:
    given = {"decoder": options.decoder, "encoder": options.encoder, "first_step": options.first_step}
    given = {name: path for name, path in given.items() if path}
    if not given:
        return None
    if "decoder" not in given:
        raise UsageError("--encoder and --first-step go with --decoder (the step over the cache)")
    if options.save:
        raise UsageError("--save writes the programs it exports; with --decoder nothing is exported")
    for name, path in given.items():
        if not os.path.isfile(path):
            raise UsageError(f"--{name.replace('_', '-')} {path}: no such file")
    return given


def _print_steps(result: Any, console: Any) -> None:
    console.result(STEP_LINE.format(step="step", phase="phase", past="past", agree="tokens", logits="max logit diff",
                                    cache="max cache diff", margin="margin", verdict="verdict"))
    for row in result.steps.to_dict("records"):
        console.result(STEP_LINE.format(
            step=row["step"], phase=row["phase"], past=row["past_length"],
            agree="agree" if row["tokens_agree"] else "differ", logits=_number(row["max_logit_diff"]),
            cache=_number(row["max_cache_diff"]), margin=_number(row["margin"]),
            verdict=row["divergence"] or "ok"))


def _number(value: Any) -> str:
    try:
        return f"{float(value):.3g}"
    except (TypeError, ValueError):
        return ""


def _outputs(options: argparse.Namespace, console: Any, model: Any, result: Any) -> None:
    """The report paths (--report), the SARIF (--sarif) and the CI summary (--summary)."""
    for path in getattr(result, "report_paths", None) or ():
        if not path.endswith("_run.json"):
            console.result(path)
    if options.sarif:
        from onnxsight.reports import write_sarif

        console.result(write_sarif(list(result.diagnostics), os.path.abspath(options.sarif)))
    if options.summary:
        from onnxsight.pipeline import build_generation_record
        from onnxsight.reports import markdown

        with open(options.summary, "a", encoding="utf-8") as handle:
            handle.write(markdown.render_summary(build_generation_record(model, result)) + "\n")


def _verdict(result: Any, console: Any) -> int:
    error = result.info.get("error")
    if error:  # no session, or PyTorch's step failed: the steps that ran are above
        console.info(console.paint("generation could not run", "failed") + f": {error}; {len(result.steps)} of "
                     f"{result.requested} steps ran, {result.steps_agreed} agree")
        return EXIT_EXPORT
    if result.passed:
        tie = result.first_token_difference
        note = f" (a token differs at a near-tie at step {tie['step']})" if tie else ""
        console.info(console.paint(f"generation verified: all {len(result.steps)} steps agree{note}", "ok"))
        return EXIT_OK
    first = result.first_divergence
    where = "the encoder" if first and first["step"] == -1 else f"step {first['step']}" if first else "a step"
    console.info(console.paint("generation diverged", "failed") + f" at {where}: {result.steps_agreed} of "
                 f"{result.requested} steps agree")
    for _, row in result.root_causes.head(3).iterrows():
        console.info(f"  {row['value']} ({row['target']} -> {row['onnx_op']}) is the first value to diverge")
    return EXIT_VERIFY
