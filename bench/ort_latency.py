"""ONNX Runtime CPU latency of onnxsight's and torch.onnx's graphs, as exported and after each fuser (ORT's
transformer optimizer, onnxscript's ``optimize_for_ort``, both at their defaults), in the same run, interleaved.

Models: the BERT, GPT-2, ViT and LLaMA models of ``bench/ort_fusion.py`` (transformers configs, 4 layers,
hidden 256, 4 heads, sequence 16 / 64x64 images, random weights) and ResNet-50 (``bench/models.py``: its
architecture written out, torchvision does not import on this CPU torch; the transformer optimizer does not
apply to it, so it is timed as exported; its batch norms get random statistics, as a trained network has, since
torch.onnx drops the all-zero biases that folding a fresh network's batch norms gives). Each is exported by both tools at batch 1 and at batch 8 (static
shapes, opset 18, both exporters at their defaults). Where attention is a larger part of the time (``--long``, on by default, batch 1,
``--long-iters`` calls per round): BERT-base (12 layers, hidden 768, 12 heads) at sequence ``--seq`` (128)
and the small BERT at sequence 512 (attention about a quarter of its work), both called with an
``attention_mask`` whose last eighth is padding, and ViT-base (224x224 images: 197 tokens). Every session runs on one intra-op thread (the machine is shared: fewer threads,
less noise) with ORT's default session optimisations. After one untimed warm-up, each of ``--runs`` rounds
times every variant once, in turn (so drift hits all of them alike); a round times ``--iters`` calls and
keeps the mean. Reported: the median over rounds and the spread (max - min) / median, and the ratio
onnxsight / torch.onnx as the median of the rounds' ratios with their range (a round's two times share its load).

``--decode llama-cache,gpt2-cache`` adds decode steps over a KV cache (``ort_fusion.build``'s models: 16 past
positions at export, exported with dynamic batch, new tokens and past length, as a generation loop runs them),
timed with one new token per sequence and ``DECODE_PAST`` cached positions.

Each exported model is then fused by ``optimize_model(path, model_type=..., num_heads=..., hidden_size=...)`` at its
default ``opt_level`` (the ``ORT-optimized`` rows) and by ``onnxscript.rewriter.ort_fusions.optimize_for_ort``
(``onnxscript-optimized``); a fuser that fails, or whose model ONNX Runtime does not load, is a row saying so.

``--device cuda`` times the sessions on ONNX Runtime's CUDA execution provider (onnxruntime-gpu) instead, with
the inputs copied to the GPU once and the outputs left there (IO binding: the time is the model's, not the
copies'), and runs the optimizer with ``use_gpu=True``; ``--float16`` adds the optimized models converted to half
precision (``convert_float_to_float16(keep_io_types=True)``, what the optimizer's ``--float16`` does). ``--save DIR`` exports and stops, writing the exported
models without their large float weights (more than ``STRIP`` elements; their shapes and dtypes are kept) and
the inputs; ``--load DIR`` times such a folder on a machine that has ONNX Runtime but not this project's torch
(a GPU machine without torch 2.13), refilling each stripped weight with seeded normal draws (std 0.02) of its
shape and dtype: ORT's kernels take the same time whatever the values, and every other initializer (shapes,
masks, scales, small tables, which the optimizer's pattern matching may read) travels as exported.

    python bench/ort_latency.py [--models bert,gpt2,llama,vit,resnet50] [--long bert-base,bert-512,vit-base] [--seq 128]
                                [--runs 5] [--iters 20] [--long-iters 3] [--device cpu|cuda] [--md out.md]
                                [--decode llama-cache,gpt2-cache] [--save DIR | --load DIR]
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


# Decode steps over a KV cache (``--decode``): exported with dynamic batch, new tokens and past length (the only
# way ORT's optimizer fuses their attention), timed with one new token and DECODE_PAST cached positions.
DECODE = ("llama-cache", "gpt2-cache")
DECODE_PAST = 64   # the models hold 128 positions (n_positions, max_position_embeddings)


def _build(name: str, batch: int, seq: int) -> tuple[Any, tuple]:
    import torch

    torch.manual_seed(0)
    if name == "resnet50":
        from models import ResNet50

        model = ResNet50().eval()
        with torch.no_grad():  # a trained network's statistics: a fresh one's (bias 0) lets an exporter drop biases
            for norm in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):
                norm.running_mean.normal_(0, 0.1), norm.running_var.uniform_(0.5, 1.5)
                norm.weight.normal_(1, 0.1), norm.bias.normal_(0, 0.1)
        return model, (torch.randn(batch, 3, 224, 224),)
    if name == "vit-base":
        import transformers as tf

        config = tf.ViTConfig(image_size=224, patch_size=16, num_hidden_layers=12, hidden_size=768,
                              num_attention_heads=12, intermediate_size=3072)
        model: Any = tf.ViTModel(config, add_pooling_layer=False)
        model.config.use_cache, model.config.return_dict = False, False
        return model.eval(), (torch.randn(batch, 3, 224, 224),)
    if name == "bert-base":
        return padded_bert(batch, seq, layers=12, hidden=768, heads=12)
    if name == "bert-512":
        return padded_bert(batch, 512, layers=ort_fusion.LAYERS, hidden=ort_fusion.HIDDEN, heads=ort_fusion.HEADS)
    return ort_fusion.build(name, batch)


def padded_bert(batch: int, seq: int, *, layers: int, hidden: int, heads: int) -> tuple[Any, tuple]:
    """BERT (random weights, 512 positions, eval mode) and (input_ids, attention_mask), the mask's last eighth
    padding."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    config = tf.BertConfig(vocab_size=1000, max_position_embeddings=512, num_hidden_layers=layers,
                           hidden_size=hidden, num_attention_heads=heads, intermediate_size=4 * hidden)
    model = tf.BertModel(config, add_pooling_layer=False)
    model.config.use_cache, model.config.return_dict = False, False
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[:, seq - seq // 8:] = 0
    return model.eval(), (torch.randint(0, 1000, (batch, seq)), mask)


def _fusion(name: str) -> tuple[str, int, int] | None:
    """(model_type, heads, hidden) for ORT's transformer optimizer; None where it does not apply."""
    if name in LONG:
        return LONG[name]
    if name in ort_fusion.MODEL_TYPES:
        return ort_fusion.MODEL_TYPES[name], ort_fusion.HEADS, ort_fusion.HIDDEN
    return None


def session(path: str, device: str = "cpu", profile_prefix: str | None = None) -> Any:
    """One ORT session on one intra-op thread (CPU) or on the CUDA execution provider, with ORT's default
    optimisations; ORT's profiler writing to ``profile_prefix`` where given."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    if device == "cpu":
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    if hasattr(ort, "preload_dlls"):  # onnxruntime-gpu: CUDA and cuDNN from the nvidia-* wheels, where installed
        ort.preload_dlls()
    made = ort.InferenceSession(path, options, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    if made.get_providers()[0] != "CUDAExecutionProvider":  # ORT falls back to CPU silently otherwise
        raise RuntimeError(f"no CUDA execution provider in this onnxruntime ({ort.get_available_providers()})")
    return made


def prepare(settings: list[tuple[str, int]], seq: int, tmp: str) -> list[dict]:
    """Export every (model, batch) with both tools; the inputs as numpy arrays (``feeds``)."""
    variants = []
    for name, batch in settings:
        model, args = _build(name, batch, seq)
        feeds = _decode_feeds(name, batch) if name in DECODE else [a.numpy() for a in args]
        for tool in TOOLS:
            path = os.path.join(tmp, f"{name}-{batch}-{tool}.onnx")
            if name in DECODE:   # afresh: an export runs forward(), which appends to the DynamicCache
                model, args = _build(name, batch, seq)
            try:
                ort_fusion.export(tool, model, args, path, 18,
                                  ort_fusion.dynamic_shapes(name) if name in DECODE else None)
            except Exception as exc:  # noqa: BLE001
                variants.append({"model": name, "batch": batch, "tool": tool, "stage": "exported",
                                 "error": f"export failed: {type(exc).__name__}"})
                continue
            variants.append({"model": name, "batch": batch, "tool": tool, "stage": "exported", "path": path,
                             "feeds": feeds, "nodes": _nodes(path)})
    return variants


def _decode_feeds(name: str, batch: int) -> list[Any]:
    """A decode step's inputs: one new token per sequence and a cache of ``DECODE_PAST`` positions per layer (the
    export's sizes are dynamic), in the graphs' input order (input_ids, then each layer's key and value)."""
    import numpy as np

    rng = np.random.default_rng(0)
    shape = (batch, ort_fusion.HEADS, DECODE_PAST, ort_fusion.HIDDEN // ort_fusion.HEADS)
    return [rng.integers(0, 1000, (batch, 1), dtype=np.int64),
            *(rng.standard_normal(shape, dtype=np.float32) for _ in range(2 * ort_fusion.LAYERS))]


# The fusers each exported model goes through (its rows' stage), at their defaults.
FUSERS = ("ORT-optimized", "onnxscript-optimized")


def optimize(variants: list[dict], device: str = "cpu", float16: bool = False) -> list[dict]:
    """The exported variants, each followed by its fused ones where the fusers apply: ORT's transformer optimizer
    (with ``float16``, that one converted to half precision too) and onnxscript's ``optimize_for_ort``."""
    out_variants = []
    for v in variants:
        out_variants.append(v)
        fusion = _fusion(v["model"])
        if fusion is None or "error" in v:
            continue
        out = v["path"].replace(".onnx", "-opt.onnx")
        options = {"use_gpu": True} if device == "cuda" else {}
        fused, optimized = ort_fusion.optimize(v["path"], fusion[0], out, heads=fusion[1], hidden=fusion[2],
                                                 **options)
        entry = {**{k: v[k] for k in ("model", "batch", "tool")}, "stage": FUSERS[0],
                 "fused": ort_fusion.fused_text(fused), "attention": _attention(fused)}
        if optimized is None:
            entry["error"] = f"optimizer failed: {fused}"
        else:
            entry.update(path=out, feeds=v["feeds"], nodes=len(optimized.model.graph.node))
        out_variants.append(entry)
        if float16 and optimized is not None:
            # what ORT's optimizer CLI does with --float16: weights and compute in half, inputs/outputs as they were
            optimized.convert_float_to_float16(keep_io_types=True)
            half = out.replace(".onnx", "-fp16.onnx")
            optimized.save_model_to_file(half)
            out_variants.append({**entry, "stage": f"{FUSERS[0]}, float16", "path": half,
                                 "nodes": len(optimized.model.graph.node)})
        rewritten, nodes, loads = ort_fusion.rewrite(v["path"])
        entry = {**{k: v[k] for k in ("model", "batch", "tool")}, "stage": FUSERS[1],
                 "fused": ort_fusion.fused_text(rewritten), "attention": _attention(rewritten)}
        if loads != "loads":
            entry["error"] = f"rewriter failed: {rewritten}" if not loads else f"ORT does not load it: {loads[:60]}"
        else:
            entry.update(path=v["path"].replace(".onnx", "-onnxscript.onnx"), feeds=v["feeds"], nodes=nodes)
        out_variants.append(entry)
    return out_variants


def _attention(fused: dict | str) -> int | None:
    """Attention ops a fuser made (any kind), None where it failed."""
    kinds = ("Attention", "MultiHeadAttention", "GroupQueryAttention")
    return sum(fused.get(k, 0) for k in kinds) if isinstance(fused, dict) else None


def _nodes(path: str) -> int:
    import onnx

    return len(onnx.load(path, load_external_data=False).graph.node)


# --save: float initializers with more elements than this travel as (shape, dtype) and are refilled by --load
STRIP = 4096
_FLOATS = {1: "float32", 10: "float16", 11: "float64"}


def save(variants: list[dict], folder: str) -> None:
    """The exported models without their large float weights, their inputs, and a manifest, into ``folder``."""
    import numpy as np
    import onnx

    os.makedirs(folder, exist_ok=True)
    manifest = []
    for i, v in enumerate(variants):
        entry = {k: v[k] for k in v if k not in ("path", "feeds")}
        if "error" not in v:
            model = onnx.load(v["path"])
            kept, stripped = [], []
            for init in model.graph.initializer:
                size = int(np.prod(init.dims)) if init.dims else 1
                if init.data_type in _FLOATS and size > STRIP:
                    stripped.append({"name": init.name, "dims": list(init.dims), "dtype": _FLOATS[init.data_type]})
                else:
                    kept.append(init)
            del model.graph.initializer[:]
            model.graph.initializer.extend(kept)
            entry.update(file=f"{i}.onnx", stripped=stripped, feeds=f"{i}.npz")
            onnx.save(model, os.path.join(folder, entry["file"]))
            np.savez(os.path.join(folder, entry["feeds"]), *v["feeds"])
        manifest.append(entry)
    with open(os.path.join(folder, "manifest.json"), "w") as handle:
        json.dump(manifest, handle, indent=1)


def load(folder: str, tmp: str) -> list[dict]:
    """``save``'s variants with their stripped weights refilled (seeded normal draws, std 0.02), under ``tmp``."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    with open(os.path.join(folder, "manifest.json")) as handle:
        manifest = json.load(handle)
    rng = np.random.default_rng(0)
    variants = []
    for entry in manifest:
        v = {k: entry[k] for k in entry if k not in ("file", "stripped", "feeds")}
        if "file" in entry:
            model = onnx.load(os.path.join(folder, entry["file"]))
            for spec in entry["stripped"]:
                values = (rng.standard_normal(spec["dims"], dtype=np.float32) * 0.02).astype(spec["dtype"])
                model.graph.initializer.append(numpy_helper.from_array(values, spec["name"]))
            v["path"] = os.path.join(tmp, os.path.basename(entry["file"]))
            onnx.save(model, v["path"])
            with np.load(os.path.join(folder, entry["feeds"])) as arrays:
                v["feeds"] = [arrays[f"arr_{j}"] for j in range(len(arrays.files))]
        variants.append(v)
    return variants


def named_feeds(made: Any, arrays: list[Any]) -> dict[str, Any]:
    """The example inputs (in the graph's input order) by name, in the dtypes the model takes (ORT's optimizer
    may make a mask input int32)."""
    import numpy as np

    dtypes = {"tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(float)": np.float32,
              "tensor(float16)": np.float16}
    return {i.name: a.astype(dtypes.get(i.type, a.dtype)) for i, a in zip(made.get_inputs(), arrays)}


def _caller(made: Any, feeds: dict[str, Any], device: str) -> Any:
    """A call of the model. On CUDA through IO binding: inputs copied to the GPU once, outputs left there."""
    if device == "cpu":
        return lambda: made.run(None, feeds)
    import onnxruntime as ort

    binding = made.io_binding()
    for name, array in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0))
    for output in made.get_outputs():
        binding.bind_output(output.name, "cuda", 0)
    return lambda: made.run_with_iobinding(binding)


def measure(variants: list[dict], runs: int, iters: int, long_iters: int | None = None,
            device: str = "cpu") -> None:
    """Median ms per call over ``runs`` interleaved rounds, after an untimed warm-up. A round makes a variant's
    own ``calls`` where it has them, else ``long_iters`` for the ``LONG`` models (where given), else ``iters``."""
    live = [v for v in variants if "error" not in v]
    for v in live:
        made = session(v["path"], device)
        v["call"] = _caller(made, named_feeds(made, v["feeds"]), device)
        v["call"]()  # warm-up, untimed
        v["times"] = []
    for _ in range(runs):
        for v in live:
            start = time.perf_counter()
            calls = v.get("calls") or (long_iters if long_iters is not None and v["model"] in LONG else iters)
            for _ in range(calls):
                v["call"]()
            v["times"].append((time.perf_counter() - start) / calls * 1000)
    for v in live:
        v["median_ms"], v["spread"] = median_spread(v["times"])
        del v["call"]


def median_spread(values: list[float]) -> tuple[float, float]:
    """The median of ``values`` and their spread, (max - min) / median (0 where the median is)."""
    median = statistics.median(values)
    return median, (max(values) - min(values)) / median if median else 0.0


def round_ratio(ours: dict | None, theirs: dict | None) -> str:
    """The median of the per-round ratios ``ours / theirs`` and their range, ``0.95 (0.93-1.03)``.

    The two variants run one after the other in every round, so a round's ratio cancels what the machine's load
    did to that round; the median of those ratios holds on a shared machine where the ratio of the two medians
    (each taken over rounds of different load) moves with the noise."""
    if not (ours and theirs and ours.get("times") and theirs.get("times")):
        return "-"
    ratios = [a / b for a, b in zip(ours["times"], theirs["times"])]
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def table(variants: list[dict]) -> str:
    lines = ["| model | batch | graph | nodes onnxsight / torch.onnx | attention fused onnxsight / torch.onnx | "
             "ms onnxsight | ms torch.onnx | onnxsight / torch.onnx per round |", "|---|---|---|---|---|---|---|---|"]
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
                               for v in (ours, theirs)) if stage != "exported" else "-"
        ratio = round_ratio(ours, theirs)
        lines.append(f"| {model} | {batch} | {stage} | {nodes} | {attention} | {ms(ours)} | {ms(theirs)} | "
                     f"{ratio} |")
    return "\n".join(lines)


def timing_options(parser: argparse.ArgumentParser, iters: int) -> None:
    """The options every latency script here takes: rounds, calls per round, device, where to write."""
    parser.add_argument("--runs", type=int, default=5, help="timed rounds, after one untimed warm-up")
    parser.add_argument("--iters", type=int, default=iters, help="calls per round (the mean is kept)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="ORT's CPU (one intra-op thread) or CUDA execution provider (onnxruntime-gpu)")
    parser.add_argument("--md", help="write the table here too")
    parser.add_argument("--json", help="write every variant's times here")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,gpt2,llama,vit,resnet50")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--long", default=",".join(LONG), help="BERT-/ViT-base-shaped models, batch 1 ('' for none)")
    parser.add_argument("--seq", type=int, default=128, help="bert-base's sequence length")
    parser.add_argument("--long-iters", type=int, default=3, help="calls per round for the --long models")
    parser.add_argument("--decode", default="", help=f"decode steps over a KV cache ({', '.join(DECODE)}), "
                        "at each of --batches ('' for none)")
    timing_options(parser, iters=20)
    parser.add_argument("--float16", action="store_true",
                        help="also time the ORT-optimized models converted to float16 (for --device cuda)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--save", metavar="DIR", help="export only: write the models (large weights stripped) here")
    where.add_argument("--load", metavar="DIR", help="time the models --save wrote (no torch needed)")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if options.load:
            variants = load(options.load, tmp)
        else:
            settings = [(name, int(batch)) for name in options.models.split(",") if name
                        for batch in options.batches.split(",")]
            settings += [(name, 1) for name in options.long.split(",") if name]
            settings += [(name, int(batch)) for name in options.decode.split(",") if name
                         for batch in options.batches.split(",")]
            variants = prepare(settings, options.seq, tmp)
            if options.save:
                save(variants, options.save)
                return
        variants = optimize(variants, options.device, options.float16)
        measure(variants, options.runs, options.iters, options.long_iters, options.device)
    text = table(variants)
    print(text)
    write(text, variants, options.md, options.json, omit=("feeds", "path"), header=_header(options, argv))


def _header(options: argparse.Namespace, argv: list[str] | None) -> str:
    """The generated page's title and how its table was measured."""
    import platform

    import onnxruntime

    device = "CUDA execution provider" if options.device == "cuda" else "CPU, one intra-op thread"
    command = " ".join(["python bench/ort_latency.py", *(argv if argv is not None else sys.argv[1:])])
    return (f"# ONNX Runtime latency, {options.device.upper()} (generated)\n\n"
            f"`{command}` (guide: [Graphs for ONNX Runtime](optimization.md)): onnxsight's and torch.onnx's "
            "exports of the same models at their defaults (opset 18), as exported and after each fuser at its "
            f"defaults; onnxruntime {onnxruntime.__version__}, {device}, {platform.machine()}. After an untimed "
            f"warm-up, {options.runs} rounds each time every variant in turn; a cell is the median over rounds and "
            "± half their range, the ratio the median of the rounds' ratios (each round times both exporters' "
            "graphs one after the other) with their range. Every round's time is in the JSON beside this page.\n")


def write(text: str, rows: list[dict], md: str | None, json_path: str | None, omit: tuple[str, ...],
          header: str = "") -> None:
    """The table (after ``header``, a generated page's title and method) to ``md`` and every row (less ``omit``,
    the arrays and paths) to ``json_path``, where given."""
    if md:
        with open(md, "w") as handle:
            handle.write((header + "\n" if header else "") + text + "\n")
    if json_path:
        with open(json_path, "w") as handle:
            json.dump([{k: v for k, v in row.items() if k not in omit} for row in rows], handle, indent=1)


if __name__ == "__main__":
    main()
