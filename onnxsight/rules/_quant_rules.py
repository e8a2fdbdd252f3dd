"""Rules about quantized models: eager-mode quantized modules, and quantize rounding in verification."""

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
         "(`torch.quint8`, `torch.qint8`) that torch.export cannot capture, naming the module.",
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
