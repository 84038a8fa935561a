"""Sanity bounds on a model config, checked before any work.

A config.json drives work and memory: per-layer config arrays (``layer_types``), lists the size of
the vocabulary or of the expert count, the KV-cache groups vLLM forms. (Identical layers are
grouped, issue 13, so the layer count itself costs the ledger nothing beyond its distinct layer
kinds; it stays bounded as a sanity check and for what it still drives.) One schema-valid
resource whose config says ``num_hidden_layers: 300000`` must not cost every other resource of
the cluster its operator, so every size that drives work is bounded here, far above any real
model (the largest public checkpoints have ~126 layers, 384 experts, hidden 18432, vocab
262144), and every bad number is refused with the field and the limit before the builder runs.
The walk is iterative: a config nested 100,000 levels deep is refused at :data:`MAX_DEPTH`, not
by a ``RecursionError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..units import MiB
from .errors import ModelConfigError

#: nesting depth of a config (dicts and lists); real configs nest 3-4 levels
MAX_DEPTH = 32
#: dict entries and list items in a whole config; real configs have a few hundred
MAX_NODES = 100_000
#: serialized size of a config (bytes); real configs are a few KiB (quantization ignore lists
#: can reach ~200 KiB)
MAX_CONFIG_BYTES = MiB

#: per-key upper bounds (inclusive), wherever the key appears (top level, text_config, ...)
SHAPE_LIMITS: dict[str, int] = {
    "num_hidden_layers": 1024,
    "num_layers": 1024,
    "n_layer": 1024,
    "n_layers": 1024,
    "depth": 1024,
    "hidden_size": 131_072,
    "d_model": 131_072,
    "n_embd": 131_072,
    "word_embed_proj_dim": 131_072,
    "intermediate_size": 1_048_576,
    "moe_intermediate_size": 1_048_576,
    "shared_expert_intermediate_size": 1_048_576,
    "ffn_dim": 1_048_576,
    "vocab_size": 4_194_304,
    "num_attention_heads": 8192,
    "num_key_value_heads": 8192,
    "n_head": 8192,
    "head_dim": 16_384,
    "num_experts": 4096,
    "num_local_experts": 4096,
    "n_routed_experts": 4096,
    "n_shared_experts": 4096,
    "num_experts_per_tok": 4096,
    "top_k_experts": 4096,
    "kv_lora_rank": 131_072,
    "q_lora_rank": 131_072,
    "qk_nope_head_dim": 16_384,
    "qk_rope_head_dim": 16_384,
    "v_head_dim": 16_384,
    "max_position_embeddings": 100_000_000,
    "sliding_window": 100_000_000,
}

#: fields that real configs set to Infinity and the ledger never reads (Mamba2's
#: ``time_step_limit: [0.0, Infinity]``); a non-finite number anywhere else is refused
NON_FINITE_ALLOWED = frozenset({"time_step_limit"})

#: quantization_config fields: (lowest, highest) allowed
QUANT_LIMITS: dict[str, tuple[int, int]] = {
    "bits": (1, 16),
    "w_bit": (1, 16),
    "num_bits": (1, 16),
}
#: group sizes: -1 (per channel) or 1..this
MAX_GROUP_SIZE = 1 << 20
MAX_BLOCK = 1 << 16


def _path(parts: tuple[str | int, ...]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out or "config.json"


def _int_in(path: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelConfigError(path, f"expected an integer, got {value!r}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise ModelConfigError(path, f"expected an integer, got {value!r}")
    if not low <= value <= high:
        raise ModelConfigError(path, f"must be in [{low}, {high}], got {value:g}")


def _check_quant(parts: tuple[str | int, ...], q: Mapping[str, Any]) -> None:
    for key, (low, high) in QUANT_LIMITS.items():
        if q.get(key) is not None:
            _int_in(_path((*parts, key)), q[key], low, high)
    for key in ("group_size", "q_group_size"):
        g = q.get(key)
        if g is None:
            continue
        path = _path((*parts, key))
        _int_in(path, g, -1, MAX_GROUP_SIZE)
        if g == 0:
            raise ModelConfigError(path, "must be -1 (per channel) or >= 1, got 0")
    block = q.get("weight_block_size")
    if block is not None:
        path = _path((*parts, "weight_block_size"))
        if not isinstance(block, list) or len(block) != 2:
            raise ModelConfigError(path, f"expected two integers [rows, cols], got {block!r}")
        for i, b in enumerate(block):
            _int_in(f"{path}[{i}]", b, 1, MAX_BLOCK)


def check_config(config: Any) -> None:
    """Raise :class:`ModelConfigError` naming the field and the limit when ``config`` is too
    deep, too large, holds a non-finite number, or a shape or quantization field outside its
    bound. Costs one pass over the config."""
    if not isinstance(config, Mapping):
        raise ModelConfigError("config.json", "expected a JSON object")
    stack: list[tuple[tuple[str | int, ...], Any, bool]] = [((), config, False)]
    nodes = 0
    while stack:
        parts, value, in_quant = stack.pop()
        if len(parts) > MAX_DEPTH:
            raise ModelConfigError(
                _path(parts[:MAX_DEPTH]), f"nested deeper than {MAX_DEPTH} levels"
            )
        if isinstance(value, Mapping):
            nodes += len(value)
            if nodes > MAX_NODES:
                raise ModelConfigError("config.json", f"more than {MAX_NODES} entries")
            if in_quant:
                _check_quant(parts, value)
            for k, v in value.items():
                key = str(k)
                here = (*parts, key)
                if (
                    not in_quant
                    and key in SHAPE_LIMITS
                    and v is not None
                    and not isinstance(v, Mapping | list)
                ):
                    _int_in(_path(here), v, 0, SHAPE_LIMITS[key])
                stack.append((here, v, in_quant or key == "quantization_config"))
        elif isinstance(value, list | tuple):
            nodes += len(value)
            if nodes > MAX_NODES:
                raise ModelConfigError("config.json", f"more than {MAX_NODES} entries")
            stack.extend(((*parts, i), v, in_quant) for i, v in enumerate(value))
        elif (
            isinstance(value, float)
            and not math.isfinite(value)
            and not any(p in NON_FINITE_ALLOWED for p in parts)
        ):
            raise ModelConfigError(_path(parts), f"must be a finite number, got {value!r}")
        elif isinstance(value, str) and len(value) > MAX_CONFIG_BYTES:
            raise ModelConfigError(_path(parts), f"longer than {MAX_CONFIG_BYTES} characters")


def parse_config_json(text: str | bytes, field: str) -> dict[str, Any]:
    """A config.json's text to a checked dict: at most :data:`MAX_CONFIG_BYTES`, valid JSON, a
    JSON object within the bounds of :func:`check_config`. Errors name ``field``."""
    import json

    if len(text) > MAX_CONFIG_BYTES:
        raise ModelConfigError(field, f"larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelConfigError(field, f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ModelConfigError(field, f"nested deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError:
        raise ModelConfigError(field, "not UTF-8 text") from None
    if not isinstance(data, dict):
        raise ModelConfigError(field, "expected a JSON object")
    try:
        check_config(data)
    except ModelConfigError as exc:
        raise ModelConfigError(f"{field}: {exc.field}", exc.problem) from None
    return data


def read_config_file(path: str) -> str:
    """The text of a config.json file, read at most :data:`MAX_CONFIG_BYTES` + 1 bytes (a path
    such as ``/dev/zero`` is refused, not read forever). OSError propagates."""
    with open(path, "rb") as f:
        raw = f.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ModelConfigError(path, f"larger than {MAX_CONFIG_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelConfigError(path, "not UTF-8 text") from None
