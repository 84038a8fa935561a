"""vLLM's CUDA-graph estimate, the one it subtracts from the KV budget from 0.20 (the V1
runner's ``GPUModelRunner.profile_cudagraph_memory``: the same in the 0.18.0, 0.19.0, 0.20.0,
0.22.0, 0.26.0 and 0.28.0 sources). Per mode it captures the largest graph and the next one and
estimates ``first capture + (graphs − 1) × the second's increment``; the total is the larger
first capture plus both increments. The ledger follows that structure
(:func:`inference_capacity.engines.vllm.profiled_cuda_graph_estimate`).

Its constants are fitted on the 51 distinct setups of ``tests/data/vllm-cudagraph-estimates.jsonl``
(the DEBUG "Estimated PIECEWISE/FULL CUDA graph memory" lines of the llm-d-planner accuracy sweep,
vLLM 0.19.0 on H100, each with its source URL); the first tests re-derive them from that file.
The FlashAttention 3 split buffer is vLLM's code (v1/attention/backends/flash_attn.py): the data
only checks it. The oracle below spells the rule out in MiB."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from benchmarks.helpers import (
    cudagraph_estimate_rows,
    cudagraph_validation_rows,
    logged_capture_top,
)

from inference_capacity.engines import EngineSettings
from inference_capacity.engines.versions import parse_version
from inference_capacity.engines.vllm import (
    CG_EST_FULL_FIRST_MIB,
    CG_EST_FULL_PER_GRAPH_LAYER_MIB,
    CG_EST_PIECEWISE_FIRST_MIB,
    CG_EST_PIECEWISE_FIRST_PER_FORWARD,
    CG_EST_PIECEWISE_PER_GRAPH_LAYER_MIB,
    FA3_CUDA_GRAPH_SPLITS,
    FLASHINFER_WORKSPACE_BYTES,
    FORWARD_HIDDEN_COPIES,
    attention_backend,
    fa3_split_buffer_bytes,
    flashinfer_workspaces,
    predict_startup,
)
from inference_capacity.engines.vllm_rules import VllmRules
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model
from inference_capacity.units import GiB, MiB

DATA = Path(__file__).parent / "data" / "vllm-cudagraph-estimates.jsonl"
POINTS: list[dict[str, Any]] = [json.loads(line) for line in DATA.read_text().splitlines()]
H100 = get_gpu("H100-SXM-80GB")


def _transient_mib(p: dict[str, Any], tokens: int) -> float:
    """The forward's transient at ``tokens`` from the setup's config facts, as the ledger's
    forward_peak defines it (gate_up + activation per token, FORWARD_HIDDEN_COPIES hidden-sized
    copies). A MoE's fused-MoE buffer is not in it: the profile run sized that buffer for its
    larger batch and a capture allocates none of it (engines/vllm.py::moe_workspace)."""
    c = p["config"]
    b = 4 if p["activations"] == "fp32" else 2
    dense = tokens * b * (3 * c["dense_intermediate_size"] / p["tp"])
    dense += tokens * b * FORWARD_HIDDEN_COPIES * c["hidden_size"]
    return dense / MiB


def _split_mib(p: dict[str, Any]) -> float:
    c, full = p["config"], p["full"]
    heads = c["num_attention_heads"] // p["tp"]
    return 32 * logged_capture_top(full["graphs"]) * heads * c["value_head_dim"] * 4 / MiB


def _fa3(p: dict[str, Any]) -> bool:
    fa = "FlashAttention 3" in p["attention_backend"] or p["attention_backend"] == "FLASH_ATTN_MLA"
    return fa and not p["model"].startswith("openai/gpt-oss")


# --- the constants are the fit of the data ------------------------------------------------------


def test_the_data_is_the_51_setups_with_their_sources() -> None:
    assert len(POINTS) == 51
    for p in POINTS:
        assert p["source_url"].startswith("https://github.com/jgchn/llm-d-planner/blob/d3121e0")
        pw = p["piecewise"]
        line = next(x for x in p["raw_lines"] if "Estimated PIECEWISE" in x)
        assert f"{pw['first_mib']:.2f} MiB first-capture + ({pw['graphs']}-1)" in line
        total = next(x for x in p["raw_lines"] if "GiB total" in x)
        assert f"{p['estimate_gib']:.2f} GiB total" in total
        # vLLM's own sum (max of the first captures + both increments) is the logged total
        firsts = [pw["first_mib"]] + ([p["full"]["first_mib"]] if p["full"] else [])
        incr = (pw["graphs"] - 1) * pw["per_graph_mib"]
        if p["full"]:
            incr += (p["full"]["graphs"] - 1) * p["full"]["per_graph_mib"]
        assert (max(firsts) + incr) / 1024 == pytest.approx(p["estimate_gib"], abs=0.006)


def test_the_first_piecewise_capture_is_the_least_squares_fit() -> None:
    # over the 16-bit-activation setups (FP8/INT8 activations and float32 apart)
    fit = [p for p in POINTS if p["activations"] in ("bf16", "fp16")]
    assert len(fit) == 41
    x = np.array([_transient_mib(p, logged_capture_top(p["piecewise"]["graphs"])) for p in fit])
    y = np.array([p["piecewise"]["first_mib"] for p in fit])
    a = np.vstack([np.ones_like(x), x]).T
    (intercept, slope), *_ = np.linalg.lstsq(a, y, rcond=None)
    assert intercept == pytest.approx(CG_EST_PIECEWISE_FIRST_MIB, abs=0.05)
    assert slope == pytest.approx(CG_EST_PIECEWISE_FIRST_PER_FORWARD, abs=0.005)
    assert np.abs(y - a @ np.array([intercept, slope])).max() < 30


def test_the_per_graph_rates_are_the_medians_per_layer() -> None:
    for moe in (False, True):
        group = [p for p in POINTS if p["config"]["moe"] is moe]
        assert len(group) == (8 if moe else 43)

        def layers(p: dict[str, Any]) -> float:
            return p["config"]["num_layers"] / p["pp"]

        pw = statistics.median(p["piecewise"]["per_graph_mib"] / layers(p) for p in group)
        full = statistics.median(p["full"]["per_graph_mib"] / layers(p) for p in group if p["full"])
        assert pw == pytest.approx(CG_EST_PIECEWISE_PER_GRAPH_LAYER_MIB[moe], abs=0.005)
        assert full == pytest.approx(CG_EST_FULL_PER_GRAPH_LAYER_MIB[moe], abs=0.005)


def test_the_first_full_capture_is_the_fa3_split_buffer() -> None:
    # FlashAttention 3 under full graphs: 32 splits × tokens × heads × head size × 4 bytes
    # (float32), plus a few MiB; every other backend (Triton; gpt-oss's sinks) only the few MiB
    assert FA3_CUDA_GRAPH_SPLITS == 32
    rest = []
    for p in POINTS:
        if not p["full"]:
            continue
        first = p["full"]["first_mib"]
        if _fa3(p):
            rest.append(first - _split_mib(p))
            assert 0 <= first - _split_mib(p) <= 14, p["model"]
        else:
            rest.append(first)
            assert first <= 8, p["model"]
    assert statistics.median(rest) == CG_EST_FULL_FIRST_MIB


# --- the ledger's function on the catalog's models ----------------------------------------------


def test_the_catalog_setups_follow_the_logged_estimates() -> None:
    rows = cudagraph_estimate_rows()  # the ledger's function on the catalog's models
    assert len(rows) >= 20
    errors = [est - p["estimate_gib"] for p, est in rows]
    # in sample: the rule's mean |error| over these setups (0.15 GiB over all 51)
    assert statistics.fmean(abs(e) for e in errors) < 0.15
    assert statistics.median(abs(e) for e in errors) < 0.1
    # the split buffer is the code's, whatever the fit
    for p, _ in rows:
        if p["full"] is not None and _fa3(p):
            shape = load_model(p["model"])
            top = logged_capture_top(p["full"]["graphs"])
            split = fa3_split_buffer_bytes(shape, H100.name, "bfloat16", top, p["tp"])
            assert split == pytest.approx(_split_mib(p) * MiB)


# --- what the structure changes ----------------------------------------------------------------


def _predict(gpu: str, version: str, **kw: Any) -> Any:
    g = get_gpu(gpu)
    s = EngineSettings(version=version, max_model_len=8192, **kw)
    return predict_startup(
        load_model("meta-llama/Llama-3.1-8B-Instruct"), g.total_bytes, g.name, 1, 1, s
    )


def llama_8b_estimate_mib(top_pw: int, n_pw: int, n_full: int, split: bool, top_full: int) -> float:
    """The oracle for Llama-3.1-8B (32 layers, H 4096, I 14336, 32 heads of 128, BF16)."""
    transient = top_pw * 2 * (3 * 14336 + FORWARD_HIDDEN_COPIES * 4096) / MiB
    first_pw = CG_EST_PIECEWISE_FIRST_MIB + CG_EST_PIECEWISE_FIRST_PER_FORWARD * transient
    first_full = CG_EST_FULL_FIRST_MIB + (32 * top_full * 32 * 128 * 4 / MiB if split else 0)
    per_pw, per_full = (
        r[0] * 32 for r in (CG_EST_PIECEWISE_PER_GRAPH_LAYER_MIB, CG_EST_FULL_PER_GRAPH_LAYER_MIB)
    )
    return max(first_pw, first_full) + (n_pw - 1) * per_pw + (n_full - 1) * per_full


def test_hopper_holds_the_split_buffer_and_ampere_does_not() -> None:
    # 0.21 defaults on a < 70 GiB GPU (api): max-num-seqs 256, 8,192 batched tokens: PIECEWISE
    # 51 sizes up to 512, FULL 35 up to 256 (089's log on an RTX A5000: "PIECEWISE=51
    # (largest=512), FULL=35 (largest=256)")
    a5000 = _predict("RTX-A5000", "0.21.0")
    assert a5000.settings.cg_in_budget
    assert a5000.ranks[0].cuda_graph == pytest.approx(
        llama_8b_estimate_mib(512, 51, 35, False, 256) * MiB, abs=2
    )
    h100 = _predict("H100-SXM-80GB", "0.21.0", max_num_seqs=256)
    assert h100.ranks[0].cuda_graph == pytest.approx(
        llama_8b_estimate_mib(512, 51, 35, True, 256) * MiB, abs=2
    )
    # the FULL first capture: 32 × 256 × 32 × 128 × 4 B = 128 MiB + 6, just above the first
    # PIECEWISE one (56.9 + 1.24 × 59 MiB ≈ 130); at 512 sequences it is 262 MiB and binds
    h512 = _predict("H100-SXM-80GB", "0.21.0", max_num_seqs=512)
    assert h512.ranks[0].cuda_graph == pytest.approx(
        llama_8b_estimate_mib(512, 51, 51, True, 512) * MiB, abs=2
    )
    assert (
        llama_8b_estimate_mib(512, 51, 51, True, 512)
        > llama_8b_estimate_mib(512, 51, 51, False, 512) + 120
    )


def test_few_graphs_keep_their_first_capture() -> None:
    # max-num-seqs 2: sizes up to min(2 × 2, 512) = 4, PIECEWISE [1, 2, 4], FULL [1, 2]. The
    # estimate is one first capture plus 2 + 1 increments, not 5/86 of the default's (the
    # count scaling before): ~75 MiB where that gave ~44
    few = _predict("RTX-4090", "0.21.0", max_num_seqs=2)
    assert few.ranks[0].cuda_graph == pytest.approx(
        llama_8b_estimate_mib(4, 3, 2, False, 2) * MiB, abs=2
    )
    assert few.ranks[0].cuda_graph > CG_EST_PIECEWISE_FIRST_MIB * MiB
    default = _predict("RTX-4090", "0.21.0")
    assert few.ranks[0].cuda_graph > default.ranks[0].cuda_graph * 5 / 86 + 10 * MiB


def test_lora_cases_add_increments_not_first_captures() -> None:
    # _get_lora_cases: [0, max_loras + 1]: every size twice, so 2n − 1 increments per mode
    base = _predict("H100-SXM-80GB", "0.21.0", max_num_seqs=512)
    lora = _predict("H100-SXM-80GB", "0.21.0", max_num_seqs=512, max_loras=1)
    diff = lora.ranks[0].cuda_graph - base.ranks[0].cuda_graph
    expected = (
        51 * 32 * (CG_EST_PIECEWISE_PER_GRAPH_LAYER_MIB[0] + CG_EST_FULL_PER_GRAPH_LAYER_MIB[0])
    )
    assert diff == pytest.approx(expected * MiB, abs=2)


@pytest.mark.parametrize(
    ("model", "why"),
    [
        ("openai/gpt-oss-20b", "attention sinks"),
        ("google/gemma-3-27b-it", "Gemma 3's image prefix: TRITON_ATTN"),
        ("google/gemma-4-26B-A4B", "head size 512 > 256"),
    ],
)
def test_no_split_buffer_where_vllm_does_not_run_fa3(model: str, why: str) -> None:
    shape = load_model(model)
    assert fa3_split_buffer_bytes(shape, H100.name, "bfloat16", 512, 1) == 0, why


def test_split_buffer_rules() -> None:
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct")
    assert fa3_split_buffer_bytes(llama, H100.name, "bfloat16", 512, 2) == 32 * 512 * 16 * 128 * 4
    assert fa3_split_buffer_bytes(llama, H100.name, "float32", 512, 1) == 0  # no FlashAttention
    assert fa3_split_buffer_bytes(llama, "A100-SXM-80GB", "bfloat16", 512, 1) == 0  # FA2
    assert fa3_split_buffer_bytes(llama, "B200-180GB", "bfloat16", 512, 1) == 0  # no FA3
    # MLA on Hopper: the latent value head (kv_lora_rank 512), DeepSeek-V3's 128 heads at TP8
    ds = load_model("deepseek-ai/DeepSeek-V3")
    assert fa3_split_buffer_bytes(ds, H100.name, "bfloat16", 512, 8) == 32 * 512 * 16 * 512 * 4


def test_the_estimate_is_vllm_s_only_where_it_is_subtracted() -> None:
    # 0.19 does not subtract it by default: the term stays the pool fitted on the same logs
    p19 = _predict("H100-SXM-80GB", "0.19.0")
    assert not p19.settings.cg_in_budget
    on = _predict("H100-SXM-80GB", "0.19.0", estimate_cuda_graphs=True)
    assert on.settings.cg_in_budget
    # 0.19.0 on an H100 (max-num-seqs 1024): 51 + 51 graphs up to 512. Logged: 0.84 GiB (260
    # MiB first FULL capture, 6 + 6 MiB a graph); the rule 0.79 (its median FULL rate gives
    # 4.8 MiB a graph for 32 layers)
    assert on.ranks[0].cuda_graph == pytest.approx(
        llama_8b_estimate_mib(512, 51, 51, True, 512) * MiB, abs=2
    )
    assert on.ranks[0].cuda_graph / 2**30 == pytest.approx(0.84, abs=0.06)
    assert math.isclose(
        p19.ranks[0].available_kv - on.ranks[0].available_kv, on.ranks[0].cuda_graph
    )


def test_gpt_oss_captures_up_to_1024() -> None:
    # GptOssForCausalLMConfig.verify_and_update_config (models/config.py, 0.12.0–0.28.0): the
    # largest capture size becomes 1024 when neither sizes nor a maximum is given. The grid up
    # to 1024 is [1, 2, 4] + 8..248 step 8 + 256..1024 step 16 = 3 + 31 + 49 = 83 sizes, as
    # the 0.19.0 gpt-oss-20b H100 logs print ("PIECEWISE ... (83-1)", "FULL ... (83-1)")
    oss = load_model("openai/gpt-oss-20b")
    logged = next(p for p in POINTS if p["model"] == "openai/gpt-oss-20b")
    assert logged["piecewise"]["graphs"] == logged["full"]["graphs"] == 83

    def notes(version: str, **kw: Any) -> list[str]:
        s = EngineSettings(version=version, max_model_len=8192, **kw)
        p = predict_startup(oss, H100.total_bytes, H100.name, 2, 1, s)
        return [n for n in p.notes if "CUDA graphs" in n]

    assert notes("0.19.0") == ["captures 83 PIECEWISE + 83 FULL CUDA graphs, largest 1024"]
    assert notes("0.21.0") == ["captures 83 PIECEWISE + 83 FULL CUDA graphs, largest 1024"]
    # the user's maximum or sizes win; vLLM before 0.12 (not read) keeps the default rule
    assert notes("0.21.0", max_cudagraph_capture_size=512) == [
        "captures 51 PIECEWISE + 51 FULL CUDA graphs, largest 512"
    ]
    assert "largest 8" in notes("0.21.0", cudagraph_capture_sizes=(1, 2, 4, 8))[0]
    assert "largest 512" in notes("0.11.0")[0]
    # other architectures keep 512
    llama = predict_startup(
        load_model("meta-llama/Llama-3.1-8B-Instruct"),
        H100.total_bytes,
        H100.name,
        1,
        1,
        EngineSettings(version="0.21.0", max_model_len=8192),
    )
    assert "captures 51 PIECEWISE + 51 FULL CUDA graphs, largest 512" in llama.notes


# --- FlashInfer's workspace in the first FULL capture ------------------------------------------


def test_which_setups_hold_flashinfers_workspace_in_the_estimate() -> None:
    # envs.VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE (0.19.0–0.28.0): 394 * 1024 * 1024
    assert FLASHINFER_WORKSPACE_BYTES == 394 * 1024 * 1024
    r20, r24 = (VllmRules.for_version(parse_version(v)) for v in ("0.20.0", "0.24.0"))
    qwen, gemma2 = load_model("Qwen/Qwen3-8B"), load_model("google/gemma-2-9b-it")

    def n(shape: Any, gpu: str, kv: str, rules: VllmRules = r24, groups: int = 1) -> int:
        return flashinfer_workspaces(shape, gpu, "bfloat16", kv, rules, groups)

    # FlashAttention 2 (Ampere, Ada, SM12x) reads 16-bit KV caches only: an fp8 cache goes to
    # FlashInfer (platforms/cuda.py::_get_backend_priorities: FLASH_ATTN, then FLASHINFER)
    for gpu in ("RTX-5090", "A100-SXM-80GB", "L40S", "RTX-3090"):
        assert n(qwen, gpu, "auto") == 0
        assert n(qwen, gpu, "fp8") == n(qwen, gpu, "fp8_e4m3") == 1
    # one per builder: a KV-cache group of standard attention each
    assert n(gemma2, "RTX-5090", "fp8", groups=2) == 2
    # FlashInfer takes no per-token-head cache (TRITON_ATTN)
    assert n(qwen, "RTX-3090", "int8_per_token_head") == 0
    # Hopper: FlashAttention 3 takes fp8; fp8_e5m2 from 0.22 goes to FlashInfer
    assert n(qwen, "H100-SXM-80GB", "fp8") == 0
    assert n(qwen, "H100-SXM-80GB", "fp8_e5m2", r20) == 0
    assert n(qwen, "H100-SXM-80GB", "fp8_e5m2", r24) == 1
    # SM100: FlashInfer first, its TRT-LLM decode workspace one module-wide buffer
    assert n(qwen, "B200-180GB", "auto") == n(gemma2, "B200-180GB", "auto", groups=2) == 1
    # gpt-oss's sinks: FlashInfer only on SM100; MLA, head size 80, Turing: never
    oss = load_model("openai/gpt-oss-20b")
    assert n(oss, "RTX-5090", "fp8", groups=2) == 0
    assert n(oss, "B200-180GB", "auto", groups=2) == 1
    assert n(load_model("deepseek-ai/DeepSeek-V2-Lite"), "RTX-5090", "fp8") == 0
    assert n(load_model("microsoft/phi-2"), "RTX-5090", "fp8") == 0
    assert n(qwen, "T4", "fp8") == 0
    # float32 activations: neither FlashAttention nor FlashInfer (TRITON_ATTN)
    assert flashinfer_workspaces(qwen, "RTX-5090", "float32", "fp8", r24, 1) == 0
    assert attention_backend(qwen, "RTX-5090", "float32", "fp8", r24) == "TRITON_ATTN"
    # the backend each case above runs (platforms/cuda.py::_get_backend_priorities)
    assert attention_backend(qwen, "RTX-5090", "bfloat16", "auto", r24) == "FLASH_ATTN"
    assert attention_backend(qwen, "RTX-5090", "bfloat16", "fp8", r24) == "FLASHINFER"
    assert attention_backend(qwen, "RTX-3090", "bfloat16", "int8_per_token_head", r24) == (
        "TRITON_ATTN"
    )
    assert attention_backend(qwen, "H100-SXM-80GB", "bfloat16", "fp8", r24) == "FLASH_ATTN"
    assert attention_backend(qwen, "B200-180GB", "bfloat16", "auto", r24) == "FLASHINFER"
    assert attention_backend(oss, "RTX-5090", "bfloat16", "auto", r24) == "TRITON_ATTN"
    assert attention_backend(load_model("microsoft/phi-2"), "B200-180GB", "bfloat16", "auto") == (
        "FLASH_ATTN"
    )
    # Gemma 3's image prefix: no FlashInfer (no mm_prefix support), FA3 neither: TRITON_ATTN,
    # and no workspace for its seven KV-cache groups
    g3 = load_model("google/gemma-3-4b-it")
    assert attention_backend(g3, "RTX-5090", "bfloat16", "fp8", r24) == "TRITON_ATTN"
    assert n(g3, "RTX-5090", "fp8", groups=7) == 0
    ds = load_model("deepseek-ai/DeepSeek-V2-Lite")
    assert attention_backend(ds, "H100-SXM-80GB", "bfloat16") is None  # MLA: its own backends


def test_the_flashinfer_boots_print_its_workspace_in_their_estimate() -> None:
    # out of sample (nothing fitted on them): five vLLM 0.20.0 boots of a Qwen3.6-35B-A3B NVFP4
    # on an RTX 5090 (FLASHINFER, fp8 KV; 99sono/DockerBuildFiles, each row's source_url)
    rows = cudagraph_validation_rows()
    assert len(rows) == 5
    for boot, ours in rows:
        assert boot["attention_backend"] == "FLASHINFER"
        assert ours == pytest.approx(boot["estimate_gib"], abs=0.05), boot["id"]
        # without the workspace the rule gives about 0.06-0.10 GiB: 0.3 GiB short
        assert ours - FLASHINFER_WORKSPACE_BYTES / GiB < boot["estimate_gib"] - 0.25
    # one graph of each mode: the estimate is the larger first capture, FULL's (the 6 MiB of
    # the H100 fit and the workspace); with a 16-bit cache (FlashAttention 2) PIECEWISE's
    shape, g = load_model("nvidia/Qwen3.6-35B-A3B-NVFP4"), get_gpu("RTX-5090")

    def cg(kv: str, version: str = "0.20.0") -> int:
        s = EngineSettings(
            version=version,
            max_model_len=65536,
            max_num_seqs=1,
            max_num_batched_tokens=8192,
            max_cudagraph_capture_size=1,
            kv_cache_dtype=kv,
            mm_limits=(("audio", 0), ("image", 0), ("video", 0)),
        )
        return int(predict_startup(shape, g.total_bytes, g.name, 1, 1, s).ranks[0].cuda_graph)

    assert cg("fp8_e4m3") == CG_EST_FULL_FIRST_MIB * MiB + FLASHINFER_WORKSPACE_BYTES
    assert cg("auto") < 100 * MiB
    # 0.19 does not subtract its estimate: the pool's term is the same for both caches
    assert cg("fp8_e4m3", "0.19.0") == cg("auto", "0.19.0")


def test_flashinfers_workspace_after_the_kv_cache_is_in_the_margin() -> None:
    # where vLLM's estimate does not hold FlashInfer's workspace, it is allocated after the KV
    # cache (V1: the real capture or the first decode step; V2: init_attn_backend, one shared
    # buffer): the ledger's margin carries it (engines/vllm.py::_post_kv_workspace)
    from inference_capacity.budget import build_ledger

    llama, qwen3 = load_model("meta-llama/Llama-3.1-8B-Instruct"), load_model("Qwen/Qwen3-8B")

    def rank0(shape: Any, gpu: str, **kw: Any) -> Any:
        g = get_gpu(gpu)
        p = predict_startup(
            shape, g.total_bytes, g.name, 1, 1, EngineSettings(max_model_len=8192, **kw)
        )
        return p, p.ranks[0]

    ws = FLASHINFER_WORKSPACE_BYTES
    # 0.19: the estimate is not in the budget
    p19, r19 = rank0(llama, "A100-SXM-80GB", version="0.19.0", kv_cache_dtype="fp8")
    assert r19.post_kv_workspace == ws
    [ledger] = build_ledger(p19, 0.0)
    item = next(i for i in ledger.items if i.name == "flashinfer_workspace")
    assert item.bytes == ws and not item.in_vllm_budget
    # 0.21: inside the estimate's first FULL capture, so not again after the KV cache
    _, r21 = rank0(llama, "A100-SXM-80GB", version="0.21.0", kv_cache_dtype="fp8")
    assert r21.post_kv_workspace == 0 and r21.cuda_graph > ws
    # ... unless no graph is captured (the first decode step allocates it)
    _, eager = rank0(
        llama, "A100-SXM-80GB", version="0.21.0", kv_cache_dtype="fp8", enforce_eager=True
    )
    assert eager.post_kv_workspace == ws and eager.cuda_graph == 0
    # the V2 runner (Qwen3 on a B200 at 0.24: FlashInfer first) shares one buffer
    p24, r24 = rank0(qwen3, "B200-180GB", version="0.24.0")
    assert p24.settings.v2_runner and r24.post_kv_workspace == ws
    # FlashAttention 3 on an H100: no FlashInfer workspace at all
    assert rank0(llama, "H100-SXM-80GB", version="0.21.0")[1].post_kv_workspace == 0
