"""``plan --model ... --gpu ...``: a what-if from flags, the inverse pool, levers and the sweep."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

import yaml

from ..decision import UNMODELLED
from ..engines.versions import NEWEST_SUPPORTED
from ..engines.vllm_config import EngineConfig, EngineConfigError, read_engine
from ..hardware import custom_gpu, get_gpu
from ..model.source import checkpoint_json, describe, resolve_model_ref
from ..planner import Headroom, PlanInput, make_plan
from ..report import (
    fits_message,
    plan_json,
    sweep_chart,
    sweep_table,
    table,
    why_not_fits,
)
from ..resolve import multimodal_profile
from ..units import GiB
from ..whatif import levers, parse_prices, sweep, workload_from_flags
from .common import CliError, _read_text, _sizing_overrides

#: what the numbers of a what-if refused as Supported=False are (the encoder profile left out)
TEXT_ONLY_NUMBERS = (
    "The numbers are those of the text-only profile, i.e. what vLLM does with "
    "--skip-mm-profiling or every modality at 0 in --limit-mm-per-prompt"
)


#: the what-if flags that are vLLM's multimodal profile flags
_MM_FLAGS = frozenset({"limit-mm-per-prompt", "mm-processor-kwargs", "skip-mm-profiling"})


def whatif_vllm_args(a: argparse.Namespace) -> list[str]:
    """The what-if flags of ``plan --model`` as the ``vllm serve`` flags they stand for (a
    container carrying these is sized the same)."""
    out: list[str] = []

    def opt(flag: str, value: Any) -> None:
        if value is not None:
            out.extend((f"--{flag}", str(value)))

    opt("revision", a.revision)
    opt("tensor-parallel-size", a.tp)
    opt("pipeline-parallel-size", a.pp)
    opt("data-parallel-size", a.dp)
    if a.enable_expert_parallel:
        out.append("--enable-expert-parallel")
    opt("gpu-memory-utilization", a.gpu_memory_utilization)
    opt("max-model-len", a.max_model_len)
    opt("max-num-seqs", a.max_num_seqs)
    opt("max-num-batched-tokens", a.max_num_batched_tokens)
    opt("block-size", a.block_size)
    opt("kv-cache-dtype", a.kv_cache_dtype)
    opt("dtype", a.dtype)
    opt("quantization", a.quantization)
    if a.enforce_eager:
        out.append("--enforce-eager")
    if a.max_loras:
        out.append("--enable-lora")
        opt("max-loras", a.max_loras)
        opt("max-lora-rank", a.max_lora_rank)
    opt("limit-mm-per-prompt", a.limit_mm_per_prompt)
    opt("mm-processor-kwargs", a.mm_processor_kwargs)
    if a.skip_mm_profiling:
        out.append("--skip-mm-profiling")
    return out


def whatif_env(a: argparse.Namespace) -> dict[str, str | None]:
    """The ``VLLM_*`` variables ``plan --model``'s ``--engine`` stands for (``VLLM_USE_V1``)."""
    return {"VLLM_USE_V1": "0" if a.engine == "v0" else "1"} if a.engine else {}


def whatif_engine(a: argparse.Namespace, version: str) -> EngineConfig:
    """The what-if's launch read as a container's: ``vllm serve MODEL`` with
    :func:`whatif_vllm_args` and :func:`whatif_env`, through :func:`read_engine`."""
    try:
        return read_engine([a.model, *whatif_vllm_args(a)], whatif_env(a), version)
    except EngineConfigError as exc:
        raise CliError(f"plan: {exc}") from None


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
    version = a.engine_version or NEWEST_SUPPORTED
    # the what-if flags as the vLLM flags they stand for, read and classified as a container's
    # (the table of the release's own flags, the modelled/neutral/refused lists, the multimodal
    # profile's rules)
    cfg = whatif_engine(a, version)
    mm_notes: list[str] = []
    refused = list(cfg.refused)
    mm_limits, skip_mm, shape = multimodal_profile(
        shape, version, cfg.multimodal, refused, mm_notes, source.preprocessor
    )
    unsupported = None
    mm_refused = False
    if refused:
        # a what-if still shows numbers (a manifest's plan and the operator make none,
        # cli/manifest.py); a refused multimodal flag: those of the text-only profile, labelled
        mm_refused = any(u.name.removeprefix("--") in _MM_FLAGS for u in refused)
        unsupported = (
            f"Supported=False (UnsupportedFlag): the command line {UNMODELLED}: "
            + "; ".join(str(u) for u in refused)
            + (f". {TEXT_ONLY_NUMBERS}" if mm_refused else "")
        )
        skip_mm = skip_mm or mm_refused

    settings = replace(
        cfg.settings(),
        mm_limits=mm_limits,
        skip_mm_profiling=skip_mm,
        compile_cache=a.compile_cache or "warm",
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
        itl_quantile=a.itl_quantile or "p95",
        ttft_target_ms=a.ttft_target_ms,
    )
    base = _sizing_overrides(
        a,
        PlanInput(
            model=shape,
            gpu=gpu,
            tp=cfg.parallel.tensor_parallel_size or 1,
            pp=cfg.parallel.pipeline_parallel_size or 1,
            engine=settings,
            workload=workload,
            headroom=Headroom(operational_fraction=headroom),
            notes=tuple(mm_notes),
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
    if unsupported is not None:
        out["supported"] = False
        out["unsupported"] = [{"name": u.name, "why": u.why} for u in refused]
        out["unsupported_message"] = unsupported
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
        best = (
            whatif  # the same inputs when no utilization was given
            if a.gpu_memory_utilization is None
            else make_plan(replace(base, choose_utilization=True, choose_max_num_seqs=False))
        )
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
    text = describe(source, shape) + "\n\n"
    if unsupported is not None:
        text += unsupported + "\n\n"
    text += table(shown)
    if "error" in out:
        text += "\n\nNot usable: " + out["error"]
    elif rec.fits:
        text += "\n\nRecommended" + (" for the text-only profile" if mm_refused else "") + ": "
        text += " ".join(f"--{k} {v}" for k, v in rec.recommendation.flags().items())
    else:
        text += f"\n\nNot usable: {rec.reason}: {fits_message(rec)}"
        text += "".join(f"\n  {w}" for w in why_not_fits(rec))
    if kv_pool is not None:
        # --fail-if-not-fits judges the plan asked for: the inverse one
        return out, text, rec
    return out, text, rec if workload is not None else whatif


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
