"""Rules of the verification engine's own contract: bad calls to verify(), what it did not compare, and why."""

from __future__ import annotations

from onnxsight.rules._rule import Level, define  # noqa: F401  (used by the definitions below)

E, W, N = Level.ERROR, Level.WARNING, Level.NOTE

EXPORT_DIFFERS_FROM_EAGER = define(
    "ACC007", "export-differs-from-eager", E,
    "the export is not what your model computes eagerly: output {output} differs from forward() by "
    "{max_abs_diff} (tolerance {tolerance}) while the ONNX model matches the exported program",
    "Look for Python state in forward(): a counter, a global or attribute read at trace time, "
    "randomness or data-dependent Python control flow; make it a tensor input or a buffer.",
    what="Compares the model's eager `forward()` with the exported model on the same inputs, and "
         "reports outputs that disagree although ONNX Runtime agrees with the exported program "
         "(so the ONNX translation is right, the capture is not).",
    why="torch.export records one trace: Python values read while tracing (a global, a call "
        "counter, `self.step`, a random draw) are frozen into the program. The exported model "
        "then computes what the model computed once, not what it computes now. Comparing ONNX "
        "with the exported program alone cannot see this.",
    example="""
        SCALE = {"value": 2.0}

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = 0

            def forward(self, x):
                self.calls += 1                       # a Python counter: baked as 1
                return x * self.calls * SCALE["value"]   # ACC007: eager now multiplies by 2, 3, ...
    """,
    how="Keep state that changes between calls in tensors (a registered buffer updated in "
        "place, or an input and an output), read configuration in `__init__`, and avoid "
        "randomness in inference. If the difference is intended (the model is meant to be "
        "frozen at the traced value), compare against a fresh model instead.",
    tags=("accuracy", "capture"))
