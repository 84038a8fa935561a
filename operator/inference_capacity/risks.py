"""The six ways a vLLM replica runs out of memory, per resource, from the plan's ledger: each
with its margin in bytes (negative: it happens) and the flag that moves it.

1. ``load`` (GPU): the weights, plus one decoder layer in flight (a dequant / repack copy, assumed),
   against the memory free when the weights load (the device less the CUDA context).
2. ``startup`` (GPU): vLLM's free-memory check at startup (``v1/worker/utils.py::request_memory``):
   free memory must be at least ``--gpu-memory-utilization`` x total.
3. ``kvExhaustion`` (GPU): the KV pool against one request at max-model-len (vLLM refuses to start
   below it: ``kv_cache_utils.py::check_enough_kv_cache_memory``); the preemption probability of
   the sized batch (the distribution sizing) says how often a full batch outgrows it.
4. ``activation`` (GPU): prefill / sampler spikes beyond the batch vLLM profiled
   (``--max-num-batched-tokens``): only the headroom outside vLLM's budget absorbs them (the
   operational headroom and what is left unallocated).
5. ``cudaGraph`` (GPU): the CUDA-graph pool captured after the KV cache: outside vLLM's budget
   before 0.20 (it must fit in what vLLM does not request), an estimate inside it from 0.20
   (the capture can exceed the estimate: the 0.19 logs show up to +121 %).
6. ``host`` (CPU memory): the pod's memory limit (else request) against the load-time host peak:
   the per-replica weights passing through host memory while safetensors are read (mmap'd pages
   charged to the pod's cgroup), ``--cpu-offload-gb`` and ``--swap-space`` per rank,
   ``--mm-processor-cache-gb``, and a base process of :data:`HOST_BASE_BYTES` (assumed).

Pure: no Kubernetes; the controller gives :class:`HostInput` from the container.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from .planner import Plan
from .units import GiB

RiskKind = Literal["load", "startup", "kvExhaustion", "activation", "cudaGraph", "host"]

#: the Python process, torch, CUDA and NCCL libraries, the tokenizer (assumed: ~2 GiB resident
#: per vLLM process before any weight is read)
HOST_BASE_BYTES: Final = 2 * GiB


@dataclass(frozen=True)
class HostInput:
    """The vLLM container's host memory: its request and limit (bytes, None: not set) and the
    flags that put bytes in host memory."""

    memory_request: int | None = None
    memory_limit: int | None = None
    cpu_offload_gb: float = 0.0
    swap_space_gb: float = 0.0
    mm_processor_cache_gb: float = 0.0


@dataclass(frozen=True)
class Risk:
    kind: RiskKind
    resource: Literal["gpu", "host"]
    margin_bytes: int | None
    at_risk: bool
    flag: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "resource": self.resource,
            "margin_bytes": self.margin_bytes,
            "margin_gib": None if self.margin_bytes is None else round(self.margin_bytes / GiB, 3),
            "at_risk": self.at_risk,
            "flag": self.flag,
            "detail": self.detail,
        }


def _items(plan: Plan, rank: int) -> dict[str, int]:
    """The ledger items of global rank ``rank`` (the ledger lists each distinct rank once: an
    identical rank uses the first one's)."""
    ledger = next((rl for rl in plan.ledger if rl.rank == rank), plan.ledger[0])
    out: dict[str, int] = {}
    for item in ledger.items:
        out[item.name] = out.get(item.name, 0) + item.bytes
    return out


def host_peak_bytes(plan: Plan, host: HostInput) -> int:
    """The load-time host peak of one pod (one replica: tp x pp ranks in the pod)."""
    ranks = plan.input.tp * plan.input.pp
    weights = sum(r.weights.total for r in plan.prediction.ranks)
    per_rank = (host.cpu_offload_gb + host.swap_space_gb) * GiB
    return int(
        HOST_BASE_BYTES * ranks + weights + per_rank * ranks + host.mm_processor_cache_gb * GiB
    )


def assess(plan: Plan, host: HostInput | None = None) -> list[Risk]:
    """The six risks, each at the rank where its margin is smallest."""
    total = plan.input.gpu.total_bytes
    rs = plan.prediction.settings
    worst: dict[RiskKind, Risk] = {}

    def keep(r: Risk) -> None:
        cur = worst.get(r.kind)
        if cur is None or (r.margin_bytes or 0) < (cur.margin_bytes or 0):
            worst[r.kind] = r

    for rank in plan.prediction.ranks:
        items = _items(plan, rank.rank)
        context = items.get("cuda_context", 0)
        weights = rank.weights.total
        layers = max(1, plan.input.model.num_layers // max(1, plan.input.pp))
        in_flight = weights // layers
        free_at_start = total - context
        keep(
            Risk(
                "load",
                "gpu",
                free_at_start - weights - in_flight,
                free_at_start - weights - in_flight < 0,
                "--tensor-parallel-size / --pipeline-parallel-size (fewer weights per GPU)",
                f"rank {rank.rank}: weights {weights / GiB:.2f} GiB + one layer in flight "
                f"{in_flight / GiB:.2f} GiB (assumed) against {free_at_start / GiB:.2f} GiB free",
            )
        )
        keep(
            Risk(
                "startup",
                "gpu",
                free_at_start - rank.requested,
                free_at_start < rank.requested,
                "--gpu-memory-utilization",
                f"rank {rank.rank}: vLLM requests {rank.requested / GiB:.2f} GiB "
                f"(utilization {rs.gpu_memory_utilization:g}) of {free_at_start / GiB:.2f} GiB "
                "free at startup",
            )
        )
        one_request = rs.max_model_len * plan.kv_bytes_per_token_rank
        d = plan.distribution
        seqs = plan.recommendation.max_num_seqs
        p = d.probability(seqs) if d is not None and seqs > 0 else None
        target = plan.input.preemption_target
        preempt = (
            f"; P(preemption) {p:.2%} at --max-num-seqs {seqs} (target {target:.2%})"
            if p is not None
            else ""
        )
        keep(
            Risk(
                "kvExhaustion",
                "gpu",
                rank.available_kv - one_request,
                rank.available_kv < one_request or (p is not None and p > target),
                "--max-num-seqs (preemption) / --max-model-len (one request)",
                f"rank {rank.rank}: KV pool {rank.available_kv / GiB:.2f} GiB, one request at "
                f"max-model-len {rs.max_model_len} needs {one_request / GiB:.2f} GiB{preempt}",
            )
        )
        spike_room = items.get("operational_headroom", 0) + items.get("unallocated", 0)
        keep(
            Risk(
                "activation",
                "gpu",
                spike_room,
                spike_room <= 0,
                "--max-num-batched-tokens (the profiled batch) / spec.headroom.operationalFraction",
                f"rank {rank.rank}: profiled at {rs.max_num_batched_tokens} batched tokens "
                f"(peak {rank.activation_peak / GiB:.2f} GiB); a spike beyond it has "
                f"{spike_room / GiB:.2f} GiB outside vLLM's budget",
            )
        )
        outside = total - rank.requested - context
        graph = items.get("cuda_graph_pool", rank.cuda_graph)
        if rs.cg_in_budget:
            # the estimate is in the budget; the capture's excess over it is not
            excess = graph  # the 0.19 logs: actual up to 2.2x the estimate (vllm-startup-027)
            margin = outside - excess
            how = f"estimate {graph / GiB:.2f} GiB in the budget, up to as much again outside"
        else:
            margin = outside - graph
            how = f"pool {graph / GiB:.2f} GiB captured outside the budget"
        if not rs.cudagraphs:
            margin, how = outside, "no CUDA graphs (--enforce-eager)"
        keep(
            Risk(
                "cudaGraph",
                "gpu",
                margin,
                margin < 0,
                "--gpu-memory-utilization / --max-cudagraph-capture-size / --enforce-eager",
                f"rank {rank.rank}: {how}; {outside / GiB:.2f} GiB outside vLLM's request",
            )
        )
    worst["host"] = _host(plan, host)
    order: tuple[RiskKind, ...] = (
        "load",
        "startup",
        "kvExhaustion",
        "activation",
        "cudaGraph",
        "host",
    )
    return [worst[k] for k in order if k in worst]


def _host(plan: Plan, host: HostInput | None) -> Risk:
    h = host or HostInput()
    peak = host_peak_bytes(plan, h)
    bound = h.memory_limit if h.memory_limit is not None else h.memory_request
    which = "limit" if h.memory_limit is not None else "request"
    flag = "resources.limits.memory / spec.policy.setMemoryRequest / --cpu-offload-gb"
    if bound is None:
        return Risk(
            "host",
            "host",
            None,
            False,
            flag,
            f"load-time host peak {peak / GiB:.2f} GiB; the container sets no memory request "
            "or limit (unknown margin)",
        )
    return Risk(
        "host",
        "host",
        bound - peak,
        bound < peak,
        flag,
        f"load-time host peak {peak / GiB:.2f} GiB against the memory {which} "
        f"{bound / GiB:.2f} GiB",
    )


def risks_json(plan: Plan, host: HostInput | None = None) -> list[dict[str, Any]]:
    return [r.to_json() for r in assess(plan, host)]


def risks_text(plan: Plan, host: HostInput | None = None) -> list[str]:
    lines = ["  OOM risks (margin; flag that moves it):"]
    for r in assess(plan, host):
        m = "unknown" if r.margin_bytes is None else f"{r.margin_bytes / GiB:+.2f} GiB"
        mark = "AT RISK " if r.at_risk else ""
        lines.append(f"    {r.kind:<13} {r.resource:<4} {mark}{m}: {r.detail} [{r.flag}]")
    return lines
