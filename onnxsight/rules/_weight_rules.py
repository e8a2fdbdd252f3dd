"""Rules about a program's weights: fake-mode programs and the checkpoints ``save(weights=)`` reads."""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E = Level.ERROR

FAKE_WEIGHTS_USED = define(
    "VAL007", "fake-weights-have-no-data", E,
    "{action} needs the real weights, but {count} weight(s) of this program were exported in fake mode "
    "and hold no data: {weights}",
    "Save with the real weights, prog.save(\"model.onnx\", weights=state_dict or checkpoint path), and run or "
    "verify that file; or export a model built outside fake mode.",
    what="Checks, before a program is run (`prog(x)`), verified or saved with its weights, that its "
         "weights have data: a model built under `onnxsight.fake_mode()` (or torch's `FakeTensorMode`, or "
         "on the meta device) exports with shapes and dtypes only. Its graph can still be inspected "
         "(`prog.model_proto` describes the weights without data) and saved without weights "
         "(`save(path, include_initializers=False)`).",
    why="A fake tensor has no bytes to write or compute with. Without this check the failure comes from "
        "deep inside torch or NumPy (`.numpy() is not supported for tensor subclasses`), after the work, "
        "and names neither the weight nor the way out.",
    example="""
        with onnxsight.fake_mode():
            model = build()                          # no memory for the weights
        prog = onnxsight.export(model, (x,))
        prog.save("model.onnx")                     # VAL007: fc.weight, fc.bias have no data
    """,
    how="""
        Stream the real weights from a checkpoint into the file's external data:

        ```python
        prog.save("model.onnx", weights="model.safetensors")   # or a state_dict, a torch.save file
        ```

        then load `model.onnx` in ONNX Runtime or `onnxsight.verify_onnx`.
    """,
    tags=("weights", "fake-mode", "save"))

CHECKPOINT_MISSING_WEIGHTS = define(
    "VAL008", "checkpoint-lacks-weights", E,
    "the checkpoint {source} lacks {count} weights the program needs: {keys}",
    "Pass the checkpoint saved from this model (its keys are the state_dict names), add the missing "
    "tensors to the weights= dict, or strip a prefix the checkpoint's keys carry (\"module.\", \"model.\").",
    what="Checks that `prog.save(path, weights=...)` finds a tensor for every weight of the program, by "
         "its `state_dict` name (a weight tied to another, like a language model's head and embedding, is "
         "found under either name). A non-persistent buffer is never in a `state_dict`: a model built under "
         "`onnxsight.fake_mode()` has it computed again by the export (its module rebuilt for real from the "
         "same arguments, when that module's own parameters are small); one that could not be (a model "
         "built under torch's `FakeTensorMode`) is named as such.",
    why="A weight without a value would be written as zeros or garbage: the model would load and run, and "
        "compute something else.",
    example="""
        prog.save("model.onnx", weights={"fc.weight": w})   # VAL008: lacks fc.bias
    """,
    how="""
        ```python
        prog.save("model.onnx", weights=model_state_dict)
        prog.save("model.onnx", weights={**ckpt, "rotary.inv_freq": inv_freq})   # a non-persistent buffer
        ```
    """,
    tags=("weights", "checkpoint", "save"))

CHECKPOINT_UNEXPECTED_KEYS = define(
    "VAL009", "checkpoint-has-unexpected-keys", E,
    "the checkpoint {source} has {count} keys the model does not have: {keys}",
    "Check that the checkpoint belongs to this model and configuration; pass strict=False to ignore "
    "keys the model does not use.",
    what="Checks that every key of the checkpoint given to `prog.save(path, weights=...)` is a parameter, "
         "buffer or constant of the exported model, as `load_state_dict(strict=True)` does.",
    why="Unexpected keys most often mean the checkpoint is for another model or configuration (more "
        "layers, another head): the weights that do match would then be silently mixed with the wrong ones.",
    example="""
        prog.save("model.onnx", weights="bigger_model.safetensors")   # VAL009: layers.12.* unexpected
    """,
    how="""
        ```python
        prog.save("model.onnx", weights=ckpt, strict=False)   # use what matches, ignore the rest
        ```
    """,
    tags=("weights", "checkpoint", "save"))

CHECKPOINT_WEIGHT_MISMATCH = define(
    "VAL010", "checkpoint-weight-mismatch", E,
    "{count} weights in the checkpoint {source} differ from the program's: {mismatches}",
    "Export the model with the configuration and dtype the checkpoint was saved with (model.to(dtype) "
    "before export), or convert the checkpoint.",
    what="Checks that each checkpoint tensor given to `prog.save(path, weights=...)` has the shape and dtype "
         "of the program's weight of the same name.",
    why="The ONNX file declares each weight's shape and dtype; bytes of another shape or dtype would be "
        "read as garbage, or refused by ONNX Runtime long after the save.",
    example="""
        prog = onnxsight.export(model, (x,))          # float32 weights
        prog.save("m.onnx", weights="fp16.safetensors")  # VAL010: fc.weight float16 in the checkpoint
    """,
    how="""
        ```python
        with onnxsight.fake_mode():
            model = build().to(torch.float16)   # export in the checkpoint's dtype
        ```
    """,
    tags=("weights", "checkpoint", "save"))

INVALID_WEIGHTS_ARGUMENT = define(
    "ARG014", "invalid-weights-argument", E,
    "weights= {reason}",
    "Pass a state_dict (a dict of tensors), the path of a torch.save file, or safetensors files (one "
    "path, a list of shards, or the folder holding them).",
    what="Checks the `weights=` of `prog.save(path, weights=...)`: a `state_dict`, a `torch.save` file, "
         "or safetensors files, and that the save writes external data (where the weights are streamed).",
    why="The weights are read one tensor at a time while the file is written; a wrong argument found "
        "half-way would leave a broken model file behind.",
    example="""
        prog.save("model.onnx", weights="model.bin.txt")   # ARG014: not a torch.save or safetensors file
    """,
    how="""
        ```python
        prog.save("model.onnx", weights="checkpoints/")    # the folder of model-0000x-of-0000n.safetensors
        ```
    """,
    tags=("arguments", "weights", "save"))
