"""ONNX Runtime CPU latency of opset-23 graphs with and without the standard's Attention, RMSNormalization and
RotaryEmbedding.

From opset 23 onnxsight writes ``scaled_dot_product_attention`` as one ONNX ``Attention`` node (K and V with their
own heads where transformers repeated them, ``repeat_kv``), RMS norms (``F.rms_norm``, and LLaMA's written-out
``pow/mean/rsqrt/mul``) as ``RMSNormalization`` and transformers' rotary embedding as ``RotaryEmbedding``.
This measures whether ONNX Runtime runs those graphs faster than the same export with the decomposed forms
(``MatMul``/``Softmax`` attention, ``Pow``/``ReduceMean``/``Sqrt`` norms, ``Slice``/``Neg``/``Concat``/``Mul``
rotaries), on BERT- and LLaMA-shaped models
from ``transformers`` configs (``ort_fusion.build``: 4 layers, hidden 256, 4 heads, random weights;
``llama-gqa`` with 2 key/value heads), batch 1, at each of ``--seqs``; as exported and after ORT's transformer
optimizer. Both variants of a model are exported in the same run at opset 23 and timed interleaved
(``ort_latency.measure``: one intra-op thread, an untimed warm-up, ``--runs`` rounds of ``--iters`` calls
each; the median over rounds and the spread).

The variant without the direct ops is exported with ``custom_translations`` mapping
``scaled_dot_product_attention`` and ``rms_norm`` to their opset-22 translations (public: any user
can do the same) and the optimize stage's RMS-norm and rotary-embedding passes turned off for that export.

The LLaMAs are also timed with the rotary embedding and ``repeat_kv`` written out (the RotaryEmbedding and
grouped-query passes off: the opset-23 graph before them), and ``llama-gqa`` with ``repeat_kv`` alone kept.
``llama-gqa`` (grouped-query attention: 2 key/value heads for 4 query heads) gets more variants, timed in
the same rounds: onnxsight's opset-23 export with transformers calling ``scaled_dot_product_attention`` with
``enable_gqa=True`` (``TRANSFORMERS_SDPA_FORCE_GQA=1``: under ``torch.export`` transformers always builds
its causal mask, and with a mask it repeats K and V to the query heads first, ``repeat_kv``, unless told so),
whose ``Attention`` nodes take K and V with 2 heads; and ``torch.onnx.export(..., dynamo=True)`` at opset 23
(with and without that variable) and at its default opset 18. Every timed graph is checked against PyTorch
(its first output's largest difference), and onnxsight's, as exported and ORT-optimized, with
``onnxsight.verify`` (``onnx_model=`` the optimized model).

    python bench/opset23.py [--models bert,llama,llama-gqa] [--seqs 16,128] [--runs 5] [--iters 20] [--md out.md]
    python bench/opset23.py --decode 512 [--runs 7] [--iters 20]   # llama-gqa, one step over 512 cached positions
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
# grouped-query models: (variant, exporter, opset, transformers calls sdpa with enable_gqa=True), timed too
GQA_MODELS = ("llama-gqa",)
GQA_VARIANTS = (("direct ops, enable_gqa", "onnxsight", OPSET, True),
                ("torch.onnx", "torch.onnx", OPSET, False),
                ("torch.onnx, enable_gqa", "torch.onnx", OPSET, True),
                ("torch.onnx opset 18", "torch.onnx", 18, False))
# rotary models: also timed with the rotary written out and repeat_kv kept (the RotaryEmbedding and grouped-query
# passes off: the opset-23 graph as it was before them), to measure those two alone
ROTARY_MODELS = ("llama", "llama-gqa")
WRITTEN = "direct ops, rotary written out"
# grouped-query models: also with the RotaryEmbedding pass on and repeat_kv kept (the grouped-query pass alone off)
REPEATED = "direct ops, repeat_kv kept"
# transformers (integrations/sdpa_attention.py, use_gqa_in_sdpa) passes enable_gqa=True with a mask only when
# this is "1"; otherwise it repeats K and V to the query heads (repeat_kv) before sdpa
FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"


@contextlib.contextmanager
def _decomposed() -> Iterator[dict]:
    """custom_translations for the opset-22 forms, and the RMS-norm and rotary-embedding passes off, while inside."""
    import torch
    from onnxsight.exporter.ops import attention, norm
    from onnxsight.exporter.optimize import _rmsnorm, _rope23

    aten = torch.ops.aten
    table = {aten.scaled_dot_product_attention.default: attention.aten_scaled_dot_product_attention,
             aten.rms_norm.default: norm.aten_rms_norm}
    with mock.patch.object(_rmsnorm, "rms_norms", lambda graph: 0), \
            mock.patch.object(_rope23, "rotary_embeddings", lambda graph: 0):
        yield table


@contextlib.contextmanager
def _passes_off(variant: str) -> Iterator[None]:
    """The grouped-query pass (repeat_kv dropped) off while inside, and for ``WRITTEN`` the RotaryEmbedding pass."""
    from onnxsight.exporter.optimize import _gqa23, _rope23

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(_gqa23, "unrepeated_key_values", lambda graph: 0))
        if variant == WRITTEN:
            stack.enter_context(mock.patch.object(_rope23, "rotary_embeddings", lambda graph: 0))
        yield


def _gqa(on: bool) -> Any:
    """transformers calling sdpa with ``enable_gqa=True`` (K and V keep their heads) while inside, where ``on``."""
    return mock.patch.dict(os.environ, {FORCE_GQA: "1"}) if on else contextlib.nullcontext()


def _export(model: Any, args: tuple, path: str, variant: str) -> Any:
    """The onnxsight export of ``variant`` (its ONNXProgram), or torch.onnx's (None)."""
    import onnxsight

    spec = next((v for v in GQA_VARIANTS if v[0] == variant), (variant, "onnxsight", OPSET, False))
    with contextlib.ExitStack() as stack:
        stack.enter_context(_gqa(spec[3]))
        if spec[1] == "torch.onnx":
            ort_fusion.export("torch.onnx", model, args, path, spec[2])
            return None
        table = stack.enter_context(_decomposed()) if variant == "decomposed" else None
        if variant in (WRITTEN, REPEATED):
            stack.enter_context(_passes_off(variant))
        return onnxsight.export(model, args, path, opset_version=OPSET, custom_translations=table)


def check(model: Any, args: tuple, path: str, program: Any = None, optimized: Any = None,
          gqa: bool = False) -> str:
    """What was checked of the graph at ``path`` against PyTorch: its first output's largest difference from the
    eager model's, and for onnxsight's (``program``) the per-node verification (of ``optimized`` where given)."""
    import numpy as np
    import onnxruntime as ort
    import torch

    import onnxsight

    with torch.no_grad():
        expected = model(*args)[0].numpy()
    made = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = made.run(None, {i.name: a.numpy() for i, a in zip(made.get_inputs(), args)})[0]
    text = f"max |diff| {float(np.abs(got - expected).max()):.1e}"
    if program is None:
        return text
    with _gqa(gqa):
        result = onnxsight.verify(program, args, onnx_model=optimized)
    return f"{text}, verify {'passed' if result.passed else 'FAILED: ' + str(result.root_causes)[:200]}"


def prepare(names: list[str], seqs: list[int], tmp: str, device: str = "cpu") -> list[dict]:
    import onnx
    import torch

    variants = []
    for name in names:
        model, _ = ort_fusion.build(name, 1)
        for seq in seqs:
            torch.manual_seed(0)
            args = (torch.randint(0, 1000, (1, seq)),)
            extra = (*((WRITTEN,) if name in ROTARY_MODELS else ()), *((REPEATED,) if name in GQA_MODELS else ()),
                     *(v[0] for v in GQA_VARIANTS if name in GQA_MODELS))
            for variant in (*VARIANTS, *extra):
                gqa = variant.endswith("enable_gqa")
                path = os.path.join(tmp, f"{name}-{seq}-{variant.replace(' ', '_').replace(',', '')}.onnx")
                base = {"model": name, "seq": seq, "variant": variant, "feeds": [a.numpy() for a in args]}
                try:
                    program = _export(model, args, path, variant)
                except Exception as exc:  # noqa: BLE001 - an exporter failing is a result to report
                    for stage in ("exported", "ORT-optimized"):
                        variants.append({**base, "stage": stage, "error": f"export failed: {type(exc).__name__}"})
                    continue
                nodes = len(onnx.load(path, load_external_data=False).graph.node)
                variants.append({**base, "stage": "exported", "path": path, "nodes": nodes,
                                 "direct": _direct_ops(path), "check": check(model, args, path, program, gqa=gqa)})
                out = path.replace(".onnx", "-opt.onnx")
                fused, optimized = ort_fusion.optimize(path, ort_fusion.MODEL_TYPES[name], out,
                                                         **({"use_gpu": True} if device == "cuda" else {}))
                entry = {**base, "stage": "ORT-optimized", "fused": ort_fusion.fused_text(fused)}
                if optimized is None:
                    entry["error"] = f"optimizer failed: {fused}"
                else:
                    entry.update(path=out, nodes=len(optimized.model.graph.node),
                                 check=check(model, args, out, program, optimized.model, gqa))
                variants.append(entry)
    return variants


def _direct_ops(path: str) -> str:
    """The standard's ops in the graph at ``path``, and how many key/value heads its Attention nodes take."""
    import onnx

    graph = onnx.shape_inference.infer_shapes(onnx.load(path)).graph
    shapes = {v.name: v.type.tensor_type.shape.dim for v in (*graph.value_info, *graph.input)}
    text = [f"{op} {n}" for op in ("Attention", "RMSNormalization", "RotaryEmbedding")
            if (n := sum(node.op_type == op for node in graph.node))]
    heads = {shapes[node.input[1]][1].dim_value for node in graph.node
             if node.op_type == "Attention" and len(shapes.get(node.input[1], ())) == 4}
    return ", ".join(text + ([f"K/V heads {', '.join(map(str, sorted(heads)))}"] if heads else [])) or "none"


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


def gqa_table(variants: list[dict]) -> str:
    """The grouped-query models' variants, and the rotary written out, against onnxsight's default opset-23 export
    (direct ops)."""
    lines = ["| model | seq | graph | export | nodes | ms | / onnxsight direct ops |",
             "|---|---|---|---|---|---|---|"]
    by = {(v["model"], v["seq"], v["stage"], v["variant"]): v for v in variants}
    names = {"direct ops": "onnxsight 23", "decomposed": "onnxsight 23, decomposed",
             "direct ops, enable_gqa": "onnxsight 23, enable_gqa", "torch.onnx": "torch.onnx 23",
             "torch.onnx, enable_gqa": "torch.onnx 23, enable_gqa", "torch.onnx opset 18": "torch.onnx 18",
             WRITTEN: "onnxsight 23, rotary and repeat_kv written out", REPEATED: "onnxsight 23, repeat_kv kept"}
    for v in variants:
        if v["model"] not in GQA_MODELS and v["variant"] != WRITTEN and "decode" not in v["model"]:
            continue
        base = by[(v["model"], v["seq"], v["stage"], "direct ops")]
        ms = f"{v['median_ms']:.2f} ±{v['spread'] * 50:.0f}%" if "median_ms" in v else v.get("error", "n/a")
        ratio = f"{v['median_ms'] / base['median_ms']:.2f}" if "median_ms" in v and "median_ms" in base else "-"
        lines.append(f"| {v['model']} | {v['seq']} | {v['stage']} | {names[v['variant']]} | {v.get('nodes', '-')} | "
                     f"{ms} | {ratio} |")
    return "\n".join(lines)


# --decode PAST: one decode step of llama-gqa over a KV cache of PAST positions (dynamic batch, tokens and past
# length), where repeat_kv copies the whole cache per layer at every step
DECODE_VARIANTS = ("direct ops", REPEATED, WRITTEN, "torch.onnx")


def _decode_step(past: int, batch: int = 1, new: int = 1) -> tuple[Any, dict]:
    """llama-gqa (``ort_fusion.build``'s config) with its cache on, and one new token per sequence over ``past``
    cached positions."""
    import torch
    import transformers as tf

    model, _ = ort_fusion.build("llama-gqa", 1)
    model.config.use_cache = True
    torch.manual_seed(1)
    kv = model.config.num_key_value_heads
    shape = (batch, kv, past, ort_fusion.HIDDEN // ort_fusion.HEADS)
    cache = tf.DynamicCache([(torch.randn(shape), torch.randn(shape)) for _ in range(ort_fusion.LAYERS)])
    return model, {"input_ids": torch.randint(0, 1000, (batch, new)), "cache": cache}


def prepare_decode(past: int, tmp: str) -> list[dict]:
    """Each of ``DECODE_VARIANTS`` exported (a fresh model and cache each: forward() appends to the cache), checked
    against the eager step at batch 1 over ``past`` positions (the new hidden state's largest difference), with
    that step's inputs as arrays."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    variants = []
    _, step = _decode_step(past)
    feeds = [step["input_ids"].numpy()] + [t.numpy() for layer in step["cache"].layers for t in (layer.keys, layer.values)]
    for variant in DECODE_VARIANTS:
        model, kwargs = _decode_step(16, batch=2, new=2)   # dynamic sizes: an example of 1 would be specialised
        path = os.path.join(tmp, f"decode-{past}-{variant.replace(' ', '_').replace(',', '')}.onnx")
        tool = "torch.onnx" if variant == "torch.onnx" else "onnxsight"
        with _passes_off(variant) if variant in (WRITTEN, REPEATED) else contextlib.nullcontext():
            ort_fusion.export(tool, model, (kwargs,), path, OPSET, ort_fusion.dynamic_shapes("llama-cache"))
        with torch.no_grad():
            expected = model(**_decode_step(past)[1])[0].numpy()
        made = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = made.run(None, ort_latency.named_feeds(made, feeds))[0]
        variants.append({"model": "llama-gqa decode", "seq": past, "stage": "exported", "variant": variant,
                         "path": path, "feeds": feeds, "nodes": len(onnx.load(path).graph.node),
                         "direct": _direct_ops(path), "check": f"max |diff| {float(np.abs(got - expected).max()):.1e}"})
    return variants


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,llama,llama-gqa")
    parser.add_argument("--seqs", default="16,128")
    ort_latency.timing_options(parser, iters=20)
    parser.add_argument("--decode", type=int, help="time llama-gqa's decode step over this many cached positions "
                                                   "instead (onnxsight's variants and torch.onnx, opset 23)")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if options.decode:
            variants = prepare_decode(options.decode, tmp)
        else:
            variants = prepare(options.models.split(","), [int(s) for s in options.seqs.split(",")], tmp,
                               options.device)
        ort_latency.measure(variants, options.runs, options.iters, device=options.device)
    text = gqa_table(variants) if options.decode else table(variants)
    if not options.decode and any(v["model"] in GQA_MODELS or v["variant"] == WRITTEN for v in variants):
        text += "\n\n" + gqa_table(variants)
    print(text)
    for v in variants:
        print(f"{v['model']} seq {v['seq']} {v['variant']} {v['stage']}: "
              f"{v.get('direct') or v.get('fused') or v.get('error')}; {v.get('check', 'not run')}")
    ort_latency.write(text, variants, options.md, options.json, omit=("feeds", "path"))


if __name__ == "__main__":
    main()
