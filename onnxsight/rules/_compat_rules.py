"""Rules for calls written for ``torch.onnx.export`` (issue 25): its arguments, its opsets.

Switching from torch.onnx to onnxsight should be a change of one name. An argument of
torch.onnx.export that means the same here is accepted; one that cannot change the result is
ignored with a note (ARG019); one whose meaning onnxsight cannot honour is refused before any
work (ARG018), naming what to write instead, never silently dropped.
"""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E, N = Level.ERROR, Level.NOTE

TORCH_ONNX_ARGUMENT_REFUSED = define(
    "ARG018", "torch-onnx-argument-not-supported", E,
    "torch.onnx.export's {argument}={value} is not supported by onnxsight: {reason}; instead, {instead}",
    "Remove the argument, or write what the message names instead.",
    what="Checks the keyword arguments of `torch.onnx.export` given to `onnxsight.export`: those that "
         "ask for something onnxsight does not do (the TorchScript exporter, weights left out of the "
         "file, training graphs of models with batch norm: dropout draws as asked) are refused before any work.",
    why="Accepting an argument and ignoring it would export a model other than the one asked for "
        "without a word: a file with weights where none were wanted, a graph captured by another "
        "exporter, an inference graph where a training graph was asked for.",
    example="""
        onnxsight.export(model, (x,), operator_export_type=torch.onnx.OperatorExportTypes.ONNX_ATEN_FALLBACK)
        # ARG018: onnxsight exports standard ONNX operators only; give each op without an ONNX form a
        # translation in custom_translations=
    """,
    how="""
        ```python
        onnxsight.export(model, (x,), custom_translations={torch.ops.aten.stft.default: my_stft})
        ```
        where `my_stft(builder, ...)` emits ONNX nodes with onnxsight's GraphBuilder
        (see `onnxsight.exporter.translation`); torch.onnx's `custom_translation_table` of ONNX Script
        functions is accepted as it is.
    """,
    tags=("arguments", "torch.onnx"))

TORCH_ONNX_ARGUMENT_IGNORED = define(
    "ARG019", "torch-onnx-argument-ignored", N,
    "torch.onnx.export's {argument}={value} is ignored: {reason}",
    "Drop the argument; the exported model is the same without it.",
    what="Notes a keyword argument of `torch.onnx.export` that onnxsight accepts but that cannot "
         "change what it exports (`dynamo=True`: onnxsight always captures with torch.export).",
    why="A call written for torch.onnx keeps working with `onnxsight.export`; the note says which "
        "arguments had no effect, so nobody relies on one that does nothing here.",
    example="""
        onnxsight.export(model, (x,), dynamo=True)
        # ARG019: dynamo=True is ignored: onnxsight always captures with torch.export
    """,
    how="""
        ```python
        onnxsight.export(model, (x,))
        ```
    """,
    tags=("arguments", "torch.onnx"))

TORCH_ONNX_PROGRAM_API_REFUSED = define(
    "ARG020", "torch-onnx-program-api-not-supported", E,
    "ONNXProgram.{name} is torch.onnx's: {reason}; instead, {instead}",
    "Write what the message names instead.",
    what="Refuses an attribute, method or argument of torch.onnx's `ONNXProgram` that onnxsight's "
         "program does not have in the same meaning (`model`, an onnx_ir model; `apply_weights`; "
         "`rename_axes`; `compute_values`; `save(keep_initializers_as_inputs=True)`), naming "
         "onnxsight's way. Those it has run as in torch.onnx: `model_proto`, `save`, `optimize()`, "
         "`call_reference`, calling the program, `initialize_inference_session()`, `release()`.",
    why="Code written for torch.onnx's program should either work or say what to write instead; a "
        "bare `AttributeError` names neither, and accepting a method that changes nothing (weights "
        "applied to a copy, axes renamed in a model nobody saves) would be a silent wrong answer.",
    example="""
        prog = onnxsight.export(model, (x,))
        prog.model.graph
        # AttributeError: ARG020 ONNXProgram.model is torch.onnx's: an onnx_ir model, which onnxsight
        # does not build; instead, prog.model_proto (an onnx.ModelProto) ...
    """,
    how="""
        ```python
        graph = prog.model_proto.graph
        ```
    """,
    tags=("torch.onnx",))

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

DTYPE_NEEDS_NEWER_OPSET = define(
    "DTY005", "dtype-needs-newer-opset", E,
    "{dtype} (at {op}) exists in ONNX from opset {required}; the export targets opset {opset}",
    "Export with opset_version set to the opset the message names, or leave opset_version out.",
    what="Checks, before translation, that every dtype the captured program computes with exists in "
         "the ONNX opset asked for: float8 types from opset 19, float4 (`float4_e2m1fn_x2`) from "
         "opset 23. A weight or input of such a dtype is located at the first line of your code "
         "that reads it.",
    why="Translated anyway, the model would fail ONNX's checker on a Cast node the user never wrote "
        "(ONX004), and the message would not say that the opset is the problem.",
    example="""
        class F8(torch.nn.Module):
            def forward(self, x):
                return x.to(torch.float8_e4m3fn).to(torch.float32)

        onnxsight.export(F8(), (x,), opset_version=18)
        # DTY005: float8_e4m3fn (at aten.to.dtype) exists in ONNX from opset 19; the export targets opset 18
    """,
    how="""
        ```python
        onnxsight.export(F8(), (x,), opset_version=19)
        onnxsight.export(F8(), (x,))   # without opset_version: the export chooses opset 19 (DTY006)
        ```
    """,
    tags=("dtype", "opset", "torch.onnx"))

OPSET_RAISED_FOR_DTYPE = define(
    "DTY006", "opset-raised-for-dtype", N,
    "the export targets opset {required} instead of the default {default}: {dtype} (at {op}) exists in "
    "ONNX from opset {required}",
    "Pass opset_version explicitly to choose the opset yourself.",
    what="Notes that `opset_version` was left out and the default opset lacks a dtype the model "
         "computes with (float8 before 19, float4 before 23), so the export targets the lowest opset "
         "that has it.",
    why="torch.onnx users pass float8 and float4 models without choosing an opset; the default opset "
        "cannot hold them, and the choice of a newer one is said, not made silently.",
    example="""
        onnxsight.export(F8(), (x,))   # DTY006: targets opset 19 instead of the default 18
    """,
    how="""
        ```python
        onnxsight.export(F8(), (x,), opset_version=19)
        ```
    """,
    tags=("dtype", "opset", "torch.onnx"))

FULLY_MASKED_ROWS_AVERAGE = define(
    "ONX008", "padding-mask-shaped-for-attention-fusion", N,
    "{count} attention(s) read their mask from input {input} with {dtype}'s lowest {lowest} as fill instead of -inf "
    "and without torch's guard for rows whose every key is masked, the form ONNX Runtime's and onnxscript's "
    "attention fusions match: a row whose every key is masked (a sequence of padding only) gives an average of "
    "the values there (float32, bfloat16: their mean; float16: weighted by its rounded scores, NaN where they "
    "overflow), where PyTorch gives zeros",
    "Nothing to do while every sequence has a token that is not padding; to keep PyTorch's zeros for "
    "sequences of padding only, export with optimize=False (torch's guard kept; no attention fusion for this mask).",
    what="Notes that the optimize stage wrote `scaled_dot_product_attention` whose mask is a model input's (batch, "
         "keys) padding mask (BERT's `attention_mask`) in BERT's form, `Where(Cast(1 - m), lowest, 1 - m)` of the "
         "mask expanded over the queries, with the scores' lowest finite value as fill and without torch's guard "
         "for rows whose every key is masked, which `onnxruntime.transformers.optimizer.optimize_model` turns into "
         "one `Attention` per layer and onnxscript's `optimize_for_ort` too (the mask is first checked to be such "
         "a padding mask by running its subgraph on several masks); or, with `optimize=\"ort-fusion\"`, a "
         "LLaMA-like decoder's causal mask combined with such a padding mask in the form ONNX Runtime's "
         "rotary-attention fuser takes (`Where(blocked, lowest, 1 - Cast(Expand(mask)))`). Any other mask keeps "
         "torch's guard (written as torch.onnx writes it), and PyTorch's zeros.",
    why="No guard fits inside the pattern ONNX Runtime's BERT and decoder fusers match, and their fused ops "
        "average the values of a fully masked row too. `lowest` is the most negative finite value of the "
        "scores' dtype; in float16 a masked score below about -16 plus it overflows to -inf, so a fully masked "
        "row is an average weighted by its rounded scores, or NaN. Rows with at least one key to attend to give "
        "PyTorch's numbers; only sequences of padding only differ, and `onnxsight.verify` with such an input "
        "names the first attention output as the root cause (ACC002). In a decoder, a left-padded sequence's "
        "padding positions are such rows (they attend no earlier key); `-inf` as fill would give NaN there in "
        "ONNX Runtime's fused attention, which the next layer spreads to every position, where the finite fill "
        "keeps the positions that are not padding exact.",
    example="""
        prog = onnxsight.export(bert, (input_ids, attention_mask))
        # ONX008: 4 attention(s) read their mask from input attention_mask with float32's lowest
        # -3.4028235e+38 as fill ...
        onnxsight.verify(prog, (input_ids, torch.zeros_like(attention_mask)))   # ACC002 at the first attention
    """,
    how="""
        Usually nothing. If a batch can hold a sequence of padding only and its outputs are used, export
        without the optimize stage, which keeps torch's guard (ONNX Runtime then fuses no attention for
        this mask):

        ```python
        onnxsight.export(bert, (input_ids, attention_mask), optimize=False)
        ```
    """,
    tags=("onnx", "attention", "onnxruntime"))
