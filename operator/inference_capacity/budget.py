"""The per-rank memory ledger: every byte of the device, with its lifetime, owner and provenance.

The items of one rank always sum to the device's total bytes: the last item, ``unallocated``,
is what is left (negative when the plan over-commits the device, which is a refusal). vLLM's
own budget (``requested = ceil(total × u)``) holds weights, activation, non-torch memory, the
CUDA-graph estimate (from 0.20) and the KV pool; the margin ``total − requested`` must hold what
vLLM does not see: the CUDA context, all-reduce buffers, CUDA graphs before 0.20, allocator
fragmentation, workspaces created after the KV cache, and the operator's operational headroom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .engines import Era
from .engines.vllm import (
    CUDA_CONTEXT_GIB,
    RankPrediction,
    ResolvedSettings,
    StartupPrediction,
    distributed_init_bytes,
)
from .units import GiB, MiB, gib
from .vocab import Lifetime, Provenance

#: Allocator fragmentation at run time: blocks the caching allocator holds but cannot reuse.
#: Assumed 1 % of the transient activation + CUDA-graph terms plus 64 MiB.
FRAGMENTATION_FRACTION = 0.01
FRAGMENTATION_FLOOR = 64 * MiB
#: Other workspaces allocated after the KV cache (the sampler's warm-up, kernels' scratch):
#: assumed 0.25 GiB, outside vLLM's budget. FlashInfer's, where it runs, are derived from the
#: code instead (engines/vllm.py::_post_kv_workspace: the ``flashinfer_workspace`` line).
POST_KV_WORKSPACE_GIB = 0.25


@dataclass(frozen=True, slots=True)
class LedgerItem:
    name: str
    bytes: int
    lifetime: Lifetime
    owner: str
    provenance: Provenance
    in_vllm_budget: bool
    note: str = ""

    @property
    def gib(self) -> float:
        return self.bytes / GiB


@dataclass(frozen=True, slots=True)
class RankLedger:
    rank: int
    stage: int
    items: tuple[LedgerItem, ...]
    device_bytes: int

    @property
    def total(self) -> int:
        return sum(i.bytes for i in self.items)

    def get(self, name: str) -> int:
        return sum(i.bytes for i in self.items if i.name == name)

    @property
    def unallocated(self) -> int:
        return self.get("unallocated")


def _cuda_graph_item(r: RankPrediction, in_budget: bool) -> LedgerItem:
    """The CUDA-graph pool: inside vLLM's budget from 0.20 (the estimate is subtracted), in the
    margin before (graphs are captured after the KV cache is allocated)."""
    note = (
        "vLLM's estimate (a first capture per mode + an increment per further graph), "
        "subtracted from the budget (0.20+)"
        if in_budget
        else "captured after the KV cache; outside the budget before 0.20"
    )
    return LedgerItem(
        "cuda_graph_pool", r.cuda_graph, "worker", "CUDA graphs", "calibrated", in_budget, note
    )


def margin_items(
    pred: StartupPrediction, r: RankPrediction, operational_fraction: float
) -> list[LedgerItem]:
    """What must fit outside vLLM's budget on this rank."""
    items = [
        LedgerItem(
            "cuda_context",
            gib(CUDA_CONTEXT_GIB),
            "worker",
            "CUDA driver",
            "calibrated",
            False,
            "used before vLLM's init snapshot (0.51 GiB on an H100)",
        ),
    ]
    distributed = distributed_init_bytes(
        pred.settings.era, pred.tp, pred.pp, pred.nccl_groups, pred.pcie
    )
    if distributed > 0:
        items.append(
            LedgerItem(
                "distributed_init",
                distributed,
                "worker",
                "NCCL / all-reduce",
                "calibrated",
                False,
                "communicators and all-reduce buffers created before vLLM's snapshot "
                "(0.19 H100 logs: +1.02 GiB at TP2, +1.56 at TP4, +0.92 at PP2; "
                "PCIe-only GPUs 1.04/1.56 of the TP part)",
            )
        )
    if r.cuda_graph and not pred.settings.cg_in_budget:
        items.append(_cuda_graph_item(r, in_budget=False))
    if pred.settings.era is not Era.V1_CONSUMED:
        items.extend(_runner_state_items(r, False, pred.settings.v2_runner))
    frag = max(
        FRAGMENTATION_FLOOR, int(FRAGMENTATION_FRACTION * (r.activation_peak + r.cuda_graph))
    )
    items.append(
        LedgerItem(
            "allocator_fragmentation", frag, "worker", "torch caching allocator", "assumed", False
        )
    )
    items.append(
        LedgerItem(
            "post_kv_workspaces",
            gib(POST_KV_WORKSPACE_GIB),
            "worker",
            "attention backend / sampler",
            "assumed",
            False,
            "allocated after the KV cache (sampler warm-up, kernels' scratch)",
        )
    )
    if r.post_kv_workspace:
        items.append(
            LedgerItem(
                "flashinfer_workspace",
                r.post_kv_workspace,
                "worker",
                "FlashInfer attention",
                "exact",
                False,
                "394 MiB a builder (one shared with the V2 runner), allocated after the KV "
                "cache where vLLM's CUDA-graph estimate does not hold it",
            )
        )
    items.append(
        LedgerItem(
            "operational_headroom",
            int(operational_fraction * pred.total_bytes),
            "worker",
            "inference-capacity policy",
            "exact",
            False,
            f"{operational_fraction:.0%} of the device kept free",
        )
    )
    return items


def _weight_items(s: ResolvedSettings, r: RankPrediction) -> list[LedgerItem]:
    """The rank's weights by group, its rope cache, the checkpoint's header correction and the
    LoRA slots."""
    items: list[LedgerItem] = []
    for group, b in sorted(r.weights.by_group.items()):
        items.append(LedgerItem(f"weights.{group}", b, "worker", "model", "exact", True))
    if r.weights.rope_cache:
        items.append(
            LedgerItem(
                "weights.rope_cache",
                r.weights.rope_cache,
                "worker",
                "model",
                "exact",
                True,
                "rotary cos/sin cache",
            )
        )
    if r.weights.header_correction:
        items.append(
            LedgerItem(
                "weights.header_correction",
                r.weights.header_correction,
                "worker",
                "checkpoint",
                "exact",
                True,
                r.weights.header_note,
            )
        )
    if r.weights.lora:
        items.append(
            LedgerItem(
                "lora_adapters",
                r.weights.lora,
                "worker",
                "LoRA slots",
                "exact",
                True,
                f"max_loras × rank, {s.dtype}",
            )
        )
    return items


def _iteration_items(pred: StartupPrediction, r: RankPrediction) -> list[LedgerItem]:
    """What the profile run and the worker hold besides the weights: the activation peak, the
    fused-MoE workspace, the multimodal encoder profile, non-torch memory, CUDA graphs inside
    the budget."""
    s = pred.settings
    items: list[LedgerItem] = []
    sampler = r.sampler_peak >= r.forward_peak
    which = "sampler logits" if sampler else "forward activations"
    # the V2 runner's sampler, from the code (engines/vllm.py::sampler_peak): 0.22–0.32's
    # default pass and 0.33's warm-up-params pass on FlashInfer's sampler exact; the warm-up
    # pass elsewhere a bound (vLLM's Triton top-k/top-p): assumed
    v2_sampler = sampler and s.v2_runner
    warmup = v2_sampler and s.rules.v2_sampler_warmup_pass
    assumed = warmup and r.sampler_bound
    items.append(
        LedgerItem(
            "activation_peak",
            max(r.forward_peak, r.sampler_peak),
            "iteration",
            "profile run",
            "assumed" if assumed else "exact" if v2_sampler else "calibrated",
            True,
            f"{which} at {s.max_num_batched_tokens} tokens / "
            f"{min(s.max_num_seqs, s.max_num_batched_tokens)} sequences"
            + (
                " (V2 runner sampler's warm-up pass: a bound, vLLM's Triton sampler)"
                if assumed
                else " (V2 runner sampler's warm-up pass: fp32 logits, FlashInfer's mask, probs)"
                if warmup
                else " (V2 runner, default sampler pass: model-dtype logits)"
                if v2_sampler
                else ""
            ),
        )
    )
    if r.moe_workspace:
        items.append(
            LedgerItem(
                "moe_workspace", r.moe_workspace, "iteration", "fused MoE", "calibrated", True
            )
        )
    if r.mm_encoder and r.mm_profile is not None:
        # engines/vllm_mm.py: derived from vLLM's profile_run, not calibrated on a log
        items.append(
            LedgerItem(
                "mm_encoder_profile",
                r.mm_encoder,
                "iteration",
                "multimodal encoder",
                "assumed",
                True,
                r.mm_profile.describe(),
            )
        )
    if r.compile_excess:
        # engines/vllm.py::cold_compile_bytes: Inductor's benchmark copies of the embedding
        # kernel's arguments, from the code; the L2 flush buffer left out on vllm-startup-029
        items.append(
            LedgerItem(
                "cold_compile",
                r.compile_excess,
                "iteration",
                "torch.compile (cold cache)",
                "assumed",
                True,
                f"Inductor benchmarks the embedding kernel on random copies of its arguments "
                f"({r.compile_peak / GiB:.2f} GiB, the embedding table the rank holds and "
                f"{s.max_num_batched_tokens} tokens' outputs) inside vLLM's profile: the peak "
                "above the warm one",
            )
        )
    items.append(
        LedgerItem(
            "non_torch",
            r.non_torch,
            "worker",
            "NCCL buffers, cuBLAS" if pred.tp > 1 else "cuBLAS, kernels",
            "calibrated",
            True,
        )
    )
    if r.cuda_graph and s.cg_in_budget:
        items.append(_cuda_graph_item(r, in_budget=True))
    if s.era is Era.V1_CONSUMED:
        items.extend(_runner_state_items(r, True, s.v2_runner))
    return items


def _runner_state_items(r: RankPrediction, in_budget: bool, v2_runner: bool) -> list[LedgerItem]:
    """A model runner's persistent tensors, built after vLLM's memory snapshot and before the
    profile: the V2 runner's sampler state (engines/vllm.py::v2_sampler_state_bytes) and the
    runner's buffers (runner_buffer_bytes). vLLM's consumed budget counts them from 0.27;
    before, they are held beyond it."""
    where = (
        "consumed memory (0.27+)"
        if in_budget
        else "allocated before the profile, outside the budget before 0.27"
    )
    parts = (
        (
            "v2_sampler_state",
            r.sampler_state,
            "V2 sampler",
            "penalty counts and masks, grammar bitmask",
        ),
        (
            "runner_buffers",
            r.runner_buffers,
            "V2 runner" if v2_runner else "V1 runner",
            "input buffers, request state"
            if v2_runner
            else "inputs_embeds (max-num-batched-tokens × hidden), input buffers, block table, "
            "the sampler's Triton scratch",
        ),
    )
    return [
        LedgerItem(name, nbytes, "worker", component, "exact", in_budget, f"{what}: {where}")
        for name, nbytes, component, what in parts
        if nbytes
    ]


def _kv_items(s: ResolvedSettings, r: RankPrediction) -> list[LedgerItem]:
    """The KV-cache pool and the budget left below one block."""
    items: list[LedgerItem] = []
    pool = max(0, r.num_blocks * r.layout.bytes_per_block)
    items.append(
        LedgerItem(
            "kv_cache_pool",
            pool,
            "request",
            "vLLM KV cache",
            "exact",
            True,
            f"{r.num_blocks} blocks × {r.layout.bytes_per_block} B",
        )
    )
    rounding = max(0, r.available_kv - pool) if r.available_kv > 0 else 0
    if s.era is Era.V0 or rounding:
        items.append(
            LedgerItem(
                "kv_block_rounding",
                rounding,
                "worker",
                "vLLM KV cache",
                "exact",
                True,
                "budget left below one block",
            )
        )
    return items


def rank_ledger(
    pred: StartupPrediction, r: RankPrediction, operational_fraction: float
) -> RankLedger:
    s = pred.settings
    items = [*_weight_items(s, r), *_iteration_items(pred, r), *_kv_items(s, r)]
    used_in_budget = sum(i.bytes for i in items)
    unbudgeted_in_requested = r.requested - used_in_budget
    if unbudgeted_in_requested < 0:
        # the budget is over-committed (available KV <= 0): nothing left inside it
        unbudgeted_in_requested = 0
    if unbudgeted_in_requested:
        items.append(
            LedgerItem(
                "budget_slack",
                unbudgeted_in_requested,
                "worker",
                "vLLM budget",
                "exact",
                True,
                "requested but not used",
            )
        )
    items += margin_items(pred, r, operational_fraction)
    rest = pred.total_bytes - sum(i.bytes for i in items)
    items.append(
        LedgerItem(
            "unallocated",
            rest,
            "worker",
            "free",
            "exact",
            False,
            "negative: the plan over-commits the device" if rest < 0 else "",
        )
    )
    return RankLedger(r.rank, r.stage, tuple(items), pred.total_bytes)


def build_ledger(pred: StartupPrediction, operational_fraction: float) -> tuple[RankLedger, ...]:
    """One ledger per distinct rank position (TP ranks of one stage are identical: one each)."""
    seen: set[int] = set()
    out = []
    for r in pred.ranks:
        if r.stage in seen:
            continue
        seen.add(r.stage)
        out.append(rank_ledger(pred, r, operational_fraction))
    return tuple(out)


def max_utilization(pred: StartupPrediction, operational_fraction: float) -> float:
    """The largest ``gpu_memory_utilization`` whose margin still holds every item vLLM does not
    see (the smallest over ranks), rounded down to 4 decimals."""
    best = 1.0
    for r in pred.ranks:
        margin = sum(i.bytes for i in margin_items(pred, r, operational_fraction))
        best = min(best, (pred.total_bytes - margin) / pred.total_bytes)
    return math.floor(best * 10_000) / 10_000
