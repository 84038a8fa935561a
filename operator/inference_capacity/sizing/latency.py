"""Step latency, TTFT and throughput of one replica, from operations (issue 19).

**One step, per rank and PP stage** (TP ranks are symmetric; a token passes every stage, so a
replica's step is the sum over stages), for D decode sequences and a prefill chunk of P tokens
(T = D + P tokens through the layers, S = D + 1 sampled when a chunk rides along):

* **dense GEMMs**: ``max(weight bytes / BW, FLOPs / (peak[dtype] × GEMM_EFFICIENCY))`` with
  ``FLOPs = 2 × dense parameters × T + 2 × lm_head parameters × S``: the embedding is a row
  gather (no FLOPs, only the batch's rows read) and the lm_head runs only for sampled tokens.
  ``peak[dtype]``: the catalog's dense FP8/FP4 tensor peak where the checkpoint's weights are
  FP8/FP4 and the GPU has one, else BF16 (weight-only kernels dequantize to BF16).
* **MoE experts**: a step touches ``E × (1 − (1 − k/E)^T)`` distinct experts (uniform routing);
  ``max(touched bytes / BW, 2 × k/E × expert parameters × T / (peak × efficiency))``, the
  efficiency and the kernel's fixed latency by GPU family (``perf.moe_terms``);
  weight-only integer experts (Marlin's MoE kernel, :func:`experts_weight_only`) at their own
  per-op share of the bandwidth and flat share of the BF16 peak (``perf.MOE_WO_*``).
* **attention**: decode reads each sequence's KV (full/MLA layers ``c × bytes/token``, sliding
  and chunked layers ``min(c, window) ×``, Mamba/GDN ``2 × state``) at BW; a prefill chunk's
  ``4 × heads × head_dim × context`` FLOPs per token and full layer at the BF16 peak ×
  ATTENTION_EFFICIENCY (context: the mean causal position of a prompt token, windows capped).
* **TP all-reduce**: two per layer, each ``ALLREDUCE_LATENCY_S + 2 (tp − 1)/tp × T × hidden ×
  2 bytes / one-direction link bandwidth`` (catalog ``interconnect_bandwidth``); a q/k norm
  over every head (MiniMax-M2) adds its variance's all-reduce, ``ALLREDUCE_LATENCY_S`` each
  (``VllmRules.qk_norm_allreduces``: two per layer before vLLM 0.14, one from 0.14). On
  PCIe-only GPUs the latency grows with the ring's hops and the bytes move at the pair's or
  NCCL's ring share of the link (:func:`allreduce_terms`).
* **fixed kernel latencies** (:func:`launch_seconds`): per layer its GEMMs, small elementwise
  kernels, the attention and the fused-MoE kernel at their measured floors, plus
  ``STEP_OVERHEAD_S`` (the engine's CPU time) per step.

BW is the datasheet HBM bandwidth × the HBM efficiency (0.80, overridable). The constants are in
:mod:`.perf`, fitted on aiconfigurator-core's per-operation tables only (never on an end-to-end
run: every point of ``tests/data/latency-points.jsonl`` is out of sample).

**The scheduler** (vLLM V1, chunked prefill, ``--max-num-batched-tokens`` B): with N requests
in a closed loop (each replaced when it ends), mean uncached prompt I and output O, a step runs
D decoding sequences and, in a fraction f of steps, a prefill chunk of up to B − D tokens. The
no-queueing point: TTFT₀ = the prompt's chunk steps (⌊I / (B − D)⌋ full ones and the remainder's)
+ half a step + the request overhead,
E2E = TTFT + (O − 1) × mean step, throughput λ = N / E2E (Little's law), D = λ (O − 1) × mean
step, f = λ I × mean step / chunk; solved by a few fixed-point passes. The request overhead is
``REQUEST_OVERHEAD_S`` + ``TOKENIZE_S_PER_TOKEN`` × the prompt. When the prefill demand
λ I × mean step exceeds the step's budget B − D, the replica is **saturated**: every step carries
a full chunk, λ is the budget's (B − D) / (I × step) whatever N, and TTFT = N / λ − (O − 1) ×
step grows with N (Little's law). **Lock step**: where every request has the same prompt and
output (a fixed-length benchmark's closed loop), the first wave prefills as many prompts as one
step's budget holds, g = min(N, ⌊(B − D) / I⌋), so those g end together and their successors
arrive together, cycle after cycle: a request's first token then waits for the step prefilling
all g prompts (step(D, g × I), not step(D, I)). Measured (``benchmarks.latency_accuracy``, out
of sample): where N prompts fit one step, median measured / predicted TTFT 1.01 with it, 2.26
with spread arrivals (by the data's series 0.39–2.1: some clients' runs were not in lock step,
and there it over-predicts, the safe side). Varied lengths break the groups up, so any spread
keeps the spread arrivals. ITL p50/p95/p99 are quantiles of the step mix: the Monte Carlo
batches of :mod:`.distribution` (each sequence at a uniform point of its decode) as decode-only
steps with weight 1 − f and the same batches with the chunk with weight f. TTFT p95 adds the
spread of prompt lengths (a chunk step per B − D tokens of the p95 prompt).

What the model does not know: per-kernel efficiencies by shape (one constant per op class),
speculative decoding, CPU-bound detokenization at very high request rates, expert parallelism
and data-parallel attention, PP micro-batch overlap (stages add up: an upper bound), preemption
(the sizing keeps it below its target), and routing skew (uniform expert routing).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar, cast

import numpy as np
import numpy.typing as npt

from ..engines import StartupPrediction
from ..engines.vllm import runs_flash_attn_3
from ..hardware import DEFAULT_HBM_EFFICIENCY, Gpu, dense_flops, tensor_flops
from ..ledger import layers_on_rank
from ..ledger.kv import PACKED_FORMATS, kv_token_format
from ..ledger.kv import token_bytes as kv_token_bytes
from ..memo import ValueMemo
from ..model import AttnKind, ModelShape
from ..model.quant import tensor_format
from . import perf
from .distribution import DistributionSizing, MixSizing

FloatArray = npt.NDArray[np.float64]
T = TypeVar("T")
#: the arrivals a TTFT assumes (:func:`serve`'s ``lockstep``)
Arrivals = Literal["lockstep", "spread"]


#: the KV dtypes of the FP8 decode rate (the per-op rows' ``fp8``: E4M3, which ``fp8`` means)
FA3_FP8_KV_DTYPES = frozenset({"fp8", "fp8_e4m3"})


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
    """What one step reads and computes on one rank of one PP stage."""

    dense_weight_bytes: int  # read every step (all but routed experts, embedding and lm_head)
    expert_weight_bytes: int  # resident routed experts (read as far as touched)
    full_bytes_per_token: int  # full attention + MLA
    windowed: tuple[tuple[int, int], ...]  # (window, bytes/token) of sliding/chunked layers
    state_bytes: int  # Mamba/GDN state per sequence
    dense_params: float  # dense parameters on the rank a token goes through (no lm_head)
    lm_head_params: float  # lm_head parameters on the rank (last stage only)
    lm_head_bytes: int  # the lm_head's bytes on the rank (read every step, last stage)
    expert_params: float  # resident routed-expert parameters on the rank
    attn_flops_per_ctx: float  # 4 × heads_per_rank × head_dim × full layers
    layers: int
    dense_flops: float  # dense tensor peak FLOP/s of the dense GEMMs' dtype
    expert_flops: float  # the same for the expert GEMMs
    attn_flops: float  # achievable FLOP/s of prefill attention
    allreduce_s: float  # fixed all-reduce cost per step (latency × count)
    allreduce_s_per_token: float  # bytes-over-link cost per token per step
    fixed_s: float = 0.0  # the stage's kernels' fixed latencies per step (launch_seconds)
    #: the routed experts are weight-only integers (Marlin's MoE kernel: perf.MOE_WO_*)
    experts_weight_only: bool = False
    #: Marlin's bandwidth share and BF16-peak efficiency on this GPU
    #: (:func:`perf.moe_weight_only_terms`)
    moe_wo_terms: tuple[float, float] = perf.MOE_WO_OTHER
    #: the float experts' kernel: (plateau, fixed latency) on this GPU (:func:`perf.moe_terms`)
    moe_terms: tuple[float, float] = perf.MOE_OTHER
    #: the most bytes/s the decode attention reads this stage's KV at, 0 where the HBM share
    #: sets it: FlashAttention 3 over an FP8 cache (:data:`perf.FA3_FP8_KV_DECODE_BYTES_PER_S`)
    kv_read_cap: float = 0.0

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
    flops: float | None  # achievable dense BF16 FLOP/s per GPU (reporting)
    num_experts: int
    experts_per_token: int
    hbm_efficiency: float
    max_num_batched_tokens: int
    gpus: int = 1  # GPUs of one replica (TP × PP)
    async_scheduling: bool = False  # the engine's CPU step overlaps the GPU's (_with_cpu)

    def weight_bytes(self, stage: StageModel, tokens: FloatArray | float) -> FloatArray:
        """Weight bytes a step of ``tokens`` reads on one rank of the stage."""
        t = np.asarray(tokens, dtype=np.float64)
        dense = float(stage.dense_weight_bytes + stage.lm_head_bytes)
        if self.num_experts <= 0 or stage.expert_weight_bytes == 0:
            return np.full_like(t, dense + stage.expert_weight_bytes)
        share = experts_touched(self.num_experts, self.experts_per_token, t) / self.num_experts
        out: FloatArray = dense + stage.expert_weight_bytes * share
        return out

    def _stage_seconds(
        self,
        stage: StageModel,
        tokens: Any,
        sampled: Any,
        p: Any,
        prefill_ctx: float,
        kv: Any,
        flops: bool,
        mx: Callable[[Any, Any], Any],
    ) -> Any:
        """One stage's step (the module doc's terms) on floats or arrays alike: ``mx`` is
        ``max`` for floats, ``np.maximum`` for arrays (the one place the formula is). ``mx``
        only meets the token terms (``tokens``, ``sampled``, ``p``); ``kv`` enters by + and /
        alone, so scalar tokens with ``max`` and an array ``kv`` give an array (the decode
        steps of many batches at once, :meth:`step_seconds`)."""
        bw = self.bandwidth
        dense_mem = stage.dense_weight_bytes / bw
        t = stage.fixed_s + kv / (min(bw, stage.kv_read_cap) if stage.kv_read_cap else bw)
        if flops:
            dense_fl = 2.0 * stage.dense_params * tokens
            t = t + mx(dense_mem, dense_fl / (stage.dense_flops * _gemm_eff(tokens, mx)))
            head_fl = 2.0 * stage.lm_head_params * sampled
            head_c = head_fl / (stage.dense_flops * _gemm_eff(sampled, mx))
            t = t + mx(stage.lm_head_bytes / bw, head_c)
            t = t + stage.attn_flops_per_ctx * prefill_ctx * p / stage.attn_flops
        else:
            t = t + dense_mem + stage.lm_head_bytes / bw
        if stage.expert_weight_bytes:
            e, k = self.num_experts, self.experts_per_token
            wo = stage.experts_weight_only
            touched = e * (1.0 - (1.0 - k / e) ** tokens)
            wo_share, wo_eff = stage.moe_wo_terms
            mem = stage.expert_weight_bytes * touched / e / (bw * wo_share if wo else bw)
            if flops:
                if wo:  # Marlin dequantizes in the kernel: a share of the BF16 peak, flat in M
                    eff = wo_eff
                else:
                    # each touched expert's grouped GEMM sees M = T × k / touched rows; a step
                    # of no tokens (a prefill-only workload's decode step) has no expert FLOPs:
                    # the efficiency is floored so that 0 / eff stays 0 instead of 0 / 0
                    m = tokens * k / mx(touched, 1e-9)
                    eff = mx(stage.moe_terms[0] * m / (m + perf.GEMM_HALF_M), 1e-12)
                fl = 2.0 * k / e * stage.expert_params * tokens / (stage.expert_flops * eff)
                mem = mx(mem, fl)
            t = t + mem
        return t + stage.allreduce_s + stage.allreduce_s_per_token * tokens

    def step_seconds(
        self,
        n: FloatArray | float,
        kv_per_stage: FloatArray,
        prefill_tokens: FloatArray | float,
        prefill_ctx: float,
        flops: bool = True,
    ) -> FloatArray:
        """Step times for ``n`` decoding sequences plus a chunk of ``prefill_tokens`` whose
        tokens attend to ``prefill_ctx`` positions on average; ``kv_per_stage[s]`` = KV bytes
        the decode sequences read on stage s (any shape broadcasting with n). ``flops`` False:
        the memory terms only (what the step would be if nothing were compute-bound)."""
        if np.ndim(n) == 0 and np.ndim(prefill_tokens) == 0:
            # one batch shape, many KV reads (BatchLatency.point): the token terms on floats,
            # only the KV terms on arrays (the same operations in the same order)
            d: Any = float(n)
            p: Any = float(prefill_tokens)
            tokens: Any = max(d + p, 0.0)
            sampled: Any = d + (1.0 if p > 0 else 0.0)
            mx: Callable[[Any, Any], Any] = max
        else:
            d = np.asarray(n, dtype=np.float64)
            p = np.asarray(prefill_tokens, dtype=np.float64)
            tokens = np.maximum(d + p, 0.0)
            sampled = d + (p > 0)
            mx = np.maximum
        gpu: FloatArray = np.zeros(np.broadcast(d, p, kv_per_stage[0]).shape)
        for s, stage in enumerate(self.stages):
            gpu = gpu + self._stage_seconds(
                stage, tokens, sampled, p, prefill_ctx, kv_per_stage[s], flops, mx
            )
        out: FloatArray = self._with_cpu(gpu, np.maximum)
        return out

    def step_scalar(
        self,
        n: float,
        kv_per_stage: list[float],
        prefill_tokens: float,
        prefill_ctx: float,
        flops: bool = True,
    ) -> float:
        """:meth:`step_seconds` for one step, on floats (the scheduler's many evaluations)."""
        tokens = max(n + prefill_tokens, 0.0)
        sampled = n + (1.0 if prefill_tokens > 0 else 0.0)
        gpu = 0.0
        for s, stage in enumerate(self.stages):
            gpu += self._stage_seconds(
                stage, tokens, sampled, prefill_tokens, prefill_ctx, kv_per_stage[s], flops, max
            )
        return float(self._with_cpu(gpu, max))

    def _with_cpu(self, gpu: Any, mx: Callable[[Any, Any], Any]) -> Any:
        """The step from its GPU time and the engine's CPU time per step
        (``perf.STEP_OVERHEAD_S``): in series without async scheduling (vLLM V1's engine core
        schedules, runs the step and waits for its sampled tokens before scheduling the next:
        v1/engine/core.py ``EngineCore.step``); overlapped with it (the larger of the two) with
        async scheduling, whose scheduler runs one step ahead of the GPU
        (v1/core/sched/async_scheduler.py; ``EngineCore.step_with_batch_queue``)."""
        if self.async_scheduling:
            return mx(gpu, perf.STEP_OVERHEAD_S)
        return gpu + perf.STEP_OVERHEAD_S


#: per model shape (by value: a sweep plans one model many times), shared by every thread
_BY_MODEL: ValueMemo[tuple[ModelShape, object], object] = ValueMemo(256)


def _memo(shape: ModelShape, key: object, make: Callable[[], T]) -> T:
    return cast(T, _BY_MODEL.get((shape, key), make))


def _params(shape: ModelShape) -> dict[str, float]:
    """Parameters by group (checkpoint tensors)."""
    return _memo(
        shape, "params", lambda: {k: float(v) for k, v in shape.parameters_by_group().items()}
    )


@dataclass(frozen=True, slots=True)
class StageReads:
    """What one rank of a stage reads in a decode step, and its layers by kind."""

    full_bytes_per_token: int  # full attention + MLA
    windowed: tuple[tuple[int, int], ...]  # (window, bytes/token) of sliding/chunked layers
    state_bytes: int  # Mamba/GDN state per sequence
    attn_layers: int  # full-attention and MLA layers
    layers: int
    #: MLA layers (DeepSeek-V2/V3, Kimi-K2; not DeepSeek-V4's compressed attention, whose
    #: kernels are its own): their attention half is the MLA module (launch_seconds)
    mla_layers: int


def _stage_reads(
    shape: ModelShape,
    tp: int,
    pp: int,
    stage: int,
    kv_bytes: int,
    dtype_bytes: int,
    kv_format: str = "",
) -> StageReads:
    """One rank of a stage's reads and layers; ``kv_format``: the KV dtype's page layout
    (``ledger.kv.kv_token_format``)."""
    packed = kv_format in PACKED_FORMATS  # a decode step reads the packed page's bytes

    def make() -> StageReads:
        full = 0
        windowed: dict[int, int] = {}
        state = 0
        attn_layers = 0
        mla_layers = 0
        layers = 0
        for layer, n in layers_on_rank(shape, pp, stage):
            layers += n
            tb = n * (
                kv_token_bytes(layer, tp, kv_bytes, kv_format)
                if packed
                else layer.token_bytes(tp, kv_bytes)
            )
            if layer.kind in (AttnKind.FULL, AttnKind.MLA):
                full += tb
                attn_layers += n
                if layer.kind is AttnKind.MLA and not layer.compress_ratio:
                    mla_layers += n
            elif layer.kind in (AttnKind.SLIDING, AttnKind.CHUNKED):
                windowed[layer.window] = windowed.get(layer.window, 0) + tb
            elif layer.mamba is not None:
                state += n * layer.mamba.bytes_per_sequence(tp, dtype_bytes)
        return StageReads(
            full, tuple(sorted(windowed.items())), state, attn_layers, layers, mla_layers
        )

    return _memo(shape, ("reads", tp, pp, stage, kv_bytes, dtype_bytes, kv_format), make)


def _gemm_eff(m: Any, mx: Callable[[Any, Any], Any]) -> Any:
    mm = mx(m, 1.0)
    return perf.GEMM_EFFICIENCY * mm / (mm + perf.GEMM_HALF_M)


def gemm_efficiency(m: FloatArray | float) -> FloatArray:
    """Fraction of the tensor peak a GEMM of M rows sustains: ``GEMM_EFFICIENCY × M / (M +
    GEMM_HALF_M)`` (tiles of a small M leave the tensor cores idle; large M approaches the
    plateau). Small-M GEMMs are bound by their weight bytes anyway (the max with the memory
    term); this shapes the middle, where a step carries a prefill chunk."""
    out: FloatArray = _gemm_eff(np.asarray(m, dtype=np.float64), np.maximum)
    return out


def launch_seconds(
    layers: int,
    moe: bool,
    head: bool,
    fp8: bool,
    moe_launch_s: float = perf.MOE_OTHER[1],
    mla_layers: int = 0,
    mla_fixed_s: float = 0.0,
) -> float:
    """The fixed latencies of one rank's kernels in a step (sizing/perf.py, per-op tables):
    per layer its GEMMs (4 dense; 3 and the fused-MoE kernel in a MoE layer), the small
    elementwise kernels (and the FP8 activation quantization that stands alone), an attention
    (or Mamba/GDN state) kernel; the lm_head GEMM on the last stage. What the bytes/FLOPs
    bounds do not see: at TP8 or a small batch they are most of the step. ``moe``: the stage
    holds routed experts, and every layer of it is counted as a MoE layer (DeepSeek's first
    dense layers or Llama 4's interleaved dense ones are an approximation). A block-FP8 linear
    costs a plain GEMM's fixed latency (sizing/perf.py says why); ``moe_launch_s``: the fused-MoE
    kernel's (:func:`perf.moe_terms` by GPU family; :func:`experts_weight_only` ones:
    ``perf.MOE_WO_LAUNCH_S``). ``mla_layers`` of the
    layers are MLA ones, whose attention half is the MLA module's ``mla_fixed_s``
    (:func:`perf.mla_module_fixed_s`) instead of two GEMMs, three small kernels and the
    attention kernel."""
    gemms = perf.GEMMS_PER_MOE_LAYER if moe else perf.GEMMS_PER_DENSE_LAYER
    small = perf.SMALL_KERNELS_PER_LAYER - (1 if moe else 0)  # SiLU inside the fused MoE
    small += perf.FP8_QUANT_PER_LAYER if fp8 else 0
    per_layer = gemms * perf.GEMM_LAUNCH_S + small * perf.SMALL_KERNEL_S + perf.ATTENTION_LAUNCH_S
    if moe:
        per_layer += moe_launch_s
    attention_half = (
        perf.ATTENTION_GEMMS_PER_LAYER * perf.GEMM_LAUNCH_S
        + perf.ATTENTION_SMALL_KERNELS_PER_LAYER * perf.SMALL_KERNEL_S
        + perf.ATTENTION_LAUNCH_S
    )
    mla = mla_layers * (mla_fixed_s - attention_half)
    return layers * per_layer + mla + (perf.GEMM_LAUNCH_S if head else 0.0)


def gemm_dtype(shape: ModelShape, experts: bool) -> str:
    """The tensor-core input dtype of the model's linear (or expert) GEMMs: FP8/FP4 where the
    checkpoint's weights are float-quantized at that width and the scope covers them."""
    q = shape.quantization
    if q is None or not q.float_format:
        return "bf16"
    if q.scope == "experts" and not experts:
        return "bf16"
    return "fp8" if q.weight_bits == 8 else "fp4" if q.weight_bits == 4 else "bf16"


#: weight-only integer formats vLLM runs on a Marlin-style MoE kernel (model/quant.py methods)
_WEIGHT_ONLY_METHODS = frozenset({"compressed-tensors", "gptq", "awq", "auto-round"})


def experts_weight_only(shape: ModelShape) -> bool:
    """Whether the routed experts are weight-only integers (INT4/INT8 weights, BF16
    activations): the compressed-tensors WNA16, GPTQ, AWQ or AutoRound format of the experts'
    tensor, which vLLM's MoE runs on Marlin (``perf.MOE_WO_*``)."""
    q = shape.quantization
    if q is None or not shape.is_moe:
        return False

    def make() -> bool:  # once per model shape (a sweep plans one shape many times)
        assert q is not None
        experts = next((t for t in shape.tensors if t.experts > 1 and t.quantizable), None)
        fmt = tensor_format(q, experts) if experts is not None else None
        if fmt is None or fmt.float_format or fmt.weight_bits not in (4, 8):
            return False
        return fmt.method in _WEIGHT_ONLY_METHODS

    return _memo(shape, "experts-weight-only", make)


def allreduce_terms(gpu: Gpu, tp: int) -> tuple[float, float]:
    """(latency of one TP all-reduce, seconds; the share of the one-way link its bytes move at):
    NVLink and other fabrics :data:`perf.ALLREDUCE_LATENCY_S` / :data:`perf.LINK_EFFICIENCY`;
    PCIe-only GPUs a latency a ring hop (:data:`perf.PCIE_ALLREDUCE_HOP_S`) and the pair's or,
    from four GPUs, NCCL's ring share (:data:`perf.PCIE_PAIR_LINK_EFFICIENCY`,
    :data:`perf.PCIE_RING_LINK_EFFICIENCY`)."""
    if gpu.interconnect != "pcie":
        return perf.ALLREDUCE_LATENCY_S, perf.LINK_EFFICIENCY
    ring = perf.PCIE_RING_LINK_EFFICIENCY if tp > 2 else perf.PCIE_PAIR_LINK_EFFICIENCY
    return perf.PCIE_ALLREDUCE_HOP_S * (tp - 1), ring


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
    params = _params(shape)
    bf16 = dense_flops(gpu)
    if not bf16:
        return None
    dense_peak = tensor_flops(gpu, gemm_dtype(shape, False)) or bf16
    expert_peak = tensor_flops(gpu, gemm_dtype(shape, True)) or bf16
    link = gpu.interconnect_bandwidth_bytes_per_s
    weight_only = experts_weight_only(shape)
    moe = perf.moe_terms(gpu.compute_capability)
    fp8_kv_cap = (
        perf.FA3_FP8_KV_DECODE_BYTES_PER_S
        if rs.kv_cache_dtype in FA3_FP8_KV_DTYPES
        and runs_flash_attn_3(shape, gpu.name, rs.dtype, rs.kv_cache_dtype, rs.rules)
        else 0.0
    )
    stages: list[StageModel] = []
    dense_total = sum(v for g, v in params.items() if g not in ("embedding", "experts", "lm_head"))
    for stage in range(pp):
        r = next(x for x in pred.ranks if x.stage == stage)
        experts = r.weights.by_group.get("experts", 0)
        embedding = r.weights.by_group.get("embedding", 0)
        reads = _stage_reads(
            shape, tp, pp, stage, rs.kv_bytes, rs.dtype_bytes, kv_token_format(rs.kv_cache_dtype)
        )
        layers = reads.layers
        heads = max(1, shape.num_attention_heads // tp)
        share = layers / max(shape.num_layers, 1)
        has_head = r.weights.by_group.get("lm_head", 0) > 0 or (
            shape.tie_word_embeddings and stage == pp - 1
        )
        ar_fixed = ar_token = 0.0
        if tp > 1:
            # two per layer (attention out, MLP/MoE out), plus a q/k norm over every head's
            # variance (MiniMax-M2: a few floats a token, so its latency alone)
            norm = rs.rules.qk_norm_allreduces if shape.qk_norm_tp else 0
            latency, efficiency = allreduce_terms(gpu, tp)
            ar_fixed = (2 + norm) * layers * latency
            if link:
                one_way = link / perf.LINK_DIRECTIONS * efficiency
                ar_token = (
                    2 * layers * 2 * (tp - 1) / tp * shape.hidden_size * perf.ACTIVATION_BYTES
                ) / one_way
        head_bytes = r.weights.by_group.get("lm_head", 0)
        if not head_bytes and shape.tie_word_embeddings and stage == pp - 1:
            head_bytes = embedding  # tied: the embedding matrix is the head
        head_params = params.get("lm_head", 0.0) or (
            params.get("embedding", 0.0) if shape.tie_word_embeddings else 0.0
        )
        stages.append(
            StageModel(
                dense_weight_bytes=r.weights.total
                - experts
                - embedding
                - r.weights.by_group.get("lm_head", 0),
                expert_weight_bytes=experts,
                full_bytes_per_token=reads.full_bytes_per_token,
                windowed=reads.windowed,
                state_bytes=reads.state_bytes,
                dense_params=dense_total * share / tp,
                lm_head_params=head_params / tp if has_head else 0.0,
                lm_head_bytes=head_bytes if has_head else 0,
                expert_params=params.get("experts", 0.0) * share / tp,
                attn_flops_per_ctx=4.0 * heads * shape.head_dim * reads.attn_layers,
                layers=layers,
                dense_flops=dense_peak,
                expert_flops=expert_peak,
                attn_flops=bf16 * perf.ATTENTION_EFFICIENCY,
                allreduce_s=ar_fixed,
                allreduce_s_per_token=ar_token,
                fixed_s=launch_seconds(
                    layers,
                    bool(experts),
                    has_head,
                    gemm_dtype(shape, False) == "fp8",
                    perf.MOE_WO_LAUNCH_S if weight_only else moe[1],
                    reads.mla_layers,
                    perf.mla_module_fixed_s(gpu.compute_capability),
                ),
                experts_weight_only=weight_only,
                moe_wo_terms=perf.moe_weight_only_terms(gpu.compute_capability),
                moe_terms=moe,
                kv_read_cap=fp8_kv_cap,
            )
        )
    return LatencyModel(
        stages=tuple(stages),
        bandwidth=peak * eff,
        flops=bf16,
        num_experts=shape.num_experts,
        experts_per_token=shape.experts_per_token,
        hbm_efficiency=eff,
        max_num_batched_tokens=rs.max_num_batched_tokens,
        gpus=tp * pp,
        async_scheduling=pred.async_scheduling,
    )


@dataclass(frozen=True, slots=True)
class Serving:
    """The closed-loop steady state of one replica at N requests in flight (means)."""

    decode_seqs: float  # D: sequences decoding in a step
    step_s: float  # mean step (TPOT)
    decode_step_s: float  # a step without a chunk
    mixed_step_s: float  # a step with a chunk
    chunk_tokens: float
    mixed_fraction: float  # f: share of steps carrying a chunk
    ttft_s: float
    requests_per_s: float
    saturated: bool


#: fixed-point passes of :func:`serve` (the scores of 6 and 10 passes agree; 4 leave TTFT off)
SERVE_PASSES = 6


def lockstep_group(run: float, prompt: float, cap: float) -> int:
    """Requests of a closed loop of identical requests that arrive together: as many prompts
    as one step's prefill budget ``cap`` holds (at least 1, at most the ``run`` running). The
    first wave prefills them in one step, so they end in the same step and their successors
    arrive together, cycle after cycle (the module doc)."""
    return max(1, min(int(run), int(cap // prompt)))


def serve(
    step: Callable[[float, float], float],
    n: int,
    prompt: float,
    output: float,
    budget: int,
    running_cap: int | None = None,
    lockstep: bool = False,
) -> Serving:
    """The steady state of ``n`` closed-loop clients (see the module doc). ``step(D, P)`` is
    the mean step of D decoding sequences plus a chunk of P prefill tokens; ``prompt`` the mean
    uncached prompt, ``output`` the mean output; ``running_cap`` the most sequences running at
    once (KV pool / max-num-seqs; the rest queue). ``lockstep``: every request has the same
    prompt and output, so arrivals come in groups (:func:`lockstep_group`) and a request's
    first token waits for its group's chunk step; otherwise arrivals spread, one prompt's
    chunk per step. The step mix (ITL, mean step) is the spread one either way: the same
    prefill tokens per second, and the conservative side for ITL quantiles (a lock-step
    loop's fewer, larger chunk steps fall out of p95)."""
    memo: dict[tuple[float, float], float] = {}
    raw = step

    def cached(d: float, p: float) -> float:  # the same (D, P) recurs between passes
        key = (d, p)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = raw(d, p)
        return hit

    step = cached

    run = float(min(n, running_cap) if running_cap else n)
    dec_steps = max(output - 1.0, 0.0)
    prompt = max(prompt, 1.0)
    d = run * dec_steps / (dec_steps + 1.0)
    request_s = perf.REQUEST_OVERHEAD_S + perf.TOKENIZE_S_PER_TOKEN * prompt
    td = tm = mean = step(d, 0.0)
    lam = 0.0
    f = 0.0
    chunk = 0.0
    ttft = 0.0
    for _ in range(SERVE_PASSES):
        cap = max(budget - d, 1.0)
        # the prompts that arrive together (1 when arrivals spread): their first tokens wait
        # for the one step that prefills them all
        group = lockstep_group(run, prompt, cap) if lockstep else 1
        one = min(prompt, cap)
        chunks = math.ceil(prompt / cap)
        td = step(d, 0.0)
        tm = step(d, one)
        mean_in = mean
        # its own chunks: full ones of the budget the decodes leave, then the remainder (vLLM
        # V1's scheduler gives a waiting prompt min(its tokens, the budget left) per step:
        # vllm/v1/core/sched/scheduler.py, Scheduler.schedule), not ⌈I / (B − D)⌉ full ones;
        # a group's prompts share its one step (group > 1 only where they fit one)
        own = step(d, group * prompt - (chunks - 1) * cap)
        if chunks > 1:  # full chunks before the remainder (none: no step to evaluate)
            own = (chunks - 1) * step(d, cap) + own
        ttft = own + 0.5 * mean + request_s
        lam = run / (ttft + dec_steps * mean)
        per_step = lam * prompt * mean  # prefill tokens a step must carry on average
        if per_step <= one:
            f, chunk = per_step / one, one
        else:
            f, chunk = 1.0, min(per_step, cap)
            tm = step(d, chunk)
        mean = (1.0 - f) * td + f * tm
        d_next = min(run, lam * dec_steps * mean)
        if d_next == d and mean == mean_in:
            break  # a fixed point: a pass's inputs are (D, mean), so every further one repeats
        d = d_next
    cap = max(budget - d, 1.0)
    # the most the budget serves: every step a full chunk (D from the rate, as below)
    d_sat = min(run, budget * dec_steps / (prompt + dec_steps))
    lam_sat = max(budget - d_sat, 1.0) / (prompt * step(d_sat, max(budget - d_sat, 1.0)))
    saturated = lam * prompt * mean > cap * (1.0 + 1e-6) or lam > lam_sat
    if saturated:
        # every step carries a full chunk: the budget sets the rate; D follows from it
        d = min(run, budget * dec_steps / (prompt + dec_steps))
        cap = max(budget - d, 1.0)
        td = step(d, 0.0)
        tm = mean = step(d, cap)
        f, chunk = 1.0, cap
        lam = cap / (prompt * tm)
    ttft_total = n / lam - dec_steps * mean if lam > 0 else math.inf
    if n > run and not saturated:
        saturated = True  # requests queue for a running slot
    return Serving(d, mean, td, tm, chunk, f, max(ttft_total, ttft), lam, saturated)


@dataclass(frozen=True, slots=True)
class LatencyPoint:
    max_num_seqs: int
    itl_ms_p50: float
    itl_ms_p95: float
    output_tokens_per_s: float
    preemption_probability: float
    decode_only_ms_p50: float = 0.0  # the step without a prefill chunk
    bound: str = "memory"  # "memory": HBM bytes bind; "compute": FLOPs bind
    itl_ms_p99: float = 0.0
    tpot_ms_mean: float = 0.0
    ttft_ms_p50: float = 0.0
    ttft_ms_p95: float = 0.0
    output_tokens_per_s_per_gpu: float = 0.0
    saturated: bool = False

    def itl_ms(self, quantile: str) -> float:
        """ITL at ``quantile`` ("p50", "p95" or "p99")."""
        if quantile not in ("p50", "p95", "p99"):
            raise ValueError(f"ITL quantile must be p50, p95 or p99, got {quantile!r}")
        value: float = getattr(self, f"itl_ms_{quantile}")
        return value

    def itl_target_ms(self, quantile: str) -> float:
        """What an ITL target is held to: the step ITL at ``quantile``, or the mean TPOT where
        that is longer. With long prompts the prefill-chunk steps are rare but long (Llama-3.1-70B
        FP8 H200 TP8, 8,192 / 1,024 at 32: 3 % of a request's steps at 276 ms): the p95 of the
        steps misses them (11.5 ms) while a request's mean TPOT (what ``vllm bench serve``
        reports, 19.7 ms predicted, 18.6 measured) carries them."""
        return max(self.itl_ms(quantile), self.tpot_ms_mean)


def _split_rank(q: float, wb: float, n: int) -> tuple[bool, int]:
    """Where the nearest-rank ``q`` quantile of a mixture of ``a`` (weight 1 − wb) and ``b``
    (weight wb), n samples each, lies when every b lies above every a: (in b?, its rank there),
    a's rank q / (1 − wb) or b's (q − 1 + wb) / wb."""
    if q < 1.0 - wb:
        return False, int(min(q / (1.0 - wb), 1.0) * (n - 1))
    return True, int((q - 1.0 + wb) / wb * (n - 1))


def _weighted_quantiles(
    a: FloatArray, b: FloatArray, wb: float, qs: tuple[float, ...]
) -> list[float]:
    """Quantiles of the mixture of samples ``a`` (weight 1 − wb) and ``b`` (weight wb, as many),
    nearest rank. Where every b lies above every a (a step with a chunk outlasts any without),
    the quantile is read at one rank of a or of b (:func:`_split_rank`: a partition, no sort)."""
    if wb <= 0.0 or float(b.min()) >= float(a.max()):
        at = [_split_rank(q, wb, len(a)) for q in qs]
        ka = sorted({k for in_b, k in at if not in_b})
        kb = sorted({k for in_b, k in at if in_b})
        pa = np.partition(a, ka) if ka else a
        pb = np.partition(b, kb) if kb else b
        return [float(pb[k] if in_b else pa[k]) for in_b, k in at]
    vals = np.concatenate([a, b])
    w = np.concatenate([np.full(len(a), (1.0 - wb) / len(a)), np.full(len(b), wb / len(b))])
    order = np.argsort(vals, kind="stable")
    cw = np.cumsum(w[order])
    out = []
    for q in qs:
        i = int(np.searchsorted(cw, q * cw[-1] - 1e-12))
        out.append(float(vals[order[min(i, len(vals) - 1)]]))
    return out


def _spread_one_stage(
    model: LatencyModel, sv: Serving, reads: FloatArray, prefill_ctx: float
) -> tuple[float, float, float, float, float] | None:
    """(ITL p50, p95, p99, decode step p50, its memory-only step p50) of the paths' decode
    steps with one pipeline stage, or None where :func:`_weighted_quantiles`'s fast split
    does not apply (a chunk step can fall below a decode step). With one stage the step is a
    non-decreasing function of the path's KV read (``kv`` enters by + and / only, then a max:
    :meth:`LatencyModel._stage_seconds`), so a nearest-rank quantile of the steps is the step
    at that rank of the reads: the ranks are found on the reads and only their steps are
    evaluated, on floats (:meth:`LatencyModel.step_scalar`: the same operations as the array
    path, so the same results)."""
    n = len(reads)
    wb = sv.mixed_fraction
    delta = sv.mixed_step_s - sv.decode_step_s
    d = sv.decode_seqs

    def step(read: float, flops: bool = True) -> float:
        return model.step_scalar(d, [read], 0.0, prefill_ctx, flops)

    if wb > 0.0 and not step(float(reads.min())) + delta >= step(float(reads.max())):
        return None
    k50 = (n - 1) // 2
    # decode-only steps (a) or chunk steps (b = a + delta), at their ranks of the reads
    picks = [_split_rank(q, wb, n) for q in (0.5, 0.95, 0.99)]
    order = sorted({k50, *(k for _, k in picks)})
    at = np.partition(reads, order)
    steps = {k: step(float(at[k])) for k in order}
    p50, p95, p99 = (steps[k] + delta if in_b else steps[k] for in_b, k in picks)
    return p50, p95, p99, steps[k50], step(float(at[k50]), flops=False)


def queued(pt: LatencyPoint, n: int, output: float) -> LatencyPoint:
    """``pt`` (the replica at its running limit) with ``n`` > that limit requests in flight:
    the rest wait for a slot, so throughput stays and TTFT = n / λ − (O − 1) × TPOT."""
    if n <= pt.max_num_seqs or pt.output_tokens_per_s <= 0:
        return pt
    lam = pt.output_tokens_per_s / output
    ttft = n / lam - max(output - 1.0, 0.0) * pt.tpot_ms_mean / 1e3
    grow = ttft * 1e3 - pt.ttft_ms_p50
    return replace(pt, ttft_ms_p50=ttft * 1e3, ttft_ms_p95=pt.ttft_ms_p95 + grow, saturated=True)


#: every how many Monte Carlo batches the ITL quantiles are taken from (speed; see point())
QUANTILE_STRIDE = 4


class BatchLatency:
    """Latency of N requests in flight, along the sizing's Monte Carlo paths (binding mix). Per
    path, the KV read of its first j requests is a prefix sum of per-request features (context,
    windowed context, sequences) that do not depend on the model, so the simulation keeps them
    for every plan of the same workload; a point combines one column of them."""

    def __init__(self, model: LatencyModel, sizing: DistributionSizing) -> None:
        self.model = model
        self.sizing = sizing
        mix: MixSizing = sizing.binding
        sim = mix.paths.simulation
        pool = sim.pool

        def features() -> tuple[float, float, float, float, float, bool]:
            seqs = pool.seqs.astype(np.float64)
            ctx = sim.mid_context()
            uncached = np.maximum(pool.prompt - pool.cached, 0).astype(np.float64)
            k95 = int(0.95 * (len(uncached) - 1))
            total = float(uncached.sum())
            # a prefill token attends to its causal position: cached prefix + half the uncached
            pctx = (
                float(((pool.cached + uncached / 2.0) * uncached).sum() / total) if total else 0.0
            )
            return (
                float((ctx * seqs).sum() / seqs.sum()),
                float(uncached.mean()),
                float(np.partition(uncached, k95)[k95]),
                float(pool.output.mean()),
                pctx,
                # every request alike: a closed loop of them runs in lock-step groups
                bool(np.ptp(uncached) == 0 and np.ptp(pool.output) == 0),
            )

        # the pool's numbers do not depend on the model: once per simulation (a sweep)
        f = sim.kept("latency-features", features)
        self.mean_ctx, self.prompt, self.prompt_p95, self.output, self.prefill_ctx = f[:5]
        self.lockstep = f[5]
        self.arrivals: Arrivals = "lockstep" if self.lockstep else "spread"
        self.uniform_n = sim.uniform_n

        def seqs() -> FloatArray:
            out: FloatArray = pool.seqs.astype(np.float64)
            return out

        def ctx_seqs() -> FloatArray:
            out: FloatArray = sim.mid_context() * seqs()
            return out

        def win_seqs(w: int) -> Callable[[], FloatArray]:
            def make() -> FloatArray:
                out: FloatArray = np.minimum(sim.mid_context(), w) * seqs()
                return out

            return make

        self.count = sim.kept_cumsum("seqs", seqs)
        #: the largest batch the paths are long enough to evaluate (fixed with ``count``)
        self.max_n = int(self.count[:, -1].min()) if self.count.shape[1] else 0
        self.full = sim.kept_cumsum("ctx", ctx_seqs)
        windows = sorted({w for stage in model.stages for w, _ in stage.windowed})
        self.windowed = {w: sim.kept_cumsum(("window", w), win_seqs(w)) for w in windows}
        #: the points by N without their preemption probability (what the simulation's paths
        #: and the model give, whatever the budget): shared by :meth:`with_sizing` views
        self._points: dict[int, LatencyPoint] = {}
        #: the points with this view's sizing's preemption probability
        self._bound: dict[int, LatencyPoint] = {}

    def with_sizing(self, sizing: DistributionSizing) -> BatchLatency:
        """These batches for another sizing of the same simulation and mix (another KV budget:
        another utilization, a later step of the planner's loop): the latency terms are shared,
        the preemption probability is ``sizing``'s. ``sizing`` must read the same paths."""
        if sizing.binding.paths.simulation is not self.sizing.binding.paths.simulation:
            raise ValueError("with_sizing: another simulation's sizing")
        view = copy.copy(self)
        view.sizing = sizing
        view._bound = {}
        return view

    def _column_index(self, n: int) -> tuple[Any, Any]:
        """The index, into any (paths × requests) array, of the request holding each path's n-th
        sequence (found once for every array)."""
        if self.uniform_n:
            return slice(None), -(-n // self.uniform_n) - 1
        return np.arange(self.count.shape[0]), np.argmax(self.count >= n, axis=1)

    def _kv(self, n: int) -> list[FloatArray]:
        at = self._column_index(n)
        full = self.full[at]
        count = self.count[at]
        win = {w: a[at] for w, a in self.windowed.items()}
        kv = []
        for stage in self.model.stages:
            k = stage.full_bytes_per_token * full + 2.0 * stage.state_bytes * count
            for window, per_token in stage.windowed:
                k = k + per_token * win[window]
            kv.append(k)
        return kv

    def point(self, n: int) -> LatencyPoint:
        bound = self._bound.get(n)
        if bound is not None:
            return bound
        raw = self._points.get(n)
        if raw is None:
            raw = self._points[n] = self._compute(n)
        out = replace(raw, preemption_probability=self.sizing.probability(n))
        self._bound[n] = out
        return out

    def _compute(self, n: int) -> LatencyPoint:
        """The point at N without its preemption probability (0: set by :meth:`point`)."""
        if n <= 0 or n > self.max_n:
            raise ValueError(f"batch {n} outside the simulated range 1..{self.max_n}")
        kv = self._kv(n)
        model = self.model
        per_seq = [float(k.mean()) / n for k in kv]  # mean KV bytes per decoding sequence
        # the step quantiles over every QUANTILE_STRIDE-th batch (512 of 2,048: p99 still has
        # 5 batches above it; the mean above uses all)
        kv = [k[::QUANTILE_STRIDE] for k in kv]

        def step(d: float, p: float) -> float:
            return model.step_scalar(d, [b * d for b in per_seq], p, self.prefill_ctx)

        sv = serve(
            step, n, self.prompt, self.output, model.max_num_batched_tokens, lockstep=self.lockstep
        )
        # the batches' spread: decode steps of the D running sequences along the paths
        scale = sv.decode_seqs / n
        picked = None
        if len(kv) == 1:
            picked = _spread_one_stage(model, sv, kv[0] * scale, self.prefill_ctx)
        if picked is not None:
            p50, p95, p99, d50, m50 = picked
        else:
            kv_b = np.stack([k * scale for k in kv])
            dec = model.step_seconds(sv.decode_seqs, kv_b, 0.0, self.prefill_ctx)
            mixed = dec + (sv.mixed_step_s - sv.decode_step_s)
            p50, p95, p99 = _weighted_quantiles(dec, mixed, sv.mixed_fraction, (0.5, 0.95, 0.99))
            mem = model.step_seconds(sv.decode_seqs, kv_b, 0.0, self.prefill_ctx, flops=False)
            k50 = (len(dec) - 1) // 2
            d50 = float(np.partition(dec, k50)[k50])
            m50 = float(np.partition(mem, k50)[k50])
        bound = "compute" if m50 < d50 * (1 - 1e-9) - 1e-12 else "memory"
        tput = sv.requests_per_s * self.output
        cap = max(model.max_num_batched_tokens - sv.decode_seqs, 1.0)
        extra = max(math.ceil(self.prompt_p95 / cap) - math.ceil(self.prompt / cap), 0)
        ttft95 = sv.ttft_s + extra * sv.mixed_step_s + 0.5 * sv.step_s
        pt = LatencyPoint(
            max_num_seqs=n,
            itl_ms_p50=p50 * 1e3,
            itl_ms_p95=p95 * 1e3,
            output_tokens_per_s=tput,
            preemption_probability=0.0,
            decode_only_ms_p50=d50 * 1e3,
            bound=bound,
            itl_ms_p99=p99 * 1e3,
            tpot_ms_mean=sv.step_s * 1e3,
            ttft_ms_p50=sv.ttft_s * 1e3,
            ttft_ms_p95=ttft95 * 1e3,
            output_tokens_per_s_per_gpu=tput / max(model.gpus, 1),
            saturated=sv.saturated,
        )
        return pt

    def largest_meeting(
        self,
        itl_ms: float | None,
        upper: int,
        quantile: str = "p95",
        ttft_ms: float | None = None,
    ) -> int:
        """Largest N ≤ upper whose ITL at ``quantile`` meets ``itl_ms`` and whose TTFT p95
        meets ``ttft_ms`` (0 when even one request misses). Both grow with N: the powers of
        two first (the points :meth:`curve` shows anyway) bracket the answer, then a
        safeguarded interpolation on the margin to the targets narrows the bracket (the same
        N a bisection finds, in about half the points)."""
        hi = min(upper, self.max_n)

        def margin(n: int) -> float:
            """≤ 0: N meets both targets (the comparisons decide, not the ratios); the larger,
            the further past one of them."""
            pt = self.point(n)
            itl, ttft = pt.itl_target_ms(quantile), pt.ttft_ms_p95
            misses = (itl_ms is not None and itl > itl_ms) or (
                ttft_ms is not None and ttft > ttft_ms
            )
            ratios = [itl / itl_ms - 1.0] if itl_ms is not None else []
            ratios += [ttft / ttft_ms - 1.0] if ttft_ms is not None else []
            m = max(ratios, default=-1.0)
            return max(m, 1e-12) if misses else min(m, 0.0)

        if hi <= 0:
            return 0
        m_lo = margin(1)
        if m_lo > 0:
            return 0
        lo, up = 1, 0  # lo meets; up (when > 0) misses
        m_up = 0.0
        n = 2
        while n <= hi:
            m = margin(n)
            if m > 0:
                up, m_up = n, m
                break
            lo, m_lo = n, m
            n *= 2
        if up == 0:
            if lo == hi:
                return lo
            m = margin(hi)
            if m <= 0:
                return hi
            up, m_up = hi, m
        bisect = False
        while up - lo > 1:
            # the margin's zero by linear interpolation, kept inside the bracket; after a step
            # that did not halve the bracket (a curved margin), the midpoint
            width = up - lo
            if bisect:
                mid = (lo + up) // 2
            else:
                guess = lo + width * (-m_lo) / (m_up - m_lo) if m_up > m_lo else lo + 1
                mid = min(max(int(guess), lo + 1), up - 1)
            m = margin(mid)
            if m <= 0:
                lo, m_lo = mid, m
                if up - lo > 1:
                    m = margin(lo + 1)
                    if m > 0:
                        return lo
                    lo, m_lo = lo + 1, m
            else:
                up, m_up = mid, m
            bisect = not bisect and (up - lo) * 2 > width
        return lo

    def curve(self, extra: tuple[int, ...] = ()) -> tuple[LatencyPoint, ...]:
        """Points at powers of two up to the simulated range, plus ``extra``."""
        top = self.max_n
        ns = {1 << k for k in range(0, 20) if (1 << k) <= top}
        ns.update(n for n in extra if 0 < n <= top)
        return tuple(self.point(n) for n in sorted(ns))
