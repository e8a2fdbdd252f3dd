"""Rules about values baked into the graph, inputs and outputs, and the ONNX model checks."""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E, W, N = Level.ERROR, Level.WARNING, Level.NOTE

# -- VAL: values baked into the graph -----------------------------------------------------------
PYTHON_SCALAR_BAKED = define(
    "VAL001", "python-scalar-baked-as-constant", W,
    "input {input} is a Python {type} ({value}) and was baked into the graph as a constant",
    "Pass it as a tensor if it changes between calls.",
    what="Warns about non-tensor inputs (Python `float`, `int`, `bool`, `str`) of `forward()`: "
         "tracing specialises them to the example value.",
    why="The ONNX model has no input for the value: it always computes with the example's "
        "value, whatever the caller passes later. This is the most common silent export bug "
        "listed in the torch.onnx documentation.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x, scale: float):
                return x * scale

        onnxsight.export(M(), (torch.randn(3), 0.5))   # VAL001: scale baked as 0.5
    """,
    how="""
        Pass the value as a tensor so it becomes a graph input:

        ```python
        onnxsight.export(M(), (torch.randn(3), torch.tensor(0.5)))
        ```

        or make it a constructor argument if it is really fixed.
    """,
    tags=("values", "constant"))

NUMPY_CALL_BAKED = define(
    "VAL002", "numpy-result-baked-as-constant", W,
    "a numpy computation was traced as a constant ({detail})",
    "Use torch operations instead of numpy inside forward().",
    what="Warns about tensors built from numpy results inside `forward()` (for example "
         "`torch.from_numpy(np.arange(n))`): tracing sees only the resulting array.",
    why="numpy runs outside the tracer, so its result is frozen into the graph: if it depends on "
        "an input (its size, its values) the ONNX model is wrong for other inputs.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                pos = torch.from_numpy(np.arange(4, dtype=np.float32))   # VAL002
                return x + pos
    """,
    how="Compute it with torch (`torch.arange(x.shape[-1], dtype=x.dtype)`), which is traced "
        "and follows dynamic shapes.",
    tags=("values", "constant", "numpy"))

DATA_DEPENDENT_VALUE = define(
    "VAL003", "data-dependent-value-asserted", W,
    "{op} produces a data-dependent value {guards}",
    "Avoid .item()/nonzero() in forward() where possible; check the asserted ranges hold for all inputs.",
    what="Warns about values whose size or value depends on tensor data (`.item()`, `nonzero`, "
         "`masked_select`, `unique`), and counts the runtime assertions torch.export added "
         "about them.",
    why="The graph is only valid while those assertions hold (for example a size is at least "
        "0 and below a bound); ONNX Runtime does not check them, and data-dependent shapes "
        "defeat memory planning.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return torch.nonzero(x > 0)         # VAL003: output size depends on data
    """,
    how="Prefer fixed-size formulations (`torch.where(mask, x, 0)` instead of `x[mask]`), and "
        "keep values as tensors instead of calling `.item()`.",
    tags=("values", "dynamic-shapes"))

TENSOR_DATA_USE = define(
    "VAL004", "tensor-data-use", W,
    "Tensor.data is used in forward() ({code}); its computation is detached and may be baked in",
    "Use the tensor itself (or .detach()) instead of .data.",
    what="Warns about `.data` inside `forward()`, found on the line of the captured graph.",
    why="`.data` bypasses autograd and tracing alike: non-strict capture cannot lift the alias "
        "(it fails), and where it is captured the value may be treated as a constant.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return x.data * 2 + x                # VAL004
    """,
    how="Use `x` directly, or `x.detach()` when gradient isolation is the intent.",
    tags=("values",))

CONSTANT_TENSOR_BAKED = define(
    "VAL005", "tensor-constant-baked", N,
    "tensor {name} of shape {shape} created in forward() was stored as a constant",
    "Register it as a buffer if it should be a named weight.",
    what="Notes tensors created inside `forward()` from Python data (`torch.tensor([...])`) "
         "that torch.export lifted into the graph as constants.",
    why="They are correct for every input but are stored under generated names "
        "(`lifted_tensor_0`) and duplicated if created in a loop; a buffer is clearer.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return x * torch.tensor([1.0, 2.0, 3.0])    # VAL005
    """,
    how="""
        ```python
        def __init__(self):
            super().__init__()
            self.register_buffer("weights", torch.tensor([1.0, 2.0, 3.0]))
        ```
    """,
    tags=("values", "constant"))


WEIGHTS_CHANGED_AFTER_EXPORT = define(
    "VAL006", "weights-changed-after-export", E,
    "weights changed in place after export: {weights}; this program holds the exported values "
    "and would run, verify and save them inconsistently",
    "Export the model again to get a program with the new weights (onnxsight.export(model, args)), "
    "or undo the in-place change.",
    what="Checks, each time the program runs, is verified or saved, that no weight it was exported "
         "with (a parameter, buffer or constant, named by its state-dict name) was changed in place "
         "since (`weight.add_(1)`, `load_state_dict`, an optimizer step).",
    why="The program keeps the model's own tensors, not a copy, so a large model is not held twice. "
        "After an in-place change the embedded model already built for ONNX Runtime and `verify` "
        "holds the old values while a save with external data would stream the new ones: one "
        "program, two sets of weights, and no error anywhere.",
    example="""
        prog = onnxsight.export(model, (x,))
        with torch.no_grad():
            model.fc.weight.add_(1)
        prog(x)                                  # VAL006: fc.weight changed after export
    """,
    how="""
        Export again after changing the weights:

        ```python
        prog = onnxsight.export(model, (x,))
        ```

        Rebinding a parameter (`model.fc.weight = nn.Parameter(...)`) does not touch the exported
        tensor: the program keeps the exported weights and is not refused.
    """,
    tags=("values", "weights"))


# -- IO: inputs and outputs ---------------------------------------------------------------------
UNUSED_INPUT = define(
    "IO001", "input-unused-by-graph", W,
    "input {input} is not used by the exported graph",
    "Remove the input from forward() or check why it does not influence the outputs.",
    what="Warns about graph inputs that no node reads.",
    why="Callers must still feed the input; often it means a branch that used it was traced "
        "away, or an argument was mixed up with another.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x, mask):
                return x * 2                        # IO001: mask
    """,
    how="Remove the argument, or check that the code path that should use it was traced.",
    tags=("io",))

OUTPUT_STRUCTURE_FLATTENED = define(
    "IO002", "output-structure-flattened", N,
    "output structure {structure} was flattened to {count} ONNX outputs: {names}",
    "Rebuild the structure from the ONNX output names listed.",
    what="Notes outputs in a dict (or nested structure) that ONNX flattened into a list.",
    why="ONNX outputs are a flat list: keys are lost, and consumers must know the order. The "
        "message maps each key path to its ONNX output name.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return {"logits": x, "probs": x.softmax(-1)}   # IO002
    """,
    how="Use `output_names=` to give the ONNX outputs the key names, or return a tuple.",
    tags=("io",))

NONE_OUTPUT_DROPPED = define(
    "IO003", "none-output-dropped", W,
    "output {path} is None and has no ONNX counterpart",
    "Return tensors only, or account for the missing output when consuming the model.",
    what="Warns about `None` values in the outputs, which have no ONNX representation.",
    why="The output positions shift: code that indexes outputs by position reads the wrong one.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return x, None, x * 2               # IO003: output[1]
    """,
    how="Return only tensors, or use `output_names` and read outputs by name.",
    tags=("io",))

PYTHON_OUTPUT_DROPPED = define(
    "VAL011", "python-value-output-dropped", W,
    "output {path} is a Python value ({value}), fixed when the model was traced; it is not an ONNX "
    "output, so the graph's outputs are the model's tensors only",
    "Return it as a tensor computed from the inputs if the ONNX model must give it; otherwise leave it "
    "out of forward()'s outputs.",
    what="Warns about a Python number, bool or string among `forward()`'s outputs beside tensors (a "
         "Python input returned as it is, `x.shape[0] > 2` of a static shape).",
    why="torch.export records such a value as the constant it was while tracing, not as a computation. "
        "A constant output would present that trace-time value as something the model computes; leaving "
        "it out shifts the positions of the outputs after it, which this warning names. (A model that "
        "returns only Python values is refused, IO006.)",
    example="""
        class M(torch.nn.Module):
            def forward(self, x, flag: bool):
                return x * 2, flag           # VAL011: output[1] = False
    """,
    how="""
        Return a tensor if the value depends on the inputs (`torch.tensor(flag)` of a bool tensor
        input), or read outputs by name (`output_names`), or stop returning the value.
    """,
    tags=("io",))

NAMES_MISMATCH = define(
    "IO004", "io-names-count-mismatch", E,
    "{kind} names {names} ({given}) do not match the {actual} {kind}s of the graph",
    "Give at most one name per flattened input or output.",
    what="Checks that `input_names`/`output_names` give no more names than the graph has flattened "
         "inputs or outputs (fewer name the first ones, as torch.onnx does: ARG022).",
    why="A name with no value to name means the names were written for another model, or for "
        "another flattening of this one's inputs or outputs: which value each name was meant for "
        "cannot be told.",
    example="""
        onnxsight.export(model, (x,), input_names=["x", "mask"])   # IO004: 2 names for 1 input
    """,
    how="Count the flattened inputs (tensors only, nested structures flattened) and give at most a "
        "name for each.",
    tags=("io",))

STATE_MUTATION_DROPPED = define(
    "IO005", "state-mutation-dropped", W,
    "{kind} {target} is mutated in forward(); the ONNX model does not keep the new value",
    "Keep forward() free of in-place updates of buffers and inputs for inference.",
    what="Warns about in-place updates of buffers (`self.count += 1`, batch-norm statistics in "
         "training mode) or of inputs inside `forward()`.",
    why="ONNX models are stateless: the update is computed but thrown away, so a second call "
        "behaves like the first, unlike the PyTorch module.",
    example="""
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("calls", torch.zeros(()))

            def forward(self, x):
                self.calls.add_(1)                   # IO005
                return x * self.calls
    """,
    how="Return the new state as an output and feed it back as an input, or remove the update "
        "for inference (call `model.eval()`).",
    tags=("io", "state"))

NO_TENSOR_OUTPUTS = define(
    "IO006", "no-tensor-outputs", E,
    "forward() returns no tensor: its outputs {outputs} are Python values, so the ONNX graph would "
    "have no outputs",
    "Return tensors (torch.tensor(value) or a tensor computed from the inputs), or compute the "
    "values outside the model.",
    what="Refuses to write a model whose `forward()` returns only Python numbers, strings, `None` "
         "or nothing at all.",
    why="torch.export specialises Python numbers to the values seen while tracing: they are "
        "constants, not computations, and an ONNX graph without outputs computes nothing (ONNX "
        "Runtime even refuses to load one). Writing it would hand the user a model that cannot run.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return x.shape[0] * 2, 3.0           # IO006: ([0] = 4, [1] = 3.0)
    """,
    how="""
        Return tensors, so that the values are computed by the graph:

        ```python
        def forward(self, x):
            return torch.tensor(x.shape[0] * 2), torch.tensor(3.0)
        ```

        or, if the values are really fixed, compute them outside the model.
    """,
    tags=("io",))

COMPLEX_AS_REAL_PAIRS = define(
    "IO007", "complex-io-as-real-pairs", N,
    "{kind} {name} is {dtype}; exported as {real} [..., 2] (real, imaginary)",
    "Feed and read the value as torch.view_as_real/view_as_complex does; prog(...) and onnxsight.verify "
    "convert it for you.",
    what="Notes a complex graph input or output (an `stft`/`fft` result returned as is), exported as a "
         "real tensor with a trailing dimension of 2 holding the real and imaginary parts, as "
         "`torch.onnx` does.",
    why="ONNX Runtime runs no complex dtype. The model file's output has one more dimension than the "
        "PyTorch output, and a consumer must rebuild the complex values itself "
        "(`torch.view_as_complex`, `out[..., 0] + 1j * out[..., 1]`).",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return torch.stft(x, 32, return_complex=True)   # IO007: output stft is complex64
    """,
    how="""
        Nothing to do for `prog(...)` and `onnxsight.verify`, which turn the pairs back into complex
        tensors. Elsewhere, rebuild them from the pairs:

        ```python
        spec = session.run(None, {"x": x.numpy()})[0]          # float32 [..., 2]
        spec = spec[..., 0] + 1j * spec[..., 1]                # complex64
        ```

        or return `torch.view_as_real(...)`, `.abs()` or `.angle()` from `forward()` to say so in the model.
    """,
    tags=("io", "dtype"))

# -- ONX: ONNX model checks ---------------------------------------------------------------------
CHECKER_FAILED = define(
    "ONX001", "onnx-checker-failed", E,
    "onnx.checker rejected the model: {error}",
    "Report this as an onnxsight bug with the model attached.",
    what="Runs `onnx.checker.check_model` on the exported model and reports its error.",
    why="An invalid model will not load anywhere; this is a bug in a translation.",
    example="""
        # A custom translation emitting an unknown attribute:
        def bad(b, x):
            return b.op("Relu", x, alpha=0.1)       # Relu has no 'alpha': ONX001
    """,
    how="If a custom translation is involved, fix the node it emits; otherwise report the "
        "message with the SARIF file as an onnxsight issue.",
    tags=("onnx",))

SHAPE_INFERENCE_FAILED = define(
    "ONX002", "onnx-shape-inference-failed", W,
    "ONNX shape inference failed: {error}",
    "Check the custom translation named in the error: its nodes disagree on shapes or dtypes.",
    what="Reports an error from ONNX's strict shape inference (`infer_shapes(strict_mode=True)`), "
         "run on the exported model's structure after the checker passed.",
    why="Runtimes and tools that rely on inferred shapes (optimizers, TensorRT) may fail on "
        "the model even though ONNX Runtime runs it.",
    example="""
        def matmul_twice(b, x):                  # a custom translation for aten.sin
            return b.op("MatMul", x, x)          # (4, 3) @ (4, 3): inner dimensions differ

        onnxsight.export(M(), (torch.randn(4, 3),),
                         custom_translations={torch.ops.aten.sin.default: matmul_twice})
    """,
    how="Fix the translation so that its nodes agree on shapes (the error names the node), and "
        "annotate custom-domain outputs with `b.op(..., dtype=, shape=)`.",
    tags=("onnx",))

EXTERNAL_DATA_WRITTEN = define(
    "ONX003", "external-data-written", N,
    "{count} tensors ({size}) were written to external data file {data_file}",
    "Keep the data file next to the model when moving it.",
    what="Notes that weights were saved to a separate data file (automatically above 2 GB, the "
         "protobuf limit, or when `external_data=True`).",
    why="The `.onnx` file alone is incomplete: copying it without the data file breaks loading.",
    example="""
        onnxsight.export(big_model, (x,), "model.onnx", external_data=True)   # ONX003
    """,
    how="Move the `.onnx` file together with the data file named in the message; they must stay "
        "in the same directory.",
    tags=("onnx",))

TYPE_CONSTRAINT_VIOLATED = define(
    "ONX004", "onnx-type-constraint-violated", E,
    "node {onnx_node} ({op}) gets {role} {index} ({name}) of type {dtype}, which {op} does not accept "
    "at opset {opset}; allowed: {allowed}",
    "Cast the value to an allowed type in the translation (a custom translation: b.cast(x, dtype)), "
    "or report the op and dtype as an onnxsight bug.",
    what="Checks every node of the exported graph (and its subgraphs) against its ONNX operator "
         "schema: each input and output element type must be one its type constraint allows at "
         "the model's opset.",
    why="`onnx.checker` does not check element types against type constraints, so such a model "
        "is written without a word, and ONNX Runtime refuses to load it later (\"Type "
        "'tensor(double)' of input parameter ... is invalid\").",
    example="""
        def celu_double(b, x):                   # a custom translation for aten.celu
            return b.op("Celu", x)               # Celu takes float32 only

        onnxsight.export(M(), (torch.randn(3, dtype=torch.float64),),
                         custom_translations={torch.ops.aten.celu.default: celu_double})   # ONX004
    """,
    how="Cast the value to one of the allowed types before the node and back after it "
        "(`b.cast`), or compute the op by its formula from ops that accept the type.",
    tags=("onnx", "dtype"))
