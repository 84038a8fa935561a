"""Render a plan: JSON for machines (CLI ``-o json`` and the CRD status), a text table for
people, and the per-rank stacked-bar chart (seed 000, figure 1)."""

from __future__ import annotations

from typing import Any

from ..engines.vllm import GiB
from ..planner import Plan, format_utilization
from ..sizing.distribution import PATHS, Z95, Z99, LogNormal
from ..sizing.latency import LatencyPoint


def _point_json(pt: LatencyPoint) -> dict[str, Any]:
    return {
        "max_num_seqs": pt.max_num_seqs,
        "itl_ms_p50": round(pt.itl_ms_p50, 3),
        "itl_ms_p95": round(pt.itl_ms_p95, 3),
        "output_tokens_per_s": round(pt.output_tokens_per_s, 1),
        "preemption_probability": round(pt.preemption_probability, 5),
        "decode_only_ms_p50": round(pt.decode_only_ms_p50, 3),
        "bound": pt.bound,
    }


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
        "itl_limit": None,
    }
    if lat is None:
        return out
    if lat.at_max_num_seqs is not None:
        pt = _point_json(lat.at_max_num_seqs)
        out.update(
            {
                k: pt[k]
                for k in ("itl_ms_p50", "itl_ms_p95", "output_tokens_per_s", "decode_only_ms_p50")
            }
        )
        out["bound"] = pt["bound"]
    out["itl_limit"] = lat.itl_limit
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
        "outputTokensPerS": round(at.output_tokens_per_s, 1) if at else None,
        "itlLimit": lat.itl_limit,
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
    """``status.vllmStartup`` (camelCase)."""
    j = plan.prediction.to_json()
    return {
        "weightsGib": j["weights_gib"],
        "activationPeakGib": j["activation_peak_gib"],
        "nonTorchGib": j["non_torch_gib"],
        "cudaGraphGib": j["cuda_graph_gib"],
        "availableKvCacheGib": j["available_kv_cache_gib"],
        "numGpuBlocks": j["num_gpu_blocks"],
        "kvCacheTokens": j["kv_cache_tokens"],
        "maxConcurrency": j["max_concurrency"],
        "starts": j["starts"],
        "error": j["error"],
    }


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
    }
    if extra:
        out.update(extra)
    return out


def table(plan: Plan, title: str = "") -> str:
    pred = plan.prediction
    rs = pred.settings
    lines: list[str] = []
    m = plan.input.model
    lines.append(
        title
        or f"{m.name} on {plan.input.gpu.name} "
        f"({plan.input.gpu.total_bytes / GiB:.2f} GiB) TP={plan.input.tp} "
        f"PP={plan.input.pp}, vLLM {rs.version} ({rs.era.value})"
    )
    lines.append(
        f"  parameters {m.num_parameters:,}  dtype {rs.dtype}  quantization "
        f"{m.quantization.method if m.quantization else 'none'}  KV dtype "
        f"{rs.kv_cache_dtype}"
    )
    for rl in plan.ledger:
        lines.append("")
        lines.append(
            f"Rank {rl.rank} (stage {rl.stage}) ledger — {rl.device_bytes / GiB:.2f} GiB device"
        )
        lines.append(
            f"  {'item':<26} {'GiB':>9} {'bytes':>16}  {'lifetime':<9} {'provenance':<10} budget"
        )
        for i in rl.items:
            lines.append(
                f"  {i.name:<26} {i.gib:>9.3f} {i.bytes:>16,}  {i.lifetime:<9} "
                f"{i.provenance:<10} {'vLLM' if i.in_vllm_budget else 'margin'}"
            )
        lines.append(f"  {'total':<26} {rl.total / GiB:>9.3f} {rl.total:>16,}")
    j = pred.to_json()
    lines.append("")
    lines.append("vLLM startup (predicted log lines)")
    lines.append(
        f"  Model loading took {j['weights_gib']:.2f} GiB; activation peak "
        f"{j['activation_peak_gib']:.2f} GiB; non-torch {j['non_torch_gib']:.2f} GiB; "
        f"CUDA graphs {j['cuda_graph_gib']:.2f} GiB"
    )
    lines.append(
        f"  Available KV cache memory: {j['available_kv_cache_gib']:.2f} GiB "
        f"(requested {j['requested_gib']:.2f} GiB = {rs.gpu_memory_utilization} × total)"
    )
    lines.append(
        f"  GPU KV cache size: {pred.kv_cache_tokens:,} tokens "
        f"({pred.num_gpu_blocks:,} blocks), Maximum concurrency for "
        f"{rs.max_model_len:,} tokens per request: {pred.max_concurrency:.2f}x"
    )
    lines.append(f"  starts: {'yes' if pred.starts else 'NO — ' + str(pred.error)}")
    lines.append("")
    lines.append(
        f"KV bytes per token: {plan.kv_bytes_per_token_rank:,} per rank "
        f"({plan.kv_bytes_per_token_rank / 1024:.1f} KiB), "
        f"{plan.kv_bytes_per_token_model:,} per replica"
    )
    rec = plan.recommendation
    ro = rec.rollout
    lines.append("")
    lines.append("Recommendation")
    flags = rec.flags()
    lines.append("  vLLM flags: " + " ".join(f"--{k} {v}" for k, v in flags.items()))
    lines.append(
        f"  replicas {ro.replicas} (peak needs {ro.min_replicas_for_peak}), maxSurge "
        f"{ro.max_surge}, maxUnavailable {ro.max_unavailable}, PDB minAvailable "
        f"{ro.pdb_min_available}"
    )
    lines.append(f"  fits: {'yes' if plan.fits else 'NO'} ({plan.reason}) {plan.message}")
    lines.extend(_sizing_lines(plan))
    lines.append(f"  rollout: {'safe' if ro.safe else 'NOT SAFE'} ({ro.reason}) {ro.message}")
    for n in plan.notes:
        lines.append(f"  note: {n}")
    return "\n".join(lines)


def _sizing_lines(plan: Plan) -> list[str]:
    d = plan.distribution
    if d is None:
        return []
    n = plan.recommendation.max_num_seqs
    lines = [
        f"  sizing: {plan.input.sizing_rule}; P(preemption) {d.probability(n):.2%} at "
        f"max-num-seqs {n}, {d.preemption_probability_at_default:.2%} at vLLM's default "
        f"{d.default_max_num_seqs} (target {d.target:.1%}; distribution rule allows "
        f"{d.max_num_seqs}, {d.binding_mix} mix binds)"
    ]
    lat = plan.latency
    if lat is None:
        return lines
    if lat.at_max_num_seqs is not None:
        at = lat.at_max_num_seqs
        lines.append(
            f"  latency: ITL p50 {at.itl_ms_p50:.1f} ms, p95 {at.itl_ms_p95:.1f} ms, "
            f"{at.output_tokens_per_s:,.0f} output tokens/s per replica (HBM at "
            f"{lat.hbm_efficiency:.0%} of peak)"
            + (f"; ITL target allows {lat.itl_limit}" if lat.itl_limit is not None else "")
        )
    lines.append("")
    lines.append("Batch curve (per replica)")
    lines.append(
        f"  {'max-num-seqs':>12} {'ITL p50 ms':>11} {'ITL p95 ms':>11} "
        f"{'decode-only':>11} {'bound':>8} {'tokens/s':>10} {'P(preempt)':>11}"
    )
    for pt in lat.curve:
        mark = " <" if pt.max_num_seqs == n else ""
        lines.append(
            f"  {pt.max_num_seqs:>12} {pt.itl_ms_p50:>11.2f} {pt.itl_ms_p95:>11.2f} "
            f"{pt.decode_only_ms_p50:>11.2f} {pt.bound:>8} "
            f"{pt.output_tokens_per_s:>10,.0f} {pt.preemption_probability:>11.2%}{mark}"
        )
    lines.append(
        "  (ITL: a decode step carrying the steady-state prefill tokens, N × E[uncached "
        "prompt] / E[output]; decode-only: without them; bound: what limits the step)"
    )
    return lines


_COLOURS = {
    "weights": "#4C72B0",
    "lora": "#8172B3",
    "activation": "#DD8452",
    "moe": "#E5AE38",
    "non_torch": "#937860",
    "cuda_graph": "#DA8BC3",
    "kv_cache_pool": "#55A868",
    "kv_block": "#8DCB9A",
    "budget": "#CCCCCC",
    "cuda_context": "#C44E52",
    "custom": "#B07AA1",
    "allocator": "#FF9DA7",
    "post_kv": "#9C755F",
    "operational": "#76B7B2",
    "unallocated": "#EEEEEE",
}


def _colour(name: str) -> str:
    for key, c in _COLOURS.items():
        if name.startswith(key):
            return c
    return "#999999"


def _segments(rl: Any) -> list[tuple[str, str, float]]:
    """(label, colour key, GiB) of one rank's ledger, weights summed into one segment."""
    segs: list[tuple[str, str, float]] = []
    weights = sum(i.gib for i in rl.items if i.name.startswith("weights.") and i.bytes > 0)
    if weights > 0:
        segs.append(("weights", "weights", weights))
    for i in rl.items:
        if i.name.startswith("weights.") or i.bytes <= 0:
            continue
        segs.append((i.name, i.name, i.gib))
    return segs


def chart(plan: Plan, path: str) -> None:
    """Per-rank stacked bar of the ledger (GiB), saved as SVG or PNG by the file extension.

    Items tall enough carry their name and size on the bar; the small ones are listed beside
    it. The device total and vLLM's budget (``--gpu-memory-utilization``) are drawn as lines; the
    KV pool says its tokens and max-num-seqs; a plan that does not fit draws the excess above
    the device line in red."""
    _check_chart_path(path, "--chart")
    plt = _pyplot()
    pred = plan.prediction
    total = pred.total_bytes / GiB
    u = pred.settings.gpu_memory_utilization
    over = max((-rl.unallocated / GiB for rl in plan.ledger), default=0.0)
    over = max(over, 0.0)
    n = len(plan.ledger)
    fig, ax = plt.subplots(figsize=(4.5 + 2.6 * n, 7))
    label_min = 0.035 * total  # items at least this tall are labelled on the bar
    for x, rl in enumerate(plan.ledger):
        bottom = 0.0
        small: list[tuple[str, float, str]] = []
        for name, key, gib in _segments(rl):
            colour = _colour(key)
            ax.bar(
                x, gib, bottom=bottom, color=colour, edgecolor="white", linewidth=0.5, width=0.55
            )
            if name == "kv_cache_pool":
                seqs = plan.recommendation.max_num_seqs
                ax.text(
                    x,
                    bottom + gib / 2,
                    f"KV cache {gib:.2f} GiB\n{pred.kv_cache_tokens:,} tokens\nmax-num-seqs {seqs}",
                    ha="center",
                    va="center",
                    fontsize=9,
                    color="white",
                    weight="bold",
                )
            elif gib >= label_min and bottom + gib <= total:
                ax.text(
                    x,
                    bottom + gib / 2,
                    f"{name}\n{gib:.2f} GiB",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white",
                )
            else:
                small.append((name, gib, colour))
            bottom += gib
        if rl.unallocated < 0:
            deficit = -rl.unallocated / GiB
            ax.bar(
                x,
                deficit,
                bottom=total,
                color="#C44E52",
                alpha=0.9,
                hatch="//",
                edgecolor="white",
                width=0.55,
            )
            ax.text(
                x + 0.32,
                total + deficit / 2,
                f"over by\n{deficit:.2f} GiB",
                va="center",
                fontsize=8,
                color="#C44E52",
                weight="bold",
            )
        # callouts for the small items, beside the bar, top to bottom
        y = total * u * 0.93
        for name, gib, colour in reversed(small):
            ax.add_patch(
                plt.Rectangle(
                    (x + 0.32, y - total * 0.012), 0.04, total * 0.02, color=colour, clip_on=False
                )
            )
            ax.text(x + 0.38, y, f"{name} {gib:.3f} GiB", fontsize=7, va="center")
            y -= total * 0.035
    right = n - 0.5 + 0.9
    ax.axhline(total, color="black", linewidth=1.2)
    ax.text(
        right - 0.02,
        total,
        f"device {total:.2f} GiB (as CUDA reports it)",
        va="bottom",
        ha="right",
        fontsize=8,
    )
    ax.axhline(total * u, color="black", linestyle="--", linewidth=1)
    ax.text(
        right - 0.02,
        total * u,
        f"--gpu-memory-utilization {format_utilization(u)}\n= vLLM's budget {total * u:.2f} GiB",
        va="top",
        ha="right",
        fontsize=8,
    )
    ax.set_xticks(range(n), [f"rank {rl.rank}\nstage {rl.stage}" for rl in plan.ledger])
    ax.set_xlim(-0.5, right)
    ax.set_ylabel("GiB")
    ax.set_ylim(0, (total + over) * 1.04)
    fits = "fits" if plan.fits else f"DOES NOT FIT ({plan.reason})"
    ax.set_title(
        f"{plan.input.model.name} on {plan.input.gpu.name} TP{plan.input.tp} "
        f"PP{plan.input.pp}: {fits}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def sweep_table(options: list[dict[str, Any]], priced: bool) -> str:
    """The ranked options of ``plan --sweep``."""
    lines = [f"Sweep: {len(options)} options that fit, ranked"]
    lines.append(
        f"  {'#':>3} {'gpu':<16} {'tp':>2} {'kv':<5} {'replicas':>8} {'gpus':>5} "
        f"{'seqs':>5} {'P(pre)':>7} {'ITL p95':>8} {'tok/s fleet':>11} {'$/h':>8} "
        f"{'$/Mtok':>8} {'ITL ok':>6}"
    )
    for i, o in enumerate(options, 1):
        itl = f"{o['itl_ms_p95']:.1f}" if o["itl_ms_p95"] is not None else "-"
        tput = o["fleet_output_tokens_per_s"]
        cost = o["cost_per_hour"]
        per_m = o["cost_per_million_output_tokens"]
        pre = o["preemption_probability"]
        lines.append(
            f"  {i:>3} {o['gpu']:<16} {o['tp']:>2} {o['kv_cache_dtype']:<5} {o['replicas']:>8} "
            f"{o['gpus']:>5} {o['max_num_seqs']:>5} "
            f"{(f'{pre:.2%}' if pre is not None else '-'):>7} {itl:>8} "
            f"{(f'{tput:,.0f}' if tput is not None else '-'):>11} "
            f"{(f'{cost:.2f}' if cost is not None else '-'):>8} "
            f"{(f'{per_m:.3f}' if per_m is not None else '-'):>8} "
            f"{ ({True: 'yes', False: 'NO', None: '-'}[o['meets_itl']]):>6}"
        )
    if not priced:
        lines.append("  (no prices: ranked by GPUs; give --gpu-price NAME=PRICE to rank by cost)")
    return "\n".join(lines)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _check_chart_path(path: str, flag: str) -> None:
    if not (path.endswith(".svg") or path.endswith(".png")):
        raise ValueError(f"{flag}: {path!r} must end in .svg or .png")


def latency_chart(plan: Plan, path: str) -> None:
    """N → ITL p50/p95 (left axis) and output tokens/s (right), with P(preemption) marked."""
    _check_chart_path(path, "--latency-chart")
    lat = plan.latency
    if lat is None or not lat.curve:
        raise ValueError("--latency-chart: no latency curve (give a workload and a catalog GPU)")
    plt = _pyplot()
    xs = [p.max_num_seqs for p in lat.curve]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(xs, [p.itl_ms_p50 for p in lat.curve], "o-", color="#4C72B0", label="ITL p50")
    ax.plot(xs, [p.itl_ms_p95 for p in lat.curve], "s--", color="#4C72B0", label="ITL p95")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs], fontsize=7)
    ax.set_xlabel("running sequences per replica (max-num-seqs)")
    ax.set_ylabel("inter-token latency (ms)", color="#4C72B0")
    ax2 = ax.twinx()
    ax2.plot(
        xs, [p.output_tokens_per_s for p in lat.curve], "^-", color="#55A868", label="tokens/s"
    )
    ax2.set_ylabel("output tokens/s per replica", color="#55A868")
    n = plan.recommendation.max_num_seqs
    ax.axvline(n, color="black", linestyle=":", linewidth=1)
    d = plan.distribution
    p_n = d.probability(n) if d is not None else 0.0
    ax.text(
        n,
        ax.get_ylim()[1] * 0.95,
        f" max-num-seqs {n}\n P(preempt) {p_n:.2%}",
        fontsize=8,
        va="top",
    )
    wl = plan.input.workload
    if wl is not None and wl.itl_target_ms:
        ax.axhline(wl.itl_target_ms, color="#C44E52", linestyle="--", linewidth=1)
        ax.text(
            xs[0],
            wl.itl_target_ms,
            f" ITL target {wl.itl_target_ms} ms",
            color="#C44E52",
            fontsize=8,
            va="bottom",
        )
    for p in lat.curve:
        if p.preemption_probability > 0:
            ax.annotate(
                f"{p.preemption_probability:.0%}",
                (p.max_num_seqs, p.itl_ms_p95),
                fontsize=7,
                color="#C44E52",
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_title(
        f"{plan.input.model.name} on {plan.input.gpu.name} TP{plan.input.tp}: decode step "
        f"(HBM at {lat.hbm_efficiency:.0%} of peak); red % = P(preemption)",
        fontsize=9,
    )
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(lines, labels, fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.85))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def sweep_chart(options: list[dict[str, Any]], path: str, top: int = 15) -> None:
    """Horizontal bars of the best options: GPUs needed (and cost per hour when priced)."""
    _check_chart_path(path, "--sweep-chart")
    if not options:
        raise ValueError("--sweep-chart: no option fits")
    plt = _pyplot()
    shown = options[:top][::-1]
    priced = shown[0]["cost_per_hour"] is not None
    values = [o["cost_per_hour"] if priced else o["gpus"] for o in shown]
    labels = [f"{o['gpu']} TP{o['tp']} KV {o['kv_cache_dtype']}" for o in shown]
    colours = ["#55A868" if o["meets_itl"] is not False else "#C44E52" for o in shown]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(shown) + 1.5))
    bars = ax.barh(range(len(shown)), values, color=colours)
    for bar, o in zip(bars, shown, strict=True):
        text = f" {o['replicas']} × {o['tp']} = {o['gpus']} GPUs"
        if priced:
            text += f", ${o['cost_per_hour']:.2f}/h"
            if o["cost_per_million_output_tokens"] is not None:
                text += f", ${o['cost_per_million_output_tokens']:.3f}/M tokens"
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, text, va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), labels, fontsize=8)
    ax.set_xlabel("cost per hour" if priced else "GPUs for the peak (+ recovery)")
    ax.set_xlim(0, max(values) * 1.6)
    ax.set_title("Fleet options, best at the top (red: misses the ITL target)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
