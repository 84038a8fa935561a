"""Rebuild tests/data/latency-points.jsonl from aiconfigurator-core's measured vLLM points.

    pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp/aic
    unzip -q /tmp/aic/aiconfigurator_core-0.12.0-*.whl -d /tmp/aic/x
    python -m benchmarks.latency_points_build \
        /tmp/aic/x/aiconfigurator_core/systems/silicon_sample.csv

``silicon_sample.csv`` (Apache-2.0, NVIDIA) holds end-to-end ``vllm bench serve``-style runs:
mean TTFT and mean TPOT at a fixed concurrency and fixed input/output lengths. Kept: vLLM,
aggregated serving, pure tensor parallelism (no attention-DP, no expert parallelism), H100/H200/
B200/B300, models whose config is in the catalog and whose weight format the ledger models. Every
point keeps its row id, so it can be found again in the CSV.

Every point is "set": "validation": silicon_sample.csv is end-to-end data, validation only
(issue 19); the constants of sizing/perf.py are fitted on the wheel's per-operation tables by
benchmarks.latency_fit. A run the CSV lists twice under two ids is kept once.

A run whose own TTFT/TPOT show far fewer requests in service than vLLM admits at the planned
settings queued outside vLLM (a client or connection limit the row does not state) and gains
``not_comparable`` with the numbers, as does a run faster than the datasheet allows or slower
than its own setup at a larger batch (``benchmarks.latency_accuracy.labels``; the rules read
no model error); the scorer counts those apart.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "latency-points.jsonl"
WHEEL = "aiconfigurator_core-0.12.0-cp311-abi3-manylinux_2_28_x86_64.whl"
WHEEL_SHA256 = "aadc4aad0a00bf8a61c477c62bef43de479849c3aa0b1c3078068e08309eccc4"
SOURCE = (
    f"https://pypi.org/project/aiconfigurator-core/0.12.0/ ({WHEEL}, sha256 {WHEEL_SHA256}): "
    "aiconfigurator_core/systems/silicon_sample.csv"
)

GPUS = {
    "h100_sxm": "H100-SXM-80GB",
    "h200_sxm": "H200-SXM-141GB",
    "b200_sxm": "B200-180GB",
    "b300_sxm": "B300-288GB",
}
#: (model_path, precision) -> (catalog model, vLLM --quantization or None)
MODELS = {
    ("meta-llama/Llama-3.1-70B", "fp8"): ("meta-llama/Meta-Llama-3.1-70B", "fp8"),
    ("Qwen/Qwen3-32B", ""): ("Qwen/Qwen3-32B", None),
    ("Qwen/Qwen3-32B", "fp8"): ("Qwen/Qwen3-32B", "fp8"),
    ("Qwen/Qwen3-235B-A22B-FP8", "fp8"): ("Qwen/Qwen3-235B-A22B-FP8", None),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "fp8"): ("meta-llama/Llama-3.1-8B-Instruct", "fp8"),
    ("openai/gpt-oss-120b", "fp4"): ("openai/gpt-oss-120b", None),
    ("MiniMaxAI/MiniMax-M2.5", "fp8"): ("MiniMaxAI/MiniMax-M2.5", None),
    # the CSV names the base model with precision fp4 (gemm and MoE "nvfp4"): planned on
    # NVIDIA's NVFP4 checkpoint, the wheel's only NVFP4 MiniMax-M2.5 config (an assumption)
    ("MiniMaxAI/MiniMax-M2.5", "fp4"): ("nvidia/MiniMax-M2.5-NVFP4", None),
    # Kimi-K2.5: Moonshot's checkpoint (INT4 weight-only experts, compressed-tensors) and, for
    # the fp4 rows, NVIDIA's NVFP4 one (the wheel's config; the same assumption as above)
    ("moonshotai/Kimi-K2.5", "int4"): ("moonshotai/Kimi-K2.5", None),
    ("moonshotai/Kimi-K2.5", "fp4"): ("nvidia/Kimi-K2.5-NVFP4", None),
}


def split(key: str) -> str:
    """Every end-to-end run is validation (no constant is fitted on one)."""
    del key
    return "validation"


def main(argv: list[str]) -> int:
    rows = list(csv.DictReader(open(argv[0], newline="")))
    out = []
    seen: set[tuple[object, ...]] = set()
    for r in rows:
        if r["backend"] != "vllm" or r["mode"] != "agg":
            continue
        if r["attention_dp_size"] not in ("", "1") or r["moe_ep_size"] not in ("", "0", "1"):
            continue
        gpu = GPUS.get(r["system"])
        model = MODELS.get((r["model_path"], r["precision"]))
        if gpu is None or model is None or int(r["pp_size"] or 1) != 1:
            continue
        ttft, tpot = float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"])
        n, isl, osl, tp = int(r["batch_size"]), int(r["isl"]), int(r["osl"]), int(r["tp_size"])
        # the CSV repeats some runs under two ids: one point each, split by the run itself
        run = (model, gpu, tp, isl, osl, n, round(ttft, 3), round(tpot, 4))
        if run in seen:
            continue
        seen.add(run)
        # closed loop at concurrency n (Little's law): n requests of E2E = TTFT + (osl-1) TPOT
        e2e = ttft + (osl - 1) * tpot
        tps = n * osl / (e2e / 1e3)
        ver = r["backend_version"] or next(
            (p.split("=")[1] for p in r["silicon_data_source"].split("; ") if "vllm/" in p), ""
        )
        if not ver:
            src = r["silicon_data_source"]
            ver = src.split("/vllm/")[1].split("/")[0] if "/vllm/" in src else ""
        if ver.startswith("nightly-"):  # a nightly build by commit: no release number
            ver = ""
        out.append(
            {
                "id": r["id"],
                "set": split(repr(run)),
                "source": SOURCE,
                "source_row": r["silicon_data_source"],
                "model": model[0],
                "served_model": r["model_path"],
                "quantization": model[1],
                "precision": r["precision"] or "bf16",
                "gpu": gpu,
                "tp": tp,
                "vllm_version": ver or None,
                "prompt_tokens": isl,
                "output_tokens": osl,
                "concurrency": n,
                "flags": "vLLM defaults except --tensor-parallel-size (aiconfigurator's agg runs)",
                "ttft_ms": round(ttft, 3),
                "tpot_ms": round(tpot, 4),
                "output_tokens_per_s": round(tps, 2),
                "throughput_derived": "concurrency x output / (TTFT + (output-1) TPOT)",
            }
        )
    from benchmarks.latency_accuracy import labels

    for pid, reason in labels(out).items():
        next(p for p in out if p["id"] == pid)["not_comparable"] = reason
    out.sort(
        key=lambda p: (
            p["model"],
            p["gpu"],
            p["tp"],
            p["prompt_tokens"],
            p["output_tokens"],
            p["concurrency"],
            p["id"],
        )
    )
    OUT.write_text("".join(json.dumps(p, sort_keys=True) + "\n" for p in out))
    print(f"{len(out)} points -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
