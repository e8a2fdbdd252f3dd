"""Rules of a verified generation (``onnxsight.verify_generation``): the loop's findings, and bad calls."""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E, W, N = Level.ERROR, Level.WARNING, Level.NOTE

# -- GEN: the generation loop, PyTorch against the step programs in ONNX Runtime --------------------------
GENERATION_DIVERGED = define(
    "GEN001", "generation-diverged", E,
    "step {step} of the generation ({phase}) diverges from PyTorch: {what}; {cause}",
    "Fix the value named at the step named; a step fed PyTorch's cache reproduces it with onnxsight.verify.",
    what="Reports the first step of a greedy generation whose logits, cache or top-1 token differ from "
         "PyTorch's beyond the tolerance (a token that differs at a near-tie is GEN007, not this), and what "
         "the per-node comparison of that step, fed PyTorch's own cache, names as its first divergence.",
    why="A deployed generative model is a loop: one wrong cache update, position or mask changes every "
        "later token, while a single call of the step may look right. The step and the node say where.",
    example="""
        result = onnxsight.verify_generation(model, tokenizer("Hello", return_tensors="pt"), steps=16)
        # GEN001: step 1 of the generation (decode) diverges from PyTorch: present.0.key differs by 2.1
        # (shape [1, 2, 5, 8]); the per-node comparison of that step names cat_1 (aten.cat.default -> Concat)
        # as the first value to diverge, at transformers/cache_utils.py:121
    """,
    how="Open the line named; `result.verification` is the per-node comparison of that step "
        "(`result.verification.root_causes`, `write_repro`), with the step's inputs in `result.step_inputs`.",
    tags=("generation", "accuracy"))

GENERATION_PROGRAM_INVALID = define(
    "GEN002", "generation-program-invalid", E,
    "the {program} of the generation is {given}: {detail}",
    "Pass an onnxsight.ONNXProgram, the path of an .onnx file or an onnx.ModelProto.",
    what="Refuses a step program of `verify_generation` that is not a program, an ONNX file or an ONNX model.",
    why="The loop runs each step program in ONNX Runtime; anything else fails deep inside it.",
    example="""
        onnxsight.verify_generation(model, inputs, {"decoder": "missing.onnx"})   # GEN002: no such file
    """,
    how="Export the step with `onnxsight.export_generation(model, inputs)`, or pass the files you exported.",
    tags=("generation", "usage"))

GENERATION_INPUT_UNKNOWN = define(
    "GEN003", "generation-input-unknown", E,
    "the {program}'s input {input} has no role in the generation loop; it feeds: {known} and the cache "
    "(past_key_values.*)",
    "Export the step with inputs named as the model's arguments (onnxsight.export of a transformers model does).",
    what="Refuses a step program with an input the generation loop does not know how to feed.",
    why="The loop feeds each input by its role (token ids, attention mask, positions, the encoder's states, "
        "the cache); an input it cannot feed would be fed nothing, or the wrong thing.",
    example="""
        prog = onnxsight.export(wrapper, (ids, mask, keys, values))   # inputs keys_0, keys_1, ...
        onnxsight.verify_generation(model, inputs, prog)               # GEN003: input keys_0
    """,
    how="Export the model itself with its cache (`kwargs={..., 'past_key_values': DynamicCache(...)}`), "
        "or `onnxsight.export_generation(model, inputs)`, which names the inputs as the loop feeds them.",
    tags=("generation", "usage", "inputs"))

GENERATION_NO_LOGITS = define(
    "GEN004", "generation-no-logits", E,
    "the {program} returns no logits to pick tokens from (outputs: {outputs})",
    "Export the model with its language-model head (AutoModelForCausalLM, ...ForConditionalGeneration).",
    what="Refuses a step program whose outputs are all cache outputs.",
    why="Greedy decoding picks each token from the step's logits.",
    example="""
        prog = onnxsight.export(LlamaModel(config), ...)   # no LM head: outputs are the cache only
        onnxsight.verify_generation(model, inputs, prog)  # GEN004
    """,
    how="Export the model class with the head (`LlamaForCausalLM`, `T5ForConditionalGeneration`).",
    tags=("generation", "usage"))

GENERATION_FIRST_STEP_NEEDED = define(
    "GEN005", "generation-first-step-needed", E,
    "the decoder takes the cross-attention cache ({inputs}), which no step has computed at step 0: "
    "pass the first step's program too ({{'first_step': ...}})",
    "Export the decoder's first step (without a cache) as well: onnxsight.export_generation does.",
    what="Refuses an encoder-decoder generation whose decoder reads a cross-attention cache without a "
         "first-step program that computes it.",
    why="The cross-attention keys and values come from the encoder's states at the first decoder step; "
        "fed empty, every later step attends to nothing.",
    example="""
        onnxsight.verify_generation(bart, inputs, {"encoder": enc, "decoder": dec})   # GEN005
    """,
    how="Pass `{'encoder': ..., 'first_step': ..., 'decoder': ...}` (optimum's decoder_model.onnx is "
        "the first step, decoder_with_past_model.onnx the decoder).",
    tags=("generation", "usage", "encoder-decoder"))

GENERATION_CACHE_UNPAIRED = define(
    "GEN006", "generation-cache-unpaired", E,
    "the {program}'s cache input {input} is returned by no step (no output {output}); cache outputs: {outputs}",
    "Name the cache outputs present.X for the inputs past_key_values.X (onnxsight.export does).",
    what="Refuses a step program whose cache input has no output of any step to feed it.",
    why="Each step must be fed the cache the previous step returned; paired by position instead of "
        "name, a layer's keys could be fed another layer's values.",
    example="""
        onnxsight.verify_generation(model, inputs, prog)   # GEN006: input past_key_values.0.key, no present.0.key
    """,
    how="Export with onnxsight (it names them), or pass `output_names=` so that `present.X` pairs "
        "with `past_key_values.X`.",
    tags=("generation", "usage", "cache"))

GENERATION_NEAR_TIE = define(
    "GEN007", "generation-near-tie", N,
    "step {step}: ONNX Runtime picks token {onnx_token} where PyTorch picks {torch_token} (row {row}), "
    "a near-tie in PyTorch's own logits ({torch_logit} against {other_logit}, {gap} apart, within the "
    "tolerance {allowed}); not a defect, and the loop goes on with PyTorch's token",
    "Nothing to fix: a difference within tolerance can swap two tokens whose logits tie.",
    what="Notes a step where the exported loop's top-1 token differs from PyTorch's only because PyTorch's "
         "two candidates are closer than the logits' tolerance.",
    why="Float32 kernels sum in another order; at a near-tie that picks the other token, which is not "
        "a defect of the export. Said so, it is not mistaken for one.",
    example="""
        # GEN007: step 9: ONNX Runtime picks token 71 where PyTorch picks 12 (row 0), a near-tie in
        # PyTorch's own logits (0.4132 against 0.4131, 3.1e-05 apart, within the tolerance 0.000183)
    """,
    how="Nothing to fix. Later steps are fed PyTorch's token, so they stay comparable.",
    tags=("generation", "accuracy"))

GENERATION_CAPTURE_DIFFERS = define(
    "GEN008", "generation-capture-differs", E,
    "step {step}: the ONNX model matches the exported program on PyTorch's inputs, but the exported "
    "program differs from the eager model ({detail}): the capture changed what the model computes at this step",
    "Export with example inputs like this step's (its past length, its padding), or make the branch "
    "that depends on them tensor code.",
    what="Reports a divergence that the per-node comparison does not find because the exported "
         "program itself, captured at other inputs, computes something else than the eager model here.",
    why="torch.export specialises Python branches on the example (a mask that was all ones, a cache "
        "that was empty); the ONNX model then faithfully reproduces a program that is not the model.",
    example="""
        # GEN008: step 0: the ONNX model matches the exported program on PyTorch's inputs, but the exported
        # program differs from the eager model (logits differ by 0.71): ...
    """,
    how="Read the export's CAP diagnostics for the specialised branch; export with inputs that take "
        "the branch this step takes (a padded prompt, a non-empty cache).",
    tags=("generation", "capture"))

GENERATION_PER_NODE_UNAVAILABLE = define(
    "GEN009", "generation-per-node-unavailable", W,
    "step {step}: the per-node comparison of the {program} did not run: {reason}",
    "Pass the ONNXProgram (onnx_models= for another ONNX file of it) so the step can be compared per node.",
    what="Warns that the first diverging step could not be compared value by value.",
    why="Without the per-node comparison the divergence has a step but no node and no line.",
    example="""
        onnxsight.verify_generation(model, inputs, {"decoder": "decoder.onnx"})
        # GEN009: step 3: the per-node comparison of the decoder did not run: decoder.onnx is a file
        # without its ONNXProgram
    """,
    how="Pass the program onnxsight exported (`{'decoder': prog}`), with `onnx_models={'decoder': path}` "
        "for a file derived from it (an optimised copy).",
    tags=("generation", "coverage"))

GENERATION_POSITIONS_COUNT_PADDING = define(
    "GEN010", "generation-positions-count-padding", W,
    "the prompt is left-padded (rows {rows}) but the {program} takes no position_ids: it numbers the "
    "padding as positions, where generate() starts each row at 0",
    "Export the step with position_ids (onnxsight.export_generation does), and feed them as generate() does.",
    what="Warns that a step program without a `position_ids` input cannot place a left-padded row's "
         "tokens where `generate()` does.",
    why="Both loops then agree with each other, and both differ from the model's own `generate()` for "
        "every padded row: a wrong answer that a comparison of the two loops alone does not show.",
    example="""
        inputs = tokenizer(["Hi", "Hello there"], padding=True, padding_side="left", return_tensors="pt")
        onnxsight.verify_generation(model, inputs, prog)   # GEN010: rows 0
    """,
    how="Export the step with `position_ids` among its inputs.",
    tags=("generation", "inputs"))

GENERATION_MODEL_CALL_FAILED = define(
    "GEN011", "generation-model-call-failed", E,
    "PyTorch's {phase} step of {model} failed: {error}",
    "Pass a transformers model with a language-model head that takes a cache (use_cache=True).",
    what="Refuses a model the PyTorch side of the loop cannot call as a generative model; at a later step "
         "(the loop past the model's positions), ends the loop there, the steps that ran kept in the result.",
    why="The PyTorch loop drives the model with its own cache object, as generate() does.",
    example="""
        onnxsight.verify_generation(my_module, inputs, prog)   # GEN011: forward() got an unexpected keyword
        onnxsight.verify_generation(gpt2, inputs, steps=2000)  # a 6-token prompt; GEN011: PyTorch's decode
        # (step 1019) step of GPT2LMHeadModel failed: IndexError: index out of range in self (this step's
        # tokens reach position 1024, past the model's config.n_positions = 1024: ask for fewer steps ...)
    """,
    how="Pass a transformers model (`...ForCausalLM`, `...ForConditionalGeneration`) or a module whose "
        "forward() takes `input_ids`, `attention_mask`, `position_ids` and `past_key_values` (a "
        "`DynamicCache`); ask for no more steps than the model has positions for.",
    tags=("generation", "usage"))

GENERATION_STEP_OUTSIDE_EXPORT = define(
    "GEN012", "generation-step-outside-export", E,
    "step {step} of the generation ({phase}) is outside what the exported {program} accepts ({detail}); "
    "ONNX Runtime checks none of torch.export's guards and runs it on the branches the export's example "
    "took: {what}",
    "Export the step with example inputs like this step's (its past length, its prompt's length), or write "
    "the branch on these sizes as tensor code (torch.where, torch.cond).",
    what="Reports a diverging step whose inputs the exported program does not take, where no node of the ONNX "
         "graph differs from that program: a size outside a dim's range that the export narrowed (CAP007), a guard of "
         "torch.export that fails (two sizes in another relation than in the export's example), or a static "
         "axis of another size.",
    why="The ONNX model has no guards: it runs any size, computing what the model computed for the "
        "export's example. Where the model's Python code branches on the sizes, that is another model, "
        "and no single node of the ONNX graph is wrong.",
    example="""
        class Decoder(nn.Module):
            def forward(self, input_ids, attention_mask, position_ids, past_key_values):
                if past_key_values.get_seq_length() > input_ids.shape[1]:   # taken at the export's example
                    ...
        onnxsight.verify_generation(Decoder(), prompt, steps=8)
        # GEN012: step 0 of the generation (prompt) is outside what the exported decoder accepts (Guard failed:
        # past_key_values['0.key'].size()[2] >= 3); ONNX Runtime checks none of torch.export's guards and
        # runs it on the branches the export's example took: the logits differ by 3.22
    """,
    how="Read the export's CAP007 warning: it names the dim that was narrowed and the line that narrowed it. "
        "Make that branch tensor code, or export with examples that take the branch this step takes.",
    tags=("generation", "capture", "shape"))
