"""Stage 1, inputs: what the user hands to ``export()``, checked and normalised before any capture.

Argument checks (ARG* rules), ``dynamic_axes`` -> ``dynamic_shapes``, dim names, inferred dynamic
shapes, the pytree registrations of library containers, and fake-mode models (``fake_mode()``).
Imports only the exporter's shared modules (``_builder``, ``_registry``, ``_dtypes``, ``_errors``,
``_record``); the stages after it may import it.
"""
