"""Rules for export() arguments that are wrong in one specific way (ARG006 onwards).

ARG001..ARG005 (in ``_export_rules``) cover the model, forward()'s signature,
dynamic shapes, the opset range and the catch-all. The rules here each name
one mistake that used to be accepted silently or to fail later with an
unrelated message; they are all found before any capture work starts.
"""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E = Level.ERROR

OPSET_NOT_AN_INTEGER = define(
    "ARG006", "opset-version-is-not-an-integer", E,
    "opset_version must be an int, got {type} {value}",
    "Pass the opset as a number: opset_version=18.",
    what="Checks that `opset_version` is a Python `int` (or `None` for the default).",
    why="A string such as `\"18\"` is not an opset: reported as an unsupported opset it reads as if "
        "opset 18 itself were unsupported, and ONNX would store a wrong type in the model.",
    example="""
        onnxsight.export(model, (x,), opset_version="18")   # ARG006: got str '18'
    """,
    how="""
        ```python
        onnxsight.export(model, (x,), opset_version=18)
        ```
    """,
    tags=("arguments",))

NAMES_NOT_A_LIST = define(
    "ARG007", "io-names-are-not-a-list-of-strings", E,
    "{argument} must be a list of strings, got {given}",
    "Pass a list with one string per input/output, e.g. output_names=[\"logits\"].",
    what="Checks `input_names` and `output_names`: a list (or tuple) of distinct, non-empty strings.",
    why="A single string is itself a sequence: `output_names=\"logits\"` would name six outputs "
        "`l`, `o`, `g`, `i`, `t`, `s`. Duplicate or non-string names make an invalid ONNX graph.",
    example="""
        onnxsight.export(model, (x,), output_names="logits")   # ARG007: got the string 'logits'
    """,
    how="""
        ```python
        onnxsight.export(model, (x,), output_names=["logits"])
        ```
    """,
    tags=("arguments", "io"))

OUTPUT_FILE_NOT_WRITABLE = define(
    "ARG008", "output-file-is-not-writable", E,
    "f={path} cannot be written: {reason}",
    "Pass a path to a file in a writable folder, or a binary file object such as io.BytesIO().",
    what="Checks the `f` argument before any work: a path to a file (not a folder) whose folder can "
         "be created and written, or a binary file object with a `write` method.",
    why="The save happens after capture and translation, which can take minutes; failing then with "
        "`IsADirectoryError` wastes that time and reads like an onnxsight bug.",
    example="""
        onnxsight.export(model, (x,), "out/")   # ARG008: is a directory
    """,
    how="""
        Name the file, or save into memory:

        ```python
        onnxsight.export(model, (x,), "out/model.onnx")
        buffer = io.BytesIO()
        onnxsight.export(model, (x,), buffer)        # buffer.getvalue() is the serialized model
        ```
    """,
    tags=("arguments", "save"))

ARTIFACTS_DIR_NOT_WRITABLE = define(
    "ARG009", "artifacts-dir-is-not-writable", E,
    "artifacts_dir={path} cannot be written: {reason}",
    "Pass a folder you can write to (it is created if missing).",
    what="Checks `artifacts_dir` (where `report=True` writes markdown, HTML and SARIF) before any work.",
    why="The reports are written last, after the export; an unwritable folder would lose the "
        "report of an export that took minutes, or hide the real failure behind a `PermissionError`.",
    example="""
        onnxsight.export(model, (x,), report=True, artifacts_dir="/")   # ARG009: permission denied
    """,
    how="Pass a folder inside your project or a temporary directory: `artifacts_dir=\"reports\"`.",
    tags=("arguments", "reports"))

TRANSLATION_KEY_WITHOUT_NAMESPACE = define(
    "ARG010", "custom-translation-key-has-no-namespace", E,
    "custom_translations key {key} has no namespace; write it as 'namespace::op' ({suggestion})",
    "Key custom_translations by the op object (torch.ops.aten.relu.default) or by 'namespace::op[.overload]'.",
    what="Checks that every string key of `custom_translations` names its op with a namespace "
         "(`aten::relu`, `mylib::scale_add.default`).",
    why="Translations are looked up by the op's full name; a bare `\"relu\"` never matches any node, "
        "so the translation was silently never used.",
    example="""
        onnxsight.export(model, (x,), custom_translations={"relu": my_relu})   # ARG010
    """,
    how="""
        ```python
        onnxsight.export(model, (x,), custom_translations={"aten::relu": my_relu})
        # or, without strings:
        onnxsight.export(model, (x,), custom_translations={torch.ops.aten.relu.default: my_relu})
        ```
    """,
    tags=("arguments", "custom-ops"))

TRANSLATION_FOR_UNKNOWN_OP = define(
    "ARG011", "custom-translation-for-unknown-op", E,
    "custom_translations key {key} matches no operator: {reason}",
    "Check the spelling, and register the custom op (torch.library) before calling export().",
    what="Checks that every string key of `custom_translations` names an operator that exists in "
         "`torch.ops` (namespace, op and overload).",
    why="A key that names no operator matches no node of the graph: the translation is never "
        "called and the export goes on as if it had not been given.",
    example="""
        onnxsight.export(model, (x,), custom_translations={"aten::reluu": my_relu})   # ARG011
    """,
    how="Spell the op as `torch.ops` knows it (`aten::relu.default`); for a custom op, import the "
        "module that defines it with `torch.library` before calling `export()`.",
    tags=("arguments", "custom-ops"))

SAME_TENSOR_TWICE = define(
    "ARG012", "same-tensor-passed-twice", E,
    "the same tensor is passed as {first} and as {second}, and the model writes to {written} in place ({op}); "
    "in the exported graph they would be two inputs, which the write would no longer join",
    "Pass distinct tensors (e.g. y=x.clone()), or take the tensor once in forward().",
    what="Checks that no tensor object passed more than once among the inputs of `forward()` is written "
         "to in place by the model (`x.add_(1)`, `x[0] = y`).",
    why="The exported graph has an input for each argument (ARG021), so a caller can pass two different "
        "tensors. In eager, a write through one name is seen through the other; between two graph "
        "inputs it is not, and the graph would compute something else than the model, even at the "
        "example.",
    example="""
        class Accumulate(torch.nn.Module):
            def forward(self, total, step):
                total.add_(step)            # ARG012: total and step are the same tensor
                return total * step

        onnxsight.export(Accumulate(), (t, t))
    """,
    how="""
        ```python
        onnxsight.export(Accumulate(), (t, t.clone()))
        ```
    """,
    tags=("arguments", "io"))

SAME_TENSOR_EXPORTED_APART = define(
    "ARG021", "same-tensor-exported-as-separate-inputs", Level.NOTE,
    "the same tensor is passed as {first} and as {others}; the graph has an input for each, so callers may "
    "pass different tensors",
    "Nothing to do; pass distinct example tensors to silence this note.",
    what="Notes a tensor object passed more than once among the inputs of `forward()` (torch.onnx's "
         "tests pass `(x, x)` for `forward(self, x, y)`), which the model does not write to in place.",
    why="torch.export traces two arguments holding one tensor as one: its graph reads one of them for "
        "both (`x + y` becomes `y + y`), which is wrong as soon as a caller passes two different "
        "tensors. onnxsight captures with a copy in each later place, so the graph reads every input "
        "where the model does; the note says that the example's tensors were the same object.",
    example="""
        class Add(torch.nn.Module):
            def forward(self, x, y):
                return x + y

        onnxsight.export(Add(), (t, t))   # ARG021: inputs x and y, computing x + y
    """,
    how="""
        Nothing is needed. A model that writes to the shared tensor in place is refused (ARG012);
        to silence the note, pass distinct tensors:

        ```python
        onnxsight.export(Add(), (t, t.clone()))
        ```
    """,
    tags=("arguments", "io"))

FILE_OBJECT_TOO_LARGE = define(
    "ARG013", "model-too-large-for-a-file-object", E,
    "f is a file object, but {reason}: external data needs a path to write the weights next to",
    "Pass a path (f=\"model.onnx\") so the weights can go to model.onnx.data.",
    what="Checks that a model saved into a file object (`io.BytesIO`, an open file) fits in one "
         "protobuf message (2 GB) and that `external_data=True` was not asked for.",
    why="Above 2 GB the weights must be written to a separate file next to the model, which a file "
        "object does not have; the save would fail after all the export work.",
    example="""
        onnxsight.export(big_model, (x,), io.BytesIO())   # ARG013: weights are 7.2 GB
    """,
    how="""
        ```python
        onnxsight.export(big_model, (x,), "model.onnx")   # model.onnx + model.onnx.data
        ```
    """,
    tags=("arguments", "save"))

DYNAMIC_AXES_KEY_NAMES_NOTHING = define(
    "ARG016", "dynamic-axes-key-names-nothing", Level.WARNING,
    "dynamic_axes key {key} names neither an input nor an output; it is ignored. {valid}",
    "Remove the key, or rename it to one of the names listed.",
    what="Warns about a `dynamic_axes` key that is neither an argument of `forward()`, an entry of "
         "`input_names`, nor an entry of `output_names`; the export goes on without it.",
    why="Code written for `torch.onnx.export` often passes one `dynamic_axes` table for several "
        "models (PyTorch's own recurrent tests pass `seq_lengths` to models that take no lengths). "
        "Such a key changes nothing in the graph, so refusing the export would only stop working "
        "code; but a misspelt input name would leave an axis static that was meant to be dynamic, "
        "so the key and the valid names are reported. A key that names an input with an axis "
        "that input does not have is still an error (ARG003).",
    example="""
        onnxsight.export(model, (x,), input_names=["input"],
                         dynamic_axes={"input": {0: "batch"}, "seq_lengths": {0: "batch"}})
        # ARG016: dynamic_axes key 'seq_lengths' names neither an input nor an output
    """,
    how="""
        Drop keys that do not apply to this model, or correct the name:

        ```python
        onnxsight.export(model, (x,), input_names=["input"], dynamic_axes={"input": {0: "batch"}})
        ```
    """,
    tags=("arguments", "dynamic-shapes"))

NAMES_FOR_FIRST_VALUES = define(
    "ARG022", "names-for-the-first-values-only", Level.NOTE,
    "{kind}_names gives {given} names for the {actual} {kind}s of the graph: the first {given} are named, "
    "the others keep their names ({rest})",
    "Give a name for each value to name them all.",
    what="Notes `input_names`/`output_names` with fewer names than the graph has (flattened) inputs "
         "or outputs.",
    why="torch.onnx names the first values in order and leaves the others as they are; code written "
        "for it (PyTorch's own tests give `output_names=[\"output_1\"]` for a model returning four "
        "tensors) relies on that. The note lists the values that kept their own names, so that none "
        "is read by a name it does not have.",
    example="""
        class Slices(torch.nn.Module):
            def forward(self, x):
                return x[1:], x[2:]

        onnxsight.export(Slices(), (x,), output_names=["first"])   # ARG022: 'slice_1' keeps its name
    """,
    how="""
        ```python
        onnxsight.export(Slices(), (x,), output_names=["first", "second"])
        ```
    """,
    tags=("arguments", "io"))

DIM_NAME_ON_DIFFERENT_SIZES = define(
    "ARG023", "dim-name-on-axes-of-different-sizes", Level.WARNING,
    "dim name '{name}' is given to axes of different sizes in the example ({axes}); one dim has one size, "
    "so each size is a dim of its own: {dims}",
    "Give each independent axis a name of its own, or pass an example where the named axes agree.",
    what="Warns about a dim name (a string in `dynamic_shapes`) given to axes whose sizes in the "
         "example differ.",
    why="One name is one dim: the ONNX graph declares the axes equal, and torch.export requires them to "
        "be. Axes of different sizes in the example cannot be; torch.onnx treats such names as labels "
        "only (PyTorch's own test_api names the sequence axes of `cat((x, y), 1) + z` alike), so the "
        "axes are kept apart, one dim per size, instead of refusing the export. The names show in the "
        "graph's input shapes.",
    example="""
        class Concat(torch.nn.Module):
            def forward(self, x, y):
                return torch.cat((x, y), 1)

        onnxsight.export(Concat(), (torch.randn(2, 3), torch.randn(2, 5)),
                         dynamic_shapes=({1: "sequence"}, {1: "sequence"}))
        # ARG023: 'sequence' (x axis 1), 'sequence_2' (y axis 1)
    """,
    how="""
        ```python
        onnxsight.export(Concat(), (torch.randn(2, 3), torch.randn(2, 5)),
                         dynamic_shapes=({1: "x_len"}, {1: "y_len"}))
        ```
    """,
    tags=("arguments", "dynamic-shapes"))

CACHE_SHAPES_LAYOUT = define(
    "ARG027", "cache-dynamic-shapes-layout-unknown", E,
    "dynamic_shapes[{argument}] gives the {container} ({layout}) {given}, which matches none of the layouts "
    "accepted for it: {accepted}",
    "Write the cache's entry in one of the layouts the message lists (one entry per tensor is torch.export's).",
    what="Checks the `dynamic_shapes` entry of a transformers KV cache argument (`DynamicCache`, "
         "`EncoderDecoderCache`) against the layouts people write it in: one entry per tensor in the "
         "order of the ONNX inputs (`past_key_values.0.key`, `past_key_values.0.value`, ...), a list "
         "of the keys' entries and one of the values' (transformers' and onnx-diagnostic's "
         "layout), one `(key, value)` pair per layer, and for an encoder-decoder "
         "`[self-attention, cross-attention]` in any of those, or one "
         "`(self key, self value, cross key, cross value)` per layer. Any of them is accepted; this "
         "error names the argument, the structure given and the structures accepted when none fits.",
    why="torch.export matches the entry against the cache's flattened tensors and fails with "
        "`ValueError: Node arity mismatch; expected 8, but got 2`, naming neither the argument nor "
        "the layout it expected.",
    example="""
        batch, past = Dim("batch"), Dim("past")
        onnxsight.export(bart, (), kwargs=step,   # 2 decoder layers: 4 self- and 4 cross-attention tensors
                         dynamic_shapes={"cache": [[{0: batch, 2: past}] * 4, [{0: batch}] * 3]})
        # ARG027: dynamic_shapes['cache'] gives the EncoderDecoderCache (2 self-attention layers and 2
        # cross-attention layers, 8 tensors) [[dict, dict, dict, dict], [dict, dict, dict]], which matches none
        # of the layouts accepted for it: a list of 8 (one per tensor: past_key_values.0.decoder.key, ...
    """,
    how="""
        Give one entry per tensor, or group them as the message lists:

        ```python
        self_part = [{0: batch, 2: past}] * 4              # 2 layers x (key, value)
        cross_part = [{0: batch, 2: encoder_length}] * 4
        dynamic_shapes = {"cache": [self_part, cross_part]}
        ```
    """,
    tags=("arguments", "dynamic-shapes"))
