"""Coverage: which FX values verification compared, and why each of the others was not.

Every value of the exported program gets one entry with one reason from a
fixed vocabulary, so a passing result says what it passed on. Whether a node
is random is decided from the op and its arguments (dropout with p > 0 in
training, ``rand*``, ``bernoulli``...), never from torch's
``nondeterministic_seeded`` tag alone: that tag marks
``scaled_dot_product_attention`` and ``dropout`` even when they draw nothing.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext

COMPARED = "compared"
GRAPH_INPUT = "graph input"             # a user input: both sides are fed the same values
WEIGHT = "weight"                       # a parameter, buffer or constant: the same values on both sides
FOLDED = "folded constant"              # the exporter folded it into an initializer
RANDOM = "random op"                    # draws random numbers; PyTorch's draw is fed to ONNX Runtime
UNINITIALISED = "uninitialised"         # empty*: whatever was in memory; PyTorch's copy is fed on
TIE_ORDER = "order among equal keys"    # sort/topk indices: unspecified where keys tie; PyTorch's are fed on
UNSORTED = "order of an unsorted topk"  # topk(sorted=False): both outputs in an unspecified order; PyTorch's fed on
NON_TENSOR = "non-tensor"               # a SymInt, None or other non-tensor with no ONNX value
NO_COUNTERPART = "no ONNX counterpart"  # the ONNX model has no value of this name
OPTIMIZED_AWAY = "optimised away"       # an optimisation pass removed it (folded, merged into another node)
OUTPUTS_ONLY = "outputs only"           # per_node=False
NOT_REACHED = "not reached"             # ONNX Runtime failed before this value's chunk
NO_RESULT = "no ONNX result"            # paired, but ONNX Runtime returned nothing for it (ACC009)
# an optimised model's fused op holds the value in another layout; each entry's reason names the op and both
# shapes (``other_layout``), counted as this
OTHER_LAYOUT = "held by a fused op in another layout"
_HELD_BY = "held by "
REASONS = (COMPARED, GRAPH_INPUT, WEIGHT, FOLDED, RANDOM, UNINITIALISED, TIE_ORDER, UNSORTED, NON_TENSOR,
           NO_COUNTERPART, OPTIMIZED_AWAY, OTHER_LAYOUT, OUTPUTS_ONLY, NOT_REACHED, NO_RESULT)
# Values both sides hold identically without computing them: an output that is one of them needs no row.
_EXACT_BY_CONSTRUCTION = frozenset({GRAPH_INPUT, WEIGHT, FOLDED})
COLUMNS = ("value", "fx_node", "target", "compared", "reason")

# Ops that draw random numbers whatever their arguments.
_ALWAYS_RANDOM = frozenset({
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli", "bernoulli_",
    "normal", "normal_", "normal_functional", "uniform", "uniform_", "multinomial", "cauchy", "cauchy_",
    "exponential", "exponential_", "geometric", "geometric_", "log_normal", "log_normal_", "poisson",
    "_standard_gamma", "random", "random_", "_sample_dirichlet", "binomial",
})
UNINITIALISED_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                            "empty_permuted"})
# Ops that are random only for some arguments: op -> (probability argument, training argument or None).
_DROPOUTS = {
    "dropout": ("p", "train"), "native_dropout": ("p", "train"), "alpha_dropout": ("p", "train"),
    "feature_dropout": ("p", "train"), "feature_alpha_dropout": ("p", "train"),
    "lstm": ("dropout", "train"), "gru": ("dropout", "train"), "rnn_tanh": ("dropout", "train"),
    "rnn_relu": ("dropout", "train"),
}


def other_layout(op: str, shape: Sequence[int], torch_shape: Sequence[int]) -> str:
    """``held by RotaryEmbedding in another layout: [1, 16, 256], PyTorch [1, 4, 16, 64]``."""
    return f"{_HELD_BY}{op} in another layout: {list(shape)}, PyTorch {list(torch_shape)}"


def exact_by_construction(reason: str | None) -> bool:
    """True for values both sides hold identically (an output that is one needs no comparison row)."""
    return reason in _EXACT_BY_CONSTRUCTION


def op_name(target: Any) -> str:
    """``aten.rand_like.default`` -> ``rand_like``; a Python callable -> its name."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name.split("::")[-1]
    return getattr(target, "__name__", str(target))


def argument(node: Any, name: str, default: Any = None) -> Any:
    """The value of schema argument ``name`` of an FX call (positional, keyword or its default)."""
    schema = getattr(node.target, "_schema", None)
    if name in node.kwargs:
        return node.kwargs[name]
    for i, arg in enumerate(schema.arguments if schema is not None else ()):
        if arg.name == name:
            if i < len(node.args):
                return node.args[i]
            return arg.default_value if arg.has_default_value() else default
    return default


def randomness(node: Any) -> str | None:
    """``"random op"`` when ``node`` draws random numbers for these arguments, ``"uninitialised"`` for
    ``empty*``, else None (the value is deterministic and is compared)."""
    import torch

    if node.op != "call_function":
        return None
    name = op_name(node.target)
    if name in UNINITIALISED_OPS:
        return UNINITIALISED
    if name in _ALWAYS_RANDOM:
        return RANDOM
    if name == "_fused_dropout":  # p is the probability to keep
        return RANDOM if _number(argument(node, "p", 1.0)) < 1 else None
    if name == "rrelu_with_noise" or name.startswith("rrelu_with_noise"):
        return RANDOM if argument(node, "training", False) else None
    if name in _DROPOUTS:
        p_name, train_name = _DROPOUTS[name]
        train = argument(node, train_name, True)
        return RANDOM if _number(argument(node, p_name, 0.0)) > 0 and train is not False else None
    schema = getattr(node.target, "_schema", None)
    if schema is not None and any(a.name == "dropout_p" for a in schema.arguments):  # attention kernels
        return RANDOM if _number(argument(node, "dropout_p", 0.0)) > 0 else None
    if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
        return RANDOM  # an op this table does not know (a custom op): its tag is all there is to go on
    return None


def tie_order(node: Any, index: int | None) -> str | None:
    """``"order among equal keys"`` for the indices output of ``topk`` and of a ``sort`` that is not stable.

    PyTorch leaves the order of equal keys unspecified there (its CPU sort interleaves them), ONNX's
    TopK puts the lower index first: both are right, and comparing them would name a correct sort a
    root cause (Mixtral's router sorts expert ids, which tie by design). The values output is compared,
    and PyTorch's indices are fed to ONNX Runtime so the values computed from them are compared too.
    ``topk(sorted=False)`` leaves the order of its k values unspecified too (PyTorch's CPU kernel returns a partial
    sort's order, ONNX's TopK sorts): both outputs are fed on (Informer's ProbSparse attention).
    """
    if node.op != "call_function" or index not in (0, 1):
        return None
    name = op_name(node.target)
    if name == "topk" and argument(node, "sorted", True) is False:
        return UNSORTED
    if index != 1:
        return None
    if name == "topk" or (name == "sort" and not argument(node, "stable", False)):
        return TIE_ORDER
    return None


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 1.0  # a symbolic probability: assume it may be non-zero


@dataclass(frozen=True)
class Entry:
    """One FX value: its ONNX name (or FX name), the node, the output index, the reason if not compared."""

    value: str
    node: Any
    index: int | None
    reason: str | None  # None: to be compared


def output_indices(node: Any, value_names: Mapping[str, str], groups: Mapping[str, list[int]]) -> list[int | None]:
    """The outputs of ``node``: ``[None]`` for one value, else every index (no limit on their number)."""
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        return list(range(len(val)))
    if node.name not in value_names and node.name in groups:
        return list(groups[node.name])
    return [None]


def multi_output_groups(value_names: Iterable[str]) -> dict[str, list[int]]:
    """``{"unbind": [0, 1, ..., 69]}`` from keys ``unbind__0`` ... ``unbind__69``."""
    groups: dict[str, list[int]] = {}
    for key in value_names:
        base, sep, tail = key.rpartition("__")
        if sep and tail.isdigit():
            groups.setdefault(base, []).append(int(tail))
    return {k: sorted(v) for k, v in groups.items()}


def placeholder_entries(program_graph: Any, signature: Any, value_names: Mapping[str, str]) -> list[Entry]:
    """Graph inputs and weights: counted, never compared (both sides hold the same values)."""
    from torch.export import graph_signature as gs

    kinds = {spec.arg.name: spec.kind for spec in signature.input_specs if hasattr(spec.arg, "name")}
    entries: list[Entry] = []
    for node in program_graph.nodes:
        if node.op != "placeholder":
            continue
        kind = kinds.get(node.name)
        if kind == gs.InputKind.USER_INPUT:
            reason = GRAPH_INPUT
        elif kind in (gs.InputKind.PARAMETER, gs.InputKind.BUFFER, gs.InputKind.CONSTANT_TENSOR):
            reason = WEIGHT
        else:
            reason = NON_TENSOR  # effect tokens, custom objects
        entries.append(Entry(value_names.get(node.name, node.name), node, None, reason))
    return entries


def is_value_node(node: Any, value_names: Mapping[str, str], groups: Mapping[str, list[int]]) -> bool:
    """True for FX nodes that hold values of their own (not getitems of a multi-output node, not asserts)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    return node.meta.get("val") is not None or node.name in value_names or node.name in groups


def frame(entries: Sequence[Entry], compared: set[str], failed_reason: Mapping[str, str]) -> pd.DataFrame:
    """The coverage table: one row per FX value."""
    from onnxsight.exporter import op_display

    rows = []
    for entry in entries:
        if entry.reason is not None:
            reason = entry.reason
        else:
            reason = COMPARED if entry.value in compared else failed_reason.get(entry.value, NO_RESULT)
        target = op_display(entry.node.target) if entry.node.op == "call_function" else entry.node.op
        rows.append({"value": entry.value, "fx_node": entry.node.name, "target": target,
                     "compared": reason == COMPARED, "reason": reason})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def summary(table: pd.DataFrame) -> dict[str, int]:
    """Counts by reason, in the vocabulary's order."""
    reasons = table["reason"].map(lambda r: OTHER_LAYOUT if str(r).startswith(_HELD_BY) else r)
    counts = reasons.value_counts().to_dict() if len(table) else {}
    return {reason: int(counts[reason]) for reason in REASONS if reason in counts}


def emit_coverage(table: pd.DataFrame, outputs: Sequence[str], compared: set[str], ctx: DiagnosticContext,
                  nodes: Mapping[str, Any]) -> None:
    """ACC009 for every value that had to be compared and was not (graph outputs, values with no
    ONNX result), then the ACC008 note with the counts in its properties (SARIF carries them)."""
    for row in table.itertuples():
        if row.reason == NO_RESULT:
            ctx.emit(rules.VALUE_NOT_COMPARED, node=nodes.get(row.value), value=row.value, target=row.target,
                     reason="ONNX Runtime returned no value for it")
    for output in outputs:
        known = table[table["value"] == output]
        reason = known["reason"].iloc[0] if len(known) else None
        if output not in compared and reason not in _EXACT_BY_CONSTRUCTION and reason != NOT_REACHED:
            why = (f"it is a graph output, not compared ({reason})" if reason
                   else "it is a graph output with no FX value of the same name")
            ctx.emit(rules.VALUE_NOT_COMPARED, node=nodes.get(output), value=output,
                     target=known["target"].iloc[0] if len(known) else "graph output", reason=why)
    counts = summary(table)
    others = {k: v for k, v in counts.items() if k != COMPARED}
    ctx.emit(rules.COVERAGE, compared=counts.get(COMPARED, 0), total=len(table),
             reasons=", ".join(f"{v} {k}" for k, v in others.items()) or "none",
             properties={"compared": counts.get(COMPARED, 0), "total": len(table), "reasons": others})
