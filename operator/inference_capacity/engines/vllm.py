"""What vLLM will allocate at startup, by version: the numbers its log prints, and whether it
starts at all.

Exact parts (from vLLM's code, each citing the vLLM file it follows): the budget formula per
era, weights, KV page sizes, groups, blocks, tokens and concurrency, defaults. Measured parts
(activation peak, non-torch memory, CUDA-graph pool) are modelled from the architecture and the
batch shape, with constants calibrated on real startup logs (tests/data/vllm-startup-logs.jsonl);
each constant says where it comes from. ``benchmarks/accuracy.py`` measures the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final

from ..hardware import find_gpu, sm100_family
from ..ledger.kv import (
    PACKED_FORMATS,
    KvLayout,
    kv_dtype_bytes,
    kv_layout,
    kv_token_format,
    layers_on_rank,
)
from ..ledger.kv_dsv4 import DSV4_BLOCK_SIZE
from ..ledger.weights import (
    MARLIN_LAYOUT,
    MXFP4_HIDDEN_ALIGN,
    MXFP4_INTER_ALIGN,
    Mxfp4Layout,
    WeightBreakdown,
    pp_layer_ranges,
    weight_breakdown,
)
from ..model import AttnKind, LayerAttention, ModelShape, resolve_dtype
from ..model.quant import tensor_format
from ..model.shapes import Group, cdiv, vocab_rows_per_rank
from ..units import GiB, MiB, gib
from ..vocab import DTYPE_BYTES
from .versions import NEWEST_SUPPORTED, Era, Version, parse_version
from .vllm_flag_table import flag_table
from .vllm_flags import DRAFT_MODEL_METHODS, MTP_METHODS, SpeculativeConfig
from .vllm_mm import (
    MM_PROFILE_ERAS,
    EncoderProfile,
    calibration,
    encoder_profile,
    text_only,
    tower_built,
)
from .vllm_rules import (
    CUDAGRAPH_MODES,
    DEFAULT_CUDAGRAPH_MODE,
    FLASH_ATTN_KV_16BIT,
    FLASHINFER_KV_DTYPES,
    VllmRules,
)

# --- calibrated constants -------------------------------------------------------------------
#: Sampler peak per logits element (R × V): bf16 logits + their fp32 copies in the sampler.
#: Fitted on vLLM 0.19.0 H100 logs (R = 1024): gemma-2-9b 3.65 GiB / (1024 × 256000) = 14.95 B;
#: Llama-3.1-8B 1.89, Qwen2.5-7B 2.21 agree within 0.06 GiB.
SAMPLER_BYTES_PER_LOGIT = 14.95
#: Forward peak per token: gate_up (2I/tp) + activation (I/tp) + ~4.26 hidden-sized copies, in the
#: model dtype. Fitted on CodeLlama-7b (0.19.0, T = 8192, vocab 32016: forward-bound) 0.77 GiB.
FORWARD_HIDDEN_COPIES = 4.26
#: V0 profiles sample every dummy sequence (R = 256) with larger fp32 intermediates: fitted on
#: Llama-3.2-1B, 0.6.4.post1, T = 512 (chunked), R = 256: 7.52 − 2.32 − 0.44 − 3.60 = 1.17 GiB
#: = 256 × 128256 × 38 B; Llama-3-8B at T = 8192 then gives 1.16 against 1.19–1.26 logged.
V0_SAMPLER_BYTES_PER_LOGIT = 38.0
#: fp32 (row, vocabulary) tensors alive at once in 0.33's sampler warm-up-params pass
#: (:attr:`VllmRules.v2_sampler_warmup_pass`; from the code, :func:`sampler_peak`): the fp32
#: copy of the logits (v1/worker/gpu/sample/sampler.py ``apply_sampling_params``,
#: ``torch.empty_like(logits, dtype=torch.float32).copy_(logits)``: every warm-up row needs
#: logits processing), and FlashInfer's ``top_k_mask_logits`` output and its softmax ``probs``
#: (flashinfer-python 0.7.2.post1, vLLM 0.33.0's pin, sampling.py::
#: top_k_top_p_sampling_from_logits, ``top_k_first``: vLLM passes top-k as a tensor, so the
#: integer-k fast path does not apply). 4 B each.
V2_WARMUP_FP32_COPIES = 3
#: Non-torch memory growth during profiling at TP = 1 (cuBLAS workspaces, modules): 0.25 GiB in
#: every 0.19.0 H100 log; 0.07 in a 0.11 log; 0.35 in a 0.9/0.10 log; V0 logs 0.12–0.44.
NON_TORCH_TP1 = {
    Era.V0: 0.30,
    Era.V1_EARLY: 0.35,
    Era.V1_PRE_NCCL: 0.35,
    Era.V1_NO_CG: 0.25,
    Era.V1_CG: 0.25,
    Era.V1_CONSUMED: 0.27,
}
#: The same on an Ampere GA10x or Ada GPU (compute capability 8.6 / 8.9: A40, A10, RTX A5000 and
#: A6000, RTX 3090/4090, L4, L40S, RTX 6000 Ada) from 0.11 (:data:`SMALL_NON_TORCH_ERAS`):
#: *fitted* on ``vllm-startup-175`` (A40, vLLM 0.26.0, TP1: "0.08 GiB for non-torch memory").
#: The TP1 logs that print the term split by architecture: Hopper and datacenter Blackwell
#: 0.16–0.27 (the 0.19.0 H100 sweep, 0.25; a B300 on 0.26.0, 0.25 with the V1 runner,
#: ``vllm-startup-169``), these cards about a third of it (the A40 above; the two RTX 4090
#: boots of vLLM 0.27.1, ``vllm-startup-171``/``173``, hold 0.27 GiB of consumed memory
#: beyond their weights where 0.16 is the V2 sampler's state from the code, so 0.11 of
#: non-torch: out of sample). No code gives either figure (driver memory the profile sees
#: grow: kernel images, library handles). The A100 (8.0) keeps the general figure, which its
#: 0.19.0 log (``vllm-startup-017``) fits better (+0.22 % of KV against +0.69 %); so do the
#: SM12x cards (RTX 5090, RTX PRO), whose logs disagree.
NON_TORCH_TP1_SM86_SM89 = 0.08
#: the compute capabilities :data:`NON_TORCH_TP1_SM86_SM89` applies to
SMALL_NON_TORCH_CAPABILITIES = frozenset({(8, 6), (8, 9)})
#: the eras it applies to (0.11 on; the older V1 and V0 figures came from logs of every kind of
#: GPU)
SMALL_NON_TORCH_ERAS = frozenset({Era.V1_NO_CG, Era.V1_CG, Era.V1_CONSUMED})
#: NCCL channel/proxy buffers allocated lazily at the first collective (TP ≥ 2): 2.07 GiB at
#: TP2 and 2.17 GiB at TP4 (0.19.0 H100 logs), ~1.38 at TP2 on H200 (0.11). NVLink GPUs and GPUs
#: the catalog does not know only: see :data:`PCIE_TP_INIT_SCALE` for PCIe-only ones.
NCCL_BASE_GIB = 2.02
NCCL_PER_RANK_GIB = 0.025
#: With PP only (TP = 1), the profile adds little: 0.07 GiB (0.19.0, Llama-3.1-8B PP2).
NON_TORCH_PP_ONLY = 0.07
#: CUDA-graph pool, FULL_AND_PIECEWISE with 51 + 51 graphs: 0.25 + 0.0195 GiB per layer on the
#: rank (0.19.0 H100 estimates: 0.84–0.89 for 32 layers, 0.86 for 28, 1.09 for 42);
#: MLA models +0.5 (DeepSeek-V2-Lite 1.57 for 27 layers). ±0.2 GiB.
CG_BASE_GIB = 0.25
CG_PER_LAYER_GIB = 0.0195
CG_MLA_EXTRA_GIB = 0.5
#: vLLM's own CUDA-graph estimate, the one it subtracts from the KV budget
#: (``GPUModelRunner.profile_cudagraph_memory``, the V1 runner: the same in the 0.18.0, 0.19.0,
#: 0.20.0, 0.22.0, 0.26.0 and 0.28.0 sources): per mode
#: (PIECEWISE, FULL) it captures the largest graph and the next one, and estimates the first
#: capture plus (graphs − 1) × the second's increment; the total is the larger first capture
#: plus both increments (:func:`profiled_cuda_graph_estimate`). The first FULL capture holds
#: FlashAttention 3's split-KV buffers (:func:`fa3_split_buffer_bytes`, from the code). The
#: other constants are fitted on the DEBUG "Estimated PIECEWISE/FULL CUDA graph memory: X MiB
#: first-capture + (n-1) × Y MiB per-graph" lines of the 51 distinct setups of the llm-d-planner
#: accuracy sweep (vLLM 0.19.0, H100; tests/data/vllm-cudagraph-estimates.jsonl lists them
#: with their sources): the first PIECEWISE capture is 72.6 MiB + 1.078 × the forward's
#: transient (:func:`forward_peak`) at the largest PIECEWISE size (least squares over the 41
#: BF16/FP16 setups, residuals within ±30 MiB; refitted 2026-12-07 without the MoE workspace
#: the fit had held, 56.9 + 1.24 × and ±42 MiB before: the profile run has already allocated
#: the fused-MoE buffer, :func:`moe_workspace`, and a capture adds none of it); the first FULL
#: capture is the split buffer + 6 MiB (the median residual); a graph after the first adds,
#: per layer on the rank,
#: 0.19 MiB (PIECEWISE) and 0.15 MiB (FULL) in a dense model, 0.30 and 0.25 MiB in a MoE one
#: (more kernels a layer: the medians of the per-graph samples over the layers, 43 dense and 8
#: MoE setups). The samples move in 2 MiB steps and by a fresh 20 MiB allocator segment now
#: and then, so one setup can sit 0.8 GiB above the rule (Llama-3.1-8B TP2 logged 1.69 GiB,
#: the rule 0.66); mean |error| over the 51: 0.15 GiB, median 0.08.
CG_EST_PIECEWISE_FIRST_MIB = 72.6
CG_EST_PIECEWISE_FIRST_PER_FORWARD = 1.078
CG_EST_FULL_FIRST_MIB = 6.0
#: (dense, MoE) MiB a further graph adds per layer on the rank
CG_EST_PIECEWISE_PER_GRAPH_LAYER_MIB = (0.19, 0.30)
CG_EST_FULL_PER_GRAPH_LAYER_MIB = (0.15, 0.25)
#: FlashInfer's float workspace: ``envs.VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE``, 394 MiB by
#: default in the 0.19.0, 0.20.0, 0.22.0, 0.24.0, 0.26.0 and 0.28.0 sources. From the code, not
#: fitted: :func:`flashinfer_workspaces` says where the estimate's first FULL capture holds it.
FLASHINFER_WORKSPACE_BYTES = 394 * MiB
#: head sizes FlashInfer's backend takes in every release read
#: (``FlashInferBackend.get_supported_head_sizes``: 64, 128, 256; 0.24.0 adds 512)
FLASHINFER_HEAD_SIZES = frozenset({64, 128, 256})
#: ``AttentionConfig.flash_attn_max_num_splits_for_cuda_graph`` (config/attention.py, 0.18.0–
#: 0.28.0): the split count FlashAttention 3 is given under full CUDA graphs
FA3_CUDA_GRAPH_SPLITS = 32
#: CUDA context and driver reservation before vLLM's init snapshot: 79.19 − 78.68 = 0.51 GiB on
#: an H100 (0.19.0 DEBUG log). Never in the budget.
CUDA_CONTEXT_GIB = 0.51
#: Memory used before the init snapshot by distributed init at TP ≥ 2 (NCCL communicators, custom
#: all-reduce and symmetric-memory buffers): ``v1/worker/gpu_worker.py::Worker.init_device``
#: snapshots after ``init_worker_distributed_environment`` (0.11–0.33). Fitted on the 0.19.0 H100
#: DEBUG "init memory snapshot" lines (cuda_memory): TP1 0.51, TP2 1.53, TP4 2.07 GiB, so the TP
#: part is 1.02 at TP2 and 1.56 at TP4 = ``TP_INIT_BASE + TP_INIT_PER_DOUBLING × log2(tp)``
#: (exact at 2 and 4; TP8 = 2.10 is an extrapolation).
TP_INIT_BASE_GIB = 0.48
TP_INIT_PER_DOUBLING_GIB = 0.54
#: PCIe-only GPUs (catalog ``interconnect: pcie``) at TP ≥ 2. The NCCL terms above were fitted on
#: an NVLink/NVSwitch H100 (HGX), whose communicators open many channels over NVLink (and NVLS
#: from 3 GPUs: vLLM issue #9699, ``nvlsPerRankSize`` 288 MiB at 8 H100s); over PCIe NCCL
#: opens few, and vLLM's custom all-reduce is off on more than two PCIe-only GPUs
#: (device_communicators/custom_all_reduce.py, 0.21.0/0.26.0: "not supported on more than two
#: PCIe-only GPUs"). Logged: in the same era, the profile's non-torch grew by 1.79 GiB from TP1
#: to TP2 on an H100 (vLLM PR #10511) and not at all on two RTX 4090s (0.25 GiB at TP2,
#: vllm-startup-007, V0); from 0.20, 0.13 GiB at TP4 (vllm-startup-101, vLLM issue #50722,
#: 0.26.0, H100 with custom all-reduce disabled: a PCIe card is ASSUMED, the log does not name
#: the form factor; its 79.33 GiB total differs from the SXM H100's 79.19). So on PCIe-only GPUs
#: the profile's non-torch at TP ≥ 2 is the TP = 1 figure (:data:`NON_TORCH_TP1`, the larger,
#: safe side of those logs) and the TP part of the pre-snapshot memory keeps the NVLink fit's
#: shape scaled to vllm-startup-101's TP4 point: 1.55 GiB in use before the snapshot (free
#: 77.78 of 79.33) − :data:`CUDA_CONTEXT_GIB` = 1.04 GiB where the fit gives 1.56, so × 1.04 /
#: 1.56 (TP2 0.68 GiB, at least the 0.62 that 2 × RTX 5090 at 0.27+ used, vllm-startup-055).
#: Beyond four ranks the PCIe TP part stays at its TP4 figure (:data:`PCIE_TP_INIT_FLAT_FROM`):
#: custom all-reduce is already off at 3+ PCIe-only GPUs, and NCCL's ring and tree connect each
#: rank to the same 2–3 peers at 4 and at 8 ranks (no NVLS/CollNet over PCIe), so nothing left
#: grows with the group. (The NVLink fit's log2 extrapolation gave 1.40 GiB at TP8, and with it
#: 8 × RTX PRO 4500 at 0.95 failed the start check that vllm-startup-047 passed: 0.28.0, 31.38
#: GiB, so at most 1.57 GiB in use before the snapshot; that log is out of sample and no figure
#: is fitted on it.) A PCIe card bridged by NVLink (RTX 3090 pairs, H100 PCIe pairs) is counted
#: as PCIe. DP/EP groups keep their assumed sizes.
PCIE_TP_INIT_SCALE = 1.04 / 1.56
PCIE_TP_INIT_FLAT_FROM = 4
#: The same at PP ≥ 2 with TP = 1: 1.43 − 0.51 = 0.92 GiB (0.19.0 H100, PP2). TP and PP together
#: are assumed additive (no log has both).
PP_INIT_GIB = 0.92
#: NCCL of the data-parallel and expert-parallel groups, per rank (gap N5 of
#: research/vllm-fidelity-rereview.md). ``distributed/parallel_state.py::
#: initialize_model_parallel`` (0.20.0/0.25.0) creates the ``dp`` group (size dp) and, for MoE
#: models, the ``ep`` group (size dp·pcp·tp), each a ``GroupCoordinator`` whose
#: ``CudaCommunicator`` holds a ``PyNcclCommunicator`` (no custom all-reduce: that is the TP
#: group's only) that runs a warm-up all_reduce in its ``__init__`` — all inside
#: ``init_worker_distributed_environment``, before ``Worker.init_device`` takes the init
#: snapshot. The profile then runs collectives on both: ``v1/worker/dp_utils.py::_run_ar``
#: (the DP token-count all_reduce on the dp ``device_group``) and the MoE dispatch
#: (``all2all_backend`` default ``allgather_reducescatter``: ``AgRsAll2AllManager`` all-gathers
#: over the ep communicator), whose lazily built NCCL channels land in non-torch. At dp = 1 the
#: ep group spans the TP ranks and is inside the TP fits above, so only dp > 1 adds groups.
#: Sizes ASSUMED (no DP/EP log in the data): the TP2 fit's NCCL share split per communicator —
#: half the TP2 pre-snapshot 1.02 GiB and ~0.9 of its 2.07 − 0.25 GiB non-torch per group.
NCCL_GROUP_INIT_GIB = 0.5
NCCL_GROUP_PROFILE_GIB = 0.9


def dp_ep_nccl_groups(dp: int, moe: bool) -> int:
    """The NCCL device communicators a rank holds beyond its TP/PP ones: the dp group when
    dp > 1, and the ep group of an MoE model then too (see :data:`NCCL_GROUP_INIT_GIB`)."""
    if dp <= 1:
        return 0
    return 1 + (1 if moe else 0)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """The vLLM flags that move memory. ``None`` means vLLM's default for the version/GPU."""

    version: str = NEWEST_SUPPORTED
    engine: str | None = None  # "v0" | "v1" | None (version default)
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    enforce_eager: bool = False
    usage_context: str = "api"  # "api" (vllm serve) | "llm" (offline LLM class)
    enable_chunked_prefill: bool | None = None
    max_loras: int = 0
    max_lora_rank: int = 16
    data_parallel: int = 1
    expert_parallel: bool = False
    kv_cache_memory_bytes: int | None = None
    draft_model: ModelShape | None = None  # the --speculative-config model's shape
    estimate_cuda_graphs: bool | None = None  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
    #: ``VLLM_USE_V2_MODEL_RUNNER``: True/False force the V2/V1 model runner, None the default
    use_v2_model_runner: bool | None = None
    max_cpu_loras: int | None = None  # host memory only
    speculative: SpeculativeConfig | None = None
    enable_prefix_caching: bool | None = None
    kv_transfer: bool = False  # --kv-transfer-config given
    kv_connector: str | None = None  # its kv_connector (HMA kept for SupportsHMA ones, 0.22+)
    performance_mode: str = "balanced"
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    max_cudagraph_capture_size: int | None = None
    #: ``--compilation-config`` ``cudagraph_mode`` (a :data:`CUDAGRAPH_MODES` name); None: the
    #: version's default (FULL_AND_PIECEWISE from 0.11); NONE arrives as ``enforce_eager``
    cudagraph_mode: str | None = None
    auto_max_model_len: bool = False  # --max-model-len -1
    async_scheduling: bool | None = None  # None: the version's default (async_scheduling_on)
    chunked_local_hybrid: bool | None = None  # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE
    allow_long_max_model_len: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN
    #: --limit-mm-per-prompt counts by modality; None: unset (999 each, config/multimodal.py)
    mm_limits: tuple[tuple[str, int], ...] | None = None
    skip_mm_profiling: bool = False  # --skip-mm-profiling: profile_run runs no encoder
    #: vLLM's torch.compile cache when the engine starts (:data:`COMPILE_CACHE_STATES`): "warm"
    #: loads the saved graphs; "cold" compiles inside the memory profile
    #: (:func:`cold_compile_bytes`)
    compile_cache: str = "warm"


@dataclass(frozen=True, slots=True)
class ResolvedSettings:
    """Settings after vLLM's defaults for this version, GPU and model."""

    version: Version
    era: Era
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    kv_cache_dtype: str
    dtype: str
    dtype_bytes: int
    kv_bytes: int
    cudagraphs: bool
    cg_in_budget: bool
    v2_runner: bool
    defaults_used: tuple[str, ...]

    @property
    def rules(self) -> VllmRules:
        """The version's rulebook record."""
        return VllmRules.for_version(self.version)


@dataclass(frozen=True, slots=True)
class RankPrediction:
    """What one rank (TP × PP position) will log and allocate. Bytes."""

    rank: int
    stage: int
    weights: WeightBreakdown
    activation_peak: int
    forward_peak: int
    sampler_peak: int
    moe_workspace: int
    non_torch: int
    #: vLLM's estimate where it is in the budget (:func:`profiled_cuda_graph_estimate`), else
    #: the pool (fitted on the 0.19 logs' actual pools, scaled by the graphs captured)
    cuda_graph: int
    requested: int
    available_kv: int
    layout: KvLayout
    num_blocks: int
    #: what the multimodal encoder profile adds to the activation peak (in activation_peak)
    mm_encoder: int = 0
    mm_profile: EncoderProfile | None = None
    #: the V2 runner's persistent sampler tensors (:func:`v2_sampler_state_bytes`; last stage)
    sampler_state: int = 0
    #: FlashInfer workspaces allocated after the KV cache, beyond the budget
    #: (:func:`_post_kv_workspace`)
    post_kv_workspace: int = 0
    #: the runner's other persistent tensors (:func:`runner_buffer_bytes`; every rank)
    runner_buffers: int = 0
    #: the sampler peak is a bound, not vLLM's figure: 0.33's warm-up pass off FlashInfer's
    #: sampler (:func:`flashinfer_sampler`)
    sampler_bound: bool = False
    #: a cold torch.compile's largest allocation inside the profile (:func:`cold_compile_bytes`;
    #: 0: warm, eager, or no embedding table in this stage's compiled graph)
    compile_peak: int = 0
    #: what it adds to the activation peak: its excess over the warm profile's peak (in
    #: activation_peak)
    compile_excess: int = 0
    #: what a cold boot's compile would add to this rank's activation peak whatever the cache
    #: state planned (:func:`cold_compile_loss`; the same as ``compile_excess`` when cold)
    cold_compile_excess: int = 0


@dataclass(frozen=True, slots=True)
class StartupPrediction:
    settings: ResolvedSettings
    ranks: tuple[RankPrediction, ...]
    tp: int
    pp: int
    total_bytes: int
    num_gpu_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    starts: bool
    error: str | None
    binding_rank: int  # the rank with the fewest blocks (vLLM takes the minimum)
    notes: tuple[str, ...] = field(default=())
    #: the DP/EP NCCL communicators counted per rank (:func:`dp_ep_nccl_groups`)
    nccl_groups: int = 0
    #: the engine runs vLLM's async scheduler (:func:`async_scheduling_on`)
    async_scheduling: bool = False
    #: a PCIe-only GPU: the NCCL terms of :data:`PCIE_TP_INIT_SCALE`
    pcie: bool = False

    def to_json(self) -> dict[str, object]:
        r = self.ranks[self.binding_rank]
        return {
            "weights_gib": round(r.weights.total / GiB, 4),
            "activation_peak_gib": round(r.activation_peak / GiB, 4),
            "non_torch_gib": round(r.non_torch / GiB, 4),
            "cuda_graph_gib": round(r.cuda_graph / GiB, 4),
            "available_kv_cache_gib": round(r.available_kv / GiB, 4),
            "num_gpu_blocks": self.num_gpu_blocks,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "starts": self.starts,
            "error": self.error,
            "requested_gib": round(r.requested / GiB, 4),
            **self._summary_line_terms(r),
            "ranks": [
                {
                    "rank": x.rank,
                    "stage": x.stage,
                    "weights_gib": round(x.weights.total / GiB, 4),
                    "activation_peak_gib": round(x.activation_peak / GiB, 4),
                    "available_kv_cache_gib": round(x.available_kv / GiB, 4),
                    "num_gpu_blocks": x.num_blocks,
                    **self._summary_line_terms(x),
                }
                for x in self.ranks
                if x.rank % self.tp == 0
            ],
            "block_size": r.layout.block_size,
            "bytes_per_block": r.layout.bytes_per_block,
            "kv_groups": r.layout.num_groups,
            "gpu_memory_utilization": self.settings.gpu_memory_utilization,
            "max_model_len": self.settings.max_model_len,
            "max_num_seqs": self.settings.max_num_seqs,
            "max_num_batched_tokens": self.settings.max_num_batched_tokens,
            "engine_version": str(self.settings.version),
            "budget_era": self.settings.era.value,
            "defaults_used": list(self.settings.defaults_used),
        }

    def _summary_line_terms(self, x: RankPrediction) -> dict[str, float]:
        """The two budget terms of vLLM 0.27+'s summary line, where the era has them
        (:func:`summary_line_split`)."""
        if self.settings.era is not Era.V1_CONSUMED:
            return {}
        consumed, peak = summary_line_split(x, self.settings.cg_in_budget)
        return {
            "consumed_gib": round(consumed / GiB, 4),
            "peak_activation_printed_gib": round(peak / GiB, 4),
        }


class SettingsError(ValueError):
    """Engine settings that vLLM itself would reject, or that make no sense."""


#: Connectors implementing ``SupportsHMA`` (distributed/kv_transfer/kv_connector/v1/, the
#: 0.22.0, 0.23.0 and 0.25.0 sources: NixlConnector, OffloadingConnector, MooncakeConnector,
#: MooncakeStoreConnector, SimpleCPUOffloadConnector, DecodeBenchConnector; MultiConnector only
#: when every child does, not modelled). LMCacheConnectorV1 and SharedStorageConnector do not.
HMA_CONNECTORS = frozenset(
    {
        "NixlConnector",
        "OffloadingConnector",
        "MooncakeConnector",
        "MooncakeStoreConnector",
        "SimpleCPUOffloadConnector",
        "DecodeBenchConnector",
    }
)


def lora_graph_cases(v: Version, max_loras: int) -> int:
    """How many times each CUDA-graph batch size is captured with ``--enable-lora``:
    ``CudagraphDispatcher._get_lora_cases`` (v1/cudagraph_dispatcher.py, 0.20.0/0.25.0) gives
    ``[0] + get_captured_lora_counts(max_loras, specialize_active_lora)`` with
    ``cudagraph_specialize_lora`` on (the default): ``specialize_active_lora`` is off by default
    (config/lora.py), so ``[0, max_loras + 1]``, two cases. ``profile_cudagraph_memory``
    estimates over every descriptor; the estimate is scaled with the graph count as for
    capture sizes (assumed linear: the larger, safe side). Versions before 0.20 not read: 1
    (:attr:`VllmRules.lora_graph_cases`)."""
    return VllmRules.for_version(v).lora_graph_cases if max_loras > 0 else 1


def _compute_capability(gpu_name: str) -> tuple[int, int] | None:
    """The catalogued CUDA compute capability of ``gpu_name`` (None: unknown or not CUDA)."""
    gpu = find_gpu(gpu_name)
    return gpu.compute_capability if gpu is not None else None


def mxfp4_moe_backend(v: Version, gpu_name: str) -> str:
    """The MXFP4 MoE backend vLLM picks for gpt-oss (``select_mxfp4_moe_backend`` with
    ``moe_backend="auto"``, fused_moe/oracle/mxfp4.py, 0.20.0 and 0.24.0–0.28.0): the first of
    ``_get_priority_backends_for_gpt_oss`` whose ``is_supported_config`` holds, BF16-activation
    variants only (``_filter_by_activation`` with no requested key):

    * FLASHINFER_TRTLLM_MXFP4_BF16: ``is_device_capability_family(100)`` (SM100/SM103) with
      FlashInfer (a CUDA requirement of vLLM, requirements/cuda.txt), experts/
      trtllm_mxfp4_moe.py::_supports_current_device;
    * TRITON: ``(9, 0) <= cc < (11, 0)`` with ``triton_kernels`` (built into the CUDA wheel,
      cmake/external_projects/triton_kernels.cmake), experts/gpt_oss_triton_kernels_moe.py::
      _triton_kernel_moe_supports_current_device: Hopper SM90 (SM100 took TRTLLM first);
    * FLASHINFER_CUTLASS_MXFP4_BF16: (kMxfp4Static, None) only on ``is_device_capability(90)``
      (flashinfer_cutlass_moe.py::_supports_quant_scheme), so never reached;
    * MARLIN: ``has_device_capability((7, 5))`` (marlin_moe.py), so Ampere/Ada SM8x and the
      SM12x Blackwells (RTX 5090, RTX PRO: SM120 is outside both the TRTLLM family and the
      Triton window). ``Mxfp4Config.get_min_capability`` is 80.

    Outside 0.20–0.28 (not read) and for GPUs without a catalogued compute capability the
    ledger keeps its earlier Marlin rounding (the 0.19.0 A100 log matches it; refusing would
    drop the default 0.33 plans and custom GPUs). SM<80 and compute capabilities with no
    derived backend (SM11x) are refused: a :class:`SettingsError` naming them."""
    cc = _compute_capability(gpu_name)
    if not VllmRules.for_version(v).mxfp4_backends_read or cc is None:
        # not read (a version outside 0.20–0.28) or no catalogued compute capability (a
        # custom GPU): the ledger's earlier Marlin rounding, a documented approximation
        return "marlin"
    if cc < (8, 0):
        raise SettingsError(f"gpt-oss MXFP4 on {gpu_name} (SM{cc[0]}{cc[1]}): vLLM needs SM80+")
    if sm100_family(cc):
        return "trtllm"
    if cc == (9, 0):
        return "triton"
    if cc[0] in (8, 12):
        return "marlin"
    raise SettingsError(
        f"gpt-oss MXFP4 on {gpu_name} (SM{cc[0]}{cc[1]}): its MXFP4 MoE backend is not derived"
    )


def mxfp4_layout(v: Version, gpu_name: str) -> Mxfp4Layout:
    """gpt-oss's expert storage for :func:`mxfp4_moe_backend`
    (``mxfp4_round_up_hidden_size_and_intermediate_size``, fused_moe/oracle/mxfp4.py, 0.20.0
    and 0.24.0–0.28.0): Marlin hidden 256 / intermediate 128; TRTLLM hidden 256 /
    intermediate 256 (128 from 0.27, :attr:`VllmRules.mxfp4_trtllm_inter_align`); Triton no
    hidden padding / intermediate 64 (the final ``else``), plus the Hopper swizzle of
    :class:`~inference_capacity.ledger.weights.Mxfp4Layout`."""
    backend = mxfp4_moe_backend(v, gpu_name)
    r = VllmRules.for_version(v)
    if backend == "trtllm":
        return Mxfp4Layout("trtllm", 256, r.mxfp4_trtllm_inter_align)
    if backend == "triton":
        return Mxfp4Layout(
            "triton",
            1,
            64,
            hopper_swizzle=True,
            scale_group_align=r.mxfp4_triton_scale_group_align,
            keeps_checkpoint_scales=r.mxfp4_triton_keeps_scales,
        )
    return Mxfp4Layout("marlin", MXFP4_HIDDEN_ALIGN, MXFP4_INTER_ALIGN)


#: gpt-oss's MXFP4 backends whose experts run a ``FusedMoEExpertsMonolithic`` kernel
#: (TrtLlmMxfp4ExpertsMonolithic, OAITritonMxfp4ExpertsMonolithic: fused_moe/oracle/mxfp4.py,
#: 0.24.0–0.28.0), which takes no fused-MoE workspace buffer (:func:`moe_workspace`)
MONOLITHIC_MXFP4_BACKENDS = frozenset({"trtllm", "triton"})


def _mxfp4_layout_of(shape: ModelShape, v: Version, gpu_name: str) -> Mxfp4Layout:
    """gpt-oss's MXFP4 experts by backend (:func:`mxfp4_layout`); DeepSeek-V4's MXFP4 experts
    (``Mxfp4MoEMethod``, another selector) keep the Marlin rounding, a no-op on its shapes."""
    q = shape.quantization
    if shape.model_type == "gpt_oss" and q is not None and q.method == "mxfp4":
        return mxfp4_layout(v, gpu_name)
    return MARLIN_LAYOUT


def connector_keeps_hma(v: Version, connector: str | None) -> bool:
    """Whether ``--kv-transfer-config`` with ``connector`` leaves the hybrid KV manager on."""
    return VllmRules.for_version(v).hma_with_connector and connector in HMA_CONNECTORS


def _uses_v2_runner(v: Version, shape: ModelShape) -> bool:
    """vLLM's default model runner (``config/vllm.py::_is_default_v2_model_runner_model``;
    the rules by version: :attr:`VllmRules.v2_runner_all` and the fields after it)."""
    r = VllmRules.for_version(v)
    if r.v2_runner_all:
        return True
    if r.v2_runner_dense and not shape.is_moe and not shape.has_kind(AttnKind.MAMBA):
        return True
    if shape.architecture not in r.v2_runner_archs:
        return False
    return not r.v2_runner_archs_dense_unquantized or (
        not shape.is_moe and shape.quantization is None
    )


def model_runner_v2(v: Version, shape: ModelShape, env_choice: bool | None) -> bool:
    """Whether the engine runs the V2 model runner: ``VLLM_USE_V2_MODEL_RUNNER`` where it is
    set (``env_choice``) and the version reads it as a choice (:attr:`VllmRules.
    v2_runner_env_choice`), else the version's default (:func:`_uses_v2_runner`). Before 0.22
    the variable only opts in, to a V2 runner the ledger does not model: refused."""
    if env_choice is None:
        return _uses_v2_runner(v, shape)
    if not VllmRules.for_version(v).v2_runner_env_choice:
        if env_choice:
            raise SettingsError(
                f"VLLM_USE_V2_MODEL_RUNNER=1 on vLLM {v}: that release's opt-in V2 model runner "
                "is not modelled (the ledger sizes it from 0.22)"
            )
        return _uses_v2_runner(v, shape)
    return env_choice


def v2_runner_unsupported(v: Version, spec: SpeculativeConfig | None) -> bool:
    """Whether a V2-by-default model falls back to the V1 runner ("Model Runner V2 does not
    yet support ...; using the V1 model runner instead")."""
    if spec is None:
        return False
    r = VllmRules.for_version(v)
    if r.v2_spec_methods is None:
        return spec.method in r.v2_spec_unsupported
    return spec.method not in r.v2_spec_methods


def cuda_graph_estimate_applied(v: Version, v2_runner: bool, rocm: bool) -> bool:
    """Whether vLLM's profiler can subtract a CUDA-graph estimate at all on this version:
    the V2 runner's ``profile_cudagraph_memory()`` returns 0 in 0.21–0.28
    (``v1/worker/gpu/model_runner.py``; implemented by 0.30, PR #49233); ROCm is left out through
    0.25 (``is_cuda()``) and included from 0.26 (``is_cuda_alike()``) in
    ``v1/worker/gpu_worker.py::Worker.determine_available_memory``."""
    r = VllmRules.for_version(v)
    if not r.cuda_graph_estimate_exists:
        return False
    if v2_runner and not r.v2_cuda_graph_estimate:
        return False
    return not rocm or r.rocm_cuda_graph_estimate


#: The ≥ 160 GiB batch tier (T = 16384, R = 1024 for the API server), where the version has it
#: (:attr:`VllmRules.big_gpu_tier`; engine/arg_utils.py::EngineArgs.get_batch_defaults).
BIG_GPU_TIER_GIB = 160


def batch_defaults(
    v: Version,
    era: Era,
    total_bytes: int,
    gpu_name: str,
    usage_context: str,
    performance_mode: str = "balanced",
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) defaults: ``EngineArgs.get_batch_defaults``.
    ``--performance-mode throughput`` doubles both (same function, where the flag exists)."""
    total_gib = total_bytes / GiB
    a100 = "a100" in gpu_name.lower()
    if era is Era.V0:
        return 0, 256  # tokens resolved with max_model_len below
    r = VllmRules.for_version(v)
    if r.big_gpu_tier and total_gib >= BIG_GPU_TIER_GIB:
        T, R = 16384, 1024
    else:
        big = total_gib >= 70 and (r.a100_in_big_tier or not a100)
        if big:
            T, R = (8192 if usage_context == "api" else 16384), 1024
        else:
            T, R = (2048 if usage_context == "api" else 8192), 256
    if performance_mode == "throughput":
        T, R = 2 * T, 2 * R
    return T, R


def _gpu_family(gpu_name: str) -> str:
    n = gpu_name.upper()
    if n.startswith(("H100", "H200", "H20", "H800", "GH200")):
        return "hopper"
    if n.startswith(("B200", "B100", "GB200", "B300", "GB300")):
        return "blackwell"
    if n.startswith("MI") or "AMD" in n:
        return "rocm"
    return "other"


def check_deepseek_v4(
    v: Version,
    shape: ModelShape,
    gpu_name: str,
    kv_cache_dtype: str,
    tp: int,
    pp: int,
    s: EngineSettings,
) -> None:
    """Refuse the DeepSeek-V4 setups the ledger has not read (a SettingsError names it).

    Modelled: vLLM 0.24.x–0.33.x on the FlashMLA backend (SM90/SM100: ``nvidia/model.py::
    _select_dsv4_attn_cls`` picks FlashInfer on SM12x), an fp8 KV cache (``auto`` trips
    ``_resolve_dsv4_kv_cache_dtype``'s assertion through 0.29; 0.30+ resolve it to fp8,
    :func:`resolve_kv_cache_dtype`), block size 256 (the backend's only kernel block size),
    at most 128 query heads a rank (``flashmla.py::get_padded_num_q_heads`` raises beyond),
    one pipeline stage and no speculative decoding (the MTP draft layer joins the KV groups as
    a 44th sliding layer; not modelled)."""
    if shape.model_type != "deepseek_v4":
        return
    rules = VllmRules.for_version(v)
    if not rules.deepseek_v4_exists:
        raise SettingsError(f"vLLM {v} has no DeepSeek-V4 (added in 0.20.0)")
    if not rules.deepseek_v4_read:
        raise SettingsError(
            f"DeepSeek-V4 on vLLM {v}: its KV-cache planning was read for 0.24–0.33 only "
            "(ledger/kv_dsv4.py); this release is not modelled"
        )
    if _gpu_family(gpu_name) not in ("hopper", "blackwell"):
        raise SettingsError(
            f"DeepSeek-V4 on {gpu_name}: only the FlashMLA backend (Hopper, Blackwell "
            "datacenter) is modelled"
        )
    if not kv_cache_dtype.startswith("fp8"):
        raise SettingsError(
            f"DeepSeek-V4 with --kv-cache-dtype {kv_cache_dtype}: vLLM's FlashMLA layout "
            "asserts 'DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache'; use fp8"
        )
    if s.block_size is not None and s.block_size != DSV4_BLOCK_SIZE:
        raise SettingsError(
            f"DeepSeek-V4 with --block-size {s.block_size}: the FlashMLA DeepSeek-V4 backend "
            f"supports {DSV4_BLOCK_SIZE} only (sparse_mla.py get_supported_kernel_block_sizes)"
        )
    if pp > 1:
        raise SettingsError("DeepSeek-V4 with pipeline parallelism is not modelled")
    if s.speculative is not None:
        raise SettingsError("DeepSeek-V4 with speculative decoding (MTP) is not modelled")
    if shape.num_attention_heads // tp > 128:
        raise SettingsError(
            f"DeepSeek-V4 with {shape.num_attention_heads // tp} query heads a rank: vLLM's "
            "FlashMLA backend raises 'DeepseekV4 FlashMLA does not support ... heads (FP8 decode "
            "kernel requires h_q in {64, 128})'; raise --tensor-parallel-size"
        )


def default_block_size(v: Version, shape: ModelShape, gpu_name: str, kv_cache_dtype: str) -> int:
    """The KV block size vLLM picks without ``--block-size``: 16, except where the attention
    backend for MLA wants another.

    * 0.11–0.17 (``platforms/cuda.py::CudaPlatform.check_and_update_config``): FlashMLA on
      Hopper 64, CUTLASS MLA on Blackwell 128;
    * 0.18+ (``update_block_size_for_backend``): FlashAttention-MLA on Hopper keeps 16 (the
      0.19.0 DeepSeek-V2-Lite H100 log shows 16), MLA with an fp8 KV cache takes FlashMLA: 64;
      FlashInfer-MLA on Blackwell 32; ROCm AITER MLA 64.
    """
    if shape.model_type == "deepseek_v4":
        return DSV4_BLOCK_SIZE  # "Setting kv cache block size to 256 for DEEPSEEK_SPARSE_SWA ..."
    if not shape.has_kind(AttnKind.MLA):
        return 16
    family = _gpu_family(gpu_name)
    r = VllmRules.for_version(v)
    block = dict(r.mla_block_by_family).get(family)
    if block is not None:
        return block
    if family == "hopper" and kv_cache_dtype.startswith("fp8") and r.mla_fp8_hopper_flashmla:
        return FLASHMLA_BLOCK
    return 16


#: FlashMLA's KV block size (MLA with an fp8 KV cache on Hopper, 0.18+)
FLASHMLA_BLOCK = 64


def _check_kv_format_backend(shape: ModelShape, kv_cache_dtype: str, gpu_name: str) -> None:
    """Refuse a KV format no attention backend of the model's kind and GPU takes (vLLM would
    find no backend and stop): nvfp4 runs only on FlashInfer's trtllm-gen kernels, on SM100-family
    GPUs (flashinfer.py 0.22.0; ``FlashInferBackend.supports_kv_cache_dtype`` 0.28.0: device
    capability family 100); the per-token-head and nvfp4 formats are listed by no MLA backend
    (``supported_kv_cache_dtypes`` of v1/attention/backends/mla/*.py, 0.22.0, 0.26.0, 0.28.0:
    TRITON_ATTN and FlashInfer take them, for standard attention only); ``fp8_ds_mla`` is the
    layout of DeepSeek's sparse MLA backends only (FlashMLA-sparse, FlashInfer-MLA-sparse, the
    sparse SWA of DeepSeek-V4: the only files of v1/attention/backends/mla/ that name it in
    0.22.0, 0.26.0, 0.28.0, 0.29.0, 0.31.0, 0.32.0 and 0.33.0), so of the models the ledger
    sizes only DeepSeek-V4 takes it."""
    fmt = kv_token_format(kv_cache_dtype)
    if fmt == "nvfp4" and _gpu_family(gpu_name) != "blackwell":
        raise SettingsError(
            f"kv_cache_dtype nvfp4 on {gpu_name or 'a GPU the catalog does not name'}: vLLM "
            "reads an nvfp4 KV cache only with FlashInfer's trtllm-gen kernels, on SM100-family "
            "GPUs (B200, B300, GB200, GB300)"
        )
    mla = shape.has_kind(AttnKind.MLA)
    if mla and fmt in PACKED_FORMATS:
        raise SettingsError(
            f"kv_cache_dtype {kv_cache_dtype} with MLA attention ({shape.architecture}): no "
            "vLLM MLA backend takes that KV format (use fp8 or auto)"
        )
    if fmt == "ds_mla" and shape.model_type != "deepseek_v4":
        raise SettingsError(
            f"kv_cache_dtype fp8_ds_mla is the layout of DeepSeek's sparse MLA backends; no vLLM "
            f"backend takes it for {shape.architecture} (use fp8)"
        )


def resolve_kv_cache_dtype(v: Version, shape: ModelShape, requested: str) -> str:
    """``--kv-cache-dtype auto`` (utils/torch_utils.py::resolve_kv_cache_dtype_string and
    get_kv_cache_quant_algo_string, 0.20.0/0.25.0): the checkpoint's KV quantization is taken
    only when ``quant_method`` starts with ``modelopt`` (every ModelOpt format: FP8, NVFP4,
    MXFP8, mixed), fp8 from 0.15 and nvfp4 (``kv_cache_quant_algo`` NVFP4 or a 4-bit float
    ``kv_cache_scheme``) from 0.20 (:attr:`VllmRules.nvfp4_kv_dtype`); a native fp8 or
    compressed-tensors checkpoint keeps ``auto`` (its ``kv_cache_scheme`` needs
    ``--kv-cache-dtype fp8``), and 0.11–0.13 resolve nothing (the model dtype)."""
    if requested == "auto" and shape.model_type == "deepseek_v4":
        # 0.30+: _resolve_dsv4_kv_cache_dtype takes auto as fp8 (fp8_ds_mla); before, its
        # assertion refuses auto (check_deepseek_v4)
        return "fp8" if VllmRules.for_version(v).dsv4_auto_fp8 else requested
    q = shape.quantization
    if requested != "auto" or q is None or q.producer != "modelopt" or not q.kv_cache_algo:
        return requested
    r = VllmRules.for_version(v)
    if not r.modelopt_kv_dtype:
        return "auto"
    if q.kv_cache_algo == "nvfp4":
        if not r.nvfp4_kv_dtype:
            raise SettingsError(
                f"the checkpoint's NVFP4 KV cache (kv_cache_quant_algo) on vLLM {v}: the ledger "
                "read nvfp4 KV resolution from 0.20 only"
            )
        return "nvfp4"
    return "fp8"


def resolve_settings(
    shape: ModelShape, total_bytes: int, gpu_name: str, s: EngineSettings
) -> ResolvedSettings:
    v = parse_version(s.version)
    rules = VllmRules.for_version(v)
    era = rules.era_for(s.engine)
    if s.compile_cache not in COMPILE_CACHE_STATES:
        raise SettingsError(
            f"compile_cache must be one of {', '.join(COMPILE_CACHE_STATES)}, got "
            f"{s.compile_cache!r}"
        )
    used: list[str] = []
    u = s.gpu_memory_utilization
    if u is None:
        u = rules.default_gpu_memory_utilization
        used.append("gpu_memory_utilization")
    if not (0.0 < u <= 1.0):
        raise SettingsError(f"gpu_memory_utilization must be in (0, 1], got {u}")
    L = s.max_model_len
    if L is None:
        L = shape.derived_max_model_len
        used.append("max_model_len")
    if L <= 0:
        raise SettingsError(f"max_model_len must be a positive number of tokens, got {L}")
    if L > 100_000_000:
        raise SettingsError(f"max_model_len {L:,} is absurd (more than 100M tokens)")
    if L > shape.derived_max_model_len and not s.allow_long_max_model_len:
        raise SettingsError(
            f"max_model_len {L:,} is larger than the model's maximum "
            f"{shape.derived_max_model_len:,} (from its config); vLLM refuses this without "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
        )
    T_def, R_def = batch_defaults(
        v, era, total_bytes, gpu_name, s.usage_context, s.performance_mode
    )
    R = s.max_num_seqs
    if R is None:
        R = R_def
        used.append("max_num_seqs")
    if R <= 0:
        raise SettingsError(f"max_num_seqs must be >= 1, got {R}")
    T = s.max_num_batched_tokens
    if T is None:
        used.append("max_num_batched_tokens")
        if era is Era.V0:
            chunked = s.enable_chunked_prefill
            if chunked is None:
                chunked = L > 32768  # V0 enabled chunked prefill by default for long contexts
            T = 2048 if chunked else max(L, 2048)
        else:
            T = T_def
            if s.enable_chunked_prefill is False:
                T = max(T, L)
        T = min(T, R * L)
    if T <= 0:
        raise SettingsError(f"max_num_batched_tokens must be >= 1, got {T}")
    if s.max_num_seqs is not None and s.max_num_batched_tokens is not None and T < R:
        # config/scheduler.py::SchedulerConfig verification (0.11–0.33)
        raise SettingsError(
            f"max_num_batched_tokens ({T}) must be greater than or equal to max_num_seqs ({R})."
        )
    if era is not Era.V0 and s.enable_chunked_prefill is False and T < L:
        raise SettingsError(
            f"max_num_batched_tokens ({T}) is smaller than max_model_len ({L}) with chunked "
            "prefill disabled; vLLM rejects this"
        )
    B = s.block_size
    if B is None:
        B = default_block_size(v, shape, gpu_name, s.kv_cache_dtype)
        used.append("block_size")
    if B <= 0 or B & (B - 1):
        raise SettingsError(f"block_size must be a power of two, got {B}")
    dtype = resolve_dtype(shape.dtype, s.dtype)
    dtype_bytes = DTYPE_BYTES[dtype]
    invalid_kv = flag_table().invalid_choice("kv-cache-dtype", s.kv_cache_dtype, str(v))
    if invalid_kv is not None:  # e.g. a per-token-head or nvfp4 KV before 0.20
        raise SettingsError(f"kv_cache_dtype {s.kv_cache_dtype!r}: {invalid_kv}")
    kv_dt = resolve_kv_cache_dtype(v, shape, s.kv_cache_dtype)
    _check_kv_format_backend(shape, kv_dt, gpu_name)
    kvb = kv_dtype_bytes(kv_dt, dtype_bytes)
    cudagraphs = not s.enforce_eager and s.cudagraph_mode != "NONE"
    est = s.estimate_cuda_graphs
    if est is None:
        est = rules.estimate_cuda_graphs_default
    v2 = model_runner_v2(v, shape, s.use_v2_model_runner) and not v2_runner_unsupported(
        v, s.speculative
    )
    rocm = gpu_name.lower().startswith("mi") or "amd" in gpu_name.lower()
    cg_in_budget = bool(est) and cudagraphs and cuda_graph_estimate_applied(v, v2, rocm)
    return ResolvedSettings(
        v,
        era,
        u,
        L,
        R,
        T,
        B,
        kv_dt,
        dtype,
        dtype_bytes,
        kvb,
        cudagraphs,
        cg_in_budget,
        v2,
        tuple(used),
    )


# --- measured terms, modelled ----------------------------------------------------------------


def forward_peak(shape: ModelShape, tokens: int, tp: int, dtype_bytes: int, layers: range) -> int:
    """Transient peak of the profile forward over ``tokens`` tokens (attention not run in V1)."""
    inter = shape.intermediate_size
    if shape.is_moe and not shape.dense_layers.count_in(layers):
        inter = 0  # no dense MLP on this stage
    per_token = 3 * inter / tp + FORWARD_HIDDEN_COPIES * shape.hidden_size
    return int(tokens * dtype_bytes * per_token)


#: the fused-MoE buffer's shapes by experts class (:func:`moe_workspace`):
#: TritonExperts/MarlinExperts/DeepGemmExperts' ``M · k · (max(I, K) + max(2I, K))``; the
#: output alone, ``M · K`` (FlashInfer's TRTLLM and CUTLASS experts: workspace13 ``(0,)`` or
#: ``(M, K)``, workspace2 none); none (``FusedMoEExpertsMonolithic``)
MOE_BUFFER_KINDS = ("triton", "output", "monolithic")


def _moe_buffer(
    shape: ModelShape, su: _Setup, settings: EngineSettings, gpu_name: str, mxfp4_backend: str
) -> int:
    """The rank's fused-MoE buffer (:func:`moe_workspace`) at the plan's settings: the dummy
    batch, gathered over DP where the version's code does (:attr:`VllmRules.moe_kernel_read`);
    the expert width split over TP × DP (``su.moe_tp``), whole with EP; the experts class of
    :func:`moe_buffer_kind` (``su.ep > 1``: EP over more than one rank)."""
    read = su.rs.rules.moe_kernel_read
    tokens = su.T * (max(settings.data_parallel, 1) if read else 1)
    split = 1 if settings.expert_parallel else su.moe_tp
    kind = moe_buffer_kind(shape, gpu_name, mxfp4_backend, su.ep > 1, read)
    return moe_workspace(shape, tokens, split, su.rs.dtype_bytes, kind)


def moe_buffer_kind(
    shape: ModelShape, gpu_name: str, mxfp4_backend: str, ep: bool, oracle_read: bool = True
) -> str:
    """Which experts class's buffer shapes the fused MoE takes (:data:`MOE_BUFFER_KINDS`), as
    0.27.1's backend oracles pick it (fused_moe/oracle/fp8.py, nvfp4.py, mxfp4.py
    ``_get_priority_backends``: the first supported):

    * gpt-oss's MXFP4 on TRTLLM (datacenter Blackwell) or the OAI Triton kernels (Hopper):
      monolithic (:data:`MONOLITHIC_MXFP4_BACKENDS`);
    * FP8 or FP4 experts on datacenter Blackwell (compute capability 10.x): FlashInfer TRTLLM,
      listed first and supported on ``is_device_capability_family(100)``
      (experts/trtllm_fp8_moe.py, trtllm_nvfp4_moe.py: workspaces ``(0,)``, output ``(M, K)``);
    * block-FP8 experts on Hopper with expert parallelism over more than one rank (``ep``:
      ``ep_size > 1``): FlashInfer CUTLASS, moved to the front there (oracle/fp8.py;
      experts/flashinfer_cutlass_moe.py: ``(M, K)``, none);
    * everything else: the Triton shapes (Triton, Marlin and DeepGEMM experts alike).

    Unquantized experts on datacenter Blackwell stay Triton-shaped (FlashInfer's BF16 TRTLLM
    kernel is not the ledger's to select: an over-count there if vLLM picks it). A release
    whose oracles were not read (``oracle_read`` False: before 0.18) gets the Triton shapes."""
    if mxfp4_backend in MONOLITHIC_MXFP4_BACKENDS:
        return "monolithic"
    if not oracle_read:
        return "triton"
    q = shape.quantization
    expert = next((t for t in shape.tensors if t.experts > 1 and t.quantizable), None)
    fmt = tensor_format(q, expert) if q is not None and expert is not None else None
    if fmt is None or not fmt.float_format or fmt.weight_bits not in (4, 8):
        return "triton"
    cc = _compute_capability(gpu_name)
    if sm100_family(cc):
        return "output"
    if cc == (9, 0) and ep and fmt.weight_bits == 8 and fmt.block is not None:
        return "output"
    return "triton"


def moe_workspace(
    shape: ModelShape,
    tokens: int,
    width_split: int,
    dtype_bytes: int,
    kind: str = "triton",
) -> int:
    """The fused-MoE kernel's buffers, from the code (model_executor/layers/fused_moe/
    modular_kernel.py::FusedMoEKernel._allocate_buffers, the same in the 0.18.0, 0.19.0, 0.20.0,
    0.22.0, 0.24.0, 0.26.0, 0.27.1 and 0.28.0 sources): one ``WorkspaceManager`` buffer
    (v1/worker/workspace.py: grown to the largest request, never freed) holding ``workspace13``
    (the output aliases it) beside ``workspace2``, with the experts class's
    ``workspace_shapes``: TritonExperts (experts/triton_moe.py; fused_moe.py in 0.19) ``(M, k,
    max(N / 2, K))`` and ``(M, k, max(N, K))``, MarlinExperts ``(M·k, max(N', K))`` and ``(M·k ·
    max(2N', K))`` with N' = N / 2, DeepGemmExperts the same with M·k rows: all
    ``M · k · (max(I, K) + max(2I, K))`` elements of the activation dtype, I the expert width on
    the rank (``width_split``: TP × DP, 1 with expert parallelism) and K the hidden (or latent)
    width, which no parallelism splits, so the buffer does not shrink with TP. M is the tokens
    the experts see (the caller's: the dummy batch, × DP where the default
    allgather_reducescatter dispatch gathers it). ``kind`` (:func:`moe_buffer_kind`): these
    Triton shapes; ``output``, FlashInfer's experts, the ``(M, K)`` output alone; the
    monolithic kernels none. From 0.27 the buffer, allocated in the profile and alive after
    it, is consumed memory rather than the transient peak; the budget's total is the same."""
    if not shape.is_moe or kind == "monolithic":
        return 0
    hidden = shape.moe_latent_size or shape.hidden_size
    if kind == "output":
        return int(tokens * hidden * dtype_bytes)
    inter = shape.expert_intermediate_size / max(width_split, 1)
    per_row = max(inter, hidden) + max(2 * inter, hidden)
    return int(tokens * shape.experts_per_token * per_row * dtype_bytes)


def flashinfer_sampler(gpu_name: str) -> bool:
    """vLLM samples top-k/top-p with FlashInfer on this GPU (v1/sample/ops/topk_topp_sampler.py::
    flashinfer_sampler_supported, 0.33.0, ``VLLM_USE_FLASHINFER_SAMPLER`` unset): CUDA,
    ``FlashInferBackend.supports_compute_capability`` (SM80 to SM121) and more than 16 SMs (every
    catalogued GPU of those capabilities). A GPU without a catalogued compute capability (ROCm,
    a custom entry) is not taken to have it."""
    cc = _compute_capability(gpu_name)
    return cc is not None and (8, 0) <= cc <= (12, 1)


def sampler_peak(
    shape: ModelShape,
    rows: int,
    v2_runner: bool,
    tokens: int = 0,
    tp: int = 1,
    dtype_bytes: int = 2,
    warmup_pass: bool = True,
) -> int:
    """The profile's activation peak while it samples ``rows`` dummy requests on the last stage.

    V1 runner: :data:`SAMPLER_BYTES_PER_LOGIT` (fitted). V2 runner (0.22–0.32, ``warmup_pass``
    False), from the code: ``_dummy_sampler_run`` computes the logits
    (``LogitsProcessor._get_logits``: the rank's vocab slice of the padded vocabulary, then at
    TP > 1 ``all_gather`` into a (tp·rows, slice) buffer reshaped into a (rows, padded vocab)
    copy: the slice, the buffer and the copy live at once) in the model dtype, and the default
    sampler pass keeps them there (no dummy request needs logits processing); beside them the
    forward's output hidden states (``tokens`` rows) and the sampled rows' copy stay live. The
    Gumbel sampler's per-block maxima (rows × ⌈V/1024⌉ × 12 B) are left out (< 1 %).

    0.33 adds a warm-up-params pass (``warmup_pass``; model_runner.py ``_dummy_sampler_run``
    samples the same logits again with ``SamplingParams.for_sampler_warmup()``): beside the
    (rows, padded vocab) logits and the hidden rows, :data:`V2_WARMUP_FP32_COPIES` fp32
    (rows, vocab) tensors on FlashInfer's sampler, vLLM's default on CUDA GPUs of SM80–SM121
    with more than 16 SMs (v1/sample/ops/topk_topp_sampler.py::flashinfer_sampler_supported);
    penalties, temperature, min-p and the logit bias work in place, and the log-probabilities
    take a top-k of the raw logits (no (rows, vocab) tensor). Elsewhere vLLM's Triton top-k/
    top-p masks in place (the fp32 copy and a per-program scratch of at most two copies' size):
    this is its bound."""
    if not v2_runner:
        return int(rows * shape.vocab_size * SAMPLER_BYTES_PER_LOGIT)
    slice_ = vocab_rows_per_rank(shape.vocab_size, tp)
    hidden = (tokens + rows) * shape.hidden_size * dtype_bytes
    logits = rows * slice_ * (1 if tp == 1 else 1 + 2 * tp) * dtype_bytes
    if not warmup_pass:
        return logits + hidden
    gathered = rows * vocab_rows_per_rank(shape.vocab_size, 1) * dtype_bytes
    fp32 = V2_WARMUP_FP32_COPIES * 4 * rows * shape.vocab_size
    return hidden + max(logits, gathered + fp32)


def non_torch(
    era: Era,
    tp: int,
    pp: int,
    nccl_groups: int = 0,
    pcie: bool = False,
    compute_capability: tuple[int, int] | None = None,
) -> int:
    """Non-torch memory at the profile; ``nccl_groups``: the DP/EP communicators
    (:func:`dp_ep_nccl_groups`), each adding :data:`NCCL_GROUP_PROFILE_GIB` in V1; ``pcie``: a
    PCIe-only GPU (:data:`PCIE_TP_INIT_SCALE`), whose TP communicators add nothing measurable;
    ``compute_capability``: the GPU's; 8.6 and 8.9 (Ampere GA10x, Ada) take
    :data:`NON_TORCH_TP1_SM86_SM89` at TP = PP = 1 from 0.11 (None: the general figure)."""
    extra = nccl_groups * NCCL_GROUP_PROFILE_GIB if era is not Era.V0 else 0.0
    if tp >= 2 and pcie and era is not Era.V0:
        return gib(NON_TORCH_TP1[era] + extra)
    if tp >= 2 and era is not Era.V0:
        return gib(NCCL_BASE_GIB + NCCL_PER_RANK_GIB * tp + extra)
    if tp >= 2:
        return gib(NON_TORCH_TP1[era] + 0.2)
    if pp >= 2:
        return gib(NON_TORCH_PP_ONLY + extra)
    if era in SMALL_NON_TORCH_ERAS and compute_capability in SMALL_NON_TORCH_CAPABILITIES:
        return gib(NON_TORCH_TP1_SM86_SM89 + extra)
    return gib(NON_TORCH_TP1[era] + extra)


def cuda_graph_estimate(shape: ModelShape, layers_on_stage: int, cudagraphs: bool) -> int:
    if not cudagraphs:
        return 0
    mla = shape.has_kind(AttnKind.MLA)
    pool_gib = CG_BASE_GIB + CG_PER_LAYER_GIB * layers_on_stage + (CG_MLA_EXTRA_GIB if mla else 0.0)
    return gib(pool_gib)


#: attention with sinks (gpt-oss): no split buffer in the 0.19.0 gpt-oss-20b logs (FULL first
#: captures of 6 and 8 MiB at TP1/TP2 where the split count would give 256 and 128 MiB)
_SINK_MODEL_TYPES = frozenset({"gpt_oss"})


def fa3_split_buffer_bytes(
    shape: ModelShape,
    gpu_name: str,
    dtype: str,
    tokens: int,
    tp: int,
    kv_cache_dtype: str = "auto",
    rules: VllmRules | None = None,
) -> int:
    """FlashAttention 3's split-KV accumulator in a full CUDA graph of ``tokens`` tokens: vLLM
    gives FA3 ``max_num_splits`` = :data:`FA3_CUDA_GRAPH_SPLITS` under full graphs
    (``FlashAttentionMetadataBuilder``, v1/attention/backends/flash_attn.py, 0.19.0 and 0.21.0:
    "intermediate buffers of size [num_splits, num_heads, num_tokens, head_size] are
    allocated"), in float32, so the first FULL capture holds splits × tokens × the rank's query
    heads × the value head size × 4 bytes (one layer's: each call frees its own), where vLLM
    runs FA3 (:func:`runs_flash_attn_3`; FA2 elsewhere has no AOT split count). MLA on Hopper
    (FLASH_ATTN_MLA) holds the latent value head (kv_lora_rank). The 0.19.0 H100 logs agree
    within 4–14 MiB (tests/data/vllm-cudagraph-estimates.jsonl)."""
    if tokens <= 0 or not runs_flash_attn_3(shape, gpu_name, dtype, kv_cache_dtype, rules):
        return 0
    value_dim = 0
    for group in shape.layer_groups:
        a = group.attention
        if a.kind is AttnKind.MLA and not a.compress_ratio:
            value_dim = max(value_dim, a.head_dim_v)
        elif a.kind in _STANDARD_ATTENTION:
            value_dim = max(value_dim, a.head_dim_v)
    heads = shape.num_attention_heads // tp
    return FA3_CUDA_GRAPH_SPLITS * tokens * heads * value_dim * 4


def attention_backend(
    shape: ModelShape,
    gpu_name: str,
    dtype: str,
    kv_cache_dtype: str = "auto",
    rules: VllmRules | None = None,
) -> str | None:
    """The backend vLLM runs the model's standard (not MLA) attention on: FLASH_ATTN,
    FLASHINFER or TRITON_ATTN, the first of platforms/cuda.py::``_get_backend_priorities``
    (the same in 0.18.0, 0.19.0, 0.20.0, 0.24.0 and 0.28.0) whose checks pass: FLASHINFER
    first on the SM100 family, FLASH_ATTN first elsewhere. None for MLA and DeepSeek-V4's
    compressed attention (their own backends) and where the GPU's compute capability is
    unknown.

    FLASH_ATTN: FlashAttention 3 on Hopper (``get_flash_attn_version``, fa_utils.py 0.21.0),
    FlashAttention 2 on other GPUs from SM80; not for float32, head sizes over 256, the
    attention sinks of gpt-oss or Gemma 3's bidirectional image prefix (TRITON_ATTN: the 0.19.0
    H100 logs of those setups show no FA3 split buffer; ``supports_mm_prefix`` needs
    FlashAttention 4, which an SM100 GPU may resolve: not modelled, and neither label holds a
    term the ledger counts there; FlashInfer has no mm_prefix); its KV dtypes
    (``FlashAttentionBackend.supports_kv_cache_dtype``): fp8 only with FA3 on SM90, where
    ``rules`` gives the release's list (:attr:`VllmRules.flash_attn_kv_dtypes`; without
    ``rules`` any), 16-bit elsewhere. FLASHINFER: compute capability 8.0–12.1, head sizes
    :data:`FLASHINFER_HEAD_SIZES`, :data:`FLASHINFER_KV_DTYPES` (nvfp4 too on SM100), sinks
    only on SM100 (``supports_sink``), 16-bit activations. Else TRITON_ATTN."""
    cc = _compute_capability(gpu_name)
    if cc is None:
        return None
    heads: set[int] = set()
    for group in shape.layer_groups:
        a = group.attention
        if a.kind is AttnKind.MLA or a.compress_ratio:
            return None
        if a.kind in _STANDARD_ATTENTION:
            heads |= {a.head_dim_k, a.head_dim_v}
    sinks = shape.model_type in _SINK_MODEL_TYPES
    # neither backend runs float32 or Gemma 3's bidirectional image prefix (mm_prefix)
    excluded = dtype == "float32" or (shape.model_type.startswith("gemma3") and shape.is_multimodal)
    if sinks or excluded:
        flash_attn = False
    elif cc == (9, 0):
        flash_attn = rules is None or kv_cache_dtype in rules.flash_attn_kv_dtypes
    else:
        flash_attn = cc >= (8, 0) and kv_cache_dtype in FLASH_ATTN_KV_16BIT
    flash_attn = flash_attn and all(h <= 256 for h in heads)
    sm100 = sm100_family(cc)
    flashinfer = (
        (8, 0) <= cc <= (12, 1)
        and not excluded
        and heads <= FLASHINFER_HEAD_SIZES
        and kv_cache_dtype in (FLASHINFER_KV_DTYPES | {"nvfp4"} if sm100 else FLASHINFER_KV_DTYPES)
        and (not sinks or sm100)
    )
    order = (("FLASHINFER", flashinfer), ("FLASH_ATTN", flash_attn))
    for name, ok in order if sm100 else order[::-1]:
        if ok:
            return name
    return "TRITON_ATTN"


def runs_flash_attn_3(
    shape: ModelShape,
    gpu_name: str,
    dtype: str,
    kv_cache_dtype: str = "auto",
    rules: VllmRules | None = None,
) -> bool:
    """Whether vLLM runs the model's attention on FlashAttention 3: on Hopper, standard
    attention where :func:`attention_backend` picks FLASH_ATTN, MLA on FLASH_ATTN_MLA unless
    the cache is fp8 (FlashMLA from 0.18: :attr:`VllmRules.mla_fp8_hopper_flashmla`), not
    float32, not DeepSeek-V4's compressed attention. Read by the split buffer
    (:func:`fa3_split_buffer_bytes`) and the latency model's FP8 KV reads (sizing/latency.py,
    ``perf.FA3_FP8_KV_DECODE_BYTES_PER_S``)."""
    if _compute_capability(gpu_name) != (9, 0) or dtype == "float32":
        return False
    if shape.has_kind(AttnKind.MLA):
        if any(g.attention.compress_ratio for g in shape.layer_groups):
            return False
        fp8 = kv_cache_dtype.startswith("fp8")
        return not (rules is not None and fp8 and rules.mla_fp8_hopper_flashmla)
    return attention_backend(shape, gpu_name, dtype, kv_cache_dtype, rules) == "FLASH_ATTN"


#: the attention kinds vLLM's standard backends run (FLASH_ATTN, FlashInfer, Triton)
_STANDARD_ATTENTION = frozenset({AttnKind.FULL, AttnKind.SLIDING, AttnKind.CHUNKED})


def flashinfer_workspaces(
    shape: ModelShape,
    gpu_name: str,
    dtype: str,
    kv_cache_dtype: str,
    rules: VllmRules,
    attention_groups: int,
) -> int:
    """FlashInfer float workspaces (:data:`FLASHINFER_WORKSPACE_BYTES` each) the V1 runner's
    CUDA-graph estimate allocates in its first FULL capture, from the code (0.20.0, 0.24.0,
    0.28.0): ``profile_cudagraph_memory`` builds fresh attention metadata builders
    (``_init_minimal_kv_cache_for_profiling``), PIECEWISE warm-ups run without attention
    metadata, and the first FULL warm-up (``force_attention``) builds a decode wrapper, whose
    workspace ``FlashInferMetadataBuilder._get_workspace_buffer`` allocates lazily, one per
    builder: one per KV-cache group of standard attention (``attention_groups``), where
    :func:`attention_backend` picks FLASHINFER. On the SM100 family the decode runs on TRT-LLM
    kernels whose workspace is one module-wide buffer of the same size
    (``_get_trtllm_gen_workspace_buffer``): one in all. The 0.20.0 boots of a Qwen3.6-35B-A3B
    NVFP4 on an RTX 5090 (FLASHINFER, fp8 KV) print 0.36–0.45 GiB for one to three graphs of
    each mode where the H100-fitted rule alone gives 0.06–0.10
    (tests/data/vllm-cudagraph-estimates-validation.jsonl)."""
    if attention_groups <= 0:
        return 0
    if attention_backend(shape, gpu_name, dtype, kv_cache_dtype, rules) != "FLASHINFER":
        return 0
    return 1 if sm100_family(_compute_capability(gpu_name)) else attention_groups


def profiled_cuda_graph_estimate(
    shape: ModelShape,
    layers: range,
    tp: int,
    capture: CaptureSizes,
    dtype: str,
    dtype_bytes: int,
    gpu_name: str,
    cases: int = 1,
    kv_cache_dtype: str = "auto",
    rules: VllmRules | None = None,
    workspaces: int = 0,
) -> int:
    """vLLM's CUDA-graph estimate (the V1 runner's ``profile_cudagraph_memory``, 0.18–0.28):
    per mode the first capture plus (descriptors − 1) × a further graph's increment; the
    larger first capture plus both increments. ``capture.mixed`` are the PIECEWISE graphs,
    ``capture.decode`` the FULL ones (none with chunked local attention, whose NEVER support
    turns the mode PIECEWISE: the Llama-4-Scout log shows PIECEWISE only); ``cases``: the LoRA
    cases, which multiply the descriptors (``CudagraphDispatcher._get_lora_cases``);
    ``workspaces``: the FlashInfer workspaces the first FULL capture allocates
    (:func:`flashinfer_workspaces`). The constants: :data:`CG_EST_PIECEWISE_FIRST_MIB` and the
    lines after it."""
    n_layers = len(layers)
    mixed = capture.mixed
    decode = () if shape.has_kind(AttnKind.CHUNKED) else capture.decode
    firsts = [0.0]
    increments = 0.0
    if mixed:
        top = max(mixed)
        # the fused-MoE buffer (:func:`moe_workspace`) was sized by the profile run's dummy
        # batch and only grows: a capture of at most that many tokens allocates none of it
        transient = forward_peak(shape, top, tp, dtype_bytes, layers)
        firsts.append(
            CG_EST_PIECEWISE_FIRST_MIB * MiB + CG_EST_PIECEWISE_FIRST_PER_FORWARD * transient
        )
        per = CG_EST_PIECEWISE_PER_GRAPH_LAYER_MIB[shape.is_moe] * MiB * n_layers
        increments += (len(mixed) * cases - 1) * per
    if decode:
        split = fa3_split_buffer_bytes(
            shape, gpu_name, dtype, max(decode), tp, kv_cache_dtype, rules
        )
        firsts.append(CG_EST_FULL_FIRST_MIB * MiB + split + workspaces * FLASHINFER_WORKSPACE_BYTES)
        per = CG_EST_FULL_PER_GRAPH_LAYER_MIB[shape.is_moe] * MiB * n_layers
        increments += (len(decode) * cases - 1) * per
    return int(max(firsts) + increments)


#: vLLM's default capture list for R ≥ 256 and T ≥ 512: [1, 2, 4] + 8..248 step 8 + 256..512
#: step 16 = 51 sizes (config/compilation.py, 0.12–0.33); the CG constants above were fitted on it.
DEFAULT_CAPTURE_SIZES = 51


#: the architectures whose vLLM config hook raises the largest capture size when the user sets
#: none (:attr:`VllmRules.gpt_oss_capture_1024`)
_CAPTURE_1024_ARCHITECTURES = frozenset({"GptOssForCausalLM"})


def max_capture_size(shape: ModelShape, settings: EngineSettings, v: Version) -> int | None:
    """``--compilation-config max_cudagraph_capture_size`` as vLLM resolves it before sizing the
    capture list: the user's, else 1024 for gpt-oss (:attr:`VllmRules.gpt_oss_capture_1024`:
    83 sizes instead of 51), else None (the default rule)."""
    top = settings.max_cudagraph_capture_size
    if (
        top is None
        and settings.cudagraph_capture_sizes is None
        and shape.architecture in _CAPTURE_1024_ARCHITECTURES
        and VllmRules.for_version(v).gpt_oss_capture_1024
    ):
        return 1024
    return top


def capture_count(settings: EngineSettings) -> int:
    """Graphs per mode for ``--compilation-config`` capture sizes (default 51)."""
    sizes = settings.cudagraph_capture_sizes
    top = settings.max_cudagraph_capture_size
    if sizes is None:
        if top is None:
            return DEFAULT_CAPTURE_SIZES
        default = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
        return len([x for x in default if x <= top])
    return len({x for x in sizes if top is None or x <= top})


@dataclass(frozen=True, slots=True)
class CaptureSizes:
    """The CUDA graphs vLLM captures (FULL_AND_PIECEWISE, the default graph mode from 0.11; with
    or without speculative tokens, ``query_len`` 1 without): ``mixed`` PIECEWISE graphs for
    mixed prefill-decode batches, ``decode`` FULL graphs for uniform decode batches of
    ``query_len`` tokens per request (token counts)."""

    query_len: int
    max_size: int
    mixed: tuple[int, ...]
    decode: tuple[int, ...]

    @property
    def graphs(self) -> int:
        return len(self.mixed) + len(self.decode)


def capture_grid(top: int) -> list[int]:
    """vLLM's default size grid up to ``top``: [1, 2, 4] + 8..248 step 8 + 256.. step 16
    (config/vllm.py::VllmConfig._set_cudagraph_sizes, 0.12–0.33)."""
    sizes = [x for x in (1, 2, 4) if x <= top]
    if top >= 8:
        sizes += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes += list(range(256, top + 1, 16))
    return sizes


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def spec_capture_sizes(
    v: Version,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int,
    user_sizes: tuple[int, ...] | None,
    user_max: int | None,
    gpu_name: str,
    v2_runner: bool,
    full_decode: bool = True,
) -> CaptureSizes:
    """Capture sizes with ``k`` speculative tokens, a uniform decode batch being ``q = 1 + k``
    tokens per request (``GPUModelRunner.uniform_decode_query_len``; the
    ``VllmConfig.uniform_decode_query_len`` property from 0.29). Read in the 0.11.0, 0.12.0,
    0.13.0, 0.14.0, 0.16.0, 0.18.0, 0.20.0, 0.22.0, 0.25.0, 0.27.0, 0.29.0, 0.31.0 and 0.33.0
    wheels (versions in between are assumed to follow the older neighbour):

    * the largest size (``config/vllm.py::VllmConfig._set_cudagraph_sizes``; 0.11:
      ``config/__init__.py`` with ``SchedulerConfig.cuda_graph_sizes``): without
      ``max_cudagraph_capture_size``, ``min(2 × R, 512)`` through 0.12, ``min(2 × R × q, 512)``
      from 0.13, 1024 instead of 512 on data-centre Blackwell from 0.29; then ``min(·, T)``;
    * the default grid (:func:`capture_grid`; 0.11: [1, 2, 4] + multiples of 8); from 0.22 T
      is added when it is at most the largest size; from 0.29, with q > 1 and no user maximum, the
      uniform decode sizes ``n × q`` for ``n`` in the grid up to ``min(R, 512)`` plus R itself
      (``request_counts``), those within the largest size and T;
    * user ``cudagraph_capture_sizes``: de-duplicated, those ≤ T; from 0.12 the largest size
      is then the last size (a different user maximum with user sizes is an error);
    * the rounding (``config/compilation.py::CompilationConfig.
      adjust_cudagraph_sizes_for_spec_decode``, called by ``GPUModelRunner`` in 0.12–0.18 and by
      ``CompilationConfig`` from 0.20, with FULL decode graphs and q > 1; from 0.25 not for the
      V2 model runner; ``full_decode`` False — PIECEWISE — not at all): each size rounded up
      to a multiple of q, kept if ≤ the largest size;
      none left gives ``[q]`` when q ≤ the largest size, else vLLM raises; the largest size
      becomes the last one. 0.11 rounds nothing;
    * FULL decode graphs: the V1 runner's sizes ``s`` with ``q ≤ s ≤ R × q``
      (``GPUModelRunner.capture_model`` in 0.11; ``v1/cudagraph_dispatcher.py::
      CudagraphDispatcher.initialize_cudagraph_keys`` in 0.13, 0.20, 0.27); the V2 runner (0.25+,
      ``v1/worker/gpu/cudagraph_utils.py::CudaGraphManager._init_candidates``, 0.33) rounds
      each size up to a multiple of q and keeps those ≤ ``R × q`` and ≤ the largest size.
    """
    q = 1 + num_speculative_tokens
    R, T = max_num_seqs, max_num_batched_tokens
    r = VllmRules.for_version(v)
    blackwell = _gpu_family(gpu_name) == "blackwell" and r.blackwell_capture_ceiling
    ceiling = 1024 if blackwell else 512
    top = user_max
    if top is None:
        top = min(2 * R * (q if r.capture_max_times_query_len else 1), ceiling)
    top = min(top, T)
    if top < 1:
        raise SettingsError("Maximum cudagraph size should be greater than or equal to 1")
    if user_sizes is not None:
        sizes = sorted({x for x in user_sizes if x <= T})
    elif not r.capture_grid_0_12:
        sizes = [1, 2, 4] + list(range(8, top + 1, 8))
    else:
        sizes = capture_grid(top)
        if r.capture_adds_batched_tokens and T <= top and T not in sizes:
            sizes.append(T)
        if r.capture_adds_decode_sizes and user_max is None and q > 1:
            counts = sorted({*capture_grid(min(R, ceiling)), min(R, ceiling)})
            sizes += [n * q for n in counts if n * q <= top and n * q <= T]
        sizes = sorted(set(sizes))
    if r.capture_grid_0_12 and sizes:
        # the largest size becomes the last one; a user maximum that is not it, with user
        # sizes too, is an error (the same function, "valid_max_size", 0.13.0 and 0.20.0)
        if user_sizes is not None and user_max is not None and user_max != sizes[-1]:
            raise SettingsError(
                f"customized max_cudagraph_capture_size(={user_max}) should be consistent "
                f"with the max value of cudagraph_capture_sizes(={sizes[-1]})"
            )
        top = sizes[-1]
    v2_manager = v2_runner and r.v2_cudagraph_manager
    rounds = r.capture_grid_0_12 and not v2_manager and full_decode
    if rounds and q > 1 and sizes:
        rounded = sorted({_round_up(x, q) for x in sizes if _round_up(x, q) <= top})
        if not rounded and q <= top:
            rounded = [q]
        if not rounded:
            raise SettingsError(
                f"No valid cudagraph sizes after rounding to multiple of {q} "
                f"(num_speculative_tokens + 1) please adjust num_speculative_tokens "
                f"({q - 1}) or max_cudagraph_capture_size ({top}) or "
                f"cudagraph_capture_sizes ({sizes})"
            )
        sizes, top = rounded, rounded[-1]
    if v2_manager:
        decode = sorted({_round_up(x, q) for x in sizes if _round_up(x, q) <= min(R * q, top)})
    else:
        decode = [x for x in sizes if q <= x <= R * q]
    return CaptureSizes(q, top, tuple(sizes), tuple(decode))


def spec_cuda_graph_estimate(
    shape: ModelShape,
    layers_on_stage: int,
    capture: CaptureSizes,
    drafter_layers: int,
    drafter_graphs: bool,
) -> int:
    """The CUDA-graph pool of the graphs ``capture`` lists (from 0.11, speculative decoding or
    not; the name is historical): :func:`cuda_graph_estimate` (fitted at 51 + 51 graphs)
    scaled by ``capture.graphs / 102``. With ``drafter_graphs`` (the V2 runner's
    ``profile_cudagraph_memory`` measures the speculator's graphs too, 0.30–0.33; the V1 runner
    estimates the target's dispatcher descriptors only, ``GPUModelRunner.
    profile_cudagraph_memory`` 0.20) the drafter's layers add ``CG_PER_LAYER_GIB`` each at the
    same graph count (an assumption: no log with a drafter was fitted)."""
    base = cuda_graph_estimate(shape, layers_on_stage, True)
    if drafter_graphs and drafter_layers:
        base += gib(CG_PER_LAYER_GIB * drafter_layers)
    return base * capture.graphs // (2 * DEFAULT_CAPTURE_SIZES)


#: ``AttentionCGSupport`` (v1/attention/backend.py, 0.20.0/0.28.0), weakest first
_CG_NEVER, _CG_SINGLE_TOKEN_DECODE, _CG_UNIFORM_BATCH, _CG_ALWAYS = range(4)
#: ``(mixed_mode(), decode_mode())`` of each mode (``CUDAGraphMode.mixed_mode``/``decode_mode``:
#: the tuple members FULL_DECODE_ONLY = (FULL, NONE) and FULL_AND_PIECEWISE = (FULL, PIECEWISE)
#: split, the others are both)
_MODE_ROUTINES: Final[Mapping[str, tuple[str, str]]] = MappingProxyType(
    {
        "NONE": ("NONE", "NONE"),
        "PIECEWISE": ("PIECEWISE", "PIECEWISE"),
        "FULL": ("FULL", "FULL"),
        "FULL_DECODE_ONLY": ("NONE", "FULL"),
        "FULL_AND_PIECEWISE": ("PIECEWISE", "FULL"),
    }
)


def resolve_cudagraph_mode(mode: str, support: int, query_len: int) -> str | None:
    """The mode vLLM runs for ``mode`` with the weakest attention backend's ``support`` and a
    uniform decode of ``query_len`` tokens (``CompilationConfig.resolve_cudagraph_mode_and_sizes``,
    config/compilation.py, 0.20.0 and 0.28.0, with the attention ops in ``splitting_ops``, as
    ``set_splitting_ops_for_v1`` leaves them under VLLM_COMPILE); None where vLLM raises:

    * mixed FULL (FULL) without ALWAYS support: NEVER raises, otherwise FULL_AND_PIECEWISE;
    * FULL decode with NEVER support, or with ``query_len`` > 1 below UNIFORM_BATCH: PIECEWISE.
    """
    if mode == "NONE":
        return "NONE"
    if _MODE_ROUTINES[mode][0] == "FULL" and support != _CG_ALWAYS:
        if support == _CG_NEVER:
            return None
        mode = "FULL_AND_PIECEWISE"
    decode_full = _MODE_ROUTINES[mode][1] == "FULL"
    if decode_full and support == _CG_NEVER:
        mode = "PIECEWISE"
    elif decode_full and query_len > 1 and support < _CG_UNIFORM_BATCH:
        mode = "PIECEWISE"
    return mode


def _mode_graphs(mode: str, full: CaptureSizes, piecewise: CaptureSizes) -> int:
    """Graphs captured per LoRA case in a resolved ``mode``: the dispatcher's keys
    (v1/cudagraph_dispatcher.py::CudagraphDispatcher.initialize_cudagraph_keys, 0.20.0 and
    0.28.0; the V2 runner's ``CudaGraphManager._init_candidates``, 0.28.0, the same sets): one
    per capture size for the mixed routine (PIECEWISE, or FULL when it is the mode), one per
    decode size for a separate FULL decode routine. ``full`` has the sizes as rounded for FULL
    decode graphs (V1, ``query_len`` > 1), ``piecewise`` as left for PIECEWISE (not rounded)."""
    if mode == "NONE":
        return 0
    if mode == "PIECEWISE":
        return len(piecewise.mixed)
    if mode == "FULL":
        return len(full.mixed)
    if mode == "FULL_DECODE_ONLY":
        return len(full.decode)
    return full.graphs


def cudagraph_mode_graphs(
    v: Version, mode: str, full: CaptureSizes, piecewise: CaptureSizes, never_backend: bool
) -> int:
    """Graphs captured for the requested ``mode`` (per LoRA case; LoRA multiplies every mode's
    descriptors alike, ``product(sizes, lora_cases)`` in both runners). The ledger does not
    resolve the attention backend, so this is the most over the supports a CUDA backend can
    have (ALWAYS: FlashAttention 3, Triton; UNIFORM_BATCH: FlashAttention 2, FlashMLA, FlashInfer
    with TRT-LLM attention, Mamba/GDN; UNIFORM_SINGLE_TOKEN_DECODE: FlashInfer, CUTLASS MLA,
    linear attention; v1/attention/backends/, 0.20.0): FULL counts as FULL_AND_PIECEWISE (the
    fallback), FULL_DECODE_ONLY with speculative decoding as PIECEWISE. ``never_backend``:
    a layer whose builder has NEVER support (chunked local attention,
    model_executor/layers/attention/chunked_local_attention.py, 0.20.0 and 0.28.0), where FULL
    raises and the FULL decode routine falls back to PIECEWISE. The default mode keeps its
    count (``full.graphs``: its downgrades are not modelled, as before)."""
    if mode not in CUDAGRAPH_MODES:
        raise SettingsError(
            f"--compilation-config cudagraph_mode {mode!r} is not one of "
            f"{', '.join(CUDAGRAPH_MODES)}"
        )
    if mode == DEFAULT_CUDAGRAPH_MODE:
        return full.graphs
    if mode != "NONE" and not VllmRules.for_version(v).cudagraph_modes_read:
        raise SettingsError(
            f"--compilation-config cudagraph_mode {mode}: the graphs it captures were read "
            f"for vLLM 0.20–0.28 only, not {v}"
        )
    supports = (
        (_CG_NEVER,) if never_backend else (_CG_SINGLE_TOKEN_DECODE, _CG_UNIFORM_BATCH, _CG_ALWAYS)
    )
    resolved = [resolve_cudagraph_mode(mode, s, full.query_len) for s in supports]
    counts = [_mode_graphs(m, full, piecewise) for m in resolved if m is not None]
    if not counts:
        raise SettingsError(
            f"--compilation-config cudagraph_mode {mode} is not supported with chunked local "
            "attention (support NEVER): vLLM raises (config/compilation.py::"
            "resolve_cudagraph_mode_and_sizes); try PIECEWISE"
        )
    return max(counts)


def cudagraph_mode_scale(
    v: Version,
    mode: str | None,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int,
    user_sizes: tuple[int, ...] | None,
    user_max: int | None,
    gpu_name: str,
    v2_runner: bool,
    never_backend: bool,
) -> tuple[int, int]:
    """(graphs of ``mode``, graphs of FULL_AND_PIECEWISE) for one setup: the CUDA-graph term,
    fitted on the default mode, is scaled by their ratio. The scaling is ASSUMED linear in the
    graph count (provenance: assumed; vLLM's own estimate is the largest first capture plus a
    per-graph cost for each further graph of a mode, ``GPUModelRunner.profile_cudagraph_memory``
    0.20.0/0.28.0, and a FULL graph need not cost a PIECEWISE one)."""
    if mode is None or mode == DEFAULT_CUDAGRAPH_MODE:
        return 1, 1
    args = (
        v,
        max_num_seqs,
        max_num_batched_tokens,
        num_speculative_tokens,
        user_sizes,
        user_max,
        gpu_name,
        v2_runner,
    )
    full = spec_capture_sizes(*args)
    piecewise = spec_capture_sizes(*args, full_decode=False)
    return cudagraph_mode_graphs(v, mode, full, piecewise, never_backend), full.graphs


def distributed_init_bytes(
    era: Era, tp: int, pp: int, nccl_groups: int = 0, pcie: bool = False
) -> int:
    """NCCL and all-reduce memory taken before vLLM's init snapshot at TP/PP ≥ 2, from 0.11
    (snapshot after distributed init), plus :data:`NCCL_GROUP_INIT_GIB` per DP/EP communicator;
    ``pcie``: the TP part on a PCIe-only GPU (:data:`PCIE_TP_INIT_SCALE`). Before 0.11 (and V0)
    distributed init came after the snapshot and is measured instead (non-torch)."""
    init_gib = 0.0
    if era in (Era.V1_NO_CG, Era.V1_CG, Era.V1_CONSUMED):
        init_gib += nccl_groups * NCCL_GROUP_INIT_GIB
        if tp >= 2:
            ranks = min(tp, PCIE_TP_INIT_FLAT_FROM) if pcie else tp
            tp_gib = TP_INIT_BASE_GIB + TP_INIT_PER_DOUBLING_GIB * math.log2(ranks)
            init_gib += tp_gib * (PCIE_TP_INIT_SCALE if pcie else 1.0)
        if pp >= 2:
            init_gib += PP_INIT_GIB
    return gib(init_gib)


def pre_snapshot_bytes(era: Era, tp: int, pp: int, nccl_groups: int = 0, pcie: bool = False) -> int:
    """Device memory in use before vLLM's init snapshot, never in its budget: the CUDA context
    plus :func:`distributed_init_bytes`. ``free_init = total − this`` must hold ``requested``."""
    return gib(CUDA_CONTEXT_GIB) + distributed_init_bytes(era, tp, pp, nccl_groups, pcie)


def pcie_only(gpu_name: str) -> bool:
    """Whether the catalog lists ``gpu_name`` as a PCIe-only GPU (:data:`PCIE_TP_INIT_SCALE`);
    False for NVLink GPUs and for GPUs it does not know (the NVLink fit: the larger terms)."""
    gpu = find_gpu(gpu_name)
    return gpu is not None and gpu.interconnect == "pcie"


def _decoder_layer_bytes(
    shape: ModelShape, tp: int, dtype_bytes: int, ep: int, moe_tp: int = 0
) -> int:
    """Weights of the model's last decoder layer on one TP rank (what one MTP layer repeats),
    in the model dtype where the checkpoint leaves its MTP layers out of its quantization
    (``Quantization.mtp_unquantized``)."""
    n = shape.num_layers
    q = shape.quantization
    if q is not None and q.mtp_unquantized:
        q = None
    w = weight_breakdown(shape, tp, n, n - 1, dtype_bytes, q, ep=ep, moe_tp=moe_tp)  # O(1)
    skip = ("embedding", "lm_head")
    return sum(b for g, b in w.by_group.items() if g not in skip)


def _draft(
    shape: ModelShape, settings: EngineSettings, tp: int, dtype_bytes: int, ep: int
) -> tuple[int, list[tuple[LayerAttention, int]]]:
    """Drafter weights and its KV layers on the last PP stage (config/speculative.py).

    MTP (``DeepSeekMTP`` and kin, model_executor/models/*_mtp.py): ``mtp_layers`` decoder layers
    of the target plus ``eh_proj`` (2H → H) and two norms each, sharing the embedding and head;
    each is one more attention layer in the KV cache. A draft model (EAGLE, draft_model): its
    own weights at the target's TP and its own layers in the KV cache. N-gram look-up: none.
    """
    spec = settings.speculative
    if spec is None or spec.method not in MTP_METHODS | DRAFT_MODEL_METHODS:
        return 0, []
    if spec.method in MTP_METHODS:
        if shape.mtp_layers <= 0:
            raise SettingsError(
                f"--speculative-config: method {spec.method!r} needs MTP layers, and the "
                "model config has none (num_nextn_predict_layers / mtp_num_hidden_layers)"
            )
        h = shape.hidden_size
        extra = (2 * h * h + 2 * h) * dtype_bytes
        moe_tp = tp if settings.expert_parallel else tp * settings.data_parallel
        per = _decoder_layer_bytes(shape, tp, dtype_bytes, ep, moe_tp) + extra
        return shape.mtp_layers * per, [(shape.layer_at(shape.num_layers - 1), shape.mtp_layers)]
    v = parse_version(settings.version)
    if spec.method == "draft_model" and not VllmRules.for_version(v).draft_model_speculation:
        # engine/arg_utils.py::EngineArgs._is_v1_supported_oracle raises in the 0.11.0–0.14.0
        # wheels (0.15 not read; 0.16.0 has no such refusal)
        raise SettingsError(
            "--speculative-config: method 'draft_model' is not supported by the V1 engine "
            f"before 0.16 (vLLM {v}: 'Draft model speculative decoding is not supported yet')"
        )
    d = settings.draft_model
    if d is None:
        raise SettingsError(
            f"--speculative-config: the draft model {spec.model!r} has no known config "
            "(add it to the catalog or give its config)"
        )
    w = weight_breakdown(d, tp, 1, 0, dtype_bytes, d.quantization)
    # A rotary cache the target already has is the same object (``get_rope`` memoises by its
    # configuration in one worker process), so only the drafter's other caches add bytes.
    # EAGLE heads without embed_tokens / lm_head in their checkpoint use the target's
    # (v1/spec_decode/llm_base_proposer.py::_maybe_share_embeddings / _maybe_share_lm_head,
    # 0.20): with safetensors headers those tensors are simply absent from the drafter's bytes;
    # a copy identical to the target's is also shared by vLLM (a comparison of values), which
    # headers cannot show: it is counted (over, never under).
    shared_rope = sum(
        rc.positions * rc.rotary_dim * (4 if rc.fp32 else dtype_bytes)
        for rc in set(d.rope_caches)
        if rc in shape.rope_caches
    )
    return w.total - min(shared_rope, w.rope_cache), d.groups_in(range(d.num_layers))


#: Rejection sampler (v1/sample/rejection_sampler.py, profiled by
#: GPUModelRunner._dummy_sampler_run with speculative decoding): ``(k + R) × V`` fp32 logits.
SPEC_LOGIT_BYTES = 4


#: Models implementing ``SupportsMambaPrefixCaching`` (vLLM models/*.py, 0.15–0.29): with
#: prefix caching on they cache Mamba state in "all" mode.
MAMBA_ALL_MODE_ARCHS = frozenset(
    {
        "NemotronHForCausalLM",
        "Mamba2ForCausalLM",
        "BambaForCausalLM",
        "JambaForCausalLM",
        "Zamba2ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "FalconH1ForCausalLM",
    }
)
#: Hopper + FlashInfer GDN prefill aligns GDN hybrids' block size to 64 tokens (0.33:
#: platforms/interface.py::_align_hybrid_block_size; block 1088 instead of 1056).
GDN_HOPPER_ALIGN = 64


def hybrid_prefix_caching_default(v: Version) -> bool:
    """Prefix caching's default for a hybrid (Mamba/GDN + attention) model:
    ``config/model.py::ModelConfig.is_prefix_caching_supported`` returns False for
    ``attn_type == "hybrid"`` ("Hybrid models do not support prefix caching…") in the 0.20.0
    and 0.25.0 sources (the rule is taken to hold from 0.13 on: the oldest line with it is not
    pinned), and True from 0.26.0; ``engine/arg_utils.py`` takes it as
    ``--enable-prefix-caching``'s default."""
    return VllmRules.for_version(v).hybrid_prefix_caching_default


def prefix_caching_enabled(v: Version, shape: ModelShape, flag: bool | None) -> bool:
    """Whether prefix caching is on: the flag, else vLLM's default (on, except for hybrids
    before 0.26: :func:`hybrid_prefix_caching_default`)."""
    if flag is not None:
        return flag
    return not shape.has_kind(AttnKind.MAMBA) or hybrid_prefix_caching_default(v)


def mamba_cache_mode(
    v: Version, shape: ModelShape, prefix_caching: bool | None, speculative: bool = False
) -> str:
    """How vLLM caches Mamba/GDN state (models/config.py::MambaModelConfig.
    verify_and_update_config, read in 0.20.0, 0.25.0, 0.26.0, 0.28.0):

    * "none": one state block per request (+ speculative) — prefix caching off, which is the
      default for hybrids before 0.26 (:func:`hybrid_prefix_caching_default`), or before 0.15;
    * "all": with prefix caching on, for ``SupportsMambaPrefixCaching`` models, 0.15–0.27: a
      state block every ``B`` tokens, ``cdiv(L, B)`` per Mamba group (0.20–0.21 choose "align"
      instead when speculative decoding is on);
    * "align": other hybrids (Qwen3-Next / Qwen3.5 GDN) with prefix caching on, and every
      hybrid from 0.28 (the 0.28.0 rule sets "align" whenever the mode is "none"): 2 blocks
      (+ speculative, + a prefill checkpoint block: :func:`prefill_checkpoint_blocks`).
    """
    if not shape.has_kind(AttnKind.MAMBA):
        return "none"
    r = VllmRules.for_version(v)
    if not prefix_caching_enabled(v, shape, prefix_caching) or not r.mamba_prefix_caching:
        return "none"
    if r.mamba_all_mode and shape.architecture in MAMBA_ALL_MODE_ARCHS:
        if speculative and r.mamba_align_with_spec:
            return "align"
        return "all"
    return "align"


#: Models built on MambaMixer2 (model_executor/layers/mamba/mamba_mixer2.py), whose
#: ``get_kv_cache_spec`` adds ``num_prefill_checkpoint_blocks=1`` from 0.32.0
MAMBA2_ARCHS = frozenset(
    {
        "NemotronHForCausalLM",
        "Mamba2ForCausalLM",
        "BambaForCausalLM",
        "Zamba2ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "FalconH1ForCausalLM",
    }
)


def prefill_checkpoint_blocks(v: Version, shape: ModelShape, gpu_name: str) -> int:
    """The align-mode prefill checkpoint block (``MambaSpec.num_prefill_checkpoint_blocks``,
    v1/kv_cache_interface.py ``max_memory_usage_bytes``: ``2 + spec + checkpoint``): Mamba2
    models from 0.32.0 (``MambaMixer2.get_kv_cache_spec``); Gated DeltaNet from 0.33.0 when it
    exports checkpoints with FlashInfer GDN prefill (``qwen_gdn_linear_attn.py``): Hopper, or
    Blackwell with CUDA ≥ 13 (the CUDA version is not known here: Blackwell is counted, the
    safe side); other hybrids (Jamba's Mamba1) from 0.33.0 as before (kept, the safe side)."""
    r = VllmRules.for_version(v)
    if shape.architecture in MAMBA2_ARCHS:
        return 1 if r.mamba2_checkpoint_block else 0
    if not r.hybrid_checkpoint_block:
        return 0
    if shape.model_type.startswith(("qwen3_5", "qwen3_next")):
        return 1 if _gpu_family(gpu_name) in ("hopper", "blackwell") else 0
    return 1


def _mamba_align(v: Version, shape: ModelShape, mode: str, block: int, gpu_name: str) -> int:
    """The unit the hybrid block size is raised in (kv_layout ``align``)."""
    if mode == "all":
        chunk = max(
            (
                g.attention.mamba.chunk_size
                for g in shape.layer_groups
                if g.attention.mamba is not None
            ),
            default=0,
        )
        return math.lcm(chunk, block) if chunk else block
    gdn = shape.model_type.startswith(("qwen3_5", "qwen3_next"))
    hopper = gpu_name.upper().startswith(("H100", "H200", "H20", "H800", "GH200"))
    if gdn and hopper and VllmRules.for_version(v).gdn_hopper_align:
        return math.lcm(GDN_HOPPER_ALIGN, block)
    return block


def mamba_blocks_per_request(
    mode: str, v: Version, L: int, block: int, k_spec: int, checkpoint: int = 0
) -> int:
    """State blocks one request holds per Mamba group (kv_cache_interface.py::
    MambaSpec.max_memory_usage_bytes by mode); ``checkpoint``: :func:`prefill_checkpoint_blocks`."""
    if mode == "all":
        return math.ceil(L / block)
    if mode == "align":
        return 2 + k_spec + checkpoint
    return 1 + k_spec


#: speculative methods async scheduling keeps by default (config/speculative.py
#: ``EagleModelTypes``, 0.14.0: eagle, eagle3 and the MTP types)
ASYNC_SPEC_METHODS = frozenset({"eagle", "eagle3"}) | MTP_METHODS


def async_scheduling_on(v: Version, pp: int, settings: EngineSettings) -> bool:
    """Whether the engine core runs vLLM's async scheduler, which schedules step n + 1 while
    the GPU runs step n (v1/core/sched/async_scheduler.py): ``--async-scheduling`` where
    given, else the version's default (:attr:`VllmRules.async_scheduling_default`), which
    config/vllm.py ``VllmConfig.__post_init__`` (0.14.0–0.18.0) turns off at PP > 1 and with
    a speculative method other than EAGLE/MTP."""
    if settings.async_scheduling is not None:
        return settings.async_scheduling
    if not VllmRules.for_version(v).async_scheduling_default or pp > 1:
        return False
    spec = settings.speculative
    return spec is None or spec.method in ASYNC_SPEC_METHODS


def in_flight_tokens(
    v: Version, T: int, pp: int, v2_runner: bool, async_scheduling: bool | None
) -> int:
    """Tokens a sliding/chunked layer must hold beyond its window: from 0.26
    ``VllmConfig.max_in_flight_tokens = max_concurrent_batches × T``, with pp + 1 batches for
    the V2 runner with async scheduling, 2 for the V1 runner with async scheduling at PP 1, and
    pp otherwise (None: on, vLLM's default there, :func:`async_scheduling_on`); before 0.26, T
    (:attr:`VllmRules.in_flight_batches`)."""
    if not VllmRules.for_version(v).in_flight_batches:
        return T
    on = True if async_scheduling is None else async_scheduling
    if on:
        batches = pp + 1 if v2_runner else (2 if pp == 1 else pp)
    else:
        batches = pp
    return batches * T


def _spec_tokens(shape: ModelShape, settings: EngineSettings) -> int:
    """``num_speculative_tokens`` (MTP's default: the model's MTP layer count); 0 without
    speculative decoding."""
    spec = settings.speculative
    if spec is None:
        return 0
    return spec.num_speculative_tokens or shape.mtp_layers


def _cached_layers(
    shape: ModelShape, pp: int, stage: int, v: Version, settings: EngineSettings
) -> list[tuple[LayerAttention, int]]:
    """The stage's layers as vLLM caches them. 0.11–0.13: chunked-local layers (Llama 4) are
    cached as full attention unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1
    (vllm/envs.py default "0" in those versions)."""
    layers = layers_on_rank(shape, pp, stage)
    r = VllmRules.for_version(v)
    if shape.architecture == "NemotronHForCausalLM" and r.nemotron_h_fp32_ssm:
        # models/config.py::NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype (0.20.0,
        # 0.25.0): mamba_ssm_cache_dtype "auto" takes the config's value, else float32
        layers = [
            (replace(layer, mamba=replace(layer.mamba, ssm_dtype_bytes=4)), n)
            if layer.mamba is not None and layer.mamba.ssm_dtype_bytes is None
            else (layer, n)
            for layer, n in layers
        ]
    k_spec = _spec_tokens(shape, settings)
    if k_spec:
        # mamba_utils.py::gated_delta_net_state_shape / mamba2_state_shape: the conv state holds
        # conv_kernel - 1 + num_speculative_tokens columns (GDN in every release read, Mamba2
        # models by VllmRules.spec_conv_mamba2_archs)
        layers = [
            (replace(layer, mamba=replace(layer.mamba, spec_columns=k_spec)), n)
            if layer.mamba is not None
            and (layer.mamba.gdn or shape.architecture in r.spec_conv_mamba2_archs)
            else (layer, n)
            for layer, n in layers
        ]
    if r.chunked_local_as_full and not settings.chunked_local_hybrid:
        layers = [
            (replace(layer, kind=AttnKind.FULL, window=0), n)
            if layer.kind is AttnKind.CHUNKED
            else (layer, n)
            for layer, n in layers
        ]
    return layers


# --- the prediction --------------------------------------------------------------------------


def _mm_limits(settings: EngineSettings) -> dict[str, int] | None:
    """``--limit-mm-per-prompt`` as a mapping (None: unset, every modality at vLLM's 999)."""
    return dict(settings.mm_limits) if settings.mm_limits is not None else None


def _mm_profile(
    shape: ModelShape, settings: EngineSettings, rs: ResolvedSettings, tp: int
) -> EncoderProfile | None:
    """The encoder step of the profile on the first stage (the tower lives there), or None:
    skipped (--skip-mm-profiling), every modality at 0, no sized tower, or an era before
    0.11 (resolve.py refuses a multimodal plan in the last two cases)."""
    if settings.skip_mm_profiling or rs.era not in MM_PROFILE_ERAS:
        return None
    limits = _mm_limits(settings)
    return encoder_profile(
        shape,
        limits,
        rs.max_model_len,
        rs.max_num_seqs,
        rs.max_num_batched_tokens,
        settings.enable_chunked_prefill is not False,  # V1 chunks prefills unless told not to
        tp,
        rs.dtype_bytes,
    )


def _calibrated_profile(shape: ModelShape, settings: EngineSettings, rs: ResolvedSettings) -> int:
    """A calibrated encoder profile's bytes (vllm_mm.CALIBRATED_PROFILES) where the profile
    runs it: not skipped, an era that profiles, some modality above 0."""
    cal = calibration(shape)
    if cal is None or settings.skip_mm_profiling or rs.era not in MM_PROFILE_ERAS:
        return 0
    if text_only(_mm_limits(settings), shape.mm_modalities):
        return 0
    return gib(cal.gib)


def _built_weights(shape: ModelShape, settings: EngineSettings, era: Era) -> ModelShape:
    """``shape`` less its vision tensors where vLLM builds no tower (every modality at 0,
    vllm_mm.tower_built). With safetensors headers the tower stays counted (the headers'
    loaded bytes hold it; over-predicted, the safe side)."""
    limits = _mm_limits(settings)
    if shape.header is not None or tower_built(shape, limits, era):
        return shape
    return replace(shape, tensors=tuple(t for t in shape.tensors if t.group is not Group.VISION))


def deepstack_buffer_bytes(
    shape: ModelShape, settings: EngineSettings, era: Era, max_num_batched_tokens: int, dtype: int
) -> int:
    """Qwen3-VL's deepstack buffers on a rank (:attr:`ModelShape.deepstack_levels`): one
    ``max_num_batched_tokens × hidden_size`` tensor in the model dtype per level, allocated by
    the model's ``__init__`` on every rank while the model loads, so vLLM counts them in its
    weights ("Model loading took"), where the tower is built (models/qwen3_vl.py and
    qwen3_vl_moe.py: 0.12.0 ``if self.use_deepstack and self.visual is not None``; 0.21.0 inside
    ``_mark_tower_model``, whose meta device leaves them unallocated when every modality is 0)."""
    if not shape.deepstack_levels:
        return 0
    limits = _mm_limits(settings)
    if not tower_built(shape, limits, era):
        return 0
    return shape.deepstack_levels * max_num_batched_tokens * shape.hidden_size * dtype


#: models/deepseek_v4/eager_scratch.py (0.27.1, 0.28.0): ``DeepseekV4EagerScratchPool._ALIGNMENT``
#: and fused_indexer_q.py ``MXFP4_BLOCK_SIZE``
DSV4_SCRATCH_ALIGNMENT = 256
DSV4_MXFP4_BLOCK = 32


def _dsv4_packed(specs: tuple[tuple[int, int], ...]) -> int:
    """``DeepseekV4EagerScratchPool._packed_size``: (elements, itemsize) views, each started on a
    256-B boundary, the total rounded up to one."""
    off = 0
    for elements, itemsize in specs:
        off = _round_up(off, DSV4_SCRATCH_ALIGNMENT) + elements * itemsize
    return _round_up(off, DSV4_SCRATCH_ALIGNMENT)


def dsv4_model_buffer_bytes(
    shape: ModelShape, rules: VllmRules, T: int, tp: int, last: bool, dtype_bytes: int
) -> int:
    """DeepSeek-V4's model-wide buffers on a rank, allocated by ``DeepseekV4Model.__init__``
    (models/deepseek_v4/nvidia/model.py) while the model loads, so in vLLM's "Model loading took"
    (0 for every other model), T = max-num-batched-tokens:

    * ``topk_indices_buffer``: T × ``index_topk`` int32 (every release read, 0.24.0–0.33.0);
    * ``_mtp_hidden_buffer`` on the last PP rank: T × ``hc_mult`` × hidden in the model dtype
      (0.24–0.26 always, :attr:`VllmRules.dsv4_mtp_hidden_buffer`; 0.27.1 only for an EAGLE or
      draft-model speculator, which the ledger refuses for DeepSeek-V4);
    * in 0.27–0.28 ``DeepseekV4EagerScratchPool`` (:attr:`VllmRules.dsv4_eager_scratch`): the
      padded q, T × P × head_dim bf16 with P = 64 local heads or fewer → 64, else 128 (FlashMLA's
      ``get_padded_num_q_heads``; more than 128 it raises, and ``check_deepseek_v4`` refuses),
      and one uint8 storage of the largest of three 256-B-aligned view sets: the MXFP4 indexer
      q (T × index_n_heads × index_head_dim / 2, its scales / 32 and T × index_n_heads fp32
      weights), the global top-k (T × index_topk and T int32), the compressor scratch
      (T × head_dim fp32)."""
    d = shape.dsv4
    if d is None:
        return 0
    out = T * d.index_topk * 4
    if rules.dsv4_mtp_hidden_buffer and last:
        out += T * d.hc_mult * shape.hidden_size * dtype_bytes
    if rules.dsv4_eager_scratch:
        local = shape.num_attention_heads // tp
        padded = 64 if local <= 64 else 128
        out += T * padded * shape.head_dim * 2
        ih = d.index_n_heads
        ihd = max((g.attention.index_head_dim for g in shape.layer_groups), default=0)
        fp4 = ((T * ih * ihd // 2, 1), (T * ih * (ihd // DSV4_MXFP4_BLOCK), 1), (T * ih, 4))
        top = ((T * d.index_topk, 4), (T, 4))
        comp = ((T * shape.head_dim, 4),)
        out += max(_dsv4_packed(fp4), _dsv4_packed(top), _dsv4_packed(comp))
    return out


def _fmt_gib(b: int) -> str:
    return f"{b / GiB:.2f}"


@dataclass(frozen=True, slots=True)
class _Setup:
    """What every rank of one prediction shares: the resolved settings and the per-model
    choices vLLM makes once (speculation, CUDA-graph sizes, the hybrid cache mode)."""

    rs: ResolvedSettings
    requested: int  # ⌈total × utilization⌉
    ep: int
    moe_tp: int
    hybrid_manager: bool
    k_spec: int
    draft_weights: int
    draft_layers: list[tuple[LayerAttention, int]]
    graphs: int
    capture: CaptureSizes | None
    mode: str  # the Mamba cache mode
    checkpoint: int
    align: int
    weighed: ModelShape  # the shape whose weights are loaded (no tower where none is built)
    #: the DP/EP NCCL communicators per rank (:func:`dp_ep_nccl_groups`)
    nccl_groups: int = 0
    #: (graphs of the requested ``cudagraph_mode``, of the default mode):
    #: :func:`cudagraph_mode_scale`
    graph_scale: tuple[int, int] = (1, 1)
    #: a PCIe-only GPU: the NCCL terms of :data:`PCIE_TP_INIT_SCALE`
    pcie: bool = False

    @property
    def R(self) -> int:
        return min(self.rs.max_num_seqs, self.rs.max_num_batched_tokens)

    @property
    def T(self) -> int:
        return self.rs.max_num_batched_tokens


def _check_parallel(shape: ModelShape, total_bytes: int, tp: int, pp: int) -> None:
    if tp < 1 or pp < 1:
        raise SettingsError(f"tensor/pipeline parallel sizes must be >= 1 (tp={tp}, pp={pp})")
    if shape.num_attention_heads % tp:
        raise SettingsError(
            f"tensor_parallel_size {tp} does not divide the model's {shape.num_attention_heads} "
            "attention heads (vLLM requires it)"
        )
    if pp > shape.num_layers:
        raise SettingsError(f"pipeline_parallel_size {pp} exceeds {shape.num_layers} layers")
    if total_bytes <= 0:
        raise SettingsError("GPU memory must be positive")


def _hybrid_manager(shape: ModelShape, settings: EngineSettings, rs: ResolvedSettings) -> bool:
    """Whether the hybrid KV-cache manager is on. config/vllm.py (0.20): --kv-transfer-config,
    and chunked-local attention with EAGLE, turn it off; from 0.22 a connector that
    SupportsHMA keeps it (:func:`connector_keeps_hma`)."""
    spec = settings.speculative
    chunked = shape.has_kind(AttnKind.CHUNKED)
    eagle = spec is not None and spec.method in ("eagle", "eagle3")
    hma_off = settings.kv_transfer and not connector_keeps_hma(rs.version, settings.kv_connector)
    v1_hybrid = rs.era not in (Era.V0, Era.V1_EARLY)
    if hma_off and shape.has_kind(AttnKind.MAMBA) and v1_hybrid:
        raise SettingsError(
            f"--kv-transfer-config connector {settings.kv_connector!r} does not support the "
            "hybrid KV-cache manager, which Mamba/GDN hybrids need: vLLM fails at startup "
            "(config/vllm.py 'hybrid SSM models ... require HMA')"
        )
    return v1_hybrid and not hma_off and not (chunked and eagle)


def _setup(
    shape: ModelShape,
    total_bytes: int,
    gpu_name: str,
    tp: int,
    pp: int,
    settings: EngineSettings,
) -> _Setup:
    rs = resolve_settings(shape, total_bytes, gpu_name, settings)
    check_deepseek_v4(rs.version, shape, gpu_name, rs.kv_cache_dtype, tp, pp, settings)
    if shape.moe_latent_size and not rs.rules.nemotron_latent_moe:
        raise SettingsError(
            f"moe_latent_size {shape.moe_latent_size} (Nemotron-H LatentMoE) needs vLLM 0.13 or "
            f"newer: vLLM {rs.version} builds the experts at the hidden size "
            "(models/nemotron_h.py has no latent projections before 0.13.0)"
        )
    rules = rs.rules
    ep = tp * settings.data_parallel if settings.expert_parallel else 1
    # without EP the experts are TP-sharded over tp × dp (FusedMoEParallelConfig.make)
    moe_tp = tp if settings.expert_parallel else tp * settings.data_parallel
    hybrid = _hybrid_manager(shape, settings, rs)
    spec = settings.speculative
    k_spec = _spec_tokens(shape, settings)
    draft_weights, draft_layers = _draft(shape, settings, tp, rs.dtype_bytes, ep)
    # the graphs vLLM captures (PIECEWISE for mixed batches, FULL for decode batches of at
    # most max-num-seqs requests), with or without speculative tokens; before 0.11 (not read)
    # the count scaling of the default list is kept
    capture = None
    top = max_capture_size(shape, settings, rs.version)
    if rs.cudagraphs and rs.era is not Era.V0 and rules.spec_capture_sizes:
        capture = spec_capture_sizes(
            rs.version,
            rs.max_num_seqs,
            rs.max_num_batched_tokens,
            k_spec,
            settings.cudagraph_capture_sizes,
            top,
            gpu_name,
            rs.v2_runner,
        )
    graph_scale = (1, 1)
    if rs.cudagraphs and rs.era is not Era.V0:
        graph_scale = cudagraph_mode_scale(
            rs.version,
            settings.cudagraph_mode,
            rs.max_num_seqs,
            rs.max_num_batched_tokens,
            k_spec,
            settings.cudagraph_capture_sizes,
            top,
            gpu_name,
            rs.v2_runner,
            shape.has_kind(AttnKind.CHUNKED),
        )
    mode = mamba_cache_mode(
        rs.version, shape, settings.enable_prefix_caching, speculative=spec is not None
    )
    return _Setup(
        rs,
        math.ceil(total_bytes * rs.gpu_memory_utilization),
        ep,
        moe_tp,
        hybrid,
        k_spec,
        draft_weights,
        draft_layers,
        capture_count(settings),
        capture,
        mode,
        prefill_checkpoint_blocks(rs.version, shape, gpu_name),
        _mamba_align(rs.version, shape, mode, rs.block_size, gpu_name),
        _built_weights(shape, settings, rs.era),
        dp_ep_nccl_groups(settings.data_parallel, shape.is_moe),
        graph_scale,
        pcie_only(gpu_name),
    )


def _workspaces_in_estimate(su: _Setup) -> bool:
    """Whether FlashInfer's workspaces are allocated inside vLLM's CUDA-graph estimate (the V1
    runner's first FULL warm-up, :func:`flashinfer_workspaces`): the estimate in the budget and
    FULL decode graphs of one token a request. Elsewhere they are allocated after the KV cache:
    at the real capture or first decode step (V1), or with the attention backends once the KV
    cache is sized (the V2 runner's ``init_attn_backend``, one shared buffer)."""
    rs = su.rs
    return (
        rs.cg_in_budget
        and not rs.v2_runner
        and su.capture is not None
        and su.capture.query_len == 1
        and bool(su.capture.decode)
    )


def _post_kv_workspace(su: _Setup, workspaces: int) -> int:
    """FlashInfer workspace bytes a rank allocates beyond vLLM's budget (after the KV cache):
    none where :func:`_workspaces_in_estimate`; one shared buffer with the V2 runner
    (v1/worker/gpu/attn_utils.py::init_attn_backend, 0.24.0: the first builder's, handed to the
    others); one per builder with the V1 runner."""
    if workspaces == 0 or _workspaces_in_estimate(su):
        return 0
    return (1 if su.rs.v2_runner else workspaces) * FLASHINFER_WORKSPACE_BYTES


def _cuda_graph(
    shape: ModelShape,
    su: _Setup,
    settings: EngineSettings,
    stage_range: range,
    last: bool,
    tp: int,
    gpu_name: str,
    workspaces: int,
) -> int:
    """The stage's CUDA-graph term. Where vLLM subtracts its own estimate from the KV budget
    (the V1 runner, :attr:`ResolvedSettings.cg_in_budget`), that estimate's structure
    (:func:`profiled_cuda_graph_estimate`), scaled by the requested ``cudagraph_mode``'s graphs
    over the default's (:func:`cudagraph_mode_scale`, assumed linear). Otherwise the pool: the
    CG constants were fitted at 51 capture sizes per routine of FULL_AND_PIECEWISE and are
    scaled by the graphs captured (assumed linear; :func:`spec_capture_sizes` from 0.11, the
    default list's count before), by the mode's graphs, and by the LoRA cases."""
    rs = su.rs
    stage_layers = len(stage_range)
    mode_graphs, default_graphs = su.graph_scale
    if rs.cg_in_budget and not rs.v2_runner and su.capture is not None:
        est = profiled_cuda_graph_estimate(
            shape,
            stage_range,
            tp,
            su.capture,
            rs.dtype,
            rs.dtype_bytes,
            gpu_name,
            lora_graph_cases(rs.version, settings.max_loras),
            rs.kv_cache_dtype,
            rs.rules,
            workspaces if _workspaces_in_estimate(su) else 0,
        )
        return est * mode_graphs // default_graphs if default_graphs else 0
    if su.capture is not None:
        cg = spec_cuda_graph_estimate(
            shape,
            stage_layers,
            su.capture,
            sum(n for _, n in su.draft_layers) if last else 0,
            rs.v2_runner and rs.rules.v2_profiles_drafter_graphs,
        )
    else:
        cg = cuda_graph_estimate(shape, stage_layers, rs.cudagraphs)
        cg = cg * su.graphs // DEFAULT_CAPTURE_SIZES
    cg = cg * mode_graphs // default_graphs if default_graphs else 0
    return cg * lora_graph_cases(rs.version, settings.max_loras)


def available_kv(
    era: Era,
    requested: int,
    weights: int,
    activation: int,
    nt: int,
    cg_in_budget: int,
    sampler_state: int = 0,
    runner_buffers: int = 0,
) -> int:
    """vLLM's KV budget by era (v1/worker/gpu_worker.py::Worker.determine_available_memory per
    release; the eras: versions.py). ``cg_in_budget``: the CUDA-graph estimate where the
    version subtracts it, else 0; ``sampler_state``: the V2 runner's persistent sampler
    tensors (:func:`v2_sampler_state_bytes`), and ``runner_buffers``, the runner's other
    persistent tensors (:func:`runner_buffer_bytes`), which only the consumed budget (0.27+)
    sees."""
    if era is Era.V1_EARLY:
        # absolute peak (incl. weights) and non-torch incl. the CUDA context
        return requested - (weights + activation) - (nt + gib(CUDA_CONTEXT_GIB))
    if era is Era.V1_CONSUMED:
        consumed = consumed_bytes(weights, nt, sampler_state, runner_buffers)
        return requested - consumed - activation - cg_in_budget
    return requested - (weights + activation + nt) - cg_in_budget


def summary_line_split(r: RankPrediction, cg_in_budget: bool) -> tuple[int, int]:
    """(consumed memory, peak activation) as vLLM 0.27+ prints them ("Actual usage is C GiB for
    consumed memory (weights + non-torch), P GiB for peak activation, ...":
    v1/worker/gpu_worker.py::Worker.determine_available_memory, 0.27.1 and 0.28.0). Their sum
    is the ledger's (:func:`available_kv`); the split differs in one place: the fused-MoE
    buffer (:func:`moe_workspace`) is allocated by the profile's forward and stays allocated
    after it (v1/worker/workspace.py::WorkspaceManager keeps ``_current_workspaces``), so
    vLLM's consumed memory holds it and its transient peak does not, while the ledger keeps it
    in the activation item for the earlier budgets, which see it as profile peak. P is the
    transient peak plus the CUDA-graph estimate the budget subtracts
    (``Worker.peak_activation_memory``)."""
    consumed = consumed_bytes(r.weights.total, r.non_torch, r.sampler_state, r.runner_buffers)
    graphs = r.cuda_graph if cg_in_budget else 0
    return consumed + r.moe_workspace, r.activation_peak - r.moe_workspace + graphs


def consumed_bytes(weights: int, nt: int, sampler_state: int, runner_buffers: int) -> int:
    """What vLLM 0.27+ prints as "consumed memory (weights + non-torch)": the profile's
    ``total_consumed`` (v1/worker/gpu_worker.py::Worker.determine_available_memory, 0.27.1 and
    0.28.0; utils/mem_utils.py::memory_profiling: free memory at the worker's init snapshot
    minus free memory after the profile), which holds whatever stays allocated after the
    profile: the weights, non-torch memory and the runners' persistent tensors
    (:func:`v2_sampler_state_bytes`, :func:`runner_buffer_bytes`), all from the code."""
    return weights + nt + sampler_state + runner_buffers


def triton_topk_scratch_bytes(gpu_name: str, rows: int, vocab_size: int) -> int:
    """The V1 sampler's Triton top-k/top-p scratch the profile leaves allocated
    (:attr:`VllmRules.v1_sampler_triton_scratch`; v1/sample/ops/topk_topp_triton.py, 0.27.1
    and 0.33.0: ``min(next_power_of_2(min(SMs, rows)), SMs)`` rows × vocab in the fp32 of the
    V1 sampler's logits), ``rows`` the profile's sampled requests; below 8 rows vLLM sorts in
    PyTorch instead and keeps nothing (v1/sample/ops/topk_topp_sampler.py::apply_top_k_top_p).
    A GPU without a catalogued SM count takes ``next_power_of_2(rows)`` rows, the most the rule
    allows."""
    if rows < 8:
        return 0
    gpu = find_gpu(gpu_name)
    sms = gpu.sm_count if gpu is not None else None
    if sms is None:
        return 4 * _next_power_of_2(rows) * vocab_size
    return 4 * min(_next_power_of_2(min(sms, rows)), sms) * vocab_size


#: the states of vLLM's torch.compile cache at startup (``EngineSettings.compile_cache``)
COMPILE_CACHE_STATES: Final = ("warm", "cold")
#: bytes per token of the V1/V2 runners' ``input_ids`` buffer (int32), an argument of the
#: embedding kernel's benchmark
INPUT_ID_BYTES: Final = 4


def cold_compile_bytes(
    embedding_bytes: int, tokens: int, hidden: int, tp: int, dtype_bytes: int
) -> int:
    """The largest allocation of a cold torch.compile inside vLLM's memory profile
    (:attr:`VllmRules.cold_compile_benchmark`): ``profile_run``'s first forward compiles, and
    with vLLM's ``benchmark_combo_kernel`` Inductor times the first stage's fused embedding
    kernel on ``rand_strided`` copies of all its arguments (torch 2.13.0
    ``_inductor/codegen/triton.py::benchmark_codegened_module`` and ``codegen_kernel_benchmark``;
    ``_dynamo/testing.py::rand_strided``): the rank's embedding table, its outputs at the
    profile's ``tokens`` (TP1: the embedding and the normed hidden states, fused; TP > 1: the
    masked gather before the all-reduce, vocab_parallel_embedding.py) and the int32 token
    ids. The copies are freed before the profiling forward, so the profile's peak is the
    larger of the two (vLLM's memory_profiling: the torch peak over the window).

    Inductor's benchmarker would also zero an L2-sized flush buffer beside them
    (``_inductor/runtime/benchmarking.py::InductorBenchmarker.benchmark_gpu``); the logs do not
    show it: on vllm-startup-029 (in sample, PP2 stage 0 on an H100) these terms give 1.103 GiB
    against the printed 1.10, with the H100's 50 MiB L2 1.152, so it is left out (chosen on
    that log)."""
    outputs = (2 if tp == 1 else 1) * tokens * hidden * dtype_bytes
    return embedding_bytes + outputs + INPUT_ID_BYTES * tokens


def _cold_compile(
    shape: ModelShape,
    settings: EngineSettings,
    su: _Setup,
    stage: int,
    tp: int,
    embedding_bytes: int,
) -> int:
    """:func:`cold_compile_bytes` where a cold boot holds it, else 0: a version whose
    compile benchmarks (:attr:`VllmRules.cold_compile_benchmark`), a V1 engine that compiles
    (no ``--enforce-eager``), and the first stage with the embedding in its compiled graph: a
    multimodal model's runner embeds outside it
    (v1/worker/gpu_model_runner.py::_dummy_run and v1/worker/gpu/model_runner.py: with
    ``supports_mm_inputs`` the model gets ``inputs_embeds``) unless every modality is at 0."""
    rs = su.rs
    if (
        not rs.rules.cold_compile_benchmark
        or rs.era is Era.V0
        or settings.enforce_eager
        or stage != 0
        or not embedding_bytes
        or (shape.mm_modalities and not text_only(_mm_limits(settings), shape.mm_modalities))
    ):
        return 0
    return cold_compile_bytes(embedding_bytes, su.T, shape.hidden_size, tp, rs.dtype_bytes)


def cold_compile_loss(prediction: StartupPrediction) -> int:
    """The KV bytes a rank's pool loses when the engine of ``prediction`` boots cold instead of
    warm: its largest :attr:`RankPrediction.cold_compile_excess` (0 where the warm profile
    peak is the larger everywhere), read off the one prediction, not made again."""
    return max((r.cold_compile_excess for r in prediction.ranks), default=0)


def _next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``n`` (triton's ``next_power_of_2``; 1 for n <= 1)."""
    return 1 << max(0, n - 1).bit_length()


def runner_buffer_bytes(
    shape: ModelShape,
    v2_runner: bool,
    max_num_seqs: int,
    max_num_tokens: int,
    max_model_len: int,
    block_size: int | None,
    spec_tokens: int,
    stage: int,
    last: bool,
    dtype_bytes: int,
) -> int:
    """A model runner's persistent GPU tensors besides the V2 sampler's state, from the code of
    0.27.1 (built after the worker's memory snapshot and alive after the profile: consumed
    memory from 0.27, held beyond the budget before). N = max-num-seqs, T = max-num-batched-
    tokens.

    * V1 runner (v1/worker/gpu_model_runner.py::GPUModelRunner.__init__): ``inputs_embeds``
      (T × the text hidden size, model dtype, allocated whether or not prompt embeddings are on;
      the same in 0.18.0–0.28.0); input ids, positions, request indices, token-id flags and
      ``query_pos`` (21·T + 8·max(N + 1, T) B) and the per-request int32/int64/bool buffers
      (41·N + 4); the InputBatch's sampling parameters (6 × N, gpu_input_batch.py) and min-p
      (4·N, sample/logits_processor/builtin.py) and its scalar (4); the placeholder block
      table the constructor builds before the KV cache is known (v1/worker/block_table.py::
      BlockTable: N × W int32, W = ⌈L / block⌉ rounded up to 128 / gcd(128, block) blocks,
      the block size ``--block-size`` or 16; one group) and its slot mapping (8·T). On the
      last stage the profile's sampler leaves FlashInfer's 1 MiB row-state buffer
      (flashinfer sampling.py ``_get_cache_buf``) and the Triton top-k/top-p tables (1,600 B);
      its Triton scratch is added by the caller (:func:`triton_topk_scratch_bytes`).
    * V2 runner (v1/worker/gpu/): ``InputBuffers`` (13·T + 12·N + 4) and ``RequestState``
      (20·N, plus 12·N per speculative token); its all-token-ids and per-request scalars are
      pinned host memory (UVA), its block tables come with the KV cache.
    * Either runner, a stage after the first: the intermediate tensors it receives (hidden
      states and residual: 2·T × hidden, model dtype)."""
    n, t = max_num_seqs, max_num_tokens
    if v2_runner:
        out = 13 * t + 12 * n + 4 + 20 * n + 12 * n * spec_tokens
    else:
        bs = block_size or 16
        align = 128 // math.gcd(128, bs)
        width = cdiv(cdiv(max_model_len, bs), align) * align
        out = t * shape.hidden_size * dtype_bytes
        out += 21 * t + 8 * max(n + 1, t) + 41 * n + 4 + 24 * n + 4 * n + 4
        out += 4 * n * width + 8 * t
        if last:
            out += (1 << 20) + 1_600
    if stage > 0:
        out += 2 * t * shape.hidden_size * dtype_bytes
    return out


#: the V2 sampler's fixed-width 4-byte states per request (0.27.1 v1/worker/gpu/sample/):
#: logit_bias.py allowed ids, bias ids and bias values (3 × MAX 1,024) and stop ids (128),
#: bad_words.py ids and offsets (1,024 + 129), logprob.py token ids (128)
V2_SAMPLER_FIXED_WIDTH = 3 * 1024 + 128 + 1024 + 129 + 128


def v2_sampler_state_bytes(vocab_size: int, max_num_seqs: int, query_len: int) -> int:
    """The V2 model runner's persistent sampler tensors on the last pipeline stage, from the code
    (v1/worker/gpu/, 0.22.0, 0.24.0, 0.26.0, 0.27.1, 0.28.0, 0.33.0): ``load_model`` builds the
    Sampler after the weights' load window and before the profile, so its GPU tensors are
    neither weights nor profile peak: ``Penalties.output_bin_counts`` (max-num-seqs × vocab
    int32, "can be very large, taking up GBs", the source's TODO) and ``prompt_bin_mask``
    (max-num-seqs × ⌈vocab / 32⌉ int32), and ``StructuredOutputsWorker.grammar_bitmask``
    (max-num-seqs × the decode query length × ⌈vocab / 32⌉ int32, and its logits indices), and
    the fixed-width per-request states (0.27.1 sample/logit_bias.py: allowed ids, logit-bias
    ids and values 3 × 1,024, stop ids 128; sample/bad_words.py: 1,024 + 129; sample/
    logprob.py: 128 token ids; 4 B each). The per-request scalars are pinned host memory.
    vLLM's budget counts them from 0.27 (consumed memory, by ``mem_get_info``:
    :func:`available_kv`); before, none of its terms does, so they are held beyond the budget
    (budget.py's margin)."""
    words = -(-vocab_size // 32)
    fixed = V2_SAMPLER_FIXED_WIDTH + query_len
    return 4 * max_num_seqs * (vocab_size + words + query_len * words + fixed)


def _stage_runner_buffers(
    shape: ModelShape,
    settings: EngineSettings,
    su: _Setup,
    stage: int,
    last: bool,
    gpu_name: str,
) -> int:
    """A rank's runner buffers (:func:`runner_buffer_bytes`) and, on the V1 runner's last stage
    from 0.22, the sampler's Triton scratch (:func:`triton_topk_scratch_bytes`); none in V0."""
    rs = su.rs
    if rs.era is Era.V0:
        return 0
    out = runner_buffer_bytes(
        shape,
        rs.v2_runner,
        rs.max_num_seqs,
        su.T,
        rs.max_model_len,
        settings.block_size,
        su.k_spec,
        stage,
        last,
        rs.dtype_bytes,
    )
    if last and not rs.v2_runner and rs.rules.v1_sampler_triton_scratch:
        out += triton_topk_scratch_bytes(gpu_name, su.R, shape.vocab_size)
    return out


def _predict_stage(
    shape: ModelShape,
    tp: int,
    pp: int,
    stage: int,
    settings: EngineSettings,
    su: _Setup,
    gpu_name: str,
) -> list[RankPrediction]:
    """The ``tp`` ranks of pipeline stage ``stage`` (they hold the same bytes)."""
    rs, era, R, T = su.rs, su.rs.era, su.R, su.T
    stage_range = pp_layer_ranges(shape.num_layers, pp)[stage]
    mxfp4 = _mxfp4_layout_of(shape, rs.version, gpu_name)
    w = weight_breakdown(
        su.weighed,
        tp,
        pp,
        stage,
        rs.dtype_bytes,
        shape.quantization,
        settings.max_loras,
        settings.max_lora_rank,
        ep=su.ep,
        moe_tp=su.moe_tp,
        mxfp4=mxfp4,
        vocab_lora=rs.rules.vocab_lora,
    )
    last = stage == pp - 1
    fwd = forward_peak(shape, T, tp, rs.dtype_bytes, stage_range)
    moe = (
        _moe_buffer(shape, su, settings, gpu_name, mxfp4.backend)
        if shape.dense_layers.count_in(stage_range) < len(stage_range)
        else 0
    )
    samp = (
        sampler_peak(shape, R, rs.v2_runner, T, tp, rs.dtype_bytes, rs.rules.v2_sampler_warmup_pass)
        if last
        else 0
    )
    if era is Era.V0 and last:
        samp = int(R * shape.vocab_size * V0_SAMPLER_BYTES_PER_LOGIT)
    if last and su.k_spec:
        samp += (su.k_spec + R) * shape.vocab_size * SPEC_LOGIT_BYTES
    if last and su.draft_weights:
        w = replace(w, by_group={**w.by_group, "drafter": su.draft_weights})
    buffers = deepstack_buffer_bytes(shape, settings, era, T, rs.dtype_bytes)
    if buffers:
        w = replace(w, by_group={**w.by_group, "deepstack": buffers})
    dsv4_buffers = dsv4_model_buffer_bytes(shape, rs.rules, T, tp, last, rs.dtype_bytes)
    if dsv4_buffers:
        w = replace(w, by_group={**w.by_group, "dsv4_buffers": dsv4_buffers})
    act = max(fwd, samp) + moe
    prof = _mm_profile(shape, settings, rs, tp) if stage == 0 else None
    mm = prof.extra_over(act) if prof is not None else 0
    if stage == 0:
        mm += _calibrated_profile(shape, settings, rs)
    act += mm
    copy = _cold_compile(shape, settings, su, stage, tp, w.by_group.get("embedding", 0))
    cold_excess = max(0, copy - act)
    cold = settings.compile_cache == "cold"
    compile_peak, compile_excess = (copy, cold_excess) if cold else (0, 0)
    act += compile_excess
    nt = non_torch(era, tp, pp, su.nccl_groups, su.pcie, _compute_capability(gpu_name))
    layout = _stages_layout(shape, tp, pp, (stage,), settings, su)
    groups = sum(1 for g in layout.groups if g.kind in _STANDARD_ATTENTION)
    workspaces = flashinfer_workspaces(
        shape, gpu_name, rs.dtype, rs.kv_cache_dtype, rs.rules, groups
    )
    cg = _cuda_graph(shape, su, settings, stage_range, last, tp, gpu_name, workspaces)
    state = (
        v2_sampler_state_bytes(shape.vocab_size, rs.max_num_seqs, 1 + su.k_spec)
        if rs.v2_runner and last
        else 0
    )
    buffers_v1 = _stage_runner_buffers(shape, settings, su, stage, last, gpu_name)
    avail = available_kv(
        era, su.requested, w.total, act, nt, cg if rs.cg_in_budget else 0, state, buffers_v1
    )
    rank_requested = su.requested
    if settings.kv_cache_memory_bytes is not None and v_supports_kv_bytes(rs.version):
        # v1/worker/gpu_worker.py::Worker.determine_available_memory (0.11–0.33) returns
        # kv_cache_memory_bytes as is and skips the measurement; the utilization only
        # feeds the free-memory check. What vLLM then holds is the non-KV terms + N.
        rank_requested = su.requested - avail + settings.kv_cache_memory_bytes
        avail = settings.kv_cache_memory_bytes
    blocks = layout.num_blocks(avail)
    return [
        RankPrediction(
            stage * tp + t,
            stage,
            w,
            act,
            fwd,
            samp,
            moe,
            nt,
            cg,
            rank_requested,
            avail,
            layout,
            blocks,
            mm,
            prof,
            state,
            _post_kv_workspace(su, workspaces),
            buffers_v1,
            bool(samp)
            and rs.v2_runner
            and rs.rules.v2_sampler_warmup_pass
            and not flashinfer_sampler(gpu_name),
            compile_peak,
            compile_excess,
            cold_excess,
        )
        for t in range(tp)
    ]


def _capacity(
    rs: ResolvedSettings, layout: KvLayout, num_blocks: int, need: int
) -> tuple[float, int]:
    """(max concurrency, KV tokens) as vLLM logs them (v1/core/kv_cache_utils.py::
    get_kv_cache_capacity by version, :attr:`VllmRules.tokens_from_concurrency`)."""
    L = rs.max_model_len
    if layout.bytes_per_block == 0:
        return 0.0, 0
    if rs.era is Era.V0:
        tokens = num_blocks * layout.block_size
        return tokens / L, tokens
    conc = num_blocks / need if need else 0.0
    if rs.rules.tokens_from_concurrency:
        return conc, int(conc * L)
    return conc, (num_blocks // max(1, layout.num_groups)) * layout.block_size


def _kv_error(
    rs: ResolvedSettings,
    br: RankPrediction,
    total_bytes: int,
    in_flight: int,
    mamba_blocks: Callable[[int], int],
    layout: KvLayout,
    available: int,
) -> str | None:
    """vLLM's startup error when the binding rank's KV budget holds no block, or when
    ``available`` bytes do not hold one request of ``max_model_len`` tokens of ``layout``
    (the binding rank's, or the whole model's: :func:`_start_check`) (the messages of
    v1/core/kv_cache_utils.py)."""
    L = rs.max_model_len
    if br.available_kv <= 0 or br.num_blocks <= 0:
        return (
            f"No available memory for the cache blocks: available KV cache memory is "
            f"{_fmt_gib(br.available_kv)} GiB on rank {br.rank} (requested "
            f"{_fmt_gib(br.requested)} GiB = {rs.gpu_memory_utilization} × "
            f"{_fmt_gib(total_bytes)} GiB; weights {_fmt_gib(br.weights.total)}, activation "
            f"{_fmt_gib(br.activation_peak)}, non-torch {_fmt_gib(br.non_torch)}"
            + (f", CUDA graphs {_fmt_gib(br.cuda_graph)}" if rs.cg_in_budget else "")
            + " GiB). Try increasing gpu_memory_utilization."
        )
    needed = layout.bytes_for_request(L, in_flight, mamba_blocks(L))
    if rs.era is Era.V0:
        fits = br.num_blocks * br.layout.block_size >= L
    else:
        fits = needed <= available
    if fits:
        return None
    est_len = _max_len_that_fits(layout, available, L, in_flight, mamba_blocks)
    return (
        f"To serve at least one request with the model's max seq len ({L}), "
        f"({_fmt_gib(needed)} GiB KV cache is needed, which is larger than the "
        f"available KV cache memory ({_fmt_gib(available)} GiB). Based on the "
        f"available memory, the estimated maximum model length is {est_len}. Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len`."
    )


def _start_check(
    shape: ModelShape,
    tp: int,
    pp: int,
    settings: EngineSettings,
    su: _Setup,
    ranks: list[RankPrediction],
    br: RankPrediction,
) -> tuple[KvLayout, int]:
    """The layout and KV memory vLLM's start check weighs one request of max_model_len
    against: the binding rank's, or at PP ≥ 2 on 0.14–0.16 (:attr:`VllmRules.
    pp_start_check_whole_model`) every layer of the model against the smallest rank's; less
    what the check holds back (:attr:`KvLayout.start_check_reserved`: DeepSeek-V4's null
    block from 0.29)."""
    if pp < 2 or not su.rs.rules.pp_start_check_whole_model:
        return br.layout, br.available_kv - br.layout.start_check_reserved
    whole = _stages_layout(shape, tp, pp, tuple(range(pp)), settings, su)
    return whole, min(r.available_kv for r in ranks) - whole.start_check_reserved


def _stages_layout(
    shape: ModelShape,
    tp: int,
    pp: int,
    stages: tuple[int, ...],
    settings: EngineSettings,
    su: _Setup,
) -> KvLayout:
    """The KV layout of the layers of ``stages`` as vLLM caches them (the drafter's with the
    last stage's)."""
    rs = su.rs
    layers = [x for s in stages for x in _cached_layers(shape, pp, s, rs.version, settings)]
    if pp - 1 in stages:
        layers += su.draft_layers
    return kv_layout(
        layers,
        tp,
        rs.kv_bytes,
        rs.dtype_bytes,
        rs.block_size,
        hybrid_manager=su.hybrid_manager,
        align=su.align,
        kv_format=kv_token_format(rs.kv_cache_dtype),
        dsv4_planning=rs.rules.dsv4_planning,
    )


def _free_memory_error(
    rs: ResolvedSettings,
    requested: int,
    total_bytes: int,
    tp: int,
    pp: int,
    nccl_groups: int,
    pcie: bool,
) -> str | None:
    """v1/worker/utils.py::request_memory (0.11–0.33; raises since 0.9): the free memory at
    startup must hold the requested share; GiB printed as round(x, 2)."""
    if rs.era in (Era.V0, Era.V1_EARLY):
        return None
    free = total_bytes - pre_snapshot_bytes(rs.era, tp, pp, nccl_groups, pcie)
    if requested <= free:
        return None
    return (
        f"Free memory on device cuda:0 ({round(free / GiB, 2)}/"
        f"{round(total_bytes / GiB, 2)} GiB) on startup is less than desired GPU memory "
        f"utilization ({rs.gpu_memory_utilization}, {round(requested / GiB, 2)} GiB). "
        "Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )


def predict_startup(
    shape: ModelShape, total_bytes: int, gpu_name: str, tp: int, pp: int, settings: EngineSettings
) -> StartupPrediction:
    """Predict vLLM's startup numbers on every rank and whether the engine starts."""
    _check_parallel(shape, total_bytes, tp, pp)
    su = _setup(shape, total_bytes, gpu_name, tp, pp, settings)
    rs = su.rs
    ranks = [
        r
        for stage in range(pp)
        for r in _predict_stage(shape, tp, pp, stage, settings, su, gpu_name)
    ]
    binding = min(range(len(ranks)), key=lambda i: (ranks[i].num_blocks, ranks[i].available_kv))
    br = ranks[binding]
    layout = br.layout
    L = rs.max_model_len
    in_flight = in_flight_tokens(rs.version, su.T, pp, rs.v2_runner, settings.async_scheduling)
    B = layout.block_size

    def mamba_blocks(length: int) -> int:
        return mamba_blocks_per_request(su.mode, rs.version, length, B, su.k_spec, su.checkpoint)

    need = layout.blocks_per_request(L, in_flight, mamba_blocks(L))
    conc, tokens = _capacity(rs, layout, br.num_blocks, need)
    check_layout, check_avail = _start_check(shape, tp, pp, settings, su, ranks, br)
    error = _kv_error(rs, br, total_bytes, in_flight, mamba_blocks, check_layout, check_avail)
    notes: list[str] = []
    nccl_groups = su.nccl_groups
    if nccl_groups and rs.era is not Era.V0:
        notes.append(
            f"data parallel {settings.data_parallel}: {nccl_groups} more NCCL group(s) per rank "
            f"(dp{', ep' if nccl_groups > 1 else ''}), assumed {NCCL_GROUP_INIT_GIB} GiB each "
            f"before the init snapshot and {NCCL_GROUP_PROFILE_GIB} GiB each in non-torch"
        )
    capture = su.capture
    if capture is not None:
        # the capture list is worked out with or without speculative tokens; only with them
        # (q > 1) is it named for them
        graphs = (
            f"{len(capture.mixed)} PIECEWISE + {len(capture.decode)} FULL CUDA graphs, largest "
            f"{capture.max_size}"
        )
        if capture.query_len > 1:
            notes.append(
                f"speculative decoding (q = {capture.query_len} tokens per decode request): "
                + graphs
            )
        else:
            notes.append(f"captures {graphs}")
    if settings.auto_max_model_len and error is not None and error.startswith("To serve"):
        # --max-model-len -1: vLLM fits the length to the KV memory (the estimate above)
        est_len = _max_len_that_fits(check_layout, check_avail, L, in_flight, mamba_blocks)
        if est_len > 0:
            fitted = replace(settings, max_model_len=est_len, auto_max_model_len=False)
            p = predict_startup(shape, total_bytes, gpu_name, tp, pp, fitted)
            return replace(p, notes=(f"--max-model-len -1: fitted to {est_len:,}",) + p.notes)
    msg = _free_memory_error(rs, su.requested, total_bytes, tp, pp, su.nccl_groups, su.pcie)
    if msg is not None:
        if error is None:
            error = msg
        else:
            notes.append(msg)
    return StartupPrediction(
        rs,
        tuple(ranks),
        tp,
        pp,
        total_bytes,
        br.num_blocks,
        tokens,
        conc,
        error is None,
        error,
        binding,
        tuple(notes),
        nccl_groups,
        async_scheduling_on(rs.version, pp, settings),
        su.pcie,
    )


def v_supports_kv_bytes(v: Version) -> bool:
    return VllmRules.for_version(v).kv_cache_memory_bytes


def _max_len_that_fits(
    layout: KvLayout,
    available: int,
    L: int,
    in_flight: int,
    mamba_blocks: Callable[[int], int] = lambda _: 1,
) -> int:
    lo, hi = 0, L
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if layout.bytes_for_request(mid, in_flight, mamba_blocks(mid)) <= available:
            lo = mid
        else:
            hi = mid - 1
    return lo
