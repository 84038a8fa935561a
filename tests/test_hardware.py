"""Tests for the GPU catalog (inference_capacity.hardware)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from inference_capacity import hardware
from inference_capacity.hardware import (
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    Gpu,
    UnknownGpuError,
    custom_gpu,
    get_gpu,
    gpu_from_node_labels,
    list_gpus,
)
from inference_capacity.units import GiB as GIB

GPUS = list_gpus()
IDS = [gpu.name for gpu in GPUS]

# The memory figures the catalog must hold, in GiB to 2 decimals, as CUDA/ROCm logs them.
# Kept here independently of the catalog so a slip in either shows up.
EXPECTED_GIB = {
    "A10G": 22.20,
    "L4": 22.03,
    "L40S": 44.53,
    "A100-SXM-40GB": 39.56,
    "A100-PCIe-40GB": 39.56,
    "A100-SXM-80GB": 79.14,
    "A100-PCIe-80GB": 79.14,
    "H100-PCIe-80GB": 79.19,
    "H100-SXM-80GB": 79.19,
    "H100-NVL-94GB": 93.00,
    "H200-SXM-141GB": 139.80,
    "H20-96GB": 95.00,
    "H20-141GB": 139.80,
    "B200-180GB": 178.35,
    "RTX-3090": 23.58,
    "RTX-4090": 23.52,
    "RTX-A5000": 23.52,  # inferred from the RTX 4090 (the same NVML total, 24564 MiB)
    "T4": 14.56,
    "V100-16GB": 15.78,
    "V100-32GB": 31.75,
    "MI300X": 191.98,
    "RTX-5090": 31.40,
    "RTX-PRO-4500-Blackwell": 31.38,
    # issue 21: the 2026 Blackwell/Grace parts (sources in catalog/gpus.json)
    "RTX-5080": 15.47,
    "RTX-5070-Ti": 15.47,
    "RTX-PRO-6000-Blackwell": 95.59,
    "RTX-PRO-6000-Blackwell-Server": 95.01,
    "GH200-96GB": 95.00,
    "B300-288GB": 267.69,
    "GB200-186GB": 184.31,
    "GB300-288GB": 267.69,
    # workstation, data-centre and consumer cards that public vLLM logs run on (sources in
    # catalog/gpus.json)
    "RTX-A6000": 47.54,
    "RTX-6000-Ada": 47.50,  # ECC off (44.43 with ECC on: --gpu-memory-gib)
    "L40": 44.40,
    "A40": 44.34,
    "A10": 21.99,
    "A30": 23.53,
    "L20": 44.53,
    "H800-SXM-80GB": 79.19,  # inferred from the H100 SXM (the same NVML total, 81559 MiB)
    "A800-SXM-80GB": 79.33,
    "RTX-A4000": 15.61,
    "RTX-4000-Ada": 19.67,
    "RTX-3060": 11.63,
    "RTX-3080": 9.78,
    "RTX-2080-Ti": 10.76,
    # consumer Ada/Ampere cards (sources in catalog/gpus.json; tests/test_gpus_consumer.py)
    "RTX-4080-SUPER": 15.60,
    "RTX-4070-Ti-SUPER": 15.60,
    "RTX-4070-Ti": 11.70,
    "RTX-4070": 11.70,  # inferred from the RTX 4070 Ti (the same NVML total, 12282 MiB)
    "RTX-4060-Ti-16GB": 15.55,
    "RTX-3070": 7.78,
}

# Data-centre GDDR cards ship with ECC on, which reserves ~1/16 of the memory.
ECC_GDDR = {"A10G", "L4", "L40S", "T4", "L40", "A40", "A10", "L20"}
# Cards whose logged total sits below the 0.97 bound for a stated reason (issue 21):
# * 16 GB GeForce Blackwell (15.47 GiB logged): the driver's ~0.5 GiB reservation, the same
#   absolute amount as on the 32 GB RTX 5090 (31.40 GiB), is a larger share of 16 GiB;
# * Blackwell Ultra, "288 GB": three independent public B300 logs agree on 267.69 GiB (93 %
#   of 288 GiB, 99.8 % of 288e9 B); the figure is what CUDA reports, whatever the reason.
# * the RTX 3060 on a 580 driver (11.63 GiB of 12): the same ~0.37 GiB reservation as above;
LOWER_BOUND = {
    "RTX-5080": 0.96,
    "RTX-5070-Ti": 0.96,
    "B300-288GB": 0.92,
    "GB300-288GB": 0.92,
    "RTX-3060": 0.96,
}


def test_catalog_covers_the_required_cards() -> None:
    assert set(EXPECTED_GIB) == set(IDS)


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_memory_figure_matches_the_logged_value(gpu: Gpu) -> None:
    assert round(gpu.total_bytes / GIB, 2) == EXPECTED_GIB[gpu.name]
    assert isinstance(gpu.total_bytes, int)


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_source_quotes_the_figure_it_cites(gpu: Gpu) -> None:
    assert f"{gpu.total_bytes / GIB:.2f}" in gpu.source
    if gpu.source_kind == "inferred":
        assert gpu.source.startswith("INFERRED from ")
        assert _named_in_catalog(gpu.source.split()[2])
    if gpu.source_kind == "nvml":
        assert "not a CUDA log" in gpu.source


def _named_in_catalog(name: str) -> bool:
    return any(other.name == name for other in GPUS)


def test_h100_is_79_19_gib() -> None:
    assert round(get_gpu("H100").total_bytes / GIB, 2) == 79.19
    assert get_gpu("H100").name == "H100-SXM-80GB"


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_total_is_below_the_marketed_size(gpu: Gpu) -> None:
    # Marketed "80 GB" for GPU memory is binary: 80 GiB of HBM silicon (5 x 16 GiB).
    # CUDA reports the device minus the driver's reservation, so the right bound is
    # total < marketed * 2**30, NOT total < marketed * 1e9: 79.19 GiB is 85.03e9 bytes,
    # above 80e9. The lower bound catches a decimal-GB slip (80e9 bytes = 74.5 GiB,
    # ratio 0.93): HBM and consumer GDDR cards lose only ~1-2 %, while the data-centre
    # GDDR cards lose ~6 % more to the ECC carve-out, hence their looser bound.
    assert gpu.marketed_memory_gb is not None
    ratio = gpu.total_bytes / (gpu.marketed_memory_gb * GIB)
    lower = 0.90 if gpu.name in ECC_GDDR else LOWER_BOUND.get(gpu.name, 0.97)
    assert lower <= ratio < 1.0, ratio
    # And in decimal GB it is still at least 0.9x the marketed number.
    assert gpu.total_bytes > 0.9 * gpu.marketed_memory_gb * 1e9


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_resolves_by_name_aliases_and_labels(gpu: Gpu) -> None:
    for spelling in (gpu.name, *gpu.aliases, *gpu.node_label_products):
        assert get_gpu(spelling) is gpu, spelling
        assert get_gpu(spelling.upper()) is gpu, spelling
        assert get_gpu(f"  {spelling.replace('-', '_')} ") is gpu, spelling
    for product in gpu.node_label_products:
        assert gpu_from_node_labels({GPU_PRODUCT_LABEL: product}) is gpu


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_aliases_are_lower_case(gpu: Gpu) -> None:
    assert all(alias == alias.lower() for alias in gpu.aliases)


def test_spellings_are_unique_across_gpus() -> None:
    seen: dict[str, str] = {}
    for gpu in GPUS:
        for spelling in (gpu.name, *gpu.aliases, *gpu.node_label_products):
            key = spelling.lower().replace(" ", "-").replace("_", "-")
            assert seen.setdefault(key, gpu.name) == gpu.name, spelling
    assert len(IDS) == len(set(IDS))


def test_spaces_underscores_dashes_and_vendor_prefix_are_equivalent() -> None:
    h100 = get_gpu("H100-SXM-80GB")
    assert get_gpu("NVIDIA H100 80GB HBM3") is h100
    assert get_gpu("nvidia_h100__80gb_hbm3") is h100
    assert get_gpu("h100 80gb hbm3") is h100
    assert get_gpu("NVIDIA GeForce RTX 4090").name == "RTX-4090"
    assert get_gpu("NVIDIA RTX A5000").name == "RTX-A5000"
    assert get_gpu("Tesla T4").name == "T4"
    assert get_gpu("AMD Instinct MI300X").name == "MI300X"


def test_unknown_gpu_lists_close_matches_and_all_names() -> None:
    with pytest.raises(UnknownGpuError) as info:
        get_gpu("H100-SXM-80G")
    err = info.value
    assert isinstance(err, ValueError)
    assert "H100-SXM-80GB" in err.suggestions
    message = str(err)
    assert "Did you mean" in message and "H100-SXM-80GB" in message
    for gpu in GPUS:
        assert gpu.name in message
    assert "--gpu-memory-gib" in message


def test_ambiguous_short_name_is_refused_with_both_variants() -> None:
    with pytest.raises(UnknownGpuError) as info:
        get_gpu("a100")
    assert {"A100-SXM-40GB", "A100-SXM-80GB"} <= set(info.value.suggestions)


def test_unknown_gpu_without_near_match_has_no_suggestions() -> None:
    with pytest.raises(UnknownGpuError) as info:
        get_gpu("zzzz")
    assert info.value.suggestions == ()
    assert "Did you mean" not in str(info.value)


def test_node_labels() -> None:
    assert gpu_from_node_labels({}) is None
    assert gpu_from_node_labels({GPU_PRODUCT_LABEL: "NVIDIA-Unknown-X"}) is None
    assert gpu_from_node_labels({GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}) is get_gpu("h100")
    assert gpu_from_node_labels({GPU_PRODUCT_LABEL: "Tesla-T4"}) is get_gpu("t4")
    assert gpu_from_node_labels({GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}) is get_gpu(
        "A100-SXM-80GB"
    )
    # Time-slicing renames the product with -SHARED; the device is the same.
    shared = {GPU_PRODUCT_LABEL: "NVIDIA-A10G-SHARED"}
    assert gpu_from_node_labels(shared) is get_gpu("a10g")
    # A MIG slice is not the whole device.
    mig = {GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}
    assert gpu_from_node_labels(mig) is None


def test_node_labels_use_memory_only_to_pick_a_variant() -> None:
    h20 = {GPU_PRODUCT_LABEL: "NVIDIA-H20"}
    assert gpu_from_node_labels(h20).name == "H20-96GB"  # type: ignore[union-attr]
    small = gpu_from_node_labels({**h20, GPU_MEMORY_LABEL: "97871"})
    assert small is not None and small.name == "H20-96GB"
    large = gpu_from_node_labels({**h20, GPU_MEMORY_LABEL: "143771"})
    assert large is not None and large.name == "H20-141GB"
    garbage = gpu_from_node_labels({**h20, GPU_MEMORY_LABEL: "lots"})
    assert garbage is not None and garbage.name == "H20-96GB"
    # For a product with no variants the label changes nothing (NVML > CUDA total).
    h100 = gpu_from_node_labels(
        {GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3", GPU_MEMORY_LABEL: "81559"}
    )
    assert h100 is get_gpu("h100")


def test_custom_gpu_round_trip() -> None:
    gpu = custom_gpu(23.58)
    assert gpu.total_bytes == round(23.58 * 2**30)
    assert round(gpu.total_gib, 2) == 23.58
    assert gpu.name == "custom" and gpu.vendor == "unknown"
    assert gpu.hbm_bandwidth_bytes_per_s is None
    assert gpu.interconnect_bandwidth_bytes_per_s is None
    assert gpu.compute_capability is None
    assert gpu.source_kind == "user" and "23.58" in gpu.source
    assert custom_gpu(80, name="my-card").name == "my-card"
    assert custom_gpu(1.0).total_bytes == GIB


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_custom_gpu_rejects_nonsense(bad: float) -> None:
    with pytest.raises(ValueError):
        custom_gpu(bad)


def test_gpu_is_frozen() -> None:
    gpu = get_gpu("h100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        gpu.total_bytes = 0  # type: ignore[misc]


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_spec_fields_are_consistent(gpu: Gpu) -> None:
    assert gpu.hbm_bandwidth_bytes_per_s is not None and gpu.hbm_bandwidth_bytes_per_s > 1e11
    assert gpu.interconnect_bandwidth_bytes_per_s is not None
    if gpu.vendor == "nvidia":
        assert gpu.compute_capability is not None and gpu.gfx_arch is None
        major, minor = gpu.compute_capability
        assert gpu.supports_bf16 == (major >= 8)
        assert gpu.supports_fp8 == ((major, minor) >= (8, 9))
    else:
        assert gpu.vendor == "amd" and gpu.compute_capability is None and gpu.gfx_arch
        assert gpu.interconnect == "infinity-fabric"
    if gpu.source_kind != "inferred":
        assert gpu.source_kind in {"cuda", "rocm", "nvml"}


def test_datasheet_bandwidths() -> None:
    assert get_gpu("h100").hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert get_gpu("h200").hbm_bandwidth_bytes_per_s == pytest.approx(4.8e12)
    assert get_gpu("a100-80gb").hbm_bandwidth_bytes_per_s == pytest.approx(2.039e12)
    assert get_gpu("l4").hbm_bandwidth_bytes_per_s == pytest.approx(300e9)
    assert get_gpu("t4").hbm_bandwidth_bytes_per_s == pytest.approx(320e9)


# --- the catalog data file (catalog/gpus.json) -------------------------------------------------


def _catalog_doc() -> dict[str, Any]:
    path = Path(hardware.__file__).parent / "catalog" / hardware.CATALOG_FILE
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def test_catalog_file_is_the_catalog() -> None:
    doc = _catalog_doc()
    assert [e["name"] for e in doc["gpus"]] == IDS
    for entry in doc["gpus"]:
        assert entry["source"].strip(), entry["name"]  # every figure cites where it was seen
        if "dense_bf16_flops" in entry:
            assert hardware.dense_flops(get_gpu(entry["name"])) is not None


def test_catalog_file_is_packaged() -> None:
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert '"catalog/gpus.json"' in pyproject


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"total_gib": None}, r"H100-SXM-80GB\).*total_gib: wrong type"),
        ({"total_bytes": 1}, r"exactly one of total_gib and total_bytes"),
        ({"vendor": "intel"}, r"vendor 'intel'"),
        ({"hbm_bandwidth": "3.35 TB"}, r"hbm_bandwidth: '3.35 TB' is not a rate"),
        ({"dense_bf16_flops": "989 GB/s"}, r"dense_bf16_flops: '989 GB/s' is not a rate"),
        ({"source": " "}, r"source must cite"),
        ({"supports_fp8": 1}, r"supports_fp8: wrong type int"),
        ({"marketed_memory_gb": True}, r"marketed_memory_gb: wrong type bool"),
        ({"compute_capability": [9]}, r"compute_capability must be \[major, minor\]"),
        ({"colour": "green"}, r"unknown fields \['colour'\]"),
        ({"larger_memory_variant": "H999"}, r"'H999' is not in the catalog"),
        ({"sm_count": 0}, r"sm_count must be positive"),
        ({"sm_count_source": " "}, r"sm_count and sm_count_source \(where it was seen\)"),
        ({"sm_count": "132"}, r"sm_count: wrong type str"),
    ],
)
def test_a_malformed_catalog_entry_is_named(change: dict[str, Any], message: str) -> None:
    doc = _catalog_doc()
    entry = next(e for e in doc["gpus"] if e["name"] == "H100-SXM-80GB")
    entry.update(change)
    with pytest.raises(hardware.GpuCatalogError, match=r"gpus\.json: .*" + message):
        hardware._parse_catalog(doc)


def test_a_catalog_entry_without_a_field_or_twice_is_refused() -> None:
    doc = _catalog_doc()
    del doc["gpus"][0]["source"]
    with pytest.raises(hardware.GpuCatalogError, match=r"gpus\[0\] \(A10G\): missing 'source'"):
        hardware._parse_catalog(doc)
    doc = _catalog_doc()
    doc["gpus"].append(doc["gpus"][0])
    with pytest.raises(hardware.GpuCatalogError, match="duplicate name 'A10G'"):
        hardware._parse_catalog(doc)
    with pytest.raises(hardware.GpuCatalogError, match="a 'gpus' list"):
        hardware._parse_catalog([])


def test_find_gpu_is_get_gpu_without_the_error() -> None:
    from inference_capacity.hardware import find_gpu

    for spelling in ("H100-SXM-80GB", "nvidia geforce rtx 5090", "NVIDIA-H100-80GB-HBM3"):
        assert find_gpu(spelling) is get_gpu(spelling)
    # a name the catalog does not know: None, where get_gpu raises with close names
    assert find_gpu("H100-SXM-81GB") is None
    with pytest.raises(UnknownGpuError):
        get_gpu("H100-SXM-81GB")
