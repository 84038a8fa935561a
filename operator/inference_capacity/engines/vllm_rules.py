"""vLLM's version-dependent startup rules, one record per release: :meth:`VllmRules.for_version`.

Every rule that changes between vLLM releases is a field here, with the vLLM file/function it
was read from and the releases it holds for; :mod:`.vllm` reads the record and compares no
version itself (``tests/test_vllm_rules.py::test_no_version_comparison_outside_the_rulebook``
fails on one). The version-free parts of the rules (the architecture sets, the block sizes,
the formulas) stay next to the code that applies them in :mod:`.vllm`.

"Not read" means the release's source was not read for that rule: it is treated as its older
neighbour unless the field says otherwise. Ranges are inclusive of the first release and
exclusive of the last, as the comparisons below spell them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ..ledger.kv_dsv4 import Planning
from .versions import Era, Version, era_of, parse_version

__all__ = ["VllmRules"]

#: ``config/vllm.py::DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` by version (0.22.0, 0.23.0, 0.24.0
#: sources): 0.22 Qwen3 only; 0.23 adds Llama and Mistral (both dense and unquantized only,
#: ``_is_default_v2_model_runner_model``); 0.24 adds DeepseekV2, Qwen2Moe and GraniteMoe and
#: drops the dense/unquantized condition.
V2_RUNNER_MOE_DEFAULTS_0_25 = frozenset(
    {"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"}
)
V2_RUNNER_DEFAULTS_0_22 = frozenset({"Qwen3ForCausalLM"})
V2_RUNNER_DEFAULTS_0_23 = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"})
V2_RUNNER_DEFAULTS_0_24 = V2_RUNNER_DEFAULTS_0_23 | V2_RUNNER_MOE_DEFAULTS_0_25
#: 0.28.0 adds DeepseekV4ForCausalLM on CUDA (``_get_default_v2_model_runner_architectures``
#: removes it on ROCm, where the ledger refuses DeepSeek-V4). 0.26.0 and 0.27.1 add Inkling,
#: KimiK3 and LongcatFlashNgram, architectures the ledger does not plan.
V2_RUNNER_DEFAULTS_0_28 = V2_RUNNER_MOE_DEFAULTS_0_25 | frozenset({"DeepseekV4ForCausalLM"})

#: Speculative methods the V2 runner takes (config/vllm.py::
#: _get_v2_model_runner_unsupported_features): 0.24.0 eagle, eagle3, mtp, dflash (0.25.0 and
#: 0.28.0 add dspark; ngram falls back to V1); from 0.32.0 only suffix, medusa, mlp_speculator
#: and custom_class fall back (0.29–0.31 not read: treated as 0.28, the V1 side).
#: the KV dtypes the FLASH_ATTN backend takes on Hopper (FA3), so the ones whose full CUDA
#: graphs hold its split-KV buffer (``FlashAttentionBackend.supports_kv_cache_dtype``): 0.12–0.19
#: every ``fp8*`` (``flash_attn_supports_fp8``); 0.20–0.21 every quantized one
#: (``is_quantized_kv_cache``: fp8*, *_per_token_head, nvfp4); 0.22–0.27 ``fp8`` and
#: ``fp8_e4m3`` only; 0.28 the same (``supported_kv_cache_dtypes``, and
#: ``flash_attn_supports_kv_cache_dtype`` refuses fp8_e5m2). Other dtypes go to FlashInfer or
#: Triton, which hold no split buffer.
FLASH_ATTN_KV_16BIT = frozenset({"auto", "float16", "bfloat16"})
FLASH_ATTN_KV_0_12 = FLASH_ATTN_KV_16BIT | {"fp8", "fp8_e4m3", "fp8_e5m2"}
FLASH_ATTN_KV_0_20 = FLASH_ATTN_KV_0_12 | {"fp8_per_token_head", "int8_per_token_head", "nvfp4"}
FLASH_ATTN_KV_0_22 = FLASH_ATTN_KV_16BIT | {"fp8", "fp8_e4m3"}
#: KV dtypes FlashInfer's backend takes (``FlashInferBackend.supported_kv_cache_dtypes``:
#: 0.19.0 and 0.20.0; 0.24.0 adds nvfp4, 0.28.0 nvfp4_4over6, both on SM100 only, where
#: FlashInfer comes first anyway); the per-token-head formats go to TRITON_ATTN
FLASHINFER_KV_DTYPES = FLASH_ATTN_KV_16BIT | {"fp8", "fp8_e4m3", "fp8_e5m2"}
V2_SPEC_METHODS_0_24 = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})
V2_SPEC_UNSUPPORTED_0_32 = frozenset({"suffix", "medusa", "mlp_speculator", "custom_class"})

#: The MLA block sizes by GPU family where the platform picks them
#: (``platforms/cuda.py::CudaPlatform.check_and_update_config``, 0.11–0.17: FlashMLA on Hopper
#: 64, CUTLASS MLA on Blackwell 128) and where the attention backend does
#: (``update_block_size_for_backend``, 0.18+: FlashInfer-MLA on Blackwell 32, ROCm AITER MLA 64;
#: FlashAttention-MLA on Hopper keeps 16, the 0.19.0 DeepSeek-V2-Lite H100 log shows 16).
MLA_BLOCKS_PLATFORM = (("hopper", 64), ("blackwell", 128))
MLA_BLOCKS_BACKEND = (("rocm", 64), ("blackwell", 32))


#: Mamba2 architectures that widen the conv state by the speculative tokens from 0.17, and those
#: added in 0.32 (VllmRules.spec_conv_mamba2_archs)
SPEC_CONV_MAMBA2_0_17 = frozenset({"NemotronHForCausalLM", "Mamba2ForCausalLM"})
SPEC_CONV_MAMBA2_0_32 = frozenset(
    {"FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM", "Zamba2ForCausalLM"}
)


#: vLLM's ``CUDAGraphMode`` names (config/compilation.py, 0.20.0 and 0.28.0)
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
#: the default mode from 0.11 (``-O2``/``-O3``, config/vllm.py OPTIMIZATION_LEVEL_02/03, 0.20.0):
#: the mode the CG constants were fitted on
DEFAULT_CUDAGRAPH_MODE = "FULL_AND_PIECEWISE"


@dataclass(frozen=True, slots=True)
class VllmRules:
    """The startup rules of one vLLM release (each field: where vLLM has it, which releases)."""

    version: Version
    #: the memory-budget era with the version's default engine (versions.py::era_of; an
    #: explicit ``VLLM_USE_V1`` engine choice: :meth:`era_for`)
    era: Era

    # --- the budget ---------------------------------------------------------------------------
    #: ``--gpu-memory-utilization``'s default (config/cache.py::CacheConfig): 0.90 through
    #: 0.19, 0.92 from 0.20
    default_gpu_memory_utilization: float
    #: ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``'s default (vllm/envs.py): on from 0.20
    estimate_cuda_graphs_default: bool
    #: the profiler can subtract a CUDA-graph estimate at all
    #: (v1/worker/gpu_worker.py::Worker.determine_available_memory): from 0.18
    cuda_graph_estimate_exists: bool
    #: the V2 runner's ``profile_cudagraph_memory()`` returns 0 in 0.21–0.28
    #: (v1/worker/gpu/model_runner.py; implemented by 0.30, PR #49233)
    v2_cuda_graph_estimate: bool
    #: ROCm is in the estimate: ``is_cuda()`` through 0.25, ``is_cuda_alike()`` from 0.26
    #: (v1/worker/gpu_worker.py::Worker.determine_available_memory)
    rocm_cuda_graph_estimate: bool
    #: ``--kv-cache-memory-bytes`` is taken as is and skips the measurement
    #: (v1/worker/gpu_worker.py::Worker.determine_available_memory, 0.11–0.33)
    kv_cache_memory_bytes: bool

    # --- batch defaults -----------------------------------------------------------------------
    #: the ≥ 160 GiB batch tier (T = 16384, R = 1024 for the API server)
    #: (engine/arg_utils.py::EngineArgs.get_batch_defaults): first in 0.28, absent in 0.27.1
    big_gpu_tier: bool
    #: the ≥ 70 GiB tier counts the A100 too (engine/arg_utils.py::EngineArgs.
    #: get_batch_defaults): before 0.9
    a100_in_big_tier: bool

    # --- the model runner ---------------------------------------------------------------------
    #: every model runs the V2 model runner by default
    #: (config/vllm.py::_is_default_v2_model_runner_model): from 0.29
    v2_runner_all: bool
    #: every dense, non-hybrid model runs it (config/vllm.py::
    #: _is_default_v2_model_runner_model in the 0.25.0 wheel): 0.25–0.28
    v2_runner_dense: bool
    #: the architectures it takes by default besides those (config/vllm.py::
    #: DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, 0.22, 0.23, 0.24, 0.25 sources; empty before 0.22)
    v2_runner_archs: frozenset[str]
    #: those architectures only when dense and unquantized (config/vllm.py::
    #: _is_default_v2_model_runner_model): 0.22–0.23
    v2_runner_archs_dense_unquantized: bool
    #: the fused-MoE code the ledger read (engines/vllm.py::moe_workspace, moe_buffer_kind):
    #: the backend oracles (fused_moe/oracle/fp8.py, nvfp4.py: FlashInfer TRTLLM first on
    #: datacenter Blackwell, FlashInfer CUTLASS for block FP8 with EP on Hopper), and with data
    #: parallelism the DP group's gathered batch in the experts (the default
    #: ``allgather_reducescatter``: prepare_finalize/naive_dp_ep.py, ``get_ep_group().dispatch``;
    #: modular_kernel.py sizes for ``M_full``, no chunking): the 0.18.0–0.28.0 sources. Earlier
    #: releases get the Triton shapes on the rank's own batch (their MoE chunking and backends
    #: were not read)
    moe_kernel_read: bool
    #: ``VLLM_USE_V2_MODEL_RUNNER`` is an explicit choice both ways, 0 forcing the V1 runner and
    #: 1 the V2 one (envs.py: ``maybe_convert_bool``, None unset; config/vllm.py::
    #: VllmConfig.use_v2_model_runner returns it before any default rule): from 0.22. Before,
    #: ``bool(int(...))`` with "0" the default, an opt-in to a V2 runner the ledger does not
    #: model (0.18.0–0.20.0 sources)
    v2_runner_env_choice: bool
    #: speculative methods the V2 runner takes (config/vllm.py::
    #: _get_v2_model_runner_unsupported_features, 0.24–0.31; None from 0.32, where
    #: :attr:`v2_spec_unsupported` lists the refused ones instead)
    v2_spec_methods: frozenset[str] | None
    #: speculative methods that fall back to the V1 runner from 0.32 (the same
    #: config/vllm.py::_get_v2_model_runner_unsupported_features)
    v2_spec_unsupported: frozenset[str]
    #: the V2 runner's ``CudaGraphManager`` (v1/worker/gpu/cudagraph_utils.py, 0.25+): its own
    #: FULL decode sizes, no spec-decode rounding by ``CompilationConfig``
    v2_cudagraph_manager: bool
    #: the V2 runner's ``profile_cudagraph_memory`` (v1/worker/gpu/model_runner.py) measures
    #: the speculator's graphs too: 0.30–0.33
    v2_profiles_drafter_graphs: bool
    #: the V2 runner's profile samples twice, the second pass with every sampling feature on
    #: (``_dummy_sampler_run``: ``SamplingParams.for_sampler_warmup``, the fp32 logits
    #: pipeline): 0.33; 0.22–0.32 run only the default pass, whose dummy requests need no logits
    #: processing, so the logits stay in the model dtype (v1/worker/gpu/model_runner.py and
    #: sample/sampler.py ``apply_sampling_params``, read in 0.22.0, 0.26.0, 0.28.0, 0.29.0,
    #: 0.31.0, 0.32.0 and 0.33.0)
    v2_sampler_warmup_pass: bool
    #: the V1 runner's profile samples a second time with a seeded generator ("Also warm
    #: forward_native", v1/worker/gpu_model_runner.py ``_dummy_sampler_run``), whose top-k/
    #: top-p runs vLLM's Triton kernel and keeps its per-program scratch for the process's life
    #: (v1/sample/ops/topk_topp_triton.py ``_TRITON_BUFFER_CACHE``): read in 0.22.0, 0.24.0,
    #: 0.26.0, 0.27.1, 0.28.0 and 0.33.0; not in 0.20.0 (0.21 not read: taken as 0.20)
    v1_sampler_triton_scratch: bool
    #: a cold torch.compile benchmarks its fused Triton kernels with random copies of every
    #: argument, the input-embedding table included, inside ``profile_run``'s memory profile:
    #: vLLM sets Inductor's ``combo_kernels`` and ``benchmark_combo_kernel`` when the user sets
    #: neither (config/compilation.py::CompilationConfig.__post_init__, from 0.11.1, torch
    #: >= 2.9; read in 0.11.1, 0.12.0, 0.14.0, 0.16.0, 0.18.0–0.20.0, 0.22.0, 0.24.0–0.28.0 and
    #: 0.33.0; absent in 0.11.0), and Inductor's ``benchmark_codegened_module`` allocates each
    #: argument with ``rand_strided`` (torch 2.13.0 ``_inductor/codegen/triton.py``)
    cold_compile_benchmark: bool

    # --- CUDA graphs --------------------------------------------------------------------------
    #: the capture-size rules with speculative decoding were read (config/vllm.py::
    #: VllmConfig._set_cudagraph_sizes, 0.11+; before that the count scaling of the default
    #: list is kept)
    spec_capture_sizes: bool
    #: the largest capture size is ``min(2 × R × q, 512)``, not ``min(2 × R, 512)``
    #: (config/vllm.py::VllmConfig._set_cudagraph_sizes): from 0.13
    capture_max_times_query_len: bool
    #: 1024 instead of 512 on data-centre Blackwell (config/vllm.py::
    #: VllmConfig._set_cudagraph_sizes): from 0.29
    blackwell_capture_ceiling: bool
    #: gpt-oss (``GptOssForCausalLM``) sets max_cudagraph_capture_size to 1024 when neither the
    #: capture sizes nor their maximum is given (model_executor/models/config.py::
    #: GptOssForCausalLMConfig.verify_and_update_config, read in the 0.12.0–0.28.0 sources;
    #: the 0.19.0 gpt-oss-20b H100 logs: "PIECEWISE=83 ... FULL=83"): from 0.12
    gpt_oss_capture_1024: bool
    #: the default grid [1, 2, 4] + 8..248 step 8 + 256.. step 16 (0.12+); 0.11: [1, 2, 4] +
    #: multiples of 8; from 0.12 the largest size is the last one and sizes are rounded to a
    #: multiple of q (config/compilation.py::CompilationConfig.
    #: adjust_cudagraph_sizes_for_spec_decode)
    capture_grid_0_12: bool
    #: T is added to the sizes when it is at most the largest size
    #: (config/vllm.py::VllmConfig._set_cudagraph_sizes): from 0.22
    capture_adds_batched_tokens: bool
    #: the uniform decode sizes ``n × q`` are added (``request_counts`` in
    #: config/vllm.py::VllmConfig._set_cudagraph_sizes): from 0.29
    capture_adds_decode_sizes: bool
    #: each CUDA-graph size is captured twice with ``--enable-lora``
    #: (v1/cudagraph_dispatcher.py::CudagraphDispatcher._get_lora_cases, 0.20.0/0.25.0);
    #: before 0.20 not read: once
    lora_graph_cases: int
    #: the graphs each ``cudagraph_mode`` captures were derived from the 0.20.0 and 0.28.0
    #: sources (config/compilation.py::CUDAGraphMode and resolve_cudagraph_mode_and_sizes,
    #: v1/cudagraph_dispatcher.py::initialize_cudagraph_keys, v1/worker/gpu/cudagraph_utils.py::
    #: CudaGraphManager._init_candidates); 0.21–0.27 assumed to follow; PIECEWISE, FULL and
    #: FULL_DECODE_ONLY are refused outside 0.20–0.28 (:func:`~.vllm.cudagraph_mode_graphs`)
    cudagraph_modes_read: bool

    # --- the KV cache -------------------------------------------------------------------------
    #: MLA block sizes by GPU family (:data:`MLA_BLOCKS_PLATFORM` 0.11–0.17,
    #: :data:`MLA_BLOCKS_BACKEND` 0.18+; none before 0.11)
    mla_block_by_family: tuple[tuple[str, int], ...]
    #: MLA with an fp8 KV cache on Hopper takes FlashMLA, 64 (platforms/cuda.py,
    #: ``update_block_size_for_backend``, 0.18+; 0.11–0.17 always 64 there)
    mla_fp8_hopper_flashmla: bool
    #: KV dtypes FLASH_ATTN takes on Hopper (:data:`FLASH_ATTN_KV_0_12` and after)
    flash_attn_kv_dtypes: frozenset[str]
    #: ``--kv-cache-dtype auto`` takes a ModelOpt checkpoint's fp8 KV
    #: (utils/torch_utils.py::resolve_kv_cache_dtype_string): from 0.15; 0.11–0.13 resolve none
    modelopt_kv_dtype: bool
    #: ... and its nvfp4 KV (MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP, config/cache.py CacheDType;
    #: read in 0.20.0 and 0.25.0; earlier versions were not read for it, so they are refused)
    nvfp4_kv_dtype: bool
    #: config/vllm.py keeps the hybrid KV manager for a ``SupportsHMA`` connector from 0.22.0
    #: (``supports_hma``); 0.20.0 turns it off for any connector; 0.21 was not read, treated as
    #: 0.20 (the safe side)
    hma_with_connector: bool
    #: reported KV tokens are ``int(concurrency × max_model_len)``
    #: (v1/core/kv_cache_utils.py ``_report_kv_cache_config``, later
    #: ``get_kv_cache_capacity``): from 0.20.1 (read in the 0.20.1, 0.20.2, 0.21.0 and 0.22.0
    #: sdists); 0.9–0.20.0 ``num_blocks // groups × min block size`` (read in 0.19.0 and
    #: 0.20.0). A pre-release of 0.20.1 keeps the old line: vllm-startup-059 (0.20.1rc1.dev16)
    #: prints 67,728 tokens beside 1.06x at 180,000 (190,800 by the new formula)
    tokens_from_concurrency: bool
    #: at PP ≥ 2 the start check (and the ``--max-model-len -1`` fit) weighs one request of
    #: max_model_len over the whole model's layers against the smallest worker's KV memory:
    #: v1/core/kv_cache_utils.py::get_kv_cache_configs calls ``_check_enough_kv_cache_memory``
    #: with ``min(available_memory)`` and ``_max_memory_usage_bytes_from_groups`` of the global
    #: groups (0.14.0, 0.16.0; 0.15 is not on PyPI, between them). 0.13.0 checks each worker's
    #: own layers; 0.17.0 on projects the groups to each worker
    #: (``_project_kv_cache_groups_to_worker``)
    pp_start_check_whole_model: bool
    #: all-reduces per layer of a q/k norm over every head at TP > 1 (MiniMax-M2's
    #: ``MiniMaxText01RMSNormTP``, ``ModelShape.qk_norm_tp``): its q and k norms each all-reduce
    #: their variance in 0.12.0–0.13.0 (models/minimax_m2.py calls ``self.q_norm(q)`` and
    #: ``self.k_norm(k)``); from 0.14.0 ``forward_qk`` all-reduces the two concatenated (0.26.0:
    #: ``forward_qkv``'s fused all-reduce + RMSNorm kernel, still one collective)
    qk_norm_allreduces: int
    #: ``VllmConfig.max_in_flight_tokens = max_concurrent_batches × T`` (config/vllm.py) for
    #: sliding/chunked layers, and async scheduling on by default: from 0.26; before, T
    in_flight_batches: bool
    #: async scheduling is on by default (config/scheduler.py: ``SchedulerConfig.async_scheduling``
    #: defaults to None from 0.14.0, False in 0.11.0–0.13.0; config/vllm.py
    #: ``VllmConfig.__post_init__`` turns None on unless PP > 1, a speculative method other than
    #: EAGLE/MTP, or an executor without support; read in 0.12.0, 0.13.0, 0.14.0, 0.15.1, 0.18.0)
    async_scheduling_default: bool
    #: chunked-local layers (Llama 4) are cached as full attention unless
    #: ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1`` (vllm/envs.py default "0"):
    #: 0.11–0.13
    chunked_local_as_full: bool
    #: NemotronH's ``mamba_ssm_cache_dtype`` "auto" takes the config's value, else float32
    #: (models/config.py::NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype, 0.20.0, 0.25.0)
    nemotron_h_fp32_ssm: bool

    # --- hybrid (Mamba/GDN) caches ------------------------------------------------------------
    #: prefix caching's default for hybrids (config/model.py::ModelConfig.
    #: is_prefix_caching_supported: False for ``attn_type == "hybrid"`` in the 0.20.0 and
    #: 0.25.0 sources, taken to hold from 0.13; True from 0.26)
    hybrid_prefix_caching_default: bool
    #: Mamba state is cached with prefix caching at all (models/config.py::MambaModelConfig.
    #: verify_and_update_config, read in 0.20.0, 0.25.0, 0.26.0, 0.28.0): from 0.15
    mamba_prefix_caching: bool
    #: ``SupportsMambaPrefixCaching`` models cache in "all" mode (models/config.py::
    #: MambaModelConfig.verify_and_update_config): 0.15–0.27 (0.28 sets "align" whenever the
    #: mode is "none")
    mamba_all_mode: bool
    #: ... except with speculative decoding, "align" (the same models/config.py function):
    #: 0.20–0.21
    mamba_align_with_spec: bool
    #: MambaMixer2 models add a prefill checkpoint block (model_executor/layers/mamba/
    #: mamba_mixer2.py::MambaMixer2.get_kv_cache_spec, ``num_prefill_checkpoint_blocks=1``):
    #: from 0.32
    mamba2_checkpoint_block: bool
    #: other hybrids (Gated DeltaNet with FlashInfer GDN prefill, ``qwen_gdn_linear_attn.py``;
    #: Jamba's Mamba1) add one: from 0.33
    hybrid_checkpoint_block: bool
    #: Hopper + FlashInfer GDN prefill aligns GDN hybrids' block size to 64 tokens
    #: (platforms/interface.py::_align_hybrid_block_size): from 0.33
    gdn_hopper_align: bool
    #: Mamba2 architectures whose conv state holds ``conv_kernel − 1 + num_speculative_tokens``
    #: columns (model_executor/layers/mamba/mamba_utils.py::mamba2_state_shape ``num_spec``, as
    #: the model's ``get_mamba_state_shape_from_config`` passes it): NemotronH and Mamba2 from
    #: 0.17 (0.14 and 0.16 pass none); FalconH1, GraniteMoeHybrid and Zamba2 from 0.32 (0.30
    #: passes none; 0.31 not read). Gated DeltaNet (Qwen3-Next, Qwen3.5:
    #: ``gated_delta_net_state_shape(..., num_spec)``) does so in every release read
    #: (0.11–0.33), so it is not listed.
    spec_conv_mamba2_archs: frozenset[str]

    # --- other --------------------------------------------------------------------------------
    #: gpt-oss's MXFP4 MoE backend is picked by ``select_mxfp4_moe_backend`` over
    #: ``_get_priority_backends_for_gpt_oss`` (fused_moe/oracle/mxfp4.py, read in 0.20.0
    #: (``select_gpt_oss_mxfp4_moe_backend``), 0.24.0, 0.25.0, 0.26.0, 0.27.0, 0.28.0; 0.21–0.23
    #: not read, between two that agree): from 0.20 through 0.28. Outside it (not read) the
    #: ledger keeps its earlier Marlin rounding (the 0.19.0 A100 log matches it)
    mxfp4_backends_read: bool
    #: fused_moe/oracle/mxfp4.py::mxfp4_round_up_hidden_size_and_intermediate_size, TRTLLM
    #: branch: rounds the per-partition intermediate size to 256 (0.20.0, 0.24.0–0.26.0) or
    #: 128 (0.27.0, 0.28.0)
    mxfp4_trtllm_inter_align: int
    #: ``_swizzle_mxfp4`` (quantization/utils/mxfp4_utils.py) pads the scale groups to 0 mod 4
    #: on SM90 ("Patches #47303"): 0.26.0–0.28.0 (absent in 0.20.0, 0.24.0, 0.25.0)
    mxfp4_triton_scale_group_align: int
    #: fused_moe/oracle/mxfp4.py::convert_gpt_oss_weight_to_mxfp4_moe_kernel_format, Triton
    #: branch: leaves the checkpoint-layout scales registered beside the swizzled copy: 0.20.0
    #: and 0.24.0 (``del layer.w13_weight`` / ``w2_weight`` only); 0.25.0 on delete them too
    mxfp4_triton_keeps_scales: bool
    #: ``--speculative-config`` method ``draft_model`` runs on the V1 engine
    #: (engine/arg_utils.py::EngineArgs._is_v1_supported_oracle raises in 0.11.0–0.14.0; 0.15
    #: not read; 0.16.0 has no such refusal)
    draft_model_speculation: bool
    #: ``--limit-mm-per-prompt`` takes the options form ({"image": {"count": 1, "width": 512}},
    #: vLLM PR #25631, merged after the 0.11.0 branch): from 0.11.1; an older vLLM takes counts
    mm_limit_options: bool
    #: Qwen2VLProcessingInfo.get_image_size_with_most_features (models/qwen2_vl.py) factorises
    #: the patch count (closest_factor_pair, aspect ratio <= 200): from 0.13; 0.11–0.12 resize
    #: a 9999999² square
    mm_factorised_dummy: bool
    #: the embedding/lm_head LoRA slots (ledger/weights.py::vocab_lora_bytes) as read in the
    #: 0.20.0–0.33.0 sources; earlier releases (``lora_extra_vocab_size`` era) were not read
    vocab_lora: bool
    #: Nemotron-H LatentMoE (``moe_latent_size``: ``NemotronHMoE.use_latent_moe``,
    #: models/nemotron_h.py) from 0.13.0; 0.12.0 builds the experts at the hidden size, which
    #: the checkpoint's latent-width experts do not load into
    nemotron_latent_moe: bool
    #: vllm/model_executor/models/deepseek_v4.py ships from 0.20.0 (0.19.x has no DeepSeek-V4)
    deepseek_v4_exists: bool
    #: DeepSeek-V4's KV planning was read (ledger/kv_dsv4.py) for 0.24.0, 0.25.0, 0.26.0,
    #: 0.27.1, 0.28.0, 0.29.0, 0.30.0, 0.31.0, 0.32.0 and 0.33.0 (fp8_ds_mla identical; 0.26's
    #: sliding windows hold ``max_in_flight_tokens``); 0.20–0.23 (other code) were not read
    deepseek_v4_read: bool
    #: DeepSeek-V4's KV planner (ledger/kv_dsv4.py::dsv4_layout ``planning``): ``padded``
    #: 0.24–0.26; ``group_stride`` 0.27–0.28 (unpadded sliding pages, the largest group's page
    #: sum a block, a request's blocks summed: ``_get_packed_kv_cache_layout``,
    #: ``get_max_concurrency_for_kv_cache_config`` in the 0.27.1 and 0.28.0 sources);
    #: ``packed_groups`` 0.29–0.33 (``_get_packed_kv_cache_groups`` and the start check less the
    #: null block, 0.29.0–0.33.0 sources)
    dsv4_planning: Planning
    #: ``--kv-cache-dtype auto`` is fp8 for DeepSeek-V4 (models/deepseek_v4/attention.py::
    #: _resolve_dsv4_kv_cache_dtype ``if kv_cache_dtype == "auto": kv_cache_dtype = "fp8"``,
    #: 0.30.0–0.33.0; 0.24–0.29 assert an fp8 dtype)
    dsv4_auto_fp8: bool
    #: DeepSeek-V4's model-wide buffers, allocated when the model is built (so inside "Model
    #: loading took"; models/deepseek_v4/nvidia/model.py ``DeepseekV4Model.__init__``): the
    #: ``_mtp_hidden_buffer`` on the last PP rank in 0.24–0.26 (0.27.1 allocates it only for an
    #: EAGLE/draft-model speculator) ...
    dsv4_mtp_hidden_buffer: bool
    #: ... and in 0.27–0.28 ``DeepseekV4EagerScratchPool`` (models/deepseek_v4/eager_scratch.py,
    #: 0.27.1 and 0.28.0 identical; allocated unless micro-batching; the file is gone in 0.29.0,
    #: whose kernel allocates the padded q per call again); the ``topk_indices_buffer`` in every
    #: release read
    dsv4_eager_scratch: bool
    #: Qwen3-VL / Qwen3.5's dummy video (models/qwen3_vl.py: ``Qwen3VLDummyInputsBuilder.
    #: get_dummy_mm_data`` and ``get_max_video_tokens``, 2 frames at the video processor's
    #: longest_edge // temporal_patch_size) was read in 0.20.0, 0.21.0, 0.24.0 and 0.28.0
    qwen3_video_dummy_read: bool

    @classmethod
    def for_version(cls, version: Version | str) -> VllmRules:
        """The rules of ``version`` (a parsed :class:`Version` or what vLLM reports)."""
        v = parse_version(version) if isinstance(version, str) else version
        return _rules(v)

    def era_for(self, engine: str | None) -> Era:
        """The budget era with an explicit engine choice (``"v0"``/``"v1"``, None: default)."""
        return era_of(self.version, engine)


@cache
def _rules(v: Version) -> VllmRules:
    k = v.key

    def at(first: tuple[int, int, int]) -> bool:
        return k >= first

    def between(first: tuple[int, int, int], last: tuple[int, int, int]) -> bool:
        return first <= k < last

    def released(first: tuple[int, int, int]) -> bool:
        """From release ``first`` on, its own pre-releases not included (a rule whose change
        landed between a pre-release and the release)."""
        return k > first or (k == first and not v.prerelease)

    if at((0, 28, 0)):
        v2_archs = V2_RUNNER_DEFAULTS_0_28
    elif at((0, 25, 0)):
        v2_archs = V2_RUNNER_MOE_DEFAULTS_0_25
    elif at((0, 24, 0)):
        v2_archs = V2_RUNNER_DEFAULTS_0_24
    elif at((0, 23, 0)):
        v2_archs = V2_RUNNER_DEFAULTS_0_23
    elif at((0, 22, 0)):
        v2_archs = V2_RUNNER_DEFAULTS_0_22
    else:
        v2_archs = frozenset()
    mla_blocks: tuple[tuple[str, int], ...]
    if at((0, 18, 0)):
        mla_blocks = MLA_BLOCKS_BACKEND
    elif at((0, 11, 0)):
        mla_blocks = MLA_BLOCKS_PLATFORM
    else:
        mla_blocks = ()
    return VllmRules(
        version=v,
        era=era_of(v),
        default_gpu_memory_utilization=0.92 if at((0, 20, 0)) else 0.90,
        estimate_cuda_graphs_default=at((0, 20, 0)),
        cuda_graph_estimate_exists=at((0, 18, 0)),
        v2_cuda_graph_estimate=not between((0, 21, 0), (0, 29, 0)),
        rocm_cuda_graph_estimate=at((0, 26, 0)),
        kv_cache_memory_bytes=at((0, 11, 0)),
        big_gpu_tier=at((0, 28, 0)),
        a100_in_big_tier=not at((0, 9, 0)),
        v2_runner_all=at((0, 29, 0)),
        v2_runner_dense=at((0, 25, 0)),
        v2_runner_archs=v2_archs,
        v2_runner_archs_dense_unquantized=between((0, 22, 0), (0, 24, 0)),
        v2_runner_env_choice=at((0, 22, 0)),
        moe_kernel_read=at((0, 18, 0)),
        v2_spec_methods=None if at((0, 32, 0)) else V2_SPEC_METHODS_0_24,
        v2_spec_unsupported=V2_SPEC_UNSUPPORTED_0_32 if at((0, 32, 0)) else frozenset(),
        v2_cudagraph_manager=at((0, 25, 0)),
        v2_profiles_drafter_graphs=at((0, 30, 0)),
        v2_sampler_warmup_pass=at((0, 33, 0)),
        v1_sampler_triton_scratch=at((0, 22, 0)),
        cold_compile_benchmark=at((0, 11, 1)),
        spec_capture_sizes=at((0, 11, 0)),
        capture_max_times_query_len=at((0, 13, 0)),
        blackwell_capture_ceiling=at((0, 29, 0)),
        gpt_oss_capture_1024=at((0, 12, 0)),
        capture_grid_0_12=at((0, 12, 0)),
        capture_adds_batched_tokens=at((0, 22, 0)),
        capture_adds_decode_sizes=at((0, 29, 0)),
        lora_graph_cases=2 if at((0, 20, 0)) else 1,
        cudagraph_modes_read=between((0, 20, 0), (0, 29, 0)),
        mla_block_by_family=mla_blocks,
        mla_fp8_hopper_flashmla=at((0, 18, 0)),
        flash_attn_kv_dtypes=(
            FLASH_ATTN_KV_0_22
            if at((0, 22, 0))
            else FLASH_ATTN_KV_0_20
            if at((0, 20, 0))
            else FLASH_ATTN_KV_0_12
        ),
        modelopt_kv_dtype=at((0, 15, 0)),
        nvfp4_kv_dtype=at((0, 20, 0)),
        hma_with_connector=at((0, 22, 0)),
        tokens_from_concurrency=released((0, 20, 1)),
        pp_start_check_whole_model=between((0, 14, 0), (0, 17, 0)),
        qk_norm_allreduces=1 if at((0, 14, 0)) else 2,
        in_flight_batches=at((0, 26, 0)),
        async_scheduling_default=at((0, 14, 0)),
        chunked_local_as_full=between((0, 11, 0), (0, 14, 0)),
        nemotron_h_fp32_ssm=at((0, 20, 0)),
        hybrid_prefix_caching_default=at((0, 26, 0)),
        mamba_prefix_caching=at((0, 15, 0)),
        mamba_all_mode=not at((0, 28, 0)),
        mamba_align_with_spec=between((0, 20, 0), (0, 22, 0)),
        mamba2_checkpoint_block=at((0, 32, 0)),
        hybrid_checkpoint_block=at((0, 33, 0)),
        gdn_hopper_align=at((0, 33, 0)),
        spec_conv_mamba2_archs=(
            (SPEC_CONV_MAMBA2_0_17 if at((0, 17, 0)) else frozenset())
            | (SPEC_CONV_MAMBA2_0_32 if at((0, 32, 0)) else frozenset())
        ),
        mxfp4_backends_read=between((0, 20, 0), (0, 29, 0)),
        mxfp4_trtllm_inter_align=128 if at((0, 27, 0)) else 256,
        mxfp4_triton_scale_group_align=4 if at((0, 26, 0)) else 1,
        mxfp4_triton_keeps_scales=not at((0, 25, 0)),
        draft_model_speculation=at((0, 16, 0)),
        mm_limit_options=at((0, 11, 1)),
        mm_factorised_dummy=at((0, 13, 0)),
        vocab_lora=at((0, 20, 0)),
        nemotron_latent_moe=at((0, 13, 0)),
        deepseek_v4_exists=at((0, 20, 0)),
        deepseek_v4_read=at((0, 24, 0)),
        dsv4_planning=(
            "packed_groups" if at((0, 29, 0)) else "group_stride" if at((0, 27, 0)) else "padded"
        ),
        dsv4_auto_fp8=at((0, 30, 0)),
        dsv4_mtp_hidden_buffer=between((0, 24, 0), (0, 27, 0)),
        dsv4_eager_scratch=between((0, 27, 0), (0, 29, 0)),
        qwen3_video_dummy_read=between((0, 20, 0), (0, 29, 0)),
    )
