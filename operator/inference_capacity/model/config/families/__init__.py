"""The registry: every supported ``model_type`` and the builder that maps its config onto a
:class:`_Decoder` (one module per architecture family), the multimodal wrappers whose text model
sits under ``text_config``, the families known but not sized yet, and the transformers
config-class defaults for fields a config.json may omit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..access import _Cfg
from ..decoder import _base, _Decoder
from .deepseek import _deepseek
from .deepseek_v4 import deepseek_v4_shape
from .gemma import _gemma, _gemma4
from .gpt_oss import _gpt_oss
from .hybrid import _nemotron_h, _qwen3_5
from .llama import _llama, _llama4, _mistral, _mixtral, _nemotron_nas
from .minimax import _minimax_m2
from .phi_opt import _opt, _phi
from .qwen import _qwen2, _qwen3, _qwen_moe

__all__ = ["FAMILIES", "SUPPORTED_MODEL_TYPES", "deepseek_v4_shape"]


FAMILIES: dict[str, Callable[[_Cfg], _Decoder]] = {
    "llama": _llama,
    "mistral": _mistral,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen2_moe": lambda c: _qwen_moe(c, qwen3=False),
    "qwen3_moe": lambda c: _qwen_moe(c, qwen3=True),
    "mixtral": _mixtral,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "gemma2": lambda c: _gemma(c, 2, "gemma2"),
    "gemma3_text": lambda c: _gemma(c, 3, "gemma3_text"),
    "gpt_oss": _gpt_oss,
    "phi": _phi,
    "phi3": lambda c: _base(c),
    "opt": _opt,
    "llama4_text": _llama4,
    "nemotron_h": _nemotron_h,
    "qwen2_5_vl": _qwen2,
    "qwen2_vl": _qwen2,
    "mllama_text_model": _llama,
    "qwen3_5_moe_text": lambda c: _qwen3_5(c, moe=True),
    "qwen3_5_text": lambda c: _qwen3_5(c, moe=False),
    "gemma4_text": _gemma4,
    "minimax_m2": _minimax_m2,
    "nemotron-nas": _nemotron_nas,
    # Qwen3-VL's language models (vllm models/qwen3_vl.py ``Qwen3LLMModel(Qwen3Model)``,
    # qwen3_vl_moe.py ``Qwen3MoeLLMModel(Qwen3MoeModel)``, 0.12.0/0.21.0): Qwen3's
    "qwen3_vl_text": _qwen3,
    "qwen3_vl_moe_text": lambda c: _qwen_moe(c, qwen3=True),
}


#: multimodal wrappers: the text model sits under ``text_config``
_WRAPPERS = {
    "gemma3",
    "gemma4",
    "llama4",
    "mllama",
    "kimi_k25",
    "kimi_vl",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_vl",
    "qwen3_vl_moe",
}


#: families we know of but cannot size yet, with the reason (an error, never a guess)
_UNSUPPORTED = {
    "qwen3_next": "Qwen3-Next (gated DeltaNet hybrid) is not modelled yet",
}


#: transformers config-class defaults for fields a family's config.json may omit
_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers Gemma3TextConfig (the 4B/27B configs omit these)
    "gemma3_text": dict(
        vocab_size=262208,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
        max_position_embeddings=131072,
        num_hidden_layers=26,
        intermediate_size=9216,
        hidden_size=2304,
        sliding_window=4096,
        sliding_window_pattern=6,
    ),
}


#: families with their own shape builder (not a :class:`_Decoder`): dispatch.py calls it
_OWN_BUILDERS = {"deepseek_v4"}

SUPPORTED_MODEL_TYPES = tuple(sorted(set(FAMILIES) | _WRAPPERS | _OWN_BUILDERS))
