"""ORT's transformer optimizer and onnxscript's rewriter on onnxsight's and torch.onnx's graphs, same models, same run.

Small BERT, GPT-2, ViT and LLaMA models built from ``transformers`` configs
(4 layers, hidden 256, 4 heads, random weights: never from a hub; ``bert-mask`` is
BERT called with an ``attention_mask`` whose second half is padding; ``llama-gqa`` has 2 key/value heads for
4 query heads; ``llama-mask`` is LLaMA called with an ``attention_mask`` whose second half is padding;
``llama-cache`` and ``gpt2-cache`` are one decode step over a ``DynamicCache`` of 16 past
positions, torch.onnx getting the cache registered as a pytree node the way transformers' own exporter does,
``transformers.exporters.exporter_dynamo.register_cache_pytrees_for_model``), each exported
by onnxsight and by ``torch.onnx.export(..., dynamo=True)`` at the same opset, both at their defaults,
then run through ``onnxruntime.transformers.optimizer.optimize_model(path, model_type=..., num_heads=4,
hidden_size=256)`` at its default ``opt_level`` and through onnxscript's ``optimize_for_ort`` at its defaults.
Prints, per model and exporter, the node count as exported, the fused operators each fuser made and the nodes it
left, and whether ONNX Runtime loads onnxscript's model (``--md``/``--json``: the generated pages
docs/ort-fusion*.md; ``make test-ort-fusion`` verifies every fused model against PyTorch).

    python bench/ort_fusion.py [--models bert,gpt2,vit,llama] [--opset 18] [--json out.json] [--dynamic]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import sys
import tempfile
import warnings
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, HIDDEN, HEADS, SEQ = 4, 256, 4, 16
# model name -> ORT optimizer's model_type
MODEL_TYPES = {"bert": "bert", "gpt2": "gpt2", "vit": "vit", "llama": "gpt2"}
MODEL_TYPES["bert-mask"] = "bert"   # BERT called with (input_ids, attention_mask), the second half padding
MODEL_TYPES["llama-gqa"] = "gpt2"   # LLaMA with grouped-query attention: 2 key/value heads for 4 query heads
MODEL_TYPES["llama-cache"] = "gpt2"  # a LLaMA step over a KV cache: (input_ids, cache=DynamicCache), 16 past
MODEL_TYPES["gpt2-cache"] = "gpt2"   # the same for GPT-2
MODEL_TYPES["llama-mask"] = "gpt2"   # LLaMA called with (input_ids, attention_mask), the second half padding
# models whose attention fuses only with export(..., optimize="ort-fusion"): exported both ways
ORT_FUSION = ("bert-mask", "gpt2", "llama", "llama-gqa", "llama-cache", "gpt2-cache", "llama-mask")
# model name -> optimize_model's options for optimize="ort-fusion" (bench/ort_profile.py). NOTE: decoders at
# opt_level=0: model_type="gpt2" first runs ORT's level-1 optimisations, whose constant folding folds the
# Shape-based sizes and causal mask of a static-shape graph before the Python fusers look for them.
OPTIONS: dict[str, dict[str, Any]] = {name: {"opt_level": 0} for name in ORT_FUSION if name != "bert-mask"}
PAST = 16   # llama-cache: past positions in the cache
FUSED_OPS = ("Attention", "MultiHeadAttention", "GroupQueryAttention", "SkipLayerNormalization",
             "SkipSimplifiedLayerNormalization", "LayerNormalization", "SimplifiedLayerNormalization",
             "Gelu", "FastGelu", "BiasGelu", "RotaryEmbedding", "EmbedLayerNormalization")


def build(name: str, batch: int = 1) -> tuple[Any, tuple]:
    """The model (random weights, eval mode) and its example inputs."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    common = dict(num_hidden_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                  intermediate_size=4 * HIDDEN)
    ids = torch.randint(0, 1000, (batch, SEQ))
    if name == "bert":
        config = tf.BertConfig(vocab_size=1000, max_position_embeddings=128, **common)
        model: Any = tf.BertModel(config, add_pooling_layer=False)
        args: tuple = (ids,)
    elif name == "bert-mask":
        config = tf.BertConfig(vocab_size=1000, max_position_embeddings=128, **common)
        mask = torch.ones(batch, SEQ, dtype=torch.int64)
        mask[:, SEQ // 2:] = 0
        model, args = tf.BertModel(config, add_pooling_layer=False), (ids, mask)
    elif name in ("gpt2", "gpt2-cache"):
        config = tf.GPT2Config(vocab_size=1000, n_positions=128, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS)
        model, args = tf.GPT2Model(config), (ids,)
    elif name == "vit":
        config = tf.ViTConfig(image_size=64, patch_size=16, **common)
        model, args = tf.ViTModel(config, add_pooling_layer=False), (torch.randn(batch, 3, 64, 64),)
    elif name in ("llama", "llama-gqa", "llama-cache", "llama-mask"):
        config = tf.LlamaConfig(vocab_size=1000, max_position_embeddings=128, **common,
                                num_key_value_heads=HEADS // 2 if name == "llama-gqa" else HEADS)
        model, args = tf.LlamaModel(config), (ids,)
        if name == "llama-mask":
            mask = torch.ones(batch, SEQ, dtype=torch.int64)
            mask[:, SEQ // 2:] = 0
            args = (ids, mask)
    else:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODEL_TYPES)}")
    if name.endswith("-cache"):   # the inputs as keywords (the last element): the cache is forward()'s `cache`
        shape = (batch, HEADS, PAST, HIDDEN // HEADS)
        cache = tf.DynamicCache([(torch.randn(shape), torch.randn(shape)) for _ in range(LAYERS)])
        args = ({"input_ids": ids, "cache": cache},)
    model.config.use_cache = name.endswith("-cache")
    model.config.return_dict = False
    return model.eval(), args


def dynamic_shapes(name: str) -> dict[str, dict[int, str]]:
    """Dynamic batch (and sequence, where the model takes tokens) for ``--dynamic``."""
    if name == "vit":
        return {"pixel_values": {0: "batch"}}
    dims = {0: "batch", 1: "seq"}
    if name.endswith("-cache"):
        return {"input_ids": dims, "cache": [{0: "batch", 2: "past"}] * (2 * LAYERS)}
    if name in ("bert-mask", "llama-mask"):
        return {"input_ids": dims, "attention_mask": dict(dims)}
    return {"input_ids": dims}


def export(tool: str, model: Any, args: tuple, path: str, opset: int,
           dynamic: dict | None = None) -> None:
    """Export with ``tool`` ("onnxsight", "onnxsight ort-fusion" or "torch.onnx") at its defaults, to ``path``."""
    import torch

    quiet = io.StringIO()
    kwargs = args[-1] if args and isinstance(args[-1], dict) else None
    args = args[:-1] if kwargs is not None else args
    with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        warnings.simplefilter("ignore")
        if tool.startswith("onnxsight"):
            import onnxsight

            optimize = "ort-fusion" if tool == "onnxsight ort-fusion" else True
            onnxsight.export(model, args, path, kwargs=kwargs, opset_version=opset, optimize=optimize,
                             dynamic_shapes=dynamic)
        else:
            if dynamic is not None:   # torch.export's own dims: string names are onnxsight's shorthand
                dims = {n: torch.export.Dim(n, min=1 if n in ("batch", "past") else 2, max=128)
                        for n in ("batch", "seq", "past")}

                def convert(spec: Any) -> Any:
                    return [convert(s) for s in spec] if isinstance(spec, list) else {a: dims[n] for a, n in spec.items()}
                dynamic = {k: convert(v) for k, v in dynamic.items()}
            if kwargs is not None and "cache" in kwargs:   # as transformers' own exporter does
                from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model

                register_cache_pytrees_for_model(model)
            torch.onnx.export(model, args, path, kwargs=kwargs, dynamo=True, opset_version=opset, verbose=False,
                              dynamic_shapes=dynamic)


def histogram(path: str) -> collections.Counter:
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    return collections.Counter(node.op_type for node in graph.node)


def optimize(path: str, model_type: str, out: str | None = None, *, heads: int = HEADS,
             hidden: int = HIDDEN, **options: Any) -> tuple[dict[str, int] | str, Any]:
    """The optimizer's fused-op counts (non-zero ones), or the error it raised; and the optimized model."""
    from onnxruntime.transformers.optimizer import optimize_model

    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            optimized = optimize_model(path, model_type=model_type, num_heads=heads, hidden_size=hidden, **options)
    except Exception as exc:  # noqa: BLE001 - the optimizer crashing is a result to report
        return f"{type(exc).__name__}: {str(exc)[:80]}", None
    stats = optimized.get_fused_operator_statistics()
    if out is not None:
        optimized.save_model_to_file(out)
    return {op: n for op, n in stats.items() if n and op in FUSED_OPS}, optimized


def rewrite(path: str) -> tuple[dict[str, int] | str, int | None, str]:
    """onnxscript's ``optimize_for_ort`` at its defaults: the fused ops in the graph it gives (non-zero counts, or
    the error it raised), its node count, and whether ONNX Runtime loads it ("loads" or the error)."""
    import onnx_ir as ir
    import onnxruntime as ort
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    quiet = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            warnings.simplefilter("ignore")
            model, _ = optimize_for_ort(ir.load(path))
    except Exception as exc:  # noqa: BLE001 - the rewriter crashing is a result to report
        return f"{type(exc).__name__}: {str(exc)[:80]}", None, ""
    ops = collections.Counter(node.op_type for node in model.graph)
    out = path.replace(".onnx", "-onnxscript.onnx")
    ir.save(model, out)   # beside the export: its external data (torch.onnx's) resolves from there
    try:
        ort.InferenceSession(out, providers=["CPUExecutionProvider"])
        loads = "loads"
    except Exception as exc:  # noqa: BLE001
        loads = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    return {op: n for op, n in ops.items() if op in FUSED_OPS}, len(model.graph), loads


def run(models: list[str], opset: int, dynamic: bool = False, ort_fusion: bool = False) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            forms = ("onnxsight ort-fusion",) if ort_fusion and name in ORT_FUSION else ()
            for tool in ("onnxsight", *forms, "torch.onnx"):
                model, args = build(name)   # afresh: an export runs forward(), which appends to a DynamicCache
                path = os.path.join(tmp, f"{name}-{tool}.onnx")
                try:
                    export(tool, model, args, path, opset, dynamic_shapes(name) if dynamic else None)
                except Exception as exc:  # noqa: BLE001
                    error = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    rows.append({"model": name, "tool": tool, "error": f"{type(exc).__name__}: {error}"[:200]})
                    continue
                ops = histogram(path)
                fused, optimized = optimize(path, MODEL_TYPES[name])
                rewritten, rewritten_nodes, loads = rewrite(path)
                rows.append({"model": name, "tool": tool, "nodes": sum(ops.values()), "ops": dict(ops.most_common()),
                             "fused": fused, "fused_nodes": len(optimized.model.graph.node) if optimized else None,
                             "onnxscript": rewritten, "onnxscript_nodes": rewritten_nodes, "onnxscript_loads": loads})
    return rows


def fused_text(fused: dict | str) -> str:
    return fused if isinstance(fused, str) else ", ".join(f"{k} {v}" for k, v in sorted(fused.items())) or "none"


def table(rows: list[dict]) -> str:
    """One row per model and exporter: nodes as exported, then each fuser's fused ops and the nodes it leaves."""
    lines = ["| model | exporter | nodes | ORT `optimize_model` | nodes after | onnxscript `optimize_for_ort` | "
             "nodes after |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['tool']} | {r['error']} | | | | |")
            continue
        rewritten = fused_text(r["onnxscript"])
        if r.get("onnxscript_loads") not in ("loads", ""):
            rewritten += f" (ORT does not load it: {r['onnxscript_loads']})"
        lines.append(f"| {r['model']} | {r['tool']} | {r['nodes']} | {fused_text(r['fused'])} | "
                     f"{r.get('fused_nodes') or '-'} | {rewritten} | {r.get('onnxscript_nodes') or '-'} |")
    return "\n".join(lines)


def page(text: str, options: argparse.Namespace) -> str:
    """The generated page: a title, how the table was measured (versions, command), the table."""
    import onnxruntime
    import onnxscript
    import torch
    import transformers

    sizes = "a dynamic batch and sequence (and past length)" if options.dynamic else "static sizes"
    command = " ".join(["python bench/ort_fusion.py", *(["--dynamic"] if options.dynamic else []),
                        f"--opset {options.opset}" if options.opset != 18 else ""]).strip()
    return (f"# Fusions at the defaults, {sizes} (generated)\n\n"
            f"`{command}` (a `make bench-ort` step; the guide is [Graphs for ONNX Runtime](optimization.md)): "
            f"{LAYERS}-layer models from `transformers` configs (hidden {HIDDEN}, {HEADS} heads, sequence {SEQ}, "
            f"random weights), each exported by onnxsight and by `torch.onnx.export(..., dynamo=True)` at opset "
            f"{options.opset} with {sizes}, both at their defaults; then ONNX Runtime's "
            "`optimize_model(path, model_type=..., num_heads=..., hidden_size=...)` at its default `opt_level` and "
            "onnxscript's `optimize_for_ort(model)`. Node counts are `len(graph.node)`; a fuser's model that ONNX "
            f"Runtime does not load says so. torch {torch.__version__}, transformers {transformers.__version__}, "
            f"onnxruntime {onnxruntime.__version__}, onnxscript {onnxscript.__version__}.\n\n{text}\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODEL_TYPES))
    parser.add_argument("--opset", type=int, default=18)
    parser.add_argument("--json", help="also write the rows (op histograms included) here")
    parser.add_argument("--md", help="also write the table here, with how it was measured (a generated page)")
    parser.add_argument("--ops", action="store_true", help="print each graph's op histogram")
    parser.add_argument("--dynamic", action="store_true",
                        help="export with a dynamic batch (and sequence, for token models): dynamic_shapes=")
    parser.add_argument("--ort-fusion", action="store_true", help='also export with optimize="ort-fusion"')
    options = parser.parse_args(argv)
    rows = run(options.models.split(","), options.opset, options.dynamic, options.ort_fusion)
    if options.ops:
        for row in rows:
            print(row["model"], row["tool"], row.get("ops", row.get("error")))
    text = table(rows)
    print(text)
    if options.md:
        with open(options.md, "w") as handle:
            handle.write(page(text, options))
    if options.json:
        with open(options.json, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
