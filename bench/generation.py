"""Per-token latency of a greedy generation loop: eager PyTorch, onnxsight's exported step programs in ONNX
Runtime, and torch.onnx's export of the same steps (where it exports), in the same run, interleaved.

Models (transformers configs, random weights, never downloaded): ``llama-gqa`` (LLaMA, 4 layers, hidden 256,
8 heads, 2 key/value heads), ``gpt2`` (4 layers, hidden 256, 4 heads) and ``t5`` (T5, 4 + 4 layers, d_model
256, 4 heads), each with a vocabulary of 1000. Each tool exports the programs ``onnxsight.export_generation``
exports (the decoder step over the cache, past length down to 0; T5's encoder, first step and decoder), from the
same example inputs, with the same opset (``--opset``, 18) and its defaults (onnxsight's lean-graph passes;
torch.onnx ``dynamo=True`` with its optimizer), every dim ``Dim.AUTO`` for torch.onnx where onnxsight names it.
torch.onnx's graphs name the cache ``cache_0``...: its inputs and outputs are renamed to onnxsight's by position
(both flatten the call the same way), and its tokens are checked against eager's before it is timed.

A loop is the prompt (batch 1, ``--prompt`` tokens; T5: the encoder on them, then the decoder's start token)
and ``--new`` greedy tokens, each step fed the previous step's cache (ONNX Runtime: the ``present.*`` outputs
fed back as ``past_key_values.*``; PyTorch: its DynamicCache). The per-token latency is the mean time of a
decode step (the steps after the prompt's); the prompt step is reported apart. PyTorch and ONNX Runtime run
on one thread each (``torch.set_num_threads(1)``, ``intra_op_num_threads=1``: the machine is shared), ONNX
Runtime with its default graph optimisations. After one untimed loop per variant, each of ``--runs`` rounds
runs every variant's loop once, in turn; reported: the median over rounds with the spread (max - min) / median,
and onnxsight / torch.onnx and onnxsight / eager as the median of the rounds' ratios with their range.

``--device cuda`` runs eager PyTorch on the GPU and the sessions on ONNX Runtime's CUDA execution provider
(each step's inputs and outputs through host memory, as a plain ``session.run`` loop does), synchronising
before each clock reading; one thread stays the CPU side's setting.

    python bench/generation.py [--models llama-gqa,gpt2,t5] [--runs 7] [--prompt 16] [--new 32] [--device cpu|cuda]
                               [--md docs/generation-latency.md] [--json docs/generation-latency.json]
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_latency import median_spread  # noqa: E402  (the one median-and-spread of bench/)

MODELS = ("llama-gqa", "gpt2", "t5")
VOCAB = 1000


def build(name: str) -> Any:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    if name == "llama-gqa":
        config = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256)
        return tf.LlamaForCausalLM(config).eval()
    if name == "gpt2":
        config = tf.GPT2Config(vocab_size=VOCAB, n_embd=256, n_layer=4, n_head=4, n_positions=256)
        return tf.GPT2LMHeadModel(config).eval()
    if name == "t5":
        config = tf.T5Config(vocab_size=VOCAB, d_model=256, d_kv=64, d_ff=512, num_layers=4, num_heads=4,
                             decoder_start_token_id=0)
        return tf.T5ForConditionalGeneration(config).eval()
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def prompt_of(length: int) -> dict[str, Any]:
    import torch

    ids = torch.randint(3, VOCAB, (1, length), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


# -- export ---------------------------------------------------------------------------------------------------
def export_all(model: Any, prompt: dict[str, Any], opset: int, folder: str) -> dict[str, dict[str, str] | str]:
    """tool -> {program: path}, or why the tool does not export the model."""
    import onnxsight
    from onnxsight.pipeline._generation import step_examples

    programs = onnxsight.export_generation(model, prompt, opset_version=opset)
    ours = programs.save(os.path.join(folder, "onnxsight"))
    theirs: dict[str, str] = {}
    try:
        for name, module, kwargs, _ in step_examples(model, prompt):
            path = os.path.join(folder, "torch.onnx", f"{name}.onnx")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _torch_onnx(model, module, kwargs, path, opset)
            _rename_like(path, getattr(programs, name).model_proto)
            theirs[name] = path
    except Exception as exc:  # noqa: BLE001 - a tool that does not export the model is a row, not a crash
        return {"onnxsight": ours, "torch.onnx": f"does not export: {type(exc).__name__}: {_first_line(exc)}"}
    return {"onnxsight": ours, "torch.onnx": theirs}


def _first_line(exc: Exception) -> str:
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()  # torch.onnx colours its messages
    return (text.splitlines() or [""])[0][:160]


def _torch_onnx(model: Any, module: Any, kwargs: dict[str, Any], path: str, opset: int) -> None:
    import torch
    from torch.utils import _pytree as pytree
    from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model

    register_cache_pytrees_for_model(model)  # as transformers' own exporter does
    auto = torch.export.Dim.AUTO

    def dims(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return {axis: auto for axis in range(value.dim()) if axis != value.dim() - 1 or value.dim() == 2}
        if isinstance(value, tuple):
            return tuple(dims(v) for v in value)
        if "Cache" in type(value).__name__:
            return [{0: auto, 2: auto}] * len(pytree.tree_leaves(value))
        return None

    shapes = {name: dims(value) for name, value in kwargs.items()}
    quiet = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, (), kwargs=kwargs, dynamic_shapes=shapes, dynamo=True, opset_version=opset)
    program.save(path)


def _rename_like(path: str, reference: Any) -> None:
    """torch.onnx's inputs and outputs renamed to onnxsight's (the same flattened call, position by position)."""
    import onnx

    model = onnx.load(path)
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    ours_in = [i.name for i in reference.graph.input if i.name not in {t.name for t in reference.graph.initializer}]
    ours_out = [o.name for o in reference.graph.output]
    if len(inputs) != len(ours_in) or len(graph.output) != len(ours_out):
        raise ValueError(f"torch.onnx's graph has {len(inputs)} inputs and {len(graph.output)} outputs, "
                         f"onnxsight's {len(ours_in)} and {len(ours_out)}")
    names = {i.name: new for i, new in zip(inputs, ours_in)}
    names.update({o.name: new for o, new in zip(graph.output, ours_out)})
    for value in [*inputs, *graph.output]:
        value.name = names[value.name]
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    onnx.save(model, path)


# -- the loops ------------------------------------------------------------------------------------------------
def session(path: str, device: str = "cpu") -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    providers = ["CUDAExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    made = ort.InferenceSession(path, options, providers=providers)
    if made.get_providers()[0] != providers[0]:
        raise RuntimeError(f"ONNX Runtime could not use {providers[0]}: available {ort.get_available_providers()}")
    return made


def ort_loop(sessions: dict[str, Any], prompt: dict[str, Any], new: int) -> tuple[list[int], list[float]]:
    """Greedy decoding over the step sessions: (tokens, seconds of each step, the prompt's first)."""
    from onnxsight.exporter import past_name
    from onnxsight.verification._generation_io import cache_position, grown_mask, positions, role_of

    ids, mask = prompt["input_ids"].numpy(), prompt["attention_mask"].numpy()
    cache: dict[str, np.ndarray] = {}
    times, tokens = [], []
    start = time.perf_counter()
    states = None
    if "encoder" in sessions:
        states = sessions["encoder"].run(None, {"input_ids": ids, "attention_mask": mask})[0]
        ids = np.zeros((1, 1), dtype=np.int64)  # T5's decoder starts from token 0
    import torch

    past, decoder_mask = 0, torch.ones(1, ids.shape[1], dtype=torch.long)
    for step in range(new):
        which = "first_step" if step == 0 and "first_step" in sessions else "decoder"
        run = sessions[which]
        values = {"tokens": ids, "position_ids": positions(decoder_mask, ids.shape[1]).numpy(),
                  "cache_position": cache_position(past, ids.shape[1]).numpy(),
                  "attention_mask": mask if states is not None else decoder_mask.numpy(),
                  "decoder_attention_mask": decoder_mask.numpy(), "encoder_states": states}
        feeds = {}
        for spec in run.get_inputs():
            role = role_of(spec.name)
            feeds[spec.name] = cache.get(spec.name) if role == "cache" else values[role]
            if feeds[spec.name] is None:  # the prompt step: an empty cache
                feeds[spec.name] = np.zeros([ids.shape[0] if i == 0 else 0 if i == 2 else d
                                             for i, d in enumerate(spec.shape)], dtype=np.float32)
        outputs = run.run(None, feeds)
        for spec, value in zip(run.get_outputs(), outputs):
            name = past_name(spec.name)
            if name is not None:
                cache[name] = value
        token = int(outputs[0][0, -1].argmax())
        tokens.append(token)
        past += ids.shape[1]
        ids = np.array([[token]], dtype=np.int64)
        decoder_mask = grown_mask(decoder_mask, 1)
        if states is None:
            mask = decoder_mask.numpy()
        now = time.perf_counter()
        times.append(now - start)
        start = now
    return tokens, times


def eager_loop(model: Any, prompt: dict[str, Any], new: int) -> tuple[list[int], list[float]]:
    """The same greedy loop in PyTorch: the model with its own cache, as generate() calls it."""
    import torch
    from transformers import DynamicCache, EncoderDecoderCache

    from onnxsight.verification._generation_io import positions

    device = next(model.parameters()).device
    prompt = {k: v.to(device) for k, v in prompt.items()}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    argument = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    encoder_decoder = model.config.is_encoder_decoder
    times, tokens = [], []
    start = time.perf_counter()
    with torch.no_grad():
        if encoder_decoder:
            states = model.get_encoder()(**prompt).last_hidden_state
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            ids = torch.zeros(1, 1, dtype=torch.long, device=device)
        else:
            cache, ids, mask = DynamicCache(), prompt["input_ids"], prompt["attention_mask"]
        for _ in range(new):
            if encoder_decoder:
                out = model(encoder_outputs=(states,), attention_mask=prompt["attention_mask"], decoder_input_ids=ids,
                            use_cache=True, **{argument: cache})
            else:
                out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask, ids.shape[1]),
                            use_cache=True, **{argument: cache})
            cache = getattr(out, "cache", None) or out.past_key_values
            token = int(out.logits[0, -1].argmax())
            tokens.append(token)
            ids = torch.tensor([[token]], device=device)
            if not encoder_decoder:
                mask = torch.cat([mask, torch.ones(1, 1, dtype=mask.dtype, device=device)], dim=-1)
            sync()
            now = time.perf_counter()
            times.append(now - start)
            start = now
    return tokens, times


# -- measuring ------------------------------------------------------------------------------------------------
def measure(name: str, args: argparse.Namespace, folder: str) -> dict[str, Any]:
    import torch

    model, prompt = build(name), prompt_of(args.prompt)
    exported = export_all(model, prompt, args.opset, folder)
    on_device = model if args.device == "cpu" else build(name).to(args.device)  # exported from the CPU copy
    loops: dict[str, Any] = {"eager": lambda: eager_loop(on_device, prompt, args.new)}
    notes: dict[str, str] = {}
    for tool, paths in exported.items():
        if isinstance(paths, str):
            notes[tool] = paths
            continue
        sessions = {program: session(path, args.device) for program, path in paths.items()}
        loops[tool] = lambda sessions=sessions: ort_loop(sessions, prompt, args.new)
    torch.set_num_threads(1)
    reference, _ = loops["eager"]()  # the untimed warm-up, and each variant's tokens checked against eager's
    for tool in [t for t in loops if t != "eager"]:
        tokens, _ = loops[tool]()
        if tokens != reference:
            notes[tool] = f"tokens differ from eager's: {tokens[:8]}... against {reference[:8]}..."
            del loops[tool]
    rounds: dict[str, list[tuple[float, float]]] = {tool: [] for tool in loops}
    for _ in range(args.runs):
        for tool, loop in loops.items():
            _, times = loop()
            rounds[tool].append((times[0], statistics.fmean(times[1:])))
    row: dict[str, Any] = {"model": name, "prompt": args.prompt, "new": args.new, "opset": args.opset,
                           "device": args.device,
                           "notes": notes, "rounds": {t: r for t, r in rounds.items()}}
    for tool, values in rounds.items():
        row[tool] = {"per_token_ms": median_spread([1e3 * d for _, d in values]),
                     "prompt_ms": median_spread([1e3 * p for p, _ in values])}
    for other in ("torch.onnx", "eager"):
        if other in rounds and "onnxsight" in rounds:
            ratios = [ours[1] / theirs[1] for ours, theirs in zip(rounds["onnxsight"], rounds[other])]
            row[f"onnxsight/{other}"] = (statistics.median(ratios), min(ratios), max(ratios))
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | eager PyTorch ms/token | onnxsight in ORT ms/token | torch.onnx in ORT ms/token | "
             "onnxsight / torch.onnx per round | onnxsight / eager per round | prompt step ms (eager / onnxsight) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        def cell(tool: str) -> str:
            if tool not in row:
                return row["notes"].get(tool, "-")
            value, spread = row[tool]["per_token_ms"]
            return f"{value:.2f} ±{spread:.0%}"

        def ratio(other: str) -> str:
            found = row.get(f"onnxsight/{other}")
            return f"{found[0]:.2f} ({found[1]:.2f}-{found[2]:.2f})" if found else "-"

        prompt = " / ".join(f"{row[t]['prompt_ms'][0]:.2f}" if t in row else "-" for t in ("eager", "onnxsight"))
        lines.append(f"| {row['model']} | {cell('eager')} | {cell('onnxsight')} | {cell('torch.onnx')} | "
                     f"{ratio('torch.onnx')} | {ratio('eager')} | {prompt} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--opset", type=int, default=18)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--md")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.runs < 5:
        parser.error("--runs: at least 5 rounds (medians of fewer say little on a shared machine)")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in [m for m in args.models.split(",") if m]:
            rows.append(measure(name, args, os.path.join(folder, name)))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print(text)
    if args.md:
        with open(args.md, "w", encoding="utf-8") as handle:
            handle.write(_page(text, args))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)


def _page(text: str, args: argparse.Namespace) -> str:
    import onnxruntime
    import torch

    return (f"# Generation loop latency (generated)\n\nWritten by `bench/generation.py` (`make bench-generation`): "
            f"per-token latency of a greedy loop of {args.new} tokens after a prompt of {args.prompt} (batch 1), "
            f"opset {args.opset}, one thread per side, median of {args.runs} interleaved rounds after a warm-up "
            f"(± the spread, (max - min) / median); the ratios are the medians of the rounds' ratios, with their "
            f"range. torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, {_device(args.device)}. "
            f"The models and the "
            f"method: the script's docstring, and [the generation guide](generation.md#latency).\n\n{text}\n")


def _device(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() + " (CUDA)" if device == "cuda" else "CPU"


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
