"""The fused-MoE kernel's buffer (engines/vllm.py::moe_workspace), from vLLM's code: one
WorkspaceManager buffer (v1/worker/workspace.py) holding the experts class's workspace13 (the
output aliases it) and workspace2 (fused_moe/modular_kernel.py::FusedMoEKernel.
_allocate_buffers; TritonExperts.workspace_shapes ``(M, k, max(N / 2, K))`` and ``(M, k,
max(N, K))``), read in the 0.18.0–0.28.0 sources. K, the hidden width, is never split, so the
buffer does not shrink with TP (the fitted ~16 × T × H × b / tp it replaces did)."""

from __future__ import annotations

import pytest

from inference_capacity.engines.vllm import (
    EngineSettings,
    consumed_bytes,
    moe_buffer_kind,
    moe_workspace,
    predict_startup,
    summary_line_split,
)
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model

QWEN235 = load_model("Qwen/Qwen3-235B-A22B-FP8")  # 128 experts, k 8, width 1536, hidden 4096
QWEN30 = load_model("Qwen/Qwen3-30B-A3B")  # k 8, width 768, hidden 2048
MIXTRAL = load_model("mistralai/Mixtral-8x7B-Instruct-v0.1")  # k 2, width 14336, hidden 4096
T = 8192


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_the_buffer_does_not_shrink_with_tp_where_the_hidden_width_dominates(tp: int) -> None:
    # Qwen3-235B: max(1536 / tp, 4096) + max(3072 / tp, 4096) = 8192 elements a routed row,
    # 8192 tokens × 8 experts × 8192 × 2 B = 1 GiB at every TP (vllm-startup-167, TP4 on RTX
    # PRO 6000s at 0.27.1: its consumed memory holds it)
    assert moe_workspace(QWEN235, T, tp, 2) == T * 8 * (4096 + 4096) * 2 == 2**30


def test_a_wide_expert_splits_its_width() -> None:
    # Mixtral at TP2: max(7168, 4096) + max(14336, 4096) = 21504 elements a routed row
    assert moe_workspace(MIXTRAL, T, 2, 2) == T * 2 * (7168 + 14336) * 2
    # at TP8 the hidden width takes over: max(1792, 4096) + max(3584, 4096)
    assert moe_workspace(MIXTRAL, T, 8, 2) == T * 2 * (4096 + 4096) * 2


def test_dense_and_monolithic_kernels_hold_none() -> None:
    assert moe_workspace(load_model("meta-llama/Llama-3.1-8B-Instruct"), T, 1, 2) == 0
    assert moe_workspace(QWEN30, T, 1, 2, "monolithic") == 0
    # FlashInfer's experts hold the (M, K) output alone
    assert moe_workspace(QWEN235, T, 4, 2, "output") == T * 4096 * 2


def test_the_backend_oracle_picks_the_shapes() -> None:
    # 0.18–0.28 fused_moe/oracle/fp8.py: FlashInfer TRTLLM first on datacenter Blackwell;
    # on Hopper block FP8 takes Triton for TP and FlashInfer CUTLASS with EP
    assert moe_buffer_kind(QWEN235, "B200-180GB", "marlin", ep=False) == "output"
    assert moe_buffer_kind(QWEN235, "H100-SXM-80GB", "marlin", ep=False) == "triton"
    assert moe_buffer_kind(QWEN235, "H100-SXM-80GB", "marlin", ep=True) == "output"
    # SM120 (RTX PRO 6000): neither family, Triton (vllm-startup-167's TritonExperts)
    assert moe_buffer_kind(QWEN235, "RTX-PRO-6000-Blackwell-Server", "marlin", ep=True) == "triton"
    # unquantized experts: Triton shapes everywhere (BF16 TRTLLM not selected by the ledger)
    assert moe_buffer_kind(QWEN30, "B200-180GB", "marlin", ep=False) == "triton"
    # gpt-oss's monolithic MXFP4 kernels
    assert moe_buffer_kind(
        load_model("openai/gpt-oss-120b"), "H200-SXM-141GB", "triton", False
    ) == ("monolithic")
    # a release before the oracle the ledger read (0.17): the Triton shapes
    r = _rank(QWEN235, "B200-180GB", "0.17.0", tp=4)
    assert r.moe_workspace == T * 8 * 8192 * 2  # type: ignore[attr-defined]
    assert _rank(QWEN235, "B200-180GB", "0.27.1", tp=4).moe_workspace == T * 4096 * 2  # type: ignore[attr-defined]


def _rank(shape: object, gpu: str, version: str, tp: int = 1, **kw: object) -> object:
    g = get_gpu(gpu)
    s = EngineSettings(version=version, max_model_len=8192, **kw)  # type: ignore[arg-type]
    return predict_startup(shape, g.total_bytes, g.name, tp, 1, s).ranks[0]  # type: ignore[arg-type]


def test_gpt_oss_mxfp4_by_backend() -> None:
    # gpt-oss's MXFP4 experts: TRTLLM on datacenter Blackwell and the OAI Triton kernels on
    # Hopper are FusedMoEExpertsMonolithic (no buffer); Marlin (Ampere, SM12x) is modular:
    # max(2880, 2880) + max(5760, 2880) elements a routed row, k 4
    oss = load_model("openai/gpt-oss-120b")
    assert _rank(oss, "B200-180GB", "0.28.0").moe_workspace == 0  # type: ignore[attr-defined]
    assert _rank(oss, "H200-SXM-141GB", "0.28.0").moe_workspace == 0  # type: ignore[attr-defined]
    # (the A100's default step is 2,048 tokens: EngineArgs.get_batch_defaults keeps it out of
    # the large tier)
    a100 = _rank(oss, "A100-SXM-80GB", "0.28.0")
    assert a100.moe_workspace == 2048 * 4 * (2880 + 5760) * 2  # type: ignore[attr-defined]


def test_data_parallel_gathers_the_batch_from_0_18() -> None:
    # DP without EP: the experts are split over TP × DP and, from 0.18 (naive_dp_ep.py's
    # all-gather, no chunking), see both DP ranks' 8,192 tokens; with EP each rank keeps its
    # experts whole; 0.17 and earlier are counted on the rank's own batch (not read)
    dp2 = _rank(QWEN30, "H100-SXM-80GB", "0.27.1", data_parallel=2)
    assert dp2.moe_workspace == 2 * T * 8 * (2048 + 2048) * 2  # type: ignore[attr-defined]
    ep = _rank(QWEN30, "H100-SXM-80GB", "0.27.1", tp=2, expert_parallel=True)
    assert ep.moe_workspace == T * 8 * (2048 + 2048) * 2  # type: ignore[attr-defined]
    old = _rank(QWEN30, "H100-SXM-80GB", "0.17.0", data_parallel=2)
    assert old.moe_workspace == T * 8 * (2048 + 2048) * 2  # type: ignore[attr-defined]


def test_vllm_0_27_prints_the_buffer_as_consumed_memory() -> None:
    # the buffer is allocated by the profile's forward and kept (v1/worker/workspace.py::
    # WorkspaceManager, 0.27.1), so 0.27's summary line counts it in consumed memory and not in
    # the peak it prints; the budget's sum is the same either way (vllm-startup-167: printed
    # peak 0.76 GiB, the ledger's activation item 1.27 with the 1 GiB buffer)
    pred = predict_startup(
        QWEN235,
        get_gpu("H100-SXM-80GB").total_bytes,
        "H100-SXM-80GB",
        4,
        1,
        EngineSettings(version="0.27.1", max_model_len=32768, max_num_seqs=32),
    )
    r = pred.ranks[0]
    consumed, peak = summary_line_split(r, pred.settings.cg_in_budget)
    graphs = r.cuda_graph if pred.settings.cg_in_budget else 0
    assert r.moe_workspace == 2**30
    assert consumed - r.moe_workspace == consumed_bytes(
        r.weights.total, r.non_torch, r.sampler_state, r.runner_buffers
    )
    assert peak == r.activation_peak - r.moe_workspace + graphs
    assert r.available_kv == r.requested - consumed - peak
    out = pred.to_json()
    assert out["consumed_gib"] == round(consumed / 2**30, 4)
    assert out["peak_activation_printed_gib"] == round(peak / 2**30, 4)
    # before 0.27 the line prints no consumed figure: the prediction has no such keys
    old = predict_startup(
        QWEN235,
        get_gpu("H100-SXM-80GB").total_bytes,
        "H100-SXM-80GB",
        4,
        1,
        EngineSettings(version="0.26.0", max_model_len=32768, max_num_seqs=32),
    ).to_json()
    assert "consumed_gib" not in old and "peak_activation_printed_gib" not in old
