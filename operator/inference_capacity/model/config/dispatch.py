"""The entry point: a config.json to its family's builder (multimodal wrappers through
``text_config``, config-class defaults, mllama cross-attention layers), then the
quantization, the dtype and the build."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..errors import ModelConfigError
from ..layerset import Pattern
from ..limits import check_config
from ..quant import (
    parse_quantization,
    resolve_layer_rules,
    split_fused_formats,
    unmatched_layer_formats,
)
from ..shapes import AttnKind, ModelShape, Tensor
from .access import _Cfg, resolve_dtype
from .decoder import _build, config_indices
from .families import (
    _DEFAULTS,
    _UNSUPPORTED,
    _WRAPPERS,
    FAMILIES,
    SUPPORTED_MODEL_TYPES,
    deepseek_v4_shape,
)
from .vision import (
    _vision_for,
    _vision_tensors,
    deepstack_levels,
    encoder_tower,
    mm_modalities,
)

#: wrappers whose config class builds a fixed text config when ``text_config`` has no
#: model_type: KimiVLConfig (vLLM transformers_utils/configs/kimi_vl.py) makes it a
#: DeepseekV2Config (0.25.0)
_DEFAULT_TEXT_TYPE = {"kimi_vl": "deepseek_v2"}

#: where a quantization config names its per-module formats, for the error naming the field
_PER_MODULE_FIELD = {
    "auto-round": "quantization_config.extra_config",
    "compressed-tensors": "quantization_config.config_groups",
}


def shape_from_config(
    config: Mapping[str, Any], name: str = "custom", quantization: str | None = None
) -> ModelShape:
    """Derive the :class:`ModelShape` of a Hugging Face ``config.json``."""
    check_config(config)  # bounds on every size that drives work, before any work
    top = _Cfg(config)
    model_type = config.get("model_type")
    if not model_type:
        raise ModelConfigError("model_type", "missing")
    model_type = str(model_type)
    if model_type in _UNSUPPORTED:
        raise ModelConfigError("model_type", f"{model_type!r}: {_UNSUPPORTED[model_type]}")
    archs: Sequence[Any] = config.get("architectures") or [model_type]
    arch = str(archs[0])
    text = top
    vision: list[Tensor] = []
    multimodal = False
    if model_type in _WRAPPERS or "text_config" in config:
        tc = config.get("text_config")
        if not isinstance(tc, Mapping):
            raise ModelConfigError("text_config", f"{model_type} needs a text_config")
        text = _Cfg(tc, "text_config.")
        inner_type = str(
            tc.get("model_type") or _DEFAULT_TEXT_TYPE.get(model_type, f"{model_type}_text")
        )
        if inner_type in _UNSUPPORTED:
            raise ModelConfigError(
                "text_config.model_type", f"{inner_type!r}: {_UNSUPPORTED[inner_type]}"
            )
        if model_type == "gemma3":
            inner_type = "gemma3_text"
        vision = _vision_for(model_type, config.get("vision_config"), text)
        multimodal = bool(config.get("vision_config"))
        family_type = inner_type
    else:
        family_type = model_type
        multimodal = bool(config.get("vision_config"))
        vc = config.get("vision_config")
        vision = (
            _vision_for(model_type, vc, text)
            if model_type in ("qwen2_vl", "qwen2_5_vl")
            else _vision_tensors(vc)
        )
    if family_type == "deepseek_v4" and not vision:
        if quantization is not None:
            raise ModelConfigError(
                "quantization", f"--quantization {quantization} on DeepSeek-V4 is not modelled"
            )
        dtype_raw = text.get("torch_dtype") or text.get("dtype")
        dtype = resolve_dtype(str(dtype_raw) if dtype_raw else None, "auto")
        return deepseek_v4_shape(text.data, name, dtype)
    builder = FAMILIES.get(family_type)
    if builder is None:
        raise ModelConfigError(
            "model_type",
            f"unsupported model_type {family_type!r}; supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}",
        )
    if family_type in _DEFAULTS:
        merged = {**_DEFAULTS[family_type], **{k: v for k, v in text.data.items() if v is not None}}
        text = _Cfg(merged, text.prefix)
    decoder = builder(text)
    if family_type == "mllama_text_model":
        cross = config_indices(text.get("cross_attention_layers", []) or [])
        full = Pattern.constant(AttnKind.FULL, decoder.layers)
        decoder.kinds = full.with_values(cross, AttnKind.CROSS)
        decoder.vocab = decoder.vocab + 8  # MllamaTextModel embeds vocab_size + 8 tokens
    qcfg = text.get("quantization_config") or top.get("quantization_config")
    quant = parse_quantization(qcfg, quantization)
    dtype_raw = (
        text.get("torch_dtype") or text.get("dtype") or top.get("torch_dtype") or top.get("dtype")
    )
    dtype = resolve_dtype(str(dtype_raw) if dtype_raw else None, "auto")
    shape = _build(name, family_type, arch, decoder, text, dtype, quant, multimodal, vision)
    if quant is not None and quant.layer_rules:
        quant = resolve_layer_rules(quant, shape.num_layers)
        shape = replace(shape, quantization=quant)
    split = split_fused_formats(quant, shape.tensors)
    if split:
        assert quant is not None
        raise ModelConfigError(_PER_MODULE_FIELD.get(quant.method, "quantization_config"), split)
    unmatched = unmatched_layer_formats(quant, shape.tensors)
    if unmatched:
        assert quant is not None  # unmatched names come from its per-module formats
        raise ModelConfigError(
            _PER_MODULE_FIELD.get(quant.method, "quantization_config.quantized_layers"),
            f"module kinds {', '.join(unmatched[:4])} name no weight the ledger knows for "
            f"{family_type}; their format cannot be sized",
        )
    tower = encoder_tower(model_type, arch, config, shape.hidden_size) if multimodal else None
    return replace(
        shape,
        model_type=model_type if model_type not in _WRAPPERS else family_type,
        vision_tower=tower,
        mm_modalities=mm_modalities(model_type, config) if multimodal else (),
        deepstack_levels=deepstack_levels(model_type, config) if multimodal else 0,
    )
