"""Model architecture from a Hugging Face config.json: shapes, tensors, attention per layer."""

from .catalog import catalog_names, load_config, load_model, model_from_dict
from .config import SUPPORTED_MODEL_TYPES, shape_from_config
from .errors import ModelConfigError, UnknownModelError
from .shapes import AttnKind, LayerAttention, ModelShape, Quantization, Tensor

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "AttnKind",
    "LayerAttention",
    "ModelConfigError",
    "ModelShape",
    "Quantization",
    "Tensor",
    "UnknownModelError",
    "catalog_names",
    "load_config",
    "load_model",
    "model_from_dict",
    "shape_from_config",
]
