"""The per-rank GPU memory ledger: pure functions, bytes in, bytes out.

``ledger.weights`` and ``ledger.kv`` are the exact terms (below the vLLM engine rules, which use
them); ``inference_capacity.budget`` assembles the per-rank items from a vLLM startup prediction
(above the engine rules).
"""

from .kv import (
    KvLayout,
    kv_bytes_per_token,
    kv_dtype_bytes,
    kv_layout,
    kv_token_format,
    layers_on_rank,
)
from .weights import WeightBreakdown, pp_layer_ranges, weight_breakdown

__all__ = [
    "KvLayout",
    "WeightBreakdown",
    "kv_bytes_per_token",
    "kv_dtype_bytes",
    "kv_layout",
    "kv_token_format",
    "layers_on_rank",
    "pp_layer_ranges",
    "weight_breakdown",
]
