"""Stage 3, decompose: the captured program to core ATen, keeping ops that have a better ONNX form.

Imports the stages before it (inputs, capture) and the shared modules only.
"""
