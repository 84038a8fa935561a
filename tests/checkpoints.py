"""Safetensors checkpoints for tests: the real tensor names, dtypes and shapes of real models.

The tensors follow the Hugging Face checkpoints of Llama / Qwen2 / Qwen3 models (names as in
``model.safetensors.index.json`` of meta-llama/Llama-3.2-1B, Qwen/Qwen2.5-72B-Instruct-AWQ,
Qwen/Qwen3-32B-FP8, unsloth/*-bnb-4bit), derived from the model's config.json. Files are
written as *sparse* files: the real header, then the file is extended past the data without
writing it, so a 40 GB checkpoint costs a few kilobytes of disk.

``expected_bytes`` is the header formula the code under test must reproduce:
Σ over tensors of (elements × bits of the dtype / 8).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

Spec = dict[str, tuple[str, tuple[int, ...]]]  # name -> (dtype, shape)

BITS = {"BF16": 16, "F16": 16, "F32": 32, "I32": 32, "U8": 8, "F8_E4M3": 8, "I64": 64}


def nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * BITS[dtype] // 8


def expected_bytes(spec: Spec) -> int:
    return sum(nbytes(d, s) for d, s in spec.values())


def _linears(cfg: Mapping[str, Any]) -> Iterator[tuple[str, int, int]]:
    """(name, out, in) of every decoder linear."""
    h = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or h // nh
    inter = cfg["intermediate_size"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        yield f"{p}.self_attn.q_proj", nh * hd, h
        yield f"{p}.self_attn.k_proj", kv * hd, h
        yield f"{p}.self_attn.v_proj", kv * hd, h
        yield f"{p}.self_attn.o_proj", h, nh * hd
        yield f"{p}.mlp.gate_proj", inter, h
        yield f"{p}.mlp.up_proj", inter, h
        yield f"{p}.mlp.down_proj", h, inter


def _others(cfg: Mapping[str, Any], dtype: str) -> Spec:
    """Embeddings, norms, biases and lm_head: never quantized."""
    h = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or h // nh
    v = cfg["vocab_size"]
    out: Spec = {"model.embed_tokens.weight": (dtype, (v, h)), "model.norm.weight": (dtype, (h,))}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out[f"{p}.input_layernorm.weight"] = (dtype, (h,))
        out[f"{p}.post_attention_layernorm.weight"] = (dtype, (h,))
        if cfg["model_type"] == "qwen2":
            out[f"{p}.self_attn.q_proj.bias"] = (dtype, (nh * hd,))
            out[f"{p}.self_attn.k_proj.bias"] = (dtype, (kv * hd,))
            out[f"{p}.self_attn.v_proj.bias"] = (dtype, (kv * hd,))
        if cfg["model_type"] == "qwen3":
            out[f"{p}.self_attn.q_norm.weight"] = (dtype, (hd,))
            out[f"{p}.self_attn.k_norm.weight"] = (dtype, (hd,))
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = (dtype, (v, h))
    return out


def dense(cfg: Mapping[str, Any], dtype: str = "BF16") -> Spec:
    out = _others(cfg, dtype)
    for name, o, i in _linears(cfg):
        out[f"{name}.weight"] = (dtype, (o, i))
    return out


def awq(cfg: Mapping[str, Any], group: int = 128) -> Spec:
    """AutoAWQ GEMM, 4 bit: qweight [in, out/8] and qzeros [in/g, out/8] int32, scales fp16."""
    out = _others(cfg, "F16")
    for name, o, i in _linears(cfg):
        out[f"{name}.qweight"] = ("I32", (i, o // 8))
        out[f"{name}.qzeros"] = ("I32", (i // group, o // 8))
        out[f"{name}.scales"] = ("F16", (i // group, o))
    return out


def gptq(cfg: Mapping[str, Any], group: int = 128) -> Spec:
    """AutoGPTQ 4 bit: qweight [in/8, out], qzeros [in/g, out/8], scales [in/g, out], g_idx."""
    out = _others(cfg, "F16")
    for name, o, i in _linears(cfg):
        out[f"{name}.qweight"] = ("I32", (i // 8, o))
        out[f"{name}.qzeros"] = ("I32", (i // group, o // 8))
        out[f"{name}.scales"] = ("F16", (i // group, o))
        out[f"{name}.g_idx"] = ("I32", (i,))
    return out


def bnb_nf4(cfg: Mapping[str, Any]) -> Spec:
    """bitsandbytes NF4 with double quantization, as transformers saves it (unsloth *-bnb-4bit):
    the packed weight [n/2, 1] uint8, absmax uint8 per 64 elements, nested_absmax fp32 per 256
    blocks, the 256- and 16-entry code books, and the serialized quant state."""
    out = _others(cfg, "BF16")
    for name, o, i in _linears(cfg):
        n = o * i
        blocks = math.ceil(n / 64)
        out[f"{name}.weight"] = ("U8", (n // 2, 1))
        out[f"{name}.weight.absmax"] = ("U8", (blocks,))
        out[f"{name}.weight.nested_absmax"] = ("F32", (math.ceil(blocks / 256),))
        out[f"{name}.weight.nested_quant_map"] = ("F32", (256,))
        out[f"{name}.weight.quant_map"] = ("F32", (16,))
        out[f"{name}.weight.quant_state.bitsandbytes__nf4"] = ("U8", (229,))
    return out


def fp8_block(cfg: Mapping[str, Any], block: int = 128) -> Spec:
    """Block-wise FP8 (Qwen3-*-FP8, DeepSeek-V3): weight e4m3, weight_scale_inv fp32 per block."""
    out = _others(cfg, "BF16")
    for name, o, i in _linears(cfg):
        out[f"{name}.weight"] = ("F8_E4M3", (o, i))
        out[f"{name}.weight_scale_inv"] = ("F32", (math.ceil(o / block), math.ceil(i / block)))
    return out


def fp8_tensor(cfg: Mapping[str, Any]) -> Spec:
    """Per-tensor static FP8 (nvidia/*-FP8, modelopt): e4m3 weight, scalar weight and input
    scales (shape [])."""
    out = _others(cfg, "BF16")
    for name, o, i in _linears(cfg):
        out[f"{name}.weight"] = ("F8_E4M3", (o, i))
        out[f"{name}.weight_scale"] = ("F32", ())
        out[f"{name}.input_scale"] = ("F32", ())
    return out


def header_bytes(spec: Spec) -> tuple[bytes, int]:
    """The safetensors header (length prefix + JSON, padded to 8 bytes) and the data length."""
    entries: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(spec):
        dtype, shape = spec[name]
        n = nbytes(dtype, shape)
        entries[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, offset


def write_sparse(path: Path, spec: Spec) -> int:
    """Write a safetensors file whose data region is a hole; its size in bytes."""
    head, data = header_bytes(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + data)
    return len(head) + data


def shard(spec: Spec, max_bytes: int) -> list[Spec]:
    """Split tensors over shards of at most ~max_bytes, in name order (as save_pretrained)."""
    shards: list[Spec] = [{}]
    size = 0
    for name in sorted(spec, key=_natural):
        n = nbytes(*spec[name])
        if size and size + n > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = spec[name]
        size += n
    return shards


def _natural(name: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in name.split("."))


def write_checkpoint(
    folder: Path, spec: Spec, config: Mapping[str, Any], max_shard_bytes: int | None = None
) -> dict[str, Path | bytes]:
    """A model folder: config.json, one model.safetensors or shards with an index. The files,
    as the test Hub serves them."""
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path | bytes] = {}
    cfg_bytes = json.dumps(config, indent=2).encode()
    (folder / "config.json").write_bytes(cfg_bytes)
    files["config.json"] = folder / "config.json"
    parts = shard(spec, max_shard_bytes) if max_shard_bytes else [spec]
    if len(parts) == 1:
        write_sparse(folder / "model.safetensors", parts[0])
        files["model.safetensors"] = folder / "model.safetensors"
        return files
    weight_map = {}
    for k, part in enumerate(parts, start=1):
        name = f"model-{k:05d}-of-{len(parts):05d}.safetensors"
        write_sparse(folder / name, part)
        files[name] = folder / name
        weight_map.update(dict.fromkeys(part, name))
    index = {"metadata": {"total_size": expected_bytes(spec)}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    files["model.safetensors.index.json"] = folder / "model.safetensors.index.json"
    return files
