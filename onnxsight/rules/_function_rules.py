"""Rules for exporting the module hierarchy as ONNX local functions (``module_functions=``).

ARG015 checks the argument before any work; ONX005 and ONX006 report, after
translation, the module calls that did not become functions and the classes
that were asked for but never called.
"""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E, W = Level.ERROR, Level.WARNING

MODULE_FUNCTIONS_INVALID = define(
    "ARG015", "module-functions-argument-is-invalid", E,
    "module_functions must be True, False or a set of torch.nn.Module classes, got {given}",
    "Pass module_functions=True for every module, or the classes: module_functions={MyBlock, nn.Linear}.",
    what="Checks `module_functions`: a bool, or a set (list, tuple) of `torch.nn.Module` subclasses "
         "(classes, not instances or class names).",
    why="A class name as a string, a module instance or another class would otherwise match no "
        "module call: the export would silently come out flat, which is exactly what the option "
        "was asked to change.",
    example="""
        onnxsight.export(model, (x,), module_functions="TransformerEncoderLayer")   # ARG015: a string
        onnxsight.export(model, (x,), module_functions={model.encoder})             # ARG015: an instance
    """,
    how="""
        ```python
        onnxsight.export(model, (x,), module_functions=True)                          # every module call
        onnxsight.export(model, (x,), module_functions={nn.TransformerEncoderLayer})  # these classes only
        ```
    """,
    tags=("arguments", "functions"))

MODULE_CALL_KEPT_INLINE = define(
    "ONX005", "module-call-kept-inline", W,
    "module call {call} ({cls}) is not an ONNX function: {reason}; its nodes stay in {parent}",
    "Nothing is wrong with the model; to make the call a function, keep the module's computation inside "
    "its forward() (no values flowing out to the caller and back in).",
    what="Reports a module call that `module_functions=` selected but that could not become an ONNX "
         "local function, because the ONNX nodes recorded for it interleave with the caller's: a value "
         "leaves the call, is computed on outside it, and comes back in. A function call is one node, so "
         "it cannot both produce that value and consume what was computed from it.",
    why="The exported model is correct either way; this only says why Netron shows that module's nodes "
        "loose in its parent instead of as one box.",
    example="""
        # A node that torch.export recorded outside the module, between two of the module's nodes:
        onnxsight.export(model, (x,), module_functions=True)   # ONX005 names the module path
    """,
    how="Usually nothing to do. If the box matters, move the code that runs between the module's "
        "operations into the module's own `forward()`.",
    tags=("onnx", "functions"))

MODULE_CLASS_NOT_CALLED = define(
    "ONX006", "module-function-class-not-called", W,
    "module_functions names {classes}, but the exported program calls no module of {which}; "
    "classes called: {called}",
    "Pass the classes the model actually uses (their names are listed in the message), or "
    "module_functions=True for all of them.",
    what="Checks that every class in `module_functions={...}` (or a subclass of it) is called at "
         "least once in the exported program.",
    why="A class the model never calls makes no function: typically the model uses its own class "
        "(a `MyEncoderLayer`) rather than the `torch.nn` one that was named, and the export comes out "
        "flat without a word.",
    example="""
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        onnxsight.export(model, (x,), module_functions={nn.TransformerEncoderLayer})   # ONX006
    """,
    how="""
        ```python
        onnxsight.export(model, (x,), module_functions={nn.Linear})   # a class the model calls
        ```
    """,
    tags=("onnx", "functions"))
