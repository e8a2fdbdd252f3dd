"""Stage 2, capture: ``torch.export`` (non-strict, then strict), every attempt recorded and classified.

The capture patches for library code, torch's own log records turned into concrete fixes (CAP* rules),
the audit of the dims the user asked dynamic, and the shape-only RNN kernels used while tracing.
Imports the inputs stage and the shared modules only.
"""
