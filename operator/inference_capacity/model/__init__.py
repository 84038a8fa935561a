"""Model architecture from a Hugging Face config.json: shapes, tensors, attention per layer."""

from .catalog import catalog_names, load_config, load_model, model_from_dict
from .config import SUPPORTED_MODEL_TYPES, resolve_dtype, shape_from_config
from .errors import ModelConfigError, UnknownModelError
from .quant import config_checkpoint_bytes, parse_quantization
from .shapes import (
    AttnKind,
    LayerAttention,
    ModelShape,
    Quantization,
    Tensor,
    VisionTower,
    cdiv,
)

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "AttnKind",
    "LayerAttention",
    "ModelConfigError",
    "ModelShape",
    "Quantization",
    "Tensor",
    "UnknownModelError",
    "VisionTower",
    "catalog_names",
    "cdiv",
    "config_checkpoint_bytes",
    "load_config",
    "load_model",
    "model_from_dict",
    "parse_quantization",
    "resolve_dtype",
    "shape_from_config",
]
