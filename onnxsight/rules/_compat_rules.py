"""Rules for calls written for ``torch.onnx.export`` (issue 25): its arguments, its opsets.

Switching from torch.onnx to onnxsight should be a change of one name. An argument of
torch.onnx.export that means the same here is accepted; one that cannot change the result is
ignored with a note (ARG017); one whose meaning onnxsight cannot honour is refused before any
work (ARG016), naming what to write instead, never silently dropped.
"""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E, N = Level.ERROR, Level.NOTE

TORCH_ONNX_ARGUMENT_REFUSED = define(
    "ARG016", "torch-onnx-argument-not-supported", E,
    "torch.onnx.export's {argument}={value} is not supported by onnxsight: {reason}; instead, {instead}",
    "Remove the argument, or write what the message names instead.",
    what="Checks the keyword arguments of `torch.onnx.export` given to `onnxsight.export`: those that "
         "ask for something onnxsight does not do (the TorchScript exporter, weights left out of the "
         "file, translations written in ONNX Script) are refused before any work.",
    why="Accepting an argument and ignoring it would export a model other than the one asked for "
        "without a word: a file with weights where none were wanted, a graph captured by another "
        "exporter, a custom translation table that is never called.",
    example="""
        onnxsight.export(model, (x,), custom_translation_table={torch.ops.aten.stft.default: stft})
        # ARG016: custom_translation_table holds ONNX Script functions; use custom_translations=
    """,
    how="""
        ```python
        onnxsight.export(model, (x,), custom_translations={torch.ops.aten.stft.default: my_stft})
        ```
        where `my_stft(builder, node, ...)` emits ONNX nodes with onnxsight's GraphBuilder
        (see `onnxsight.exporter.translation`).
    """,
    tags=("arguments", "torch.onnx"))

TORCH_ONNX_ARGUMENT_IGNORED = define(
    "ARG017", "torch-onnx-argument-ignored", N,
    "torch.onnx.export's {argument}={value} is ignored: {reason}",
    "Drop the argument; the exported model is the same without it.",
    what="Notes a keyword argument of `torch.onnx.export` that onnxsight accepts but that cannot "
         "change what it exports (`dynamo=True`: onnxsight always captures with torch.export).",
    why="A call written for torch.onnx keeps working with `onnxsight.export`; the note says which "
        "arguments had no effect, so nobody relies on one that does nothing here.",
    example="""
        onnxsight.export(model, (x,), dynamo=True)
        # ARG017: dynamo=True is ignored: onnxsight always captures with torch.export
    """,
    how="""
        ```python
        onnxsight.export(model, (x,))
        ```
    """,
    tags=("arguments", "torch.onnx"))

OPSET_CONVERSION_FAILED = define(
    "ONX007", "opset-conversion-failed", E,
    "the model translated at opset {source} could not be converted to opset {target}: {error}; "
    "the model's operators defined anew after opset {target}: {changed}",
    "Export with a newer opset_version (the lowest onnxsight translates at is named in the message).",
    what="onnxsight translates at opset 17 and newer; a lower `opset_version` (15, 16) is reached by "
         "converting the translated model with ONNX's version converter, whose result is checked and "
         "verified like any export. This rule reports a conversion the converter cannot make.",
    why="Older runtimes and hardware toolchains ask for opset 15 or 16. A conversion that fails "
        "half-way would leave a model that mixes opsets; it is refused instead, naming the converter's "
        "reason. An operator that does not exist at the requested opset is OPS003, naming the op.",
    example="""
        onnxsight.export(model, (x,), opset_version=15)
        # ONX007: ... could not be converted to opset 15: ... Attribute reduction must have value none ...;
        # the model's operators defined anew after opset 15: ScatterElements (changed in opset 16)
    """,
    how="""
        ```python
        onnxsight.export(model, (x,), opset_version=17)
        ```
    """,
    tags=("opset", "torch.onnx"))
