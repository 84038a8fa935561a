"""The operator's Hub fetch, as coroutines: the requests :func:`.source.resolve_hub` makes
through huggingface_hub's synchronous API, made on one ``httpx2.AsyncClient``
(``huggingface_hub.get_async_session()``), so a resolution waiting on a slow Hub holds no
thread. The CLI keeps the synchronous path (huggingface_hub's disk cache, ``HF_HUB_OFFLINE``).

Per resolution, at the commit ``model_info`` names (huggingface_hub 2.4, hf_api.py
``HfApi.model_info`` / ``parse_safetensors_file_metadata``, file_download.py ``hf_hub_url``):

1. ``GET {endpoint}/api/models/{id}[/revision/{rev}]?blobs=True``: the commit and the files;
2. ``GET`` of ``config.json`` at the commit — for a gated or private repository this is also
   the check that this caller's token has access, made before anything cached is served;
3. ``GET`` of ``model.safetensors.index.json`` when the repository has one;
4. per shard (at most ``shard_parallel`` at once): a range ``GET`` of the first 100 000 bytes
   (``bytes=0-100000``, huggingface_hub's strategy), then ``bytes=8-{n+7}`` when the header
   (length ``n``, the first 8 bytes little-endian) is longer; a resolve URL's redirect to the
   storage host is followed, as huggingface_hub's client does (``follow_redirects=True``).

Headers come from ``huggingface_hub.utils.build_hf_headers`` (token, user agent), errors from
``hf_raise_for_status`` (the same error classes, so :func:`.source.hub_error` maps both paths to
one set of reasons). Every request is bounded: ``timeout`` seconds from start to the last byte,
a cap on the bytes read, and one of ``connections`` slots of the client (all resolutions
together). The results go to the same in-memory cache (by id, commit and credentials) and
on-disk header cache as the sync path's; the pure steps between the requests are
:mod:`.source`'s (siblings, index, inventory, result).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from .checkpoint import CheckpointError, TensorEntry, header_length, parse_header
from .quant import HF_QUANT_CONFIG, merge_hf_quant_config
from .source import (
    DEFAULT_TIMEOUT,
    INDEX_FILE,
    PROCESSOR_FILES,
    ModelSourceError,
    ResolvedModel,
    _endpoint,
    add_processor_file,
    cached_resolution,
    check_repo_id,
    check_siblings,
    config_object,
    disk_bytes,
    hub_error,
    hub_offline,
    hub_result,
    processors_complete,
    read_header_cache,
    remember,
    resolve_offline,
    route_model_ref,
    shard_names,
    shards_inventory,
    token_key,
    write_header_cache,
)

#: the first range request of a safetensors header: bytes 0..100000 (huggingface_hub 2.4,
#: hf_api.py ``parse_safetensors_file_metadata``: "97% of safetensors files have a metadata
#: size < 100kb")
FIRST_RANGE_BYTES = 100_001
#: the most bytes read of a JSON answer (model info, config.json, the index)
MAX_JSON_BYTES = 16 << 20

#: an in-flight resolution, shared: (repo id, revision, token key)
_Key = tuple[str, str | None, str]


class TooLarge(Exception):
    """An answer larger than the cap on what is read of it."""


class HubClient:
    """One ``httpx2.AsyncClient`` from huggingface_hub and the bounds on it: ``connections``
    requests open at once over all resolutions, ``shard_parallel`` header reads at once per
    resolution. Make it, use it and close it on one event loop."""

    def __init__(self, connections: int, shard_parallel: int) -> None:
        from huggingface_hub import get_async_session

        self.session = get_async_session()
        self.slots = asyncio.Semaphore(max(1, connections))
        self.shard_parallel = max(1, shard_parallel)
        #: requests open now / at most so far (tests and the metrics read these)
        self.open = 0
        self.peak_open = 0
        self._inflight: dict[_Key, asyncio.Future[ResolvedModel]] = {}

    async def close(self) -> None:
        await self.session.aclose()

    async def get(
        self,
        url: str,
        headers: Mapping[str, str],
        timeout: float,
        limit: int,
        byte_range: str | None = None,
    ) -> Any:
        """A GET answered 2xx, its body read to at most ``limit`` bytes (a range answer: cut
        there; any other: :class:`TooLarge` past it), within ``timeout`` seconds in all; an
        error answer raises huggingface_hub's error for it (``hf_raise_for_status``)."""
        import httpx2
        from huggingface_hub import hf_raise_for_status

        send = dict(headers)
        if byte_range is not None:
            send["range"] = byte_range
        async with self.slots:
            self.open += 1
            self.peak_open = max(self.peak_open, self.open)
            try:
                async with asyncio.timeout(timeout):
                    async with self.session.stream(
                        "GET", url, headers=send, timeout=timeout, follow_redirects=True
                    ) as r:
                        body = bytearray()
                        async for chunk in r.aiter_bytes():
                            body += chunk
                            if len(body) > limit:
                                if byte_range is None and r.status_code < 400:
                                    raise TooLarge(f"{url} answered with more than {limit} B")
                                del body[limit:]
                                break
            finally:
                self.open -= 1
        # the body is decoded already: a response of it without the transfer's encoding
        kept = [(k, v) for k, v in r.headers.items() if k.lower() != "content-encoding"]
        done = httpx2.Response(r.status_code, headers=kept, content=bytes(body), request=r.request)
        hf_raise_for_status(done)
        return done

    async def get_json(self, url: str, headers: Mapping[str, str], timeout: float) -> Any:
        r = await self.get(url, headers, timeout, MAX_JSON_BYTES)
        try:
            return json.loads(r.content)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelSourceError(
                f"{url}: the Hub's answer is not JSON ({exc})", "HubError"
            ) from None


async def resolve_model_ref_async(
    ref: str,
    revision: str | None,
    token: str | bool | None,
    timeout: float | None,
    client: HubClient,
) -> ResolvedModel:
    """:func:`.source.resolve_model_ref` for the operator (``allow_local=False``: a path is
    never read), the Hub part on ``client``."""
    out = route_model_ref(ref, revision, allow_local=False)
    if isinstance(out, str):
        return await resolve_hub_async(out, revision, token, timeout, client)
    return out


async def resolve_hub_async(
    repo_id: str,
    revision: str | None,
    token: str | bool | None,
    timeout: float | None,
    client: HubClient,
) -> ResolvedModel:
    """:func:`.source.resolve_hub` on ``client``: the same cache; one fetch per (id, revision,
    credentials) in flight, the others awaiting it (cancelling one waiter does not cancel it)."""
    started = time.monotonic()
    tk = token_key(token)
    hit = cached_resolution(repo_id, revision, tk, started)
    if hit is not None:
        return hit
    key: _Key = (repo_id, revision, tk)
    task = client._inflight.get(key)
    if task is None:
        task = asyncio.ensure_future(
            _fetch_and_remember(
                repo_id, revision, token, DEFAULT_TIMEOUT if timeout is None else timeout, client
            )
        )
        client._inflight[key] = task
        task.add_done_callback(lambda _t: client._inflight.pop(key, None))
    out = await asyncio.shield(task)
    return replace(out, seconds=time.monotonic() - started)


async def _fetch_and_remember(
    repo_id: str, revision: str | None, token: str | bool | None, timeout: float, client: HubClient
) -> ResolvedModel:
    out = await fetch_hub_async(repo_id, revision, token, timeout, client)
    remember(out, revision, token_key(token))
    return out


async def fetch_hub_async(
    repo_id: str, revision: str | None, token: str | bool | None, timeout: float, client: HubClient
) -> ResolvedModel:
    """One resolution from the Hub, uncached (see the module's docstring for the requests)."""
    check_repo_id(repo_id)
    if hub_offline():
        # local files only, in the loop's executor (the disk, never the network)
        return await asyncio.to_thread(resolve_offline, repo_id, revision)
    try:
        return await _fetch(repo_id, revision, token, timeout, client)
    except ModelSourceError:
        raise
    except TooLarge as exc:
        raise ModelSourceError(f"{repo_id}: {exc}", "HubError") from None
    except Exception as exc:
        raise hub_error(exc, repo_id, revision, token) from None


async def _fetch(
    repo_id: str, revision: str | None, token: str | bool | None, timeout: float, client: HubClient
) -> ResolvedModel:
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils._headers import build_hf_headers

    endpoint = _endpoint()
    headers = build_hf_headers(token=token)
    # huggingface_hub 2.4 hf_api.py HfApi.model_info: this path, files_metadata -> blobs=True
    info_url = f"{endpoint}/api/models/{repo_id}" + (
        "" if revision is None else f"/revision/{quote(revision, safe='')}"
    )
    info = await client.get_json(f"{info_url}?blobs=True", headers, timeout)
    commit = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(commit, str) or not commit:
        raise ModelSourceError(f"{repo_id}: the Hub did not say which commit it serves", "HubError")
    siblings = _siblings(repo_id, info)
    check_siblings(repo_id, commit, siblings)

    def url(name: str) -> str:
        return str(hf_hub_url(repo_id, name, revision=commit, endpoint=endpoint))

    # by the commit: also this caller's access check for a gated or private repository
    cfg = config_object(repo_id, await client.get_json(url("config.json"), headers, timeout))
    if HF_QUANT_CONFIG in siblings and cfg.get("quantization_config") is None:
        hq = await client.get_json(url(HF_QUANT_CONFIG), headers, timeout)
        cfg = merge_hf_quant_config(cfg, hq)
    cached = await asyncio.to_thread(read_header_cache, repo_id, commit)
    inventory = cached[0] if cached is not None else None
    preprocessor = cached[2] if cached is not None else None
    rewrite = False  # a header cache written without the preprocessor this commit has
    if not processors_complete(preprocessor, siblings):
        preprocessor = None
        for fname in PROCESSOR_FILES:
            if fname in siblings:
                preprocessor = add_processor_file(
                    preprocessor,
                    fname,
                    await client.get_json(url(fname), headers, timeout),
                    f"{repo_id}/{fname}",
                )
        rewrite = cached is not None
    if inventory is None:
        index = None
        if INDEX_FILE in siblings:
            index = await client.get_json(url(INDEX_FILE), headers, timeout)
        names = shard_names(repo_id, commit, siblings, index)
        if names:
            bound = asyncio.Semaphore(client.shard_parallel)

            async def one(name: str) -> tuple[str, list[TensorEntry]]:
                async with bound:
                    return name, await _header(client, url(name), headers, timeout, name)

            per_file = list(await asyncio.gather(*(one(n) for n in names)))
            inventory = shards_inventory(per_file, siblings)
            await asyncio.to_thread(
                write_header_cache, repo_id, commit, inventory, disk_bytes(siblings), preprocessor
            )
    elif rewrite:
        await asyncio.to_thread(
            write_header_cache, repo_id, commit, inventory, disk_bytes(siblings), preprocessor
        )
    return hub_result(repo_id, commit, revision, cfg, siblings, inventory, preprocessor)


def _siblings(repo_id: str, info: Mapping[str, Any]) -> dict[str, int | None]:
    """The files of a model info answer, as huggingface_hub's ``ModelInfo.siblings`` reads
    them (``rfilename``, ``size``)."""
    out: dict[str, int | None] = {}
    for s in info.get("siblings") or []:
        name = s.get("rfilename") if isinstance(s, dict) else None
        size = s.get("size") if isinstance(s, dict) else None
        if not isinstance(name, str) or not (size is None or isinstance(size, int)):
            raise ModelSourceError(f"{repo_id}: the Hub's file list is malformed", "HubError")
        out[name] = size
    return out


async def _header(
    client: HubClient, url: str, headers: Mapping[str, str], timeout: float, name: str
) -> list[TensorEntry]:
    """One shard's tensors from its safetensors header, by range requests."""
    from huggingface_hub import constants
    from huggingface_hub.errors import SafetensorsParsingError

    first = await client.get(url, headers, timeout, FIRST_RANGE_BYTES, "bytes=0-100000")
    prefix = first.content
    n = header_length(prefix, name)
    if n > constants.SAFETENSORS_MAX_HEADER_LENGTH:
        # the bound huggingface_hub's parse_safetensors_file_metadata applies on the sync path
        raise SafetensorsParsingError(
            f"{name}: safetensors header is too big ({n} B; at most "
            f"{constants.SAFETENSORS_MAX_HEADER_LENGTH})"
        )
    if n <= len(prefix) - 8:
        raw = prefix[8 : 8 + n]
    else:
        rest = await client.get(url, headers, timeout, n + 8, f"bytes=8-{n + 7}")
        # a server that ignores the range answers 200 with the file from its first byte
        raw = rest.content[:n] if rest.status_code == 206 else rest.content[8 : 8 + n]
    if len(raw) < n:
        raise CheckpointError(f"{name}: the header is {n} B but the Hub sent {len(raw)}")
    return parse_header(raw, name)
