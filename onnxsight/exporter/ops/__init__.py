"""ONNX translations of ATen ops, one module per op family, one function per overload.

Each function takes the GraphBuilder first, then the ATen schema's arguments
(tensors as :class:`~onnxsight.exporter.Value`, the rest as Python values) and
returns the output Value(s). The ATen schema is its docstring.
"""
