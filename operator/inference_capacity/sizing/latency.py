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

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt

from ..engines import StartupPrediction
from ..hardware import DEFAULT_COMPUTE_EFFICIENCY, DEFAULT_HBM_EFFICIENCY, Gpu, dense_flops
from ..ledger import layers_on_rank
from ..model import AttnKind, ModelShape
from .distribution import DistributionSizing, MixSizing

FloatArray = npt.NDArray[np.float64]
T = TypeVar("T")


def decode_step_seconds(weight_bytes: float, kv_bytes: float, bandwidth: float) -> float:
    """Seed 003's lower bound: ``(weight bytes + Σ context × KV bytes/token) / bandwidth``."""
    return (weight_bytes + kv_bytes) / bandwidth


def experts_touched(num_experts: int, per_token: int, tokens: FloatArray | float) -> FloatArray:
    """Distinct experts a step of ``tokens`` touches with uniform top-k routing."""
    t = np.maximum(np.asarray(tokens, dtype=np.float64), 0.0)
    if num_experts <= 0 or per_token <= 0:
        return np.zeros_like(t)
    out: FloatArray = num_experts * (1.0 - (1.0 - per_token / num_experts) ** t)
    return out


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

    def weight_bytes(self, stage: StageModel, tokens: FloatArray | float) -> FloatArray:
        """Weight bytes a step of ``tokens`` reads on one rank of the stage."""
        t = np.asarray(tokens, dtype=np.float64)
        if self.num_experts <= 0 or stage.expert_weight_bytes == 0:
            return np.full_like(t, float(stage.dense_weight_bytes + stage.expert_weight_bytes))
        share = experts_touched(self.num_experts, self.experts_per_token, t) / self.num_experts
        out: FloatArray = stage.dense_weight_bytes + stage.expert_weight_bytes * share
        return out

    def step_seconds(
        self,
        n: FloatArray,
        kv_per_stage: FloatArray,
        prefill_tokens: FloatArray,
        mean_ctx: float,
        flops: bool = True,
    ) -> FloatArray:
        """Step times (batches × columns) for batches of ``n[c]`` sequences carrying
        ``prefill_tokens[c]``; ``kv_per_stage[s, b, c]`` = KV bytes read on stage s."""
        tokens = np.asarray(n, dtype=np.float64) + prefill_tokens
        total = np.zeros(kv_per_stage.shape[1:], dtype=np.float64)
        for s, stage in enumerate(self.stages):
            mem = (self.weight_bytes(stage, tokens) + kv_per_stage[s]) / self.bandwidth
            if self.flops and flops:
                fl = 2.0 * stage.params * tokens + stage.attn_flops_per_ctx * mean_ctx * tokens
                mem = np.maximum(mem, fl / self.flops)
            total = total + mem
        return total


#: per model object (by identity: a sweep plans one model many times)
_BY_MODEL: dict[tuple[int, object], tuple[ModelShape, object]] = {}


def _memo(shape: ModelShape, key: object, make: Callable[[], T]) -> T:
    hit = _BY_MODEL.get((id(shape), key))
    if hit is not None and hit[0] is shape:
        return cast(T, hit[1])
    value = make()
    if len(_BY_MODEL) > 256:
        _BY_MODEL.clear()
    _BY_MODEL[(id(shape), key)] = (shape, value)
    return value


def _active_parameters(shape: ModelShape) -> float:
    """Parameters one token uses: all but the routed experts, plus k of E of them."""

    def make() -> float:
        by_group = shape.parameters_by_group()
        experts = by_group.get("experts", 0)
        active = float(sum(by_group.values()) - experts)
        if shape.num_experts > 0:
            active += experts * shape.experts_per_token / shape.num_experts
        return active

    return _memo(shape, "active", make)


def _stage_reads(
    shape: ModelShape, tp: int, pp: int, stage: int, kv_bytes: int, dtype_bytes: int
) -> tuple[int, tuple[tuple[int, int], ...], int, int]:
    """(full-attention bytes/token, (window, bytes/token) of windowed layers, state bytes per
    sequence, full-attention layers) of one rank of a stage."""

    def make() -> tuple[int, tuple[tuple[int, int], ...], int, int]:
        full = 0
        windowed: dict[int, int] = {}
        state = 0
        attn_layers = 0
        for layer, n in layers_on_rank(shape, pp, stage):
            tb = n * layer.token_bytes(tp, kv_bytes)
            if layer.kind in (AttnKind.FULL, AttnKind.MLA):
                full += tb
                attn_layers += n
            elif layer.kind in (AttnKind.SLIDING, AttnKind.CHUNKED):
                windowed[layer.window] = windowed.get(layer.window, 0) + tb
            elif layer.mamba is not None:
                state += n * layer.mamba.bytes_per_sequence(tp, dtype_bytes)
        return full, tuple(sorted(windowed.items())), state, attn_layers

    return _memo(shape, ("reads", tp, pp, stage, kv_bytes, dtype_bytes), make)


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
    active = _active_parameters(shape)
    stages: list[StageModel] = []
    for stage in range(pp):
        r = next(x for x in pred.ranks if x.stage == stage)
        experts = r.weights.by_group.get("experts", 0)
        full, windowed, state, attn_layers = _stage_reads(
            shape, tp, pp, stage, rs.kv_bytes, rs.dtype_bytes
        )
        heads = max(1, shape.num_attention_heads // tp)
        stages.append(
            StageModel(
                dense_weight_bytes=r.weights.total - experts,
                expert_weight_bytes=experts,
                full_bytes_per_token=full,
                windowed=windowed,
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
    decode_only_ms_p50: float = 0.0  # the step without the prefill tokens riding along
    bound: str = "memory"  # "memory": HBM bytes bind; "compute": FLOPs (decode + prefill) bind


class BatchLatency:
    """ITL of batches of N drawn along the sizing's Monte Carlo paths (binding mix). Per path,
    the KV read of its first j requests is a prefix sum of per-request features (context,
    windowed context, sequences) that do not depend on the model, so the simulation keeps them
    for every plan of the same workload; a point combines one column of them."""

    def __init__(self, model: LatencyModel, sizing: DistributionSizing) -> None:
        self.model = model
        self.sizing = sizing
        mix: MixSizing = sizing.binding
        sim = mix.paths.sim
        pool = sim.pool
        seqs = pool.seqs.astype(np.float64)
        ctx = sim.mid_context()
        self.mean_ctx = float((ctx * seqs).sum() / seqs.sum())
        uncached = np.maximum(pool.prompt - pool.cached, 0)  # a shared prefix is cached
        self.prefill_per_seq = float(uncached.mean() / max(pool.output.mean(), 1.0))
        self.uniform_n = sim.uniform_n
        self.count = sim.kept_cumsum("seqs", seqs)
        self.full = sim.kept_cumsum("ctx", ctx * seqs)
        windows = sorted({w for stage in model.stages for w, _ in stage.windowed})
        self.windowed = {
            w: sim.kept_cumsum(("window", w), np.minimum(ctx, w) * seqs) for w in windows
        }

    @property
    def max_n(self) -> int:
        """Largest batch the paths are long enough to evaluate."""
        if self.count.shape[1] == 0:
            return 0
        return int(self.count[:, -1].min())

    def _column(self, a: FloatArray, n: int) -> FloatArray:
        """``a`` at the request holding each path's n-th sequence."""
        if self.uniform_n:
            out: FloatArray = a[:, -(-n // self.uniform_n) - 1]
            return out
        j = np.argmax(self.count >= n, axis=1)
        picked: FloatArray = a[np.arange(a.shape[0]), j]
        return picked

    def point(self, n: int) -> LatencyPoint:
        if n <= 0 or n > self.max_n:
            raise ValueError(f"batch {n} outside the simulated range 1..{self.max_n}")
        full = self._column(self.full, n)
        count = self._column(self.count, n)
        win = {w: self._column(a, n) for w, a in self.windowed.items()}
        kv = []
        for stage in self.model.stages:
            k = stage.full_bytes_per_token * full + 2.0 * stage.state_bytes * count
            for window, per_token in stage.windowed:
                k = k + per_token * win[window]
            kv.append(k[:, None])
        prefill = min(max(self.model.max_num_batched_tokens - n, 0), n * self.prefill_per_seq)
        steps = self.model.step_seconds(
            np.array([float(n)]), np.stack(kv), np.array([prefill]), self.mean_ctx
        )[:, 0]
        # nearest-rank quantiles (the (M − 1)·q-th smallest of the M batches)
        k50, k95 = (int(q * (len(steps) - 1)) for q in (0.5, 0.95))
        part = np.partition(steps, (k50, k95))
        p50, p95 = float(part[k50]), float(part[k95])
        mean = float(steps.mean())
        decode = self.model.step_seconds(
            np.array([float(n)]), np.stack(kv), np.zeros(1), self.mean_ctx
        )[:, 0]
        d50 = float(np.partition(decode, k50)[k50])
        memory = self.model.step_seconds(
            np.array([float(n)]), np.stack(kv), np.array([prefill]), self.mean_ctx, flops=False
        )[:, 0]
        bound = "compute" if float(np.partition(memory, k50)[k50]) < p50 * (1 - 1e-9) else "memory"
        return LatencyPoint(
            n, p50 * 1e3, p95 * 1e3, n / mean, self.sizing.probability(n), d50 * 1e3, bound
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
