"""Stage 6, program: ``ONNXProgram`` and everything that writes or runs the result.

``model_proto``, ``save()`` (streamed embedded bytes or external data), weights from checkpoints
(``save(weights=)``), and the lazy ONNX Runtime runner. Imports every stage before it.
"""
