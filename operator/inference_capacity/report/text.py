"""A plan as text for people: the per-rank ledger table, the predicted vLLM startup lines, the
recommendation and the batch curve (``plan``), and the ranked options of ``plan --sweep``."""

from __future__ import annotations

from typing import Any

from ..planner import Plan
from ..risks import risks_text
from ..units import GiB

__all__ = [
    "sweep_table",
    "table",
]


#: what vLLM's own message suggests, wrong when no utilization can hold the weights
_RAISE_UTILIZATION = " Try increasing gpu_memory_utilization."


def weights_exceed_gpu(plan: Plan) -> tuple[float, float] | None:
    """(weights GiB, device GiB) of the binding rank when the weights alone exceed the GPU."""
    pred = plan.prediction
    r = pred.ranks[pred.binding_rank]
    if r.weights.total > pred.total_bytes:
        return r.weights.total / GiB, pred.total_bytes / GiB
    return None


def fits_message(plan: Plan) -> str:
    """The plan's message, without vLLM's "Try increasing gpu_memory_utilization" when the
    weights alone exceed the GPU (no utilization can help then)."""
    if weights_exceed_gpu(plan) is not None:
        return plan.message.replace(_RAISE_UTILIZATION, "")
    return plan.message


def why_not_fits(plan: Plan) -> list[str]:
    """For a plan that does not fit: what makes the difference, and the flag or field to move."""
    if plan.fits:
        return []
    out: list[str] = []
    big = weights_exceed_gpu(plan)
    if big is not None:
        out.append(
            f"the weights alone ({big[0]:.2f} GiB per GPU) exceed the GPU ({big[1]:.2f} GiB): no "
            "--gpu-memory-utilization can hold them; more tensor/pipeline parallelism, a larger "
            "GPU or a quantized checkpoint can (levers below)"
        )
        return out
    if not plan.prediction.starts:
        return out
    frac = plan.input.headroom.operational_fraction
    device = plan.prediction.total_bytes / GiB
    if plan.reason == "OverCommitted":
        out.append(
            f"vLLM would start, but the operator keeps {frac:.0%} of the device "
            f"({frac * device:.2f} GiB per GPU) as operational headroom beyond vLLM's view, and "
            "the plan does not leave it: lower it with --operational-headroom "
            "(spec.headroom.operationalFraction) or lower --gpu-memory-utilization"
        )
    elif plan.reason == "KvPoolUnreachable":
        out.append(
            "vLLM would start, but not with the KV pool asked for: ask for less "
            "(--kv-cache-gib, spec.engine.kvCacheMemoryBytes)"
        )
    elif plan.reason == "WorkloadDoesNotFit":
        kv = plan.input.headroom.kv_safety_fraction
        out.append(
            f"vLLM would start, but with {kv:.0%} of the KV pool kept as safety headroom "
            "(spec.headroom.kvSafetyFraction) not one sequence of the workload fits: lower "
            "it, or cap the lengths (--max-model-len, spec.workload.maxModelLen)"
        )
    elif plan.reason == "ExceedsMaxReplicas":
        out.append(
            "vLLM would start, but the peak needs more replicas than spec.rollout.maxReplicas "
            "allows (with spec.headroom.recoveryReplicas for recovery): raise it, or lower "
            "spec.workload.peakConcurrency"
        )
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
    error = str(pred.error)
    if weights_exceed_gpu(plan) is not None:
        error = error.replace(_RAISE_UTILIZATION, "")
    lines.append(f"  starts: {'yes' if pred.starts else 'NO — ' + error}")
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
    if plan.fits:
        lines.append("  vLLM flags: " + " ".join(f"--{k} {v}" for k, v in flags.items()))
    else:
        lines.append("  vLLM flags: none usable — the plan does not fit (why below)")
    lines.append(
        f"  replicas {ro.replicas} (peak needs {ro.min_replicas_for_peak}), maxSurge "
        f"{ro.max_surge}, maxUnavailable {ro.max_unavailable}, PDB minAvailable "
        f"{ro.pdb_min_available}"
    )
    lines.append(f"  fits: {'yes' if plan.fits else 'NO'} ({plan.reason}) {fits_message(plan)}")
    lines.extend(f"  why: {w}" for w in why_not_fits(plan))
    lines.extend(_sizing_lines(plan))
    lines.extend(risks_text(plan))
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
            f"p99 {at.itl_ms_p99:.1f} ms, TPOT mean {at.tpot_ms_mean:.1f} ms; TTFT p50 "
            f"{at.ttft_ms_p50:,.0f} ms, p95 "
            f"{at.ttft_ms_p95:,.0f} ms; {at.output_tokens_per_s:,.0f} output tokens/s per "
            f"replica (HBM at {lat.hbm_efficiency:.0%} of peak)"
            + (" — SATURATED: prefill demand exceeds the step budget" if at.saturated else "")
            + (f"; ITL target allows {lat.itl_limit}" if lat.itl_limit is not None else "")
        )
    lines.append("")
    lines.append("Batch curve (per replica)")
    lines.append(
        f"  {'max-num-seqs':>12} {'ITL p50 ms':>11} {'ITL p95 ms':>11} {'ITL p99 ms':>11} "
        f"{'TTFT p50 ms':>11} {'TTFT p95 ms':>11} {'decode-only':>11} {'bound':>8} "
        f"{'tokens/s':>10} {'P(preempt)':>11}"
    )
    for pt in lat.curve:
        mark = (" saturated" if pt.saturated else "") + (" <" if pt.max_num_seqs == n else "")
        lines.append(
            f"  {pt.max_num_seqs:>12} {pt.itl_ms_p50:>11.2f} {pt.itl_ms_p95:>11.2f} "
            f"{pt.itl_ms_p99:>11.2f} {pt.ttft_ms_p50:>11,.0f} {pt.ttft_ms_p95:>11,.0f} "
            f"{pt.decode_only_ms_p50:>11.2f} {pt.bound:>8} "
            f"{pt.output_tokens_per_s:>10,.0f} {pt.preemption_probability:>11.2%}{mark}"
        )
    lines.append(
        "  (N requests in flight, closed loop; ITL: the mix of decode-only steps and steps "
        "carrying a prefill chunk; decode-only: without one; saturated: prefill demand exceeds "
        "--max-num-batched-tokens, so throughput stays flat and TTFT grows with N)"
    )
    if lat.arrivals == "lockstep":
        lines.append(
            "  (every request has the same prompt and output: a closed loop of them runs in lock "
            "step, so TTFT waits for the step prefilling a whole group of prompts; lengths "
            "that vary spread the arrivals and shorten it)"
        )
    return lines


def sweep_table(options: list[dict[str, Any]], priced: bool) -> str:
    """The ranked options of ``plan --sweep``."""
    lines = [f"Sweep: {len(options)} options that fit, ranked"]
    lines.append(
        f"  {'#':>3} {'gpu':<16} {'tp':>2} {'kv':<5} {'replicas':>8} {'gpus':>5} "
        f"{'seqs':>5} {'P(pre)':>7} {'ITL p95':>8} {'tok/s fleet':>11} {'$/h':>8} "
        f"{'$/Mtok':>8} {'ITL ok':>6} {'binds':>5}"
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
            f"{ ({True: 'yes', False: 'NO', None: '-'}[o['meets_itl']]):>6} "
            f"{o.get('binding_target') or '-':>5}"
        )
    if not priced:
        lines.append("  (no prices: ranked by GPUs; give --gpu-price NAME=PRICE to rank by cost)")
    return "\n".join(lines)
