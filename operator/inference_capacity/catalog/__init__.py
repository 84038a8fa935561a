"""Data files shipped with the package (package-data in pyproject.toml): ``gpus.json``, the GPU
catalog read by ``inference_capacity.hardware``, and ``models/*.json``, the built-in model
configs read by ``inference_capacity.model.catalog``. No code."""

__all__: list[str] = []
