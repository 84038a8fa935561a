"""The per-step cost constants of the latency model (sizing/latency.py), each in one place.

The op terms of a step (GEMM bytes and FLOPs by dtype, attention, MoE experts touched, the TP
all-reduce bytes) come from the model's shape, the ledger's per-rank weights and the GPU
catalog's datasheet peaks (``catalog/gpus.json``, with sources). What a datasheet does not give
is below. Every constant marked *per-op* was fitted by ``python -m benchmarks.latency_fit`` on
aiconfigurator-core 0.12.0's measured per-OPERATION tables (NVIDIA, Apache-2.0; systems
``h100_sxm``, ``h200_sxm``, ``b200_sxm``; the files are listed in the script's doc and next to
each constant) with the same formula the model evaluates. Those tables are GPU times under
CUDA-graph replay (aiconfigurator's ``collector/helper.py``, ``benchmark_with_power``,
``use_cuda_graph=True``), as vLLM runs a decode step, so a kernel's fixed latency below is
what it costs inside a captured graph. No constant is fitted on an
end-to-end run: every point of ``tests/data/latency-points.jsonl`` (aiconfigurator's
``silicon_sample.csv``) is out of sample. The constants the per-op tables cannot give (CPU time
per step and per request) are *assumed* values argued below, not tuned on end-to-end runs.
"""

from __future__ import annotations

from ..hardware import sm100_family

#: Fixed CPU cost of one engine step, seconds (*assumed*): vLLM V1's engine-core loop between
#: two forward passes (scheduler, input preparation, the GPU→CPU copy of the sampled ids and
#: the output update) plus the CUDA-graph replay launch. No per-op table measures it; 1 ms is
#: the round value of the old fit script's prior (not tuned on the end-to-end points). With
#: async scheduling (vLLM's default from 0.14) it overlaps the GPU step (latency.py,
#: ``LatencyModel._with_cpu``).
STEP_OVERHEAD_S = 0.001
#: Per request, from arrival to the first scheduled step, seconds (*assumed*): HTTP and JSON
#: handling of the OpenAI server (a round 2 ms) ...
REQUEST_OVERHEAD_S = 0.002
#: ... plus tokenization per prompt token (*cited*: ~500k tokens/s on one CPU core, 220 ms for
#: 100k tokens, vLLM 0.19 instrumented, https://andyluo7.github.io/llm/amd/mi300x/vllm/lmcache/
#: performance/2026/05/14/cpu-gpu-codesign-agentic-inference-mi300x/).
TOKENIZE_S_PER_TOKEN = 2.2e-6

#: Fixed latency of one GEMM kernel, seconds (*per-op*: gemm/vllm/0.24.0/gemm_perf.parquet,
#: BF16 torch linear and per-tensor FP8 Cutlass, M 1..16384, N, K ≥ 1024; the model
#: ``launch + max(bytes / (HBM × 0.8), 2MNK / (peak × eff(M)))``, mean |log err| 0.26).
GEMM_LAUNCH_S = 6.14e-6
#: Fraction of the dtype's dense tensor peak a GEMM sustains once compute-bound (*per-op*, the
#: same fit): efficiency(M) = plateau × M / (M + GEMM_HALF_M).
GEMM_EFFICIENCY = 0.697
#: The M (rows: tokens, or tokens per expert) at which a GEMM reaches half that plateau
#: (*per-op*, the same fit).
GEMM_HALF_M = 64.7
#: vLLM's block-FP8 linear (a checkpoint with ``weight_block_size``: Qwen3-235B-A22B-FP8,
#: MiniMax-M2.5) is costed as a per-tensor FP8 GEMM: ``GEMM_LAUNCH_S`` plus the FP8 activation
#: quantization ``launch_seconds`` counts. The per-op table's ``fp8_block`` rows
#: (gemm/vllm/0.24.0/gemm_perf.parquet) are not used for its fixed latency: at small M they are
#: flat across sizes a GPU cannot run in the same time (H200, M = 1: 57–62 µs for N × K from
#: 1024 × 1024 to 64 × 65,536 and 16,384 × 4,096, 1 to 64 MB of weights; B200: 155–270 µs,
#: where a per-tensor FP8 GEMM of 4096 × 4096 takes 9–25 µs) and meet the per-tensor FP8 rows
#: once the GPU time exceeds that floor (4096 × 4096 at M = 4096: block 147 / 144 µs, per-tensor
#: 154 / 136 µs on H100 / H200), so the floor is the timing loop's host time per call, which a
#: CUDA-graph replay (vLLM's decode step) does not pay per kernel; vLLM 0.12–0.19 run DeepGEMM
#: as a registered custom op inside the piecewise graphs (fp8_utils.py ``fp8_gemm_nt_op``). A
#: fit of that floor (76.8 µs on SM 9.0, 189.5 µs on SM 10.0, until 2026-12-06) put MiniMax-M2.5
#: FP8 at 2–3× its measured TPOT on H200, B200 and B300.
#: The fused-MoE kernel of float experts (FP8, block FP8, NVFP4, MXFP4), by GPU family
#: (:func:`moe_terms`): (the plateau of its expert GEMMs' share of the tensor peak, its fixed
#: latency per layer: routing, token permutation, the kernel, seconds), the efficiency
#: ``plateau × M / (M + GEMM_HALF_M)`` at M = tokens × k / touched experts (*per-op*:
#: moe/vllm/0.24.0/moe_perf.parquet, balanced routing, MoE-TP 1..8, no EP; experts touched by
#: the table's balanced routing; ``benchmarks.latency_fit``). Datacenter Blackwell (the
#: b200_sxm rows: FlashInfer TRTLLM's block-FP8, NVFP4 and gpt-oss MXFP4 kernels, 2,925 rows,
#: |log err| 0.21) sustains a smaller share of its larger peaks at a smaller fixed latency
#: than the Triton kernels of Hopper (h100_sxm and h200_sxm: block FP8 and gpt-oss MXFP4, 3,500
#: rows, |log err| 0.14); one pair for all three systems (0.279, 32.9 µs, until 2026-12-07)
#: left B200's block-FP8 and NVFP4 rows up to 1.6× slow at a few tokens and 1.4× fast at
#: thousands. Left as they are: gpt-oss's MXFP4 × BF16 kernel on B200 is still ~2.5× fast at
#: thousands of tokens at the FP4 rate (its activations are BF16), and costing it at a wider
#: rate makes ``GEMM_HALF_M``'s small-M floor exceed its 4-bit weight reads (1.7× slow at a
#: decode batch): the two need a tile-shaped efficiency, not another constant. Every other GPU
#: (Ampere, Ada, the SM12x cards) is assumed to be Hopper's pair: no table of theirs was fitted.
MOE_BLACKWELL_DC = (0.193, 22.3e-6)
#: ... Hopper and every other GPU
MOE_OTHER = (0.308, 34.5e-6)


def moe_terms(compute_capability: tuple[int, int] | None) -> tuple[float, float]:
    """(plateau, fixed latency per layer) of the fused-MoE kernel of float experts on a GPU of
    this compute capability (:data:`MOE_BLACKWELL_DC` for 10.x, else :data:`MOE_OTHER`)."""
    if sm100_family(compute_capability):
        return MOE_BLACKWELL_DC
    return MOE_OTHER


#: The fused-MoE kernel of weight-only integer experts (INT4/INT8 weights, BF16 activations:
#: compressed-tensors WNA16, GPTQ, AWQ, AutoRound; vLLM runs them on Marlin's MoE kernel), whose
#: shape the float experts' pairs above do not fit (|log err| 0.53 on its rows): a share of the
#: achievable HBM bandwidth its weight reads reach, the fraction of the BF16 tensor peak its
#: GEMMs sustain (flat in M: Marlin dequantizes in the kernel, so small M is bound by the weight
#: reads, not by idle tensor cores) and its fixed latency per layer (*per-op*:
#: moe/vllm/0.24.0/moe_perf.parquet, ``int4_wo`` ``vllm_compressedtensorswna16marlinmoe_marlin``
#: rows of h200_sxm and b200_sxm, balanced routing, MoE-TP 1..8: the Kimi-K2 shape, 100 rows a
#: system). The share and the efficiency by GPU family (:func:`moe_weight_only_terms`): one pair
#: for both systems left H200 20 % slow and B200 15 % fast on the table (|log err| 0.23); a pair
#: per system with the launch shared, |log err| 0.124 over the 200 rows. Marlin issues the
#: mma.sync instructions of Ampere and Hopper, which datacenter Blackwell runs beside its own
#: tcgen05 path, so it reaches a smaller share of B200's bandwidth and BF16 peak.
MOE_WO_LAUNCH_S = 38.7e-6
#: (bandwidth share, BF16-peak efficiency) of Marlin's MoE kernel on datacenter Blackwell
#: (SM100 family, compute capability 10.x: the b200_sxm rows) ...
MOE_WO_BLACKWELL_DC = (0.582, 0.0856)
#: ... and on every other CUDA GPU (the h200_sxm rows; Ampere, Ada and the SM12x cards run the
#: same mma.sync path natively: assumed to be the Hopper figure, no table of theirs has it)
MOE_WO_OTHER = (0.839, 0.182)


def moe_weight_only_terms(compute_capability: tuple[int, int] | None) -> tuple[float, float]:
    """(bandwidth share, BF16-peak efficiency) of Marlin's MoE kernel on a GPU of this compute
    capability (:data:`MOE_WO_BLACKWELL_DC` for 10.x, else :data:`MOE_WO_OTHER`)."""
    if sm100_family(compute_capability):
        return MOE_WO_BLACKWELL_DC
    return MOE_WO_OTHER


#: Fraction of the BF16 tensor peak prefill attention sustains (*per-op*:
#: attention/vllm/0.24.0/context_attention_perf.parquet, FA3 on Hopper, FlashInfer-TRTLLM on
#: B200, BF16 KV, prompts ≥ 1024; causal FLOPs 4 × heads × head_dim × isl²/2; |log err| 0.43).
ATTENTION_EFFICIENCY = 0.367
#: Fixed latency of one decode-attention kernel, seconds (*per-op*:
#: attention/vllm/0.24.0/generation_attention_perf.parquet, one sequence at the shortest
#: context, the median of the three systems).
ATTENTION_LAUNCH_S = 11.3e-6
#: The rate FlashAttention 3 reads an FP8 KV cache at in a decode step, bytes/s (*per-op*:
#: attention/vllm/0.24.0/generation_attention_perf.parquet, ``vllm_flash_attn_fa3`` FP8-KV rows
#: of H100 and H200, head_dim 64/128, contexts ≥ 128: 14,348 rows, mean |log err| 0.197 against
#: 0.307 at the default HBM share; ``benchmarks/latency_fit.py::fit_fa3_fp8_decode``). Its BF16
#: rows read at 0.79–0.89 of the datasheet bandwidth (the default 0.8 holds there), the FP8
#: ones at 0.61 (H100) and 0.45 (H200), about the same bytes a second on both: a kernel bound
#: (dequantisation), not an HBM share, so one rate for every Hopper GPU where vLLM runs FA3
#: (engines/vllm.py::runs_flash_attn_3); on an H20 (a sixth of an H100's compute) assumed.
FA3_FP8_KV_DECODE_BYTES_PER_S = 2.09e12
#: Latency of one small elementwise kernel (RMSNorm, rotary, KV-cache write, SiLU-and-mul, an
#: FP8 activation quantization), seconds (*per-op*:
#: quantize/vllm/0.24.0/scale_matrix_perf.parquet, ``static_scaled_fp8_quant`` at M ≤ 16,
#: the median of the three systems).
SMALL_KERNEL_S = 2.11e-6
#: Small kernels of one decoder layer besides its GEMMs and attention, in vLLM's Llama/Qwen3
#: decoder layer (vllm/model_executor/models/llama.py, ``LlamaDecoderLayer.forward``): two
#: RMSNorms (residual add fused), rotary embedding, the KV-cache write
#: (``reshape_and_cache_flash``), SiLU-and-mul (in a MoE layer it is inside the fused-MoE
#: kernel, measured with it: one fewer). With FP8 activations each GEMM input is
#: quantized; V1 compiles the layer with Inductor (custom ops off by default), which fuses the
#: quantization into the RMSNorm before qkv/gate_up and into SiLU-and-mul before down, so one
#: stands alone: the o_proj input after attention (``FP8_QUANT_PER_LAYER``).
SMALL_KERNELS_PER_LAYER = 5
FP8_QUANT_PER_LAYER = 1
#: GEMM kernels of a dense decoder layer (qkv, o, gate_up, down) and of a MoE layer (qkv, o,
#: the router; the experts are the fused-MoE kernel).
GEMMS_PER_DENSE_LAYER = 4
GEMMS_PER_MOE_LAYER = 3
#: The attention half of those kernels: the qkv and o GEMMs and the input RMSNorm, rotary
#: embedding and KV-cache write (with the attention kernel, ``ATTENTION_LAUNCH_S``).
ATTENTION_GEMMS_PER_LAYER = 2
ATTENTION_SMALL_KERNELS_PER_LAYER = 3
#: Fixed latency of one MLA attention module in a decode step (DeepSeek-V2/V3, Kimi-K2: the
#: q_a / q_b / kv_a projections, their RMSNorms, rotary, the absorbed kv_b BMMs, the latent
#: KV-cache write, the MLA kernel and o_proj), seconds, beyond its weight and latent-KV reads at
#: the model's bandwidth; it replaces the attention half above in an MLA layer (*per-op*:
#: mla/vllm/0.24.0/mla_generation_module_perf.parquet, DeepSeek-V3, BF16 weights and KV, 1..128
#: heads a rank, batch ≤ 256, context ≤ 32,768: FLASH_ATTN_MLA on h200_sxm, 2,160 rows, |log
#: err| 0.106; FLASHINFER_MLA on b200_sxm, 3,240 rows, 0.170). An MLA layer runs about a dozen
#: kernels where a GQA layer's attention half runs six: 81 µs on H200 against the six's 30.
#: By :func:`mla_module_fixed_s`: the b200 figure on the SM100 family, the h200 figure
#: elsewhere (Ampere, Ada and SM12x run TRITON_MLA: assumed, no table of theirs has it).
MLA_MODULE_FIXED_S_SM100 = 37.8e-6
MLA_MODULE_FIXED_S_OTHER = 81.4e-6


def mla_module_fixed_s(compute_capability: tuple[int, int] | None) -> float:
    """The MLA module's fixed latency on a GPU of this compute capability."""
    if sm100_family(compute_capability):
        return MLA_MODULE_FIXED_S_SM100
    return MLA_MODULE_FIXED_S_OTHER


#: Latency of one TP all-reduce (vLLM custom all-reduce under CUDA graphs), seconds, before its
#: bytes over the link; two per layer at TP > 1 (*per-op*:
#: comm/vllm/{0.14.0,0.14.0,0.19.0}/custom_allreduce_perf.parquet of h100/h200/b200,
#: ``vllm_graph``, TP 2/4/8, messages of 128..512 Mi BF16 elements — the table's
#: ``message_size`` counts elements, as aiconfigurator queries it with tokens × hidden; mean
#: |log err| 0.25).
ALLREDUCE_LATENCY_S = 5.20e-6
#: The datasheet NVLink/PCIe figure in the catalog is bidirectional; an all-reduce's bytes move
#: at one direction's rate (NVLink 4: 900 GB/s total = 450 GB/s each way).
LINK_DIRECTIONS = 2.0
#: Multiplies the one-direction link bandwidth an all-reduce's bytes move at (*per-op*, the
#: same fit; 0.309 until the fit read the table's element counts as bytes, halving it).
LINK_EFFICIENCY = 0.618
#: PCIe-only GPUs (catalog ``interconnect: pcie``) run another all-reduce: vLLM's custom kernel
#: over peer access for a pair, NCCL from four GPUs (custom_all_reduce.py turns its kernel off on
#: more than two PCIe-only GPUs). Its latency grows with the ring's hops, seconds a hop
#: (*per-op*: comm/vllm/0.24.0 and 0.22.0/custom_allreduce_perf.parquet, ``vllm_graph``, TP2, of
#: rtx_pro_6000_server and l40s; comm/nccl/2.29.2/nccl_perf.parquet, all_reduce, TP4/8, of
#: rtx_pro_6000_server; the model ``hop × (tp − 1) + 2 (tp − 1)/tp × bytes / (one-way link ×
#: eff)``, mean |log err| 0.091 over 88 rows; ``benchmarks.latency_fit``) ...
PCIE_ALLREDUCE_HOP_S = 4.41e-6
#: ... the share of the one-way link a pair's bytes move at (the same fit: 39 GB/s of PCIe 5's
#: 64 on the RTX PRO 6000 node, 19 of PCIe 4's 32 on the L40S node) ...
PCIE_PAIR_LINK_EFFICIENCY = 0.592
#: ... and a ring's from four GPUs (the same fit, the RTX PRO 6000 node, whose GPUs reach each
#: other peer to peer: 26 / 25 GB/s at TP4 / TP8). A node without peer access is far slower:
#: aiconfigurator's L40S node moves 5.2 / 1.4 GB/s at TP4 / TP8 (printed by the fit, not fitted);
#: the catalog cannot tell the nodes apart, so such a node's TP ≥ 4 steps are under-predicted.
PCIE_RING_LINK_EFFICIENCY = 0.377
#: A ring all-reduce moves 2 (tp − 1) / tp of the message per rank; activations are BF16.
ACTIVATION_BYTES = 2
