"""Rules about operators and dtypes: translation, opsets, edge-case semantics, dtype support."""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E, W, N = Level.ERROR, Level.WARNING, Level.NOTE

# -- OPS: operator translation ------------------------------------------------------------------
UNSUPPORTED_CUSTOM_OP = define(
    "OPS001", "custom-op-without-translation", E,
    "custom operator {op} has no ONNX translation ({calls})",
    "Pass custom_translations={'namespace::op': fn} to export(), where fn builds the ONNX nodes.",
    what="Reports each custom operator (`torch.library`, a C++ extension) that has no "
         "translation, once, at its first call, with the number of calls and the other calls' "
         "lines as related locations. Every such operator in the graph is reported, not only the first.",
    why="onnxsight cannot know what a custom operator computes; without a translation the model "
        "cannot be expressed in ONNX.",
    example="""
        @torch.library.custom_op("mylib::scale", mutates_args=())
        def scale(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        class M(torch.nn.Module):
            def forward(self, x):
                return torch.ops.mylib.scale(x)      # OPS001
    """,
    how="""
        Translate it with ONNX ops, or emit a node in a custom domain for a runtime that has it:

        ```python
        def scale_onnx(b, x):
            return b.op("Mul", x, b.scalar(2.0, like=x))

        onnxsight.export(M(), (x,), custom_translations={"mylib::scale": scale_onnx})
        ```
    """,
    tags=("translate", "custom-op"))

VISION_OP_WITHOUT_TRANSLATION = define(
    "OPS008", "vision-op-without-translation", E,
    "torchvision operator {op} has no ONNX translation: {advice}; translated torchvision operators: {translated}",
    "Use a translated torchvision operator, or pass custom_translations={'torchvision::op': fn} to export().",
    what="Reports each call to a torchvision operator (`torch.ops.torchvision.*`) onnxsight does not "
         "translate, with what can be done for that operator, instead of the generic custom-operator "
         "error (OPS001).",
    why="torchvision's detection ops are not ATen ops: `nms`, `roi_align` and `roi_pool` have ONNX "
        "counterparts (NonMaxSuppression, RoiAlign, MaxRoiPool) and are translated; the others "
        "(position-sensitive RoI pooling, deformable convolution, quantized NMS) have none, or none "
        "ONNX Runtime runs, and the user needs to know which ones and what to use instead.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x, rois):
                return torchvision.ops.ps_roi_align(x, rois, 7)   # OPS008
    """,
    how="Follow the advice in the message: most often a custom translation "
        "(`custom_translations={'torchvision::ps_roi_align': fn}`) written with ONNX ops, or the "
        "translated operator the model can use instead (`roi_align` for `ps_roi_align`).",
    tags=("translate", "custom-op", "vision"))

UNSUPPORTED_OP = define(
    "OPS002", "op-without-translation", E,
    "operator {op} has no ONNX translation in onnxsight",
    "Pass custom_translations for it, or rewrite the line with supported operations.",
    what="Reports each standard ATen operator in the graph that onnxsight has no translation for.",
    why="Every node must become ONNX; one missing translation stops the export. All of them are "
        "listed at once so one round of fixes is enough.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return torch.special.zeta(x, 2.0)    # OPS002 if aten.special_zeta is not translated
    """,
    how="Rewrite the line with operations that are supported, or pass a translation in "
        "`custom_translations={torch.ops.aten.special_zeta.default: fn}`; please also open an "
        "issue naming the operator.",
    tags=("translate",))

OP_NEEDS_NEWER_OPSET = define(
    "OPS003", "op-needs-newer-opset", E,
    "operator {op} needs opset {required} or newer; the export targets opset {opset}",
    "Export with the opset_version named in the message, or newer.",
    what="Reports an operator whose only translations need a newer ONNX opset than the one "
         "requested.",
    why="The ONNX operator it maps to did not exist (or lacked an attribute) in older opsets.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return torch.nn.functional.rms_norm(x, (8,))   # RMSNormalization: opset 23

        onnxsight.export(M(), (torch.randn(2, 8),), opset_version=18)   # OPS003
    """,
    how="Raise `opset_version` to the version named, if the target runtime supports it.",
    tags=("translate", "opset"))

TRANSLATION_FAILED = define(
    "OPS004", "translation-failed", E,
    "translating {op} failed: {error_type}: {error}",
    "This is a limitation of the translation for these arguments; a custom translation can replace it.",
    what="Reports a translation function that raised for a particular call (an argument "
         "combination it does not handle).",
    why="The operator is supported in general but not with these arguments or dtypes; the "
        "message gives the exception raised.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return torch.view_as_real(torch.fft.fft(x))   # complex intermediate values
    """,
    how="Change the call (another dtype, argument or layout), or pass a custom translation for "
        "the operator; please report the message as an issue.",
    tags=("translate",))

EDGE_CASE_SEMANTICS = define(
    "OPS005", "op-edge-case-semantics", N,
    "{op} differs between PyTorch and ONNX at edge cases: {detail}",
    "Check results at the edge cases named; they are usually harmless.",
    what="Notes operators whose ONNX counterpart differs from PyTorch at edge cases: rounding "
         "modes of integer division, the sign of `fmod`/`remainder`, NaN propagation in "
         "`maximum`/`minimum`/`amax`, ties in `topk`/`sort`, signed right shifts.",
    why="Verification with random inputs rarely hits these cases, so differences show up only "
        "in production data (negative integers, NaN, equal values).",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return torch.div(x, 3, rounding_mode="floor")   # OPS005 note
    """,
    how="Verify with inputs that contain the edge cases (negative values, NaN, duplicates). If "
        "they matter, make them explicit (for example `torch.nan_to_num` before `maximum`).",
    tags=("translate", "semantics"))

UNSUPPORTED_OP_ARGUMENTS = define(
    "OPS006", "op-arguments-unsupported", E,
    "{op}: argument {argument}={got} is not translated; supported: {supported}",
    "Use a supported variant of the call or pass a custom translation.",
    what="Reports a call whose arguments select a variant the translation does not implement "
         "(for example a padding mode, an interpolation mode, or a symbolic size where the "
         "translation needs a static one).",
    why="Translating the other variant would compute something else; the message lists the "
        "supported variants.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return torch.nn.functional.interpolate(x, size=(3, 3), mode="bilinear",
                                                       antialias=True, align_corners=True)   # OPS006
    """,
    how="Use one of the variants listed in the message, or pass a custom translation.",
    tags=("translate",))

NONDETERMINISTIC_OP = define(
    "OPS007", "random-op-in-graph", N,
    "{op} draws random numbers; ONNX Runtime's generator gives different values than PyTorch's",
    "Pass random values as inputs, or remove the random op for inference.",
    what="Notes random operators (`rand`, `randn`, `bernoulli`, `normal`, `randint`, training-mode "
         "dropout) in the exported graph.",
    why="ONNX's random operators use another generator: outputs never match PyTorch bit for bit, "
        "and verification of values downstream of them reports mismatches that are expected.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return x + torch.randn_like(x) * 0.1    # OPS007
    """,
    how="Generate the noise outside the model and pass it as an input, or disable it in "
        "`eval()` mode (as `nn.Dropout` does).",
    tags=("translate", "semantics"))

IMPRECISE_RUNTIME_DFT = define(
    "OPS010", "fft-length-runs-imprecise-dft", W,
    "{op}: dim {dim} of length {length} runs ONNX Runtime's DFT, whose float32 error grows with a length "
    "that is not a power of two (3e-4 of the output's scale at 1100 points, where PyTorch's is 1e-7)",
    "Give the transformed dim a static length of at most 512 points (onnxsight then computes the "
    "transform as an exact MatMul) or a power of two, or verify its outputs at a looser tolerance.",
    what="Warns about an FFT (`torch.fft.*`, `torch.stft`, `torch.istft`) over a dim whose length "
         "is symbolic, or static, longer than the exact MatMul form covers and not a power of two: "
         "that transform runs ONNX's `DFT` operator.",
    why="ONNX Runtime's `DFT` loses float32 precision at lengths that are not a power of two, the "
        "more the longer (2e-5 of the output's scale at 100 points, 1e-4 at 500, 3e-4 at 1100), "
        "where PyTorch's error stays near 1e-7. Verification at float32 tolerances reports those "
        "outputs as mismatches.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):                    # x: (batch, 1100)
                return torch.fft.rfft(x).abs()       # OPS010: 1100 points, not a power of two
    """,
    how="""
        Transform fixed-size frames (a static length up to 512, e.g. `torch.stft` with its `n_fft`),
        pad the signal to a power of two (`torch.fft.rfft(x, n=2048)`), or verify those outputs
        with a looser tolerance (`onnxsight.Tolerance`).
    """,
    tags=("translate", "numerics"))

# -- DTY: dtypes -----------------------------------------------------------------------------------
DTYPE_NOT_REPRESENTABLE = define(
    "DTY001", "dtype-not-representable-in-onnx", E,
    "value {value} has dtype {dtype}, which ONNX cannot represent",
    "Convert the value to a dtype ONNX has (float32, int64, ...) before it crosses op boundaries.",
    what="Reports graph values whose dtype has no ONNX tensor type: `complex32`, quantized "
         "dtypes, sub-byte integer dtypes (`uint1`..`uint7`), exotic float8 variants.",
    why="The value cannot be stored in an ONNX graph; translation of every op touching it fails.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return (x.to(torch.complex32) * 2).real    # DTY001: complex32
    """,
    how="Keep the computation in a representable dtype (`complex64`, or real/imaginary pairs "
        "with `torch.view_as_real`, `float16` instead of `complex32`).",
    tags=("dtype",))

DTYPE_NOT_RUN_BY_ORT = define(
    "DTY002", "dtype-not-run-by-onnxruntime", W,
    "{op} with dtype {dtype} is valid ONNX but ONNX Runtime has no kernel for it",
    "Cast to a supported dtype around the op, or run on a provider that has the kernel.",
    what="Names the node and dtype when ONNX Runtime refuses a session because it has no kernel for "
         "an op at the dtype the graph uses (its 'Could not find an implementation' error), located "
         "at the line of your code that produced the node.",
    why="The model passes the ONNX checker, yet fails to load in ONNX Runtime (ORT001) on that "
        "provider; the error names only an ONNX node, this names your line.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return x.to(torch.bfloat16) * 2          # no bfloat16 Mul on ONNX Runtime's CPU provider
    """,
    how="Cast to float32 around the op for CPU inference, or verify on a provider with the kernel "
        "(CUDA has bfloat16 for most ops).",
    tags=("dtype", "onnxruntime"))

FLOAT4_OP_NOT_TRANSLATED = define(
    "DTY007", "float4-op-not-translated", E,
    "{op} on {value} of dtype float4_e2m1fn_x2 (two float4 values a byte) has no ONNX translation; "
    "onnxsight translates float4 tensors as weights, inputs and outputs, their copies, and their byte "
    "views (.view(torch.uint8), .view(torch.float4_e2m1fn_x2))",
    "Apply the op to the bytes: view the float4 tensor as uint8 first (w.view(torch.uint8)), and view "
    "the result back if it must stay float4.",
    what="Reports an op other than a byte view or a copy that reads or makes a `float4_e2m1fn_x2` "
         "value. ONNX holds float4 as FLOAT4E2M1 from opset 23, counting values where PyTorch counts "
         "packed pairs (the last dim doubles), and ONNX Runtime 1.32 runs no op on it.",
    why="A shape op on packed pairs (a slice or transpose of the last dim, a reshape) is a different "
        "op on the values ONNX counts; translated as written it would move the wrong nibbles, "
        "silently.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                w = self.w[:, :2]                     # DTY007: aten.slice.Tensor on a float4 weight
                return x + w.view(torch.uint8)
    """,
    how="""
        ```python
        w = self.w.view(torch.uint8)[:, :2]           # slice the bytes: the same pairs
        ```
    """,
    tags=("dtype", "torch.onnx"))

# NOTE: removed, never emitted. Translations keep float64 as ONNX DOUBLE; where an ONNX operator has
# no double variant (Celu, Elu, ...) they compute it from ops that run in double instead of casting.
FLOAT64_DOWNCAST = define(
    "DTY003", "float64-downcast", N,
    "{value} was downcast from float64 to float32",
    "Use float32 inputs, or keep float64 if precision matters.",
    what="Would note a float64 value converted to float32 in the ONNX graph. Removed: onnxsight "
         "never downcasts float64, so no translation emits it.",
    why="A downcast would make results differ from PyTorch by float32 rounding. onnxsight keeps "
        "float64 everywhere (ONNX `DOUBLE`): where an ONNX operator has no double variant, its "
        "translation computes the op from operators that run in double rather than casting to "
        "float32, so the precision the model asks for is kept.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):                        # x: float64: stays float64 in the ONNX graph
                return torch.nn.functional.celu(x)       # no double Celu in ONNX: built from double ops
    """,
    how="Nothing to do. float64 in a graph meant for float32 is DTY004 (float64-promotion).",
    tags=("dtype",), removed=True)

FLOAT64_COMPUTATION = define(
    "DTY004", "float64-promotion", N,
    "{value} ({op}) promotes the computation from {from_dtype} to float64",
    "Create constants with the dtype of the data (torch.tensor(v, dtype=x.dtype)); avoid numpy float64 arrays.",
    what="Notes the node where a float32/float16 computation becomes float64, typically from a "
         "numpy array (float64 by default), `torch.tensor(..., dtype=torch.float64)` or `.double()`.",
    why="float64 runs slower in ONNX Runtime, has fewer kernels (especially on GPU providers), and "
        "is rarely intended; PyTorch promotes silently.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):                        # x: float32
                w = torch.from_numpy(np.linspace(0, 1, 4))  # float64
                return x * w                            # DTY004: promoted to float64
    """,
    how="Build constants with the data's dtype: `torch.from_numpy(arr).to(x.dtype)` or "
        "`np.linspace(0, 1, 4, dtype=np.float32)`.",
    tags=("dtype", "performance"))
