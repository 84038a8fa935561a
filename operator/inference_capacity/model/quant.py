"""Quantization metadata: from a ``quantization_config`` (or a ``--quantization`` flag) to bytes.

The byte formulas per format follow vLLM's linear-method parameters (see
research/vllm-memory.md §8): the payload plus its scales, zero-points and index tensors, per
output/input shard. A format we do not know is an error, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..vocab import DTYPE_BYTES, QUANT_ALIASES, QUANT_METHODS
from .errors import ModelConfigError
from .shapes import ModelShape, Quantization, Tensor, cdiv

#: ``--quantization`` names that are the same format as another entry
ALIASES = QUANT_ALIASES
#: every method the ledger sizes (the CRD's quantization enum is the same set)
KNOWN_METHODS = QUANT_METHODS


def _excluded(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    names: list[str] = []
    for key in ("modules_to_not_convert", "ignore", "ignored_layers", "llm_int8_skip_modules"):
        value = cfg.get(key)
        if isinstance(value, list):
            names.extend(str(v) for v in value)
    return tuple(names)


def _compressed_tensors(cfg: Mapping[str, Any]) -> Quantization:
    groups = cfg.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ModelConfigError("quantization_config.config_groups", "compressed-tensors needs it")
    first = next(iter(groups.values()))
    weights = first.get("weights") if isinstance(first, Mapping) else None
    if not isinstance(weights, Mapping) or "num_bits" not in weights:
        raise ModelConfigError(
            "quantization_config.config_groups.*.weights.num_bits",
            "compressed-tensors group without weight bits",
        )
    bits = int(weights["num_bits"])
    wtype = str(weights.get("type", "int"))
    strategy = str(weights.get("strategy", "tensor"))
    group_size = weights.get("group_size")
    kv_scheme = cfg.get("kv_cache_scheme")
    kv_fp8 = isinstance(kv_scheme, Mapping) and int(kv_scheme.get("num_bits", 16)) == 8
    targets = first.get("targets", []) if isinstance(first, Mapping) else []
    scope = "linear"
    if isinstance(targets, list) and targets and all("expert" in str(t) for t in targets):
        scope = "experts"
    if strategy == "group" and group_size:
        g = int(group_size)
    elif strategy == "channel":
        g = 0
    elif strategy == "block":
        block = weights.get("block_structure") or [128, 128]
        return Quantization(
            method="compressed-tensors",
            weight_bits=bits,
            block=(int(block[0]), int(block[1])),
            excluded=_excluded(cfg),
            kv_cache_fp8=kv_fp8,
            float_format=wtype == "float",
            scope=scope,
        )
    else:
        g = -1
    return Quantization(
        method="compressed-tensors",
        weight_bits=bits,
        group_size=g,
        scale_bytes=2 if (bits == 4 and wtype == "int") else 4,
        zero_points=not bool(weights.get("symmetric", True)),
        excluded=_excluded(cfg),
        kv_cache_fp8=kv_fp8,
        float_format=wtype == "float",
        scope=scope,
    )


def parse_quantization(
    config_quant: Mapping[str, Any] | None, flag: str | None
) -> Quantization | None:
    """The quantization in effect: the checkpoint's config, or an online ``--quantization``.

    ``flag`` may confirm the checkpoint's method (``gptq_marlin`` for a GPTQ checkpoint) or, on an
    unquantized checkpoint, ask for online quantization (``fp8``: per-tensor FP8 after load).
    """
    method = None
    if config_quant is not None:
        method = str(config_quant.get("quant_method", "")).lower()
        if not method:
            raise ModelConfigError("quantization_config.quant_method", "missing")
    if flag is not None:
        flag_l = flag.lower()
        if flag_l not in KNOWN_METHODS:
            raise ModelConfigError(
                "quantization",
                f"unknown quantization {flag!r}; known: {', '.join(KNOWN_METHODS)}",
            )
        if method is None:
            if ALIASES.get(flag_l, flag_l) == "fp8":
                # online FP8: bf16 checkpoint quantized per tensor at load time
                return Quantization(method="fp8", weight_bits=8, group_size=-1, float_format=True)
            raise ModelConfigError(
                "quantization_config",
                f"--quantization {flag} needs a quantized checkpoint; this config has no "
                "quantization_config (only fp8 can quantize online)",
            )
    if config_quant is None or method is None:
        return None
    cfg = config_quant
    base = ALIASES.get(method, method)
    if base == "fp8":
        block = cfg.get("weight_block_size")
        kv = str(cfg.get("kv_cache_quant_algo", "")).upper() == "FP8"
        if block:
            return Quantization(
                method="fp8",
                weight_bits=8,
                block=(int(block[0]), int(block[1])),
                excluded=_excluded(cfg),
                float_format=True,
                kv_cache_fp8=kv,
            )
        return Quantization(
            method="fp8",
            weight_bits=8,
            group_size=-1,
            excluded=_excluded(cfg),
            float_format=True,
            kv_cache_fp8=kv,
        )
    if base in ("gptq", "awq"):
        bits = int(cfg.get("bits", cfg.get("w_bit", 4)))
        g = int(cfg.get("group_size", cfg.get("q_group_size", 128)))
        return Quantization(
            method=base,
            weight_bits=bits,
            group_size=g if g > 0 else 0,
            scale_bytes=2,
            zero_points=True,
            g_idx=base == "gptq",
            excluded=_excluded(cfg),
        )
    if base == "compressed-tensors":
        return _compressed_tensors(cfg)
    if base == "mxfp4":
        return Quantization(
            method="mxfp4",
            weight_bits=4,
            group_size=32,
            scale_bytes=1,
            scope="experts",
            float_format=True,
        )
    if base == "bitsandbytes":
        if cfg.get("load_in_8bit"):
            return Quantization(method="bitsandbytes", weight_bits=8, group_size=0)
        double = bool(cfg.get("bnb_4bit_use_double_quant", False))
        # absmax per 64-element block: fp32, or uint8 + fp32 per 256 blocks with double quant
        return Quantization(
            method="bitsandbytes",
            weight_bits=4,
            group_size=64,
            scale_bytes=1 if double else 4,
            excluded=_excluded(cfg),
        )
    if base == "modelopt_fp4":
        return Quantization(
            method="modelopt_fp4",
            weight_bits=4,
            group_size=16,
            scale_bytes=1,
            float_format=True,
            excluded=_excluded(cfg),
        )
    if base == "experts_int8":
        return Quantization(method="experts_int8", weight_bits=8, group_size=0, scope="experts")
    raise ModelConfigError(
        "quantization_config.quant_method",
        f"unsupported quantization {method!r}; supported: {', '.join(KNOWN_METHODS)}",
    )


#: a layer index in a module path: "model.layers.3.mlp.gate" names layer 3
_LAYER_INDEX = re.compile(r"(?<=\.)\d+(?=\.)")


def quantized_copies(q: Quantization, tensor: Tensor, span: range | None = None) -> int:
    """How many copies of ``tensor`` (those in the layers of ``span``, a pipeline stage, or all)
    this quantization scheme stores quantized; the others stay in the model dtype.

    Exclusion lists name modules by path ("lm_head", "model.layers.3.mlp.gate"); our tensors
    are named "<module>" per layer group: a pattern ending in the module's name excludes every
    copy unless it names layers, then the copies in the layers it names (".3.")."""
    layers = tensor.layers
    if layers is None:
        copies = 1
    else:
        layers = layers if span is None else layers.within(span)
        copies = layers.count
    if not copies or not tensor.quantizable or (q.scope == "experts" and tensor.experts == 1):
        return 0
    named: set[int] = set()
    for pattern in q.excluded:
        if not pattern.endswith(tensor.name):
            continue
        if layers is None or "layers" not in pattern:
            return 0
        # f".{i}." in pattern: dot-delimited digits, spelt without leading zeros
        named.update(int(m) for m in _LAYER_INDEX.findall(pattern) if str(int(m)) == m)
    if layers is None or not named:
        return copies
    return copies - sum(1 for i in named if i in layers)


def quantized_bytes(q: Quantization, rows: int, cols: int, experts: int) -> int:
    """Bytes of one rank's shard (rows × cols per expert) stored in format ``q``."""
    n = rows * cols
    payload = cdiv(n * q.weight_bits, 8)
    if q.block is not None:
        scales = cdiv(rows, q.block[0]) * cdiv(cols, q.block[1]) * 4
    elif q.group_size > 0:
        groups = cdiv(cols, q.group_size)
        scales = groups * rows * q.scale_bytes
        if q.zero_points:
            scales += cdiv(groups * rows * q.weight_bits, 8)
        if q.method == "bitsandbytes" and q.scale_bytes == 1:
            scales += cdiv(n, 64 * 256) * 4  # double quant: second-level fp32 absmax
    elif q.group_size == 0:
        scales = rows * q.scale_bytes  # per output channel
    else:
        scales = 4  # per tensor (per logical shard; fused shards add a few bytes)
    if q.g_idx:
        scales += cols * 4
    return (payload + scales) * experts


def config_checkpoint_bytes(shape: ModelShape) -> int:
    """What the config-derived tensors say the checkpoint stores: every published tensor,
    unsharded and unpadded, in the checkpoint's dtype or quantized format (payload, scales,
    zero points, index tensors). Compared with the safetensors headers' sum."""
    dtype_bytes = DTYPE_BYTES.get(shape.dtype, 2)
    quant = shape.quantization
    total = 0
    for t in shape.tensors:
        if not t.checkpoint:
            continue
        quantized = 0
        if quant is not None:
            quantized = quantized_copies(quant, t)
            total += quantized * quantized_bytes(quant, t.rows, t.cols, t.experts)
        plain = t.copies - quantized
        total += plain * t.rows * t.cols * t.experts * (4 if t.fp32 else dtype_bytes)
    return total
