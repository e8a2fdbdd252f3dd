"""Stage 5, check: the translated model against the ONNX operator schemas' type constraints (ONX004)
and the outputs the program must have, before anything is saved or run.

Imports the stages before it and the shared modules only.
"""
