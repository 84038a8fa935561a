"""NCCL of the data-parallel and expert-parallel groups (issue 21, gap N5): the communicators
vLLM's ``distributed/parallel_state.py::initialize_model_parallel`` (0.20.0/0.25.0) creates
before the init snapshot, counted per rank (engines/vllm.py::NCCL_GROUP_INIT_GIB says which
code path and that the sizes are assumed)."""

from __future__ import annotations

from inference_capacity.engines.versions import Era
from inference_capacity.engines.vllm import (
    NCCL_GROUP_INIT_GIB,
    NCCL_GROUP_PROFILE_GIB,
    EngineSettings,
    distributed_init_bytes,
    dp_ep_nccl_groups,
    non_torch,
    predict_startup,
)
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model
from inference_capacity.units import gib

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
