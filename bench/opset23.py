"""ONNX Runtime CPU latency of opset-23 graphs with and without the standard's own Attention and RMSNormalization.

From opset 23 onnxsight writes ``scaled_dot_product_attention`` as one ONNX ``Attention`` node and
RMS norms (``F.rms_norm``, and LLaMA's written-out ``pow/mean/rsqrt/mul``) as ``RMSNormalization``.
This measures whether ONNX Runtime runs those graphs faster than the same export with the
decomposed forms (``MatMul``/``Softmax`` attention, ``Pow``/``ReduceMean``/``Sqrt`` norms), on
BERT- and LLaMA-shaped models from ``transformers`` configs (``ort_fusion.build``: 4 layers,
hidden 256, 4 heads, random weights), batch 1, at two sequence lengths; as exported and after ORT's
transformer optimizer. Both variants of a model are exported in the same run at opset 23 and
timed interleaved (``ort_latency.measure``: one intra-op thread, an untimed warm-up, ``--runs``
rounds of ``--iters`` calls each; the median over rounds and the spread).

The variant without the direct ops is exported with ``custom_translations`` mapping
``scaled_dot_product_attention`` and ``rms_norm`` to their opset-22 translations (public: any user
can do the same) and the optimize stage's RMS-norm pass turned off for that export.

    python bench/opset23.py [--models bert,llama] [--seqs 16,128] [--runs 5] [--iters 20] [--md out.md]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from typing import Any, Iterator
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ort_fusion  # noqa: E402
import ort_latency  # noqa: E402

OPSET = 23
VARIANTS = ("direct ops", "decomposed")


@contextlib.contextmanager
def _decomposed() -> Iterator[dict]:
    """custom_translations for the opset-22 forms, and the RMS-norm pass off, while inside."""
    import torch
    from onnxsight.exporter.ops import attention, norm
    from onnxsight.exporter.optimize import _rmsnorm

    aten = torch.ops.aten
    table = {aten.scaled_dot_product_attention.default: attention.aten_scaled_dot_product_attention,
             aten.rms_norm.default: norm.aten_rms_norm}
    with mock.patch.object(_rmsnorm, "rms_norms", lambda graph: 0):
        yield table


def _export(model: Any, args: tuple, path: str, variant: str) -> None:
    import onnxsight

    with contextlib.ExitStack() as stack:
        table = stack.enter_context(_decomposed()) if variant == "decomposed" else None
        onnxsight.export(model, args, path, opset_version=OPSET, custom_translations=table)


def prepare(names: list[str], seqs: list[int], tmp: str, device: str = "cpu") -> list[dict]:
    import onnx
    import torch

    variants = []
    for name in names:
        model, _ = ort_fusion.build(name, 1)
        for seq in seqs:
            torch.manual_seed(0)
            args = (torch.randint(0, 1000, (1, seq)),)
            for variant in VARIANTS:
                path = os.path.join(tmp, f"{name}-{seq}-{variant.replace(' ', '_')}.onnx")
                _export(model, args, path, variant)
                graph = onnx.load(path, load_external_data=False).graph
                feeds = [a.numpy() for a in args]
                ops = {op: sum(n.op_type == op for n in graph.node) for op in ("Attention", "RMSNormalization")}
                base = {"model": name, "seq": seq, "variant": variant, "feeds": feeds}
                variants.append({**base, "stage": "exported", "path": path, "nodes": len(graph.node),
                                 "direct": ", ".join(f"{k} {v}" for k, v in ops.items() if v) or "none"})
                out = path.replace(".onnx", "-opt.onnx")
                fused, optimized = ort_fusion.optimize(path, ort_fusion.MODEL_TYPES[name], out,
                                                         **({"use_gpu": True} if device == "cuda" else {}))
                entry = {**base, "stage": "ORT-optimized", "fused": ort_fusion.fused_text(fused)}
                if optimized is None:
                    entry["error"] = f"optimizer failed: {fused}"
                else:
                    entry.update(path=out, nodes=len(optimized.model.graph.node))
                variants.append(entry)
    return variants


def table(variants: list[dict]) -> str:
    lines = ["| model | seq | graph | nodes direct / decomposed | ms direct ops | ms decomposed | direct / decomposed |",
             "|---|---|---|---|---|---|---|"]
    by = {(v["model"], v["seq"], v["stage"], v["variant"]): v for v in variants}

    def ms(v: dict) -> str:
        return f"{v['median_ms']:.2f} ±{v['spread'] * 50:.0f}%" if "median_ms" in v else v.get("error", "n/a")

    for model, seq, stage in dict.fromkeys((v["model"], v["seq"], v["stage"]) for v in variants):
        direct, plain = by[(model, seq, stage, "direct ops")], by[(model, seq, stage, "decomposed")]
        ratio = f"{direct['median_ms'] / plain['median_ms']:.2f}" if "median_ms" in direct and \
            "median_ms" in plain else "-"
        nodes = f"{direct.get('nodes', '-')} / {plain.get('nodes', '-')}"
        lines.append(f"| {model} | {seq} | {stage} | {nodes} | {ms(direct)} | {ms(plain)} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,llama")
    parser.add_argument("--seqs", default="16,128")
    ort_latency.timing_options(parser, iters=20)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        variants = prepare(options.models.split(","), [int(s) for s in options.seqs.split(",")], tmp, options.device)
        ort_latency.measure(variants, options.runs, options.iters, device=options.device)
    text = table(variants)
    print(text)
    for v in variants:
        print(f"{v['model']} seq {v['seq']} {v['variant']} {v['stage']}: "
              f"{v.get('direct') or v.get('fused') or v.get('error')}")
    ort_latency.write(text, variants, options.md, options.json, omit=("feeds", "path"))


if __name__ == "__main__":
    main()
