"""``inference-capacity``: plan / crd / models / gpus / run.

Every expected failure (bad input, unknown model or GPU, a config the ledger cannot size) is one
line on stderr naming the field, and exit status 2; a plan that does not fit exits 1 with
``--fail-if-not-fits`` (for CI), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from .engines.versions import NEWEST_SUPPORTED
from .engines.vllm import EngineSettings
from .hardware import custom_gpu, get_gpu, list_gpus
from .model import catalog_names, load_model
from .model.source import checkpoint_json, describe, resolve_model_ref
from .planner import Headroom, PlanInput, make_plan
from .report import (
    chart,
    fits_message,
    latency_chart,
    plan_json,
    sweep_chart,
    sweep_table,
    table,
    why_not_fits,
)
from .units import GiB
from .vocab import CLI_DTYPE_CHOICES, CLI_KV_CACHE_DTYPE_CHOICES
from .whatif import levers, parse_prices, sweep, workload_from_flags

EXIT_INPUT = 2
EXIT_NOT_FITS = 1


class CliError(Exception):
    pass


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
    sub.add_parser("crd", help="print the InferenceCapacity CustomResourceDefinition (YAML)")
    sub.add_parser("models", help="list the built-in model catalog")
    sub.add_parser("gpus", help="list the GPU catalog")
    _add_run(sub)
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
        "--itl-target-ms", type=float, help="inter-token latency target: caps max-num-seqs"
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


# --- plan ------------------------------------------------------------------------------------


def _flags_plan(a: argparse.Namespace) -> tuple[dict[str, Any], str, Any]:
    if not a.model:
        raise CliError("plan: give FILE.yaml, or --model NAME_OR_CONFIG_JSON with --gpu")
    if not a.gpu and a.gpu_memory_gib is None:
        raise CliError("plan: --gpu NAME or --gpu-memory-gib X is required with --model")
    source = resolve_model_ref(a.model, revision=a.revision)
    shape = source.shape(a.quantization)
    if a.gpu_memory_gib is not None:
        gpu = custom_gpu(a.gpu_memory_gib, name=a.gpu or "custom")
        if a.gpu:
            gpu = replace(get_gpu(a.gpu), total_bytes=gpu.total_bytes)
    else:
        gpu = get_gpu(a.gpu)
    settings = EngineSettings(
        version=a.engine_version or NEWEST_SUPPORTED,
        engine=a.engine,
        gpu_memory_utilization=a.gpu_memory_utilization,
        max_model_len=a.max_model_len,
        max_num_seqs=a.max_num_seqs,
        max_num_batched_tokens=a.max_num_batched_tokens,
        block_size=a.block_size,
        kv_cache_dtype=a.kv_cache_dtype or "auto",
        dtype=a.dtype or "auto",
        enforce_eager=a.enforce_eager,
        max_loras=a.max_loras if a.max_loras is not None else 0,
        max_lora_rank=a.max_lora_rank if a.max_lora_rank is not None else 16,
        data_parallel=a.dp or 1,
        expert_parallel=a.enable_expert_parallel,
    )
    headroom = 0.05 if a.operational_headroom is None else a.operational_headroom
    if not 0 <= headroom < 1:
        raise CliError("--operational-headroom must be in [0, 1)")
    workload = workload_from_flags(
        a.prompt_tokens,
        a.output_tokens,
        a.cohort,
        a.peak_concurrency,
        a.itl_target_ms,
        a.shared_prefix_tokens or 0,
        a.samples or 1,
        a.burst,
    )
    base = _sizing_overrides(
        a,
        PlanInput(
            model=shape,
            gpu=gpu,
            tp=a.tp or 1,
            pp=a.pp or 1,
            engine=settings,
            workload=workload,
            headroom=Headroom(operational_fraction=headroom),
        ),
    )
    # what-if: vLLM at exactly these flags
    whatif = make_plan(
        replace(
            base, choose_utilization=a.gpu_memory_utilization is None, choose_max_num_seqs=False
        )
    )
    # recommendation: the utilization the ledger recommends (or the one for --kv-cache-gib)
    kv_pool = int(a.kv_cache_gib * GiB) if a.kv_cache_gib is not None else None
    rec = make_plan(
        replace(
            base,
            kv_pool_bytes=kv_pool,
            choose_max_num_seqs=workload is not None and a.max_num_seqs is None,
        )
    )
    out = {"model": source.json(), **plan_json(whatif)}
    ckpt = checkpoint_json(source, shape)
    if ckpt is not None:
        out["checkpoint"] = ckpt
    rec_json = plan_json(rec)
    out["recommendation"] = rec_json["recommendation"]
    if workload is not None:
        # sizing and latency of the recommendation; of the given --max-num-seqs as "given"
        out["given"] = {"sizing": out["sizing"], "latency": out["latency"]}
        out["sizing"], out["latency"] = rec_json["sizing"], rec_json["latency"]
    out["recommended_flags"] = rec.recommendation.flags()
    if kv_pool is not None:
        out["inverse"] = {
            "fits": rec.fits,
            "reason": rec.reason,
            "message": rec.message,
            "kv_cache_gib": a.kv_cache_gib,
            "gpu_memory_utilization": rec.recommendation.gpu_memory_utilization,
            "num_gpu_blocks": rec.prediction.num_gpu_blocks,
            "available_kv_cache_gib": round(
                rec.prediction.ranks[rec.prediction.binding_rank].available_kv / GiB, 4
            ),
        }
        # the largest pool there is: the one at the safe maximum utilization
        best = make_plan(replace(base, choose_max_num_seqs=False))
        largest = best.prediction.ranks[best.prediction.binding_rank].available_kv
        if kv_pool > largest or not rec.fits:
            reach = (
                f"the largest reachable pool on {gpu.name} at TP={base.tp} PP={base.pp} is "
                f"{max(largest, 0) / GiB:.2f} GiB per GPU (at --gpu-memory-utilization "
                f"{best.recommendation.gpu_memory_utilization})"
                if best.fits
                else f"no KV pool is reachable: {best.reason}: {fits_message(best)}"
            )
            out["inverse"].update(
                fits=False,
                reason="KvPoolUnreachable" if kv_pool > largest else rec.reason,
                largest_reachable_kv_cache_gib=round(max(largest, 0) / GiB, 4),
            )
            out["error"] = f"--kv-cache-gib {a.kv_cache_gib:g} is out of reach: {reach}"
    shown = whatif if workload is None else rec
    text = describe(source, shape) + "\n\n" + table(shown)
    if "error" in out:
        text += "\n\nNot usable: " + out["error"]
    elif rec.fits:
        text += "\n\nRecommended: " + " ".join(
            f"--{k} {v}" for k, v in rec.recommendation.flags().items()
        )
    else:
        text += f"\n\nNot usable: {rec.reason}: {fits_message(rec)}"
        text += "".join(f"\n  {w}" for w in why_not_fits(rec))
    if kv_pool is not None:
        # --fail-if-not-fits judges the plan asked for: the inverse one
        return out, text, rec
    return out, text, rec if workload is not None else whatif


def _read_text(path: str) -> str:
    """A manifest's text, read at most MAX_MANIFEST_BYTES + 1 bytes (``/dev/zero`` or a huge
    file is refused, not read to the end)."""
    from .api.bounded_yaml import MAX_MANIFEST_BYTES

    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1)
        else:
            with Path(path).open("rb") as f:
                raw = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise CliError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _name_of(doc: Any) -> Any:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    return meta.get("name") if isinstance(meta, dict) else None


#: flags of the what-if form that a manifest says in its own spec: given with FILE they would be
#: ignored, so they are refused (the spec field to edit instead)
MANIFEST_FIELDS: dict[str, str] = {
    "revision": "spec.model.revision",
    "gpu": "spec.hardware.gpu",
    "gpu_memory_gib": "spec.hardware.gpuMemoryGiB",
    "tp": "spec.hardware.tensorParallel",
    "pp": "spec.hardware.pipelineParallel",
    "dp": "spec.engine.dataParallel",
    "enable_expert_parallel": "the container's --enable-expert-parallel",
    "gpu_memory_utilization": "the recommendation (the operator chooses it)",
    "max_model_len": "spec.workload.maxModelLen",
    "max_num_seqs": "spec.engine.maxNumSeqsCap",
    "max_num_batched_tokens": "spec.engine.maxNumBatchedTokens",
    "block_size": "spec.engine.blockSize",
    "kv_cache_dtype": "spec.model.kvCacheDtype",
    "dtype": "spec.model.dtype",
    "quantization": "spec.model.quantization",
    "engine_version": "spec.engine.version",
    "engine": "spec.engine.version",
    "enforce_eager": "spec.engine.enforceEager",
    "max_loras": "spec.model.maxLoras",
    "max_lora_rank": "spec.model.maxLoraRank",
    "kv_cache_gib": "spec.engine.kvCacheMemoryBytes",
    "operational_headroom": "spec.headroom.operationalFraction",
    "prompt_tokens": "spec.workload.cohorts",
    "output_tokens": "spec.workload.cohorts",
    "shared_prefix_tokens": "spec.workload.cohorts[].sharedPrefixTokens",
    "samples": "spec.workload.cohorts[].samples",
    "cohort": "spec.workload.cohorts",
    "burst": "spec.workload.burst",
    "peak_concurrency": "spec.workload.peakConcurrency",
    "itl_target_ms": "spec.workload.itlTargetMs",
}


def _refuse_manifest_flags(a: argparse.Namespace) -> None:
    given = [k for k in MANIFEST_FIELDS if getattr(a, k, None) not in (None, False, [])]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise CliError(
            f"plan FILE: {flag} is a what-if flag and the manifest says this itself "
            f"({MANIFEST_FIELDS[given[0]]}): edit FILE, or plan from flags with --model"
            + (
                f" (also given: {', '.join('--' + g.replace('_', '-') for g in given[1:])})"
                if given[1:]
                else ""
            )
        )


def _hpa_min(docs: list[dict[str, Any]], target: str) -> int | None:
    """minReplicas of a HorizontalPodAutoscaler in the input that scales ``target``."""
    for d in docs:
        if d.get("kind") != "HorizontalPodAutoscaler":
            continue
        spec = d.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        if ref.get("kind") == "Deployment" and ref.get("name") == target:
            return int(spec.get("minReplicas") or 1)
    return None


def _manifest_plans(a: argparse.Namespace) -> list[tuple[dict[str, Any], str, Any]]:
    from . import decision, settings
    from .api import load_manifests

    _refuse_manifest_flags(a)
    try:
        docs = load_manifests(_read_text(a.file))
    except yaml.YAMLError as exc:
        raise CliError(f"{a.file}: not valid YAML: {exc}") from None
    others = list(docs.others)
    if a.deployment:
        others += load_manifests(_read_text(a.deployment)).others
    if not docs.capacities:
        raise CliError(f"{a.file}: no InferenceCapacity document found")
    config_maps = {
        _name_of(d): d.get("data") or {}
        for d in others
        if d.get("kind") == "ConfigMap" and isinstance(d.get("data") or {}, dict)
    }
    cfg = settings.current()
    windows = decision.Windows(cfg.stabilization_seconds, cfg.replica_stabilization_seconds)
    results: list[tuple[dict[str, Any], str, Any]] = []
    for doc in docs.capacities:
        results.append(_plan_capacity(a, doc, others, config_maps, windows))
    return results


def _plan_capacity(
    a: argparse.Namespace,
    doc: dict[str, Any],
    others: list[dict[str, Any]],
    config_maps: dict[Any, Any],
    windows: Any,
) -> tuple[dict[str, Any], str, Any]:
    """One InferenceCapacity of the input: resolve, plan and decide against its Deployment (and
    the Nodes, Pods, HPA and PDB of the input) as the operator does."""
    import time

    from . import decision
    from .api import KIND, InferenceCapacity
    from .patching import apply_strategic
    from .resolve import resolve

    nodes = [d for d in others if d.get("kind") == "Node"]
    pods = [d for d in others if d.get("kind") == "Pod"]
    icap = InferenceCapacity.from_manifest(doc, ignore_status=True)
    spec = icap.spec
    ns = icap.metadata.namespace or "default"
    target = f"deployment/{spec.target_ref.name}"
    dep = next(
        (
            d
            for d in others
            if d.get("kind") == "Deployment" and _name_of(d) == spec.target_ref.name
        ),
        None,
    )
    hpa_min = _hpa_min(others, spec.target_ref.name)
    resolved = resolve(spec, dep, config_maps, hpa_min_replicas=hpa_min)
    if not resolved.supported:
        return _unsupported_result(icap, resolved, decision.unsupported(resolved))
    inp = _sizing_overrides(a, resolved.plan_input)
    extra: dict[str, Any] = {
        "name": icap.metadata.name,
        "namespace": icap.metadata.namespace,
        "mode": spec.mode,
        "engine_version": resolved.engine_version,
        "engine_version_source": resolved.engine_version_source,
        "conflicts": list(resolved.conflicts),
        "supported": True,
    }
    if dep is None:
        plan = make_plan(inp)
        rec = plan.recommendation
        flags = rec.flags(
            max_model_len=spec.policy.set_max_model_len,
            batched_tokens=spec.policy.set_max_num_batched_tokens,
            kv_cache_dtype=spec.policy.set_kv_cache_dtype,
            kv_cache_memory=spec.policy.use_kv_cache_memory_bytes,
        )
        extra["flags"] = flags
        extra["removed_flags"] = list(
            rec.removed_flags(kv_cache_memory=spec.policy.use_kv_cache_memory_bytes)
        )
        extra["patch"] = {
            "target": target,
            "action": "none",
            "reason": "NoDeployment",
            "note": "Deployment not in the input: flags only",
            "flags": flags,
        }
    else:
        if not spec.rollout.manage_strategy:
            spare, spare_msg = None, "strategy not managed"
        elif nodes:
            spare, spare_msg = decision.spare_for_target(nodes, pods, dep, spec, inp)
        else:
            spare, spare_msg = None, "spare GPUs unknown (no Nodes in the input)"
        plan, spare_msg = decision.plan_for_target(inp, spec, dep, hpa_min, spare, spare_msg)
        pdb = next(
            (
                d
                for d in others
                if d.get("kind") == "PodDisruptionBudget" and _name_of(d) == icap.metadata.name
            ),
            None,
        )
        uid = str((doc.get("metadata") or {}).get("uid") or "")
        world = decision.World(
            deployment=dep,
            hpa_min_replicas=hpa_min,
            foreign_pdb=decision.foreign_pdb(pdb, icap.metadata.name, uid, KIND),
            now=time.time(),
        )
        chosen = decision.decide(
            spec,
            f"{ns}/{icap.metadata.name}",
            resolved,
            plan,
            world,
            spare_message=spare_msg,
            windows=windows,
        )
        extra["flags"] = dict(chosen.flags) if chosen.change else {}
        extra["patch"] = _patch_json(chosen, target, dep, resolved.container_index)
        extra["decision"] = {
            "action": chosen.action,
            "reason": chosen.reason,
            "conditions": [
                {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
                for c in chosen.conditions
            ],
            "held": list(chosen.held),
            "pdbMinAvailable": chosen.pdb_min_available,
        }
        if "container" not in extra["patch"] and extra["patch"].get("strategicMergePatch"):
            new = apply_strategic(dep, extra["patch"]["strategicMergePatch"])
            c = new["spec"]["template"]["spec"]["containers"][resolved.container_index or 0]
            extra["patch"]["container"] = {"command": c.get("command"), "args": c.get("args")}
    src = resolved.model_source
    if src is not None:
        out = {"model": src.json(), **plan_json(plan, extra)}
        ckpt = checkpoint_json(src, plan.input.model)
        if ckpt is not None:
            out["checkpoint"] = ckpt
    else:
        out = {"model": _config_model_json(spec), **plan_json(plan, extra)}
    text = table(
        plan,
        f"{icap.metadata.name}: {plan.input.model.name} on "
        f"{plan.input.gpu.name} TP={plan.input.tp} PP={plan.input.pp}, vLLM "
        f"{resolved.engine_version} ({resolved.engine_version_source})",
    )
    pj = extra["patch"]
    text += "\n\nWould patch " + target + ": "
    if pj.get("strategicMergePatch"):
        if pj.get("note"):
            text += pj["note"] + "\n"
        text += "\n" + yaml.safe_dump(pj["strategicMergePatch"], sort_keys=False).rstrip()
    else:
        text += pj["note"]
    if resolved.conflicts:
        text += "\nConflicts: " + "; ".join(resolved.conflicts)
    return out, text, plan


#: exit codes of ``plan -o patch`` (README "Exit codes")
EXIT_NOTHING_TO_PATCH = 3
EXIT_NO_DEPLOYMENT = 4
EXIT_REFUSED = 5


def _patch_json(chosen: Any, target: str, dep: dict[str, Any], index: int | None) -> dict[str, Any]:
    """The ``patch`` object of ``plan -o json``: what the operator does to the Deployment."""
    out: dict[str, Any] = {"target": target, "action": chosen.action, "reason": chosen.reason}
    if chosen.held:
        out["held"] = list(chosen.held)
    if chosen.action == "patch":
        out["strategicMergePatch"] = chosen.patch
    elif chosen.action == "refuse":
        message = next(c.message for c in chosen.conditions if c.type == "Applied")
        out["note"] = f"not patched: {chosen.reason}: {message}"
        out["message"] = message
    elif spec_mode_recommend(chosen) or chosen.action == "wait":
        # the operator writes this patch in mode Enforce / once the rollout settles
        out["strategicMergePatch"] = dict(chosen.recommended.patch)
        message = next(c.message for c in chosen.conditions if c.type == "Applied")
        out["note"] = (
            "mode Recommend: the operator writes nothing; this is the patch it recommends"
            if chosen.reason == "RecommendOnly"
            else f"the operator writes this once the rollout has settled ({message})"
        )
    else:
        message = next((c.message for c in chosen.conditions if c.type == "Applied"), "")
        out["note"] = f"nothing to change: {message}"
    if chosen.recommended is not None:
        out["changedFlags"] = {
            k: {"from": v[0], "to": v[1]} for k, v in chosen.recommended.changed_flags.items()
        }
    return out


def spec_mode_recommend(chosen: Any) -> bool:
    return bool(chosen.reason == "RecommendOnly" and chosen.recommended is not None)


def _config_model_json(spec: Any) -> dict[str, Any]:
    """The ``model`` object for a config given in the manifest (a ConfigMap or inline)."""
    ref = spec.model.config_map_ref
    return {
        "source": "local",
        "id": f"configmap/{ref.name}/{ref.key}" if ref is not None else "inline config",
        "revision": None,
        "checkpoint_bytes": None,
        "disk_bytes": None,
    }


def _unsupported_result(icap: Any, resolved: Any, chosen: Any) -> tuple[dict[str, Any], str, None]:
    """A plan refused because the container sets what the ledger does not model."""
    spec = icap.spec
    message = resolved.unsupported_message()
    out = {
        "name": icap.metadata.name,
        "namespace": icap.metadata.namespace,
        "supported": False,
        "reason": "UnsupportedFlag",
        "unsupported": [{"name": u.name, "why": u.why} for u in resolved.unsupported],
        "patch": {
            "target": f"deployment/{spec.target_ref.name}",
            "action": chosen.action,
            "reason": chosen.reason,
            "note": "not patched: Supported=False",
        },
    }
    text = (
        f"{icap.metadata.name}: Supported=False (UnsupportedFlag): the vLLM container sets "
        f"what the ledger does not model, so no plan is made: {message}\n\nWould patch "
        f"deployment/{spec.target_ref.name}: nothing (Supported=False)"
    )
    return out, text, None


def _sizing_overrides(a: argparse.Namespace, inp: PlanInput) -> PlanInput:
    """--sizing / --preemption-target / --hbm-efficiency over the spec's (or the defaults)."""
    if a.preemption_target is not None and not 0 < a.preemption_target < 0.5:
        raise CliError(f"--preemption-target must be in (0, 0.5), got {a.preemption_target}")
    return replace(
        inp,
        sizing_rule=a.sizing or inp.sizing_rule,
        preemption_target=(
            a.preemption_target if a.preemption_target is not None else inp.preemption_target
        ),
        hbm_efficiency=a.hbm_efficiency if a.hbm_efficiency is not None else inp.hbm_efficiency,
    )


def _prices(a: argparse.Namespace) -> dict[str, float]:
    table = None
    if a.gpu_prices:
        try:
            table = yaml.safe_load(_read_text(a.gpu_prices))
        except yaml.YAMLError as exc:
            raise CliError(f"--gpu-prices {a.gpu_prices}: not valid YAML: {exc}") from None
        if not isinstance(table, dict):
            raise CliError(f"--gpu-prices {a.gpu_prices}: expected a mapping GPU: price")
    return parse_prices(a.gpu_price, table)


def _add_whatifs(a: argparse.Namespace, result: tuple[dict[str, Any], str, Any]) -> str:
    """levers[] always; options[] with --sweep. Returns the text to append to the table."""
    out, _, plan = result
    if plan is None:  # no plan was made (Supported=False): nothing to vary
        return ""
    found = levers(plan)
    out["levers"] = [
        {"name": x["name"], **{k: v for k, v in x.items() if k != "name"}} for x in found
    ]
    text = ""
    if found:
        text += "\n\nLevers (each a what-if plan)\n" + "\n".join(f"  {x['summary']}" for x in found)
    if a.sweep or a.gpu_price or a.gpu_prices or a.sweep_chart:
        prices = _prices(a)
        options = sweep(plan.input, prices)
        out["options"] = [o.to_json() for o in options]
        text += "\n\n" + sweep_table(out["options"], bool(prices))
        if a.sweep_chart:
            sweep_chart(out["options"], a.sweep_chart)
            print(f"sweep chart written to {a.sweep_chart}", file=sys.stderr)
    return text


def cmd_plan(a: argparse.Namespace) -> int:
    if a.file and a.model:
        raise CliError("plan: give either FILE.yaml or --model, not both")
    if a.file:
        results = _manifest_plans(a)
    else:
        results = [_flags_plan(a)]
    results = [(r[0], r[1] + _add_whatifs(a, r), r[2]) for r in results]
    patch_code = 0
    if a.latency_chart:
        latency_chart(results[0][2], a.latency_chart)
        print(f"latency chart written to {a.latency_chart}", file=sys.stderr)
    if a.output == "json":
        payload: Any = results[0][0] if len(results) == 1 else [r[0] for r in results]
        print(json.dumps(payload, indent=2, default=str))
    elif a.output == "yaml":
        payload = results[0][0] if len(results) == 1 else [r[0] for r in results]
        print(yaml.safe_dump(json.loads(json.dumps(payload, default=str)), sort_keys=False))
    elif a.output == "patch":
        if not a.file:
            raise CliError("-o patch needs FILE.yaml (an InferenceCapacity and its Deployment)")
        patch_code = _print_patches(results)
    else:
        print("\n\n".join(r[1] for r in results))
    if a.chart and results[0][2] is not None:
        chart(results[0][2], a.chart)
        print(f"chart written to {a.chart}", file=sys.stderr)
    errors = [r[0]["error"] for r in results if r[0].get("error")]
    for e in errors:
        print(f"inference-capacity: error: {e}", file=sys.stderr)
    if errors:
        return EXIT_NOT_FITS
    refused = [r[0] for r in results if r[2] is None]
    if a.fail_if_not_fits and refused:
        for out in refused:
            names = "; ".join(f"{u['name']}: {u['why']}" for u in out["unsupported"])
            print(
                f"inference-capacity: error: {out['name']}: Supported=False: {names}",
                file=sys.stderr,
            )
        return EXIT_NOT_FITS
    if a.fail_if_not_fits and not all(r[2] is not None and r[2].fits for r in results):
        return EXIT_NOT_FITS
    if a.fail_if_not_fits:
        # the plan fits but the operator would refuse to apply it (a spec/container conflict,
        # too few GPUs per pod, a foreign PDB, no safe rollout)
        refusals = [r[0] for r in results if (r[0].get("patch") or {}).get("action") == "refuse"]
        for out in refusals:
            print(
                f"inference-capacity: error: {out.get('name')}: {out['patch']['note']}",
                file=sys.stderr,
            )
        if refusals:
            return EXIT_NOT_FITS
    return patch_code


def _print_patches(results: list[tuple[dict[str, Any], str, Any]]) -> int:
    """Print the strategic-merge patch the operator writes (``kubectl patch --type strategic``);
    say on stderr why there is none. Exit code: 0 when every resource has a patch, else the
    highest of 3 (nothing to change), 4 (no Deployment in the input), 5 (the operator refuses)."""
    patches: list[Any] = []
    code = 0
    for out, _, _ in results:
        pj = out.get("patch") or {}
        name = out.get("name", "")
        if pj.get("strategicMergePatch"):
            patches.append(pj["strategicMergePatch"])
            if pj.get("note"):
                print(f"inference-capacity: {name}: {pj['note']}", file=sys.stderr)
            continue
        patches.append(None)
        if pj.get("reason") == "NoDeployment":
            why, rc = (
                f"no Deployment {pj.get('target')} in the input (give it in FILE or with "
                "--deployment): nothing to patch",
                EXIT_NO_DEPLOYMENT,
            )
        elif pj.get("action") == "refuse":
            why, rc = pj.get("note", "not patched"), EXIT_REFUSED
        else:
            why, rc = pj.get("note", "nothing to change"), EXIT_NOTHING_TO_PATCH
        print(f"inference-capacity: {name}: {why}", file=sys.stderr)
        code = max(code, rc)
    if any(p is not None for p in patches):
        print(json.dumps(patches[0] if len(patches) == 1 else patches, indent=2))
    return code


def cmd_crd(_: argparse.Namespace) -> int:
    from .api.crd import render_crd_yaml

    sys.stdout.write(render_crd_yaml())
    return 0


def cmd_models(_: argparse.Namespace) -> int:
    for name in catalog_names():
        try:
            m = load_model(name)
            desc = (
                f"{m.model_type:<18} {m.num_parameters / 1e9:>8.2f}B  "
                f"{','.join(m.attention_kinds)}"
                + (f"  {m.quantization.method}" if m.quantization else "")
            )
        except ValueError as exc:
            desc = f"not sizeable: {exc}"
        print(f"{name:<50} {desc}")
    return 0


def cmd_gpus(_: argparse.Namespace) -> int:
    for g in list_gpus():
        bw = g.hbm_bandwidth_bytes_per_s
        print(
            f"{g.name:<18} {g.total_bytes / GiB:>8.2f} GiB  "
            f"{(bw or 0) / 1e12:>5.2f} TB/s  {g.vendor}"
        )
    return 0


def cmd_run(a: argparse.Namespace) -> int:
    from .controller import k8s
    from .controller.main import run_operator
    from .settings import Settings

    try:
        config = Settings.from_env().replace(
            namespaces=tuple(a.namespace),
            standalone=a.standalone,
            peering=a.peering,
            liveness=a.liveness,
            metrics_port=a.metrics_port,
            verbose=a.verbose,
            **({"peering_priority": a.priority} if a.priority is not None else {}),
            **(
                {"prometheus_allowed_url_prefixes": tuple(a.prometheus_allowed_url_prefix)}
                if a.prometheus_allowed_url_prefix
                else {}
            ),
        )
        code: int = run_operator(config)
    except k8s.Unreachable as exc:
        raise CliError(f"run: {exc}") from None
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    handlers = {
        "plan": cmd_plan,
        "crd": cmd_crd,
        "models": cmd_models,
        "gpus": cmd_gpus,
        "run": cmd_run,
    }
    try:
        return handlers[a.command](a)
    except (CliError, ValueError, KeyError, FileNotFoundError) as exc:
        msg = str(exc)
        if isinstance(exc, KeyError):
            msg = f"missing key {msg}"
        print(f"inference-capacity: error: {msg}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:
        return 0
    except (RecursionError, OverflowError, ZeroDivisionError, MemoryError) as exc:
        # input that slipped past the bounds: one line, not a traceback (a test fuzzes for it)
        print(
            f"inference-capacity: error: input out of bounds ({type(exc).__name__}: {exc})",
            file=sys.stderr,
        )
        return EXIT_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
