"""A plan as JSON data: everything ``plan -o json`` prints, and the parts the controller writes
to the CRD status (``ledger``, ``vllmStartup``, ``recommendation``, ``sizing``, ``latency``).
The keys are a contract: snake_case for the CLI, camelCase where they go to the status."""

from __future__ import annotations

from typing import Any

from ..api import VllmStartup
from ..planner import Plan, format_utilization
from ..risks import risks_json
from ..sizing import PATHS, Z95, Z99, LatencyPoint, LogNormal
from ..units import GiB

__all__ = [
    "latency_json",
    "latency_status",
    "ledger_json",
    "plan_json",
    "recommendation_json",
    "sizing_json",
    "sizing_status",
    "startup_json",
]


def _point_json(pt: LatencyPoint) -> dict[str, Any]:
    return {
        "max_num_seqs": pt.max_num_seqs,
        "itl_ms_p50": round(pt.itl_ms_p50, 3),
        "itl_ms_p95": round(pt.itl_ms_p95, 3),
        "output_tokens_per_s": round(pt.output_tokens_per_s, 1),
        "preemption_probability": round(pt.preemption_probability, 5),
        "decode_only_ms_p50": round(pt.decode_only_ms_p50, 3),
        "bound": pt.bound,
        "itl_ms_p99": round(pt.itl_ms_p99, 3),
        "tpot_ms_mean": round(pt.tpot_ms_mean, 3),
        "ttft_ms_p50": round(pt.ttft_ms_p50, 1),
        "ttft_ms_p95": round(pt.ttft_ms_p95, 1),
        "output_tokens_per_s_per_gpu": round(pt.output_tokens_per_s_per_gpu, 1),
        "saturated": pt.saturated,
    }


#: the point's keys ``latency`` of ``plan -o json`` repeats at the chosen max-num-seqs
_AT_KEYS = (
    "itl_ms_p50",
    "itl_ms_p95",
    "itl_ms_p99",
    "tpot_ms_mean",
    "ttft_ms_p50",
    "ttft_ms_p95",
    "output_tokens_per_s",
    "output_tokens_per_s_per_gpu",
    "decode_only_ms_p50",
    "saturated",
)


def _fit_json(q: Any) -> dict[str, Any]:
    ln = LogNormal.fit(q)
    return {
        "given": {"p50": q.p50, "p95": q.p95, "p99": q.p99},
        "mu": round(ln.mu, 6),
        "sigma": round(ln.sigma, 6),
        "fitted": {"p95": round(ln.quantile(Z95)), "p99": round(ln.quantile(Z99))},
    }


def sizing_json(plan: Plan) -> dict[str, Any]:
    """``sizing`` of ``plan -o json`` (snake_case keys are the contract)."""
    n = plan.recommendation.max_num_seqs
    d = plan.distribution
    out: dict[str, Any] = {
        "rule": plan.input.sizing_rule,
        "max_num_seqs": n,
        "preemption_probability": None,
        "preemption_probability_standard_error": None,
        "preemption_probability_at_default": None,
        "default_max_num_seqs": None,
        "preemption_target": plan.input.preemption_target,
        "limited_by": plan.seqs.limited_by if plan.seqs is not None else "engine",
    }
    if d is None:
        return out
    p = d.probability(n)
    out.update(
        {
            "preemption_probability": round(p, 5),
            "preemption_probability_standard_error": round((p * (1 - p) / PATHS) ** 0.5, 5),
            "preemption_probability_at_default": round(d.preemption_probability_at_default, 5),
            "default_max_num_seqs": d.default_max_num_seqs,
            "distribution_max_num_seqs": d.max_num_seqs,
            "binding_mix": d.binding_mix,
            "usable_blocks": round(d.budget_blocks, 1),
            "shared_prefix_blocks": d.shared_prefix_blocks,
            "mean_blocks_per_seq": round(d.blocks_per_seq, 2),
            "mean_tokens_per_seq": round(d.tokens_per_seq, 1),
            "by_mix": {m.name: m.max_num_seqs for m in d.mixes},
        }
    )
    wl = plan.input.workload
    if wl is not None:
        out["fit"] = [
            {
                "cohort": c.name,
                "prompt_tokens": _fit_json(c.prompt),
                "output_tokens": _fit_json(c.output),
            }
            for c in wl.cohorts
        ]
    return out


def latency_json(plan: Plan) -> dict[str, Any]:
    """``latency`` of ``plan -o json``."""
    lat = plan.latency
    wl = plan.input.workload
    out: dict[str, Any] = {
        "itl_ms_p50": None,
        "itl_ms_p95": None,
        "output_tokens_per_s": None,
        "itl_target_ms": wl.itl_target_ms if wl is not None else None,
        "itl_quantile": wl.itl_quantile if wl is not None else "p95",
        "ttft_target_ms": wl.ttft_target_ms if wl is not None else None,
        "itl_limit": None,
    }
    if lat is None:
        return out
    if lat.at_max_num_seqs is not None:
        pt = _point_json(lat.at_max_num_seqs)
        out.update({k: pt[k] for k in _AT_KEYS})
        out["bound"] = pt["bound"]
    out["itl_limit"] = lat.itl_limit
    out["arrivals"] = lat.arrivals
    out["hbm_efficiency"] = lat.hbm_efficiency
    out["achievable_bandwidth_bytes_per_s"] = lat.bandwidth_bytes_per_s
    out["curve"] = [_point_json(pt) for pt in lat.curve]
    return out


def sizing_status(plan: Plan) -> dict[str, Any] | None:
    """``status.sizing`` (camelCase), or None without a workload distribution."""
    d = plan.distribution
    if d is None:
        return None
    n = plan.recommendation.max_num_seqs
    return {
        "rule": plan.input.sizing_rule,
        "maxNumSeqs": n,
        "preemptionProbability": round(d.probability(n), 5),
        "preemptionProbabilityAtDefault": round(d.preemption_probability_at_default, 5),
        "defaultMaxNumSeqs": d.default_max_num_seqs,
        "preemptionTarget": plan.input.preemption_target,
        "limitedBy": plan.seqs.limited_by if plan.seqs is not None else "engine",
        "bindingMix": d.binding_mix,
    }


def latency_status(plan: Plan) -> dict[str, Any] | None:
    """``status.latency`` (camelCase), or None when the model has no numbers."""
    lat = plan.latency
    if lat is None:
        return None
    at = lat.at_max_num_seqs
    return {
        "itlMsP50": round(at.itl_ms_p50, 3) if at else None,
        "itlMsP95": round(at.itl_ms_p95, 3) if at else None,
        "itlMsP99": round(at.itl_ms_p99, 3) if at else None,
        "ttftMsP50": round(at.ttft_ms_p50, 1) if at else None,
        "ttftMsP95": round(at.ttft_ms_p95, 1) if at else None,
        "saturated": at.saturated if at else None,
        "outputTokensPerS": round(at.output_tokens_per_s, 1) if at else None,
        "itlLimit": lat.itl_limit,
        "arrivals": lat.arrivals,
        "hbmEfficiency": lat.hbm_efficiency,
    }


def ledger_json(plan: Plan) -> dict[str, Any]:
    """The ``status.ledger`` object (camelCase, as the CRD has it)."""
    pred = plan.prediction
    r = pred.ranks[pred.binding_rank]
    return {
        "ranks": [
            {
                "rank": rl.rank,
                "stage": rl.stage,
                "items": [
                    {
                        "name": i.name,
                        "lifetime": i.lifetime,
                        "owner": i.owner,
                        "bytes": i.bytes,
                        "gib": round(i.gib, 4),
                        "provenance": i.provenance,
                    }
                    for i in rl.items
                ],
                "totalBytes": rl.total,
            }
            for rl in plan.ledger
        ],
        "deviceBytes": pred.total_bytes,
        "kvBytesPerToken": plan.kv_bytes_per_token_rank,
        "kvTokenCapacity": pred.kv_cache_tokens,
        "numGpuBlocks": pred.num_gpu_blocks,
        "blockSize": r.layout.block_size,
    }


def startup_json(plan: Plan) -> dict[str, Any]:
    """``status.vllmStartup``: the prediction's one serializer
    (:meth:`StartupPrediction.to_json`, the ``vllm_startup`` of ``plan -o json``) cut to the
    fields the status model :class:`~inference_capacity.api.VllmStartup` declares, spelled by
    that model (its camelCase aliases). Built without validation, as the hand-spelled mapping
    before it was."""
    j = plan.prediction.to_json()
    fields: dict[str, Any] = {name: j[name] for name in VllmStartup.model_fields}
    return VllmStartup.model_construct(**fields).model_dump(by_alias=True)


def recommendation_json(plan: Plan) -> dict[str, Any]:
    rec = plan.recommendation
    ro = rec.rollout
    return {
        "gpuMemoryUtilization": float(format_utilization(rec.gpu_memory_utilization)),
        "kvCacheMemoryBytes": rec.kv_cache_memory_bytes,
        "maxNumSeqs": rec.max_num_seqs,
        "maxModelLen": rec.max_model_len,
        "maxNumBatchedTokens": rec.max_num_batched_tokens,
        "kvCacheDtype": rec.kv_cache_dtype,
        "perReplicaConcurrency": rec.per_replica_concurrency,
        "replicas": ro.replicas,
        "minReplicasForPeak": ro.min_replicas_for_peak,
        "maxSurge": ro.max_surge,
        "maxUnavailable": ro.max_unavailable,
        "pdbMinAvailable": ro.pdb_min_available,
        "provenance": dict(rec.provenance),
    }


def plan_json(plan: Plan, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything ``plan -o json`` prints. ``vllm_startup`` keys are a contract; the top-level
    ``model`` object (where the model came from) is added by the caller, which knows."""
    m = plan.input.model
    pred = plan.prediction
    out: dict[str, Any] = {
        "architecture": {
            "name": m.name,
            "model_type": m.model_type,
            "architecture": m.architecture,
            "parameters": m.num_parameters,
            "parameters_by_group": m.parameters_by_group(),
            "layers": m.num_layers,
            "attention_kinds": list(m.attention_kinds),
            "quantization": m.quantization.method if m.quantization else None,
            "dtype": pred.settings.dtype,
        },
        "gpu": {
            "name": plan.input.gpu.name,
            "total_bytes": plan.input.gpu.total_bytes,
            "total_gib": round(plan.input.gpu.total_bytes / GiB, 2),
        },
        "parallelism": {"tensor_parallel": plan.input.tp, "pipeline_parallel": plan.input.pp},
        "vllm_startup": pred.to_json(),
        "kv": {
            "bytes_per_token_per_rank": plan.kv_bytes_per_token_rank,
            "bytes_per_token_per_replica": plan.kv_bytes_per_token_model,
            "kv_cache_dtype": pred.settings.kv_cache_dtype,
            "token_capacity": pred.kv_cache_tokens,
            "num_gpu_blocks": pred.num_gpu_blocks,
            "block_size": pred.ranks[pred.binding_rank].layout.block_size,
        },
        "ledger": ledger_json(plan),
        "recommendation": recommendation_json(plan),
        "fits": plan.fits,
        "reason": plan.reason,
        "message": plan.message,
        "rollout": {
            "safe": plan.recommendation.rollout.safe,
            "reason": plan.recommendation.rollout.reason,
            "message": plan.recommendation.rollout.message,
        },
        "notes": list(plan.notes),
        "sizing": sizing_json(plan),
        "latency": latency_json(plan),
        # the six OOM kinds per resource (risks.py): margin in bytes and the flag that moves it
        "risks": risks_json(plan),
    }
    if extra:
        out.update(extra)
    return out
