"""Rules of the verification engine's own contract: bad calls to verify(), what it did not compare, and why."""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E, W, N = Level.ERROR, Level.WARNING, Level.NOTE

# -- VER: bad calls to onnxsight.verify (raised as VerificationError before any work) -------------
VERIFY_NOT_A_PROGRAM = define(
    "VER001", "verify-needs-an-onnx-program", E,
    "verify() compares an onnxsight.ONNXProgram with PyTorch; got {given}: {use}",
    "Export first (prog = onnxsight.export(model, args)), or compare an ONNX file with onnxsight.verify_onnx.",
    what="Refuses a first argument to `onnxsight.verify` that is not the program `onnxsight.export` returned "
         "(an `nn.Module`, a path, a `torch.onnx` program, an `onnx.ModelProto`).",
    why="Verification pairs every FX value of the exported program with its ONNX value; without the "
        "program there is nothing to pair, and the error torch or ONNX Runtime would raise later does "
        "not say what was wrong.",
    example="""
        onnxsight.verify(model, (x,))            # VER001: got torch.nn.Module
        onnxsight.verify("model.onnx")           # VER001: got a path; use onnxsight.verify_onnx
    """,
    how="Pass `onnxsight.export(model, args)`; to compare an ONNX file on two providers use "
        "`onnxsight.verify_onnx(path)`.",
    tags=("verification", "usage"))

VERIFY_INPUT_COUNT = define(
    "VER002", "wrong-number-of-inputs", E,
    "the program takes {expected} tensor input(s) ({names}); got {given}",
    "Pass one tensor per argument of forward(), in order (or by name in kwargs).",
    what="Refuses inputs whose number differs from the exported program's tensor inputs.",
    why="Inputs are matched to `forward()`'s arguments by position; a missing or extra one would shift "
        "every other input.",
    example="""
        prog = onnxsight.export(model, (x, bias))
        onnxsight.verify(prog, (x,))             # VER002: takes 2 tensor input(s) (x, bias); got 1
    """,
    how="Pass the same arguments `forward()` was exported with.",
    tags=("verification", "usage", "inputs"))

VERIFY_INPUT_SHAPE = define(
    "VER003", "input-shape-not-accepted", E,
    "input {input} has shape {given}; the exported program accepts {expected} ({detail})",
    "Feed a size the program was exported for, or export that axis as dynamic (dynamic_shapes).",
    what="Refuses an input whose shape the exported program does not accept: a static axis of another "
         "size, a dynamic axis outside its range, or two axes that share a dim with different sizes.",
    why="PyTorch's interpreter skips the program's shape guards, so such an input would appear to "
        "verify, and the deployed model would then reject it.",
    example="""
        prog = onnxsight.export(model, (torch.randn(1, 3, 16, 16),))
        onnxsight.verify(prog, (torch.randn(3, 3, 24, 24),))   # VER003: axis 0 is static 1
    """,
    how="Verify with inputs of the exported sizes, or export with `dynamic_shapes` (or `dynamic_axes`) "
        "for the axes that vary.",
    tags=("verification", "usage", "inputs", "shape"))

VERIFY_INPUT_DTYPE = define(
    "VER004", "input-dtype-not-accepted", E,
    "input {input} has dtype {given}; the exported program takes {expected}",
    "Cast the input to the exported dtype (x.to(torch.float32)).",
    what="Refuses an input whose dtype differs from the one the program was exported with.",
    why="The ONNX model declares its input types; ONNX Runtime rejects other dtypes, and PyTorch "
        "would silently compute in the other dtype.",
    example="""
        onnxsight.verify(prog, (torch.randn(5, 8, dtype=torch.float64),))  # VER004: expects float32
    """,
    how="Cast the input, or export again with an example of the dtype you deploy.",
    tags=("verification", "usage", "inputs", "dtype"))

VERIFY_INPUT_DEVICE = define(
    "VER005", "input-device-not-usable", E,
    "input {input} is on device {given}; verification runs PyTorch on {expected}",
    "Pass tensors with data (CPU, or the device named by torch_device).",
    what="Refuses an input on a device verification cannot read data from (a `meta` tensor, or a CUDA "
         "tensor while CUDA is not available).",
    why="Both runtimes need the input's values; a meta tensor has none.",
    example="""
        onnxsight.verify(prog, (torch.empty(5, 8, device="meta"),))   # VER005
    """,
    how="Pass real tensors; use `torch_device=` to choose where PyTorch runs.",
    tags=("verification", "usage", "inputs"))

VERIFY_INPUT_NOT_TENSOR = define(
    "VER006", "input-not-a-tensor", E,
    "input {input} is a {given}, not a tensor (the program expects {expected})",
    "Pass a torch.Tensor (numpy arrays are converted; lists and Python numbers are not).",
    what="Refuses an input that is neither a `torch.Tensor` nor a numpy array where the program "
         "takes a tensor.",
    why="A list or a Python number has no dtype or shape to check against the program; guessing one "
        "would verify something the model never receives.",
    example="""
        onnxsight.verify(prog, ([[1.0, 2.0]],))    # VER006: input x is a list
    """,
    how="Wrap the value with `torch.tensor(value, dtype=...)` of the exported dtype.",
    tags=("verification", "usage", "inputs"))

VERIFY_ARGUMENT_TYPE = define(
    "VER007", "verify-argument-of-wrong-type", E,
    "{argument} must be {expected}; got {given}",
    "Pass the argument in the type its documentation names.",
    what="Refuses an option of `onnxsight.verify` given in the wrong type, for example "
         "`providers=\"CPUExecutionProvider\"` (a string, where a sequence of provider names is expected).",
    why="A string is a sequence of characters: ONNX Runtime would be asked for providers 'C', 'P', "
        "'U', ... and fail with an unrelated message.",
    example="""
        onnxsight.verify(prog, providers="CPUExecutionProvider")    # VER007: use ("CPUExecutionProvider",)
    """,
    how="Wrap a single provider in a tuple: `providers=(\"CPUExecutionProvider\",)`.",
    tags=("verification", "usage"))

VERIFY_DEVICE_UNAVAILABLE = define(
    "VER008", "torch-device-unavailable", E,
    "torch_device={device} cannot be used here: {reason}",
    "Use torch_device=\"cpu\", or run where the device is available.",
    what="Refuses a `torch_device` that this PyTorch cannot run on (`cuda` without CUDA, an unknown "
         "device string).",
    why="The PyTorch reference would fail half-way through the graph with a driver error.",
    example="""
        onnxsight.verify(prog, torch_device="cuda")    # VER008 on a machine without CUDA
    """,
    how="Leave `torch_device` at its default (`cpu`) or install a CUDA build of PyTorch.",
    tags=("verification", "usage", "device"))

VERIFY_TOLERANCE_TYPE = define(
    "VER009", "tolerance-not-a-tolerance", E,
    "tolerance must be an onnxsight.Tolerance; got {given} (for one pair of bounds: {use})",
    "Use onnxsight.Tolerance.uniform(atol, rtol) for one pair of bounds.",
    what="Refuses a `tolerance` that is not an `onnxsight.Tolerance` (for example a tuple `(atol, rtol)`).",
    why="A tuple does not say which dtype or value it applies to; the per-dtype defaults would be "
        "replaced silently or not at all.",
    example="""
        onnxsight.verify(prog, tolerance=(1e-3, 1e-3))     # VER009
    """,
    how="`tolerance=onnxsight.Tolerance.uniform(1e-3, 1e-3)`, or `Tolerance(dtypes={\"float32\": (1e-3, 1e-3)})`.",
    tags=("verification", "usage", "tolerance"))

VERIFY_INVALID_MODE = define(
    "VER010", "invalid-verification-mode", E,
    "mode must be one of {choices}; got {given}",
    "Use mode=\"propagated\" (the deployed model) or mode=\"isolated\" (each node fed PyTorch's inputs).",
    what="Refuses an unknown `mode`.",
    why="The mode decides what a mismatch means; an unknown one cannot be guessed.",
    example="""
        onnxsight.verify(prog, mode="fast")     # VER010: propagated, isolated
    """,
    how="Pick one of the modes listed in the message.",
    tags=("verification", "usage"))

VERIFY_UNKNOWN_INPUT = define(
    "VER011", "unknown-input-name", E,
    "keyword input {input} is not an input of the exported program; its inputs are {names}",
    "Name the inputs as forward() names its arguments.",
    what="Refuses a keyword input whose name is not one of `forward()`'s exported arguments.",
    why="Inputs are matched by name; an unknown name means an input is missing or misspelled.",
    example="""
        onnxsight.verify(prog, kwargs={"inputs": x})   # VER011: its inputs are x, bias
    """,
    how="Use the argument names listed in the message.",
    tags=("verification", "usage", "inputs"))

VERIFY_MODEL_INPUTS_DIFFER = define(
    "VER012", "onnx-model-inputs-differ", E,
    "the ONNX model takes {onnx_count} input(s) ({onnx_names}); the program {count} ({names})",
    "Pass an onnx_model derived from this program (same inputs).",
    what="Refuses an `onnx_model=` whose graph inputs do not match the exported program's inputs.",
    why="Values are paired by name and inputs by position; a model of another program cannot be compared.",
    example="""
        onnxsight.verify(prog, onnx_model="other_model.onnx")   # VER012
    """,
    how="Verify the model exported from this program, or an optimised copy that keeps its inputs.",
    tags=("verification", "usage"))

VERIFY_INVALID_DIM_SIZE = define(
    "VER013", "invalid-dim-size", E,
    "dim_sizes[{dim}] = {given}: {problem}",
    "Name dynamic dims as the ONNX model does (batch) and keep sizes within their range.",
    what="Refuses a `dim_sizes` entry that names no dynamic dim of the program, or a size outside "
         "the dim's range.",
    why="An unknown name would be ignored silently, and a size outside the range is one the model "
        "was never exported for.",
    example="""
        onnxsight.verify(prog, random_inputs=True, dim_sizes={"batch": 100})  # VER013: range [1, 64]
    """,
    how="Use the dim names and ranges listed in the message.",
    tags=("verification", "usage", "shape"))

VERIFY_INVALID_OPTION = define(
    "VER014", "invalid-verify-option", E,
    "{argument} = {given} is not valid: {expected}",
    "Pass a value in the range the message names.",
    what="Refuses an option of `onnxsight.verify` of the right type but an impossible value "
         "(a memory budget of zero bytes, a negative number of repro bundles, an empty provider list).",
    why="The engine would loop, keep nothing, or run on no provider.",
    example="""
        onnxsight.verify(prog, memory_budget=0)    # VER014: memory_budget must be a positive number of bytes
    """,
    how="Use a value in the range named.",
    tags=("verification", "usage"))

VERIFY_NO_EXAMPLE_INPUTS = define(
    "VER015", "no-example-inputs", E,
    "the exported program kept no example inputs; pass args= (inputs: {names})",
    "Pass the inputs explicitly, or random_inputs=True.",
    what="Refuses `verify(prog)` without inputs when the program carries no example inputs (a "
         "program loaded from disk, or exported by another tool).",
    why="Verification needs concrete values to run both sides on.",
    example="""
        onnxsight.verify(prog)    # VER015 for a program without example inputs
    """,
    how="Pass `args=`, or `random_inputs=True` to draw inputs from the input specs.",
    tags=("verification", "usage", "inputs"))

VERIFY_EXTERNAL_DATA_MISSING = define(
    "VER016", "external-data-missing", E,
    "{model} keeps {count} weight(s) in {data}, which does not exist: {weights}",
    "Keep the external data file next to the model under the name the model records, or save the model again.",
    what="Refuses to verify an ONNX file (`verify(prog, onnx_model=path)`, `verify_onnx(path)`) whose "
         "weights live in an external data file that is not where the model says (next to the "
         "model, under the recorded name).",
    why="Verification maps the external data in place, so a model above 2 GB is held once; without "
        "the file there are no weights to run, and ONNX Runtime's own error names neither the file "
        "nor the weights.",
    example="""
        prog.save("big.onnx", external_data=True)     # writes big.onnx and big.onnx.data
        shutil.move("big.onnx", "elsewhere/")         # big.onnx.data left behind
        onnxsight.verify_onnx("elsewhere/big.onnx")   # VER016: big.onnx.data does not exist
    """,
    how="Move or copy the `.data` file along with the `.onnx` file (external data locations are "
        "relative to the model's folder), or save the model again.",
    tags=("verification", "usage", "external-data"))

VERIFY_EXTERNAL_DATA_SHORT = define(
    "VER017", "external-data-too-short", E,
    "{model} reads {count} weight(s) past the end of {data} ({size} bytes, {needed} needed): {weights}",
    "Copy the external data file again (it is truncated), or save the model again.",
    what="Refuses to verify an ONNX file whose external data file is shorter than the offsets the "
         "model records for its weights: an interrupted copy or download, or another model's file.",
    why="Reading past the end would fail deep inside ONNX Runtime, or map weights that are not the "
        "model's, and the result would not say which file is at fault.",
    example="""
        # big.onnx.data was cut short by an interrupted copy
        onnxsight.verify(prog, onnx_model="big.onnx")   # VER017: reads 12 weight(s) past the end of big.onnx.data
    """,
    how="Copy the `.data` file again, checking its size against the original, or save the model again.",
    tags=("verification", "usage", "external-data"))

# -- ACC008-010: what verification compared, and what it did not --------------------------------
COVERAGE = define(
    "ACC008", "verification-coverage", N,
    "{compared} of {total} FX values compared; not compared: {reasons}",
    "Read result.coverage for the values not compared and why.",
    what="States how many values of the exported program verification compared, and counts the "
         "others by reason (graph input, weight, folded constant, random op, uninitialised, "
         "non-tensor, no ONNX counterpart, outputs only, not reached).",
    why="A passing result means nothing for values that were never compared; saying so keeps a "
        "green check honest.",
    example="""
        result = onnxsight.verify(prog)
        result.coverage_summary     # {'compared': 41, 'graph input': 1, 'weight': 12, 'random op': 1}
    """,
    how="Nothing to fix; a value listed as `no ONNX counterpart` can be paired by keeping its name "
        "in the ONNX model.",
    tags=("verification", "coverage"))

VALUE_NOT_COMPARED = define(
    "ACC009", "value-not-compared", E,
    "{value} ({target}) was not compared: {reason}",
    "Keep the value's name in the ONNX model, or report the engine bug with the model.",
    what="Reports a value that must be compared and was not: a graph output without a comparison row, "
         "or a paired value ONNX Runtime did not return.",
    why="A result without a verdict on an output would pass a model whose output was never looked at.",
    example="""
        result = onnxsight.verify(prog, onnx_model=optimised)   # ACC009: output 'logits' renamed by the optimiser
        result.passed                                           # False
    """,
    how="Keep the output names of the exported model in the optimised copy.",
    tags=("verification", "coverage"))

DIM_SPECIALISED = define(
    "ACC010", "dynamic-dim-breaks-at-another-size", E,
    "dynamic dim {dim} breaks at size {size} (the example has {example}): {detail}",
    "Find where the graph bakes the example size in (a reshape to constant sizes) and use the symbolic size.",
    what="Reports a dynamic dim whose model verifies at the example size but not at another size in "
         "its range: the exported graph computes with the example's size somewhere.",
    why="The model declares the dim dynamic, so it will be fed other sizes in deployment and "
        "compute a wrong result, or fail, there.",
    example="""
        prog = onnxsight.export(model, (x,), dynamic_shapes=({0: Dim("batch")},), verify=True)
        # ACC010: dynamic dim batch breaks at size 6 (the example has 5): view_1 differs ...
    """,
    how="Look at the value named (its root cause when there is one) for a shape computed from "
        "constants; write the size as `x.shape[0]` so it stays symbolic.",
    tags=("verification", "shape", "dynamic"))

EXPORT_DIFFERS_FROM_EAGER = define(
    "ACC007", "export-differs-from-eager", E,
    "the export is not what your model computes eagerly: output {output} differs from forward() by "
    "{max_abs_diff} (tolerance {tolerance}) while the ONNX model matches the exported program",
    "Look for Python state in forward(): a counter, a global or attribute read at trace time, "
    "randomness or data-dependent Python control flow; make it a tensor input or a buffer.",
    what="Compares the model's eager `forward()` with the exported model on the same inputs, and "
         "reports outputs that disagree although ONNX Runtime agrees with the exported program "
         "(so the ONNX translation is right, the capture is not).",
    why="torch.export records one trace: Python values read while tracing (a global, a call "
        "counter, `self.step`, a random draw) are frozen into the program. The exported model "
        "then computes what the model computed once, not what it computes now. Comparing ONNX "
        "with the exported program alone cannot see this.",
    example="""
        SCALE = {"value": 2.0}

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = 0

            def forward(self, x):
                self.calls += 1                       # a Python counter: baked as 1
                return x * self.calls * SCALE["value"]   # ACC007: eager now multiplies by 2, 3, ...
    """,
    how="Keep state that changes between calls in tensors (a registered buffer updated in "
        "place, or an input and an output), read configuration in `__init__`, and avoid "
        "randomness in inference. If the difference is intended (the model is meant to be "
        "frozen at the traced value), compare against a fresh model instead.",
    tags=("accuracy", "capture"))
