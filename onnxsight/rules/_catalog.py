"""The rule catalog: every diagnostic onnxsight can emit.

Codes are ``<AREA><number>`` and never reused; a removed rule stays here with
``removed=True``. Call sites import the constants (``rules.UNSUPPORTED_OP``)
and pass the template's fields; they never write free-form messages.

NOTE: docs are terse placeholders for some rules until the catalog issue
fills them in; ``tests/rules`` fails while any section is empty.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from onnxsight.rules._rule import Level, Rule, RuleDocs

E, W, N = Level.ERROR, Level.WARNING, Level.NOTE


def _r(code: str, name: str, level: Level, message: str, fix: str, *,
       what: str = "", why: str = "", example: str = "", how: str = "",
       tags: tuple[str, ...] = (), removed: bool = False) -> Rule:
    area = code.rstrip("0123456789")
    return Rule(code=code, name=name, message=message, level=level, fix=fix,
                docs=RuleDocs(what, why, example, how), area=area, tags=tags, removed=removed)


# -- ARG: arguments to export()/verify() -------------------------------------------------
INVALID_MODEL = _r("ARG001", "model-is-not-a-module", E,
    "export() expects a torch.nn.Module, got {type}", "Pass an nn.Module instance (wrap a function in a Module whose forward calls it).")
ARGS_MISMATCH = _r("ARG002", "arguments-do-not-match-forward", E,
    "arguments do not match {module}.forward{signature}: {error}", "Pass args/kwargs that forward() accepts.")
BAD_DYNAMIC_SHAPES = _r("ARG003", "invalid-dynamic-shapes", E,
    "dynamic shapes specification is invalid: {error}", "Give dynamic_shapes the same structure as the inputs (torch.export style), or dynamic_axes as {input_name: {axis: name}}.")
UNSUPPORTED_OPSET = _r("ARG004", "unsupported-opset-version", E,
    "opset_version {opset} is not supported; supported versions are {supported}", "Choose an opset between 17 and 23.")
INVALID_ARGUMENT = _r("ARG005", "invalid-argument", E,
    "invalid value for {argument}: {error}", "Correct the argument as the message says.")

# -- CAP: capture with torch.export -------------------------------------------------------
CAPTURE_STRATEGY_FAILED = _r("CAP001", "capture-strategy-failed", W,
    "capture with {strategy} failed after {seconds}s: {error_type}: {error}", "See the error of the strategy that failed; onnxsight tries the next strategy.")
DATA_DEPENDENT_CONTROL_FLOW = _r("CAP002", "data-dependent-control-flow", E,
    "control flow depends on tensor data ({strategy}): {error}", "Use torch.cond for data-dependent branches, or make the condition depend on shapes only.")
UNSUPPORTED_PYTHON_CONSTRUCT = _r("CAP003", "unsupported-python-construct", E,
    "{strategy} cannot trace a Python construct: {error}", "Rewrite the construct in plain tensor operations, or move it out of forward().")
DYNAMIC_SHAPE_VIOLATION = _r("CAP004", "dynamic-shape-constraint-violation", E,
    "dynamic shape constraints are violated: {error}", "Adjust dynamic_shapes to the constraints torch.export reports (for example min/max of a Dim).")
DYNAMIC_DIM_SPECIALIZED = _r("CAP005", "dynamic-dim-specialized", E,
    "dimension {dim} of input {input} was marked dynamic but the model specialised it to {value}", "Remove the dimension from dynamic_shapes, or change the code that forces it to a constant.")
ALL_CAPTURE_FAILED = _r("CAP006", "all-capture-strategies-failed", E,
    "every capture strategy failed ({strategies}); last error: {error_type}: {error}", "Fix the first error reported for each strategy.")

# -- DEC: decomposition ----------------------------------------------------------------------
DECOMPOSITION_FAILED = _r("DEC001", "decomposition-failed", E,
    "decomposition to core ATen failed: {error_type}: {error}", "Report the op named in the error; a custom translation for it avoids its decomposition.")

# -- OPS: operator translation -------------------------------------------------------------
UNSUPPORTED_CUSTOM_OP = _r("OPS001", "custom-op-without-translation", E,
    "custom operator {op} has no ONNX translation", "Pass custom_translations={{'{op_name}': fn}} to export().")
UNSUPPORTED_OP = _r("OPS002", "op-without-translation", E,
    "operator {op} has no ONNX translation in onnxsight", "Pass custom_translations for it, or rewrite the line with supported operations.")
OP_NEEDS_NEWER_OPSET = _r("OPS003", "op-needs-newer-opset", E,
    "operator {op} needs opset {required} or newer; the export targets opset {opset}", "Export with opset_version={required} or newer.")
TRANSLATION_FAILED = _r("OPS004", "translation-failed", E,
    "translating {op} failed: {error_type}: {error}", "This is a limitation of the translation for these arguments; a custom translation can replace it.")
EDGE_CASE_SEMANTICS = _r("OPS005", "op-edge-case-semantics", N,
    "{op} differs between PyTorch and ONNX at edge cases: {detail}", "Check results at the edge cases named; they are usually harmless.")
UNSUPPORTED_OP_ARGUMENTS = _r("OPS006", "op-arguments-unsupported", E,
    "{op} is translated only for {supported}; got {got}", "Use a supported variant of the call or pass a custom translation.")

# -- VAL: values baked into the graph ------------------------------------------------------
PYTHON_SCALAR_BAKED = _r("VAL001", "python-scalar-baked-as-constant", W,
    "input {input} is a Python {type} ({value}) and was baked into the graph as a constant", "Pass it as a tensor if it changes between calls.")
NUMPY_CALL_BAKED = _r("VAL002", "numpy-result-baked-as-constant", W,
    "a numpy computation was traced as a constant ({detail})", "Use torch operations instead of numpy inside forward().")
DATA_DEPENDENT_VALUE = _r("VAL003", "data-dependent-value-asserted", W,
    "{op} produces a data-dependent value guarded by runtime assertions", "Avoid .item()/nonzero() in forward() where possible; check the asserted ranges hold for all inputs.")
TENSOR_DATA_USE = _r("VAL004", "tensor-data-use", W,
    "Tensor.data is used in forward(); its computation is detached and may be baked in", "Use the tensor itself (or .detach()) instead of .data.")
CONSTANT_TENSOR_BAKED = _r("VAL005", "tensor-constant-baked", N,
    "tensor {name} of shape {shape} created in forward() was stored as a constant", "Register it as a buffer if it should be a named weight.")

# -- DTY: dtypes ------------------------------------------------------------------------------
DTYPE_NOT_REPRESENTABLE = _r("DTY001", "dtype-not-representable-in-onnx", E,
    "value {value} has dtype {dtype}, which ONNX cannot represent", "Convert complex values to real/imaginary pairs (torch.view_as_real) before they cross op boundaries.")
DTYPE_NOT_RUN_BY_ORT = _r("DTY002", "dtype-not-run-by-onnxruntime", W,
    "{op} with dtype {dtype} is valid ONNX but ONNX Runtime has no kernel for it", "Cast to a supported dtype around the op.")
FLOAT64_DOWNCAST = _r("DTY003", "float64-downcast", N,
    "{value} was downcast from float64 to float32", "Use float32 inputs, or keep float64 if precision matters.")

# -- IO: inputs and outputs -----------------------------------------------------------------
UNUSED_INPUT = _r("IO001", "input-unused-by-graph", W,
    "input {input} is not used by the exported graph", "Remove the input from forward() or check why it does not influence the outputs.")
OUTPUT_STRUCTURE_FLATTENED = _r("IO002", "output-structure-flattened", N,
    "output structure {structure} was flattened to {count} ONNX outputs: {names}", "Rebuild the structure from the ONNX output names listed.")
NONE_OUTPUT_DROPPED = _r("IO003", "none-output-dropped", W,
    "output {path} is None and has no ONNX counterpart", "Return tensors only, or account for the missing output when consuming the model.")
NAMES_MISMATCH = _r("IO004", "io-names-count-mismatch", E,
    "{kind} names {names} ({given}) do not match the {actual} {kind}s of the graph", "Give one name per flattened {kind}.")

# -- ONX: ONNX model checks -------------------------------------------------------------------
CHECKER_FAILED = _r("ONX001", "onnx-checker-failed", E,
    "onnx.checker rejected the model: {error}", "Report this as an onnxsight bug with the model attached.")
SHAPE_INFERENCE_FAILED = _r("ONX002", "onnx-shape-inference-failed", W,
    "ONNX shape inference failed: {error}", "Usually harmless for running; report it if the model fails to load.")
EXTERNAL_DATA_WRITTEN = _r("ONX003", "external-data-written", N,
    "{count} tensors ({size}) were written to external data file {location}", "Keep the data file next to the model when moving it.")

# -- ORT: ONNX Runtime --------------------------------------------------------------------------
ORT_SESSION_FAILED = _r("ORT001", "onnxruntime-session-failed", E,
    "ONNX Runtime could not load the model on {providers}: {error}", "See the error; an op/dtype combination without a kernel is the usual cause.")
ORT_RUN_FAILED = _r("ORT002", "onnxruntime-run-failed", E,
    "ONNX Runtime failed running the model on {providers}: {error}", "See the error; shape mismatches usually mean an input changed size along a static dimension.")
PROVIDER_UNAVAILABLE = _r("ORT003", "execution-provider-unavailable", E,
    "requested provider {requested} is not available; available providers are {available}", "Install onnxruntime-gpu for CUDA, or pick one of the available providers.")
PROVIDER_FALLBACK = _r("ORT004", "execution-provider-fallback", W,
    "requested provider {requested} is not available; fell back to {used}", "Install the provider's runtime to run on it.")

# -- ACC: accuracy and verification -------------------------------------------------------------
OUTPUT_MISMATCH = _r("ACC001", "output-mismatch", E,
    "output {output} differs from {reference}: max abs diff {max_abs_diff}, max rel diff {max_rel_diff} (tolerance atol={atol}, rtol={rtol})", "Look at the root-cause nodes reported with it.")
NODE_DIVERGENCE = _r("ACC002", "node-divergence-root-cause", E,
    "{value} ({target} -> {onnx_op}) is the first value to diverge: max abs diff {max_abs_diff} while all its inputs match", "The translation of this op or the runtime kernel disagrees with PyTorch; the repro bundle isolates it.")
NAN_INF_INTRODUCED = _r("ACC003", "nan-or-inf-introduced", E,
    "{value} ({target}) has {count} NaN/Inf values where {reference} has none", "Check for overflow (float16) or division by zero in this op.")
SHAPE_MISMATCH = _r("ACC004", "shape-mismatch", E,
    "{value} has shape {actual}, expected {expected}", "The translation computes a different shape; report it.")
DTYPE_MISMATCH = _r("ACC005", "dtype-mismatch", W,
    "{value} has dtype {actual}, expected {expected}", "A cast is missing or extra in the translation.")
DIVERGENCE_PROPAGATED = _r("ACC006", "divergence-propagated", N,
    "{count} values downstream of {root} diverge because of it", "Fix the root cause; these follow from it.")

# -- ZOO: nightly model-zoo job -------------------------------------------------------------
ZOO_MODEL_CRASHED = _r("ZOO001", "model-process-crashed", E,
    "model {model} crashed ({reason}) in stage {stage}", "Run the model alone with onnxsight export to see the full error.")
ZOO_MODEL_TIMEOUT = _r("ZOO002", "model-timed-out", E,
    "model {model} did not finish within {timeout}s (stage {stage})", "Raise --timeout or look at the stage that hangs.")
ZOO_MODEL_OOM = _r("ZOO003", "model-out-of-memory", E,
    "model {model} exceeded the memory limit of {limit} MB (stage {stage})", "Raise --memory-limit or reduce the model's size.")
ZOO_REGRESSION = _r("ZOO004", "regression-against-baseline", E,
    "model {model} regressed against the baseline: {detail}", "Compare with the baseline run's report.")

# -- INT: onnxsight itself -----------------------------------------------------------------------
INTERNAL_ERROR = _r("INT001", "internal-error", E,
    "onnxsight failed internally in {stage}: {error_type}: {error}", "Please report this with the SARIF file attached.")


def _collect() -> Mapping[str, Rule]:
    table: dict[str, Rule] = {}
    for value in globals().values():
        if isinstance(value, Rule):
            if value.code in table:
                raise AssertionError(f"duplicate rule code {value.code}")
            table[value.code] = value
    return MappingProxyType(dict(sorted(table.items())))


CATALOG: Mapping[str, Rule] = _collect()
