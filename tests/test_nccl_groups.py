"""NCCL of the data-parallel and expert-parallel groups (issue 21, gap N5): the communicators
vLLM's ``distributed/parallel_state.py::initialize_model_parallel`` (0.20.0/0.25.0) creates
before the init snapshot, counted per rank (engines/vllm.py::NCCL_GROUP_INIT_GIB says which
code path and that the sizes are assumed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.helpers import load_points

from inference_capacity.engines.versions import Era
from inference_capacity.engines.vllm import (
    NCCL_GROUP_INIT_GIB,
    NCCL_GROUP_PROFILE_GIB,
    EngineSettings,
    distributed_init_bytes,
    dp_ep_nccl_groups,
    non_torch,
    pcie_only,
    pre_snapshot_bytes,
    predict_startup,
)
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model
from inference_capacity.units import GiB, gib

H100 = get_gpu("H100-SXM-80GB")


def test_which_groups_exist() -> None:
    # dp = 1: the ep group of an MoE model spans the TP ranks (inside the TP fit)
    assert dp_ep_nccl_groups(1, moe=True) == 0
    # dp > 1: the dp group always; the ep group only for MoE models ("Don't create EP group
    # for dense models")
    assert dp_ep_nccl_groups(2, moe=False) == 1
    assert dp_ep_nccl_groups(4, moe=True) == 2


def test_terms_per_group() -> None:
    era = Era.V1_CG
    assert non_torch(era, 1, 1, 2) - non_torch(era, 1, 1) == gib(
        0.25 + 2 * NCCL_GROUP_PROFILE_GIB
    ) - gib(0.25)
    assert distributed_init_bytes(era, 1, 1, 2) == gib(2 * NCCL_GROUP_INIT_GIB)
    # V0 had no snapshot after distributed init, and no DP groups to count
    assert distributed_init_bytes(Era.V0, 1, 1, 2) == 0


def test_moe_dp2_ep_rank_pays_both_groups() -> None:
    shape = load_model("Qwen/Qwen3-30B-A3B")
    one = predict_startup(
        shape, H100.total_bytes, H100.name, 1, 1, EngineSettings(version="0.25.0")
    )
    dp2 = predict_startup(
        shape,
        H100.total_bytes,
        H100.name,
        1,
        1,
        EngineSettings(version="0.25.0", data_parallel=2, expert_parallel=True),
    )
    assert dp2.nccl_groups == 2
    r1, r2 = one.ranks[0], dp2.ranks[0]
    assert r2.non_torch - r1.non_torch == gib(0.25 + 2 * NCCL_GROUP_PROFILE_GIB) - gib(0.25)
    assert any("2 more NCCL group(s)" in n for n in dp2.notes)


def test_dense_dp2_pays_the_dp_group_only() -> None:
    shape = load_model("meta-llama/Llama-3.1-8B-Instruct")
    p = predict_startup(
        shape, H100.total_bytes, H100.name, 1, 1, EngineSettings(version="0.25.0", data_parallel=2)
    )
    assert p.nccl_groups == 1


# --- PCIe-only GPUs (engines/vllm.py::PCIE_TP_INIT_SCALE) ---------------------------------------

LOGS = Path(__file__).resolve().parent / "data" / "vllm-startup-logs.jsonl"


def test_which_gpus_are_pcie_only() -> None:
    assert pcie_only("RTX-4090") and pcie_only("H100-PCIe-80GB") and pcie_only("L40S")
    assert not pcie_only("H100-SXM-80GB") and not pcie_only("B200-180GB")
    # a GPU the catalog does not know keeps the NVLink fit (the larger terms)
    assert not pcie_only("NO-SUCH-GPU")


def test_pcie_tp4_terms_are_the_logged_ones() -> None:
    # vllm-startup-101 (vLLM issue #50722, 0.26.0, TP4, H100 assumed PCIe): 79.33 - 77.78 GiB in
    # use before the init snapshot, and a non-torch increase of 0.13 GiB in the profile
    log = next(p for p in load_points(LOGS) if p.id == "vllm-startup-101")
    lg = log.logged
    assert log.total_gpu_memory_gib is not None
    used = log.total_gpu_memory_gib - lg["free_at_startup_gib"]
    era = Era.V1_CG
    assert pre_snapshot_bytes(era, 4, 1, pcie=True) == pytest.approx(used * GiB, rel=0.005)
    # the TP = 1 figure: NCCL adds nothing measurable, the logged 0.13 is below it
    assert non_torch(era, 4, 1, pcie=True) == non_torch(era, 1, 1)
    assert lg["non_torch_gib"] * GiB <= non_torch(era, 4, 1, pcie=True)
    # the NVLink (HGX H100) fit is unchanged: 2.07 GiB before the snapshot at TP4, 2.12 non-torch
    assert pre_snapshot_bytes(era, 4, 1) == pytest.approx(gib(0.51 + 0.48 + 0.54 * 2), abs=2)
    assert non_torch(era, 4, 1) == gib(2.02 + 0.025 * 4)
    # the TP part keeps the fit's shape up to the TP4 point, scaled to it (TP2 0.68 GiB) ...
    nvlink = distributed_init_bytes(era, 2, 1)
    assert distributed_init_bytes(era, 2, 1, pcie=True) == pytest.approx(
        nvlink * 1.04 / 1.56, abs=2
    )
    # ... and stays there beyond four ranks (no custom all-reduce, the same NCCL peers a rank)
    tp4 = distributed_init_bytes(era, 4, 1, pcie=True)
    assert distributed_init_bytes(era, 8, 1, pcie=True) == tp4
    assert distributed_init_bytes(era, 8, 1) > distributed_init_bytes(era, 4, 1)  # NVLink grows
    # before 0.11 distributed init was measured in the profile, never before the snapshot
    assert distributed_init_bytes(Era.V1_PRE_NCCL, 4, 1, pcie=True) == 0


def test_a_pcie_tp2_plan_frees_the_nvlink_nccl_share() -> None:
    shape = load_model("meta-llama/Llama-3.1-8B-Instruct")
    settings = EngineSettings(version="0.25.0", max_model_len=8192)
    pcie_gpu, nvlink_gpu = get_gpu("H100-PCIe-80GB"), get_gpu("H100-SXM-80GB")
    assert pcie_gpu.total_bytes == nvlink_gpu.total_bytes  # the same 80 GB of HBM
    pcie = predict_startup(shape, pcie_gpu.total_bytes, pcie_gpu.name, 2, 1, settings)
    nvlink = predict_startup(shape, nvlink_gpu.total_bytes, nvlink_gpu.name, 2, 1, settings)
    assert pcie.pcie and not nvlink.pcie
    r_pcie, r_nvlink = pcie.ranks[0], nvlink.ranks[0]
    assert r_pcie.non_torch == gib(0.25) and r_nvlink.non_torch == gib(2.02 + 0.05)
    assert r_pcie.available_kv - r_nvlink.available_kv == r_nvlink.non_torch - r_pcie.non_torch


def test_eight_pcie_gpus_pass_the_start_check_vllm_passed() -> None:
    # vllm-startup-047 (vLLM PR #51590, 0.28.0): gpt-oss-120b on 8 x RTX PRO 4500 Blackwell
    # (31.38 GiB, PCIe-only) at --gpu-memory-utilization 0.95 started, so at most
    # 31.38 x 0.05 = 1.57 GiB was in use before the init snapshot. The TP part at 8 PCIe ranks is
    # the TP4 one (custom all-reduce off, the same NCCL peers): 0.51 + 1.04 GiB fits
    gpu = get_gpu("RTX-PRO-4500-Blackwell")
    assert pcie_only(gpu.name)
    settings = EngineSettings(version="0.28.0", gpu_memory_utilization=0.95, max_num_seqs=256)
    p = predict_startup(
        load_model("openai/gpt-oss-120b"), gpu.total_bytes, gpu.name, 8, 1, settings
    )
    assert p.starts, p.error
    used = pre_snapshot_bytes(Era.V1_CONSUMED, 8, 1, pcie=True)
    assert used <= gpu.total_bytes * 0.05
    assert used == pre_snapshot_bytes(Era.V1_CONSUMED, 4, 1, pcie=True)
    # at 0.96 it no longer fits: 31.38 x 0.04 = 1.26 GiB < 1.55
    tight = EngineSettings(version="0.28.0", gpu_memory_utilization=0.96, max_num_seqs=256)
    q = predict_startup(load_model("openai/gpt-oss-120b"), gpu.total_bytes, gpu.name, 8, 1, tight)
    assert not q.starts and q.error is not None and "Free memory" in q.error
