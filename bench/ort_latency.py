"""ONNX Runtime CPU latency of onnxsight's and torch.onnx's graphs, as exported and after ORT's transformer
optimizer, in the same run, interleaved.

Models: the BERT, GPT-2, ViT and LLaMA models of ``bench/ort_fusion.py`` (transformers configs, 4 layers,
hidden 256, 4 heads, sequence 16 / 64x64 images, random weights) and ResNet-50 (``bench/models.py``: its
architecture written out, torchvision does not import on this CPU torch; the transformer optimizer does not
apply to it, so it is timed as exported). Each model is exported by both tools at batch 1 and at batch 8
(static shapes, opset 18). Every session runs on one intra-op thread (the machine is shared: fewer threads,
less noise) with ORT's default session optimisations. After one untimed warm-up, each of ``--runs`` rounds
times every variant once, in turn (so drift hits all of them alike); a round times ``--iters`` calls and
keeps the mean. Reported: the median over rounds and the spread (max - min) / median.

    python bench/ort_latency.py [--models bert,gpt2,llama,vit,resnet50] [--runs 5] [--iters 20] [--md out.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ort_fusion  # noqa: E402

TOOLS = ("onnxsight", "torch.onnx")


def _build(name: str, batch: int) -> tuple[Any, tuple]:
    if name == "resnet50":
        import torch
        from models import ResNet50

        torch.manual_seed(0)
        return ResNet50().eval(), (torch.randn(batch, 3, 224, 224),)
    return ort_fusion.build(name, batch)


def _session(path: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def prepare(names: list[str], batches: list[int], tmp: str) -> list[dict]:
    """Export every model with both tools at every batch, optimise where the transformer optimizer applies."""
    import onnx

    variants = []
    for name in names:
        for batch in batches:
            model, args = _build(name, batch)
            for tool in TOOLS:
                path = os.path.join(tmp, f"{name}-{batch}-{tool}.onnx")
                try:
                    ort_fusion.export(tool, model, args, path, 18)
                except Exception as exc:  # noqa: BLE001
                    variants.append({"model": name, "batch": batch, "tool": tool, "stage": "exported",
                                     "error": f"export failed: {type(exc).__name__}"})
                    continue
                feeds = {i.name: a.numpy() for i, a in zip(onnx.load(path, load_external_data=False).graph.input,
                                                          args)}
                nodes = len(onnx.load(path, load_external_data=False).graph.node)
                variants.append({"model": name, "batch": batch, "tool": tool, "stage": "exported", "path": path,
                                 "feeds": feeds, "nodes": nodes})
                if name in ort_fusion.MODEL_TYPES:
                    out = path.replace(".onnx", "-opt.onnx")
                    fused, optimized = ort_fusion.optimize(path, ort_fusion.MODEL_TYPES[name], out)
                    entry = {"model": name, "batch": batch, "tool": tool, "stage": "ORT-optimized",
                             "fused": ort_fusion.fused_text(fused)}
                    if optimized is None:
                        entry["error"] = f"optimizer failed: {fused}"
                    else:
                        entry.update(path=out, feeds=feeds, nodes=len(optimized.model.graph.node))
                    variants.append(entry)
    return variants


def measure(variants: list[dict], runs: int, iters: int) -> None:
    live = [v for v in variants if "error" not in v]
    for v in live:
        v["session"] = _session(v["path"])
        v["session"].run(None, v["feeds"])  # warm-up, untimed
        v["times"] = []
    for _ in range(runs):
        for v in live:
            start = time.perf_counter()
            for _ in range(iters):
                v["session"].run(None, v["feeds"])
            v["times"].append((time.perf_counter() - start) / iters * 1000)
    for v in live:
        median = statistics.median(v["times"])
        v["median_ms"], v["spread"] = median, (max(v["times"]) - min(v["times"])) / median
        del v["session"]


def table(variants: list[dict]) -> str:
    lines = ["| model | batch | graph | nodes onnxsight / torch.onnx | ms onnxsight | ms torch.onnx | "
             "onnxsight / torch.onnx |", "|---|---|---|---|---|---|---|"]
    keys = dict.fromkeys((v["model"], v["batch"], v["stage"]) for v in variants)
    by = {(v["model"], v["batch"], v["stage"], v["tool"]): v for v in variants}

    def ms(v: dict | None) -> str:
        if v is None or "median_ms" not in v:
            return (v or {}).get("error", "n/a")
        return f"{v['median_ms']:.2f} ±{v['spread'] * 50:.0f}%"

    for model, batch, stage in keys:
        ours, theirs = by.get((model, batch, stage, "onnxsight")), by.get((model, batch, stage, "torch.onnx"))
        nodes = " / ".join(str((v or {}).get("nodes", "-")) for v in (ours, theirs))
        ratio = (f"{ours['median_ms'] / theirs['median_ms']:.2f}" if ours and theirs and "median_ms" in ours
                 and "median_ms" in theirs else "-")
        lines.append(f"| {model} | {batch} | {stage} | {nodes} | {ms(ours)} | {ms(theirs)} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,gpt2,llama,vit,resnet50")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--md", help="write the table here too")
    parser.add_argument("--json", help="write every variant's times here")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        variants = prepare(options.models.split(","), [int(b) for b in options.batches.split(",")], tmp)
        measure(variants, options.runs, options.iters)
    text = table(variants)
    print(text)
    if options.md:
        with open(options.md, "w") as handle:
            handle.write(text + "\n")
    if options.json:
        with open(options.json, "w") as handle:
            json.dump([{k: v for k, v in row.items() if k not in ("feeds", "path")} for row in variants], handle,
                      indent=1)


if __name__ == "__main__":
    main()
