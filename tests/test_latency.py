"""The decode-step latency model (issue 14, point 2) and the ITL target in the planner."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from inference_capacity.engines.vllm import EngineSettings, predict_startup
from inference_capacity.hardware import DEFAULT_HBM_EFFICIENCY, get_gpu
from inference_capacity.model import load_model
from inference_capacity.model.shapes import AttnKind
from inference_capacity.planner import PlanInput, make_plan
from inference_capacity.sizing import perf
from inference_capacity.sizing.latency import (
    build_latency_model,
    decode_step_seconds,
    experts_touched,
    experts_weight_only,
    launch_seconds,
)
from inference_capacity.sizing.workload import Cohort, Quantiles, Workload

H100 = get_gpu("H100-SXM-80GB")
LLAMA8B = load_model("meta-llama/Llama-3.1-8B-Instruct")
ENGINE = EngineSettings(version="0.19.0", max_model_len=8192)
#: Llama-3.1-8B weights as vLLM loads them: 8,030,261,248 params × 2 B + rope cache 131,072 ×
#: 128 × 2 B = 16,094,076,928 B ("Model loading took 14.9888 GiB", ledger/weights.py)
LLAMA8B_WEIGHTS = 16_094_076_928


def _predict(model: object, gpu: object = H100, **kw: object) -> object:
    return predict_startup(model, gpu.total_bytes, gpu.name, 1, 1, replace(ENGINE, **kw))  # type: ignore[attr-defined, arg-type]


def test_seed_003_decode_example() -> None:
    # seed 003: 64 sequences × 2,000 tokens × 131,072 B = 16.8 GB of KV read per step, about the
    # 16 GB of weights; at the H100's 3.35 TB/s the step's lower bound goes from ~4.8 ms
    # (weights only) to ~9.8 ms
    pred = _predict(LLAMA8B)
    assert pred.ranks[0].weights.total == LLAMA8B_WEIGHTS  # type: ignore[attr-defined]
    model = build_latency_model(LLAMA8B, H100, pred, hbm_efficiency=1.0)  # type: ignore[arg-type]
    assert model is not None and model.bandwidth == 3.35e12
    [stage] = model.stages
    kv = float(stage.kv_bytes(np.full(64, 2000.0)).sum())
    assert kv == 64 * 2000 * 131_072 == 16_777_216_000  # 16.8 GB
    assert decode_step_seconds(LLAMA8B_WEIGHTS, 0, 3.35e12) == pytest.approx(4.80e-3, abs=5e-6)
    assert decode_step_seconds(LLAMA8B_WEIGHTS, kv, 3.35e12) == pytest.approx(9.81e-3, abs=5e-6)
    # the model's step at 64 × 2,000 (decode only) is that bound, less the embedding table (a
    # row gather: only the batch's rows are read, issue 19) plus the fixed overheads of
    # sizing/perf.py (per step, and per layer its kernels' launch latencies from the per-op
    # tables: 4 GEMMs, 5 small kernels, the attention kernel; the lm_head GEMM); the GEMM
    # compute bound (2 × 7.0e9 × 64) /
    # (989 TFLOP/s × GEMM_EFFICIENCY) ≈ 1.6 ms is far below the 4.5 ms of weight reads
    embedding = pred.ranks[0].weights.by_group["embedding"]  # type: ignore[attr-defined]
    assert embedding == 128_256 * 4096 * 2  # 1.05 GB
    # vLLM 0.19 schedules asynchronously by default, so the engine's CPU time per step
    # (STEP_OVERHEAD_S, 1 ms) runs under the ~11 ms GPU step instead of after it
    assert pred.async_scheduling  # type: ignore[attr-defined]
    per_layer = 4 * perf.GEMM_LAUNCH_S + 5 * perf.SMALL_KERNEL_S + perf.ATTENTION_LAUNCH_S
    overhead = 32 * per_layer + perf.GEMM_LAUNCH_S
    step = float(model.step_seconds(64.0, np.array([[kv]]), 0.0, 2000.0)[0])
    assert step == pytest.approx((LLAMA8B_WEIGHTS - embedding + kv) / 3.35e12 + overhead)
    # ... and the byte terms scale by the efficiency factor (the default 0.80)
    default = build_latency_model(LLAMA8B, H100, pred)  # type: ignore[arg-type]
    assert default is not None and default.hbm_efficiency == DEFAULT_HBM_EFFICIENCY == 0.80
    step80 = float(default.step_seconds(64.0, np.array([[kv]]), 0.0, 2000.0)[0])
    assert step80 - overhead == pytest.approx((step - overhead) / 0.80)


def test_sliding_window_layers_read_at_most_their_window() -> None:
    # Gemma-3-27B: 52 sliding-window (1,024) and 10 full layers. At 32k tokens the full layers
    # read 32,768 tokens and the sliding ones 1,024: (10 × 32,768 + 52 × 1,024) / (62 × 32,768)
    # = 0.187 of the full-context count, ≈ 5.3× less
    gemma = load_model("google/gemma-3-27b-it")
    kinds = Counter((layer.kind, layer.window) for layer in gemma.per_layer())
    assert kinds == {(AttnKind.SLIDING, 1024): 52, (AttnKind.FULL, 0): 10}
    pred = predict_startup(
        gemma, H100.total_bytes, H100.name, 1, 1, replace(ENGINE, max_model_len=32768)
    )
    model = build_latency_model(gemma, H100, pred)
    assert model is not None
    [stage] = model.stages
    per_token = gemma.per_layer()[0].token_bytes(1, pred.settings.kv_bytes)
    assert all(
        layer.token_bytes(1, pred.settings.kv_bytes) == per_token for layer in gemma.per_layer()
    )
    read = float(stage.kv_bytes(np.array([32768.0]))[0])
    assert read == per_token * (10 * 32768 + 52 * 1024)
    assert 62 * 32768 * per_token / read == pytest.approx(5.34, abs=0.01)


def test_mamba_state_is_read_and_written_once_per_step() -> None:
    nemo = load_model("nvidia/Nemotron-H-56B-Base-8K")
    pred = predict_startup(nemo, H100.total_bytes, H100.name, 4, 1, ENGINE)
    model = build_latency_model(nemo, H100, pred)
    assert model is not None
    [stage] = model.stages
    state = sum(
        layer.mamba.bytes_per_sequence(4, 2)
        for layer in nemo.per_layer()
        if layer.mamba is not None
    )
    assert stage.state_bytes == state > 0
    # at context 0 only the state is moved: read + write
    assert float(stage.kv_bytes(np.array([0.0]))[0]) == 2 * state


def test_moe_reads_the_experts_a_step_touches() -> None:
    # uniform top-k routing: one token touches k experts; many tokens touch them all
    assert float(experts_touched(128, 8, 1)) == pytest.approx(8)
    assert float(experts_touched(128, 8, 10_000)) == pytest.approx(128)
    # 2 tokens: 128 × (1 − (1 − 8/128)²) = 15.5
    assert float(experts_touched(128, 8, 2)) == pytest.approx(15.5)
    qwen = load_model("Qwen/Qwen3-30B-A3B")
    pred = predict_startup(qwen, H100.total_bytes, H100.name, 1, 1, ENGINE)
    model = build_latency_model(qwen, H100, pred)
    assert model is not None
    [stage] = model.stages
    embedding = pred.ranks[0].weights.by_group["embedding"]
    resident = stage.dense_weight_bytes + stage.expert_weight_bytes + stage.lm_head_bytes
    # every resident byte but the embedding table (a row gather per step, issue 19)
    assert resident == pred.ranks[0].weights.total - embedding
    one = float(model.weight_bytes(stage, 1))
    dense = stage.dense_weight_bytes + stage.lm_head_bytes
    assert one == pytest.approx(dense + stage.expert_weight_bytes * 8 / 128)
    assert float(model.weight_bytes(stage, 4096)) == pytest.approx(resident)


def test_weight_only_int4_experts_run_at_the_marlin_kernels_terms() -> None:
    # Kimi-K2.5's routed experts are compressed-tensors INT4 (W4A16): vLLM's Marlin MoE, whose
    # per-op rows the FP8/MXFP4 kernels' constants miss (perf.MOE_WO_*); NVFP4, MXFP4, FP8-block
    # and BF16 experts keep the fused-MoE constants
    kimi = load_model("moonshotai/Kimi-K2.5")
    assert experts_weight_only(kimi)
    for other in ("nvidia/Kimi-K2.5-NVFP4", "openai/gpt-oss-120b", "Qwen/Qwen3-235B-A22B-FP8"):
        assert not experts_weight_only(load_model(other)), other
    assert not experts_weight_only(load_model("meta-llama/Llama-3.1-8B-Instruct"))  # no MoE
    h200 = get_gpu("H200-SXM-141GB")
    pred = predict_startup(kimi, h200.total_bytes, h200.name, 8, 1, ENGINE)
    model = build_latency_model(kimi, h200, pred)
    assert model is not None
    [stage] = model.stages
    assert stage.experts_weight_only
    assert stage.fixed_s == pytest.approx(
        launch_seconds(
            kimi.num_layers,
            True,
            True,
            False,
            perf.MOE_WO_LAUNCH_S,
            kimi.num_layers,  # every Kimi-K2.5 layer is MLA
            perf.MLA_MODULE_FIXED_S_OTHER,
        )
    )
    # the experts' term of a decode step of T tokens, by hand: touched experts' bytes at the
    # kernel's share of the bandwidth, or 2 k/E × expert parameters × T at its share of BF16
    e, k = kimi.num_experts, kimi.experts_per_token
    bf16 = 989e12
    assert stage.expert_flops == bf16
    kv = np.zeros((1,))

    def experts_term(t: float) -> float:
        with_experts = float(model.step_seconds(t, [kv], 0.0, 0.0)[0])
        bare = replace(stage, expert_weight_bytes=0)
        without = float(replace(model, stages=(bare,)).step_seconds(t, [kv], 0.0, 0.0)[0])
        return with_experts - without

    # Hopper: the h200_sxm rows' share of the bandwidth and of the BF16 peak
    share, eff = perf.MOE_WO_OTHER
    assert stage.moe_wo_terms == (share, eff)
    for t in (1.0, 64.0, 4096.0):
        touched = e * (1 - (1 - k / e) ** t)
        mem = stage.expert_weight_bytes * touched / e / (model.bandwidth * share)
        fl = 2 * k / e * stage.expert_params * t / (bf16 * eff)
        assert experts_term(t) == pytest.approx(max(mem, fl), rel=1e-9)
    # at 64 tokens the weight reads bind (the M-dependent fused-MoE efficiency made the FLOPs
    # bind there, at 3.3 × the reads); at 4,096 the FLOPs do
    touched64 = e * (1 - (1 - k / e) ** 64)
    assert 2 * k / e * stage.expert_params * 64 / (bf16 * eff) < (
        stage.expert_weight_bytes * touched64 / e / (model.bandwidth * share)
    )


#: GPUs of each family the fused-MoE terms are chosen by (compute capability 10.x: datacenter
#: Blackwell; the SM12x cards run the other family's path, e.g. Marlin's mma.sync)
FAMILY_GPUS = (
    ("B200-180GB", (10, 0)),
    ("B300-288GB", (10, 3)),
    ("H200-SXM-141GB", (9, 0)),
    ("A100-SXM-80GB", (8, 0)),
    ("RTX-PRO-6000-Blackwell", (12, 0)),
)


def test_float_moe_terms_follow_the_gpu_family() -> None:
    # per-op (aiconfigurator-core 0.12.0, moe/vllm/0.24.0, benchmarks.latency_fit): B200's
    # FlashInfer TRTLLM kernels sustain a smaller share of their peaks at a smaller fixed
    # latency than Hopper's Triton ones; one pair for both left B200's block-FP8 rows 1.4x fast
    # at thousands of tokens
    bw_plateau, bw_launch = perf.MOE_BLACKWELL_DC
    hopper_plateau, hopper_launch = perf.MOE_OTHER
    assert bw_plateau < hopper_plateau and bw_launch < hopper_launch
    for name, cc in FAMILY_GPUS:
        want = perf.MOE_BLACKWELL_DC if cc[0] == 10 else perf.MOE_OTHER
        assert perf.moe_terms(get_gpu(name).compute_capability) == want, name
    assert perf.moe_terms(None) == perf.MOE_OTHER
    qwen = load_model("Qwen/Qwen3-235B-A22B-FP8")
    layers = qwen.num_layers
    for name in ("B200-180GB", "H200-SXM-141GB"):
        gpu = get_gpu(name)
        pred = predict_startup(qwen, gpu.total_bytes, gpu.name, 4, 1, ENGINE)
        model = build_latency_model(qwen, gpu, pred)
        assert model is not None
        [stage] = model.stages
        want = perf.moe_terms(gpu.compute_capability)
        assert stage.moe_terms == want, name
        # the fused-MoE kernel's fixed latency is the family's, once a layer
        assert stage.fixed_s == pytest.approx(launch_seconds(layers, True, True, True, want[1]))
        # a compute-bound step (a chunk of 8,192 tokens touches every expert) runs at the
        # family's plateau: B200's model with Hopper's pair is faster
        other = perf.MOE_OTHER if want == perf.MOE_BLACKWELL_DC else perf.MOE_BLACKWELL_DC
        swapped = replace(model, stages=(replace(stage, moe_terms=other),))
        kv = np.zeros((1,))
        got = float(model.step_seconds(0.0, [kv], 8192.0, 4096.0)[0])
        alt = float(swapped.step_seconds(0.0, [kv], 8192.0, 4096.0)[0])
        assert (got > alt) == (want[0] < other[0]), name


def test_marlins_moe_terms_follow_the_gpu_family() -> None:
    # per-op (aiconfigurator-core 0.12.0, moe/vllm/0.24.0, int4_wo Marlin rows): Marlin's
    # mma.sync kernel reaches 84 % of H200's bandwidth but 58 % of B200's, and a smaller share
    # of B200's BF16 peak; one pair for both left H200 20 % slow and B200 15 % fast
    b200_share, b200_eff = perf.MOE_WO_BLACKWELL_DC
    h200_share, h200_eff = perf.MOE_WO_OTHER
    assert b200_share < h200_share and b200_eff < h200_eff
    for name, cc in FAMILY_GPUS:
        gpu = get_gpu(name)
        assert gpu.compute_capability == cc, name
        want = perf.MOE_WO_BLACKWELL_DC if cc[0] == 10 else perf.MOE_WO_OTHER
        assert perf.moe_weight_only_terms(gpu.compute_capability) == want, name
    assert perf.moe_weight_only_terms(None) == perf.MOE_WO_OTHER
    kimi = load_model("moonshotai/Kimi-K2.5")
    b200 = get_gpu("B200-180GB")
    pred = predict_startup(kimi, b200.total_bytes, b200.name, 8, 1, ENGINE)
    model = build_latency_model(kimi, b200, pred)
    assert model is not None
    [stage] = model.stages
    assert stage.moe_wo_terms == perf.MOE_WO_BLACKWELL_DC
    # a weight-bound decode step reads the touched experts at the family's share: the same
    # step is slower on B200's model than with H200's share at B200's bandwidth
    hopper = replace(model, stages=(replace(stage, moe_wo_terms=perf.MOE_WO_OTHER),))
    kv = np.zeros((1,))
    assert float(model.step_seconds(8.0, [kv], 0.0, 0.0)[0]) > float(
        hopper.step_seconds(8.0, [kv], 0.0, 0.0)[0]
    )


def test_an_itl_target_holds_the_mean_tpot_too() -> None:
    # 8,192-token prompts, 1,024-token outputs (Llama-3.1-70B FP8, H200, TP8): the prefill-chunk
    # steps are ~3 % of a request's steps and ~25 × a decode step, so the p95 of the steps
    # misses them while a request's mean TPOT carries them; a target holds both
    from benchmarks.latency_accuracy import batches_for, plan_input

    base = {
        "model": "meta-llama/Meta-Llama-3.1-70B",
        "quantization": "fp8",
        "gpu": "H200-SXM-141GB",
        "tp": 8,
        "vllm_version": "0.19.0",
        "prompt_tokens": 8192,
        "output_tokens": 1024,
    }
    inp = plan_input(base)
    got = batches_for(base)
    assert not isinstance(got, str), got
    _, batches = got
    pt = batches.point(32)
    assert pt.itl_ms_p95 < 0.7 * pt.tpot_ms_mean  # the chunk steps are not in the p95
    assert pt.itl_target_ms("p95") == pt.tpot_ms_mean
    assert pt.itl_target_ms("p99") == pt.itl_ms_p99  # the p99 has them
    target = 15.0
    n = batches.largest_meeting(target, batches.max_n)
    assert batches.point(n).tpot_ms_mean <= target < batches.point(n + 1).tpot_ms_mean
    by_p95 = max(m for m in range(1, 2 * n + 1) if batches.point(m).itl_ms_p95 <= target)
    assert by_p95 > n  # the p95 alone would have taken a larger batch
    # the sizing with --itl-target-ms 15 stops at n and says the ITL target binds
    wl = replace(inp.workload, itl_target_ms=target)
    capped = make_plan(replace(inp, workload=wl, choose_max_num_seqs=True))
    assert capped.seqs is not None and capped.seqs.limited_by == "itl"
    assert capped.seqs.max_num_seqs == n


def test_itl_target_caps_max_num_seqs_by_the_latency_p95() -> None:
    chat = Cohort("chat", 1.0, Quantiles(1000, 2000, 4000), Quantiles(200, 500, 1000))
    free = make_plan(PlanInput(LLAMA8B, H100, engine=ENGINE, workload=Workload((chat,))))
    assert free.latency is not None and free.latency.at_max_num_seqs is not None
    target = 0.5 * free.latency.at_max_num_seqs.itl_ms_p95
    p = make_plan(
        PlanInput(LLAMA8B, H100, engine=ENGINE, workload=Workload((chat,), itl_target_ms=target))
    )
    assert p.seqs is not None and p.seqs.limited_by == "itl"
    assert p.latency is not None and p.latency.at_max_num_seqs is not None
    n = p.recommendation.max_num_seqs
    assert 0 < n < free.recommendation.max_num_seqs
    assert p.latency.at_max_num_seqs.itl_ms_p95 <= target
    curve = {pt.max_num_seqs: pt for pt in p.latency.curve}
    assert n in curve
    # the curve rises with the batch, throughput too (until compute-bound)
    ns = sorted(curve)
    itl = [curve[k].itl_ms_p50 for k in ns]
    assert itl == sorted(itl)
    # more efficiency, shorter steps: the same batch at 0.95 of peak
    fast = make_plan(
        PlanInput(
            LLAMA8B,
            H100,
            engine=ENGINE,
            workload=Workload((chat,), itl_target_ms=target),
            hbm_efficiency=0.95,
        )
    )
    assert fast.recommendation.max_num_seqs >= n


def test_async_scheduling_default_by_version() -> None:
    # config/scheduler.py SchedulerConfig.async_scheduling: False in 0.13.0, None from 0.14.0,
    # which config/vllm.py VllmConfig.__post_init__ turns on unless PP > 1 or a speculative
    # method other than EAGLE/MTP; --async-scheduling / --no-async-scheduling win
    from inference_capacity.engines.versions import parse_version
    from inference_capacity.engines.vllm import SpeculativeConfig, async_scheduling_on

    def on(version: str, pp: int = 1, **kw: object) -> bool:
        return async_scheduling_on(parse_version(version), pp, replace(ENGINE, **kw))

    assert not on("0.12.0") and not on("0.13.0")
    assert on("0.14.0") and on("0.15.1") and on("0.18.0")
    assert not on("0.18.0", pp=2)
    assert on("0.13.0", async_scheduling=True) and not on("0.18.0", async_scheduling=False)
    assert not on("0.18.0", speculative=SpeculativeConfig("ngram", 3))
    assert on("0.18.0", speculative=SpeculativeConfig("eagle3", 3))
    assert on("0.18.0", speculative=SpeculativeConfig("deepseek_mtp", 1))


def test_async_scheduling_overlaps_the_cpu_step() -> None:
    # without async scheduling the engine core waits for a step's sampled tokens before it
    # schedules the next (v1/engine/core.py EngineCore.step): step = GPU + CPU. With it the
    # scheduler runs one step ahead (EngineCore.step_with_batch_queue): step = max(GPU, CPU)
    sync = build_latency_model(LLAMA8B, H100, _predict(LLAMA8B, version="0.13.0"))  # type: ignore[arg-type]
    asyn = build_latency_model(LLAMA8B, H100, _predict(LLAMA8B, version="0.14.0"))  # type: ignore[arg-type]
    assert sync is not None and asyn is not None
    assert not sync.async_scheduling and asyn.async_scheduling
    kv = np.array([[64 * 2000 * 131_072.0]])
    s_sync = float(sync.step_seconds(64.0, kv, 0.0, 2000.0)[0])
    s_async = float(asyn.step_seconds(64.0, kv, 0.0, 2000.0)[0])
    gpu = s_sync - perf.STEP_OVERHEAD_S
    assert gpu > perf.STEP_OVERHEAD_S  # an ~11 ms GPU step hides the 1 ms of CPU
    assert s_async == pytest.approx(gpu)
    assert asyn.step_scalar(64.0, [float(kv[0, 0])], 0.0, 2000.0) == pytest.approx(gpu)
    # a GPU step shorter than the CPU's (every stage removed: 0 s) is the CPU's
    bare = replace(asyn, stages=())
    assert bare.step_scalar(1.0, [], 0.0, 0.0) == perf.STEP_OVERHEAD_S
    assert replace(sync, stages=()).step_scalar(1.0, [], 0.0, 0.0) == perf.STEP_OVERHEAD_S


def test_block_fp8_linears_cost_a_plain_fp8_gemm() -> None:
    # Qwen3-235B-A22B-FP8 is block-quantized (weight_block_size [128, 128]); vLLM runs its
    # linears as a custom op inside the CUDA graphs (fp8_utils.py fp8_gemm_nt_op, 0.12-0.19),
    # and the per-op table's block-FP8 floor is host time (sizing/perf.py): a block-FP8 linear
    # costs what a per-tensor FP8 one does, its activation quantization included
    from inference_capacity.sizing.latency import launch_seconds

    qwen = load_model("Qwen/Qwen3-235B-A22B-FP8")
    assert qwen.quantization is not None and qwen.quantization.block == (128, 128)
    h200 = get_gpu("H200-SXM-141GB")
    pred = predict_startup(qwen, h200.total_bytes, h200.name, 2, 1, ENGINE)
    model = build_latency_model(qwen, h200, pred)
    assert model is not None and qwen.num_layers == 94
    [stage] = model.stages
    assert stage.fixed_s == pytest.approx(launch_seconds(94, True, True, True))
    # per layer: qkv, o, router GEMMs; 4 small kernels + the FP8 quantization; attention;
    # the fused MoE; plus the lm_head GEMM
    per_layer = (
        3 * perf.GEMM_LAUNCH_S
        + 5 * perf.SMALL_KERNEL_S
        + perf.ATTENTION_LAUNCH_S
        + perf.MOE_OTHER[1]  # H200: the Hopper pair's fixed latency
    )
    assert stage.fixed_s == pytest.approx(94 * per_layer + perf.GEMM_LAUNCH_S)


class _FakeBatches:
    """``point`` and ``max_n``: all :meth:`BatchLatency.largest_meeting` reads, over made-up
    monotone ITL and TTFT curves (counting the points it evaluates)."""

    def __init__(self, itl: list[float], ttft: list[float]) -> None:
        self.itl, self.ttft = itl, ttft
        self.max_n = len(itl)
        self.seen: set[int] = set()

    def point(self, n: int) -> Any:
        self.seen.add(n)
        itl, ttft = self.itl[n - 1], self.ttft[n - 1]

        class _P:
            ttft_ms_p95 = ttft

            @staticmethod
            def itl_target_ms(quantile: str) -> float:
                return itl

        return _P()


def test_largest_meeting_finds_what_a_scan_finds() -> None:
    # the search (powers of two, then an interpolation on the margin) returns the largest N
    # meeting both targets, as scanning every N does, for curves of any shape that grow with N
    import random

    from inference_capacity.sizing.latency import BatchLatency

    rng = random.Random(19)
    for case in range(300):
        top = rng.choice([1, 2, 3, 7, 64, 300, 1000, 2048])
        itl = sorted(rng.uniform(1, 100) ** rng.choice([1, 2, 3]) for _ in range(top))
        ttft = sorted(rng.uniform(10, 5000) for _ in range(top))
        itl_t = rng.choice([None, rng.uniform(0.5, max(itl) * 1.2)])
        ttft_t = rng.choice([None, rng.uniform(5, 6000)])
        upper = rng.randint(1, top + 5)
        fake = _FakeBatches(itl, ttft)
        got = BatchLatency.largest_meeting(fake, itl_t, upper, "p95", ttft_t)  # type: ignore[arg-type]
        want = 0
        for n in range(1, min(upper, top) + 1):
            if (itl_t is None or itl[n - 1] <= itl_t) and (ttft_t is None or ttft[n - 1] <= ttft_t):
                want = n
            else:
                break
        assert got == want, (case, top, upper, itl_t, ttft_t)
        # never more points than a bisection over the range plus the powers of two
        assert len(fake.seen) <= 2 * max(top, 2).bit_length() + 2


def _curve_probabilities_are_the_sizings(plan: Any, cache: Any) -> None:
    d = cache.sizing  # the plan's own (last) sizing
    assert plan.latency is not None and d is not None
    points = [*plan.latency.curve, plan.latency.at_max_num_seqs, plan.latency.at_peak]
    for pt in points:
        if pt is not None:
            assert pt.preemption_probability == d.probability(pt.max_num_seqs), pt.max_num_seqs


def test_the_curves_preemption_probability_is_the_plans_own_sizing() -> None:
    # the planner sizes again after choosing the utilization (another KV budget on the same
    # paths); the batch latency it reuses must report the last budget's probabilities, not the
    # first step's (Llama-3.1-8B, H100, an ITL target: 7.8 % shown at N = 273 where the plan's
    # sizing gives 0.78 %)
    from inference_capacity.planner import PlanCache

    chat = Cohort("chat", 1.0, Quantiles(1000, 2000, 4000), Quantiles(200, 500, 1000))
    cache = PlanCache()
    wl = Workload((chat,), peak_concurrency=256, itl_target_ms=30.0)
    plan = make_plan(PlanInput(LLAMA8B, H100, engine=ENGINE, workload=wl), cache)
    _curve_probabilities_are_the_sizings(plan, cache)


def test_plans_in_a_row_on_one_cache_keep_their_own_probabilities() -> None:
    # a sweep's plans share one PlanCache: another utilization is another budget on the same
    # simulation, so the latency terms are shared and the probabilities are not
    from inference_capacity.planner import PlanCache

    chat = Cohort("chat", 1.0, Quantiles(1000, 2000, 4000), Quantiles(200, 500, 1000))
    wl = Workload((chat,), peak_concurrency=256, itl_target_ms=40.0, ttft_target_ms=3000.0)
    model = load_model("meta-llama/Llama-3.1-70B-Instruct")
    shared = PlanCache()
    for u in (0.80, 0.85, 0.90):
        engine = replace(ENGINE, gpu_memory_utilization=u)
        inp = PlanInput(
            model,
            H100,
            tp=4,
            engine=engine,
            workload=wl,
            choose_utilization=False,
            choose_max_num_seqs=False,
        )
        plan = make_plan(inp, shared)
        _curve_probabilities_are_the_sizings(plan, shared)
        alone = make_plan(inp)
        assert alone.latency is not None and plan.latency is not None
        assert alone.latency.curve == plan.latency.curve


def test_an_mla_layer_costs_the_mla_modules_fixed_latency() -> None:
    # per-op (aiconfigurator-core 0.12.0, mla/vllm/0.24.0 generation module, DeepSeek-V3):
    # an MLA layer's attention half runs about a dozen kernels, 81.4 us on H200 and 37.8 us on
    # B200 beyond its reads, where a GQA layer's runs two GEMMs, three small kernels and the
    # attention kernel; by hand, per MLA layer, the difference replaces the GQA half
    half = (
        perf.ATTENTION_GEMMS_PER_LAYER * perf.GEMM_LAUNCH_S
        + perf.ATTENTION_SMALL_KERNELS_PER_LAYER * perf.SMALL_KERNEL_S
        + perf.ATTENTION_LAUNCH_S
    )
    base = launch_seconds(61, True, True, False)
    assert launch_seconds(61, True, True, False, perf.MOE_OTHER[1], 61, 81.4e-6) == pytest.approx(
        base + 61 * (81.4e-6 - half)
    )
    assert launch_seconds(61, True, True, False, perf.MOE_OTHER[1], 0, 81.4e-6) == base
    assert perf.mla_module_fixed_s((9, 0)) == perf.MLA_MODULE_FIXED_S_OTHER
    assert perf.mla_module_fixed_s((10, 0)) == perf.MLA_MODULE_FIXED_S_SM100
    assert perf.MLA_MODULE_FIXED_S_SM100 < perf.MLA_MODULE_FIXED_S_OTHER
    assert perf.MLA_MODULE_FIXED_S_OTHER > half  # more kernels than a GQA half
    # the step model counts the stage's MLA layers only: Kimi-K2.5 all 61, Llama none, and
    # DeepSeek-V4's compressed attention (its own kernels) none
    from inference_capacity.sizing.latency import _stage_reads

    def mla_layers(model: str, pp: int = 1, stage: int = 0) -> int:
        return _stage_reads(load_model(model), 1, pp, stage, 2, 2).mla_layers

    assert mla_layers("moonshotai/Kimi-K2.5") == 61
    assert mla_layers("moonshotai/Kimi-K2.5", 2, 1) == 30  # PP2: the second stage
    assert mla_layers("meta-llama/Llama-3.1-8B-Instruct") == 0
    assert mla_layers("deepseek-ai/DeepSeek-V4-Flash") == 0
    kimi = load_model("moonshotai/Kimi-K2.5")
    fixed = {}
    for name in ("H200-SXM-141GB", "B200-180GB"):
        gpu = get_gpu(name)
        pred = predict_startup(kimi, gpu.total_bytes, gpu.name, 8, 1, ENGINE)
        model = build_latency_model(kimi, gpu, pred)
        assert model is not None
        fixed[name] = model.stages[0].fixed_s
    assert fixed["H200-SXM-141GB"] - fixed["B200-180GB"] == pytest.approx(
        61 * (perf.MLA_MODULE_FIXED_S_OTHER - perf.MLA_MODULE_FIXED_S_SM100)
    )


def test_flash_attention_3_reads_an_fp8_kv_cache_at_its_measured_rate() -> None:
    # perf.FA3_FP8_KV_DECODE_BYTES_PER_S: FA3's decode over an FP8 cache reads 2.09 TB/s on
    # H100 and H200 alike (per-op rows: 0.61 / 0.45 of their datasheet bandwidths), below the
    # default 0.8 × 3.35 TB/s = 2.68 TB/s of an H100; a BF16 cache keeps the default share
    assert perf.FA3_FP8_KV_DECODE_BYTES_PER_S == 2.09e12

    def stage(gpu: Any, version: str = "0.19.0", **kw: Any) -> Any:
        pred = predict_startup(
            LLAMA8B, gpu.total_bytes, gpu.name, 1, 1, replace(ENGINE, version=version, **kw)
        )
        model = build_latency_model(LLAMA8B, gpu, pred)
        assert model is not None
        return model, model.stages[0]

    fp8, s8 = stage(H100, kv_cache_dtype="fp8")
    bf16, s16 = stage(H100)
    assert s8.kv_read_cap == 2.09e12 and s16.kv_read_cap == 0.0
    # 64 sequences at 2,000 tokens: 64 × 2,000 × 65,536 B of FP8 KV, read at 2.09 TB/s
    kv = float(s8.kv_bytes(np.full(64, 2000.0)).sum())
    assert kv == 64 * 2000 * 65_536
    with_kv = float(fp8.step_seconds(64.0, np.array([[kv]]), 0.0, 2000.0)[0])
    without = float(fp8.step_seconds(64.0, np.array([[0.0]]), 0.0, 2000.0)[0])
    assert with_kv - without == pytest.approx(kv / 2.09e12)
    # the BF16 cache's twice the bytes at 2.68 TB/s: about 1.56 × the FP8 read, not 2 ×
    kv16 = 2 * kv
    with16 = float(bf16.step_seconds(64.0, np.array([[kv16]]), 0.0, 2000.0)[0])
    assert with16 - without == pytest.approx(kv16 / (0.8 * 3.35e12))
    # not FA3: FlashAttention 2 on an A100 cannot read fp8 (FlashInfer runs it), the B200 runs
    # FlashInfer first, and fp8_e5m2 goes to FlashInfer from 0.22 (FlashAttentionBackend.
    # supports_kv_cache_dtype): the default share
    assert stage(get_gpu("A100-SXM-80GB"), kv_cache_dtype="fp8")[1].kv_read_cap == 0.0
    assert stage(get_gpu("B200-180GB"), kv_cache_dtype="fp8")[1].kv_read_cap == 0.0
    assert stage(H100, "0.22.0", kv_cache_dtype="fp8_e5m2")[1].kv_read_cap == 0.0
    assert stage(get_gpu("H200-SXM-141GB"), kv_cache_dtype="fp8_e4m3")[1].kv_read_cap == 2.09e12
