"""ONNXProgram: the exported model, its program, diagnostics and export record.

Weights stay torch tensors (views of the model's own storage) until they are
serialised: ``save`` streams each one to the external data file, so a large
model is never held twice in memory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Any, Callable, Sequence

import onnx
import torch
from onnx import helper

from onnxsight import rules
from onnxsight.diagnostics import Diagnostic, DiagnosticContext
from onnxsight.exporter.translate._complex_io import from_pairs, to_pairs
from onnxsight.exporter.inputs._pytree_libs import library_pytrees
from onnxsight.exporter._builder import tensor_bytes_view, torch_to_tensor_proto
from onnxsight.exporter._dtypes import onnx_shape, to_onnx
from onnxsight.exporter.translate._inline import inline_functions
from onnxsight.exporter.inputs._fake import dataless, fake_weights_error, has_data
from onnxsight.exporter._record import ExportRecord
from onnxsight.exporter.program._stream import embedded_size, write_embedded
from onnxsight.exporter.translate._graph import TranslatedGraph
from onnxsight.exporter.program._torch_onnx_api import TorchOnnxMethods, refusal
from onnxsight.exporter.program._weights import save_with_weights

EXTERNAL_DATA_THRESHOLD = 2 * 1024**3  # protobuf's hard limit on one message
PROTOBUF_LIMIT = 2**31 - 1             # the largest message protobuf parses, in bytes
PRODUCER = "onnxsight"

# (diagnostics, path, *, record) -> the path written: how a program's diagnostics become a SARIF file.
SarifWriter = Callable[..., str]


class WeightsChangedError(RuntimeError):
    """A weight the program was exported with was changed in place afterwards (VAL006)."""

    __module__ = "onnxsight"  # public as onnxsight.WeightsChangedError: tracebacks say so

    def __init__(self, changed: Sequence[str]) -> None:
        rule = rules.WEIGHTS_CHANGED_AFTER_EXPORT
        weights = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        ctx = DiagnosticContext()
        diagnostic = ctx.emit(rule, weights=weights)
        super().__init__(f"{rule.code} [{rule.name}] {rule.format(weights=weights)}. {rule.fix}")
        self.rule = rule.code
        self.changed = list(changed)
        self.diagnostics = [diagnostic] if diagnostic else []

    def __reduce__(self) -> tuple[Any, tuple[list[str]]]:
        return type(self), (self.changed,)   # the diagnostics are rebuilt from the names, not pickled


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's in-place version counter (shared with its views); None where torch keeps none."""
    try:
        return int(tensor._version)
    except RuntimeError:  # inference-mode tensors track no version
        return None


def tensor_bytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _initializer(translated: TranslatedGraph, name: str, tensor: torch.Tensor, *, data: bool,
                 external: tuple[str, int, int] | None = None) -> onnx.TensorProto:
    """One initializer's TensorProto: its bytes (``data``), an external-data reference, or neither (a header)."""
    if data and external is None:
        proto = torch_to_tensor_proto(tensor, name)
    else:
        proto = onnx.TensorProto(name=name, dims=onnx_shape(tensor.dtype, tensor.shape),
                                 data_type=torch_to_tensor_proto(tensor.flatten()[:0], name).data_type)
    if external is not None:
        location, offset, length = external
        proto.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
            entry = proto.external_data.add()
            entry.key, entry.value = key, value
    kind = translated.initializer_kinds.get(name)
    if kind:  # as torch.onnx marks them, so tools can tell parameters from buffers and constants
        entry = proto.metadata_props.add()
        entry.key, entry.value = "pkg.torch.export.graph_signature.InputSpec.kind", kind
    return proto


def initializer_headers(translated: TranslatedGraph) -> list[tuple[onnx.TensorProto, torch.Tensor]]:
    """(TensorProto without data, tensor) of each initializer: what _stream.write_embedded writes."""
    return [(_initializer(translated, name, tensor, data=False), tensor)
            for name, tensor in translated.initializers.items()]


# Exporter constants up to this size stay in the model when the weights go to external data (as
# onnx's own convert_model_to_external_data does): ONNX Runtime reads an axes or shape input's
# value while loading the model, and cannot from external data.
_EMBEDDED_CONSTANT_BYTES = 1024


def embedded_constant(translated: TranslatedGraph, name: str, tensor: torch.Tensor) -> bool:
    """Whether initializer ``name`` is a small constant of the exporter's (not a weight) kept in the model."""
    from onnxsight.exporter.inputs._fake import has_data

    return (name not in translated.initializer_kinds and name not in translated.derived
            and name not in translated.computed and has_data(tensor)
            and tensor.numel() * tensor.element_size() <= _EMBEDDED_CONSTANT_BYTES)


def assemble(translated: TranslatedGraph, *, with_data: bool = True,
             external: dict[str, tuple[str, int, int]] | None = None) -> onnx.ModelProto:
    """ModelProto from a translated graph. ``external`` maps initializer -> (location, offset, length)."""
    from onnxsight import __version__

    graph = onnx.GraphProto()
    graph.CopyFrom(translated.graph)
    for name, tensor in translated.initializers.items():
        reference = external.get(name) if external is not None else None
        embed = with_data or (external is not None and reference is None
                              and embedded_constant(translated, name, tensor))
        if reference is None and not embed:
            continue
        graph.initializer.append(_initializer(translated, name, tensor, data=embed, external=reference))
    opsets = [helper.make_opsetid(domain, version) for domain, version in translated.opset_imports.items()]
    model = helper.make_model(graph, opset_imports=opsets, producer_name=PRODUCER, producer_version=__version__)
    model.functions.extend(translated.functions)  # module_functions=: one per module call signature
    # Node-level metadata_props need IR version 10.
    model.ir_version = max(10, helper.find_min_ir_version_for(opsets, ignore_unknown=True))
    for key, value in translated.metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return model


class ONNXProgram(TorchOnnxMethods):
    """The result of :func:`onnxsight.export` (with torch.onnx's methods its users call: ``_torch_onnx_api``)."""

    def __init__(self, translated: TranslatedGraph, exported_program: torch.export.ExportedProgram,
                 diagnostics: Sequence[Diagnostic], record: ExportRecord) -> None:
        self._translated = translated
        self.exported_program = exported_program
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        self.record = record
        self.verification: Any = None  # set by export(..., verify=True)
        # NOTE: SARIF is rendered by onnxsight.reports, which sits beside the exporter, not under it
        # (DESIGN.md: reports renders records; the exporter may import only rules and diagnostics).
        # So the program does not know how to write SARIF itself: whoever composes the layers hands it
        # the writer. onnxsight.export (onnxsight.pipeline) sets reports.write_sarif here on every
        # program it returns; a program from the bare core (onnxsight.exporter.export) has none until
        # given one, and write_sarif says so instead of reaching up into reports.
        self.sarif_writer: SarifWriter | None = None
        self._model_proto: onnx.ModelProto | None = None
        self._session_cache: dict[tuple, Any] = {}
        # NOTE: one program, one set of weights. The initializers are the model's own tensors (not
        # copies, so a large model is not held twice), while the embedded model and the ONNX Runtime
        # sessions are built once and cached. A weight changed in place after export would make
        # prog(x)/verify (cached, old values) disagree with save(external_data=True) (streamed, new
        # values). Snapshotting every weight would double memory and silently re-snapshotting would
        # hide which weights were exported, so we refuse instead (VAL006, naming the weights): each
        # use checks every initializer's version counter (in-place ops and views bump it), one
        # integer compare per weight. Rebinding a parameter (model.fc.weight = nn.Parameter(...))
        # leaves the exported tensor untouched: the program stays consistent with its own weights.
        self._versions = {name: _version(t) for name, t in translated.initializers.items()}
        self._temp_dir: str | None = None
        self._cleanup: weakref.finalize | None = None

    # -- the model ---------------------------------------------------------------------------------
    @property
    def model_proto(self) -> onnx.ModelProto:
        """The ONNX model with weights embedded (built on first access).

        A program exported in fake mode has no weight data to embed: its model is the whole graph with
        the weights that hold no data described (name, dtype, shape) in ``graph.value_info`` instead of
        embedded, for inspection (as torch.onnx's fake mode did); ``save(path, weights=checkpoint)``
        attaches them, and running or verifying needs that file. Raises :class:`WeightsChangedError`
        (VAL006) when a weight was changed in place since export.
        """
        self.check_weights()
        if self.fake_weights:
            return self._without_data(keep_real=True)
        return self._embedded()

    def _without_data(self, *, keep_real: bool) -> onnx.ModelProto:
        """The graph, each weight described in value_info (``keep_real``: embedded when it holds data)."""
        model = assemble(self._translated, with_data=False)
        for name, tensor in self._translated.initializers.items():
            if keep_real and has_data(tensor):
                model.graph.initializer.append(_initializer(self._translated, name, tensor, data=True))
            else:
                model.graph.value_info.append(helper.make_tensor_value_info(name, to_onnx(tensor.dtype),
                                                                            onnx_shape(tensor.dtype, tensor.shape)))
        return model

    def _embedded(self) -> onnx.ModelProto:
        if self._model_proto is None:
            self._model_proto = assemble(self._translated)
        return self._model_proto

    def check_weights(self) -> None:
        """Refuse (VAL006) when any weight was changed in place since export: see the NOTE in __init__."""
        tensors = self._translated.initializers
        changed = [name for name, version in self._versions.items()
                   if version is not None and name in tensors and _version(tensors[name]) != version]
        if changed:
            raise WeightsChangedError(changed)

    @property
    def fake_weights(self) -> list[str]:
        """The weights without data (exported in fake mode): ``save(path, weights=...)`` supplies them."""
        return dataless(self._translated.initializers)

    def _require_data(self, action: str) -> None:
        names = self.fake_weights
        if names:
            raise fake_weights_error(action, names)

    def model_structure(self) -> onnx.ModelProto:
        """The model to read its structure from (nodes, inputs, opsets), never copying large weights.

        The graph with initializers left out, at every size (their dtypes and shapes are in
        ``initializers``): a model is not copied into protobuf just to count its nodes, and
        reports and verification need no second copy of the weights (issue 11). The embedded
        model is built only for ``prog.model_proto``; once built, it is what this returns.
        """
        if self._model_proto is not None:
            return self._model_proto  # already paid for: structure only, no weight check needed
        return assemble(self._translated, with_data=False)

    @property
    def value_names(self) -> dict[str, str]:
        """FX node name -> ONNX value name (the pairing the verification engine uses)."""
        return dict(self._translated.value_names)

    @property
    def input_names(self) -> list[str]:
        return list(self._translated.input_names)

    @property
    def output_names(self) -> list[str]:
        return list(self._translated.output_names)

    @property
    def complex_inputs(self) -> dict[str, torch.dtype]:
        """Inputs that are complex in PyTorch, fed to the graph as real pairs ``[..., 2]`` (IO007)."""
        return dict(self._translated.complex_inputs)

    @property
    def complex_outputs(self) -> dict[str, torch.dtype]:
        """Outputs that are complex in PyTorch, returned by the graph as real pairs ``[..., 2]`` (IO007)."""
        return dict(self._translated.complex_outputs)

    @property
    def initializers(self) -> dict[str, torch.Tensor]:
        return dict(self._translated.initializers)

    @property
    def embedded_size(self) -> int:
        """The byte size of the model with its weights embedded (``model_proto.ByteSize()``), without building it."""
        return embedded_size(assemble(self._translated, with_data=False), initializer_headers(self._translated))

    @property
    def weights_size(self) -> int:
        return tensor_bytes(self._translated.initializers)

    def save(self, path: str | os.PathLike | Any, *, external_data: bool | None = None,
             inline_functions: bool = False, weights: Any = None, strict: bool = True,
             include_initializers: bool = True, keep_initializers_as_inputs: bool = False) -> list[str]:
        """Write the model; ``external_data=None`` uses external data above 2 GB. Returns the files written.

        ``inline_functions=True`` writes a program exported with ``module_functions=`` as one flat
        graph (for runtimes without local functions), with the same names as a flat export.

        ``path`` may also be a binary file object (``io.BytesIO``, ``open(..., "wb")``), as torch.onnx
        accepts: the serialized model is written into it and no file is listed. External data needs a
        folder to write the weights into, so a file object takes models up to 2 GB only.
        Raises :class:`WeightsChangedError` (VAL006), before writing anything, when a weight was
        changed in place since export.

        ``weights``: the real weights, streamed one tensor at a time into external data (always):
        a ``state_dict``, a ``torch.save`` file, or safetensors files (a path, a list of shards, a
        folder). They replace the program's own, by state_dict name; required for a program
        exported in fake mode (else VAL007). A checkpoint that does not fit raises
        :class:`onnxsight.WeightsError` before anything is written: missing weights (VAL008), keys the
        model lacks (VAL009, ignored with ``strict=False``), another shape or dtype (VAL010).

        ``include_initializers=False`` (torch.onnx's name) writes the graph alone, each weight described
        in ``graph.value_info``: the structure of any program, fake-mode ones included, for inspection.
        ``keep_initializers_as_inputs=True`` (torch.onnx's) is refused (ARG020, a TypeError).
        """
        if keep_initializers_as_inputs:
            raise TypeError(refusal(
                "save(keep_initializers_as_inputs=True)",
                "it lists the weights as graph inputs too, to be fed at run time",
                "make a weight that must be fed at run time an argument of forward(); onnxsight writes IR 10+ "
                "models, where initializers need not be inputs"))
        self.check_weights()
        if not include_initializers:
            if weights is not None:
                raise ValueError("save(weights=...) writes the weights: it cannot be combined with "
                                 "include_initializers=False")
            model = _inlined(self._without_data(keep_real=False), inline_functions)
            if callable(getattr(path, "write", None)):
                path.write(model.SerializeToString())
                return []
            with open(os.fspath(path), "wb") as handle:
                handle.write(model.SerializeToString())
            return [os.fspath(path)]
        if weights is not None:
            return save_with_weights(self._translated, self.exported_program, path, weights, strict=strict,
                                     external_data=external_data,
                                     assemble=lambda *a, **k: _inlined(assemble(*a, **k), inline_functions),
                                     embedded_constant=embedded_constant)
        self._require_data("save() without weights=")
        if not isinstance(path, (str, bytes, os.PathLike)) and callable(getattr(path, "write", None)):
            if external_data or (external_data is None and self.weights_size > EXTERNAL_DATA_THRESHOLD):
                raise ValueError("external data cannot be written into a file object: save to a path instead")
            self._require_embeddable()
            self._write_embedded(path, inline_functions)
            return []
        path = os.fspath(path)
        if external_data is None:
            external_data = self.weights_size > EXTERNAL_DATA_THRESHOLD
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        if not external_data:
            self._require_embeddable()
            with open(path, "wb") as handle:
                self._write_embedded(handle, inline_functions)
            return [path]
        location = os.path.basename(path) + ".data"
        data_path = os.path.join(os.path.dirname(os.path.abspath(path)), location)
        external: dict[str, tuple[str, int, int]] = {}
        with open(data_path, "wb") as handle:
            for name, tensor in self._translated.initializers.items():
                if embedded_constant(self._translated, name, tensor):
                    continue
                offset = handle.tell()
                # Stream straight from the tensor's storage: no serialised copy of the weights.
                if tensor.numel():
                    handle.write(memoryview(tensor_bytes_view(tensor)))
                external[name] = (location, offset, handle.tell() - offset)
                pad = (-handle.tell()) % 4096  # page-align the next tensor for mmap
                handle.write(b"\0" * pad)
        model = _inlined(assemble(self._translated, with_data=False, external=external), inline_functions)
        with open(path, "wb") as handle:
            handle.write(model.SerializeToString())
        return [path, data_path]

    def _require_embeddable(self) -> None:
        """Refuse, before writing, an embedded model over protobuf's 2 GB (no reader could parse the file)."""
        if self.weights_size > PROTOBUF_LIMIT // 2 and self.embedded_size > PROTOBUF_LIMIT:
            raise ValueError(f"the model is {self.embedded_size / 1024**3:.2f} GB with its weights embedded, above "
                             "protobuf's 2 GB limit: save it with external_data=True (or None) to a path")

    def _write_embedded(self, handle: Any, inline: bool) -> None:
        """The embedded model's bytes, each weight streamed from its tensor (never the whole model in memory).

        Byte for byte ``model_proto.SerializeToString()`` (inlined where asked), without its two copies
        of the weights; the embedded model already built (``prog.model_proto``) is not needed.
        """
        structure = _inlined(assemble(self._translated, with_data=False), inline)
        write_embedded(handle, structure, initializer_headers(self._translated))

    # -- running -----------------------------------------------------------------------------------
    def flat_inputs(self, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> list[torch.Tensor]:
        """Flatten args/kwargs like torch.export did, keeping the tensors (non-tensors were baked in)."""
        from torch.export._tree_utils import reorder_kwargs
        from torch.utils import _pytree as pytree

        kwargs = kwargs or {}
        spec = getattr(self.exported_program, "call_spec", None)
        in_spec = getattr(spec, "in_spec", None)
        if kwargs and in_spec is not None:
            kwargs = reorder_kwargs(kwargs, in_spec)
        with library_pytrees():  # a DynamicCache argument: its tensors, as at export (CAP012)
            leaves = pytree.tree_leaves((tuple(args), kwargs))
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        if len(tensors) != len(self.input_names):
            raise ValueError(f"the model takes {len(self.input_names)} tensor inputs ({', '.join(self.input_names)}), "
                             f"got {len(tensors)}")
        return tensors

    def session(self, providers: Sequence[str] = ("CPUExecutionProvider",)) -> Any:
        """An ONNX Runtime session for this model (cached per provider list)."""
        import onnxruntime as ort

        self.check_weights()
        self._require_data("running the program in ONNX Runtime")
        key = tuple(providers)
        if key not in self._session_cache:
            options = ort.SessionOptions()
            options.log_severity_level = 3  # ONNX Runtime's warnings (unused initializers ...) off the console
            if self.weights_size > EXTERNAL_DATA_THRESHOLD:
                path = os.path.join(self._temporary_directory(), f"model-{len(self._session_cache)}.onnx")
                self.save(path, external_data=True)
                self._session_cache[key] = ort.InferenceSession(path, options, providers=list(providers))
            else:
                self._session_cache[key] = ort.InferenceSession(self.model_proto.SerializeToString(), options,
                                                                providers=list(providers))
        return self._session_cache[key]

    def _temporary_directory(self) -> str:
        """The folder for the >2 GB model file ONNX Runtime loads; removed with the program.

        weakref.finalize removes it when the program is garbage-collected or closed, and at
        interpreter exit (finalizers run atexit), so a large model's weights do not pile up in /tmp.
        """
        if self._temp_dir is None:
            self._temp_dir = tempfile.mkdtemp(prefix="onnxsight-")
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._temp_dir, ignore_errors=True)
        return self._temp_dir

    def close(self) -> None:
        """Drop the ONNX Runtime sessions and remove the temporary model files (idempotent)."""
        self._session_cache.clear()
        if self._cleanup is not None:
            self._cleanup()
        self._temp_dir = self._cleanup = None

    def __enter__(self) -> "ONNXProgram":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, *args: Any, providers: Sequence[str] = ("CPUExecutionProvider",),
                 **kwargs: Any) -> list[torch.Tensor]:
        """Run the model with ONNX Runtime; inputs and outputs are torch tensors (complex ones too: IO007)."""
        tensors = self.flat_inputs(args, kwargs)
        feeds = {name: _to_numpy(to_pairs(t)) for name, t in zip(self.input_names, tensors)}
        session = self.session(providers)
        if any(o.type == "tensor(bfloat16)" for o in session.get_outputs()):
            # NOTE: InferenceSession.run cannot return bfloat16 (numpy has no such type): OrtValues can
            values = {name: _to_ort_value(array) for name, array in feeds.items()}
            outputs = [_from_ort_value(v) for v in session.run_with_ort_values(None, values)]
        else:
            outputs = session.run(None, feeds)
            outputs = [torch.from_numpy(o) if hasattr(o, "dtype") else torch.tensor(o) for o in outputs]
        return from_pairs(outputs, self.output_names, self._translated.complex_outputs)

    def write_sarif(self, path: str | os.PathLike) -> str:
        """Write this export's diagnostics as a SARIF 2.1.0 log (with the writer onnxsight.export gave it)."""
        if self.sarif_writer is None:
            raise RuntimeError("this ONNXProgram came from the exporter core (onnxsight.exporter.export), which "
                               "does not render reports: export with onnxsight.export, or call "
                               "onnxsight.reports.write_sarif(program.diagnostics, path, record=program.record)")
        return self.sarif_writer(self.diagnostics, path, record=self.record)

    def __repr__(self) -> str:
        nodes = len(self._translated.graph.node)
        return (f"ONNXProgram(opset={self.record.opset}, nodes={nodes}, inputs={self.input_names}, "
                f"outputs={self.output_names}, diagnostics={len(self.diagnostics)})")


def _inlined(model: onnx.ModelProto, inline: bool) -> onnx.ModelProto:
    return inline_functions(model) if inline else model


def _to_numpy(tensor: torch.Tensor) -> Any:
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes  # shipped with onnx
        return tensor.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def _to_ort_value(array: Any) -> Any:
    """An OrtValue of a feed from :func:`_to_numpy` (ml_dtypes' bfloat16 passed as its bits and type)."""
    import onnxruntime as ort

    if array.dtype.name == "bfloat16":
        import numpy as np

        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16),
                                                              onnx_element_type=onnx.TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(array)


def _from_ort_value(value: Any) -> torch.Tensor:
    if value.data_type() == "tensor(bfloat16)":  # ONNX Runtime's numpy() refuses bfloat16; DLPack carries it
        return torch.from_dlpack(value._get_c_value()).clone()
    return torch.from_numpy(value.numpy())
