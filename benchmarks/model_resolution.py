"""Header-derived vs config-derived checkpoint bytes, and how long a Hub resolution takes.

Runs the test Hub (tests/hubserver.py) on localhost with sparse safetensors checkpoints whose
headers have the real tensor names, dtypes and shapes of catalog models in their published
formats (tests/checkpoints.py), so it needs no network. Prints two tables:

1. per model: bytes from the safetensors headers (what vLLM loads), bytes the config-derived
   tensors give, and the difference the ledger now applies (the header wins);
2. per model: resolution time cold (empty caches: model info, config.json, one or two range
   requests per shard) on the CLI's huggingface_hub path and on the operator's async path
   (model/hub_async.py, 8 header reads at once), with the on-disk header cache only (a
   restarted process), and from the in-memory cache by (id, commit).

    python -m benchmarks.model_resolution
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests import checkpoints as ck
from tests.hubserver import HubServer

ROOT = Path(__file__).resolve().parent.parent

CONFIGS = ROOT / "operator" / "inference_capacity" / "catalog" / "models"

FORMATS: list[tuple[str, Callable[[dict[str, Any]], ck.Spec]]] = [
    ("meta-llama/Llama-3.2-1B", ck.dense),
    ("meta-llama/Llama-3.1-8B-Instruct", ck.dense),
    ("meta-llama/Llama-3.1-70B-Instruct", ck.dense),
    ("meta-llama/Meta-Llama-3.1-405B", ck.dense),
    ("mistralai/Mistral-7B-Instruct-v0.3", ck.dense),
    ("Qwen/Qwen2.5-7B-Instruct", ck.dense),
    ("Qwen/Qwen2.5-72B", ck.dense),
    ("Qwen/Qwen3-8B", ck.dense),
    ("Qwen/Qwen3-32B", ck.dense),
    ("LDCC/Qwen2.5-72B-Instruct-ko-AWQ", ck.awq),
    ("asif00/bangla-llama-4bit", ck.bnb_nf4),
    ("Qwen/Qwen3-32B-FP8", ck.fp8_block),
    ("nvidia/Llama-3.1-70B-Instruct-FP8", ck.fp8_tensor),
]


def config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / f"{name.replace('/', '__')}.json").read_text())
    return data


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="model-resolution-"))
    hub = HubServer().start()
    os.environ["HF_ENDPOINT"] = hub.url
    os.environ["HF_HOME"] = str(tmp / "hf")
    os.environ.pop("HF_HUB_OFFLINE", None)
    from inference_capacity.model.hub_async import HubClient, resolve_model_ref_async
    from inference_capacity.model.source import HEADER_WORKERS, clear_cache, resolve_model_ref

    # as in the operator: one loop and one client for every resolution (a new client's first
    # request pays for its TLS context and connections, ~1 s here)
    loop = asyncio.new_event_loop()

    async def make_client() -> HubClient:
        return HubClient(connections=32, shard_parallel=HEADER_WORKERS)

    client = loop.run_until_complete(make_client())

    def resolve_async(repo: str) -> None:
        loop.run_until_complete(resolve_model_ref_async(repo, None, False, None, client))

    try:
        repos = []
        for name, fmt in FORMATS:
            repo = f"bench/{name.split('/')[1]}"
            files = ck.write_checkpoint(
                tmp / repo.replace("/", "__"), fmt(config(name)), config(name), 5 * 10**9
            )
            hub.add(repo, dict(files))
            repos.append((name, fmt.__name__, repo))
        print("| model | checkpoint format | header bytes (loaded) | config-derived | difference |")
        print("|---|---|---:|---:|---:|")
        timings = []
        for name, fmt, repo in repos:
            clear_cache()
            shutil.rmtree(tmp / "hf", ignore_errors=True)
            t = time.perf_counter()
            m = resolve_model_ref(repo)
            cold = time.perf_counter() - t
            h = m.shape().header
            assert h is not None and m.inventory is not None
            print(f"| {name} | {fmt} | {h.loaded_bytes:,} | {h.config_bytes:,} | {h.delta:+,} |")
            clear_cache()
            shutil.rmtree(tmp / "hf", ignore_errors=True)
            t = time.perf_counter()
            resolve_async(repo)
            cold_async = time.perf_counter() - t
            clear_cache()
            t = time.perf_counter()
            resolve_model_ref(repo)
            disk = time.perf_counter() - t
            hits = []
            for _ in range(100):
                t = time.perf_counter()
                resolve_model_ref(repo)
                hits.append(time.perf_counter() - t)
            timings.append(
                (
                    name,
                    len(m.inventory.files),
                    len(m.inventory.tensors),
                    cold,
                    cold_async,
                    disk,
                    hits,
                )
            )
        print()
        print(
            "| model | shards | tensors | cold ms (sync) | cold ms (async) | "
            "header cache on disk ms | in memory µs |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, shards, tensors, cold, cold_async, disk, hits in timings:
            print(
                f"| {name} | {shards} | {tensors} | {cold * 1e3:.0f} | {cold_async * 1e3:.0f} | "
                f"{disk * 1e3:.0f} | {statistics.median(hits) * 1e6:.0f} |"
            )
    finally:
        loop.run_until_complete(client.close())
        loop.close()
        hub.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
