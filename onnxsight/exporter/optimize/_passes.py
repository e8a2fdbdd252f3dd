"""The optimisation stage: the passes, in order, over a translated graph, and what each one did.

Runs between translate and check, so the checker and ONNX's shape inference see
the graph that is saved. Each pass keeps the names the verifier pairs with
PyTorch where the value survives; ``value_names`` follows the values that moved
(an FX value whose Identity was removed is now held by the value it copied), and
``TranslatedGraph.optimized_away`` names the values that are gone, with the pass
that removed them, so verification lists them with that reason instead of
"no ONNX counterpart".

NOTE: why these passes are ours and not onnx-ir's and onnxscript's optimizer (constant folding, common
subexpressions, shape simplification), which torch.onnx runs: that bookkeeping (which value holds a merged or
bypassed one, which pass removed which value) is what per-node verification pairs by, and their passes keep no such
record; the model's weights are never folded (``save(weights=)`` replaces them with a checkpoint's, a fake-mode
export has no data), where onnxscript's folder evaluates what it can; and the cost: onnxscript's ``optimize`` takes
0.3 to 1 s on the small models of ``bench/ort_fusion.py`` (already lean), an onnx-ir round trip alone 0.06 to 0.13
s, this whole stage 30 to 50 ms. The fusions themselves are the libraries' (ONNX Runtime's optimizer,
onnxscript's ``optimize_for_ort``): the stage writes the forms they match, and verification checks what they made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

from onnxsight.exporter.optimize import (_attention, _batchnorm, _decoder, _fold, _gqa23, _padding, _rmsnorm, _rope23,
                                         _rotary, _shapes, _simplify, _sized_mask)
from onnxsight.exporter.optimize._graph import Graph
from onnxsight.exporter.translate._graph import TranslatedGraph

# Model metadata key listing the values the passes removed (value -> pass), so a saved model says it too.
OPTIMIZED_AWAY_KEY = "pkg.onnxsight.optimized_away"
# export(..., optimize=ORT_FUSION): the passes below plus the decoder forms only ONNX Runtime's legacy fusers need
# (_shaping), over a graph translated with translate/_ort_forms.py's choices (so the RMS-norm pass, which ORT does
# not fuse, is off).
ORT_FUSION = "ort-fusion"


@dataclass
class OptimizeReport:
    """Node counts before and after, and what each pass changed (nodes removed or rewritten)."""

    nodes_before: int = 0
    nodes_after: int = 0
    passes: dict[str, int] = field(default_factory=dict)
    # (graph input, scores' dtype) -> the attentions whose padding mask from it now averages fully masked rows (ONX008)
    padding_masks: dict[tuple[str, str], int] = field(default_factory=dict)

    def summary(self) -> str:
        done = ", ".join(f"{name} {count}" for name, count in self.passes.items() if count) or "nothing to do"
        return f"{self.nodes_before} -> {self.nodes_after} nodes ({done})"


def _passes(opset: int, ort_fusion: bool) -> list[tuple[str, Callable[[Graph], int]]]:
    return [
        ("constants to initializers", _fold.constants_to_initializers),
        ("constant folding", lambda g: _fold.fold_constants(g, opset)),
        ("transposed weights", _fold.transposed_weights),
        (_batchnorm.PASS_NAME, _batchnorm.fold_batch_norms),
        ("identities", _simplify.identities),
        ("constant reshape shapes", _shapes.constant_reshapes),
        ("shape sources", _shapes.shape_sources),
        ("size arithmetic", _shapes.no_ops),
        ("common subexpressions", _shapes.common_subexpressions),
        ("constant attention masks", _attention.constant_masks),
        (_rmsnorm.PASS_NAME, lambda g: _rmsnorm.rms_norms(g) if opset >= 23 and not ort_fusion else 0),
        (_rope23.PASS_NAME, lambda g: _rope23.rotary_embeddings(g) if opset >= 23 and not ort_fusion else 0),
        (_gqa23.PASS_NAME, lambda g: _gqa23.unrepeated_key_values(g) if opset >= 23 and not ort_fusion else 0),
        ("transpose pairs", _simplify.transpose_pairs),
        ("unsqueeze pairs", _simplify.unsqueeze_pairs),
        ("reshape pairs", _simplify.reshape_pairs),
        # the Gemm form of GPT-2's Conv1D is the one ORT's legacy GPT-2 fuser matches (ort_fusion)
        ("linear layers on N-D inputs", lambda g: 0 if ort_fusion else _simplify.linear_reshapes(g)),
        ("dead code", dead_code),
    ]


# NOTE: run once, after the passes above reach their fixed point: they write the graph in the forms ONNX
# Runtime's transformer optimizer and onnxscript's rewriter match, which constant folding and the unsqueeze/reshape
# pairs would otherwise undo. BERT's padding mask from an input loses torch's guard and takes the scores' lowest
# as fill: a sequence of padding only then gives the mean of the values, not PyTorch's zeros (the note ONX008), as
# ORT's fused Attention does; every guard left is written as torch.onnx writes it. The decoder forms of
# ``ort_fusion`` add the Shape arithmetic ORT's legacy GPT-2 and LLaMA fusers look for (at ``opt_level=0``), which
# makes the graph larger than torch.onnx's, so the user asks for them.
def _shaping(report: OptimizeReport, ort_fusion: bool) -> list[tuple[str, Callable[[Graph], int]]]:
    shaping: list[tuple[str, Callable[[Graph], int]]] = [
        ("attention padding masks", lambda g: _padding.padding_masks(g, report.padding_masks)),
        ("dead code", dead_code)]   # the guards the padding masks no longer need
    # once: the masks computed from sizes are run at many sizes (_sized_mask), after the loop folded what it could
    shaping += [("run-time causal masks", _sized_mask.compact_causal_masks),
                ("run-time attention masks", _sized_mask.unguarded_sized_masks), ("dead code", dead_code)]
    if ort_fusion:
        shaping += [("attention projection biases", _attention.projection_biases),
                    ("GPT-2 causal attention", _decoder.gpt2_causal_attention),
                    ("LLaMA rotary attention", lambda g: _rotary.llama_rotary_attention(g, report.padding_masks))]
    shaping.append(("attention guards", _attention.nan_guards))
    return [*shaping, ("dead code", dead_code)]


def optimize_translated(translated: TranslatedGraph, opset: int, *, ort_fusion: bool = False) -> OptimizeReport:
    """Run every pass until none changes anything more, then the shaping passes once; update ``translated``
    in place. ``ort_fusion``: also the decoder forms ONNX Runtime's legacy GPT-2 and LLaMA fusers need, which are
    not free (``export(..., optimize="ort-fusion")``)."""
    report = OptimizeReport(nodes_before=len(translated.graph.node))
    if translated.functions:  # module_functions=: the graph is calls of local functions; left as built
        report.nodes_after = report.nodes_before
        return report
    weights = set(translated.initializers)
    graph = Graph.build(translated.graph, dict(translated.initializers), translated.opset_imports, weights)
    for _ in range(4):
        changed = 0
        for name, run in _passes(opset, ort_fusion):
            count = run(graph)
            report.passes[name] = report.passes.get(name, 0) + count
            changed += count
        if not changed:
            break
    for name, run in _shaping(report, ort_fusion):
        report.passes[name] = report.passes.get(name, 0) + run(graph)
    _finish(graph, translated, weights)
    report.nodes_after = len(translated.graph.node)
    return report


def dead_code(graph: Graph) -> int:
    """Nodes none of whose outputs is read (after folding: the mask arithmetic nothing needs any more).

    Each round looks again only at the nodes that made what the last round's nodes read (one walk over the
    graph in all, not one per round: a chain of dead nodes no longer costs its length in full walks)."""
    total = 0
    candidates = graph.nodes
    while candidates:
        dead = [n for n in candidates if all(not o or graph.uses(o) == 0 for o in n.output)]
        if not dead:
            return total
        for node in dead:
            for name in node.output:
                if name:
                    graph.removed.setdefault(name, "dead code")
        graph.remove(dead)
        total += len(dead)
        made = (graph.producer.get(name) for node in dead for name in node.input)
        candidates = list({id(p): p for p in made if p is not None}.values())
    return total


def _finish(graph: Graph, translated: TranslatedGraph, weights: set[str]) -> None:
    """Drop unread initializers, the value_info of values that are gone, and point value_names at survivors."""
    graph.commit()
    graph.reindex()
    read = {name for name, readers in graph.readers.items() if readers} | graph.pinned
    for name in list(graph.initializers):
        if name not in read:
            if name not in weights:  # a value folded, then read by another fold only
                graph.removed.setdefault(name, "constant folding")
            del graph.initializers[name]
    translated.initializers.clear()
    translated.initializers.update(graph.initializers)
    alive = set(graph.producer) | {v.name for v in graph.proto.input}
    kept = [v for v in graph.proto.value_info if v.name in alive]
    del graph.proto.value_info[:]
    graph.proto.value_info.extend(kept)

    def holder(name: str) -> str:
        seen = set()
        while name in graph.aliases and name not in seen:
            seen.add(name)
            name = graph.aliases[name]
        return name

    translated.value_names.update({key: holder(value) for key, value in translated.value_names.items()})
    existing = alive | set(graph.initializers)
    named = set(translated.value_names.values())   # once: a set per removed value was quadratic
    removed = {name: why for name, why in graph.removed.items() if name not in existing and name in named}
    translated.optimized_away.update(removed)
    translated.derived.update({k: v for k, v in graph.derived.items() if k in graph.initializers})
    translated.computed.update({k: v for k, v in graph.computed.items() if k in graph.initializers})
    if translated.optimized_away:
        translated.metadata[OPTIMIZED_AWAY_KEY] = json.dumps(translated.optimized_away, sort_keys=True)
