"""The command line: every flag of ``plan`` and ``run``, each with its help text."""

from __future__ import annotations

import argparse
from typing import Any

from ..engines.versions import NEWEST_SUPPORTED
from ..vocab import CLI_DTYPE_CHOICES, CLI_KV_CACHE_DTYPE_CHOICES
from .observe import add_observe, add_plan_flags


def _positive_int(name: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        return value

    return parse


def _fraction(name: str) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not 0.0 < value <= 1.0:
            raise argparse.ArgumentTypeError(f"{name} must be in (0, 1], got {value}")
        return value

    return parse


def _gib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of GiB, got {text!r}") from None
    if not 0 < value < 100_000:
        raise argparse.ArgumentTypeError(f"must be a positive number of GiB, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="inference-capacity",
        description="Size vLLM inference fleets from a per-GPU memory ledger.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    _add_plan(sub)
    add_observe(sub)
    sub.add_parser("crd", help="print the InferenceCapacity CustomResourceDefinition (YAML)")
    sub.add_parser("models", help="list the built-in model catalog")
    sub.add_parser("gpus", help="list the GPU catalog")
    _add_run(sub)
    _add_ui(sub)
    return p


def _add_plan(sub: Any) -> None:
    """``plan``: a manifest, or a what-if from flags."""
    plan = sub.add_parser(
        "plan",
        help="plan an InferenceCapacity manifest, or a what-if given as flags",
        description="Plan FILE.yaml (an InferenceCapacity, optionally with its Deployment), or "
        "a what-if from flags (--model and --gpu/--gpu-memory-gib).",
    )
    plan.add_argument("file", nargs="?", help="InferenceCapacity manifest (YAML; - for stdin)")
    plan.add_argument(
        "--model",
        help="a config.json or model folder, a catalog name (see `models`), or a Hugging Face "
        "Hub id (org/name; HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE apply)",
    )
    plan.add_argument(
        "--revision", help="Hub revision of --model: a branch, tag or commit (default main)"
    )
    plan.add_argument("--gpu", help="GPU catalog name (see `gpus`)")
    plan.add_argument("--gpu-memory-gib", type=_gib, help="device memory as CUDA reports it")
    plan.add_argument(
        "--tp",
        "--tensor-parallel-size",
        dest="tp",
        type=_positive_int("--tp"),
        default=None,
        help="tensor-parallel size (1)",
    )
    plan.add_argument(
        "--pp",
        "--pipeline-parallel-size",
        dest="pp",
        type=_positive_int("--pp"),
        default=None,
        help="pipeline-parallel size (1)",
    )
    plan.add_argument(
        "--dp",
        "--data-parallel-size",
        dest="dp",
        type=_positive_int("--dp"),
        default=None,
        help="data-parallel size: engines per pod (1)",
    )
    plan.add_argument(
        "--enable-expert-parallel", action="store_true", help="MoE experts split across ranks"
    )
    plan.add_argument(
        "--gpu-memory-utilization",
        type=_fraction("--gpu-memory-utilization"),
        help="plan vLLM at this utilization (default: the one the ledger recommends)",
    )
    plan.add_argument(
        "--max-model-len",
        type=_positive_int("--max-model-len"),
        help="context cap in tokens (default: the model's)",
    )
    plan.add_argument(
        "--max-num-seqs",
        type=_positive_int("--max-num-seqs"),
        help="sequences per engine (default: sized from the workload, else vLLM's)",
    )
    plan.add_argument(
        "--max-num-batched-tokens",
        type=_positive_int("--max-num-batched-tokens"),
        help="tokens per scheduler step (default: vLLM's for the version and GPU)",
    )
    plan.add_argument(
        "--block-size",
        type=_positive_int("--block-size"),
        help="KV-cache block size in tokens (default: the attention backend's)",
    )
    plan.add_argument(
        "--kv-cache-dtype",
        default=None,
        choices=list(CLI_KV_CACHE_DTYPE_CHOICES),
        help="KV-cache dtype (auto: the model's)",
    )
    plan.add_argument(
        "--dtype",
        default=None,
        choices=list(CLI_DTYPE_CHOICES),
        help="weights and activations dtype (auto: the config's)",
    )
    plan.add_argument("--quantization", help="vLLM --quantization (e.g. fp8, gptq_marlin)")
    plan.add_argument(
        "--engine-version",
        default=None,
        help=f"vLLM version as it reports it (default {NEWEST_SUPPORTED})",
    )
    plan.add_argument(
        "--engine", choices=["v0", "v1"], default=None, help="force the V0 engine (vLLM <= 0.10)"
    )
    plan.add_argument(
        "--enforce-eager", action="store_true", help="no CUDA graphs (vLLM --enforce-eager)"
    )
    plan.add_argument(
        "--compile-cache",
        choices=("warm", "cold"),
        default=None,
        help="vLLM's torch.compile cache at startup: warm (kept across pods, the default) or "
        "cold (every pod compiles inside the memory profile)",
    )
    plan.add_argument(
        "--limit-mm-per-prompt",
        default=None,
        metavar="JSON",
        help="multimodal items per prompt, as vLLM takes it (unset: 999 each); every modality "
        "at 0 makes the encoder profile text-only",
    )
    plan.add_argument(
        "--mm-processor-kwargs",
        default=None,
        metavar="JSON",
        help="vLLM --mm-processor-kwargs (Qwen2-VL / Qwen2.5-VL: max_pixels, min_pixels size "
        "the encoder profile's dummy image)",
    )
    plan.add_argument(
        "--skip-mm-profiling",
        action="store_true",
        help="vLLM --skip-mm-profiling: no multimodal encoder profile (from 0.11)",
    )
    plan.add_argument("--max-loras", type=int, default=None, help="LoRA slots (0)")
    plan.add_argument("--max-lora-rank", type=int, default=None, help="LoRA rank (16)")
    plan.add_argument(
        "--kv-cache-gib",
        type=_gib,
        help="inverse: the KV pool wanted per GPU; prints the utilization for it",
    )
    plan.add_argument(
        "--operational-headroom",
        type=float,
        default=None,
        help="fraction of the device kept free beyond vLLM's view (0.05)",
    )
    plan.add_argument(
        "--deployment",
        help="the target Deployment manifest (YAML), for the patch preview; may also be in FILE",
    )
    w = plan.add_argument_group(
        "workload and sizing (issue 14)",
        "Length quantiles as P50,P95,P99 tokens; --cohort NAME:WEIGHT:P50,P95,P99:O50,O95,O99"
        "[:SHARED_PREFIX[:N]] (repeatable) for several cohorts.",
    )
    w.add_argument("--prompt-tokens", metavar="P50,P95,P99", help="prompt length quantiles")
    w.add_argument("--output-tokens", metavar="P50,P95,P99", help="output length quantiles")
    w.add_argument("--shared-prefix-tokens", type=int, default=None, help="with --prompt-tokens")
    w.add_argument("--samples", type=_positive_int("--samples"), default=None, help="n per request")
    w.add_argument(
        "--cohort", action="append", default=[], metavar="SPEC", help="one cohort (repeatable)"
    )
    w.add_argument("--burst", metavar="NAME=W,...", help="the burst hour's cohort weights")
    w.add_argument(
        "--peak-concurrency",
        type=_positive_int("--peak-concurrency"),
        help="sequences in flight at the peak, fleet-wide (sizes replicas)",
    )
    w.add_argument(
        "--itl-target-ms",
        type=float,
        help="inter-token latency target: caps max-num-seqs (its quantile and the mean TPOT)",
    )
    w.add_argument(
        "--itl-quantile",
        choices=["p95", "p99"],
        default=None,
        help="the ITL quantile --itl-target-ms bounds (p95)",
    )
    w.add_argument(
        "--ttft-target-ms", type=float, help="time-to-first-token p95 target: caps max-num-seqs"
    )
    w.add_argument(
        "--sizing",
        choices=["distribution", "conservative"],
        help="max-num-seqs rule (default: the manifest's spec.policy.sizing, else distribution)",
    )
    w.add_argument("--preemption-target", type=float, help="P(preemption) target (0.01)")
    w.add_argument(
        "--hbm-efficiency",
        type=_fraction("--hbm-efficiency"),
        help="fraction of datasheet HBM bandwidth decode reaches (0.80)",
    )
    w.add_argument("--sweep", action="store_true", help="rank every GPU x TP x KV dtype")
    w.add_argument(
        "--gpu-price", action="append", default=[], metavar="NAME=PRICE", help="per GPU-hour"
    )
    w.add_argument("--gpu-prices", metavar="FILE.yaml", help="a YAML table {GPU: price}")
    w.add_argument("--latency-chart", help="write the N → ITL / tokens/s curve (.svg/.png)")
    w.add_argument("--sweep-chart", help="write the sweep's options as bars (.svg/.png)")
    plan.add_argument(
        "-o",
        "--output",
        default="table",
        choices=["table", "json", "yaml", "patch"],
        help="table (default), json, yaml, or patch: the strategic-merge patch the operator "
        "writes to the Deployment in FILE (exit codes in the README)",
    )
    plan.add_argument("--chart", help="write the per-rank ledger as a stacked bar (.svg/.png)")
    plan.add_argument(
        "--fail-if-not-fits", action="store_true", help="exit 1 when the plan does not fit (for CI)"
    )
    add_plan_flags(plan)


def _add_run(sub: Any) -> None:
    """``run``: the operator; every flag lands in :class:`~inference_capacity.settings.Settings`."""
    run = sub.add_parser("run", help="run the operator (Kopf)")
    run.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch only these namespaces (repeatable); default all",
    )
    run.add_argument("--standalone", action="store_true", help="no peering (single replica)")
    run.add_argument("--peering", default=None, help="Kopf peering name for several replicas")
    run.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority (default: random per process, so exactly one replica works)",
    )
    run.add_argument(
        "--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint URL"
    )
    run.add_argument(
        "--metrics-port", type=int, default=9090, help="Prometheus metrics port (0: none)"
    )
    run.add_argument(
        "--prometheus-allowed-url-prefix",
        action="append",
        default=[],
        metavar="PREFIX",
        help="a URL prefix spec.workload.fromPrometheus.url may start with (repeatable), e.g. "
        "http://prometheus.monitoring:9090/; none (the default): every fromPrometheus is refused",
    )
    run.add_argument("--verbose", "-v", action="store_true", help="debug logging")


def _add_ui(sub: Any) -> None:
    """``ui``: the what-if page (inference_capacity.ui), every number from ``plan -o json``."""
    ui = sub.add_parser(
        "ui",
        help="serve the what-if page (GET /api/plan?<plan flags> answers plan -o json)",
    )
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    ui.add_argument("--port", type=int, default=8080, help="port to listen on (8080)")
