"""From a Hugging Face ``config.json`` to :class:`ModelShape`.

Each supported ``model_type`` maps onto one generic decoder description (:class:`_Decoder`) that
the builder turns into tensors and per-layer attention specs. Tensor inventories follow vLLM's
model implementations (``vllm/model_executor/models/<family>.py``), which is what gets loaded on
the GPU. Defaults are those of the transformers config class, used only where the field is
optional there; a field the ledger needs and no default exists for is a
:class:`ModelConfigError` naming it.

Modules, bottom to top (each imports only those above it in this list):

- ``access``: typed access to config values (:class:`_Cfg`), the derived max_model_len, the dtype
- ``decoder``: the generic decoder, its shared layer construction and the builder
- ``families``: one module per architecture family, and the registry (``FAMILIES``)
- ``vision``: vision towers
- ``dispatch``: :func:`shape_from_config`
"""

from .access import resolve_dtype
from .dispatch import shape_from_config
from .families import FAMILIES, SUPPORTED_MODEL_TYPES

__all__ = ["FAMILIES", "SUPPORTED_MODEL_TYPES", "resolve_dtype", "shape_from_config"]
