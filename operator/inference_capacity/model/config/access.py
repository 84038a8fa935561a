"""Typed access to config.json values: the :class:`_Cfg` accessor that names missing fields,
vLLM's derived max_model_len and the ``--dtype auto`` resolution."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...vocab import DTYPE_ALIASES, DTYPE_BYTES, DTYPE_CHOICES
from ..errors import ModelConfigError

_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


class _Cfg:
    """Typed access to a (possibly nested) config dict that names missing fields."""

    def __init__(self, data: Mapping[str, Any], prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def path(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def integer(self, key: str, default: int | None = None) -> int:
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise ModelConfigError(self.path(key), "missing (required by the ledger)")
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise ModelConfigError(self.path(key), f"expected an integer, got {value!r}")
        if value < 0:
            raise ModelConfigError(self.path(key), f"must be >= 0, got {value}")
        return int(value)

    def pos(self, key: str, default: int | None = None) -> int:
        value = self.integer(key, default)
        if value <= 0:
            raise ModelConfigError(self.path(key), f"must be > 0, got {value}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        return default if value is None else bool(value)

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value


def _rope_factor_len(cfg: _Cfg, model_type: str) -> int:
    """vLLM's derived max_model_len (config/model.py::_get_and_verify_max_len)."""
    lens = [cfg.integer(k) for k in _MAX_LEN_KEYS if cfg.has(k)]
    if not lens:
        raise ModelConfigError(cfg.path("max_position_embeddings"), "missing")
    derived = min(lens)
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, Mapping) and "factor" in rope and not model_type.startswith("gemma3"):
        rope_type = str(rope.get("rope_type", rope.get("type", "")))
        if rope_type not in ("su", "longrope", "llama3", "mrope", "default", ""):
            if rope_type == "yarn":
                derived = int(rope.get("original_max_position_embeddings", derived))
            derived = int(derived * float(rope["factor"]))
    return derived


def resolve_dtype(config_dtype: str | None, requested: str) -> str:
    """vLLM's ``--dtype auto``: the checkpoint dtype, float32 served as bfloat16."""
    if requested not in DTYPE_CHOICES:
        raise ModelConfigError("dtype", f"unknown dtype {requested!r}")
    if requested != "auto":
        return DTYPE_ALIASES.get(requested, requested)
    dt = (config_dtype or "bfloat16").replace("torch.", "")
    if dt in ("float32", "float"):
        return "bfloat16"
    if dt not in ("bfloat16", "float16"):
        # fail closed: sizing an unknown checkpoint dtype as bf16 would guess its bytes
        raise ModelConfigError(
            "torch_dtype", f"unknown dtype {dt!r}; the ledger sizes {', '.join(DTYPE_BYTES)}"
        )
    return dt
