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
    "Choose an opset between 17 and 23.",
    what="Checks `opset_version` against the opsets onnxsight has translations for.",
    why="Translations are written per opset range; an opset outside it would produce nodes "
        "whose semantics nobody checked.",
    example="""
        onnxsight.export(model, (x,), opset_version=11)   # ARG004
    """,
    how="Use the default (18) or any opset from 17 to 23. If a runtime needs an older opset, "
        "convert the exported model with `onnx.version_converter`.",
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
    "control flow depends on tensor data ({strategy}): {error}",
    "Use torch.cond for data-dependent branches, or make the condition depend on shapes only.",
    what="Reports a Python `if`/`while` (or `bool()`/`int()` call) whose value depends on the "
         "contents of a tensor, which torch.export cannot trace.",
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
    """,
    tags=("capture", "control-flow"))

UNSUPPORTED_PYTHON_CONSTRUCT = define(
    "CAP003", "unsupported-python-construct", E,
    "{strategy} cannot trace a Python construct: {error}",
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
    "dynamic shape constraints are violated: {error}",
    "Adjust dynamic_shapes to the constraints torch.export reports (for example min/max of a Dim).",
    what="Reports that the model's code constrains a dimension marked dynamic (for example "
         "requires it to be even, or equal to another dimension).",
    why="The exported model would accept sizes the code cannot handle.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x, y):
                return x + y               # forces dim 0 of x == dim 0 of y

        batch, other = torch.export.Dim("batch"), torch.export.Dim("other")
        onnxsight.export(M(), (a, b), dynamic_shapes={"x": {0: batch}, "y": {0: other}})
    """,
    how="Use the suggested fixes torch.export prints: share one `Dim` between equal dimensions, "
        "or give the `Dim` the `min`/`max` the code requires.",
    tags=("capture", "dynamic-shapes"))

DYNAMIC_DIM_SPECIALIZED = define(
    "CAP005", "dynamic-dim-specialized", E,
    "dimension {dim} of input {input} was marked dynamic but the model specialised it to {value}",
    "Remove the dimension from dynamic_shapes, or change the code that forces it to a constant.",
    what="Reports a dimension marked dynamic that the model's code forces to one value.",
    why="The ONNX model could only run with that size; torch.export stops rather than silently "
        "export a static model.",
    example="""
        class M(torch.nn.Module):
            def forward(self, x):
                return x.reshape(4, 8)          # batch * 8 must be 32: batch == 4

        onnxsight.export(M(), (torch.randn(4, 8),), dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    """,
    how="Write the code in terms of the dynamic size (`x.reshape(-1, 8)`), or stop marking the "
        "dimension dynamic.",
    tags=("capture", "dynamic-shapes"))

ALL_CAPTURE_FAILED = define(
    "CAP006", "all-capture-strategies-failed", E,
    "every capture strategy failed ({strategies}); last error: {error_type}: {error}",
    "Fix the first error reported for each strategy.",
    what="Reports that no capture strategy produced a graph, with an error that none of the "
         "more specific CAP rules classifies.",
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
