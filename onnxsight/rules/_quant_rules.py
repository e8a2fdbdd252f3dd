"""Rules about quantized models: eager-mode quantized modules, quantize rounding in verification, and the
deployed session whose fused (integer) kernels differ from the per-node run."""

from __future__ import annotations

from onnxsight.rules._rule import Level, define

E, W, N = Level.ERROR, Level.WARNING, Level.NOTE

EAGER_QUANTIZED_MODULE = define(
    "QNT001", "eager-quantized-module", E,
    "{submodule} ({kind}) is eager-mode quantization: {detail}",
    "Quantize the float model with PT2E instead (pip install onnxsight[quant]): "
    "m = torch.export.export(model, args).module(); m = prepare_pt2e(m, X86InductorQuantizer()); "
    "calibrate; m = convert_pt2e(m); onnxsight.export(m, args).",
    what="Refuses a model holding eager-mode quantized modules (`torch.ao.nn.quantized`, "
         "`torch.ao.nn.quantized.dynamic`, `torch.ao.nn.intrinsic.quantized`) or quantized tensors "
         "(`torch.quint8`, `torch.qint8`) that torch.export cannot capture, naming the module; and an op "
         "in `forward()` that makes quantized tensors (`torch.quantize_per_tensor`), at its line; and eager-mode "
         "QAT's fake-quantize modules (`prepare_qat`), which branch on their switch buffers.",
    why="Eager-mode quantization runs packed `quantized::` kernels on quantized tensors that "
        "torch.export does not trace (the path of the retired TorchScript exporter). PT2E "
        "quantization produces the same int8 model as an ATen graph with explicit quantize and "
        "dequantize ops, which onnxsight exports to QuantizeLinear/DequantizeLinear that ONNX "
        "Runtime fuses into its integer kernels.",
    example="""
        model = torch.ao.quantization.quantize_dynamic(float_model, {torch.nn.Linear}, dtype=torch.qint8)
        onnxsight.export(model, (x,))   # QNT001: fc (torch.ao.nn.quantized.dynamic.Linear)
    """,
    how="""
        Quantize the float model with torchao's PT2E flow and export the result:

        ```python
        from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e, convert_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

        quantizer = xiq.X86InductorQuantizer()
        quantizer.set_global(xiq.get_default_x86_inductor_quantization_config(is_dynamic=True))
        m = prepare_pt2e(torch.export.export(float_model, (x,)).module(), quantizer)
        m(x)                                    # calibrate
        onnxsight.export(convert_pt2e(m), (x,))
        ```
    """,
    tags=("quantization", "capture"))

QUANTIZE_ROUNDING = define(
    "ACC012", "quantize-rounding", N,
    "{value} ({target}) rounds to the neighbouring quantization step where {reference} does not, "
    "its inputs matching within tolerance ({detail}); the values after it are compared from "
    "{reference}'s integers",
    "Nothing to fix: this is rounding at a half step, not a translation error.",
    what="Notes a quantize node (QuantizeLinear) whose integers differ from PyTorch's by at most one "
         "step while its inputs match within tolerance, and says how many elements.",
    why="PyTorch quantizes as `round(x * (1 / scale))`, ONNX as `round(x / scale)`: where `x / scale` "
        "lies within float32 rounding of a half step, the two land one step apart. That is not a "
        "wrong translation and must not be a root cause (ACC002); a wrong scale, zero point, axis or "
        "dtype moves elements by more than one step, and is one. ONNX Runtime then goes on from "
        "PyTorch's integers, so every later value, graph outputs included, is compared on the same "
        "integers and shows translation errors only.",
    example="""
        result = onnxsight.verify(quantized_prog)
        # ACC012: quantize_per_tensor_1 (quantized_decomposed.quantize_per_tensor.default) rounds to the
        # neighbouring quantization step ... (2 of 1536 elements one step apart) ...
    """,
    how="Nothing to fix. `result.nodes['max_diff_steps']` gives every quantized value's difference "
        "in quantization steps.",
    tags=("accuracy", "verification", "quantization"))

DEPLOYED_SESSION_DIFFERS = define(
    "ACC013", "deployed-session-differs", E,
    "output {output} of the deployed ONNX Runtime session ({session}) differs from {reference} by "
    "{max_abs_diff}{steps} where {baseline} differs by {baseline_diff}{baseline_steps}, {verdict}: {cause}",
    "Deploy with the optimisation level the per-node run matches (ORT_ENABLE_BASIC: "
    "SessionOptions.graph_optimization_level), or accept the difference with a tolerance for this output "
    "(Tolerance(overrides={output: (atol, rtol)}), or Tolerance(quantization_steps=...) for a quantized one).",
    what="Reports a graph output that differs from PyTorch when the whole model runs in one ONNX "
         "Runtime session with the session options it will be deployed with (by default ONNX "
         "Runtime's own: every graph optimisation), while the per-node run matches and the same graph "
         "run whole without optimisations does not differ so. For a quantized model the difference is "
         "given in steps of the output's quantization grid (the scale of the last per-tensor quantize "
         "before it) and judged in them: where the optimised session adds at most "
         "`Tolerance.quantization_steps` (default 1) to the unoptimised graph's own difference it is a "
         "note, beyond it an error. A float output is judged element by element by how much further "
         "from PyTorch the optimised session is than the unoptimised graph run whole: within the "
         "tolerance its fused kernels only round differently (a deep CNN's float32 drift), a note; beyond "
         "it an error. The fused kernels the optimised session runs that the model does not have are named.",
    why="`verify()` compares every intermediate value by running the graph in chunks, each value a "
        "graph output of its chunk; ONNX Runtime cannot fuse across a value that is an output, so "
        "the per-node run never sees the fusions a deployed session makes. For a quantized model the "
        "largest ones replace QuantizeLinear/DequantizeLinear around a MatMul or Conv with an "
        "integer kernel (`MatMulNBits`, `QLinearMatMul`, `MatMulInteger`, `QLinearConv`, "
        "`DynamicQuantizeLinear`...) that rounds differently from the graph as written: a "
        "requantization one step off at a half step is rounding (a note), a kernel that quantizes "
        "its activations its own way (`MatMulNBits` quantizes them in blocks of its own) moves outputs "
        "by more. Without this check a model whose every node matches would pass while the model users "
        "run does not.",
    example="""
        result = onnxsight.verify(prog)     # a dynamically quantized transformer block, static shapes
        # ACC013: output add_1 of the deployed ONNX Runtime session (ORT_ENABLE_ALL, CPUExecutionProvider)
        # differs from PyTorch by 0.00977 (1.2 quantization steps of dequantize_per_tensor_3's grid, step
        # 0.00808) where the same graph without optimisations (ORT_DISABLE_ALL) differs by 2.38e-07
        # (2.9e-05 quantization steps), 1.2 quantization steps more, beyond the tolerance of 1: ONNX
        # Runtime fused the quantized graph into integer kernels that round differently from the
        # QuantizeLinear/DequantizeLinear it was given (MatMulNBits x4 (com.microsoft)) ...
    """,
    how="""
        Decide which result you deploy. If the integer kernels' rounding is acceptable, widen the
        tolerance (`Tolerance(quantization_steps=2)`, or `Tolerance(overrides={"add_1": (1e-2, 0)})`);
        otherwise deploy with `SessionOptions.graph_optimization_level = ORT_ENABLE_BASIC` and verify with
        the same options (`onnxsight.verify(prog, session_options=options)`).
    """,
    tags=("accuracy", "verification", "quantization", "onnxruntime"))
