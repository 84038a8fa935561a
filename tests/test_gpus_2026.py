"""The GPUs of 2026 in the catalog (issue 21): RTX 5080 / 5070 Ti, RTX PRO 6000 Blackwell, GH200,
B300, GB200, GB300. Memory as CUDA reports it and the datasheet figures, each from the source
quoted in catalog/gpus.json; the peaks are the datasheets' arithmetic shown here."""

from __future__ import annotations

import pytest

from inference_capacity.hardware import (
    GPU_PRODUCT_LABEL,
    get_gpu,
    gpu_from_node_labels,
    tensor_flops,
)
from inference_capacity.units import GB, TB, MiB, gib

CASES = {
    # name: (alias, GFD product label, CUDA total bytes, compute capability, HBM B/s, link B/s)
    "RTX-5070-Ti": (
        "5070 ti",
        "NVIDIA-GeForce-RTX-5070-Ti",
        gib(15.47),
        (12, 0),
        896 * GB,
        128 * GB,
    ),
    "RTX-PRO-6000-Blackwell": (
        "rtx pro 6000",
        "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",
        97886 * MiB,  # llama.cpp's cudaMemGetInfo total, MiB
        (12, 0),
        1792 * GB,
        128 * GB,
    ),
    # the Server Edition (the Kubernetes node's card) prints 0.58 GiB less: vLLM 0.27.1's
    # 'Free memory on device (94.05/95.01 GiB)' (kubesimplify/website, vllm-startup-167)
    "RTX-PRO-6000-Blackwell-Server": (
        "rtx pro 6000 blackwell server edition",
        "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        gib(95.01),
        (12, 0),
        1792 * GB,
        128 * GB,
    ),
    "GH200-96GB": ("gh200", "NVIDIA-GH200-480GB", gib(95.0), (9, 0), 4 * TB, 900 * GB),
    "B300-288GB": ("b300", "NVIDIA-B300-SXM6-AC", gib(267.69), (10, 3), 8 * TB, 1800 * GB),
    "GB200-186GB": ("gb200", "NVIDIA-GB200", gib(184.31), (10, 0), 8 * TB, 1800 * GB),
    "GB300-288GB": ("gb300", "NVIDIA-GB300", gib(267.69), (10, 3), 8 * TB, 1800 * GB),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_catalog_entry(name: str) -> None:
    alias, label, total, cc, hbm, link = CASES[name]
    gpu = get_gpu(alias)
    assert gpu.name == name
    assert gpu_from_node_labels({GPU_PRODUCT_LABEL: label}) == gpu
    assert gpu.total_bytes == total
    assert gpu.compute_capability == cc
    assert gpu.hbm_bandwidth_bytes_per_s == hbm
    assert gpu.interconnect_bandwidth_bytes_per_s == link


def test_datasheet_peaks_per_gpu() -> None:
    # DGX B300, 8 GPUs: BF16 36 PF sparse, FP8 72 PF sparse, FP4 108 PF dense
    b300 = get_gpu("b300")
    assert tensor_flops(b300, "bf16") == 36e15 / 8 / 2
    assert tensor_flops(b300, "fp8") == 72e15 / 8 / 2
    assert tensor_flops(b300, "fp4") == 108e15 / 8
    # GB200 NVL72, 72 GPUs, sparse: BF16 360 PF, FP8 720 PF, FP4 1,440 PF
    gb200 = get_gpu("gb200")
    assert tensor_flops(gb200, "bf16") == 360e15 / 72 / 2
    assert tensor_flops(gb200, "fp8") == 720e15 / 72 / 2
    assert tensor_flops(gb200, "fp4") == 1440e15 / 72 / 2
    # GB300 NVL72: FP4 1,080 PF dense over 72 GPUs
    assert tensor_flops(get_gpu("gb300"), "fp4") == 1080e15 / 72
    # GH200: the H100 SXM's Hopper tensor cores (no FP4: FP4 weights run at the FP8 peak)
    gh200 = get_gpu("gh200")
    assert tensor_flops(gh200, "fp8") == tensor_flops(gh200, "fp4") == 1979e12
    # RTX PRO 6000 Blackwell: the datasheet's 4,000 AI TOPS (FP4, sparse) halved for dense and
    # per precision step (FP4 → FP8 → BF16) ...
    pro = get_gpu("rtx pro 6000")
    assert tensor_flops(pro, "fp4") == 4000e12 / 2
    assert tensor_flops(pro, "fp8") == 4000e12 / 2 / 2
    assert tensor_flops(pro, "bf16") == 4000e12 / 2 / 4
    # ... and its Server Edition's at its 2,430 MHz max SM clock (aiconfigurator-core 0.12.0's
    # systems/rtx_pro_6000_server.yaml), the same ratios
    server = get_gpu("rtx pro 6000 blackwell server edition")
    assert tensor_flops(server, "fp4") == 1871.2e12
    assert tensor_flops(server, "fp8") == 935.6e12 == 1871.2e12 / 2
    assert tensor_flops(server, "bf16") == 467.8e12 == 935.6e12 / 2
    # GeForce: no dense peak published, none invented
    assert tensor_flops(get_gpu("5090"), "bf16") is None
