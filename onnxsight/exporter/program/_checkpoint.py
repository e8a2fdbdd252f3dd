"""Checkpoints for ``ONNXProgram.save(path, weights=...)``: read lazily, one tensor at a time.

A checkpoint is a ``state_dict`` (a dict of tensors), a ``torch.save`` file, or
safetensors files (one path, a list of shards, or the folder holding them).
Each source answers three questions without reading any tensor's bytes: its
keys, each key's dtype and shape, and how to copy one tensor's bytes to a file
descriptor. That is enough to check the whole checkpoint against the program
before the first byte is written (``_weights.py``), and to stream it after.

NOTE: files are copied by offset (``os.copy_file_range``, else ``pread``), not
memory-mapped. A mapping (``torch.load(mmap=True)``, ``safetensors.safe_open``)
keeps every page it has read resident in the process until it is closed, so
saving a 768 MB checkpoint through one raised the peak RSS by 770 MB, against
18 MB by offset (measured on this project's machine). A ``torch.save`` file's
offsets come from loading it onto the meta device, where torch records each
storage's offset in the zip (``_checkpoint_offset``); a safetensors file's from
its JSON header (the format is that header and the raw bytes), so the
safetensors package is not needed here.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch

from onnxsight.exporter._builder import tensor_bytes_view

CHUNK = 16 * 1024**2
_MAX_HEADER = 100 * 1024**2
_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64, "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}


class BadWeights(ValueError):
    """``weights=`` is not a checkpoint (reported as ARG014 with this reason)."""


@dataclass(frozen=True)
class Meta:
    dtype: torch.dtype
    shape: tuple[int, ...]


class _Tensors:
    """A source whose keys, dtypes and shapes are those of ``self.tensors`` (real or on the meta device)."""

    tensors: dict[str, torch.Tensor]

    def keys(self) -> list[str]:
        return list(self.tensors)

    def meta(self, key: str) -> Meta:
        tensor = self.tensors[key]
        return Meta(tensor.dtype, tuple(tensor.shape))


class StateDict(_Tensors):
    """A dict of tensors already in memory: each is written from its own storage."""

    def __init__(self, tensors: Mapping[Any, Any]) -> None:
        from onnxsight.exporter.inputs._fake import has_data

        for key, value in tensors.items():
            if not isinstance(value, torch.Tensor):
                raise BadWeights(f"maps {key!r} to a {type(value).__name__}, not a tensor")
            if not has_data(value):
                raise BadWeights(f"maps {key!r} to a tensor without data (fake or on the meta device)")
        self.tensors = {str(k): v for k, v in tensors.items()}
        self.description = "state_dict"

    def write(self, key: str, fd: int) -> int:
        return write_tensor(self.tensors[key], fd)


class TorchFile(_Tensors):
    """A ``torch.save`` file: keys, dtypes and shapes from a meta-device load; bytes copied by offset."""

    def __init__(self, path: str) -> None:
        self.path, self.description = path, os.path.basename(path)
        try:
            loaded = torch.load(path, map_location="meta", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's argument
            raise BadWeights(f"{path} could not be read as a torch.save file: {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:200]}") from exc
        if not isinstance(loaded, Mapping) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
            found = ", ".join(map(str, list(loaded)[:5])) if isinstance(loaded, Mapping) else type(loaded).__name__
            raise BadWeights(f"{path} holds no state_dict (a dict of tensors): found {found}; pass "
                             f"torch.load(path)['<its key>'] instead")
        self.tensors = {str(k): v for k, v in loaded.items()}
        self._real: dict[str, torch.Tensor] | None = None

    def write(self, key: str, fd: int) -> int:
        tensor = self.tensors[key]
        offset = getattr(tensor.untyped_storage(), "_checkpoint_offset", None)
        if offset is None or not tensor.is_contiguous():
            # A legacy (non-zip) file or a strided view: map the file and write this one tensor.
            if self._real is None:
                self._real = torch.load(self.path, mmap=True, weights_only=True)
            return write_tensor(self._real[key], fd)
        start = offset + tensor.storage_offset() * tensor.element_size()
        return copy_range(self.path, start, tensor.numel() * tensor.element_size(), fd)


class Safetensors:
    """safetensors files: keys, dtypes and shapes from each file's JSON header; bytes copied by offset."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.entries: dict[str, tuple[str, Meta, int, int]] = {}
        paths = list(paths)
        for path in paths:
            for key, entry in _read_header(path).items():
                self.entries[key] = entry
        names = [os.path.basename(p) for p in paths]
        self.description = names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1} shards)"

    def keys(self) -> list[str]:
        return list(self.entries)

    def meta(self, key: str) -> Meta:
        return self.entries[key][1]

    def write(self, key: str, fd: int) -> int:
        path, _, start, length = self.entries[key]
        return copy_range(path, start, length, fd)


def _read_header(path: str) -> dict[str, tuple[str, Meta, int, int]]:
    """key -> (path, meta, absolute offset, byte length) from a safetensors file's header."""
    with open(path, "rb") as handle:
        size = struct.unpack("<Q", handle.read(8).ljust(8, b"\0"))[0]
        if not 2 <= size <= _MAX_HEADER:
            raise BadWeights(f"{path} is not a safetensors file (header size {size})")
        try:
            header = json.loads(handle.read(size))
        except ValueError as exc:
            raise BadWeights(f"{path} is not a safetensors file (its header is not JSON)") from exc
    entries = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        dtype = _SAFETENSORS_DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise BadWeights(f"{path}: {key} has dtype {info.get('dtype')}, which torch cannot hold")
        begin, end = info["data_offsets"]
        entries[key] = (path, Meta(dtype, tuple(info["shape"])), 8 + size + begin, end - begin)
    return entries


class Combined:
    """Several checkpoints as one (``weights=["shards/", {"rotary.inv_freq": t}]``); a later one wins a key."""

    def __init__(self, sources: list[Any]) -> None:
        self.sources = sources
        self.owner = {key: source for source in sources for key in source.keys()}
        names = [source.description for source in sources]
        self.description = " + ".join(names) if len(names) <= 3 else f"{names[0]} (+{len(names) - 1} more)"

    def keys(self) -> list[str]:
        return list(self.owner)

    def meta(self, key: str) -> Meta:
        return self.owner[key].meta(key)

    def write(self, key: str, fd: int) -> int:
        return self.owner[key].write(key, fd)


def open_weights(weights: Any) -> Any:
    """The checkpoint ``weights=`` names; raises :class:`BadWeights` with a reason for ARG014.

    A list combines checkpoints: safetensors shards, or a folder plus a dict of what it lacks (a
    non-persistent buffer such as a rotary embedding's ``inv_freq`` is never in a checkpoint).
    """
    if isinstance(weights, (list, tuple)):
        if not weights or any(isinstance(w, (list, tuple)) for w in weights):
            raise BadWeights("is an empty or nested list: list paths, folders and state_dicts")
        sources = [open_weights(w) for w in weights]
        return sources[0] if len(sources) == 1 else Combined(sources)
    if isinstance(weights, Mapping):
        return StateDict(weights)
    if not isinstance(weights, (str, os.PathLike)):
        raise BadWeights(f"is a {type(weights).__name__}, not a state_dict, a torch.save file or safetensors files")
    path = os.fspath(weights)
    if os.path.isdir(path):
        shards = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".safetensors"))
        if not shards:
            raise BadWeights(f"is the folder {path}, which holds no .safetensors files")
        return Safetensors(shards)
    kind = _kind(path)
    if kind == "safetensors":
        return Safetensors([path])
    if kind == "torch":
        return TorchFile(path)
    raise BadWeights(f"{path} is neither a torch.save file nor a safetensors file")


def _kind(path: str) -> str:
    """"torch", "safetensors" or "unknown", from the file's first bytes."""
    if not os.path.isfile(path):
        raise BadWeights(f"{path} does not exist")
    with open(path, "rb") as handle:
        head = handle.read(9)
    if len(head) == 9 and head[8:9] == b"{":   # a little-endian header size, then the JSON header
        return "safetensors"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"\x80"):   # zip (torch >= 1.6) or legacy pickle
        return "torch"
    return "unknown"


def write_tensor(tensor: torch.Tensor, fd: int) -> int:
    """Write one in-memory tensor's bytes (its own storage when contiguous); returns the count."""
    return _write_all(fd, memoryview(tensor_bytes_view(tensor)) if tensor.numel() else memoryview(b""))


def _write_all(fd: int, view: memoryview | bytes) -> int:
    view, written = memoryview(view), 0
    while written < len(view):
        written += os.write(fd, view[written:written + CHUNK])
    return written


def copy_range(path: str, start: int, length: int, fd: int) -> int:
    """Copy ``length`` bytes of ``path`` from ``start`` to ``fd``, in the kernel where it can (no user memory)."""
    source = os.open(path, os.O_RDONLY)
    try:
        done = 0
        try:
            while done < length:
                count = os.copy_file_range(source, fd, length - done, start + done)
                if count == 0:
                    break
                done += count
        except (AttributeError, OSError):   # another platform or file system: fall back to reads
            pass
        while done < length:
            chunk = os.pread(source, min(CHUNK, length - done), start + done)
            if not chunk:
                raise BadWeights(f"{path} ends before its tensor data does (truncated?)")
            done += _write_all(fd, chunk)
        return done
    finally:
        os.close(source)
