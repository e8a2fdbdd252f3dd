"""ONNX Runtime CPU latency of onnxsight's and torch.onnx's graphs, as exported and after ORT's transformer
optimizer, in the same run, interleaved.

Models: the BERT, GPT-2, ViT and LLaMA models of ``bench/ort_fusion.py`` (transformers configs, 4 layers,
hidden 256, 4 heads, sequence 16 / 64x64 images, random weights) and ResNet-50 (``bench/models.py``: its
architecture written out, torchvision does not import on this CPU torch; the transformer optimizer does not
apply to it, so it is timed as exported). Each is exported by both tools at batch 1 and at batch 8 (static
shapes, opset 18; onnxsight with ``optimize="ort-fusion"``, what a user of ORT's optimizer exports with). Where attention is a larger part of the time (``--long``, on by default, batch 1,
``--long-iters`` calls per round): BERT-base (12 layers, hidden 768, 12 heads) at sequence ``--seq`` (128)
and the small BERT at sequence 512 (attention about a quarter of its work), both called with an
``attention_mask`` whose last eighth is padding, and ViT-base (224x224 images: 197 tokens). Every session runs on one intra-op thread (the machine is shared: fewer threads,
less noise) with ORT's default session optimisations. After one untimed warm-up, each of ``--runs`` rounds
times every variant once, in turn (so drift hits all of them alike); a round times ``--iters`` calls and
keeps the mean. Reported: the median over rounds and the spread (max - min) / median.

    python bench/ort_latency.py [--models bert,gpt2,llama,vit,resnet50] [--long bert-base,bert-512,vit-base] [--seq 128]
                                [--runs 5] [--iters 20] [--long-iters 3] [--md out.md]
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
# Models where attention weighs more: name -> (ORT optimizer's model_type, heads, hidden)
LONG = {"bert-base": ("bert", 12, 768), "bert-512": ("bert", ort_fusion.HEADS, ort_fusion.HIDDEN),
        "vit-base": ("vit", 12, 768)}


def _build(name: str, batch: int, seq: int) -> tuple[Any, tuple]:
    import torch

    torch.manual_seed(0)
    if name == "resnet50":
        from models import ResNet50

        return ResNet50().eval(), (torch.randn(batch, 3, 224, 224),)
    if name in LONG:
        import transformers as tf

        base = dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072)
        if name == "bert-512":
            seq, base = 512, dict(num_hidden_layers=ort_fusion.LAYERS, hidden_size=ort_fusion.HIDDEN,
                                  num_attention_heads=ort_fusion.HEADS, intermediate_size=4 * ort_fusion.HIDDEN)
        if name == "vit-base":
            model: Any = tf.ViTModel(tf.ViTConfig(image_size=224, patch_size=16, **base), add_pooling_layer=False)
            args: tuple = (torch.randn(batch, 3, 224, 224),)
        else:
            model = tf.BertModel(tf.BertConfig(vocab_size=1000, max_position_embeddings=512, **base),
                                 add_pooling_layer=False)
            mask = torch.ones(batch, seq, dtype=torch.int64)
            mask[:, seq - seq // 8:] = 0
            args = (torch.randint(0, 1000, (batch, seq)), mask)
        model.config.use_cache, model.config.return_dict = False, False
        return model.eval(), args
    return ort_fusion.build(name, batch)


def _fusion(name: str) -> tuple[str, int, int] | None:
    """(model_type, heads, hidden) for ORT's transformer optimizer; None where it does not apply."""
    if name in LONG:
        return LONG[name]
    if name in ort_fusion.MODEL_TYPES:
        return ort_fusion.MODEL_TYPES[name], ort_fusion.HEADS, ort_fusion.HIDDEN
    return None


def _session(path: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def prepare(settings: list[tuple[str, int]], seq: int, tmp: str) -> list[dict]:
    """Export every (model, batch) with both tools, optimise where the transformer optimizer applies."""
    variants = []
    for name, batch in settings:
        model, args = _build(name, batch, seq)
        fusion = _fusion(name)
        for tool in TOOLS:
            path = os.path.join(tmp, f"{name}-{batch}-{tool}.onnx")
            try:
                # onnxsight with optimize="ort-fusion": the export a user who runs ORT's optimizer asks for
                ort_fusion.export("onnxsight ort-fusion" if tool == "onnxsight" else tool, model, args, path, 18)
            except Exception as exc:  # noqa: BLE001
                variants.append({"model": name, "batch": batch, "tool": tool, "stage": "exported",
                                 "error": f"export failed: {type(exc).__name__}"})
                continue
            variants.append({"model": name, "batch": batch, "tool": tool, "stage": "exported", "path": path,
                             "args": args, "nodes": _nodes(path)})
            if fusion is None:
                continue
            out = path.replace(".onnx", "-opt.onnx")
            fused, optimized = ort_fusion.optimize(path, fusion[0], out, heads=fusion[1], hidden=fusion[2],
                                                     **ort_fusion.OPTIONS.get(name, {}))
            entry = {"model": name, "batch": batch, "tool": tool, "stage": "ORT-optimized",
                     "fused": ort_fusion.fused_text(fused),
                     "attention": (fused.get("Attention", 0) + fused.get("MultiHeadAttention", 0)
                                   if isinstance(fused, dict) else None)}
            if optimized is None:
                entry["error"] = f"optimizer failed: {fused}"
            else:
                entry.update(path=out, args=args, nodes=len(optimized.model.graph.node))
            variants.append(entry)
    return variants


def _nodes(path: str) -> int:
    import onnx

    return len(onnx.load(path, load_external_data=False).graph.node)


def _feeds(session: Any, args: tuple) -> dict[str, Any]:
    """The example inputs in the dtypes the model takes (ORT's optimizer may make a mask input int32)."""
    import numpy as np

    dtypes = {"tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(float)": np.float32}
    return {i.name: a.numpy().astype(dtypes.get(i.type, a.numpy().dtype)) for i, a in zip(session.get_inputs(), args)}


def measure(variants: list[dict], runs: int, iters: int, long_iters: int) -> None:
    live = [v for v in variants if "error" not in v]
    for v in live:
        v["session"] = _session(v["path"])
        v["feeds"] = _feeds(v["session"], v["args"])
        v["session"].run(None, v["feeds"])  # warm-up, untimed
        v["times"] = []
    for _ in range(runs):
        for v in live:
            start = time.perf_counter()
            calls = long_iters if v["model"] in LONG else iters
            for _ in range(calls):
                v["session"].run(None, v["feeds"])
            v["times"].append((time.perf_counter() - start) / calls * 1000)
    for v in live:
        median = statistics.median(v["times"])
        v["median_ms"], v["spread"] = median, (max(v["times"]) - min(v["times"])) / median
        del v["session"], v["feeds"]


def table(variants: list[dict]) -> str:
    lines = ["| model | batch | graph | nodes onnxsight / torch.onnx | Attention fused onnxsight / torch.onnx | "
             "ms onnxsight | ms torch.onnx | onnxsight / torch.onnx |", "|---|---|---|---|---|---|---|---|"]
    keys = dict.fromkeys((v["model"], v["batch"], v["stage"]) for v in variants)
    by = {(v["model"], v["batch"], v["stage"], v["tool"]): v for v in variants}

    def ms(v: dict | None) -> str:
        if v is None or "median_ms" not in v:
            return (v or {}).get("error", "n/a")
        return f"{v['median_ms']:.2f} ±{v['spread'] * 50:.0f}%"

    for model, batch, stage in keys:
        ours, theirs = by.get((model, batch, stage, "onnxsight")), by.get((model, batch, stage, "torch.onnx"))
        nodes = " / ".join(str((v or {}).get("nodes", "-")) for v in (ours, theirs))
        attention = " / ".join(str(v["attention"]) if v and v.get("attention") is not None else "-"
                               for v in (ours, theirs)) if stage == "ORT-optimized" else "-"
        ratio = (f"{ours['median_ms'] / theirs['median_ms']:.2f}" if ours and theirs and "median_ms" in ours
                 and "median_ms" in theirs else "-")
        lines.append(f"| {model} | {batch} | {stage} | {nodes} | {attention} | {ms(ours)} | {ms(theirs)} | "
                     f"{ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,gpt2,llama,vit,resnet50")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--long", default=",".join(LONG), help="BERT-/ViT-base-shaped models, batch 1 ('' for none)")
    parser.add_argument("--seq", type=int, default=128, help="bert-base's sequence length")
    parser.add_argument("--long-iters", type=int, default=3, help="calls per round for the --long models")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--md", help="write the table here too")
    parser.add_argument("--json", help="write every variant's times here")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        settings = [(name, int(batch)) for name in options.models.split(",") if name
                    for batch in options.batches.split(",")]
        settings += [(name, 1) for name in options.long.split(",") if name]
        variants = prepare(settings, options.seq, tmp)
        measure(variants, options.runs, options.iters, options.long_iters)
    text = table(variants)
    print(text)
    write(text, variants, options.md, options.json, omit=("args", "path"))


def write(text: str, rows: list[dict], md: str | None, json_path: str | None, omit: tuple[str, ...]) -> None:
    """The table to ``md`` and every row (less ``omit``, the arrays and paths) to ``json_path``, where given."""
    if md:
        with open(md, "w") as handle:
            handle.write(text + "\n")
    if json_path:
        with open(json_path, "w") as handle:
            json.dump([{k: v for k, v in row.items() if k not in omit} for row in rows], handle, indent=1)


if __name__ == "__main__":
    main()
