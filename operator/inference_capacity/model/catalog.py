"""The built-in model catalog: public ``config.json`` files shipped with the package.

``--model`` takes a catalog key (``meta-llama/Llama-3.1-8B-Instruct``, case-insensitive, the
organisation optional when unambiguous) or a path to a ``config.json``; nothing is downloaded.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from .config import shape_from_config
from .errors import UnknownModelError
from .limits import check_config, parse_config_json, read_config_file
from .quant import HF_QUANT_CONFIG, merge_hf_quant_config
from .shapes import ModelShape

#: a catalog entry's ``hf_quant_config.json``, shipped as ``<entry>.hf_quant_config.json``
#: next to its config (ModelOpt checkpoints keep their quantization there)
SIDECAR = "." + HF_QUANT_CONFIG


def _sidecar(file_name: str) -> Any:
    root = resources.files("inference_capacity.catalog").joinpath("models")
    side = root.joinpath(file_name[: -len(".json")] + SIDECAR)
    return json.loads(side.read_text(encoding="utf-8")) if side.is_file() else None


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Catalog key -> file name."""
    root = resources.files("inference_capacity.catalog").joinpath("models")
    out: dict[str, str] = {}
    for entry in root.iterdir():
        if entry.name.endswith(".json") and not entry.name.endswith(SIDECAR):
            out[entry.name[: -len(".json")].replace("__", "/", 1)] = entry.name
    return out


def catalog_names() -> tuple[str, ...]:
    return tuple(sorted(_index()))


@lru_cache(maxsize=256)
def _read_catalog(file_name: str) -> str:
    root = resources.files("inference_capacity.catalog").joinpath("models")
    return root.joinpath(file_name).read_text(encoding="utf-8")


def resolve_catalog_key(name: str) -> str | None:
    index = _index()
    if name in index:
        return name
    lower = {k.lower(): k for k in index}
    if name.lower() in lower:
        return lower[name.lower()]
    short = [k for k in index if k.split("/", 1)[-1].lower() == name.lower()]
    if len(short) == 1:
        return short[0]
    return None


def load_config(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """(display name, config dict) for a catalog key or a config.json path."""
    key = resolve_catalog_key(name_or_path)
    if key is not None:
        file_name = _index()[key]
        cfg = json.loads(_read_catalog(file_name))
        return key, merge_hf_quant_config(cfg, _sidecar(file_name))
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        try:
            text = read_config_file(str(path))
        except OSError as exc:
            raise UnknownModelError(
                f"cannot read model config {str(path)!r}: {exc.strerror}"
            ) from None
        data = parse_config_json(text, str(path))
        hq = path.parent / HF_QUANT_CONFIG
        if data.get("quantization_config") is None and hq.is_file():
            data = merge_hf_quant_config(
                data, parse_config_json(read_config_file(str(hq)), str(hq))
            )
        return str(data.get("_name_or_path") or path), data
    close = difflib.get_close_matches(name_or_path, list(_index()), n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UnknownModelError(
        f"unknown model {name_or_path!r}: not in the built-in catalog and not a config.json "
        f"path.{hint} Run `inference-capacity models` for the catalog, or pass a config.json."
    )


def load_model(name_or_path: str, quantization: str | None = None) -> ModelShape:
    """The shape of a catalog model or a config.json file. Catalog shapes are memoised (they
    are immutable), so repeated plans of one model share one object and its weight memo."""
    if resolve_catalog_key(name_or_path) is not None:
        return _catalog_shape(name_or_path, quantization)
    name, cfg = load_config(name_or_path)
    return shape_from_config(cfg, name=name, quantization=quantization)


@lru_cache(maxsize=128)
def _catalog_shape(name_or_path: str, quantization: str | None) -> ModelShape:
    name, cfg = load_config(name_or_path)
    return shape_from_config(cfg, name=name, quantization=quantization)


def model_from_dict(
    config: Mapping[str, Any], name: str = "inline", quantization: str | None = None
) -> ModelShape:
    """The shape of an inline config (memoised by content), within :mod:`.limits`. The memo key
    keeps the config's key order: it is meaningful where a config lists rules (GPTQ's
    ``dynamic``: the first matching rule decides)."""
    check_config(config)
    return _dict_shape(json.dumps(config, default=str), name, quantization)


@lru_cache(maxsize=64)
def _dict_shape(text: str, name: str, quantization: str | None) -> ModelShape:
    return shape_from_config(json.loads(text), name=name, quantization=quantization)
