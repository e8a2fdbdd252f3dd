"""Rules of the export pipeline's first half: arguments, capture, decomposition, operators."""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E, W, N = Level.ERROR, Level.WARNING, Level.NOTE

# -- ARG: arguments to export()/verify() -------------------------------------------------------
INVALID_MODEL = define(
    "ARG001", "model-is-not-a-module", E,
    "export() expects a torch.nn.Module, got {type}",
    "Pass an nn.Module instance (wrap a function in a Module whose forward calls it).",
    what="Checks that the first argument of `export()` is a `torch.nn.Module` instance.",
    why="Capture runs `torch.export` on the module's `forward`; a function, a class or a "
        "TorchScript object cannot be captured, and nothing after this point can run.",
    example="""
        def double(x):
            return x * 2

        onnxsight.export(double, (torch.randn(3),))   # ARG001: got function
    """,
    how="""
        Wrap the function in a module:

        ```python
        class Double(torch.nn.Module):
            def forward(self, x):
                return double(x)

        onnxsight.export(Double(), (torch.randn(3),))
        ```
    """,
    tags=("arguments",))

ARGS_MISMATCH = define(
    "ARG002", "arguments-do-not-match-forward", E,
    "arguments do not match {model}.forward{signature}: {error}",
    "Pass args/kwargs that forward() accepts.",
    what="Binds `args` and `kwargs` to the signature of `model.forward` before anything is traced.",
    why="A mismatch would otherwise surface deep inside torch.export as an unrelated-looking "
        "tracing error; checking first names the exact parameter that is missing or extra.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x, mask):
                return x * mask

        onnxsight.export(M(), (torch.randn(3),))   # ARG002: missing 'mask'
    """,
    how="Pass one example value per parameter of `forward()`: positional ones in `args` "
        "(a tuple), keyword ones in `kwargs` (a dict).",
    tags=("arguments",))

BAD_DYNAMIC_SHAPES = define(
    "ARG003", "invalid-dynamic-shapes", E,
    "dynamic shapes specification is invalid: {error}",
    "Give dynamic_shapes the same structure as the inputs (torch.export style), "
    "or dynamic_axes as {input_name: {axis: name}}.",
    what="Checks the structure of `dynamic_shapes` (torch.export style) or `dynamic_axes` "
         "(torch.onnx style) against the inputs.",
    why="torch.export rejects a specification whose structure differs from the inputs with a "
        "long pytree error; a key naming no argument is silently ignored by some tools, leaving "
        "a dimension static that the user meant to be dynamic.",
    example="""
        onnxsight.export(model, (x,), dynamic_shapes={"input": {0: "batch"}})
        # ARG003: keys ['input'] are not arguments of forward(); arguments given are ['x']
    """,
    how="""
        Key `dynamic_shapes` by the parameter names of `forward()` (or give a tuple with one
        entry per input):

        ```python
        batch = torch.export.Dim("batch")
        onnxsight.export(model, (x,), dynamic_shapes={"x": {0: batch}})
        ```
    """,
    tags=("arguments", "dynamic-shapes"))

UNSUPPORTED_OPSET = define(
    "ARG004", "unsupported-opset-version", E,
    "opset_version {opset} is not supported; supported versions are {supported}",
    "Choose an opset between 15 and 25.",
    what="Checks `opset_version` against the opsets onnxsight exports: 17 to 25 translated directly, "
         "15 and 16 by converting the model translated at 17 with ONNX's version converter.",
    why="Translations are written per opset range; an opset outside it would produce nodes "
        "whose semantics nobody checked.",
    example="""
        onnxsight.export(model, (x,), opset_version=11)   # ARG004
    """,
    how="Use the default (18) or any opset from 15 to 25 (15 and 16 are converted from 17 and "
        "verified like any export; an operator they lack is OPS003).",
    tags=("arguments",))

INVALID_ARGUMENT = define(
    "ARG005", "invalid-argument", E,
    "invalid value for {argument}: {error}",
    "Correct the argument as the message says.",
    what="Reports any other `export()` argument with a wrong type or an impossible combination "
         "(for example both `dynamic_shapes` and `dynamic_axes`).",
    why="A wrong argument would otherwise be ignored silently or fail later with a message that "
        "does not name it.",
    example="""
        onnxsight.export(model, (x,), kwargs=[("mask", m)])   # ARG005: kwargs expected a dict
    """,
    how="Fix the argument named in the message; its documentation is in `help(onnxsight.export)`.",
    tags=("arguments",))

# -- CAP: capture with torch.export ---------------------------------------------------------------
CAPTURE_STRATEGY_FAILED = define(
    "CAP001", "capture-strategy-failed", W,
    "capture with {strategy} failed after {seconds}s: {error_type}: {error}",
    "See the error of the strategy that failed; onnxsight tries the next strategy.",
    what="Records each capture strategy (`torch.export` non-strict, then strict) that failed, "
         "with the error torch.export raised and the time spent.",
    why="A later strategy may succeed, but it traces the model differently (strict mode runs "
        "TorchDynamo on the bytecode): knowing the first one failed explains differences in "
        "the graph and in export time.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                if x.sum() > 0:          # non-strict capture fails here
                    return x
                return -x
    """,
    how="Read the error of the failed strategy. If the export succeeded with another strategy "
        "nothing needs to change; fixing the cause makes the export faster and more predictable.",
    tags=("capture",))

DATA_DEPENDENT_CONTROL_FLOW = define(
    "CAP002", "data-dependent-control-flow", E,
    "{cause} depends on tensor data, which {strategy} cannot trace: {error}",
    "Use torch.cond for data-dependent branches, or make the condition depend on shapes only.",
    what="Reports a Python `if`/`while` (or `bool()` call) whose value depends on the "
         "contents of a tensor, which torch.export cannot trace (a number read from a tensor and used "
         "as a size, an index or `int()` is CAP018).",
    why="A traced graph has one path; a branch on data would be frozen to the path the example "
        "input took, giving wrong results for other inputs, so torch.export refuses it.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                if x.sum() > 0:          # CAP002
                    return x * 2
                return x
    """,
    how="""
        Express the branch with `torch.cond`, which becomes an ONNX `If`:

        ```python
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x.clone(), (x,))
        ```

        or compute both sides and select with `torch.where`.

        When the line shown first is a library's, called from yours, the branch is the library's: a
        `torch.distributions` distribution checking its arguments (`if not torch._is_all_true(valid):`) is
        one; construct it with `validate_args=False` (`Normal(loc, scale, validate_args=False).sample()`
        exports as `RandomNormalLike`).
    """,
    tags=("capture", "control-flow"))

UNSUPPORTED_PYTHON_CONSTRUCT = define(
    "CAP003", "unsupported-python-construct", E,
    "{strategy} cannot trace a Python construct at {cause}: {error}",
    "Rewrite the construct in plain tensor operations, or move it out of forward().",
    what="Reports Python features torch.export cannot trace: calls into C extensions, "
         "generators with side effects, unsupported builtins, I/O inside `forward()`.",
    why="What cannot be traced cannot be translated; the error names the construct and the line.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                print(open("log.txt").read())   # CAP003 in strict mode
                return x
    """,
    how="Move the construct out of `forward()` (preprocessing, logging) or rewrite it with tensor "
        "operations.",
    tags=("capture",))

DYNAMIC_SHAPE_VIOLATION = define(
    "CAP004", "dynamic-shape-constraint-violation", E,
    "dynamic shape constraints on {dims} are violated and torch.export offers no fix onnxsight can apply: "
    "{error}",
    "Adjust dynamic_shapes to the constraints torch.export reports (a Dim's min/max, or one Dim shared by "
    "equal dimensions).",
    what="Reports that the model's code constrains a dimension marked dynamic (for example "
         "requires it to be even, or equal to another dimension) in a way none of torch.export's "
         "suggested fixes resolves.",
    why="The exported model would accept sizes the code cannot handle. Fixes that only narrow a "
        "range or add a relation are applied automatically (CAP007); this error remains when "
        "torch.export suggests nothing, or something it cannot apply itself.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return x.unflatten(0, (2, -1))   # dim 0 must be even: no Dim expresses "even" alone

        onnxsight.export(M(), (torch.randn(6, 3),), dynamic_shapes={"x": {0: Dim.DYNAMIC}})
    """,
    how="Give the `Dim` the range the code requires, share one `Dim` between equal dimensions, or "
        "express a multiple with a derived Dim (`k = Dim(\"k\"); {0: 2 * k}`).",
    tags=("capture", "dynamic-shapes"))

DYNAMIC_DIM_SPECIALIZED = define(
    "CAP005", "dynamic-dim-specialized", E,
    "input `{input}` axis {axis} ({dim}) is marked dynamic, but {cause} fixes it to {value}; torch.export's fix "
    "`{suggestion}` would export it static, so onnxsight does not apply it. Write that line in terms of the "
    "dynamic size{option}, or make the axis static yourself: {static}",
    "Rewrite the line named in the message in terms of the dynamic size (`x.shape[0]`, `-1`), or stop "
    "marking the axis dynamic.",
    what="Reports a dimension marked dynamic that the model's code forces to one value, with the input "
         "(forward()'s argument and the path inside it), the axis, the value and the user's line that "
         "forced it.",
    why="The ONNX model could only run with that size. torch.export suggests making the dim a "
        "constant and torch.onnx applies that silently; onnxsight refuses, because the model "
        "would then fail (or compute wrong numbers) at every other size the user asked for.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return x.view(4, 8)             # CAP005: batch must be 4

        onnxsight.export(M(), (torch.randn(4, 8),), dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    """,
    how="""
        Write the code in terms of the dynamic size:

        ```python
        return x.view(x.shape[0], 8)
        ```

        or, if the size really is fixed, stop marking it dynamic (`{"x": {0: 4}}` or no entry).

        Where the model's library offers a form that holds at every size, the message gives it: transformers'
        ViT and ViT-MSN check the image against the trained size unless called with
        `interpolate_pos_encoding=True`, which interpolates the position embeddings to any size
        (`onnxsight.export(vit, (pixels,), kwargs={"interpolate_pos_encoding": True}, ...)`, with an example
        of another size than the trained one: see the next paragraph). MobileViT has no such form: its
        unfolding into patches is written for one size.

        When the line is a library's shortcut for one size (transformers' DINOv2 returns its position
        embeddings unresized when the image has the trained size: the message shows the guard
        `(height//8)*(width//8) == 16`), an example of another size traces the general branch
        instead (`torch.randn(2, 3, 40, 48)`); the exported program then guards against the
        shortcut's sizes, which ONNX cannot express, so verify the model at those sizes too
        (`onnxsight.verify(prog, args=(torch.randn(2, 3, 32, 32),))`).
    """,
    tags=("capture", "dynamic-shapes"))

ALL_CAPTURE_FAILED = define(
    "CAP006", "all-capture-strategies-failed", E,
    "every capture strategy failed ({strategies}); last error: {error_type}: {error}{raised_at}",
    "Fix the first error reported for each strategy.",
    what="Reports that no capture strategy produced a graph, with an error that none of the "
         "more specific CAP rules classifies, and the model's line that raised it where the error's "
         "traceback has one (a `view` in transformers' modeling file, below the user's call).",
    why="Nothing can be exported without a graph; the CAP001 diagnostics before it give each "
        "strategy's error.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                y = x * 2
                return y.data + 1        # torch.export cannot lift the detached .data alias
    """,
    how="Read the CAP001 warnings that precede this error: the non-strict error usually names the "
        "line. Rewrite that line with plain tensor operations.",
    tags=("capture",))

DYNAMIC_SHAPE_FIX_APPLIED = define(
    "CAP007", "dynamic-shape-fix-applied", W,
    "{dims}: the fix `{fixes}` ({origin}), required by {cause}, narrows the sizes the model accepts; "
    "onnxsight applied it. To export without this warning, write: {code}",
    "Put the dynamic_shapes from the message in your export() call, or change the code that needs it.",
    what="Reports that torch.export found a dimension marked dynamic to be valid for fewer sizes than "
         "asked (a maximum, a minimum, a multiple of 8, equal to another dimension), and that onnxsight "
         "applied torch.export's suggested fix and exported. Where torch.export suggests no fix (a guard "
         "such as `(width // 4) != 1`, an intermediate size that must not be 1), onnxsight derives the "
         "range around the example where the guard holds and has torch.export check it.",
    why="The fix only narrows a range or adds a relation: every size the exported model accepts is "
        "computed correctly, but sizes outside the fix are rejected at run time. The user should know, "
        "and can make it explicit.",
    example="""
        class M(torch.nn.Module):
            def forward(self, input_ids):
                seq = input_ids.shape[1]
                return self.tok(input_ids) + self.pos(self.position_ids[:, :seq])   # seq <= 512

        onnxsight.export(M(), (ids,), dynamic_shapes={"input_ids": {1: Dim("seq")}})
        # CAP007 ... write: seq = Dim('seq', max=512); dynamic_shapes = {'input_ids': {1: seq}}
    """,
    how="Copy the `dynamic_shapes` code from the message into the export call; if the limit is not "
        "intended, change the line the message names.",
    tags=("capture", "dynamic-shapes"))

EXAMPLE_SIZE_SPECIALIZED = define(
    "CAP008", "example-size-specialized", E,
    "input `{input}` axis {axis} ({dim}) is marked dynamic but the example has size {size}, which "
    "torch.export specialises{cause}; pass an example of shape {shape} for `{input}`",
    "Export with an example whose dynamic axes have size 2 or more.",
    what="Reports a dimension marked dynamic whose example size is 0 or 1 and that cannot be kept "
         "dynamic: torch.export specialises sizes 0 and 1, and capturing from the example grown to size 2 "
         "or size-oblivious either fails or gives a graph that computes something else at the example.",
    why="With a batch-1 example the model is traced as if the batch were always 1 (broadcasting, "
        "squeezes); torch.onnx exports that and computes wrong numbers at batch 2. The cause is the "
        "example, not the model.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return x.squeeze(0) if x.shape[0] == 1 else x   # CAP008 with a batch-1 example

        onnxsight.export(M(), (torch.randn(1, 3),), dynamic_shapes={"x": {0: Dim("batch")}})
    """,
    how="Pass an example with size 2 or more along every dynamic axis (`torch.randn(2, 3)`), or stop "
        "marking the axis dynamic.",
    tags=("capture", "dynamic-shapes"))

SIZE_ONE_EXAMPLE_KEPT_DYNAMIC = define(
    "CAP009", "size-one-example-kept-dynamic", N,
    "input `{input}` axis {axis} ({dim}) has size {size} in the example, which torch.export would "
    "specialise; onnxsight {how} and checked the graph at the example, so it stays dynamic",
    "Export with an example of size 2 or more along dynamic axes to skip this step.",
    what="Notes that a dimension marked dynamic had size 0 or 1 in the example and was kept dynamic by "
         "capturing from the example grown to size 2 along the dim (a size of 1: the sizes torch.export "
         "asks examples to have) or with torch.export's size-oblivious reasoning (a size of 0, or where the "
         "grown example does not capture the model), then checking that the captured graph computes the "
         "model's outputs at the example.",
    why="torch.export specialises sizes 0 and 1; without this step a batch-1 example with a dynamic "
        "batch fails to export (or, in torch.onnx, exports a model wrong at other sizes).",
    example="""
        onnxsight.export(cnn, (torch.randn(1, 3, 224, 224),),
                         dynamic_shapes={"x": {0: Dim("batch")}})   # CAP009: batch stays dynamic
    """,
    how="Nothing is wrong. An example of size 2 along each dynamic axis avoids the extra check.",
    tags=("capture", "dynamic-shapes"))

CAPTURE_PATCH_APPLIED = define(
    "CAP010", "capture-patch-applied", N,
    "`{function}` was replaced during capture by onnxsight's `{replacement}`: {why}",
    "Nothing to do; the replacement computes what the library function computes, in a form torch.export can trace.",
    what="Notes each library function onnxsight replaced for the duration of capture (a capture patch): "
         "functions of known libraries (torchvision's detection post-processing) that torch.export cannot "
         "trace with dynamic shapes, because they branch on a data-dependent size, call `len()` on a tensor "
         "or compute sizes with Python floats.",
    why="The exported graph is the replacement's, not the library's: the user should know which functions "
        "were replaced and why. Patches are applied only to models built from the library's classes, and "
        "undone when capture ends.",
    example="""
        model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(weights=None).eval()
        onnxsight.export(Wrapper(model), (image,), dynamic_shapes={"image": {1: Dim("h"), 2: Dim("w")}})
        # CAP010 `torchvision.ops.boxes.batched_nms` was replaced ... the per-class loop over
        #        torch.unique(idxs) for more than 4000 boxes is data-dependent
    """,
    how="Nothing is wrong. Compare the exported model with eager on real inputs (`verify=True`); the "
        "table of patches is `onnxsight/exporter/capture/_patches.py`.",
    tags=("capture",))

CAPTURE_PATCH_FAILED = define(
    "CAP011", "capture-patch-failed", W,
    "`{function}` could not be replaced during capture ({error}); capture goes on with the library's own code",
    "Check the installed library version against the one the patch was written for; capture may fail later.",
    what="Reports a capture patch that could not be applied: the library function it replaces is missing "
         "or has another signature in the installed version.",
    why="Without the patch, torch.export may stop on the function's data-dependent code (CAP002) or "
        "specialise a dynamic dim; this warning says why.",
    example="""
        # torchvision renamed _multiscale_roi_align in a new release
        # CAP011 `torchvision.ops.poolers._multiscale_roi_align` could not be replaced (no such attribute)
    """,
    how="Install a library version the patch table knows (see `onnxsight/exporter/capture/_patches.py`), or "
        "report the version as an issue.",
    tags=("capture",))

LIBRARY_CONTAINER_FLATTENED = define(
    "CAP012", "library-container-flattened", N,
    "{kind} {argument} ({container}, {layers} layers) was flattened to {count} ONNX {kind}s {first} ... {last}",
    "Feed the ONNX model one tensor per flattened name, in the order listed; prog(...) does it for you.",
    what="Notes an input or output of a library type that torch.export cannot see through (transformers' "
         "`DynamicCache`, `EncoderDecoderCache`), flattened for the export into one ONNX value per "
         "tensor: `past_key_values.{layer}.key` / `.value` for inputs, `present.{layer}.key` / `.value` "
         "for outputs.",
    why="A decode step takes the KV cache as an object; torch.export (and torch.onnx) stop on it with "
        "'Unsupported input type DynamicCache'. onnxsight registers the cache classes as pytree nodes "
        "for the duration of the export only (as transformers' own exporter does), so nothing global "
        "changes, and names the flattened tensors the way ONNX Runtime GenAI and optimum expect them.",
    example="""
        cache = DynamicCache([(keys, values) for _ in range(config.num_hidden_layers)])
        onnxsight.export(llama, (), kwargs={"input_ids": ids, "attention_mask": mask,
                                            "cache": cache})   # CAP012 (before transformers 5.24: past_key_values)
    """,
    how="""
        Nothing is wrong. Make the batch and the past length dynamic with one spec per cache tensor,
        in flattened order (key, value of layer 0, then of layer 1, ...), keyed as forward() spells
        the argument (`cache` from transformers 5.24, `past_key_values` before; the ONNX inputs are
        `past_key_values.*` either way):

        ```python
        batch, past = Dim("batch"), Dim("past", min=1, max=4096)
        dynamic_shapes = {"input_ids": {0: batch}, "attention_mask": {0: batch, 1: past + 1},
                          "cache": [{0: batch, 2: past}] * (2 * num_layers)}
        ```
    """,
    tags=("capture", "io"))

SPECIALIZATION_AVOIDED_SIZE_OBLIVIOUS = define(
    "CAP013", "dynamic-dim-kept-size-oblivious", N,
    "input `{input}` axis {axis} ({dim}): torch.export's plain capture fixes it to the example's {value} at "
    "{cause}, a guard that size-oblivious capture does not need; onnxsight captured it size-oblivious and "
    "checked the graph at the example, so it stays dynamic",
    "Nothing to do; the message's guard says which size of the example made plain capture specialise.",
    what="Notes a dimension marked dynamic that torch.export's plain capture fixes to the example's size "
         "although the model's code is written for any size, and that onnxsight kept dynamic by capturing "
         "again with torch.export's size-oblivious reasoning (torch.onnx's default), then checking that the "
         "captured graph computes the model's outputs at the example. Two causes are common: an "
         "intermediate size that is 1 at the example (a CNN whose last feature map is 1x1: PoolFormer at "
         "32x32), and a shape that happens to equal the input's at the example (`x.view(4, -1)` on a "
         "batch of 4).",
    why="A size of 1 decides broadcasting and strides, and an equal shape lets a view take a shortcut, so "
        "plain capture guards on them and, solving its guards, specialises the input dim. Size-oblivious "
        "capture takes the general path instead; the check at the example, where the special case holds, "
        "shows that the general graph computes the same there.",
    example="""
        conv = torch.nn.Conv2d(3, 8, kernel_size=4, stride=4)       # 4x4 -> 1x1
        onnxsight.export(conv, (torch.randn(2, 3, 4, 4),),
                         dynamic_shapes={"input": {2: Dim("h"), 3: Dim("w")}})   # CAP013 for h and w
    """,
    how="Nothing is wrong. An example whose feature maps stay larger than 1x1 (64x64 for a network that "
        "downsamples 32 times) skips the second capture.",
    tags=("capture", "dynamic-shapes"))

PACKED_SEQUENCE_REFUSED = define(
    "CAP014", "packed-sequence-form-unsupported", E,
    "{error}",
    "Pack the padded batch inside forward() with pack_padded_sequence(x, lengths) (lengths as a tensor input "
    "or a list), run the LSTM/GRU/RNN on it, and unpack with pad_packed_sequence.",
    what="Reports a packed sequence (`torch.nn.utils.rnn.PackedSequence`) that onnxsight cannot map onto the "
         "ONNX LSTM/GRU/RNN `sequence_lens` input: one that was not made by `pack_padded_sequence` or "
         "`pack_sequence` in the captured code (built from `data` and `batch_sizes` by hand, or passed in as "
         "a model input), or an LSTM with `proj_size > 0` run on a packed sequence.",
    why="A packed sequence's layout (its `data` rows and `batch_sizes`) depends on the values of the lengths, "
        "which torch.export cannot trace. onnxsight captures the packing done by `pack_padded_sequence` as "
        "the padded batch plus its lengths and exports the recurrent layer with `sequence_lens`; a packed "
        "sequence made any other way has no lengths to give it, and ONNX LSTM has no output projection.",
    example="""
        class M(torch.nn.Module):
            def forward(self, data, batch_sizes):
                packed = PackedSequence(data, batch_sizes)   # CAP014: built by hand
                return self.lstm(packed)[1][0]
    """,
    how="""
        ```python
        def forward(self, x, lengths):
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, (h, c) = self.lstm(packed)
            return pad_packed_sequence(out, batch_first=True)[0], h
        ```
        For `proj_size`, run the LSTM on the padded batch without packing and mask the outputs.
    """,
    tags=("capture", "rnn"))

TRAINING_MODE_EXPORTED_AS_EVAL = define(
    "CAP015", "training-mode-exported-as-eval", W,
    "{model} is in training mode; onnxsight exports its inference behaviour, as after eval(), for the "
    "modules whose behaviour depends on the mode: {modules}",
    "Call model.eval() before export (the model's own mode is never changed by export).",
    what="Warns when the model, or a submodule whose behaviour depends on the mode (dropout, batch norm "
         "and instance norm with running statistics, recurrent layers with dropout), is in training mode "
         "at export. onnxsight captures every model with eval semantics (dropout off, running statistics) "
         "and verifies it against that behaviour, without switching the model's own flags.",
    why="torch.onnx exports the training graph of such a model (a Dropout node, batch statistics) with a "
        "warning; a call moved from torch.onnx gets a different graph here, and says so.",
    example="""
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
        onnxsight.export(model, (x,))
        # CAP015: Sequential is in training mode; ... : 1 (Dropout)
    """,
    how="""
        ```python
        onnxsight.export(model.eval(), (x,))
        ```
    """,
    tags=("capture", "torch.onnx"))

DIMS_APART_MUST_MATCH = define(
    "CAP023", "dynamic-dims-named-apart-must-match", E,
    "{dims} have dims of their own in dynamic_shapes, but {cause} broadcasts one against the other ({sizes}), "
    "which needs them equal; the example gives them {examples}, so torch.export cannot capture it. Give these "
    "axes one Dim and pass an example where they are equal",
    "Share one Dim between the axes the message names, with an example of equal sizes, or change the line that "
    "broadcasts them.",
    what="Reports two axes asked dynamic with different dims (two `Dim`s, two names, `Dim.DYNAMIC`) that the "
         "model's code broadcasts against each other, when the example gives them different sizes: the "
         "message names both inputs, their axes and dims, the sizes, and the line (a model library's line, "
         "such as transformers' T5 adding the attention mask to the cross-attention scores, and the user's "
         "call into it).",
    why="torch.export fails inside its broadcasting code with `RuntimeError: Attempting to broadcast a "
        "dimension of length s26`, naming its own symbols and no input. When the example's sizes are equal "
        "the same code only ties the dims, and onnxsight exports them as one dim (CAP007).",
    example="""
        # T5's decode step: the encoder mask (30 positions) and the cross-attention cache (3) named apart
        dynamic_shapes = {"attention_mask": {0: batch, 1: Dim.DYNAMIC},
                          "cache": [[self_keys, self_values], [[{0: batch, 2: cache_length2}] * 2] * 2]}
        # CAP023: input `attention_mask` axis 1 (Dim.DYNAMIC) and input `past_key_values.0.encoder.key`
        # axis 2 (cache_length2) ... the example gives them 30 and 3
    """,
    how="""
        Give both axes one Dim and an example where they are equal (an encoder-decoder's cross-attention
        cache has the encoder's length):

        ```python
        encoder_length = Dim("encoder_sequence_length")
        dynamic_shapes = {"attention_mask": {0: batch, 1: encoder_length},
                          "cache": [self_part, [{0: batch, 2: encoder_length}] * 4]}
        ```
    """,
    tags=("capture", "dynamic-shapes"))

DIMS_APART_TIED = define(
    "CAP024", "dynamic-dims-named-apart-tied", W,
    "{dims} were given dims of their own in dynamic_shapes, but {cause} ties them: in the graph {relation}",
    "Give the tied axes one Dim (the name the message says the graph uses), or change the code that ties them.",
    what="Warns when the model's code makes two axes equal (or one an expression of the other) that the user "
         "gave different dim names, and torch.export captured the model without reporting it (it does so "
         "when the axis it meets first has no name of its own, a `Dim.DYNAMIC` attention mask for "
         "example). The graph has one dim for them, named after the first named axis in input order, as "
         "torch.onnx names dims given as strings; the message names every axis, its dim and the line.",
    why="A user who named two axes apart expects ONNX inputs that accept different sizes; the exported model "
        "requires them equal and fails (or computes something else) at sizes the names suggested were free.",
    example="""
        dynamic_shapes = {"attention_mask": {0: batch, 1: Dim.DYNAMIC},
                          "cache": [self_part, [{0: batch, 2: cache_length2}] * 4],
                          "input_ids": {0: batch, 1: seq_length}}
        # CAP024: input `past_key_values.0.encoder.key` axis 2 (cache_length2), input `input_ids` axis 1
        # (seq_length) ... ties them: in the graph they are one dim, `cache_length2`
    """,
    how="Give those axes one `Dim` (or one name), so that the graph's name is the one you chose and the "
        "warning goes.",
    tags=("capture", "dynamic-shapes"))

MODEL_RAISES_EAGERLY = define(
    "CAP025", "model-raises-eagerly", E,
    "{model}.forward raises {error_type} when PyTorch runs it on these inputs, without any export: {error} "
    "(at {cause}); a model is exported as it runs, so it must run first",
    "Fix the line the message names, or call the model with the inputs it takes.",
    what="Checks, when every capture strategy failed, whether the model runs at all: it is called once "
         "eagerly on the example inputs (a copy of them), and where it raises, that error is the one "
         "reported, at the line that raised it (a model library's line, with the user's call into it). "
         "`export_generation` and `verify_generation` report so the forward they run before exporting, which "
         "learns the shapes of the model's KV cache.",
    why="torch.export's error for a model that cannot run (an attribute read from a tuple, an argument of "
        "the wrong type) reads as a limit of the exporter, and every strategy reports it again in its own "
        "words; the user's fix is in the model or the inputs.",
    example="""
        model = transformers.OPTModel(config).eval()
        model.config.return_dict = False       # OPTModel then reads .last_hidden_state from a tuple
        onnxsight.export(model, (input_ids,))
        # CAP025: OPTModel.forward raises AttributeError when PyTorch runs it on these inputs, without
        # any export: 'tuple' object has no attribute 'last_hidden_state' (at `...` at modeling_opt.py:...)
    """,
    how="Run `model(*args, **kwargs)` yourself: the same error, with its traceback. Fix that line, or pass "
        "the inputs and options the model takes (here, leave `return_dict` as it was).",
    tags=("capture",))

DATA_DEPENDENT_INTEGER = define(
    "CAP018", "data-dependent-integer", E,
    "{cause} needs a Python number computed from tensor data (a size, an index, a slice bound, a "
    "count, or a scalar argument such as addmm's beta), which {strategy} cannot trace: {error}",
    "Pass the number as a Python int if it is fixed; otherwise read it with .item(), bound it with "
    "torch._check, and build the size with torch.arange (see the rule's page for each op).",
    what="Reports a line where a number read from a tensor's contents is used as a Python integer: a "
         "size (`torch.arange(end_tensor, out=...)`, `torch.linspace(s, e, steps_tensor)`, `one_hot(x, "
         "n_tensor)`), a 0-d tensor as an index (`x[i] = v`), a tensor as a slice bound or step "
         "(`x[:n:step]`), `int(t)`, or a 0-d tensor as an op's scalar argument (`torch.addmm(x, a, b, "
         "beta=beta_tensor)`, which torch checks against 0).",
    why="torch.export traces shapes, not values: an integer read from data is an unknown symbol, and "
        "these ops ask for its exact value (to size the output or pick the elements), which the graph "
        "cannot know. It differs from CAP002, a branch on data: there the fix is `torch.cond`; here it is "
        "to keep the number symbolic, which ONNX expresses (`Range`, `Gather`, shapes computed at run time).",
    example="""
        class M(torch.nn.Module):
            def forward(self, x, steps):
                return torch.linspace(0, 1, steps)     # CAP018: steps is a tensor
    """,
    how="""
        If the number is the same for every input, pass it as a Python int (it becomes a constant). Otherwise
        read it once with `.item()`, state what you know with `torch._check`, and write the op with ones
        that take a symbolic size:

        ```python
        n = steps.item(); torch._check(n >= 2)
        ramp = start + (end - start) * torch.arange(n) / (n - 1)      # linspace
        k = num_classes.item(); torch._check(k >= 1)
        hot = (x.unsqueeze(-1) == torch.arange(k)).long()             # one_hot
        x[ind.reshape(1)] = data                                      # a 0-d index tensor
        rows = torch.arange(0, stop.item(), step.item())              # x[:stop:step] as an index
        ```

        `torch.arange(n)` with `n` from `.item()` exports as ONNX `Range`.
    """,
    tags=("capture", "data-dependent"))

UINT8_MASK = define(
    "CAP019", "uint8-mask", E,
    "{cause} uses a uint8 tensor as a mask{subject}, which {strategy} refuses (eager PyTorch still "
    "accepts it, deprecated): {error}",
    "Make the mask bool: mask.bool() (or build it with a comparison, which gives bool).",
    what="Reports a `torch.where` condition or an index mask of dtype uint8 (`torch.uint8`, PyTorch's "
         "mask dtype before bool existed), which eager PyTorch still reads as a bool mask but "
         "torch.export's fake kernels refuse.",
    why="The export cannot go on past the refused op; onnxsight does not cast the mask for you, because "
        "a uint8 tensor used as an index with values other than 0 and 1 means integer indices, not a "
        "mask, and only the code says which was meant.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return x[torch.tensor([0, 1, 0], dtype=torch.uint8)]   # CAP019
    """,
    how="""
        Use a bool mask:

        ```python
        return x[torch.tensor([False, True, False])]
        return torch.where(cond.bool(), a, b)
        ```
    """,
    tags=("capture",))

OUTPUT_TYPE_NOT_FLATTENABLE = define(
    "CAP020", "output-type-not-a-pytree", E,
    "forward() returns a {subject}, a type torch.export cannot flatten into tensors: {error}",
    "Register the type with torch.utils._pytree.register_pytree_node, or return a plain dict or tuple.",
    what="Reports an output (or an output's element) whose type is a subclass of dict, list or tuple "
         "that is not registered with PyTorch's pytree, such as a user's `OrderedDict` subclass.",
    why="torch.export flattens outputs into tensors by their registered structure; an unregistered "
        "subclass is opaque to it, so the export stops. onnxsight does not register the type for you: "
        "registration is global to the process and decides how every later program rebuilds it.",
    example="""
        class Output(OrderedDict):
            logits: torch.Tensor

        class M(torch.nn.Module):
            def forward(self, x):
                return Output(logits=x)      # CAP020
    """,
    how="""
        Register the type once, next to its definition:

        ```python
        import torch.utils._pytree as pytree

        pytree.register_pytree_node(
            Output,
            lambda out: (list(out.values()), list(out.keys())),
            lambda values, keys: Output(zip(keys, values)),
        )
        ```

        or return `dict(Output(...))`. Its tensors are the ONNX outputs, in order (IO002).
    """,
    tags=("capture", "io"))

# -- DEC: decomposition --------------------------------------------------------------------------
DECOMPOSITION_FAILED = define(
    "DEC001", "decomposition-failed", E,
    "decomposition to core ATen failed: {error_type}: {error}",
    "Report the op named in the error; a custom translation for it avoids its decomposition.",
    what="Reports a failure while decomposing the captured graph to core ATen operators.",
    why="Translations exist for core ATen; an op whose decomposition fails cannot reach them.",
    example="""
        # A custom op registered without a fake (meta) implementation fails here:
        torch.library.define("mylib::weird", "(Tensor x) -> Tensor")
    """,
    how="""
        Give the op a translation, which also keeps it out of decomposition:

        ```python
        onnxsight.export(model, args, custom_translations={"mylib::weird": my_translation})
        ```
    """,
    tags=("decompose",))

STORAGE_SWAP_ON_INPUT = define(
    "DEC003", "storage-swap-on-input", E,
    "`{input}.set_(...)` makes input `{input}` another tensor's storage; an ONNX input is a value, not "
    "storage that can be swapped",
    "Use the other tensor instead of swapping storage: x = y (and return it).",
    what="Reports `Tensor.set_` on an input of `forward()`, which makes the caller's tensor another "
         "tensor's view (its size changes with it); torch.export's decomposition stops on it.",
    why="An ONNX graph computes outputs from inputs; it cannot make the caller's input another size or "
        "alias another input. The line's effect inside forward() is only a rename, which plain Python "
        "expresses.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x, y):
                x.set_(y)          # DEC003
                return x
    """,
    how="""
        Name the other tensor:

        ```python
        def forward(self, x, y):
            x = y
            return x
        ```
    """,
    tags=("decompose", "io"))
