"""Consumer Ada/Ampere cards in the catalog (hidden startup logs of issue 21 run on consumer
GPUs): memory as CUDA reports it and the datasheet arithmetic (bus width × data rate), each
from the source quoted in catalog/gpus.json."""

from __future__ import annotations

import pytest

from inference_capacity.hardware import GPU_PRODUCT_LABEL, get_gpu, gpu_from_node_labels
from inference_capacity.units import GB, gib

CASES = {
    # name: (alias, GFD product label or None, CUDA total, compute capability, bus bits, Gbps)
    "RTX-4080-SUPER": ("4080 super", "NVIDIA-GeForce-RTX-4080-SUPER", 15.60, (8, 9), 256, 23),
    "RTX-4070-Ti-SUPER": (
        "4070 ti super",
        "NVIDIA-GeForce-RTX-4070-Ti-SUPER",
        15.60,
        (8, 9),
        256,
        21,
    ),
    "RTX-4070-Ti": ("4070 ti", "NVIDIA-GeForce-RTX-4070-Ti", 11.70, (8, 9), 192, 21),
    "RTX-4070": ("rtx 4070", "NVIDIA-GeForce-RTX-4070", 11.70, (8, 9), 192, 21),
    "RTX-4060-Ti-16GB": ("4060 ti 16gb", None, 15.55, (8, 9), 128, 18),
    "RTX-3070": ("geforce rtx 3070", "NVIDIA-GeForce-RTX-3070", 7.78, (8, 6), 256, 14),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_consumer_catalog_entry(name: str) -> None:
    alias, label, total, cc, bits, gbps = CASES[name]
    gpu = get_gpu(alias)
    assert gpu.name == name
    assert gpu.total_bytes == gib(total)
    assert gpu.compute_capability == cc
    assert gpu.hbm_bandwidth_bytes_per_s == bits // 8 * gbps * GB
    assert gpu.supports_fp8 == (cc >= (8, 9))
    if label is not None:
        assert gpu_from_node_labels({GPU_PRODUCT_LABEL: label}) == gpu
    else:
        # GFD names the 8 GB and 16 GB RTX 4060 Ti alike: the label alone picks neither
        assert gpu_from_node_labels({GPU_PRODUCT_LABEL: "NVIDIA-GeForce-RTX-4060-Ti"}) is None
