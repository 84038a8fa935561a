"""The TP all-reduce on PCIe-only GPUs (sizing/latency.py::allreduce_terms): vLLM's custom
kernel over peer access for a pair, NCCL's ring from four GPUs (custom_all_reduce.py turns its
kernel off on more than two PCIe-only GPUs), with a latency per ring hop and a share of the
one-way link fitted on aiconfigurator-core 0.12.0's per-op tables of the RTX PRO 6000 Server
and L40S nodes (sizing/perf.py; ``python -m benchmarks.latency_fit``)."""

from __future__ import annotations

import pytest

from inference_capacity.engines.vllm import EngineSettings, predict_startup
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model
from inference_capacity.sizing import perf
from inference_capacity.sizing.latency import allreduce_terms, build_latency_model

PRO = get_gpu("RTX-PRO-6000-Blackwell-Server")
H100 = get_gpu("H100-SXM-80GB")


def test_nvlink_keeps_its_custom_all_reduce_terms() -> None:
    for tp in (2, 4, 8):
        assert allreduce_terms(H100, tp) == (perf.ALLREDUCE_LATENCY_S, perf.LINK_EFFICIENCY)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_pcie_latency_grows_with_the_hops(tp: int) -> None:
    latency, share = allreduce_terms(PRO, tp)
    assert latency == pytest.approx(perf.PCIE_ALLREDUCE_HOP_S * (tp - 1))
    # the pair's share of the link at TP2, NCCL's ring's from four GPUs (a smaller one)
    assert share == (perf.PCIE_PAIR_LINK_EFFICIENCY if tp == 2 else perf.PCIE_RING_LINK_EFFICIENCY)
    assert perf.PCIE_RING_LINK_EFFICIENCY < perf.PCIE_PAIR_LINK_EFFICIENCY


def test_a_pcie_tp4_step_pays_its_ring() -> None:
    # Qwen3-235B-A22B-FP8 at TP4 on RTX PRO 6000 Server cards (vllm-startup-167's setup): 94
    # layers × 2 all-reduces × 3 hops; a token's 4,096 BF16 activations move 2·3/4 of their
    # bytes twice a layer over PCIe 5's 64 GB/s a direction at the ring's share
    shape = load_model("Qwen/Qwen3-235B-A22B-FP8")
    s = EngineSettings(version="0.27.1", max_model_len=32768, max_num_seqs=32)
    pred = predict_startup(shape, PRO.total_bytes, PRO.name, 4, 1, s)
    model = build_latency_model(shape, PRO, pred)
    assert model is not None
    (stage,) = model.stages
    assert stage.allreduce_s == pytest.approx(2 * 94 * 3 * perf.PCIE_ALLREDUCE_HOP_S)
    one_way = 128e9 / 2 * perf.PCIE_RING_LINK_EFFICIENCY
    assert stage.allreduce_s_per_token == pytest.approx(2 * 94 * 1.5 * 4096 * 2 / one_way)
