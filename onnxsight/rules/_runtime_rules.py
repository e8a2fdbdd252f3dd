"""Rules of running and verifying the model: ONNX Runtime, accuracy, the model zoo, internal errors."""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E, W, N = Level.ERROR, Level.WARNING, Level.NOTE

# -- ORT: ONNX Runtime --------------------------------------------------------------------------
ORT_SESSION_FAILED = define(
    "ORT001", "onnxruntime-session-failed", E,
    "ONNX Runtime could not load the model on {providers}: {error}",
    "See the error; an op/dtype combination without a kernel is the usual cause.",
    what="Reports an error creating an `onnxruntime.InferenceSession` for the exported model.",
    why="A model that passes the ONNX checker may still use an operator/dtype combination "
        "ONNX Runtime has no kernel for, or an opset newer than the installed runtime.",
    example="""
        prog = onnxsight.export(model_with_complex_values, (x,))
        onnxsight.verify(prog)        # ORT001: could not find an implementation for Mul(14) complex64
    """,
    how="Read the node and dtype in the error; cast around that node, or upgrade onnxruntime "
        "for newer opsets.",
    tags=("onnxruntime",))

ORT_RUN_FAILED = define(
    "ORT002", "onnxruntime-run-failed", E,
    "ONNX Runtime failed running the model on {providers}: {error}",
    "See the error; shape mismatches usually mean an input changed size along a static dimension.",
    what="Reports an error raised by `InferenceSession.run`.",
    why="The model loads but cannot compute for these inputs: usually an input size that was "
        "exported as static, or a data-dependent size assertion that does not hold.",
    example="""
        prog = onnxsight.export(model, (torch.randn(1, 3),))   # batch exported as static 1
        prog(torch.randn(4, 3))                                 # ORT002: invalid dimension
    """,
    how="Export with `dynamic_shapes` for the dimensions that vary, or feed inputs of the "
        "exported sizes.",
    tags=("onnxruntime",))

PROVIDER_UNAVAILABLE = define(
    "ORT003", "execution-provider-unavailable", E,
    "requested provider {requested} is not available; available providers are {available}",
    "Install onnxruntime-gpu for CUDA, or pick one of the available providers.",
    what="Reports an execution provider requested for verification that the installed "
         "ONNX Runtime does not have.",
    why="Verifying on the wrong provider would compare the wrong kernels.",
    example="""
        onnxsight.verify(prog, providers=("CUDAExecutionProvider",))   # ORT003 with CPU-only onnxruntime
    """,
    how="Install the runtime package with the provider (`onnxruntime-gpu`) or choose one of the "
        "providers listed.",
    tags=("onnxruntime", "provider"))

PROVIDER_FALLBACK = define(
    "ORT004", "execution-provider-fallback", W,
    "requested provider {requested} is not available; fell back to {used}",
    "Install the provider's runtime to run on it.",
    what="Warns that a session was created on a fallback provider instead of the requested one "
         "(for example CUDA failed to initialise and CPU was used).",
    why="Results and timings then describe the CPU kernels, not the ones you asked for.",
    example="""
        onnxsight.verify_onnx("m.onnx", target="CUDAExecutionProvider")   # ORT004 without a GPU
    """,
    how="Check the CUDA/cuDNN versions the installed onnxruntime-gpu expects, or request the "
        "provider that was used.",
    tags=("onnxruntime", "provider"))

# -- ACC: accuracy and verification -------------------------------------------------------------
OUTPUT_MISMATCH = define(
    "ACC001", "output-mismatch", E,
    "output {output} differs from {reference}: max abs diff {max_abs_diff}, max rel diff {max_rel_diff} "
    "(tolerance atol={atol}, rtol={rtol})",
    "Look at the root-cause nodes reported with it.",
    what="Reports a model output whose ONNX Runtime value differs from PyTorch's beyond the "
         "tolerance for its dtype.",
    why="The exported model computes something else; the per-node comparison (ACC002) says "
        "where it starts.",
    example="""
        result = onnxsight.verify(prog)
        result.passed        # False: ACC001 for output 'logits'
    """,
    how="Open the ACC002 root cause reported with it; if the difference is expected (float16, "
        "random ops) pass a looser `onnxsight.Tolerance`.",
    tags=("accuracy",))

NODE_DIVERGENCE = define(
    "ACC002", "node-divergence-root-cause", E,
    "{value} ({target} -> {onnx_op}{fused}) is the first value to diverge: max abs diff {max_abs_diff} "
    "while all its inputs match",
    "The translation of this op or the runtime kernel disagrees with PyTorch; the repro bundle isolates it.",
    what="Reports an intermediate value that differs from PyTorch while all its inputs agree: "
         "the node where the divergence starts. When an optimised model is verified "
         "(`onnx_model=`) and the node making the value is a fusion, the message lists the "
         "exported graph's ONNX and FX nodes it replaced, the user's lines and the modules they "
         "came from (`fused` is empty otherwise).",
    why="Downstream mismatches follow from it; fixing this node usually fixes the outputs.",
    example="""
        result = onnxsight.verify(prog, per_node=True)
        result.root_causes    # ACC002 rows: the first diverging values
        # an ORT-optimised BERT whose fused Attention is wrong:
        # ACC002 reshape_1 (aten.reshape.default -> Attention, which replaced 18 ONNX nodes (MatMul, Add,
        # Reshape, Transpose, Div, Softmax) of FX nodes linear, view, ... in encoder.layer.0.attention.self)
        # is the first value to diverge: max abs diff 0.12 while all its inputs match
    """,
    how="Run `onnxsight.verify(prog, mode=\"isolated\")` to confirm with PyTorch's own inputs, "
        "then report the translation with the repro bundle. For a fused node of an optimised model, "
        "verify the model as exported (it should pass), then turn that fusion off in the optimiser "
        "(ONNX Runtime: `FusionOptions`, for example `enable_attention = False`) or report it there.",
    tags=("accuracy", "root-cause"))

NAN_INF_INTRODUCED = define(
    "ACC003", "nan-or-inf-introduced", E,
    "{value} ({target}) has {count} NaN/Inf values where {reference} has none",
    "Check for overflow (float16) or division by zero in this op.",
    what="Reports values where ONNX Runtime produces NaN or Inf and PyTorch does not.",
    why="NaN/Inf propagate to every output; the first value where they appear is the cause.",
    example="""
        # float16 model whose softmax overflows in the runtime's kernel
        onnxsight.verify(prog_fp16)     # ACC003 at the softmax input
    """,
    how="Compute the op in float32 (cast around it) or rescale its inputs.",
    tags=("accuracy",))

SHAPE_MISMATCH = define(
    "ACC004", "shape-mismatch", E,
    "{value} has shape {actual}, expected {expected}",
    "The translation computes a different shape; report it.",
    what="Reports a value whose ONNX shape differs from PyTorch's.",
    why="Shapes must match exactly; values cannot even be compared.",
    example="""
        onnxsight.verify(prog)   # ACC004: view_1 has shape [2, 6], expected [2, 3, 2]
    """,
    how="Report the translation named in the diagnostic's properties.",
    tags=("accuracy",))

DTYPE_MISMATCH = define(
    "ACC005", "dtype-mismatch", W,
    "{value} has dtype {actual}, expected {expected}",
    "A cast is missing or extra in the translation.",
    what="Warns about a value whose ONNX dtype differs from PyTorch's.",
    why="Values may still be close, but downstream precision and memory differ.",
    example="""
        onnxsight.verify(prog)   # ACC005: sum_1 has dtype float32, expected float64
    """,
    how="Report the translation; a custom translation can add the missing `Cast`.",
    tags=("accuracy", "dtype"))

DIVERGENCE_PROPAGATED = define(
    "ACC006", "divergence-propagated", N,
    "{count} values downstream of {root} diverge because of it",
    "Fix the root cause; these follow from it.",
    what="Groups the mismatching values downstream of a root cause (ACC002).",
    why="They are consequences, not separate problems; grouping keeps reports short.",
    example="""
        onnxsight.verify(prog)   # ACC006: 14 values downstream of layer_norm diverge because of it
    """,
    how="Fix the root cause named in the message.",
    tags=("accuracy",))

BORDERLINE_DECISION = define(
    "ACC011", "borderline-decision", W,
    "{value} ({target}) decides differently from {reference} only because its inputs differ within "
    "tolerance: on {reference}'s inputs ONNX Runtime decides the same ({detail}); "
    "{count} values downstream differ because of it",
    "Nothing to fix in the export; graph outputs are still compared end to end. To see every value "
    "compared on the same decisions, run `verify(..., mode=\"isolated\")`.",
    what="Names an op that decides at a threshold or an integer boundary (torchvision's `nms` keeps a "
         "box when its IoU with every higher-scored box is at most the threshold; a comparison, a cast "
         "to an integer, argmax, floor or round) whose result differs from PyTorch's in a propagated "
         "run, while each of its inputs matched within tolerance and the same ONNX nodes fed PyTorch's "
         "exact inputs decide exactly as PyTorch.",
    why="Such an op is discontinuous: an IoU within float32 rounding of the threshold, or a box corner "
        "within rounding of an integer, flips with differences far below any tolerance, so one box "
        "more or less is rounding, not a wrong translation. Calling it a root cause (ACC002) would fail a correct export; passing it "
        "silently would hide that the ONNX model keeps another box. The values that differ "
        "downstream are listed as following from it, and every graph output must still match.",
    example="""
        result = onnxsight.verify(detector_prog)
        # ACC011: nms_1 (torchvision.nms.default) decides differently from PyTorch only because its
        # inputs differ within tolerance: ... its result has 11557 elements where PyTorch's has 11556 ...
    """,
    how="Nothing to fix when the outputs match. When an output differs end to end (ACC001), the "
        "model's result depends on float32 rounding at this threshold: the exported model is right, "
        "and inputs away from the borderline (a real image rather than random weights) decide alike.",
    tags=("accuracy", "verification"))

ROUNDING_AMPLIFIED = define(
    "ACC014", "rounding-amplified", W,
    "{value} ({target}) differs from {reference} beyond tolerance only because its inputs differ within "
    "tolerance: on {reference}'s inputs ONNX Runtime gives {reference}'s value ({detail}); "
    "{count} values downstream differ because of it",
    "Nothing to fix in the export; graph outputs are still compared end to end. `verify(..., "
    "reference=\"float64\")` measures how far rounding alone moves this value.",
    what="Names an op whose result differs from PyTorch's in a propagated run while each of its inputs "
         "matched within tolerance and the same ONNX nodes fed PyTorch's exact inputs give PyTorch's value "
         "within tolerance: the op amplifies the rounding its inputs carry (a float32 `rsqrt` of a variance "
         "computed from a half-precision model's hidden states, a division by a difference of close values).",
    why="The inputs' differences are rounding (each input passed), and the op itself is translated right "
        "(on PyTorch's inputs it matches), so calling it a root cause (ACC002) would fail a correct export, "
        "typically every half-precision model with a float32 norm. Passing it silently would hide that the "
        "value differs: it is listed with what it does on PyTorch's inputs, the values that differ "
        "downstream follow from it, and every graph output must still match.",
    example="""
        result = onnxsight.verify(onnxsight.export(llama.half(), (input_ids,)))
        # ACC014: rsqrt_1 (aten.rsqrt.default) differs from PyTorch beyond tolerance only because its
        # inputs differ within tolerance: on PyTorch's inputs ONNX Runtime gives PyTorch's value ...
    """,
    how="Nothing to fix when the outputs match. When an output differs end to end (ACC001), the model is "
        "sensitive to rounding at this op: `verify(..., reference=\"float64\")` tells whether ONNX Runtime's "
        "error is within what rounding does to PyTorch's own result.",
    tags=("accuracy", "verification"))

# -- ZOO: nightly model-zoo job -----------------------------------------------------------------
ZOO_MODEL_CRASHED = define(
    "ZOO001", "model-process-crashed", E,
    "model {model} crashed ({reason}) in stage {stage}",
    "Run the model alone with onnxsight export to see the full error.",
    what="Reports a zoo model whose worker process died (signal, segfault, abort).",
    why="A crash hides every other result for the model; the stage says where it happened.",
    example="""
        onnxsight zoo run --suite dev     # ZOO001: model resnet18 crashed (SIGSEGV) in stage verify
    """,
    how="Run `onnxsight export` on the model alone to get the traceback.",
    tags=("zoo",))

ZOO_MODEL_TIMEOUT = define(
    "ZOO002", "model-timed-out", E,
    "model {model} did not finish within {timeout}s (stage {stage})",
    "Raise --timeout or look at the stage that hangs.",
    what="Reports a zoo model that exceeded its time limit.",
    why="A hang blocks the nightly job; the stage tells whether capture, export or "
        "verification hung.",
    example="""
        onnxsight zoo run --timeout 60    # ZOO002 for a model whose capture takes longer
    """,
    how="Raise `--timeout` for large models, or investigate the stage named.",
    tags=("zoo",))

ZOO_MODEL_OOM = define(
    "ZOO003", "model-out-of-memory", E,
    "model {model} exceeded the memory limit of {limit} MB (stage {stage})",
    "Raise --memory-limit or reduce the model's size.",
    what="Reports a zoo model whose process exceeded its memory limit.",
    why="Memory regressions in export or verification show up here first.",
    example="""
        onnxsight zoo run --memory-limit 2000   # ZOO003 for a 3 GB model
    """,
    how="Raise `--memory-limit`, or compare the peak memory with the previous night's run.",
    tags=("zoo", "performance"))

ZOO_REGRESSION = define(
    "ZOO004", "regression-against-baseline", E,
    "model {model} regressed against the baseline: {detail}",
    "Compare with the baseline run's report.",
    what="Reports a model that passed in the baseline run and fails (or got slower/less "
         "accurate beyond thresholds) now.",
    why="Regressions are what the nightly job exists to catch.",
    example="""
        onnxsight zoo report --baseline last-night   # ZOO004: resnet18 export now fails (OPS002)
    """,
    how="Open both runs' reports; the new diagnostics (SARIF `baselineState: new`) say what changed.",
    tags=("zoo",))

ZOO_DEGENERATE_OUTPUTS = define(
    "ZOO005", "eager-outputs-degenerate", E,
    "model {model}: eager outputs are too small to compare ({scale}, below atol {atol}), so any export would match",
    "Give the model weights and inputs whose outputs have a meaningful scale.",
    what="Fails a zoo model whose eager floating-point outputs are all below the tolerance's atol, or all "
         "empty, so the comparison with the exported model cannot fail.",
    why="A model whose outputs are ~1e-25 (a deep network with default initialization, a zero-initialized "
        "head, a detector that keeps no box) passes against an export that computes anything at all: "
        "a broken test, not a pass.",
    example="""
        onnxsight zoo run --suite timm   # ZOO005: model timm_mixer_s16_224: eager outputs are too small
                                         # to compare (largest |value| 0 over 1 output(s), below atol 0.0001)
    """,
    how="Calibrate BatchNorm statistics on the example (one train-mode pass, then eval), re-initialize "
        "zero-initialized heads, lower a detector's score threshold so that it keeps boxes.",
    tags=("zoo", "accuracy"))

ZOO_WITHIN_NOISE_FLOOR = define(
    "ZOO006", "verified-against-noise-floor", N,
    "model {model}: at the float32 tolerance {detail}; every value is within PyTorch's own float32 "
    "rounding error (verify(..., reference=\"float64\")), so the model passes",
    "Nothing to fix; to see the values, run `onnxsight.verify(prog, reference=\"float64\")`.",
    what="Says that a zoo model's verification failed at the default float32 tolerance on values alone "
         "(no dtype or non-finite difference, no runtime error) and passed when judged again "
         "against PyTorch's own float32 error, measured by a float64 run of the same program.",
    why="Deep convolution stacks add thousands of float32 products per value: ONNX Runtime and "
        "PyTorch sum them in other orders, and after 50 layers their values differ by 1e-4 of the "
        "scale, which is what PyTorch's own float32 result differs from float64 by. Failing such a "
        "model would make the nightly job red for rounding; passing it silently would hide that the "
        "default tolerance was not met.",
    example="""
        onnxsight zoo run --suite torchvision --per-node
        # ZOO006: model tv_resnet50: at the float32 tolerance conv2d_28 (aten.conv2d.default -> Conv)
        # is the first value to diverge: max abs diff 0.000133 while all its inputs match; every value ...
    """,
    how="Nothing to fix. A difference beyond the float64 noise floor still fails the model.",
    tags=("zoo", "accuracy"))

# -- INT: onnxsight itself ----------------------------------------------------------------------
INTERNAL_ERROR = define(
    "INT001", "internal-error", E,
    "onnxsight failed internally in {stage}: {error_type}: {error}",
    "Please report this with the SARIF file attached.",
    what="Reports an unexpected exception inside onnxsight itself.",
    why="It is a bug in onnxsight, not in the model; the SARIF file carries the stack.",
    example="""
        # any unexpected exception in an onnxsight stage, for example a translation helper bug
    """,
    how="Open an issue with the SARIF file (`report=True`) attached.",
    tags=("internal",))
