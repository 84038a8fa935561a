"""A checkpoint's tensor inventory from its safetensors headers.

A ``.safetensors`` file starts with an 8-byte little-endian header length and a JSON header that
lists every tensor's dtype, shape and byte range. The exact bytes of a checkpoint are therefore
known from a few kilobytes per shard, without the weights. This module turns header bytes (from
local files or from HTTP range requests, see :mod:`.source`) into an inventory; it does no I/O
on the network itself.

A dtype this module does not know is an error, never a default: a wrong element size would make
every byte figure downstream wrong without anyone noticing.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: bits per element of every safetensors dtype (safetensors/src/tensor.rs ``Dtype``)
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}

#: the most header bytes we accept (safetensors itself refuses headers above 100 MB)
MAX_HEADER_BYTES = 100_000_000


class CheckpointError(ValueError):
    """A safetensors header (or index) that cannot be read exactly."""


@dataclass(frozen=True, slots=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def role(self) -> str:
        """payload | scale | zero_point | index | other: what a quantized checkpoint stores."""
        return tensor_role(self.name)


_ROLES = (
    ("zero_point", re.compile(r"(qzeros|_zero_point|\.zeros)$")),
    ("index", re.compile(r"(g_idx|\.perm|weight_shape)$")),
    (
        "scale",
        re.compile(r"(scales|_scale|scale_inv|_scale_2|absmax|quant_map|quant_state\.[\w.]+)$"),
    ),
    ("payload", re.compile(r"(qweight|weight_packed|weight)$")),
)


def tensor_role(name: str) -> str:
    for role, pattern in _ROLES:
        if pattern.search(name):
            return role
    return "other"


def element_bytes(dtype: str, numel: int, where: str) -> int:
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        raise CheckpointError(
            f"{where}: unknown safetensors dtype {dtype!r}; known: {', '.join(sorted(DTYPE_BITS))}"
        )
    total_bits = numel * bits
    if total_bits % 8:
        raise CheckpointError(f"{where}: {numel} elements of {dtype} do not fill whole bytes")
    return total_bits // 8


def header_length(prefix: bytes, file: str) -> int:
    """The JSON header's length from a file's first 8 bytes."""
    if len(prefix) < 8:
        raise CheckpointError(f"{file}: shorter than the 8-byte safetensors header length")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n > MAX_HEADER_BYTES:
        raise CheckpointError(f"{file}: header length {n} is not a safetensors header")
    return int(n)


def parse_header(header: bytes | Mapping[str, Any], file: str) -> list[TensorEntry]:
    """The tensors of one file's JSON header (bytes after the length prefix, or parsed)."""
    if isinstance(header, bytes | bytearray):
        try:
            data = json.loads(bytes(header).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{file}: header is not JSON ({exc})") from None
    else:
        data = header
    if not isinstance(data, Mapping):
        raise CheckpointError(f"{file}: header is not a JSON object")
    out: list[TensorEntry] = []
    for name, info in data.items():
        if name == "__metadata__":
            continue
        where = f"{file}: tensor {name!r}"
        if not isinstance(info, Mapping):
            raise CheckpointError(f"{where}: entry is not an object")
        dtype = info.get("dtype")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if not isinstance(dtype, str):
            raise CheckpointError(f"{where}: no dtype")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise CheckpointError(f"{where}: shape {shape!r} is not a list of sizes")
        entry = TensorEntry(name, dtype, tuple(shape), 0, file)
        nbytes = element_bytes(dtype, entry.numel, where)
        if (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) for o in offsets)
        ):
            if offsets[1] - offsets[0] != nbytes:
                raise CheckpointError(
                    f"{where}: data_offsets span {offsets[1] - offsets[0]} bytes but "
                    f"{dtype}{list(shape)} is {nbytes}"
                )
        else:
            raise CheckpointError(f"{where}: no data_offsets")
        out.append(TensorEntry(name, dtype, tuple(shape), nbytes, file))
    return out


#: tensors a checkpoint may store that vLLM never loads (checked in load_weights of the models)
_SKIP = (re.compile(r"rotary_emb\.inv_freq$"), re.compile(r"\.attn\.bias$|\.masked_bias$"))


@dataclass(frozen=True, slots=True)
class Inventory:
    """Every tensor of a checkpoint, from its safetensors headers."""

    tensors: tuple[TensorEntry, ...]
    files: tuple[str, ...]
    #: file name -> size on disk (bytes), where known
    file_sizes: Mapping[str, int] = field(default_factory=dict)

    @property
    def checkpoint_bytes(self) -> int:
        """Sum over the tensors of elements × dtype size: the header formula."""
        return sum(t.nbytes for t in self.tensors)

    @property
    def disk_bytes(self) -> int:
        return sum(self.file_sizes.values())

    def by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.dtype] = out.get(t.dtype, 0) + t.nbytes
        return dict(sorted(out.items()))

    def by_role(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.role] = out.get(t.role, 0) + t.nbytes
        return dict(sorted(out.items()))

    def skipped(self, num_layers: int | None = None, tied: bool = False) -> tuple[TensorEntry, ...]:
        """Tensors vLLM does not load: cached rotary frequencies, causal-mask buffers, layers
        past ``num_hidden_layers`` (DeepSeek-V3's multi-token-prediction layer), and a stored
        ``lm_head.weight`` when the embeddings are tied (vLLM shares the embedding matrix)."""
        out = []
        for t in self.tensors:
            if any(p.search(t.name) for p in _SKIP) or (tied and t.name == "lm_head.weight"):
                out.append(t)
                continue
            if num_layers is not None:
                m = re.search(r"(?:^|\.)layers\.(\d+)\.", t.name)
                if m and int(m.group(1)) >= num_layers and "vision" not in t.name:
                    out.append(t)
        return tuple(out)

    def loaded_bytes(self, num_layers: int | None = None, tied: bool = False) -> int:
        """The header bytes vLLM loads (the checkpoint less :meth:`skipped`)."""
        return self.checkpoint_bytes - sum(t.nbytes for t in self.skipped(num_layers, tied))


def index_files(index: Mapping[str, Any], where: str) -> list[str]:
    """Shard names listed by a ``model.safetensors.index.json``, in first-seen order."""
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, Mapping) or not weight_map:
        raise CheckpointError(f"{where}: no weight_map")
    seen: dict[str, None] = {}
    for v in weight_map.values():
        if not isinstance(v, str):
            raise CheckpointError(f"{where}: weight_map value {v!r} is not a file name")
        seen.setdefault(v, None)
    return list(seen)


def read_local_header(path: Path) -> list[TensorEntry]:
    try:
        with path.open("rb") as fh:
            n = header_length(fh.read(8), path.name)
            raw = fh.read(n)
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) != n:
        raise CheckpointError(f"{path.name}: truncated header ({len(raw)} of {n} bytes)")
    return parse_header(raw, path.name)


def local_inventory(folder: Path) -> Inventory | None:
    """The inventory of a model folder's ``*.safetensors`` files (None when there are none).

    With a ``model.safetensors.index.json`` only the shards it lists count (a folder may hold a
    consolidated copy as well)."""
    index_path = folder / "model.safetensors.index.json"
    if index_path.is_file():
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{index_path}: {exc}") from None
        names = index_files(index, index_path.name)
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise CheckpointError(
                f"{folder}: model.safetensors.index.json lists {len(missing)} shard(s) that are "
                f"not in the folder, e.g. {missing[0]}"
            )
    else:
        names = sorted(p.name for p in folder.glob("*.safetensors"))
    if not names:
        return None
    return build_inventory(
        ((n, read_local_header(folder / n)) for n in names),
        {n: (folder / n).stat().st_size for n in names},
    )


def build_inventory(
    per_file: Iterable[tuple[str, list[TensorEntry]]], file_sizes: Mapping[str, int]
) -> Inventory:
    files: list[str] = []
    tensors: list[TensorEntry] = []
    seen: dict[str, str] = {}
    for name, entries in per_file:
        files.append(name)
        for t in entries:
            if t.name in seen:
                raise CheckpointError(f"tensor {t.name!r} is in both {seen[t.name]} and {name}")
            seen[t.name] = name
            tensors.append(t)
    return Inventory(tuple(tensors), tuple(files), dict(file_sizes))
