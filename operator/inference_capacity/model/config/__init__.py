"""From a Hugging Face ``config.json`` to :class:`ModelShape` (see :mod:`.decoder`)."""

from .decoder import SUPPORTED_MODEL_TYPES, resolve_dtype, shape_from_config

__all__ = ["SUPPORTED_MODEL_TYPES", "resolve_dtype", "shape_from_config"]
