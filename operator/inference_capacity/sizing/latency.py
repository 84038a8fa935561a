"""Decode-step latency and throughput of one replica (seed 003 §decode, issue 14).

A decode step reads, on every rank, the weights it uses and the KV cache (or recurrent state) of
every running sequence, so its lower bound is bytes / bandwidth (seed 003):

    step ≥ (weight bytes read + Σ_seq KV bytes read) / (HBM peak × efficiency)

Term by term, per rank (TP ranks are symmetric; a token passes every PP stage, so the step of a
replica is the sum over stages):

* **weights read**: the rank's resident weights, except routed experts: a step of T tokens, each
  routed to k of E experts, touches ``E × (1 − (1 − k/E)^T)`` distinct experts (uniform routing),
  and only those are read. The embedding table is counted in full, as seed 003 does (it is read
  only for the batch's rows; 1.05 GB of Llama-3.1-8B's 16.1 GB).
* **KV read per sequence** at context c: full-attention and MLA layers ``c × bytes/token``;
  sliding-window and chunked layers ``min(c, window) × bytes/token``; Mamba / GDN layers read and
  write their state once (``2 × state bytes``).
* **bandwidth**: the catalog's datasheet peak × :data:`~inference_capacity.hardware.
  DEFAULT_HBM_EFFICIENCY` (overridable).
* **compute bound**: ``2 × active parameters per rank`` FLOPs per token plus attention
  ``4 × heads × head_dim × context`` per full-attention layer, for the decode tokens and the
  steady-state prefill tokens that ride along (chunked prefill): with N running, requests
  finish at ``N / E[output]`` per step (Little's law), each bringing its uncached prompt, so a
  step carries ``min(maxNumBatchedTokens − N, N × E[uncached prompt] / E[output])`` prefill
  tokens. Peak FLOP/s × :data:`~inference_capacity.hardware.DEFAULT_COMPUTE_EFFICIENCY`.

The step is the larger of the memory and compute bounds. ITL p50/p95 are quantiles over the
Monte Carlo batches of :mod:`.distribution`, each sequence at a uniformly random point of its
decode (context = prompt + U × output); output tokens/s per replica = N / mean step.
Approximations: batches are drawn by request, not weighted by residence time; PP stages do not
overlap micro-batches (an upper bound on ITL); FP8 weights use the BF16 compute peak.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..engines.vllm import StartupPrediction
from ..hardware import DEFAULT_COMPUTE_EFFICIENCY, DEFAULT_HBM_EFFICIENCY, Gpu, dense_flops
from ..ledger.kv import layers_on_rank
from ..model.shapes import AttnKind, ModelShape
from .distribution import SEED, DistributionSizing, MixSizing

FloatArray = npt.NDArray[np.float64]


def decode_step_seconds(weight_bytes: float, kv_bytes: float, bandwidth: float) -> float:
    """Seed 003's lower bound: ``(weight bytes + Σ context × KV bytes/token) / bandwidth``."""
    return (weight_bytes + kv_bytes) / bandwidth


def experts_touched(num_experts: int, per_token: int, tokens: float) -> float:
    """Distinct experts a step of ``tokens`` touches with uniform top-k routing."""
    if num_experts <= 0 or per_token <= 0:
        return 0.0
    return float(num_experts * (1.0 - (1.0 - per_token / num_experts) ** max(tokens, 0.0)))


@dataclass(frozen=True, slots=True)
class StageModel:
    """What one decode step reads and computes on one rank of one PP stage."""

    dense_weight_bytes: int  # read every step
    expert_weight_bytes: int  # resident routed experts (read as far as touched)
    full_bytes_per_token: int  # full attention + MLA
    windowed: tuple[tuple[int, int], ...]  # (window, bytes/token) of sliding/chunked layers
    state_bytes: int  # Mamba/GDN state per sequence
    params: float  # active parameters on the rank per token (dense part + k experts)
    attn_flops_per_ctx: float  # 4 × heads_per_rank × head_dim × full layers

    def kv_bytes(self, ctx: FloatArray) -> FloatArray:
        out = self.full_bytes_per_token * ctx + 2.0 * self.state_bytes
        for window, per_token in self.windowed:
            out = out + per_token * np.minimum(ctx, window)
        result: FloatArray = np.asarray(out, dtype=np.float64)
        return result


@dataclass(frozen=True, slots=True)
class LatencyModel:
    stages: tuple[StageModel, ...]
    bandwidth: float  # achievable bytes/s per GPU
    flops: float | None  # achievable FLOP/s per GPU
    num_experts: int
    experts_per_token: int
    hbm_efficiency: float
    max_num_batched_tokens: int

    def weight_bytes(self, stage: StageModel, tokens: float) -> float:
        if self.num_experts <= 0 or stage.expert_weight_bytes == 0:
            return float(stage.dense_weight_bytes + stage.expert_weight_bytes)
        share = experts_touched(self.num_experts, self.experts_per_token, tokens) / self.num_experts
        return stage.dense_weight_bytes + stage.expert_weight_bytes * share

    def step_seconds(
        self, n: int, kv_per_stage: FloatArray, prefill_tokens: float, mean_ctx: float
    ) -> FloatArray:
        """Step time of batches of ``n`` sequences; ``kv_per_stage[s]`` = Σ KV bytes read on
        stage s per batch (one row per batch)."""
        tokens = n + prefill_tokens
        total = np.zeros(kv_per_stage.shape[1], dtype=np.float64)
        for s, stage in enumerate(self.stages):
            mem = (self.weight_bytes(stage, tokens) + kv_per_stage[s]) / self.bandwidth
            if self.flops:
                fl = 2.0 * stage.params * tokens + stage.attn_flops_per_ctx * mean_ctx * tokens
                mem = np.maximum(mem, fl / self.flops)
            total = total + mem
        return total


def build_latency_model(
    shape: ModelShape,
    gpu: Gpu,
    pred: StartupPrediction,
    hbm_efficiency: float | None = None,
) -> LatencyModel | None:
    """The step model of this replica, or None when the GPU's bandwidth is unknown."""
    peak = gpu.hbm_bandwidth_bytes_per_s
    if not peak:
        return None
    eff = DEFAULT_HBM_EFFICIENCY if hbm_efficiency is None else hbm_efficiency
    if not 0.0 < eff <= 1.0:
        raise ValueError(f"hardware.hbmEfficiency must be in (0, 1], got {eff}")
    tp, pp = pred.tp, pred.pp
    rs = pred.settings
    by_group = shape.parameters_by_group()
    expert_params = by_group.get("experts", 0)
    total_params = sum(by_group.values())
    active = float(total_params - expert_params)
    if shape.num_experts > 0:
        active += expert_params * shape.experts_per_token / shape.num_experts
    stages: list[StageModel] = []
    for stage in range(pp):
        r = next(x for x in pred.ranks if x.stage == stage)
        experts = r.weights.by_group.get("experts", 0)
        full = 0
        windowed: dict[int, int] = {}
        state = 0
        attn_layers = 0
        for layer in layers_on_rank(shape, pp, stage):
            tb = layer.token_bytes(tp, rs.kv_bytes)
            if layer.kind in (AttnKind.FULL, AttnKind.MLA):
                full += tb
                attn_layers += 1
            elif layer.kind in (AttnKind.SLIDING, AttnKind.CHUNKED):
                windowed[layer.window] = windowed.get(layer.window, 0) + tb
            elif layer.mamba is not None:
                state += layer.mamba.bytes_per_sequence(tp, rs.dtype_bytes)
        heads = max(1, shape.num_attention_heads // tp)
        stages.append(
            StageModel(
                dense_weight_bytes=r.weights.total - experts,
                expert_weight_bytes=experts,
                full_bytes_per_token=full,
                windowed=tuple(sorted(windowed.items())),
                state_bytes=state,
                params=active / (tp * pp),
                attn_flops_per_ctx=4.0 * heads * shape.head_dim * attn_layers,
            )
        )
    f = dense_flops(gpu)
    return LatencyModel(
        stages=tuple(stages),
        bandwidth=peak * eff,
        flops=f * DEFAULT_COMPUTE_EFFICIENCY if f else None,
        num_experts=shape.num_experts,
        experts_per_token=shape.experts_per_token,
        hbm_efficiency=eff,
        max_num_batched_tokens=rs.max_num_batched_tokens,
    )


@dataclass(frozen=True, slots=True)
class LatencyPoint:
    max_num_seqs: int
    itl_ms_p50: float
    itl_ms_p95: float
    output_tokens_per_s: float
    preemption_probability: float


class BatchLatency:
    """ITL of batches of N drawn along the sizing's Monte Carlo paths (binding mix), for
    N up to ``upto``."""

    def __init__(self, model: LatencyModel, sizing: DistributionSizing, upto: int) -> None:
        self.model = model
        self.sizing = sizing
        mix: MixSizing = sizing.binding
        pool = mix.pool
        rng = np.random.default_rng(SEED + 1)
        u = rng.random(len(pool.prompt))
        ctx = pool.prompt + u * pool.output
        self.mean_ctx = float((ctx * pool.seqs).sum() / pool.seqs.sum())
        uncached = np.maximum(pool.prompt - pool.cached, 0)  # a shared prefix is cached
        self.prefill_per_seq = float(uncached.mean() / max(pool.output.mean(), 1.0))
        sim = mix.paths.sim
        kept = sim.index.shape[0]
        self.uniform_n = sim.uniform_n
        if sim.cum_seqs is not None:
            cum_seqs = sim.cum_seqs[:kept]
        else:
            steps = np.arange(1, sim.length + 1, dtype=np.int64) * self.uniform_n
            cum_seqs = np.broadcast_to(steps, (kept, sim.length))
        # columns (requests) needed to hold `upto` sequences on every path
        cols = int(cum_seqs.shape[1])
        if cols:
            reach = cum_seqs >= upto
            if reach[:, -1].all():
                cols = int(reach.argmax(axis=1).max()) + 1
        self.cum_seqs = cum_seqs[:, :cols]
        index = sim.index[:, :cols]
        self.cum_kv = [
            np.cumsum((stage.kv_bytes(ctx) * pool.seqs)[index], axis=1) for stage in model.stages
        ]

    @property
    def max_n(self) -> int:
        """Largest batch the paths are long enough to evaluate."""
        if self.cum_seqs.shape[1] == 0:
            return 0
        return int(self.cum_seqs[:, -1].min())

    def _kv(self, n: int) -> FloatArray:
        # the request holding the n-th sequence, per path
        if self.uniform_n:
            return np.stack([c[:, -(-n // self.uniform_n) - 1] for c in self.cum_kv])
        j = np.argmax(self.cum_seqs >= n, axis=1)
        rows = np.arange(self.cum_seqs.shape[0])
        return np.stack([c[rows, j] for c in self.cum_kv])

    def point(self, n: int) -> LatencyPoint:
        if n <= 0 or n > self.max_n:
            raise ValueError(f"batch {n} outside the simulated range 1..{self.max_n}")
        prefill = min(max(self.model.max_num_batched_tokens - n, 0), n * self.prefill_per_seq)
        steps = self.model.step_seconds(n, self._kv(n), prefill, self.mean_ctx)
        p50, p95 = np.quantile(steps, [0.5, 0.95])
        return LatencyPoint(
            n,
            float(p50) * 1e3,
            float(p95) * 1e3,
            float(n / steps.mean()),
            self.sizing.probability(n),
        )

    def largest_meeting(self, itl_ms: float, upper: int) -> int:
        """Largest N ≤ upper whose ITL p95 meets ``itl_ms`` (0 when even one sequence misses).
        The step grows with N along every path, so its p95 does: bisect."""
        hi = min(upper, self.max_n)
        if hi <= 0 or self.point(1).itl_ms_p95 > itl_ms:
            return 0
        lo = 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.point(mid).itl_ms_p95 <= itl_ms:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def curve(self, extra: tuple[int, ...] = ()) -> tuple[LatencyPoint, ...]:
        """Points at powers of two up to the simulated range, plus ``extra``."""
        top = self.max_n
        ns = {1 << k for k in range(0, 20) if (1 << k) <= top}
        ns.update(n for n in extra if 0 < n <= top)
        return tuple(self.point(n) for n in sorted(ns))
