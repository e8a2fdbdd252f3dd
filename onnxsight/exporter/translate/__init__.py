"""Stage 4, translate: the decomposed FX graph to ONNX through the registry's translations (``ops/``).

The analysis pass that runs first (VAL*, DTY*, OPS005 rules), the node translator, the whole-program
graph (inputs, weights, outputs), complex values as real pairs, and module calls as ONNX functions.
Imports the stages before it, ``ops/`` and the shared modules only.
"""
