"""Quantization metadata: from a ``quantization_config`` (or a ``--quantization`` flag) to bytes.

The byte formulas per format follow vLLM's linear-method parameters (each format's
``create_weights`` in ``model_executor/layers/quantization/``): the payload plus its scales,
zero-points and index tensors, per output/input shard. A format we do not know is an error,
never a guess.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from fnmatch import fnmatch
from typing import Any

from ..vocab import DTYPE_BYTES, QUANT_ALIASES, QUANT_METHODS
from .errors import ModelConfigError
from .layerset import LayerSet
from .shapes import ModelShape, Quantization, Tensor, cdiv

#: OCP MXFP4 experts (gpt-oss, DeepSeek-V4): 4-bit E2M1 weights, one E8M0 byte of scale per 32
MXFP4_EXPERTS = Quantization(
    method="mxfp4",
    weight_bits=4,
    group_size=32,
    scale_bytes=1,
    scope="experts",
    float_format=True,
)

#: ``--quantization`` names that are the same format as another entry
ALIASES = QUANT_ALIASES
#: every method the ledger sizes (the CRD's quantization enum is the same set)
KNOWN_METHODS = QUANT_METHODS


def _whole_fused(names: tuple[str, ...], field: str) -> tuple[str, ...]:
    """An exclusion list of exact module paths as FP8's ``is_layer_skipped`` and
    compressed-tensors' ``should_ignore_layer`` read it (quantization/utils/quant_utils.py,
    compressed_tensors/utils.py, 0.25.0): a fused linear's own name (``qkv_proj``) skips all
    its shards (spelt out here as the shards the ledger holds); a layer listing some shards
    of one fused linear but not the others is refused, as vLLM raises on it."""
    out: list[str] = []
    per_layer: dict[int, set[str]] = {}
    fused_names = _fused_by_ledger_name()
    for name in names:
        layer, raw = _unpacked_module_kind(name)
        if layer is not None and raw in fused_names and not (_REGEX_CHARS & set(name)):
            proj = raw.rsplit(".", 1)[-1]
            shards = fused_names[raw]
            out += [name[: len(name) - len(proj)] + s.rsplit(".", 1)[-1] for s in shards]
            per_layer.setdefault(layer, set()).update(shards)
            continue
        out.append(name)
        if layer is not None and not (_REGEX_CHARS & set(name)):
            per_layer.setdefault(layer, set()).add(raw)
    for layer, raws in sorted(per_layer.items()):
        if split := _partial_fused(raws):
            raise ModelConfigError(
                field,
                f"vLLM refuses it: Detected some but not all shards of layers.{layer}."
                f"{split[0]} are quantized ({', '.join(split[1])}: list all or none)",
            )
    return tuple(out)


def _exclusion_field(cfg: Mapping[str, Any]) -> str:
    """The key a config spells its exclusion list with, for an error naming it."""
    key = next((k for k in _EXCLUSION_KEYS if k in cfg), _EXCLUSION_KEYS[0])
    return f"quantization_config.{key}"


#: the keys checkpoints name their unquantized modules under (vLLM reads each method's own)
_EXCLUSION_KEYS = ("modules_to_not_convert", "ignore", "ignored_layers", "llm_int8_skip_modules")


def _excluded(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """The config's exclusion list. A compressed-tensors ``re:`` entry is a regex vLLM
    ``re.match``es against each layer's module path (``should_ignore_layer`` /
    ``_is_equal_or_regex_match``, compressed_tensors/utils.py, 0.25.0): one without digits is
    read here into the ledger's module kinds it matches (:func:`_regex_modules`); one with
    digits may name layers and stays a pattern matched layer by layer
    (:func:`_pattern_layers`)."""
    names: list[str] = []
    for key in _EXCLUSION_KEYS:
        value = cfg.get(key)
        if not isinstance(value, list):
            continue
        for v in (str(x) for x in value):
            if v.startswith("re:") and not _names_digits(v[3:]):
                names.extend(_regex_modules(v[3:], f"quantization_config.{key}", anchored=True))
            else:
                if v.startswith("re:"):
                    _compile(v[3:], f"quantization_config.{key}")  # refused here, not mid-plan
                names.append(v)
    return tuple(names)


def _compressed_tensors(cfg: Mapping[str, Any]) -> Quantization:
    groups = cfg.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ModelConfigError("quantization_config.config_groups", "compressed-tensors needs it")
    first = next(iter(groups.values()))
    targets = first.get("targets") if isinstance(first, Mapping) else None
    listed = [str(t) for t in targets] if isinstance(targets, list) else []
    if len(groups) > 1 or (any(t.startswith("re:") for t in listed) and "Linear" not in listed):
        return _compressed_tensors_groups(cfg, groups)
    return _compressed_tensors_group(cfg, first)


def _ct_target_kinds(target: str, field: str) -> list[str]:
    """The ledger's module kinds a compressed-tensors target names ("*": ``Linear``, which
    vLLM matches against the module's class name): a module path, or an ``re:`` regex
    ``re.match``ed against vLLM's module paths (``find_matched_target``,
    compressed_tensors/utils.py, 0.25.0: names and regexes first, then the class name, so a
    named module wins over ``Linear``)."""
    if target == "Linear":
        return ["*"]
    if target.startswith("re:"):
        found = _regex_modules(target[3:], field, anchored=True, fused_names=True, whole_only=True)
        return [k for k in found if k != "lm_head"]
    return [module_kind(target)[1]]


def _compressed_tensors_groups(cfg: Mapping[str, Any], groups: Mapping[str, Any]) -> Quantization:
    """Several config groups, or one whose targets are regexes
    (compressed_tensors.py::CompressedTensorsConfig._get_scheme_from_parts matches a layer to
    the group whose ``targets`` name it, 0.25.0): one format per module kind
    (:func:`_ct_target_kinds`); a linear no group names stays unquantized."""
    kinds: dict[str, Quantization] = {}
    named: list[str] = []
    for gname, group in groups.items():
        fmt = _compressed_tensors_group(cfg, group)
        targets = group.get("targets") if isinstance(group, Mapping) else None
        if not isinstance(targets, list) or not targets:
            raise ModelConfigError(
                f"quantization_config.config_groups.{gname}.targets", "missing or empty"
            )
        field = f"quantization_config.config_groups.{gname}.targets"
        for target in targets:
            found = _ct_target_kinds(str(target), field)
            named += [] if str(target).startswith("re:") else found
            for name in found:
                if kinds.setdefault(name, fmt) != fmt:
                    raise ModelConfigError(
                        field, f"{name} has different schemes in different layers or groups"
                    )
    if not kinds:
        raise ModelConfigError(
            "quantization_config.config_groups", "no target names a linear the ledger holds"
        )
    first = next(iter(kinds.values()))
    return replace(
        first,
        weight_bits=min(f.weight_bits for f in kinds.values()),
        layer_formats=tuple(sorted(kinds.items())),
        named_kinds=tuple(named),
    )


def _ct_scale_bytes(bits: int, wtype: str, group: int) -> int:
    """Bytes of one compressed-tensors weight scale: int4 groups keep model-dtype (2 B) scales;
    4-bit float groups are NVFP4 (group 16: e4m3 scales, CompressedTensorsW4A4Fp4.
    create_weights, schemes/compressed_tensors_w4a4_nvfp4.py, 0.25.0) or MXFP4 (group 32:
    uint8 E8M0 scales, compressed_tensors_w4a4_mxfp4.py), 1 B; everything else float32."""
    if bits == 4 and wtype == "int":
        return 2
    if bits == 4 and wtype == "float" and group in (16, 32):
        return 1
    return 4


def _compressed_tensors_group(cfg: Mapping[str, Any], first: Any) -> Quantization:
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
    if group_size and strategy not in ("channel", "block"):
        # "group", and "tensor_group" (NVFP4: a group scale plus a global one per tensor);
        # a group_size without a strategy (ModelOpt-exported NVFP4 config.json) is groups too
        g = int(group_size)
    elif strategy == "channel":
        g = 0
    elif strategy == "block":
        block = weights.get("block_structure") or [128, 128]
        return Quantization(
            method="compressed-tensors",
            weight_bits=bits,
            block=(int(block[0]), int(block[1])),
            excluded=_whole_fused(_excluded(cfg), "quantization_config.ignore"),
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
        scale_bytes=_ct_scale_bytes(bits, wtype, g),
        zero_points=not bool(weights.get("symmetric", True)),
        excluded=_whole_fused(_excluded(cfg), "quantization_config.ignore"),
        kv_cache_fp8=kv_fp8,
        float_format=wtype == "float",
        scope=scope,
    )


def parse_quantization(
    config_quant: Mapping[str, Any] | None, flag: str | None
) -> Quantization | None:
    """The quantization in effect (:func:`_parse_quantization`), with whether it leaves the
    MTP (next-token) layers unquantized (:func:`_mtp_unquantized`)."""
    q = _parse_quantization(config_quant, flag)
    if q is not None and config_quant is not None and _mtp_unquantized(config_quant, q):
        return replace(q, mtp_unquantized=True)
    return q


#: module paths of an MTP layer as vLLM names them (models/qwen3_5_mtp.py ``mtp.layers.N``,
#: deepseek_mtp.py ``model.layers.<num_hidden_layers + N>`` is a decoder layer path and not
#: named here), for the rules that may leave it out of the checkpoint's quantization
_MTP_PATHS = ("mtp.layers.0.mlp.down_proj", "mtp.layers.0.self_attn.o_proj")


def _mtp_unquantized(cfg: Mapping[str, Any], q: Quantization) -> bool:
    """Whether vLLM loads the MTP layers (``mtp.layers.N``, Qwen3.5 / Qwen3-Next) unquantized
    under this config: AutoRound's ``block_name_to_quantize`` names only the decoder
    (``INCConfigParser``: a layer outside it stays 16-bit), a ModelOpt MIXED_PRECISION config
    lists no ``mtp`` module (``_resolve_quant_algo`` resolves nothing), or an exclusion list
    names them (a ModelOpt wildcard, a compressed-tensors ``re:`` entry, a path prefix). The
    checkpoints store them in bf16 then; the ledger weighs the MTP layers with the decoder's
    last layer, in the model dtype where this is True (engines/vllm.py::_decoder_layer_bytes)."""
    inner_raw = cfg.get("quantization")
    inner: Mapping[str, Any] = inner_raw if isinstance(inner_raw, Mapping) else cfg
    if q.method == "auto-round":
        blocks = cfg.get("block_name_to_quantize") or cfg.get("to_quant_block_names")
        names = blocks.split(",") if isinstance(blocks, str) else blocks
        if isinstance(names, list) and names:
            return not any(str(b).strip().startswith("mtp") for b in names)
    if q.method == "modelopt_mixed":
        listed = inner.get("quantized_layers")
        return isinstance(listed, Mapping) and not any("mtp" in str(k) for k in listed)
    entries: list[str] = []
    for key in (*_EXCLUSION_KEYS, "exclude_modules"):
        for src in (cfg, inner):
            value = src.get(key)
            entries += [str(v) for v in value] if isinstance(value, list) else []
    for e in (e for e in entries if "mtp" in e):  # a module rule (self_attn) is not an MTP one
        for path in _MTP_PATHS:
            if e.startswith("re:"):
                try:
                    if re.match(e[3:], path):
                        return True
                except re.error:
                    continue
            elif fnmatch(path, e) or path.startswith(e + ".") or e == "mtp":
                return True
    return False


def _parse_quantization(
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
    if method.startswith("modelopt"):
        return _modelopt(cfg)
    if method in ("auto-round", "auto_round"):
        return _auto_round(cfg)
    base = ALIASES.get(method, method)
    if base == "fp8":
        block = cfg.get("weight_block_size")
        kv = str(cfg.get("kv_cache_quant_algo", "")).upper() == "FP8"
        if block:
            return Quantization(
                method="fp8",
                weight_bits=8,
                block=(int(block[0]), int(block[1])),
                excluded=_whole_fused(_excluded(cfg), _exclusion_field(cfg)),
                float_format=True,
                kv_cache_fp8=kv,
            )
        return Quantization(
            method="fp8",
            weight_bits=8,
            group_size=-1,
            excluded=_whole_fused(_excluded(cfg), _exclusion_field(cfg)),
            float_format=True,
            kv_cache_fp8=kv,
        )
    if base in ("gptq", "awq"):
        bits = int(cfg.get("bits", cfg.get("w_bit", 4)))
        g = int(cfg.get("group_size", cfg.get("q_group_size", 128)))
        q = Quantization(
            method=base,
            weight_bits=bits,
            group_size=g if g > 0 else 0,
            scale_bytes=2,
            zero_points=True,
            g_idx=base == "gptq",
            excluded=_excluded(cfg) if base == "gptq" else _awq_excluded(cfg),
        )
        return _gptq_module_rules(cfg, q) if base == "gptq" else q
    if base == "compressed-tensors":
        return _compressed_tensors(cfg)
    if base == "mxfp4":
        return MXFP4_EXPERTS
    if base == "bitsandbytes":
        if cfg.get("load_in_8bit"):
            return Quantization(
                method="bitsandbytes", weight_bits=8, group_size=0, excluded=_bnb_excluded(cfg)
            )
        double = bool(cfg.get("bnb_4bit_use_double_quant", False))
        # absmax per 64-element block: fp32, or uint8 + fp32 per 256 blocks with double quant
        return Quantization(
            method="bitsandbytes",
            weight_bits=4,
            group_size=64,
            scale_bytes=1 if double else 4,
            excluded=_bnb_excluded(cfg),
        )
    if base == "experts_int8":
        return Quantization(method="experts_int8", weight_bits=8, group_size=0, scope="experts")
    raise ModelConfigError(
        "quantization_config.quant_method",
        f"unsupported quantization {method!r}; supported: {', '.join(KNOWN_METHODS)}",
    )


def _bnb_excluded(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """bitsandbytes' ``llm_int8_skip_modules`` (4- and 8-bit alike), as
    ``is_layer_skipped_bnb`` (bitsandbytes.py, 0.25.0) reads it: an entry equal to one
    component of vLLM's (fused) module path (``mlp``, ``experts``, ``qkv_proj``; not ``q_proj``,
    which vLLM's ``qkv_proj`` does not spell) or to a leading part of the path
    (``model.layers.2.mlp``) skips the module. A bare layer index is refused."""
    field = "quantization_config.llm_int8_skip_modules"
    out: list[str] = []
    for entry in _excluded(cfg):
        if "." in entry or entry == "lm_head":
            out.append(entry)  # a leading part of the path: read as a module path
            continue
        if entry.isdigit():
            raise ModelConfigError(field, f"{entry!r} (every module of a layer) is not sized")
        for path, names in _VLLM_FUSED_MODULES:
            if entry in ("model", "layers", *path.split(".")):
                out += list(names)
    return tuple(dict.fromkeys(out))


def _substring_of(entry: str) -> Callable[[str], bool]:
    """A path test: ``entry`` is a substring of the path (vLLM's ``skip_with_substr``)."""
    return lambda path: entry in path


def _awq_excluded(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """AWQ's ``modules_to_not_convert``, read as vLLM reads it: an entry is a **substring** of
    the module paths it skips (``is_layer_skipped(..., skip_with_substr=True)``,
    quantization/utils/quant_utils.py, called from auto_awq.py, 0.25.0; before,
    ``is_layer_skipped_awq``: ``module_name in prefix``). vLLM tests a fused linear's own
    name first (``mlp.gate`` skips ``gate_up_proj`` whole), then its shards, which must agree
    (else it raises: :func:`split_fused_formats`); the experts by their fused module path. An
    entry naming a layer stays a path (the copies of that layer)."""
    out: list[str] = []
    for entry in _excluded(cfg):
        if _NAMES_LAYER.search(entry):
            out.append(entry)
            continue
        out += ["lm_head"] if entry in "lm_head" else []
        out += _packed(_raw_kinds(_substring_of(entry), fused=True, experts=False))
    return tuple(out)


# --- GPTQ per-module rules -----------------------------------------------------------------

#: vLLM's linear and MoE module prefixes of a decoder layer (after ``layers.N.``), fused as
#: vLLM builds them, and the ledger's tensors each holds: what GPTQ's ``dynamic`` rules are
#: ``re.match``ed against (``get_dynamic_override``, quantization/utils/gptq_utils.py, 0.25.0)
_VLLM_FUSED_MODULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("self_attn.qkv_proj", ("attn.q_proj", "attn.k_proj", "attn.v_proj")),
    ("self_attn.o_proj", ("attn.o_proj",)),
    ("self_attn.fused_qkv_a_proj", ("attn.q_a_proj", "attn.kv_a_proj_with_mqa")),
    ("self_attn.q_b_proj", ("attn.q_b_proj",)),
    ("self_attn.kv_b_proj", ("attn.kv_b_proj",)),
    ("mlp.gate_up_proj", ("mlp.gate_proj", "mlp.up_proj")),
    ("mlp.down_proj", ("mlp.down_proj",)),
    ("mlp.experts", ("mlp.experts",)),
    ("block_sparse_moe.experts", ("mlp.experts",)),  # Mixtral
    ("mixer.experts", ("mlp.experts",)),  # Nemotron-H
    ("moe.experts", ("moe.experts",)),  # Gemma 4
    ("mixer.shared_experts.up_proj", ("mlp.shared_experts.fc1",)),
    ("mixer.shared_experts.down_proj", ("mlp.shared_experts.down_proj",)),
    (
        "mlp.shared_expert.gate_up_proj",
        ("mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"),
    ),
    ("mlp.shared_expert.down_proj", ("mlp.shared_experts.down_proj",)),
    ("linear_attn.in_proj_qkvz", ("linear_attn.in_proj_qkvz",)),
    ("linear_attn.in_proj_ba", ("linear_attn.in_proj_ba",)),
    ("linear_attn.out_proj", ("linear_attn.out_proj",)),
    ("mixer.in_proj", ("mixer.in_proj",)),
    ("mixer.out_proj", ("mixer.out_proj",)),
)


#: a module path naming one layer ("model.layers.3.mlp"); expert indices are not layers
_NAMES_LAYER = re.compile(r"(?:^|\.)layers\.\d")


def _gptq_module_rules(cfg: Mapping[str, Any], q: Quantization) -> Quantization:
    """GPTQ's per-module rules, as ``get_linear_quant_method`` / ``get_moe_quant_method``
    (quantization/utils/gptq_utils.py and auto_gptq.py, 0.25.0) apply them:

    * ``modules_in_block_to_quantize`` (a list, or a list of lists): a linear is quantized
      only where an entry is a substring of its module path (``is_layer_gptq_quantized``; the
      shards of a fused linear must agree, else vLLM raises); the experts are not subject to
      it;
    * ``dynamic``: the first rule whose regex ``re.match``es vLLM's (fused) module path
      decides: ``-:`` leaves the module unquantized, ``+:`` (or none) overrides its ``bits`` /
      ``group_size``.

    Entries and rules are read per module kind; one with digits (it may name layers) is
    refused, as is a rule that does not compile or an override the ledger does not size."""
    blocks_raw = cfg.get("modules_in_block_to_quantize")
    dynamic = cfg.get("dynamic") or {}
    if not blocks_raw and not dynamic:
        return q
    excluded = list(q.excluded)
    kinds: dict[str, Quantization] = {}
    if blocks_raw:
        field = "quantization_config.modules_in_block_to_quantize"
        if not isinstance(blocks_raw, list):
            raise ModelConfigError(field, "must be a list (or a list of lists) of module names")
        blocks = [str(x) for e in blocks_raw for x in (e if isinstance(e, list) else [e])]
        by_layer = [b for b in blocks if _NAMES_LAYER.search(b)]
        if by_layer:
            raise ModelConfigError(field, f"{by_layer[0]!r} names a layer: not sized per layer")
        kept = _raw_kinds(lambda path: any(b in path for b in blocks))
        everything = _raw_kinds(lambda path: True, experts=False)  # experts: not subject to it
        excluded += _packed(everything - kept)
    if dynamic:
        if not isinstance(dynamic, Mapping):
            raise ModelConfigError("quantization_config.dynamic", "must be an object")
        base = replace(q, excluded=())
        rules: list[tuple[str, bool, Quantization | None]] = []
        for rule, override in dynamic.items():
            field = f"quantization_config.dynamic.{rule}"
            pattern = str(rule)
            negative = pattern.startswith("-:")
            pattern = pattern[2:] if pattern[:2] in ("-:", "+:") else pattern
            _compile(pattern, field)
            o = override if isinstance(override, Mapping) else {}
            unknown = set(o) - {"bits", "group_size", "desc_act", "sym"}
            if unknown and not negative:
                raise ModelConfigError(field, f"override keys {sorted(unknown)} not sized")
            b = int(o.get("bits", q.weight_bits))
            gs = int(o.get("group_size", q.group_size if q.group_size > 0 else -1))
            fmt = replace(base, weight_bits=b, group_size=gs if gs > 0 else 0)
            rules.append((pattern, negative, None if negative or fmt == base else fmt))
        if any(_names_digits(r[0]) for r in rules):
            # rules naming layers: resolved layer by layer once the model's layers are known
            return replace(q, excluded=tuple(excluded), layer_rules=tuple(rules), named_kinds=())
        compiled = _compiled(rules)
        for names, own in _decisions(compiled, 0):  # no rule names a layer: layer 0's hold
            if own is None:
                excluded += list(names)
            else:
                kinds.update({n: own for n in names})
        if _skips_lm_head(compiled):
            excluded.append("lm_head")
    out = replace(q, excluded=tuple(excluded))
    if kinds:
        default = replace(q, excluded=())
        out = replace(out, layer_formats=(("*", default), *sorted(kinds.items())), named_kinds=())
    return out


#: ``dynamic`` rules compiled: (regex, negative, override format or None)
_Rules = list[tuple[re.Pattern[str], bool, "Quantization | None"]]


def _compiled(rules: list[tuple[str, bool, Quantization | None]]) -> _Rules:
    return [(_compile(p, "quantization_config.dynamic"), neg, fmt) for p, neg, fmt in rules]


def _first_rule(rules: _Rules, paths: list[str]) -> tuple[bool, Quantization | None] | None:
    """The first ``dynamic`` rule whose regex ``re.match``es one of ``paths``
    (``get_dynamic_override``): (negative, its format: None where it keeps the checkpoint's),
    or None."""
    for rx, negative, fmt in rules:
        if any(rx.match(path) for path in paths):
            return negative, fmt
    return None


def _decisions(rules: _Rules, layer: int) -> list[tuple[tuple[str, ...], Quantization | None]]:
    """What the ``dynamic`` rules decide in one layer: for each of vLLM's (fused) modules the
    first rule matching its path under the layer's prefixes (:func:`_first_rule`) gives (the
    ledger's names, None: unquantized, or the rule's own format); a module no rule matches, or
    whose rule keeps the checkpoint's format, is left out."""
    out: list[tuple[tuple[str, ...], Quantization | None]] = []
    for path, names in _VLLM_FUSED_MODULES:
        decided = _first_rule(rules, [pre.format(layer) + path for pre in _LAYER_PREFIXES])
        if decided is not None and (decided[0] or decided[1] is not None):
            out.append((names, None if decided[0] else decided[1]))
    return out


def _skips_lm_head(rules: _Rules) -> bool:
    """Whether a negative ``dynamic`` rule matches ``lm_head`` (vLLM then leaves it 16-bit)."""
    return _first_rule([r for r in rules if r[1]], ["lm_head"]) is not None


#: the most layer × rule pairs a checkpoint's per-layer rules may ask to resolve
MAX_LAYER_RULE_CHECKS = 1_000_000


def resolve_layer_rules(q: Quantization | None, num_layers: int) -> Quantization | None:
    """GPTQ ``dynamic`` rules that name layers, resolved layer by layer: in each layer, each of
    vLLM's (fused) modules takes the first rule whose regex matches its path (``-:``
    unquantized, ``+:`` its own bits / group size), as per-layer formats (``layer_overrides``).
    A checkpoint of Qwen3.5 exported by AutoRound in the GPTQ format skips each Gated DeltaNet
    layer's ``in_proj_b`` / ``in_proj_a`` this way."""
    if q is None or not q.layer_rules:
        return q
    if num_layers * len(q.layer_rules) > MAX_LAYER_RULE_CHECKS:
        raise ModelConfigError(
            "quantization_config.dynamic",
            f"{len(q.layer_rules)} rules over {num_layers} layers: more than this planner "
            f"resolves ({MAX_LAYER_RULE_CHECKS:,} checks)",
        )
    rules = _compiled(list(q.layer_rules))
    per: dict[tuple[str, Quantization | None], list[int]] = {}
    for i in range(num_layers):
        for names, fmt in _decisions(rules, i):
            for n in names:
                per.setdefault((n, fmt), []).append(i)
    overrides = tuple((n, tuple(ls), fmt) for (n, fmt), ls in per.items())
    head = _skips_lm_head(rules)
    return replace(
        q,
        layer_rules=(),
        layer_overrides=q.layer_overrides + overrides,
        excluded=q.excluded + (("lm_head",) if head else ()),
    )


# --- AutoRound -------------------------------------------------------------------------------

#: INCConfig (quantization/inc/inc.py, 0.25.0): ``quant_method: auto-round`` is loaded by
#: vLLM's INC method, integer data only, in these packings
AUTO_ROUND_PACKINGS = frozenset({"auto_round:auto_gptq", "auto_round:auto_awq"})


def _auto_round_format(bits: int, group: int, excluded: tuple[str, ...] = ()) -> Quantization:
    """One AutoRound width as ``INCWNA16LinearMethod.create_weights`` allocates it."""
    return Quantization(
        method="auto-round",
        weight_bits=bits,
        group_size=group if group > 0 else 0,
        scale_bytes=2,
        zero_points=True,
        g_idx=True,
        excluded=excluded,
    )


#: characters that make an ``extra_config`` key a regex pattern (INCConfigParser._resolve_raw,
#: inc/config_parser.py, 0.24.0)
_REGEX_CHARS = frozenset("*+?^$()[]{}|\\")


#: vLLM's module paths of a decoder layer (after ``layers.N.``) and the ledger's tensor each is
#: loaded into (the Gated DeltaNet shards by their own names: :data:`FUSED_SHARDS`): what a
#: regex exclusion is matched against (``re.search``, AutoRound's INCConfigParser._resolve_raw;
#: ``re.match``, compressed-tensors' should_ignore_layer)
_VLLM_MODULES: tuple[tuple[str, str], ...] = (
    *((f"self_attn.{m}_proj", f"attn.{m}_proj") for m in "qkvo"),
    *((f"mixer.{m}_proj", f"attn.{m}_proj") for m in "qkvo"),
    *(
        (f"self_attn.{m}", f"attn.{m}")
        for m in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
    ),
    *((f"mlp.{m}_proj", f"mlp.{m}_proj") for m in ("gate", "up", "down")),
    ("mlp.fc1", "mlp.fc1"),
    ("mlp.fc2", "mlp.down_proj"),
    *((f"mlp.experts.0.{m}_proj", "mlp.experts.w13") for m in ("gate", "up")),
    ("mlp.experts.0.down_proj", "mlp.experts.w2"),
    *((f"block_sparse_moe.experts.0.{m}", "mlp.experts.w13") for m in ("w1", "w3")),
    ("block_sparse_moe.experts.0.w2", "mlp.experts.w2"),
    ("mixer.experts.0.up_proj", "mlp.experts.w13"),  # Nemotron-H (non-gated experts)
    ("mixer.experts.0.down_proj", "mlp.experts.w2"),
    ("mixer.shared_experts.up_proj", "mlp.shared_experts.fc1"),
    ("mixer.shared_experts.down_proj", "mlp.shared_experts.down_proj"),
    *(
        (f"mlp.{s}.{m}_proj", f"mlp.shared_experts.{m}_proj")
        for s in ("shared_expert", "shared_experts")
        for m in ("gate", "up", "down")
    ),
    *(
        (f"linear_attn.{m}", f"linear_attn.{m}")
        for m in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj")
    ),
    ("mixer.in_proj", "mixer.in_proj"),
    ("mixer.out_proj", "mixer.out_proj"),
)
#: digits in a regex: it may name layers, which a module-kind exclusion cannot express
_DIGIT = re.compile(r"\d")
#: the layer prefixes vLLM's module paths take (plain decoders; Qwen3.5 / Gemma 4 wrappers,
#: before and after vLLM's weight-name mapper), for a layer index
_LAYER_PREFIXES = (
    "model.layers.{}.",
    "model.language_model.layers.{}.",
    "language_model.model.layers.{}.",
)


def _names_digits(pattern: str) -> bool:
    """Whether a regex spells digits (``\\d`` is any layer, not a given one)."""
    return bool(_DIGIT.search(pattern.replace("\\d", "")))


def _compile(pattern: str, field: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ModelConfigError(field, f"regex entry {pattern!r} does not compile: {exc}") from exc


def _shards_of(name: str) -> list[str]:
    """The :data:`_VLLM_MODULES` names a ledger tensor kind is loaded from."""
    if name.endswith("experts"):
        return [f"{name}.w13", f"{name}.w2"]
    return [raw for raw, packed in _PACKED_GDN.items() if packed == name] or [name]


def _raw_kinds(
    hit: Callable[[str], object],
    fused: bool = False,
    experts: bool = True,
    whole_only: bool = False,
) -> set[str]:
    """The ledger's (unfused) module names whose vLLM path under a layer-0 prefix ``hit``
    accepts: the shard paths (:data:`_VLLM_MODULES`; ``experts``: the experts' own too),
    ``whole_only``: less the shards of a fused linear only some of which are accepted, and
    ``fused``: the modules of every fused path accepted (:data:`_VLLM_FUSED_MODULES`)."""
    prefixes = [pre.format(0) for pre in _LAYER_PREFIXES]
    raw = {
        name
        for path, name in _VLLM_MODULES
        if (experts or "experts.0." not in path) and any(hit(p + path) for p in prefixes)
    }
    if whole_only:
        for _, shards in FUSED_SHARDS:
            if not set(shards) <= raw:
                raw -= set(shards)
    if fused:
        for path, names in _VLLM_FUSED_MODULES:
            if any(hit(p + path) for p in prefixes):
                raw.update(r for n in names for r in _shards_of(n))
    return raw


def _packed(raw: set[str]) -> list[str]:
    """Unfused module names as the ledger's tensors spell them (Gated DeltaNet shards fused)."""
    return sorted({_PACKED_GDN.get(r, r) for r in raw})


def _regex_modules(
    pattern: str,
    field: str,
    anchored: bool = False,
    fused_names: bool = False,
    whole_only: bool = False,
) -> list[str]:
    """The ledger's module kinds a regex names in every layer: its matches among
    :data:`_VLLM_MODULES` under layer 0's prefixes, and ``lm_head`` (``anchored``:
    ``re.match``, compressed-tensors; else ``re.search``, AutoRound's INC). ``fused_names``:
    vLLM's fused module names match too (compressed-tensors targets are matched against the
    fused layer's name first); ``whole_only``: a fused linear only some of whose shards match
    does not match (``_match_fused_layer`` needs all of them). Where a match splits a fused
    linear between formats, vLLM raises at load: :func:`split_fused_formats` refuses it once
    the model's tensors are known (a split of modules the model lacks is no split). Refused
    here: a pattern with digits (it may select layers) and one that does not compile."""
    if _names_digits(pattern):
        raise ModelConfigError(
            field, f"regex entry {pattern!r} names digits (layers?): not sized per layer"
        )
    rx = _compile(pattern, field)
    hit = rx.match if anchored else rx.search
    found = _packed(_raw_kinds(hit, fused=fused_names, whole_only=whole_only))
    return ["lm_head", *found] if hit("lm_head") else found


def _auto_round(cfg: Mapping[str, Any]) -> Quantization:
    """An AutoRound checkpoint as ``INCWNA16LinearMethod.create_weights`` (inc/schemes/
    inc_wna16_linear.py, 0.25.0) allocates it: packed int32 qweight, model-dtype scales and
    packed qzeros per ``group_size`` inputs, an int32 g_idx per input (the GPTQ layout; the
    post-load kernel repacking is not modelled, which over-counts the small qzeros/g_idx).

    ``extra_config`` gives layers their own width (``INCConfigParser._resolve_raw``,
    inc/config_parser.py, 0.24.0/0.25.0; ``INCConfig.get_layer_config``, inc.py, 0.20.0): an
    entry naming one layer's module is that copy's bits and group size (>= 16 bits:
    unquantized), sized per layer (``layer_overrides``). As
    vLLM does, the shards of one fused linear (q/k/v, gate/up, the Gated DeltaNet
    projections) must resolve to one width, and so must the experts of one fused MoE layer:
    vLLM raises at load otherwise, and so does this. Entries without a layer (or regex
    patterns) at >= 16 bits stay exclusions; at another width they are refused."""
    data_type = str(cfg.get("data_type", "int"))
    packing = str(cfg.get("packing_format", "auto_round:auto_gptq"))
    if data_type != "int" or packing not in AUTO_ROUND_PACKINGS:
        raise ModelConfigError(
            "quantization_config.packing_format",
            f"AutoRound {data_type!r}/{packing!r}: vLLM's INC loader takes integer data in "
            f"{', '.join(sorted(AUTO_ROUND_PACKINGS))}",
        )
    if "bits" not in cfg or "group_size" not in cfg:
        raise ModelConfigError("quantization_config.bits", "AutoRound needs bits and group_size")
    bits, group = int(cfg["bits"]), int(cfg["group_size"])
    excluded: list[str] = list(_excluded(cfg))
    extra = cfg.get("extra_config") or {}
    if not isinstance(extra, Mapping):
        raise ModelConfigError("quantization_config.extra_config", "must be an object")
    per_layer: dict[tuple[int, str], tuple[int, int]] = {}
    for key, layer_cfg in extra.items():
        name = str(key)
        lc = layer_cfg if isinstance(layer_cfg, Mapping) else {}
        lbits, lgroup = int(lc.get("bits", bits)), int(lc.get("group_size", group))
        width = (16, -1) if lbits >= 16 else (lbits, lgroup)
        field = f"quantization_config.extra_config.{name}"
        if _REGEX_CHARS & set(name):
            if lbits < 16 and width != (bits, group):
                raise ModelConfigError(
                    field,
                    f"{lbits}-bit regex entry {name!r} in a {bits}-bit checkpoint is not sized: "
                    "a width of its own is sized only for one layer's module",
                )
            if lbits >= 16:
                excluded.extend(_regex_modules(name, field))
            continue
        layer, raw = _unpacked_module_kind(name)
        if layer is None:
            if lbits >= 16:
                excluded.append(name)
            elif width != (bits, group) or raw.endswith("lm_head"):
                raise ModelConfigError(
                    field,
                    f"{lbits}-bit {name!r} in a {bits}-bit checkpoint is not sized: a width of "
                    "its own is sized only for one layer's module (model.layers.N.<module>)",
                )
            continue
        if per_layer.setdefault((layer, raw), width) != width:
            what = f"the fused MoE layer of layer {layer}" if raw.endswith("experts") else raw
            raise ModelConfigError(
                field,
                f"vLLM refuses it: {what} requires consistent quant config for all its "
                "sub-layers (INCConfigParser._resolve_raw)",
            )
    for layer, raw in list(per_layer):
        fused = _fused_group(raw)
        if fused is None:
            continue
        widths = {per_layer.get((layer, s), (bits, group)) for s in fused[1]}
        if len(widths) > 1:
            raise ModelConfigError(
                f"quantization_config.extra_config (layer {layer})",
                f"vLLM refuses it: fused module 'layers.{layer}.{fused[0]}' requires consistent "
                f"quant config for {', '.join(fused[1])} (INCConfigParser._resolve_raw): give "
                "every shard the same bits and group_size",
            )
    grouped: dict[tuple[str, tuple[int, int]], list[int]] = {}
    for (layer, raw), width in per_layer.items():
        if width != (bits, group):
            grouped.setdefault((_PACKED_GDN.get(raw, raw), width), []).append(layer)
    overrides = tuple(
        (kind, tuple(sorted(set(layers))), None if w[0] >= 16 else _auto_round_format(*w))
        for (kind, w), layers in sorted(grouped.items())
    )
    return replace(_auto_round_format(bits, group, tuple(excluded)), layer_overrides=overrides)


# --- ModelOpt ---------------------------------------------------------------------------------

#: ModelOpt ``quant_algo`` values vLLM loads, to the format the ledger sizes
#: (model_executor/layers/quantization/modelopt.py, 0.20.0 and 0.25.0: ``QUANT_ALGOS`` and each
#: config class's ``override_quantization_method``): the FP8 family to ``modelopt``
#: (ModelOptFp8Config), anything with NVFP4/FP4 to ``modelopt_fp4`` (ModelOptNvFp4Config; the
#: W4A16 variant stores the same tensors), MXFP8 to ``modelopt_mxfp8``, MIXED_PRECISION to
#: ``modelopt_mixed`` (per-layer ``quantized_layers``).
MODELOPT_FP8_ALGOS = frozenset({"FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO"})


def _modelopt_format(algo: str, group_size: int, excluded: tuple[str, ...]) -> Quantization:
    """One ModelOpt format's linear/MoE parameters, as vLLM's create_weights allocate them:

    * FP8 (``ModelOptFp8LinearMethod.create_weights``): e4m3 weight + a float32 weight and
      input scale per logical shard (per tensor; FP8_PER_CHANNEL_PER_TOKEN: per channel);
    * NVFP4 (``ModelOptNvFp4LinearMethod.create_weights`` and ``ModelOptNvFp4FusedMoE``):
      uint8 ``rows × cols/2`` (two e2m1 values a byte), an e4m3 block scale per ``group_size``
      (16) inputs ``rows × cols/16``, and float32 global scales per shard;
    * MXFP8 (``ModelOptMxFp8LinearMethod.create_weights``): e4m3 weight + a uint8 (E8M0)
      scale per 32 inputs (``MXFP8_BLOCK_SIZE``, quantization/utils/mxfp8_utils.py).
    """
    if algo in MODELOPT_FP8_ALGOS:
        per_channel = algo == "FP8_PER_CHANNEL_PER_TOKEN"
        if algo == "FP8_PB_WO":
            return Quantization(
                method="fp8",
                weight_bits=8,
                block=(128, 128),
                excluded=excluded,
                float_format=True,
                producer="modelopt",
            )
        return Quantization(
            method="fp8",
            weight_bits=8,
            group_size=0 if per_channel else -1,
            excluded=excluded,
            float_format=True,
            producer="modelopt",
        )
    if "NVFP4" in algo or "FP4" in algo:
        return Quantization(
            method="modelopt_fp4",
            weight_bits=4,
            group_size=group_size,
            scale_bytes=1,
            float_format=True,
            excluded=excluded,
            producer="modelopt",
        )
    if algo == "MXFP8":
        return Quantization(
            method="modelopt_mxfp8",
            weight_bits=8,
            group_size=32,
            scale_bytes=1,
            float_format=True,
            excluded=excluded,
            producer="modelopt",
        )
    raise ModelConfigError(
        "quantization_config.quant_algo",
        f"ModelOpt quant_algo {algo!r} is not one vLLM loads (FP8, FP8_PER_CHANNEL_PER_TOKEN, "
        "FP8_PB_WO, NVFP4, W4A16_NVFP4, MXFP8, MIXED_PRECISION)",
    )


def _modelopt_kv(cfg: Mapping[str, Any], inner: Mapping[str, Any]) -> str:
    """``utils/torch_utils.py::get_kv_cache_quant_algo_string`` (0.20.0, 0.25.0): the
    ``kv_cache_scheme`` dict (float 8 bits, static: fp8; float 4 bits: nvfp4) or the
    ``kv_cache_quant_algo`` string (``MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP``: fp8, nvfp4);
    anything else is "auto" (returned as "")."""
    kv = (
        inner.get("kv_cache_scheme")
        or cfg.get("kv_cache_scheme")
        or inner.get("kv_cache_quant_algo")
        or cfg.get("kv_cache_quant_algo")
    )
    if isinstance(kv, Mapping):
        if kv.get("dynamic") is False and kv.get("num_bits") == 8 and kv.get("type") == "float":
            return "fp8"
        if kv.get("num_bits") == 4 and kv.get("type") == "float":
            return "nvfp4"
        return ""
    if isinstance(kv, str) and kv.lower() in ("fp8", "nvfp4"):
        return kv.lower()
    return ""


#: HF module names (after ``layers.<i>.``) to the ledger's tensor names
#: (model/config/decoder.py): attention is ``attn.*`` whatever the model calls it
_MODULE_RENAMES = (
    ("self_attn", "attn"),
    ("mixer.q_proj", "attn.q_proj"),
    ("mixer.k_proj", "attn.k_proj"),
    ("mixer.v_proj", "attn.v_proj"),
    ("mixer.o_proj", "attn.o_proj"),
    # Qwen2-MoE / Qwen3-Next / Qwen3.5-MoE's one shared expert (``self.shared_expert``,
    # models/qwen3_next.py and qwen3_5.py, 0.24.0): the ledger's shared-expert MLP
    ("mlp.shared_expert.", "mlp.shared_experts."),
    # Mixtral / MiniMax-M2's MoE block (``block_sparse_moe``): the ledger's ``mlp.gate`` and
    # ``mlp.experts``
    ("block_sparse_moe.", "mlp."),
)
#: Qwen3.5's unfused Gated DeltaNet projections to the fused tensors the ledger (and vLLM) holds
#: (models/qwen3_5.py packed_modules_mapping, 0.24.0: in_proj_qkvz <- in_proj_qkv + in_proj_z,
#: in_proj_ba <- in_proj_b + in_proj_a); both halves are stored in one format in the checkpoints
#: read, which is what a per-module format of the fused tensor assumes
_PACKED_GDN = {
    "linear_attn.in_proj_qkv": "linear_attn.in_proj_qkvz",
    "linear_attn.in_proj_z": "linear_attn.in_proj_qkvz",
    "linear_attn.in_proj_b": "linear_attn.in_proj_ba",
    "linear_attn.in_proj_a": "linear_attn.in_proj_ba",
}
_AFTER_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.(.+)$")
_EXPERT_INDEX = re.compile(r"\.experts\.\d+\..*$")


def module_kind(path: str) -> tuple[int | None, str]:
    """(layer index or None, the module's name as the ledger's tensors spell it)."""
    layer, name = _unpacked_module_kind(path)
    return layer, _PACKED_GDN.get(name, name)


def _unpacked_module_kind(path: str) -> tuple[int | None, str]:
    """:func:`module_kind` before the Gated DeltaNet projections are fused: the shard's own
    name (``linear_attn.in_proj_z``), as vLLM's fused-module checks see it."""
    m = _AFTER_LAYER.search(path)
    layer, name = (int(m.group(1)), m.group(2)) if m else (None, path)
    name = _EXPERT_INDEX.sub(".experts", name)
    for old, new in _MODULE_RENAMES:
        if name.startswith(old):
            name = new + name[len(old) :]
    return layer, name


#: the shards vLLM loads into one fused linear (each model's ``packed_modules_mapping``:
#: ``qkv_proj`` <- q/k/v, ``gate_up_proj`` <- gate/up, Qwen3.5's ``in_proj_qkvz`` <-
#: in_proj_qkv/in_proj_z and ``in_proj_ba`` <- in_proj_b/in_proj_a; models/llama.py,
#: qwen3_5.py, 0.24.0), by the ledger's module names; a quantization config must give every
#: shard of one fused linear the same format
FUSED_SHARDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("qkv_proj", ("attn.q_proj", "attn.k_proj", "attn.v_proj")),
    ("gate_up_proj", ("mlp.gate_proj", "mlp.up_proj")),
    ("shared_expert.gate_up_proj", ("mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj")),
    ("in_proj_qkvz", ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z")),
    ("in_proj_ba", ("linear_attn.in_proj_b", "linear_attn.in_proj_a")),
    # DeepSeek-V2/V3 with a q LoRA rank (models/deepseek_v2.py, 0.25.0)
    ("fused_qkv_a_proj", ("attn.q_a_proj", "attn.kv_a_proj_with_mqa")),
)


@functools.cache
def _fused_by_ledger_name() -> dict[str, tuple[str, ...]]:
    """Each fused linear spelt as the ledger spells its shards ("attn.qkv_proj") -> its shards
    (built once from :data:`FUSED_SHARDS`)."""
    return {
        shards[0].rsplit(".", 1)[0] + "." + fused.rsplit(".", 1)[-1]: shards
        for fused, shards in FUSED_SHARDS
    }


def _partial_fused(names: set[str]) -> tuple[str, tuple[str, ...]] | None:
    """The first fused linear (:data:`FUSED_SHARDS`) of which ``names`` hold some shards but
    not all: a config vLLM refuses at load."""
    return next((g for g in FUSED_SHARDS if names & set(g[1]) and not set(g[1]) <= names), None)


#: tensors vLLM loads into one module and so into one format, with the name its error gives:
#: the fused linears' shards, and a fused MoE layer's projections
#: (``CompressedTensorsMoEMethod.get_moe_method``: "All MoE projections need to have same
#: quantization scheme"; INC's fused-MoE check)
_ONE_FORMAT = (
    *FUSED_SHARDS,
    ("MoE projections", ("mlp.experts.w13", "mlp.experts.w2")),
    ("MoE projections", ("moe.experts.w13", "moe.experts.w2")),
)


def split_fused_formats(q: Quantization | None, tensors: tuple[Tensor, ...]) -> str | None:
    """Why vLLM would refuse ``q`` on a model with these tensors, if it would: the shards of one
    fused linear (or one MoE layer's projections) that a pattern, a substring list or a
    per-module rule puts in different formats (vLLM raises at load: "Detected some but not all
    shards ... are quantized", "Fused module ... requires consistent quant config", "All MoE
    projections need to have same quantization scheme"). Checked once the model is known,
    because a rule may split modules another model does not have."""
    if q is None:
        return None
    by_name = {t.name: t for t in tensors if t.quantizable}
    for label, shards in _ONE_FORMAT:
        present = [by_name[s] for s in shards if s in by_name]
        if len(present) > 1 and len({frozenset(copies_by_format(q, t)) for t in present}) > 1:
            return (
                f"vLLM refuses it: its rules put the shards of {label} "
                f"({', '.join(shards)}) in different formats; vLLM loads them as one module "
                "and raises at load"
            )
    return None


def _fused_group(name: str) -> tuple[str, tuple[str, ...]] | None:
    """(vLLM's fused linear, its shards) that the shard ``name`` is loaded into, if any."""
    return next((g for g in FUSED_SHARDS if name in g[1]), None)


#: a ModelOpt MIXED_PRECISION config read: (per module kind the format of most of its layers,
#: the per-layer formats)
MixedFormats = tuple[
    tuple[tuple[str, Quantization], ...],
    tuple[tuple[str, tuple[int, ...], Quantization | None], ...],
]


def _modelopt_mixed(layers: Any, group_size: int, excluded: tuple[str, ...]) -> MixedFormats:
    """``ModelOptMixedPrecisionConfig._resolve_quant_algo`` (modelopt.py, 0.25.0) gives each of
    vLLM's layers the algorithm of its own ``quantized_layers`` entry; a fused linear (q/k/v,
    gate/up) the algorithm its listed shards share (a shard not listed is loaded in it too; two
    algorithms raise "Mixed quant_algo within fused layer"); a layer resolved to nothing stays
    unquantized (``get_quant_method``). So each layer's copy is sized in its own format
    (``layer_overrides``, ``overrides_only``: a layer a module kind is not listed in stays in the
    model dtype); per module kind the format of most of its layers is also the kind's format
    (``layer_formats``, what the latency model reads). An entry without a layer index (lm_head)
    applies to every copy. One fused MoE layer's experts with two algorithms are refused (vLLM
    takes the first entry it finds)."""
    if not isinstance(layers, Mapping) or not layers:
        raise ModelConfigError(
            "quantization_config.quantized_layers",
            "MIXED_PRECISION needs a non-empty quantized_layers mapping (vLLM refuses it too)",
        )
    whole: dict[str, str] = {}
    per_layer: dict[tuple[int, str], str] = {}
    for path, info in layers.items():
        field = f"quantization_config.quantized_layers.{path}"
        if not isinstance(info, Mapping) or not info.get("quant_algo"):
            raise ModelConfigError(field, "an entry without quant_algo")
        algo = str(info["quant_algo"]).upper()
        layer, raw = _unpacked_module_kind(str(path))
        if layer is None:
            name = _PACKED_GDN.get(raw, raw)
            if whole.setdefault(name, algo) != algo:
                raise ModelConfigError(field, f"{name} is listed as {whole[name]} and {algo}")
            continue
        if per_layer.setdefault((layer, raw), algo) != algo:
            raise ModelConfigError(
                field,
                f"the experts of layer {layer} are {per_layer[(layer, raw)]} and {algo}: one "
                "fused MoE layer has one format (vLLM takes the first entry it finds)",
            )
    for (layer, raw), algo in list(per_layer.items()):
        fused = _fused_group(raw)
        if fused is None:
            continue
        algos = {per_layer[(layer, s)] for s in fused[1] if (layer, s) in per_layer}
        if len(algos) > 1:
            raise ModelConfigError(
                f"quantization_config.quantized_layers (layer {layer})",
                f"vLLM refuses it: Mixed quant_algo within fused layer layers.{layer}.{fused[0]}: "
                f"{sorted(algos)}. All shards must use the same quantization.",
            )
        for s in fused[1]:  # a shard not listed is loaded with the fused linear's algorithm
            per_layer.setdefault((layer, s), algo)
    by_kind: dict[str, dict[str, set[int]]] = {}
    for (layer, raw), algo in per_layer.items():
        by_kind.setdefault(_PACKED_GDN.get(raw, raw), {}).setdefault(algo, set()).add(layer)
    used = {*whole.values(), *per_layer.values()}
    fmt = {a: _modelopt_format(a, group_size, excluded) for a in used}
    kinds = {name: fmt[a] for name, a in whole.items()}
    overrides: list[tuple[str, tuple[int, ...], Quantization | None]] = []
    for name, per_algo in sorted(by_kind.items()):
        most = max(sorted(per_algo), key=lambda a: len(per_algo[a]))
        kinds.setdefault(name, fmt[most])
        overrides += [(name, tuple(sorted(ls)), fmt[a]) for a, ls in sorted(per_algo.items())]
    return tuple(sorted(kinds.items())), tuple(overrides)


def _modelopt(cfg: Mapping[str, Any]) -> Quantization:
    """A ModelOpt checkpoint (``quant_method`` ``modelopt*``, from config.json or from an
    ``hf_quant_config.json``'s ``quantization`` block): its format by ``quant_algo`` and its
    KV cache algorithm (``ModelOptQuantConfigBase.from_config``, 0.20.0/0.25.0)."""
    inner_raw = cfg.get("quantization")
    inner: Mapping[str, Any] = inner_raw if isinstance(inner_raw, Mapping) else cfg
    algo = str(inner.get("quant_algo") or "").upper()
    if not algo and str(cfg.get("quant_method", "")).lower() == "modelopt_fp4":
        algo = "NVFP4"
    if not algo:
        raise ModelConfigError("quantization_config.quant_algo", "missing (ModelOpt)")
    raw_excluded = inner.get("exclude_modules") if inner is not cfg else cfg.get("ignore")
    if raw_excluded is None:
        raw_excluded = inner.get("exclude_modules") or cfg.get("ignore") or []
    if not isinstance(raw_excluded, list):
        raise ModelConfigError("quantization_config.exclude_modules", "must be a list")
    # exact paths first (is_layer_skipped with the fused mapping, modelopt.py is_layer_excluded,
    # 0.25.0): a fused name skips its shards, a partial list of shards makes vLLM raise
    excluded = _whole_fused(
        tuple(str(x) for x in raw_excluded), "quantization_config.exclude_modules"
    )
    group_size = int(inner.get("group_size") or 16)
    kv = _modelopt_kv(cfg, inner)
    if algo == "MIXED_PRECISION":
        formats, overrides = _modelopt_mixed(inner.get("quantized_layers"), group_size, excluded)
        q = Quantization(
            method="modelopt_mixed",
            weight_bits=min(f.weight_bits for _, f in formats),
            excluded=excluded,
            producer="modelopt",
            layer_formats=formats,
            layer_overrides=overrides,
            overrides_only=True,
        )
    else:
        q = _modelopt_format(algo, group_size, excluded)
    return replace(q, kv_cache_algo=kv, kv_cache_fp8=kv == "fp8")


def tensor_format(q: Quantization, tensor: Tensor) -> Quantization | None:
    """The format ``tensor`` is stored in under ``q``: ``q`` itself, or for a mixed-precision
    checkpoint the format its module kind is given (None: not quantized)."""
    if not q.layer_formats:
        return q
    default = None
    for name, fmt in q.layer_formats:
        if tensor.name == name or tensor.name.startswith(name + "."):
            return fmt
        if name == "*":
            default = fmt  # compressed-tensors "Linear": every linear no other group names
    return default if tensor.quantizable else None


def _named_in_formats(q: Quantization, tensor: Tensor) -> bool:
    """A mixed-precision config that lists ``lm_head`` quantizes it (ParallelLMHead is a
    quantized linear in ModelOptMixedPrecisionConfig.get_quant_method)."""
    return tensor.name == "lm_head" and any(n == "lm_head" for n, _ in q.layer_formats)


def unmatched_layer_formats(q: Quantization | None, tensors: tuple[Tensor, ...]) -> list[str]:
    """Mixed-precision module kinds that name no quantizable tensor of the model (the ledger
    would silently weigh them in the model dtype)."""
    if q is None or not (q.layer_formats or q.layer_overrides):
        return []
    names = [t.name for t in tensors if t.quantizable or t.name == "lm_head"]
    kinds = [name for name, _ in q.layer_formats]
    kinds += [name for name, _, fmt in q.layer_overrides if fmt is not None]
    if q.named_kinds is not None:
        kinds = [k for k in kinds if k in q.named_kinds]
    return sorted(
        {
            name
            for name in kinds
            if name != "*" and not any(n == name or n.startswith(name + ".") for n in names)
        }
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
    if not copies or not (tensor.quantizable or _named_in_formats(q, tensor)):
        return 0
    fmt = tensor_format(q, tensor)
    if fmt is None or (fmt.scope == "experts" and tensor.experts == 1):
        return 0
    named: set[int] = set()
    for pattern in q.excluded:
        hits = _pattern_layers(pattern, tensor.name, layers)
        if hits is None:
            return 0
        named |= hits
    if layers is None or not named:
        return copies
    return copies - sum(1 for i in named if i in layers)


@functools.lru_cache(maxsize=1024)
def _vllm_paths(name: str) -> tuple[str, ...]:
    """vLLM's module paths (after the layer prefix) loaded into the ledger's tensor ``name``."""
    return tuple(p for p, raw in _VLLM_MODULES if _PACKED_GDN.get(raw, raw) == name)


def _pattern_layers(pattern: str, name: str, layers: LayerSet | None) -> set[int] | None:
    """The copies of the ledger's tensor ``name`` (in ``layers``; None: a tensor outside the
    decoder layers) an exclusion pattern names: None for every copy, else the layer indices
    (possibly none). A module path names the layers it spells (".3."; without any, every
    layer); a compressed-tensors ``re:`` pattern with digits is ``re.match``ed against each
    layer's vLLM module paths (:func:`_excluded` reads the ones without digits)."""
    if pattern.startswith("re:"):
        rx = _compile(pattern[3:], "quantization_config.ignore")
        if layers is None:
            return None if name == "lm_head" and rx.match("lm_head") else set()
        paths = _vllm_paths(name)
        return {
            i
            for i in layers
            if any(rx.match(pre.format(i) + p) for p in paths for pre in _LAYER_PREFIXES)
        }
    if not _excludes(pattern, name):
        return set()
    if layers is None or "layers" not in pattern:
        return None
    # f".{i}." in pattern: dot-delimited digits, spelt without leading zeros
    return {int(m) for m in _LAYER_INDEX.findall(pattern) if str(int(m)) == m}


def _excluded_at(q: Quantization, tensor: Tensor, layer: int) -> bool:
    """Whether ``q``'s exclusions leave ``tensor``'s copy in ``layer`` unquantized (the rule of
    :func:`quantized_copies` for one layer)."""
    one = LayerSet((range(layer, layer + 1),))
    for pattern in q.excluded:
        hits = _pattern_layers(pattern, tensor.name, one)
        if hits is None or layer in hits:
            return True
    return False


def copies_by_format(
    q: Quantization, tensor: Tensor, span: range | None = None
) -> tuple[tuple[Quantization, int], ...]:
    """The quantized copies of ``tensor`` (in the layers of ``span``, or all) by the format
    each is stored in; the other copies stay in the model dtype. Without per-layer formats:
    :func:`tensor_format` × :func:`quantized_copies`. With them (``q.layer_overrides``), a
    layer an override names is stored in its format (None: unquantized), the others in the
    default one, or, where ``q.overrides_only``, unquantized; exclusions win either way."""
    default = tensor_format(q, tensor)
    base = quantized_copies(q, tensor, span)
    name = tensor.name
    matching = [o for o in q.layer_overrides if name == o[0] or name.startswith(o[0] + ".")]
    if not matching or tensor.layers is None or not tensor.quantizable:
        return ((default, base),) if base and default is not None else ()

    def applies(fmt: Quantization | None) -> bool:
        return fmt is not None and not (fmt.scope == "experts" and tensor.experts == 1)

    counts: dict[Quantization, int] = {}
    if base and default is not None and not q.overrides_only:
        counts[default] = base
    seen: set[int] = set()
    for _, layers, fmt in matching:
        for i in layers:
            if i in seen or i not in tensor.layers or (span is not None and i not in span):
                continue
            seen.add(i)
            if _excluded_at(q, tensor, i):
                continue
            if default is not None and not q.overrides_only and applies(default):
                counts[default] -= 1  # this copy was counted in the default format
            if fmt is not None and applies(fmt):
                counts[fmt] = counts.get(fmt, 0) + 1
    return tuple((f, n) for f, n in counts.items() if n > 0)


def _excludes(pattern: str, name: str) -> bool:
    """Whether an exclusion pattern (a module path, or a ModelOpt/compressed-tensors wildcard:
    ``fnmatch`` in ``ModelOptQuantConfigBase.is_layer_excluded``, 0.25.0) names the ledger's
    tensor ``name``. Paths are compared after :func:`module_kind` (``self_attn.`` and
    Nemotron-H's ``mixer.q_proj`` are the ledger's ``attn.*``)."""
    if pattern.endswith(name):
        return True
    _, kind = module_kind(pattern)
    if kind.endswith(name) or name.startswith(kind + "."):
        return True
    if any(c in kind for c in "*?["):
        spellings = [name, f"m.{name}.w"]
        if name.startswith("attn."):  # HF names: self_attn.* (most), mixer.* (Nemotron-H)
            spellings += [f"m.self_{name}.w", f"m.mixer.{name[5:]}.w"]
        return any(fnmatch(c, kind) for c in spellings)
    return False


def quantized_bytes(q: Quantization, rows: int, cols: int, experts: int) -> int:
    """Bytes of one rank's shard (rows × cols per expert) stored in format ``q``."""
    n = rows * cols
    payload = cdiv(n * q.weight_bits, 8)
    if q.block is not None:
        # one scale per block: fp32, or e8m0 (1 B) for DeepSeek-V4's fp4-expert checkpoints
        scales = cdiv(rows, q.block[0]) * cdiv(cols, q.block[1]) * q.scale_bytes
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
        for fmt, n in copies_by_format(quant, t) if quant is not None else ():
            quantized += n
            total += n * quantized_bytes(fmt, t.rows, t.cols, t.experts)
        plain = t.copies - quantized
        total += plain * t.rows * t.cols * t.experts * (4 if t.fp32 else dtype_bytes)
    return total


#: ModelOpt ≤ 0.29 writes its quantization next to config.json, in this file
#: (vLLM transformers_utils/config.py::get_config, 0.20.0–0.25.0)
HF_QUANT_CONFIG = "hf_quant_config.json"


def merge_hf_quant_config(config: Mapping[str, Any], hf_quant: Any) -> dict[str, Any]:
    """``config`` with an ``hf_quant_config.json`` read as vLLM reads it: used only when
    config.json has no ``quantization_config`` (``get_config``), and a ModelOpt producer's
    ``quant_algo`` names the method (``ModelArchConfigConvertorBase.
    _normalize_quantization_config``, 0.20.0/0.25.0: the FP8 family -> ``modelopt``, NVFP4 ->
    ``modelopt_fp4``, any other algorithm a ValueError at startup)."""
    out = dict(config)
    if out.get("quantization_config") is not None or hf_quant is None:
        return out
    if not isinstance(hf_quant, Mapping):
        raise ModelConfigError(HF_QUANT_CONFIG, "expected a JSON object")
    q = dict(hf_quant)
    producer = q.get("producer")
    if isinstance(producer, Mapping) and producer.get("name") == "modelopt":
        inner = q.get("quantization")
        algo = str(inner.get("quant_algo", "")).upper() if isinstance(inner, Mapping) else ""
        if algo in MODELOPT_FP8_ALGOS:
            q["quant_method"] = "modelopt"
        elif algo == "NVFP4":
            q["quant_method"] = "modelopt_fp4"
        elif algo:
            raise ModelConfigError(
                f"{HF_QUANT_CONFIG}.quantization.quant_algo",
                f"vLLM stops at startup on {algo!r} from {HF_QUANT_CONFIG} ('Unknown ModelOpt "
                "quant algo'); only FP8 and NVFP4 are read from this file",
            )
    out["quantization_config"] = q
    return out
