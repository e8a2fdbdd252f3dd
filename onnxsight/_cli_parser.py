"""The ``onnxsight`` argument parser: every subcommand, its options, examples and exit codes.

Kept apart from ``cli.py`` (what each command does) so that both stay small;
building the parser imports nothing heavy, so ``onnxsight --help`` starts at once.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from onnxsight._cli_inputs import export_options_parser

EXIT_OK, EXIT_VERIFY, EXIT_EXPORT, EXIT_USAGE = 0, 1, 2, 3
EXIT_CODES = ("exit codes: 0 success, 1 verification failed, 2 export failed, 3 usage error (including "
              "export() arguments rejected before any work, ARG rules)")


class _Parser(argparse.ArgumentParser):
    """argparse with exit code 3 for usage errors (argparse's own is 2, our export failure)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines) + f"\n\n{EXIT_CODES}"


def _common() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    group = common.add_mutually_exclusive_group()
    group.add_argument("-q", "--quiet", action="store_true", help="print only results and errors")
    group.add_argument("-v", "--verbose", action="store_true", help="also print notes, onnxsight's log and torch's own log output")
    common.add_argument("--no-color", action="store_true", help="never colour the output (also: NO_COLOR=1)")
    return common


def _outputs() -> argparse.ArgumentParser:
    outputs = _Parser(add_help=False)
    outputs.add_argument("--report", metavar="DIR", help="write markdown, HTML, SARIF and the run record into DIR")
    outputs.add_argument("--summary", metavar="FILE",
                         help='append a markdown summary for a CI job summary (e.g. "$GITHUB_STEP_SUMMARY")')
    return outputs


def build_parser() -> argparse.ArgumentParser:
    """The ``onnxsight`` parser with every subcommand (``zoo`` from onnxsight.zoo.cli when present)."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog="onnxsight", formatter_class=formatter,
                     description="Export PyTorch models to ONNX and learn exactly what went wrong, and where.",
                     epilog=examples("onnxsight export model.py -o model.onnx --report reports/",
                                      "onnxsight verify model.py:build_small --mode isolated",
                                      "onnxsight rules OPS002"))
    from onnxsight import __version__

    parser.add_argument("--version", action="version", version=f"onnxsight {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{export,verify,verify-generation,report,rules,zoo}")
    sub.required = True
    common, outputs, export_options = _common(), _outputs(), export_options_parser()

    p = sub.add_parser("export", parents=[common, outputs, export_options], formatter_class=formatter,
                       help="export a model defined in a Python file",
                       description="Export FUNCTION()'s model (FUNCTION returns (model, args) or "
                                   "(model, args, kwargs); default: build) to ONNX.",
                       epilog=examples("onnxsight export model.py -o model.onnx",
                                        "onnxsight export zoo.py:resnet -o r.onnx --opset 20 --dynamic-batch",
                                        "onnxsight export m.py -o m.onnx --translations my_ops:TRANSLATIONS "
                                        "--input-names tokens --output-names logits --dynamic tokens:0:batch "
                                        "--dynamic tokens:1:sequence",
                                        "onnxsight export model.py -o m.onnx --verify --report out/ "
                                        '--summary "$GITHUB_STEP_SUMMARY"'))
    p.add_argument("model", metavar="FILE.py[:FUNCTION]")
    p.add_argument("-o", "--output", required=True, metavar="model.onnx", help="the ONNX file to write")
    p.add_argument("--verify", action="store_true", help="verify the export against PyTorch, value by value")
    p.add_argument("--sarif", metavar="OUT", help="write the findings as SARIF 2.1.0")

    p = sub.add_parser("verify", parents=[common, outputs, export_options], formatter_class=formatter,
                       help="compare ONNX with PyTorch, or one ONNX model on two providers",
                       description="With FILE.py[:FUNCTION]: export (with the export options below) and "
                                   "compare every value with PyTorch on --target (default CPU). With model.onnx: "
                                   "compare the model on --target against --reference. The default --target "
                                   "for model.onnx is the first GPU provider this onnxruntime has (CUDA, ROCm, "
                                   "DirectML, CoreML); without one it is CPUExecutionProvider, which then only "
                                   "checks that the model loads and runs (said so on stderr).",
                       epilog=examples("onnxsight verify model.py --mode isolated",
                                        "onnxsight verify model.onnx --target CUDAExecutionProvider --per-node",
                                        "onnxsight verify model.onnx --sarif verify.sarif --report out/"))
    p.add_argument("model", metavar="model.onnx | FILE.py[:FUNCTION]")
    p.add_argument("--reference", default="CPUExecutionProvider", metavar="PROVIDER",
                   help="reference provider for model.onnx (default CPUExecutionProvider)")
    p.add_argument("--target", default=None, metavar="PROVIDER",
                   help="provider under test (model.onnx: default the first GPU provider available, else "
                        "CPUExecutionProvider; FILE.py: default CPUExecutionProvider)")
    p.add_argument("--per-node", action=argparse.BooleanOptionalAction, default=True,
                   help="compare every intermediate value, not only the outputs (default: on)")
    p.add_argument("--mode", choices=("propagated", "isolated"), default="propagated",
                   help="isolated: feed each node PyTorch's own inputs (FILE.py only)")
    p.add_argument("--float64", action="store_true",
                   help="judge each value against PyTorch's own float32 rounding error at that value, "
                        "so accumulated rounding is not a root cause (FILE.py only)")
    p.add_argument("--repro", metavar="DIR",
                   help="when verification fails, write the smallest diverging ONNX subgraph there, with inputs, "
                        "expected outputs and repro.py (FILE.py only)")
    p.add_argument("--sarif", metavar="OUT", help="write the findings as SARIF 2.1.0")

    _add_verify_generation(sub, common, outputs)

    p = sub.add_parser("report", parents=[common], formatter_class=formatter,
                       help="re-render reports from a saved run record",
                       description="Render markdown, HTML and SARIF again from a run record (*_run.json), "
                                   "next to it; a folder re-renders every record in it.",
                       epilog=examples("onnxsight report reports/TinyMLP_20250101-120000_run.json",
                                        "onnxsight report reports/"))
    p.add_argument("path", metavar="PATH", help="a *_run.json file or a folder of them")

    p = sub.add_parser("rules", parents=[common], formatter_class=formatter,
                       help="list the diagnostic rules, or explain one",
                       description="Without CODE: every rule with its level. With CODE: its documentation.",
                       epilog=examples("onnxsight rules", "onnxsight rules OPS001"))
    p.add_argument("code", nargs="?", metavar="CODE", help="rule code (OPS001) or name")
    _add_zoo(sub)
    return parser


def _add_verify_generation(sub: Any, common: argparse.ArgumentParser, outputs: argparse.ArgumentParser) -> None:
    from onnxsight._cli_inputs import opset_number

    p = sub.add_parser("verify-generation", parents=[common, outputs],
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       help="verify a greedy generation: PyTorch against the exported step programs, step by step",
                       description="FUNCTION() returns (model, prompt): a transformers model with its LM head and the "
                                   "prompt as its tokenizer returns it (input_ids, attention_mask; an "
                                   "encoder-decoder's encoder inputs). Runs --steps steps of greedy decoding in PyTorch and over the "
                                   "step programs in ONNX Runtime (exported first unless --decoder is given), each "
                                   "step fed the previous step's cache, and compares every step; the first step "
                                   "that diverges (not a near-tie) is compared per node, naming the value and line.",
                       epilog=examples("onnxsight verify-generation lm.py --steps 16",
                                        "onnxsight verify-generation lm.py --save onnx/ --report out/",
                                        "onnxsight verify-generation lm.py --decoder onnx/decoder.onnx",
                                        "onnxsight verify-generation t5.py --encoder e.onnx --first-step f.onnx "
                                        "--decoder d.onnx --target CUDAExecutionProvider"))
    p.add_argument("model", metavar="FILE.py[:FUNCTION]")
    p.add_argument("--steps", type=int, default=16, metavar="N", help="generation steps (default 16; 0 is the prompt)")
    p.add_argument("--decoder", metavar="decoder.onnx", help="the decoder step to verify (default: export it)")
    p.add_argument("--encoder", metavar="encoder.onnx", help="an encoder-decoder's encoder")
    p.add_argument("--first-step", metavar="first_step.onnx",
                   help="an encoder-decoder's first decoder step (computes the cross-attention cache)")
    p.add_argument("--save", metavar="DIR", help="write the exported step programs there (decoder.onnx, ...)")
    p.add_argument("--opset", type=opset_number, default=None, metavar="N", help="ONNX opset of the export")
    p.add_argument("--target", default=None, metavar="PROVIDER",
                   help="ONNX Runtime provider of the loop (default CPUExecutionProvider)")
    p.add_argument("--per-node", action=argparse.BooleanOptionalAction, default=True,
                   help="compare the first diverging step per node (default: on)")
    p.add_argument("--sarif", metavar="OUT", help="write the findings as SARIF 2.1.0")


def _add_zoo(sub: Any) -> None:
    try:
        from onnxsight.zoo.cli import register
    except ImportError:  # the zoo package is optional in a partial install
        p = sub.add_parser("zoo", help="the model-zoo verification job (not available in this install)")
        p.set_defaults(func=lambda _options: _zoo_missing())
        return
    register(sub)


def _zoo_missing() -> int:
    print("onnxsight zoo is not available in this install", file=sys.stderr)
    return EXIT_USAGE
