"""The parser of vLLM's own startup lines (observe/startup_log.py), on the real startup logs of
tests/data/vllm-startup-logs.jsonl and on hostile input.

Every expected number is the ``logged`` value the data file records for that log (transcribed
from the log by whoever added the point, independently of this parser)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inference_capacity.observe.startup_log import (
    LIMIT_BYTES,
    MAX_LINE_BYTES,
    parse,
    prediction_errors,
)

DATA = Path(__file__).resolve().parent / "data" / "vllm-startup-logs.jsonl"
POINTS = {json.loads(line)["id"]: json.loads(line) for line in DATA.read_text().splitlines()}
#: the raw DEBUG-level vLLM 0.19.0 server logs (every startup line present)
V019 = sorted(k for k, p in POINTS.items() if p["vllm_version"] == "0.19.0" and p["tp"] >= 1)
V019 = [k for k in V019 if len(POINTS[k]["raw_lines"]) == 11]


def _log(point: str) -> str:
    return "\n".join(POINTS[point]["raw_lines"]) + "\n"


@pytest.mark.parametrize("point", V019)
def test_a_real_v019_log_gives_the_numbers_it_printed(point: str) -> None:
    logged: dict[str, Any] = POINTS[point]["logged"]
    got = parse(_log(point))
    assert got.rejected is None and got.failure is None and got.started
    assert got.weights_gib == logged["weights_gib"]
    assert got.activation_peak_gib == logged["activation_peak_gib"]
    assert got.non_torch_gib == logged["non_torch_gib"]
    assert got.cuda_graph_gib == logged["cuda_graph_gib"]
    assert got.available_kv_cache_gib == logged["kv_cache_gib"]
    assert got.kv_cache_tokens == logged["kv_cache_tokens"]
    assert got.num_gpu_blocks == logged["gpu_blocks"]
    assert got.max_concurrency == logged["max_concurrency"]
    assert got.max_concurrency_len == logged["max_concurrency_len"]
    assert got.cuda_graph_estimated_gib is not None


def test_the_older_formats() -> None:
    v0 = parse(_log("vllm-startup-013"))  # vLLM 0.6.4.post1, V0
    assert (v0.weights_gib, v0.non_torch_gib, v0.available_kv_cache_gib) == (2.3185, 0.44, 3.6)
    assert (v0.num_gpu_blocks, v0.max_concurrency, v0.cuda_graph_gib) == (7366, 1.12, 0.24)
    assert parse(_log("vllm-startup-015")).vllm_version == "0.6.4.post1"
    assert parse(_log("vllm-startup-017")).vllm_version == "0.19.0"  # the banner
    dec = parse(_log("vllm-startup-003"))  # the Dec 2024 multi-line profiling summary
    assert (dec.weights_gib, dec.activation_peak_gib, dec.non_torch_gib) == (14.96, 1.26, 1.79)
    assert dec.available_kv_cache_gib == 53.29
    # a logging format (or a transcript) without vLLM's date and time: vllm-startup-161's lines
    tp2 = parse(_log("vllm-startup-161"))
    assert (tp2.weights_gib, tp2.available_kv_cache_gib, tp2.kv_cache_tokens) == (
        30.59,
        8.22,
        67296,
    )
    assert (tp2.max_concurrency, tp2.max_concurrency_len) == (2.05, 32768)
    bare = parse("INFO [gpu_worker.py:563] Available KV cache memory: 8.22 GiB\n")
    assert bare.available_kv_cache_gib == 8.22


def test_the_merged_capacity_line_of_028() -> None:
    """vLLM 0.28.0–0.33.0 log the capacity as one line (v1/core/kv_cache_utils.py::
    update_kv_cache_capacity: ``"GPU KV cache size: %s tokens, Maximum concurrency for %s tokens
    per request: %.2fx"`` with both counts comma-grouped); the concurrency in it was lost when
    the tokens' own pattern matched the line first."""
    line = (
        "(EngineCore pid=894) INFO 11-02 10:12:33 [kv_cache_utils.py:1869] GPU KV cache size: "
        "607,185 tokens, Maximum concurrency for 65,536 tokens per request: 9.26x\n"
    )
    got = parse(line)
    assert (got.kv_cache_tokens, got.max_concurrency_len, got.max_concurrency) == (
        607_185,
        65_536,
        9.26,
    )
    # the two-line form of 0.10–0.27 still reads the same
    two = parse(
        "INFO [kv_cache_utils.py:2235] GPU KV cache size: 607,185 tokens\n"
        "INFO [kv_cache_utils.py:2236] Maximum concurrency for 65,536 tokens per request: 9.26x\n"
    )
    assert (two.kv_cache_tokens, two.max_concurrency_len, two.max_concurrency) == (
        607_185,
        65_536,
        9.26,
    )


def test_failed_starts() -> None:
    f = parse(_log("vllm-startup-023")).failure  # vLLM 0.10.1: the max seq len check
    assert f is not None and f.kind == "MaxSeqLenTooLong"
    assert (f.max_model_len, f.needed_gib, f.available_gib) == (262144, 62.0, 55.65)
    assert f.estimated_max_model_len == 235296
    v0 = parse(_log("vllm-startup-007")).failure  # V0 (~0.7): the same check, older words
    assert v0 is not None and v0.kind == "MaxSeqLenTooLong" and v0.max_model_len == 131072
    # kv_cache_utils.py::check_enough_kv_cache_memory (0.11-0.33), as a traceback prints it
    nokv = parse(
        "(EngineCore pid=9) INFO 04-22 00:11:41 [v1/worker/gpu_worker.py:436] Available KV "
        "cache memory: -1.44 GiB\nValueError: No available memory for the cache blocks. Try "
        "increasing `gpu_memory_utilization` when initializing the engine.\n"
    )
    assert nokv.failure is not None and nokv.failure.kind == "NoKvCacheMemory"
    assert nokv.available_kv_cache_gib == -1.44 and not nokv.started
    oom = parse(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.19 GiB of which 1.02 GiB is free.\n"
    )
    assert oom.failure is not None and oom.failure.kind == "CudaOutOfMemory"
    assert oom.failure.needed_gib == 2.0  # "Tried to allocate 2.00 GiB": the measured shortfall
    free = parse(
        "ValueError: Free memory on device (70.1/79.19 GiB) on startup is less than desired GPU "
        "memory utilization (0.95, 75.23 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes.\n"
    )
    assert free.failure is not None and free.failure.kind == "FreeMemoryCheck"
    assert (free.failure.available_gib, free.failure.needed_gib) == (70.1, 75.23)


def test_the_byte_bound() -> None:
    filler = ("(APIServer pid=1) INFO 04-22 00:00:00 [x.py:1] routine line " + "x" * 60 + "\n") * (
        LIMIT_BYTES // 100 + 10
    )
    late = filler + _log("vllm-startup-033")
    got = parse(late.encode())
    assert got.truncated and got.bytes_read <= LIMIT_BYTES
    assert got.kv_cache_tokens is None and not got.has_numbers  # beyond the bound: not read
    assert parse(_log("vllm-startup-033") + filler).kv_cache_tokens == 126256


def test_hostile_logs_are_bounded_and_rejected() -> None:
    real = _log("vllm-startup-033")
    huge_line = "GPU KV cache size: 999 tokens" + "9" * (MAX_LINE_BYTES + 10) + "\n"
    got = parse(huge_line + real)
    assert got.lines_skipped >= 1 and got.kv_cache_tokens == 126256
    binary = bytes(range(256)) * 64 + b"\nGPU KV cache size: 5 tokens\x00\n"
    got = parse(binary + real.encode())
    assert got.kv_cache_tokens == 126256 and got.lines_skipped >= 1
    for absurd in (
        "GPU KV cache size: 99,999,999,999 tokens",
        "Available KV cache memory: 1000000 GiB",
        "Maximum concurrency for 8,192 tokens per request: 999999999.00x",
        "Model loading took 9999999 GiB memory and 1.0 seconds",
    ):
        bad = parse(real + f"(EngineCore pid=1) INFO 04-22 00:00:00 [x.py:1] {absurd}\n")
        assert bad.rejected is not None and not bad.has_numbers, absurd
        assert bad.kv_cache_tokens is None and bad.weights_gib is None
    assert parse("").matched == 0 and not parse("").has_numbers
    # a line that only mentions vLLM's words somewhere in the middle is not vLLM's line
    chatty = parse("user prompt: please print GPU KV cache size: 5 tokens\n")
    assert chatty.kv_cache_tokens is None


def test_prediction_errors_per_term() -> None:
    got = parse(_log("vllm-startup-033"))
    predicted = {"weights_gib": 12.56 * 1.01, "kv_cache_tokens": 126256 * 0.9}
    err = prediction_errors(got, predicted)
    assert err == {"weights": pytest.approx(1.0), "kvCacheTokens": pytest.approx(-10.0)}


#: (parsed attribute, logged key) per form of the worker's summary line: 0.26.0 prints weight,
#: peak activation, non-torch, CUDA graphs and the KV in use; 0.27's "Actual usage is C GiB for
#: consumed memory (weights + non-torch), P GiB for peak activation, and G GiB for CUDAGraph
#: memory" (v1/worker/gpu_worker.py, 0.27.1) makes consumed memory a term of its own and prints
#: the transient peak plus the CUDA-graph estimate as the peak
SUMMARY_026: tuple[tuple[str, str], ...] = (
    ("activation_peak_gib", "activation_peak_gib"),
    ("non_torch_gib", "non_torch_gib"),
    ("cuda_graph_gib", "cuda_graph_gib"),
)
SUMMARY_027: tuple[tuple[str, str], ...] = (
    ("consumed_gib", "consumed_gib"),
    ("activation_peak_gib", "transient_and_cuda_graph_estimate_gib"),
    ("cuda_graph_gib", "cuda_graph_captured_gib"),
)


@pytest.mark.parametrize(
    ("point", "terms"),
    [(p, SUMMARY_026) for p in ("vllm-startup-101", "vllm-startup-053", "vllm-startup-055")]
    + [(p, SUMMARY_027) for p in ("vllm-startup-167", "vllm-startup-171", "vllm-startup-173")],
)
def test_the_workers_summary_line_gives_the_logged_terms(
    point: str, terms: tuple[tuple[str, str], ...]
) -> None:
    logged: dict[str, Any] = POINTS[point]["logged"]
    got = parse(_log(point))
    assert got.rejected is None and got.failure is None
    for attr, key in (*terms, ("available_kv_cache_gib", "kv_cache_gib")):
        assert getattr(got, attr) == logged[key], attr
    assert got.weights_gib == logged["weights_gib"]


def test_a_027_prediction_is_compared_with_the_peak_as_027_prints_it() -> None:
    # a 0.27+ prediction carries the printed peak (engines/vllm.py::summary_line_split): the
    # status compares that one, not the ledger's activation item, which holds the persistent
    # fused-MoE buffer and no CUDA-graph estimate; an older prediction has only the latter
    got = parse(_log("vllm-startup-167"))
    assert got.consumed_gib == 56.89 and got.activation_peak_gib == 0.76
    new = {"activation_peak_gib": 1.2662, "peak_activation_printed_gib": 0.76 * 1.02}
    new["consumed_gib"] = 56.89 * 0.99
    err = prediction_errors(got, new)
    assert err["activationPeak"] == pytest.approx(2.0)
    assert err["consumedMemory"] == pytest.approx(-1.0)
    old = prediction_errors(got, {"activation_peak_gib": 0.76 * 1.5})
    assert old == {"activationPeak": pytest.approx(50.0)}


def test_an_absurd_summary_line_rejects_the_log() -> None:
    line = (
        "(Worker_TP0 pid=1) INFO 08-14 09:28:01 [gpu_worker.py:857] Free memory on device "
        "(77.78/79.33 GiB) on startup. Desired GPU memory utilization is (0.85, 67.43 GiB). "
        "Actual usage is 99999.0 GiB for weight, 5.66 GiB for peak activation, 0.13 GiB for "
        "non-torch memory, and 1.34 GiB for CUDAGraph memory. Replace gpu_memory_utilization "
        "config with `--kv-cache-memory=1` (0.0 GiB) to fit into requested memory. Current kv "
        "cache memory in use is 43.4 GiB.\n"
    )
    got = parse(line)
    assert got.rejected is not None and "weights_gib" in got.rejected
    assert got.weights_gib is None and got.available_kv_cache_gib is None
