"""The profile's non-torch memory at TP = 1 by GPU architecture (engines/vllm.py::non_torch):
Ampere GA10x and Ada cards (compute capability 8.6 / 8.9) take ``NON_TORCH_TP1_SM86_SM89``,
fitted on one printed log (``vllm-startup-175``, an A40 on vLLM 0.26.0); Hopper, datacenter
Blackwell, the A100 and the SM12x cards keep the general figure. The RTX 4090 boots of vLLM
0.27.1 (``vllm-startup-171``/``173``) are out of sample."""

from __future__ import annotations

import pytest

from inference_capacity.engines.versions import Era
from inference_capacity.engines.vllm import (
    NON_TORCH_TP1,
    NON_TORCH_TP1_SM86_SM89,
    EngineSettings,
    non_torch,
    predict_startup,
    v2_sampler_state_bytes,
)
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model
from inference_capacity.units import GiB, gib
from tests.startup_logs import startup_log

LLAMA = load_model("meta-llama/Llama-3.1-8B-Instruct")
QWEN = load_model("Qwen/Qwen3-8B")
FROM_011 = (Era.V1_NO_CG, Era.V1_CG, Era.V1_CONSUMED)


@pytest.mark.parametrize("era", FROM_011)
@pytest.mark.parametrize("cc", [(8, 6), (8, 9)])
def test_ampere_ga10x_and_ada_take_the_small_figure_at_tp1(era: Era, cc: tuple[int, int]) -> None:
    assert non_torch(era, 1, 1, compute_capability=cc) == gib(NON_TORCH_TP1_SM86_SM89)
    # a DP/EP communicator still adds its own share on top
    assert non_torch(era, 1, 1, 1, compute_capability=cc) > non_torch(
        era, 1, 1, compute_capability=cc
    )


@pytest.mark.parametrize("era", FROM_011)
@pytest.mark.parametrize("cc", [(8, 0), (9, 0), (10, 0), (10, 3), (12, 0), None])
def test_other_gpus_keep_the_general_figure(era: Era, cc: tuple[int, int] | None) -> None:
    assert non_torch(era, 1, 1, compute_capability=cc) == gib(NON_TORCH_TP1[era])


@pytest.mark.parametrize("era", [Era.V0, Era.V1_EARLY, Era.V1_PRE_NCCL])
def test_older_eras_are_not_changed(era: Era) -> None:
    assert non_torch(era, 1, 1, compute_capability=(8, 9)) == non_torch(era, 1, 1)


def test_only_tp1_without_pp() -> None:
    era = Era.V1_CG
    assert non_torch(era, 2, 1, pcie=True, compute_capability=(8, 9)) == non_torch(
        era, 2, 1, pcie=True
    )
    assert non_torch(era, 1, 2, compute_capability=(8, 6)) == non_torch(era, 1, 2)


def test_the_constant_is_the_a40_logs_printed_figure() -> None:
    """In sample: vllm-startup-175 prints '0.08 GiB for non-torch memory' (an A40, 0.26.0, TP1,
    its README and image pin), and the replay predicts that figure for it."""
    log = startup_log("vllm-startup-175")
    assert log["logged"]["non_torch_gib"] == NON_TORCH_TP1_SM86_SM89
    assert any("0.08 GiB for non-torch memory" in x for x in log["raw_lines"])
    g = get_gpu("A40")
    assert g.compute_capability == (8, 6)
    s = EngineSettings(version="0.26.0", max_model_len=4096, max_num_seqs=256)
    pred = predict_startup(LLAMA, g.total_bytes, g.name, 1, 1, s)
    assert pred.ranks[0].non_torch == gib(0.08)


def test_the_rtx_4090_warm_boot_out_of_sample() -> None:
    """vllm-startup-173 (Qwen3-8B, RTX 4090, 0.27.1, V2 runner, a warm compile cache): 0.27's
    summary line prints consumed memory 15.54 GiB with 15.27 of weights; the V2 sampler's state
    (from the code: 256 sequences × the 151,936-token vocabulary) is 0.16 of the 0.27 beyond
    the weights, which leaves ~0.11 of non-torch: the small figure puts the consumed memory and
    the KV cache within 1 % (the general 0.27 left KV 2.9 % under)."""
    log = startup_log("vllm-startup-173")
    lg = log["logged"]
    assert log["compile_cache"] == "warm"
    state = v2_sampler_state_bytes(151936, 256, 1)
    assert 0.15 <= state / GiB <= 0.17
    non_torch_left = lg["consumed_gib"] - lg["weights_gib"] - state / GiB
    assert abs(non_torch_left - NON_TORCH_TP1_SM86_SM89) < abs(
        non_torch_left - NON_TORCH_TP1[Era.V1_CONSUMED]
    )
    g = get_gpu("RTX-4090")
    s = EngineSettings(
        version="0.27.1",
        max_model_len=8192,
        gpu_memory_utilization=0.92,
    )
    pred = predict_startup(QWEN, int(round(log["total_gpu_memory_gib"] * GiB)), g.name, 1, 1, s)
    r = pred.ranks[0]
    assert pred.settings.max_num_seqs == 256  # vLLM's default on a < 70 GiB card
    assert abs(r.available_kv / GiB - lg["kv_cache_gib"]) / lg["kv_cache_gib"] <= 0.01
