"""One copy of the weights for every chunk session: the program's own tensors, or a file's external data mapped in place.

The engine builds one ONNX Runtime session per chunk. A chunk model that
embeds its weights holds them about three times while its session is built
(the chunk model, its serialisation, ONNX Runtime's copy, and the prepacked
copy of a MatMul/Gemm weight), and a model over 2 GB cannot be serialised at
all. So when those copies would not fit the memory budget, the chunk models
declare their large weights as graph inputs, and every session is fed the
same arrays: numpy views of the program's tensors (no copy), or of the model
file's external data mapped with ``mmap`` (read in place, paged in on use).

NOTE: why weights as inputs rather than ONNX Runtime's shared initializers.
``SessionOptions.add_initializer`` with OrtValues over one copy was measured
first (onnxruntime 1.32, CPU): the shared value replaces the initializer only
when the session state is built, after the graph optimisers ran on the
model's own TensorProto, so constant folding of ``Transpose(W)`` computed
from the placeholder bytes (a wrong result, silently) and kept its own copy
per session, and a ``Gemm`` reading a shared initializer crashed the process.
``PrepackedWeightsContainer`` is not exposed by the Python API. A weight fed
as an input is never folded or prepacked, so nothing is copied, and the
per-node engine exposes every value anyway, which already keeps fusions
across compared values from forming. Small models keep their weights as
constants (ONNX Runtime then runs the kernels a deployed model gets, such as
NCHWc convolutions), and so do small tensors (shape constants, scalars).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxsight import rules
from onnxsight.verification._graph import elem_type_of
from onnxsight.verification._runners import refuse
from onnxsight.verification._tolerance import dtype_name

#: Copies a chunk session holds of the weights it embeds while it is built (measured: the peak grew
#: by 3.0x the weights of a one-chunk model).
COPIES_PER_SESSION = 3
#: Tensors smaller than this stay constants in the chunk models even when the weights are shared.
MIN_SHARED_BYTES = 64 * 1024
#: protobuf's limit on one message: a chunk model embedding more cannot be built at all.
PROTOBUF_LIMIT = 2 * 1024**3


@dataclass
class Weights(Mapping[str, np.ndarray]):
    """The model's initializers as numpy arrays, each created once on first use and then shared.

    ``detached``: initializers whose TensorProto in the model holds no bytes (a program's weights
    above 2 GB, a file's external data): a chunk model that embeds one gets it from here.
    ``shared``: initializers every chunk session is fed as an input instead of embedding them.
    """

    sources: dict[str, Callable[[], np.ndarray]]
    nbytes: dict[str, int]
    detached: frozenset[str] = frozenset()
    shared: frozenset[str] = frozenset()
    #: initializers never fed as inputs: 4-bit ones, which ONNX Runtime's Python API cannot take as a feed
    embedded: frozenset[str] = frozenset()
    _arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            self._arrays[name] = self.sources[name]()
        return self._arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.sources)

    def __len__(self) -> int:
        return len(self.sources)

    @property
    def total(self) -> int:
        return sum(self.nbytes.values())

    def share(self, memory_budget: int) -> None:
        """Share the large tensors when embedding them per session would not fit ``memory_budget``."""
        if COPIES_PER_SESSION * self.total > memory_budget or self.total > PROTOBUF_LIMIT:
            self.shared = frozenset(n for n, size in self.nbytes.items()
                                    if size >= MIN_SHARED_BYTES and n not in self.embedded)

    def proto(self, name: str) -> onnx.TensorProto:
        """A TensorProto with the bytes of ``name`` (for a chunk model or repro bundle that embeds it)."""
        # NOTE: np.asarray(order="C"), not np.ascontiguousarray, which makes a 0-d value shape [1]
        return numpy_helper.from_array(np.asarray(self[name], order="C"), name)


def model_and_weights(source: Any, *, memory_budget: int) -> tuple[onnx.ModelProto, Weights]:
    """The model to verify (its structure, with whatever weights it embeds) and its weights.

    ``source``: an onnxsight program, a path to an ONNX file, or an ``onnx.ModelProto``.
    """
    if isinstance(source, (str, os.PathLike)):
        return _from_file(os.fspath(source), memory_budget)   # shares as it loads (see _detach_shared)
    model, weights = (source, _from_protos(source)) if isinstance(source, onnx.ModelProto) else _from_program(source)
    weights.share(memory_budget)
    return model, weights


# -- a program: numpy views of its own tensors -------------------------------------------------------
def _from_program(prog: Any) -> tuple[onnx.ModelProto, Weights]:
    """The program's structure (weights embedded only where the program embeds them anyway)."""
    check = getattr(prog, "check_weights", None)
    if check is not None:
        check()                      # VAL006: the program's tensors must still be the exported ones
    if getattr(prog, "fake_weights", None):
        prog.session()               # VAL007: exported in fake mode, its weights have no data to run
    structure = getattr(prog, "model_structure", None)
    model = structure() if structure is not None else prog.model_proto
    tensors = dict(prog.initializers)
    present = {t.name for t in model.graph.initializer}
    missing = [name for name in tensors if name not in present]
    if missing:  # above 2 GB: typed placeholders whose bytes stay in the program's tensors
        from onnxsight.exporter import onnx_shape

        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        for name in missing:
            tensor = tensors[name]
            copy.graph.initializer.append(onnx.TensorProto(name=name, dims=onnx_shape(tensor.dtype, tensor.shape),
                                                           data_type=elem_type_of(dtype_name(tensor.dtype))))
        model = copy
    sources = {name: (lambda t=tensor: _tensor_array(t)) for name, tensor in tensors.items()}
    nbytes = {name: int(t.numel() * t.element_size()) for name, t in tensors.items()}
    four_bit = frozenset(name for name, t in tensors.items() if dtype_name(t.dtype) in ("int4", "uint4"))
    return model, Weights(sources, nbytes, detached=frozenset(missing), embedded=four_bit)


def _tensor_array(tensor: Any) -> np.ndarray:
    """A numpy view of ``tensor``'s storage (a copy only for a non-contiguous or non-CPU tensor)."""
    import torch

    tensor = tensor.detach()
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        tensor = tensor.cpu().contiguous()
    name = dtype_name(tensor.dtype)
    if name == "bfloat16" or name.startswith("float8"):
        import ml_dtypes

        bits = torch.uint16 if name == "bfloat16" else torch.uint8
        return tensor.view(bits).numpy().view(getattr(ml_dtypes, name.replace("float8", "float8_")
                                                                   if name != "bfloat16" else name))
    if name == "float4_e2m1fn_x2":
        from onnxsight.exporter import float4_values

        return float4_values(tensor)
    if tensor.dtype in (torch.int4, torch.uint4):   # the exporter's packed 4-bit weights, as ONNX counts them
        import ml_dtypes

        from onnxsight.exporter import int4_values

        return int4_values(tensor).astype(ml_dtypes.int4 if tensor.dtype is torch.int4 else ml_dtypes.uint4)
    return tensor.numpy()


# -- an ONNX file: external data mapped in place ------------------------------------------------------
def _from_file(path: str, memory_budget: int) -> tuple[onnx.ModelProto, Weights]:
    model = onnx.load(path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(path))
    external = [t for t in model.graph.initializer if _is_external(t)]
    _check_external(path, folder, external)
    maps: dict[str, np.memmap] = {}
    sources: dict[str, Callable[[], np.ndarray]] = {}
    nbytes: dict[str, int] = {}
    for tensor in external:
        location, offset, length = _external_info(tensor)
        nbytes[tensor.name] = length
        sources[tensor.name] = (lambda t=tensor, f=os.path.join(folder, location), o=offset:
                                _mapped(maps, f, o, t))
    embedded = [t for t in model.graph.initializer if not _is_external(t)]
    for tensor in embedded:
        nbytes[tensor.name] = _nbytes(tensor)
        sources[tensor.name] = lambda t=tensor: numpy_helper.to_array(t)
    _load_other_external(model, folder)
    weights = Weights(sources, nbytes, detached=frozenset(t.name for t in external))
    weights.share(memory_budget)
    _detach_shared(weights, embedded)
    return model, weights


def _detach_shared(weights: Weights, embedded: list[onnx.TensorProto]) -> None:
    """Move shared embedded tensors out of the (our own) loaded model, so each is held once."""
    moved = set()
    for tensor in embedded:
        if tensor.name in weights.shared:
            weights._arrays[tensor.name] = numpy_helper.to_array(tensor)
            name, data_type, dims = tensor.name, tensor.data_type, list(tensor.dims)
            tensor.Clear()
            tensor.name, tensor.data_type = name, data_type
            tensor.dims.extend(dims)
            moved.add(name)
    weights.detached = weights.detached | moved


def _load_other_external(model: onnx.ModelProto, folder: str) -> None:
    """Read external tensors outside ``graph.initializer`` (Constant attributes, subgraph weights)
    into the model, as onnx.load would: they are few and small."""
    from onnx.external_data_helper import load_external_data_for_tensor

    def walk(graph: onnx.GraphProto, top: bool) -> Iterator[onnx.TensorProto]:
        if not top:
            yield from graph.initializer
        for node in graph.node:
            for attr in node.attribute:
                yield from ([attr.t] if attr.HasField("t") else [])
                yield from attr.tensors
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    yield from walk(sub, False)

    for tensor in walk(model.graph, True):
        if _is_external(tensor):
            load_external_data_for_tensor(tensor, folder)
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]


def _is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.HasField("data_location") and tensor.data_location == onnx.TensorProto.EXTERNAL


def _external_info(tensor: onnx.TensorProto) -> tuple[str, int, int]:
    entries = {e.key: e.value for e in tensor.external_data}
    offset = int(entries.get("offset") or 0)
    length = int(entries["length"]) if entries.get("length") else _nbytes(tensor)
    return entries.get("location", ""), offset, length


def _nbytes(tensor: onnx.TensorProto) -> int:
    itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return int(np.prod(tensor.dims, dtype=np.int64)) * itemsize


def _mapped(maps: dict[str, np.memmap], file: str, offset: int, tensor: onnx.TensorProto) -> np.ndarray:
    """The tensor as a view of its file mapped read-only (one mapping per file)."""
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    count = int(np.prod(tensor.dims, dtype=np.int64))
    if count == 0:
        return np.zeros(list(tensor.dims), dtype=dtype)
    if file not in maps:
        maps[file] = np.memmap(file, dtype=np.uint8, mode="r")
    return maps[file][offset:offset + count * dtype.itemsize].view(dtype).reshape(list(tensor.dims))


def _check_external(path: str, folder: str, tensors: list[onnx.TensorProto]) -> None:
    """VER016 for a data file that is not there, VER017 for one shorter than the model's offsets."""
    by_file: dict[str, list[tuple[str, int]]] = {}
    for tensor in tensors:
        location, offset, length = _external_info(tensor)
        by_file.setdefault(location, []).append((tensor.name, offset + length))
    for location, needs in by_file.items():
        file = os.path.join(folder, location)
        names = [name for name, _ in needs]
        if not location or not os.path.isfile(file):
            raise refuse(rules.VERIFY_EXTERNAL_DATA_MISSING, model=path, data=file, count=len(names),
                         weights=_listed(names))
        size = os.path.getsize(file)
        past = [(name, end) for name, end in needs if end > size]
        if past:
            raise refuse(rules.VERIFY_EXTERNAL_DATA_SHORT, model=path, data=file, count=len(past), size=size,
                         needed=max(end for _, end in past), weights=_listed([name for name, _ in past]))


def _listed(names: list[str], limit: int = 8) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


# -- an in-memory ModelProto: its own tensors ---------------------------------------------------------
def _from_protos(model: onnx.ModelProto) -> Weights:
    tensors = list(model.graph.initializer)
    sources = {t.name: (lambda t=t: numpy_helper.to_array(t)) for t in tensors}
    return Weights(sources, {t.name: _nbytes(t) for t in tensors})
