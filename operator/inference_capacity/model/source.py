"""Where a model comes from: a local path, the built-in catalog, or the Hugging Face Hub.

One resolution order for the CLI and the operator:

1. a local path: a ``config.json`` file, or a model folder with ``config.json`` (and, when
   present, ``*.safetensors`` shards whose headers give the exact checkpoint bytes);
2. a built-in catalog key (no I/O);
3. a Hub repository id (``org/name``), through ``huggingface_hub``: it honours ``HF_ENDPOINT``
   (a mirror), ``HF_TOKEN``, ``HF_HUB_OFFLINE`` and its cache. The revision (branch, tag or
   commit) resolves to a commit; the config and every shard's safetensors header (a few KB by
   HTTP range request per shard, never the weights) are read at that commit.

The operator makes the same Hub requests as coroutines (:mod:`.hub_async`, on
huggingface_hub's async client); the steps between the requests are this module's, for both.

The headers read from the Hub are also kept on disk next to the Hub cache
(``$HF_HOME/inference-capacity/``), so ``HF_HUB_OFFLINE=1`` with a warm cache resolves the same
model, commit and bytes without the network.

Every failure is a :class:`ModelSourceError` with a ``reason`` (the operator's condition reason)
and a message that says what to do.
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import json
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import settings
from ..units import GiB
from ..vocab import DTYPE_BYTES
from .catalog import catalog_names, load_config, load_model, resolve_catalog_key
from .checkpoint import (
    CheckpointError,
    Inventory,
    TensorEntry,
    build_inventory,
    index_files,
    local_inventory,
    parse_header,
)
from .config import shape_from_config
from .errors import ModelConfigError
from .quant import HF_QUANT_CONFIG, config_checkpoint_bytes, merge_hf_quant_config
from .shapes import HeaderWeights, ModelShape

#: ``org/name``: the shape of a Hub model id (huggingface_hub validates it further)
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
#: seconds for each Hub request (connect and read), unless the caller says otherwise
DEFAULT_TIMEOUT = settings.current().hub_timeout
#: parallel header requests for a sharded checkpoint
HEADER_WORKERS = 8
OFFLINE_HINT = (
    "set HF_HUB_OFFLINE=1 to use a warm Hugging Face cache, point HF_ENDPOINT at a mirror, or "
    "pass a local model folder (config.json and *.safetensors) instead of the Hub id"
)


class ModelSourceError(ValueError):
    """A model reference that cannot be resolved; ``reason`` is a CamelCase condition reason."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ResolvedModel:
    """A model reference resolved to a config (and, where there are headers, an inventory)."""

    source: str  # local | catalog | hub
    id: str
    revision: str | None  # the resolved commit (Hub only)
    requested_revision: str | None
    config: Mapping[str, Any]
    inventory: Inventory | None = None
    disk_bytes: int | None = None
    notes: tuple[str, ...] = field(default=())
    seconds: float = 0.0
    cached: bool = False
    #: the repository's preprocessor_config.json (the image processor's settings), if any
    preprocessor: Mapping[str, Any] | None = None

    @property
    def checkpoint_bytes(self) -> int | None:
        return self.inventory.checkpoint_bytes if self.inventory is not None else None

    def json(self) -> dict[str, Any]:
        """The ``model`` object of ``plan -o json``."""
        return {
            "source": self.source,
            "id": self.id,
            "revision": self.revision,
            "checkpoint_bytes": self.checkpoint_bytes,
            "disk_bytes": self.disk_bytes,
        }

    def shape(self, quantization: str | None = None) -> ModelShape:
        """The model's shape, with the header-derived weights attached when there are headers."""
        return shape_with_header(self, quantization)


def _is_truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_offline() -> bool:
    return _is_truthy(os.environ.get("HF_HUB_OFFLINE")) or _is_truthy(
        os.environ.get("TRANSFORMERS_OFFLINE")
    )


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _hf_home() -> Path:
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "huggingface"


def _hub_cache() -> Path:
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return Path(explicit).expanduser() if explicit else _hf_home() / "hub"


def _header_cache_file(repo_id: str, commit: str) -> Path:
    return (
        _hf_home()
        / "inference-capacity"
        / f"models--{repo_id.replace('/', '--')}"
        / f"{commit}.json"
    )


# ---------------------------------------------------------------------------------------------
# resolution


def resolve_model_ref(
    ref: str,
    revision: str | None = None,
    token: str | bool | None = None,
    timeout: float | None = None,
    allow_local: bool = True,
) -> ResolvedModel:
    """Resolve ``ref``: local path → catalog → Hub. ``token``: a Hub token, ``False`` for none
    at all, ``None`` for huggingface_hub's own (``HF_TOKEN`` or the saved login).
    ``allow_local=False`` (the operator): a path is never read, only catalog keys and Hub ids."""
    started = time.monotonic()
    out = route_model_ref(ref, revision, allow_local)
    if isinstance(out, str):
        return resolve_hub(out, revision, token, timeout)
    return replace(out, seconds=time.monotonic() - started)


def route_model_ref(ref: str, revision: str | None, allow_local: bool) -> ResolvedModel | str:
    """The resolution order without the Hub's I/O: a local or catalog model resolved, or the
    Hub id to fetch (the sync and the async Hub paths both start here)."""
    path = Path(ref).expanduser()
    if allow_local and path.exists():
        out = _resolve_local(path)
    elif resolve_catalog_key(ref) is not None and revision is None:
        name, cfg = load_config(ref)
        out = ResolvedModel("catalog", name, None, None, cfg)
    elif resolve_catalog_key(ref) is not None:
        # a catalog model at a given revision: the Hub repository of that name
        return str(resolve_catalog_key(ref))
    elif HUB_ID.match(ref):
        return ref
    else:
        looks_like_path = (
            ref.endswith(".json")
            or ref.startswith((".", "~", "/"))
            or "/" in ref.rstrip("/").split("/", 1)[-1]
        )
        if looks_like_path and not allow_local:
            raise ModelSourceError(
                f"{ref!r} is a path; here a model is a catalog key or a Hub id (org/name): put "
                "its config.json in a ConfigMap (spec.model.configMapRef) instead",
                "UnknownModel",
            )
        if looks_like_path:
            raise ModelSourceError(f"model path {ref!r} does not exist", "ModelNotFound")
        raise ModelSourceError(_unknown_message(ref), "UnknownModel")
    if revision is not None and out.source != "hub":
        raise ModelSourceError(
            f"a revision ({revision!r}) only applies to a Hub model; {ref!r} is a {out.source} "
            "model",
            "InvalidRevision",
        )
    return out


def _unknown_message(ref: str) -> str:
    close = difflib.get_close_matches(ref, list(catalog_names()), n=3, cutoff=0.5)
    if not close:
        low = {n.lower(): n for n in catalog_names()}
        close = [low[c] for c in difflib.get_close_matches(ref.lower(), list(low), n=3, cutoff=0.5)]
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return (
        f"unknown model {ref!r}: not a local path, not in the built-in catalog and not a Hub id "
        f"(org/name).{hint} Run `inference-capacity models` for the catalog."
    )


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelSourceError(f"cannot read {path}: {exc.strerror}", "ModelNotFound") from None
    except json.JSONDecodeError as exc:
        raise ModelSourceError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})", "InvalidModelConfig"
        ) from None


def _resolve_local(path: Path) -> ResolvedModel:
    folder = path if path.is_dir() else path.parent
    cfg_path = path / "config.json" if path.is_dir() else path
    if not cfg_path.is_file():
        ggufs = sorted(p.name for p in folder.glob("*.gguf"))
        if ggufs:
            raise ModelSourceError(_gguf_message(str(path), ggufs), "GgufOnly")
        raise ModelSourceError(
            f"{path}: no config.json (a model folder needs the Hugging Face config.json next to "
            "its *.safetensors files)",
            "NoModelConfig",
        )
    cfg = _read_json(cfg_path)
    if not isinstance(cfg, dict):
        raise ModelSourceError(f"{cfg_path}: expected a JSON object", "InvalidModelConfig")
    inventory = None
    disk = None
    if path.is_dir():
        try:
            inventory = local_inventory(path)
        except CheckpointError as exc:
            raise ModelSourceError(str(exc), "InvalidCheckpoint") from None
        disk = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    hq = folder / HF_QUANT_CONFIG
    if hq.is_file():
        cfg = merge_hf_quant_config(cfg, _read_json(hq))
    name = str(cfg.get("_name_or_path") or path)
    preprocessor = None
    for fname in PROCESSOR_FILES:
        f = folder / fname
        if f.is_file():
            preprocessor = add_processor_file(preprocessor, fname, _read_json(f), str(f))
    return ResolvedModel("local", name, None, None, cfg, inventory, disk, preprocessor=preprocessor)


#: the image processor's settings in a model repository (vLLM's HF processor reads them; the
#: Qwen2-VL family's max_pixels/min_pixels size its dummy image)
PREPROCESSOR = "preprocessor_config.json"


#: the video processor's settings (Qwen3-VL / Qwen3.5's dummy video follows its size); held in
#: ``ResolvedModel.preprocessor`` under :data:`VIDEO_PROCESSOR_KEY`, as transformers'
#: processor_config.json nests a ``video_processor``
VIDEO_PREPROCESSOR = "video_preprocessor_config.json"
VIDEO_PROCESSOR_KEY = "video_processor"
PROCESSOR_FILES = (PREPROCESSOR, VIDEO_PREPROCESSOR)


def preprocessor_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ModelSourceError(f"{where}: expected a JSON object", "InvalidModelConfig")
    return value


def add_processor_file(
    pre: dict[str, Any] | None, fname: str, value: Any, where: str
) -> dict[str, Any]:
    """``pre`` with one processor file of :data:`PROCESSOR_FILES` read into it."""
    obj = preprocessor_object(value, where)
    if fname == VIDEO_PREPROCESSOR:
        return {**(pre or {}), VIDEO_PROCESSOR_KEY: obj}
    video = (pre or {}).get(VIDEO_PROCESSOR_KEY)
    return {**obj, VIDEO_PROCESSOR_KEY: video} if video is not None else dict(obj)


def processors_complete(pre: Mapping[str, Any] | None, siblings: Any) -> bool:
    """Whether a cached ``pre`` holds every processor file the repository lists (a header
    cache written before video_preprocessor_config.json was read lacks it: read again)."""
    if pre is None:
        return not any(f in siblings for f in PROCESSOR_FILES)
    return VIDEO_PREPROCESSOR not in siblings or VIDEO_PROCESSOR_KEY in pre


def _gguf_message(repo: str, ggufs: list[str]) -> str:
    return (
        f"{repo} holds only GGUF files ({', '.join(ggufs[:3])}{'…' if len(ggufs) > 3 else ''}) "
        "and no config.json: the ledger needs the Hugging Face checkpoint (config.json and "
        "*.safetensors) the GGUF was made from; name that repository instead"
    )


# ---------------------------------------------------------------------------------------------
# the Hub

#: resolved models by (repo id, commit); resolutions of a moving revision by (id, revision)
CACHE_MAX = settings.current().model_cache
REVISION_TTL_SECONDS = settings.current().revision_ttl_seconds
_cache: OrderedDict[tuple[str, str], ResolvedModel] = OrderedDict()
_revisions: dict[tuple[str, str | None, str], tuple[float, str]] = {}
_access: dict[tuple[str, str], set[str]] = {}
_cache_lock = threading.Lock()
_inflight: dict[tuple[str, str | None], threading.Lock] = {}


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()
        _revisions.clear()
        _access.clear()
        _shapes.clear()


def cache_info() -> dict[str, int]:
    with _cache_lock:
        return {"entries": len(_cache), "max": CACHE_MAX}


def _cache_get(repo_id: str, commit: str, token_key: str) -> ResolvedModel | None:
    """A cached resolution, only for a caller whose credentials were seen to have access (or
    when the repository answered without any token): a cache must not open a gated model to
    a resource without a token."""
    with _cache_lock:
        allowed = _access.get((repo_id, commit), set())
        if "none" not in allowed and token_key not in allowed:
            return None
        hit = _cache.get((repo_id, commit))
        if hit is not None:
            _cache.move_to_end((repo_id, commit))
        return hit


def _cache_put(value: ResolvedModel, token_key: str) -> None:
    assert value.revision is not None
    key = (value.id, value.revision)
    with _cache_lock:
        _cache[key] = value
        _cache.move_to_end(key)
        _access.setdefault(key, set()).add(token_key)
        while len(_cache) > CACHE_MAX:
            old, _ = _cache.popitem(last=False)
            _access.pop(old, None)


def token_key(token: str | bool | None) -> str:
    if token is None or token is True:
        return "ambient"
    if token is False:
        return "none"
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def _prune_locked() -> None:
    """Keep the per-revision bookkeeping bounded like the cache (caller holds _cache_lock)."""
    bound = 4 * CACHE_MAX
    while len(_revisions) > bound:
        _revisions.pop(next(iter(_revisions)))
    if len(_inflight) > bound:
        for key in [k for k, lk in _inflight.items() if not lk.locked()][: len(_inflight) - bound]:
            _inflight.pop(key, None)


def resolve_hub(
    repo_id: str,
    revision: str | None = None,
    token: str | bool | None = None,
    timeout: float | None = None,
) -> ResolvedModel:
    """Resolve a Hub id at ``revision`` (default ``main``) to a commit, a config and headers.

    Cached in memory by (id, commit); a branch or tag is re-resolved to its commit after
    ``REVISION_TTL_SECONDS``. One resolution per (id, revision) runs at a time; concurrent
    callers wait for it and share its result."""
    started = time.monotonic()
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    tk = token_key(token)
    with _cache_lock:
        lock = _inflight.setdefault((repo_id, revision), threading.Lock())
    hit = cached_resolution(repo_id, revision, tk, started)
    if hit is not None:
        return hit
    with lock:
        hit = cached_resolution(repo_id, revision, tk, started)
        if hit is not None:
            return hit
        out = _fetch_hub(repo_id, revision, token, timeout)
        remember(out, revision, tk)
    return replace(out, seconds=time.monotonic() - started)


def cached_resolution(
    repo_id: str, revision: str | None, token_key: str, started: float
) -> ResolvedModel | None:
    """The cached resolution of (id, revision) for this caller's credentials: a commit is
    cached for good, a branch or tag for ``REVISION_TTL_SECONDS``."""
    with _cache_lock:
        seen = _revisions.get((repo_id, revision, token_key))
    if revision is not None and COMMIT.match(revision):
        seen = (time.monotonic(), revision)
    if seen is None or time.monotonic() - seen[0] >= REVISION_TTL_SECONDS:
        return None
    hit = _cache_get(repo_id, seen[1], token_key)
    if hit is None:
        return None
    return replace(hit, cached=True, seconds=time.monotonic() - started)


def remember(out: ResolvedModel, revision: str | None, token_key: str) -> None:
    """Cache a fresh resolution by (id, commit), and (id, revision) -> commit for this caller."""
    _cache_put(out, token_key)
    with _cache_lock:
        _revisions[(out.id, revision, token_key)] = (time.monotonic(), out.revision or "")
        _prune_locked()


def _describe_revision(revision: str | None) -> str:
    return f"revision {revision!r}" if revision else "the main branch"


def hub_error(exc: BaseException, repo_id: str, revision: str | None, token: Any) -> Exception:
    """A huggingface_hub / transport exception as a ModelSourceError users can act on."""
    from huggingface_hub import errors as hf_errors

    where = f"{repo_id} at {_describe_revision(revision)} on {_endpoint()}"
    if isinstance(exc, hf_errors.GatedRepoError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 401:
            return ModelSourceError(
                f"{repo_id} is a gated model and the request had no (valid) token: accept its "
                "license on the Hub, then give a token (HF_TOKEN, or spec.model.tokenSecretRef "
                "in the cluster)",
                "Gated",
            )
        return ModelSourceError(
            f"{repo_id} is a gated model and this token has not been granted access: accept the "
            "model's license on the Hub with the account the token belongs to",
            "Gated",
        )
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return ModelSourceError(
            f"{repo_id} has no {_describe_revision(revision)} (a branch, tag or 40-hex commit)",
            "RevisionNotFound",
        )
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        close = difflib.get_close_matches(repo_id, list(catalog_names()), n=3, cutoff=0.6)
        hint = f" Close names in the built-in catalog: {', '.join(close)}." if close else ""
        if status == 401 and token in (None, False):
            return ModelSourceError(
                f"{where}: not found, or private and the request had no token (give one with "
                f"HF_TOKEN or spec.model.tokenSecretRef).{hint}",
                "NotFound",
            )
        if status == 401:
            return ModelSourceError(
                f"{where}: unauthorized (the token is invalid or has no access to this "
                f"repository).{hint}",
                "Unauthorized",
            )
        return ModelSourceError(f"{where}: repository not found.{hint}", "NotFound")
    if isinstance(exc, hf_errors.OfflineModeIsEnabled):
        return ModelSourceError(
            f"{where}: HF_HUB_OFFLINE is set and the model is not in the local cache; "
            "download it once with network access (or pass a local model folder)",
            "Offline",
        )
    if isinstance(exc, hf_errors.LocalEntryNotFoundError) and hub_offline():
        return ModelSourceError(
            f"{where}: HF_HUB_OFFLINE is set and this model (at this revision) is not in the "
            f"local Hugging Face cache ({_hub_cache()}); resolve it once with network access, "
            "or pass a local model folder (config.json and *.safetensors)",
            "Offline",
        )
    if isinstance(exc, hf_errors.LocalEntryNotFoundError):
        return ModelSourceError(
            f"{where}: not in the local Hugging Face cache ({_hub_cache()}) and the Hub is not "
            f"reachable or HF_HUB_OFFLINE is set; {OFFLINE_HINT}",
            "Offline",
        )
    if isinstance(exc, hf_errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 401:
            return ModelSourceError(f"{where}: unauthorized (HTTP 401)", "Unauthorized")
        if status == 403:
            return ModelSourceError(f"{where}: forbidden (HTTP 403)", "Unauthorized")
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return ModelSourceError(f"{where}: the Hub answered {first}", "HubError")
    if isinstance(exc, hf_errors.SafetensorsParsingError | CheckpointError):
        return ModelSourceError(f"{where}: {exc}", "InvalidCheckpoint")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EROFS, errno.EACCES):
        return ModelSourceError(
            f"{where}: cannot write the Hugging Face cache at {_hub_cache()} ({exc.strerror}); "
            "give HF_HOME a writable volume with room for configs and headers",
            "CacheError",
        )
    if isinstance(exc, OSError | TimeoutError) or _is_transport_error(exc):
        return ModelSourceError(
            f"{where}: cannot reach the Hub ({type(exc).__name__}: {exc}); {OFFLINE_HINT}",
            "Network",
        )
    return ModelSourceError(f"{where}: {type(exc).__name__}: {exc}", "HubError")


def _is_transport_error(exc: BaseException) -> bool:
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"TransportError", "ConnectError", "TimeoutException", "NetworkError"})


def check_repo_id(repo_id: str) -> None:
    """A Hub model id as huggingface_hub validates it (both Hub paths, before any request)."""
    from huggingface_hub.utils._validators import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except ValueError as exc:
        raise ModelSourceError(
            f"{repo_id!r} is not a Hub model id: {exc}", "UnknownModel"
        ) from None


def _fetch_hub(
    repo_id: str, revision: str | None, token: str | bool | None, timeout: float
) -> ResolvedModel:
    try:
        from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ModelSourceError(
            f"huggingface_hub is not installed ({exc}); install it or pass a local model folder",
            "HubError",
        ) from None
    check_repo_id(repo_id)
    if hub_offline():
        return resolve_offline(repo_id, revision)
    api = HfApi(endpoint=_endpoint(), token=token)
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True, timeout=timeout)
    except Exception as exc:
        raise hub_error(exc, repo_id, revision, token) from None
    commit = info.sha
    if not commit:
        raise ModelSourceError(f"{repo_id}: the Hub did not say which commit it serves", "HubError")
    siblings = {s.rfilename: s.size for s in (info.siblings or [])}
    check_siblings(repo_id, commit, siblings)
    if info.gated or info.private:
        # the Hub shows a gated repository's info to anyone; its files only to those granted
        # access. Check this caller's access before anything cached (by another caller) is used
        try:
            get_hf_file_metadata(
                hf_hub_url(repo_id, "config.json", revision=commit, endpoint=_endpoint()),
                token=token,
                timeout=timeout,
            )
        except Exception as exc:
            raise hub_error(exc, repo_id, revision, token) from None

    def download(name: str, rev: str) -> str:
        """One file of the repository, through huggingface_hub's disk cache."""
        path: str = hf_hub_download(
            repo_id,
            name,
            revision=rev,
            token=token,
            endpoint=_endpoint(),
            cache_dir=str(_hub_cache()),
            etag_timeout=timeout,
        )
        return path

    cached = read_header_cache(repo_id, commit)
    preprocessor: dict[str, Any] | None = None
    rewrite = False  # a header cache written without the preprocessor this commit has
    if any(f in siblings for f in PROCESSOR_FILES):
        if cached is not None and processors_complete(cached[2], siblings):
            preprocessor = cached[2]
        else:
            for fname in PROCESSOR_FILES:
                if fname not in siblings:
                    continue
                try:
                    pre_path = download(fname, commit)
                except Exception as exc:
                    raise hub_error(exc, repo_id, revision, token) from None
                preprocessor = add_processor_file(
                    preprocessor, fname, _read_json(Path(pre_path)), f"{repo_id}/{fname}"
                )
            rewrite = cached is not None
    try:
        # by the revision asked for, so the Hub cache records branch/tag -> commit (offline
        # mode resolves the same name later); if it moved since model_info, by the commit
        cfg_path = download("config.json", revision or "main")
        if Path(cfg_path).parent.name != commit:
            cfg_path = download("config.json", commit)
    except Exception as exc:
        raise hub_error(exc, repo_id, revision, token) from None
    cfg = config_object(repo_id, _read_json(Path(cfg_path)))
    if HF_QUANT_CONFIG in siblings and cfg.get("quantization_config") is None:
        try:
            hq_path = download(HF_QUANT_CONFIG, commit)
        except Exception as exc:
            raise hub_error(exc, repo_id, revision, token) from None
        cfg = merge_hf_quant_config(cfg, _read_json(Path(hq_path)))
    inventory: Inventory | None = cached[0] if cached is not None else None
    if inventory is None:
        try:
            inventory = _hub_inventory(api, repo_id, commit, siblings, timeout, hf_hub_download)
        except ModelSourceError:
            raise
        except Exception as exc:
            raise hub_error(exc, repo_id, revision, token) from None
        if inventory is not None:
            write_header_cache(repo_id, commit, inventory, disk_bytes(siblings), preprocessor)
    elif rewrite:
        write_header_cache(repo_id, commit, inventory, disk_bytes(siblings), preprocessor)
    return hub_result(repo_id, commit, revision, cfg, siblings, inventory, preprocessor)


# the pure steps of a Hub resolution, shared by the synchronous path above (the CLI) and the
# operator's async one (:mod:`.hub_async`)


def check_siblings(repo_id: str, commit: str, siblings: Mapping[str, int | None]) -> None:
    """A repository vLLM can load: a config.json (GGUF-only repositories are named as such)."""
    if "config.json" not in siblings:
        ggufs = sorted(n for n in siblings if n.endswith(".gguf"))
        if ggufs:
            raise ModelSourceError(_gguf_message(repo_id, ggufs), "GgufOnly")
        raise ModelSourceError(
            f"{repo_id} at {commit[:12]} has no config.json (is it a model repository for "
            "transformers/vLLM? adapters need their base model)",
            "NoModelConfig",
        )


def config_object(repo_id: str, cfg: Any) -> dict[str, Any]:
    if not isinstance(cfg, dict):
        raise ModelSourceError(f"{repo_id}: config.json is not a JSON object", "InvalidModelConfig")
    return cfg


def disk_bytes(siblings: Mapping[str, int | None]) -> int:
    return sum(int(s or 0) for s in siblings.values())


INDEX_FILE = "model.safetensors.index.json"


def shard_names(
    repo_id: str, commit: str, siblings: Mapping[str, int | None], index: Any | None
) -> list[str]:
    """The safetensors shards to read: the index's (``index``: the parsed
    model.safetensors.index.json, when the repository has one), else every top-level
    ``*.safetensors`` file."""
    if index is None:
        return sorted(n for n in siblings if n.endswith(".safetensors") and "/" not in n)
    names = index_files(index, INDEX_FILE)
    missing = [n for n in names if n not in siblings]
    if missing:
        raise ModelSourceError(
            f"{repo_id} at {commit[:12]}: the index lists shards that are not in the "
            f"repository, e.g. {missing[0]}",
            "InvalidCheckpoint",
        )
    return names


def shards_inventory(
    per_file: list[tuple[str, list[TensorEntry]]], siblings: Mapping[str, int | None]
) -> Inventory:
    return build_inventory(per_file, {n: int(siblings.get(n) or 0) for n, _ in per_file})


def hub_result(
    repo_id: str,
    commit: str,
    revision: str | None,
    cfg: Mapping[str, Any],
    siblings: Mapping[str, int | None],
    inventory: Inventory | None,
    preprocessor: Mapping[str, Any] | None = None,
) -> ResolvedModel:
    notes: tuple[str, ...] = ()
    if inventory is None:
        notes = (f"{repo_id} has no *.safetensors files: weights from config.json only",)
    return ResolvedModel(
        "hub",
        repo_id,
        commit,
        revision,
        cfg,
        inventory,
        disk_bytes(siblings),
        notes,
        preprocessor=preprocessor,
    )


def _hub_inventory(
    api: Any,
    repo_id: str,
    commit: str,
    siblings: Mapping[str, int | None],
    timeout: float,
    download: Any,
) -> Inventory | None:
    index = None
    if INDEX_FILE in siblings:
        index_path = download(
            repo_id,
            INDEX_FILE,
            revision=commit,
            token=api.token,
            endpoint=_endpoint(),
            cache_dir=str(_hub_cache()),
            etag_timeout=timeout,
        )
        index = _read_json(Path(index_path))
    names = shard_names(repo_id, commit, siblings, index)
    if not names:
        return None

    def one(name: str) -> tuple[str, list[TensorEntry]]:
        meta = api.parse_safetensors_file_metadata(repo_id, name, revision=commit, timeout=timeout)
        header = {
            k: {"dtype": v.dtype, "shape": list(v.shape), "data_offsets": list(v.data_offsets)}
            for k, v in meta.tensors.items()
        }
        return name, parse_header(header, name)

    with ThreadPoolExecutor(max_workers=min(HEADER_WORKERS, len(names))) as pool:
        per_file = list(pool.map(one, names))
    return shards_inventory(per_file, siblings)


def write_header_cache(
    repo_id: str,
    commit: str,
    inv: Inventory,
    disk: int | None,
    preprocessor: Mapping[str, Any] | None = None,
) -> None:
    path = _header_cache_file(repo_id, commit)
    record = {
        "repo_id": repo_id,
        "commit": commit,
        "disk_bytes": disk,
        "preprocessor": preprocessor,
        "files": {
            f: {
                "size": inv.file_sizes.get(f, 0),
                "tensors": {
                    t.name: {"dtype": t.dtype, "shape": list(t.shape), "nbytes": t.nbytes}
                    for t in inv.tensors
                    if t.file == f
                },
            }
            for f in inv.files
        },
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs the next resolution a few range requests


def read_header_cache(
    repo_id: str, commit: str
) -> tuple[Inventory, int | None, dict[str, Any] | None] | None:
    path = _header_cache_file(repo_id, commit)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        per_file = []
        sizes = {}
        for f, entry in record["files"].items():
            header = {
                name: {
                    "dtype": t["dtype"],
                    "shape": t["shape"],
                    "data_offsets": [0, int(t["nbytes"])],
                }
                for name, t in entry["tensors"].items()
            }
            per_file.append((f, parse_header(header, f)))
            sizes[f] = int(entry["size"])
        disk = record.get("disk_bytes")
        pre = record.get("preprocessor")
        return (
            build_inventory(per_file, sizes),
            int(disk) if disk is not None else None,
            dict(pre) if isinstance(pre, dict) else None,
        )
    except (OSError, KeyError, TypeError, ValueError):
        return None  # a damaged cache entry is read again from the Hub


def resolve_offline(repo_id: str, revision: str | None) -> ResolvedModel:
    """HF_HUB_OFFLINE=1: the config from huggingface_hub's cache (which also maps a branch or
    tag to its commit), the headers from our header cache or the cached shards themselves.
    Local files only (both Hub paths)."""
    from huggingface_hub import hf_hub_download as download

    try:
        cfg_path = Path(
            download(
                repo_id,
                "config.json",
                revision=revision,
                cache_dir=str(_hub_cache()),
                local_files_only=True,
            )
        )
    except Exception as exc:
        raise hub_error(exc, repo_id, revision, None) from None
    commit = cfg_path.parent.name
    if not COMMIT.match(commit):
        raise ModelSourceError(
            f"{repo_id}: cannot tell the cached commit from {cfg_path}", "Offline"
        )
    cfg = _read_json(cfg_path)
    hq = cfg_path.parent / HF_QUANT_CONFIG
    if isinstance(cfg, dict) and hq.is_file():
        cfg = merge_hf_quant_config(cfg, _read_json(hq))
    cached = read_header_cache(repo_id, commit)
    inventory, disk, preprocessor = cached if cached is not None else (None, None, None)
    if preprocessor is None or VIDEO_PROCESSOR_KEY not in preprocessor:
        found: dict[str, Any] | None = None
        for fname in PROCESSOR_FILES:
            try:
                pre_path = download(
                    repo_id,
                    fname,
                    revision=commit,
                    cache_dir=str(_hub_cache()),
                    local_files_only=True,
                )
            except Exception:
                pre_path = None  # not cached (or the repository has none)
            if pre_path is not None:
                found = add_processor_file(
                    found, fname, _read_json(Path(pre_path)), f"{repo_id}/{fname}"
                )
        preprocessor = found if found is not None else preprocessor
    notes: list[str] = ["HF_HUB_OFFLINE: resolved from the local cache"]
    if inventory is None:
        try:
            inventory = local_inventory(cfg_path.parent)
        except CheckpointError:
            inventory = None
        if inventory is None:
            notes.append("no cached safetensors headers: weights from config.json only")
    return ResolvedModel(
        "hub",
        repo_id,
        commit,
        revision,
        cfg,
        inventory,
        disk,
        tuple(notes),
        preprocessor=preprocessor,
    )


# ---------------------------------------------------------------------------------------------
# shape + header


def shape_with_header(model: ResolvedModel, quantization: str | None = None) -> ModelShape:
    """The config's shape; with an inventory, the header-derived weights attached (they win
    over the config-derived ones in the ledger; :class:`HeaderWeights` holds both)."""
    if model.source == "catalog":
        return load_model(model.id, quantization=quantization)
    key = (model.source, model.id, model.revision, quantization)
    if model.source == "hub" and model.revision is not None:
        with _cache_lock:
            hit = _shapes.get(key)
        if hit is not None and hit[0] is model.inventory:
            return hit[1]
    out = _shape_with_header(model, quantization, DTYPE_BYTES, config_checkpoint_bytes)
    if model.source == "hub" and model.revision is not None:
        with _cache_lock:
            _shapes[key] = (model.inventory, out)
            while len(_shapes) > CACHE_MAX:
                _shapes.pop(next(iter(_shapes)))
    return out


_shapes: dict[tuple[Any, ...], tuple[Inventory | None, ModelShape]] = {}


def _shape_with_header(
    model: ResolvedModel,
    quantization: str | None,
    dtype_table: Mapping[str, int],
    config_bytes: Any,
) -> ModelShape:
    try:
        shape = shape_from_config(model.config, name=model.id, quantization=quantization)
        base = (
            shape
            if quantization is None
            else shape_from_config(model.config, name=model.id, quantization=None)
        )
    except ModelConfigError:
        raise
    inv = model.inventory
    if inv is None:
        return shape
    loaded = inv.loaded_bytes(shape.num_layers, shape.tie_word_embeddings)
    header = HeaderWeights(
        checkpoint_bytes=inv.checkpoint_bytes,
        loaded_bytes=loaded,
        config_bytes=int(config_bytes(base)),
        dtype_bytes=dtype_table.get(base.dtype, 2),
        quantization=base.quantization,
        skipped_bytes=inv.checkpoint_bytes - loaded,
    )
    return replace(shape, header=header)


def checkpoint_notes(model: ResolvedModel, shape: ModelShape) -> list[str]:
    """What the headers say that the config does not."""
    inv = model.inventory
    if inv is None:
        return []
    out = []
    if shape.quantization is None:
        quantized = sorted(
            {
                t.dtype
                for t in inv.tensors
                if t.dtype.startswith(("F8", "F4")) or t.name.endswith(("qweight", "weight_packed"))
            }
        )
        if quantized:
            out.append(
                f"the headers hold quantized tensors ({', '.join(quantized)}) but config.json has "
                "no quantization_config (ModelOpt keeps it in hf_quant_config.json): the weights "
                "are the headers' bytes; give the quantization (--quantization / "
                "spec.model.quantization) for its scales' layout"
            )
    skipped = inv.skipped(shape.num_layers, shape.tie_word_embeddings)
    if skipped:
        out.append(
            f"{len(skipped)} tensor(s) in the checkpoint that vLLM does not load "
            f"({sum(t.nbytes for t in skipped)} B), e.g. {skipped[0].name}"
        )
    return out


def checkpoint_json(model: ResolvedModel, shape: ModelShape) -> dict[str, Any] | None:
    """The checkpoint's three sizes and the header-vs-config comparison (None without headers).

    ``disk_bytes``: the files; ``largest_file_bytes``: what one shard load holds in host memory at
    most (vLLM loads shard by shard); the GPU steady-state weights are the ledger's
    ``weights.*`` lines. ``header_wins``: the ledger uses the headers' bytes."""
    inv = model.inventory
    h = shape.header
    if inv is None or h is None:
        return None
    return {
        "files": len(inv.files),
        "tensors": len(inv.tensors),
        "header_bytes": h.checkpoint_bytes,
        "loaded_bytes": h.loaded_bytes,
        "skipped_bytes": h.skipped_bytes,
        "config_derived_bytes": h.config_bytes,
        "difference_bytes": h.delta,
        "header_wins": shape.quantization == h.quantization,
        "disk_bytes": model.disk_bytes,
        "largest_file_bytes": max(inv.file_sizes.values(), default=0) or None,
        "by_dtype": inv.by_dtype(),
        "by_role": inv.by_role(),
        "notes": checkpoint_notes(model, shape),
    }


def describe(model: ResolvedModel, shape: ModelShape) -> str:
    """One paragraph for the table output."""
    where = {"hub": "Hugging Face Hub", "catalog": "built-in catalog", "local": "local path"}
    text = f"Model: {model.id} ({where.get(model.source, model.source)}"
    if model.revision:
        text += f", commit {model.revision}"
        if model.requested_revision and model.requested_revision != model.revision:
            text += f" from {model.requested_revision!r}"
    text += ")"
    h = shape.header
    if h is not None:
        text += (
            f"\n  checkpoint (safetensors headers): {h.checkpoint_bytes} B"
            f" = {h.checkpoint_bytes / GiB:.4f} GiB; loaded by vLLM {h.loaded_bytes} B; "
            f"config-derived {h.config_bytes} B; difference {h.delta:+d} B"
        )
        if shape.quantization != h.quantization:
            text += " (not applied: the runtime quantization differs from the checkpoint's)"
    if model.disk_bytes is not None:
        text += f"\n  on disk: {model.disk_bytes} B = {model.disk_bytes / GiB:.4f} GiB"
    for note in [*model.notes, *checkpoint_notes(model, shape)]:
        text += f"\n  note: {note}"
    return text
