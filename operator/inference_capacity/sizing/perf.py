"""The per-step cost constants of the latency model (sizing/latency.py), each in one place.

The op terms of a step (GEMM bytes and FLOPs by dtype, attention, MoE experts touched, the TP
all-reduce bytes) come from the model's shape, the ledger's per-rank weights and the GPU
catalog's datasheet peaks (``catalog/gpus.json``, with sources). What a datasheet does not give
is below: each constant was fitted by ``python -m benchmarks.latency_fit`` on the points marked
``"set": "fit"`` of ``tests/data/latency-points.jsonl`` (aiconfigurator-core 0.12.0's measured
vLLM runs, one row in four by a hash of its id; the other three in four are never fitted on and
are what ``benchmarks.latency_accuracy`` scores as out-of-sample). The fit started from round
priors (the fit script's doc) and minimises the mean over the fit runs of |log(pred/measured)|
of TPOT and throughput plus half that of TTFT (each capped at 2): 0.58 at these values.
"""

from __future__ import annotations

#: Fixed cost of one engine step, seconds: the scheduler, input preparation, sampling and the
#: detokenizer/output processing on the CPU, CUDA-graph replay launch (fitted).
STEP_OVERHEAD_S = 0.00125
#: Fixed cost per decoder layer per step, seconds: kernel launches and the small kernels (norms,
#: rotary, activation, KV-cache write) that no bytes/FLOPs bound sees (fitted).
LAYER_OVERHEAD_S = 24.4e-6
#: Latency of one TP all-reduce (NCCL / vLLM custom all-reduce), seconds, before its bytes over
#: the link; two per layer at TP > 1 (fitted).
ALLREDUCE_LATENCY_S = 11.0e-6
#: Fraction of the dtype's dense tensor peak a dense GEMM sustains once compute-bound (fitted).
GEMM_EFFICIENCY = 0.713
#: The M (rows: tokens, or tokens per expert) at which a GEMM reaches half that plateau
#: (fitted): efficiency(M) = plateau × M / (M + GEMM_HALF_M).
GEMM_HALF_M = 40.4
#: The same plateau for the grouped MoE expert GEMMs (fitted).
MOE_EFFICIENCY = 0.209
#: Fraction of the BF16 tensor peak prefill attention (FlashAttention) sustains (fitted; far
#: below FlashAttention's own figures: it also absorbs TTFT the steady-state scheduler misses,
#: e.g. a benchmark's first wave of requests arriving at once).
ATTENTION_EFFICIENCY = 0.172
#: Per request, from arrival to the first scheduled step: HTTP, tokenization, the engine's input
#: queue (fitted; 70 ms is more than those take alone: like ATTENTION_EFFICIENCY it absorbs the
#: benchmarks' start-up burst, which the data does not describe).
REQUEST_OVERHEAD_S = 0.0704
#: The datasheet NVLink/PCIe figure in the catalog is bidirectional; an all-reduce's bytes move
#: at one direction's rate (NVLink 4: 900 GB/s total = 450 GB/s each way).
LINK_DIRECTIONS = 2.0
#: Multiplies the one-direction link bandwidth an all-reduce's bytes move at (fitted: what NCCL's
#: bus bandwidth reaches of the datasheet figure for the message sizes of a step).
LINK_EFFICIENCY = 0.468
#: A ring all-reduce moves 2 (tp − 1) / tp of the message per rank; activations are BF16.
ACTIVATION_BYTES = 2
