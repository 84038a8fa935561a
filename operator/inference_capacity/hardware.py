"""GPU catalog: device memory as CUDA/ROCm reports it, plus the specs the sizer needs.

``Gpu.total_bytes`` is the figure the runtime reports for the whole device
(``torch.cuda.get_device_properties(0).total_memory`` / ``cudaMemGetInfo`` total,
what vLLM logs as ``total_gpu_memory`` and PyTorch as "GPU 0 has a total capacity
of X GiB"). It is NOT the marketed capacity and NOT the ``nvidia-smi`` total:

* marketed "80 GB" HBM is 80 GiB of silicon (5 stacks x 16 GiB), and CUDA reports
  about 1 % less (79.19 GiB on an H100 SXM) because the driver keeps a reservation;
* ``nvidia-smi`` (NVML) totals are a few hundred MiB larger than CUDA's on current
  drivers (H100: 81559 MiB = 79.65 GiB by nvidia-smi, 79.19 GiB by CUDA);
* data-centre GDDR cards (T4, A10G, L4, L40S) run with ECC on by default, which
  carves about 1/16 off the memory, so they report about 92 % of the marketed size.

The exact figure drifts with the driver version by a few tens of MiB (see the spread
noted in each ``source``). Every figure cites where it was seen; ``source_kind`` says
how direct that evidence is. Entries of kind ``"inferred"`` had no public log for that
exact SKU and copy the figure of the sibling SKU with the same memory configuration.

The catalog data lives in ``catalog/gpus.json`` (loaded and checked once, at import).
Pure: standard library only.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, get_args

from .units import GB, TB, GiB, MiB, gib

__all__ = [
    "Gpu",
    "UnknownGpuError",
    "GPU_PRODUCT_LABEL",
    "GPU_MEMORY_LABEL",
    "get_gpu",
    "list_gpus",
    "gpu_from_node_labels",
    "custom_gpu",
]


#: Node label set by NVIDIA GPU Feature Discovery (GFD): the NVML device name with
#: spaces replaced by dashes, e.g. "NVIDIA-H100-80GB-HBM3", "Tesla-T4".
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: GFD label with the NVML (nvidia-smi) total memory in MiB, e.g. "81559" on an H100.
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"

Vendor = Literal["nvidia", "amd", "unknown"]
Interconnect = Literal["nvlink", "pcie", "infinity-fabric", "unknown"]
SourceKind = Literal["cuda", "rocm", "nvml", "inferred", "user"]


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU model. ``total_bytes`` is what CUDA/ROCm reports, see the module doc."""

    name: str
    aliases: tuple[str, ...]
    vendor: Vendor
    total_bytes: int
    #: Marketed memory size in GB as on the datasheet ("80GB" H100, "141GB" H200).
    #: For HBM this "GB" is in fact GiB of silicon; None for a custom GPU.
    marketed_memory_gb: int | None
    #: "HBM2", "HBM2e", "HBM3", "HBM3e", "GDDR6", "GDDR6X" or "unknown".
    memory_type: str
    #: Peak device-memory bandwidth from the vendor datasheet; None when unknown.
    hbm_bandwidth_bytes_per_s: float | None
    #: CUDA compute capability (major, minor); None for AMD and for custom GPUs.
    compute_capability: tuple[int, int] | None
    #: AMD LLVM target (e.g. "gfx942"); None for NVIDIA.
    gfx_arch: str | None
    supports_bf16: bool
    #: Hardware FP8 tensor cores (Ada, Hopper, Blackwell, MI300).
    supports_fp8: bool
    interconnect: Interconnect
    #: GPU-to-GPU bandwidth per GPU (total, both directions) from the datasheet.
    interconnect_bandwidth_bytes_per_s: float | None
    #: Values of the ``nvidia.com/gpu.product`` node label GFD sets for this card.
    node_label_products: tuple[str, ...]
    source_kind: SourceKind
    #: Where the memory figure comes from: repository/issue and the quoted line.
    source: str
    #: Streaming multiprocessors (AMD: compute units) as CUDA/ROCm report them
    #: (``multi_processor_count``), with ``sm_count_source`` in the catalog; None when unknown.
    sm_count: int | None = None

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GiB


class UnknownGpuError(ValueError):
    """Raised by :func:`get_gpu` for a name that matches no known GPU."""

    def __init__(self, query: str, suggestions: tuple[str, ...], known: tuple[str, ...]):
        self.query = query
        self.suggestions = suggestions
        self.known = known
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(
            f"unknown GPU {query!r}.{hint} Known GPUs: {', '.join(known)}. "
            "For another card pass its CUDA-reported memory with --gpu-memory-gib."
        )


#: The catalog's data file: one entry per GPU with the fields of :class:`Gpu` (memory as
#: ``total_gib`` to the logged 2 decimals, or exact ``total_bytes``), the datasheet bandwidths
#: ("900 GB/s", "3.35 TB/s"), the dense BF16 peak ("989 TFLOP/s") and a ``source`` per figure.
CATALOG_FILE = "gpus.json"

_RATE = re.compile(r"(\d+(?:\.\d+)?) (GB/s|TB/s|TFLOP/s)")
_RATE_UNIT = {"GB/s": GB, "TB/s": TB, "TFLOP/s": 1e12}
_BANDWIDTH = ("GB/s", "TB/s")
_VENDORS = frozenset(get_args(Vendor))
_INTERCONNECTS = frozenset(get_args(Interconnect))
_SOURCE_KINDS = frozenset(get_args(SourceKind))
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "aliases": list,
    "vendor": str,
    "marketed_memory_gb": (int, type(None)),
    "memory_type": str,
    "hbm_bandwidth": (str, type(None)),
    "compute_capability": (list, type(None)),
    "gfx_arch": (str, type(None)),
    "supports_bf16": bool,
    "supports_fp8": bool,
    "interconnect": str,
    "interconnect_bandwidth": (str, type(None)),
    "node_label_products": list,
    "source_kind": str,
    "source": str,
}
_OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "total_gib": (int, float),
    "total_bytes": int,
    "dense_bf16_flops": str,
    "dense_bf16_flops_source": str,
    "dense_fp8_flops": str,
    "dense_fp8_flops_source": str,
    "dense_fp4_flops": str,
    "dense_fp4_flops_source": str,
    "larger_memory_variant": str,
    "sm_count": int,
    "sm_count_source": str,
}


class GpuCatalogError(ValueError):
    """The GPU catalog file is malformed; names the entry and the field."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{CATALOG_FILE}: {where}: {problem}")


@dataclass(frozen=True, slots=True)
class _Catalog:
    gpus: tuple[Gpu, ...]
    dense_flops: dict[str, float]
    larger_variant: dict[str, str]
    #: dense FP8 / FP4 tensor peaks by GPU name (only where the datasheet gives one)
    low_precision_flops: dict[str, dict[str, float]] = field(default_factory=dict)


def _rate(where: str, text: str | None, units: tuple[str, ...]) -> float | None:
    """ "900 GB/s" -> 9e11: the number times the unit, as the datasheet quotes it."""
    if text is None:
        return None
    m = _RATE.fullmatch(text)
    if m is None or m.group(2) not in units:
        raise GpuCatalogError(where, f"{text!r} is not a rate in {' or '.join(units)}")
    return float(m.group(1)) * _RATE_UNIT[m.group(2)]


def _strings(where: str, value: list[Any]) -> tuple[str, ...]:
    if not all(isinstance(v, str) and v for v in value):
        raise GpuCatalogError(where, "must be a list of non-empty strings")
    return tuple(value)


def _entry(raw: Any, index: int) -> tuple[Gpu, float | None, str | None, dict[str, float]]:
    if not isinstance(raw, dict):
        raise GpuCatalogError(f"gpus[{index}]", "must be an object")
    name = raw.get("name")
    at = f"gpus[{index}] ({name})" if isinstance(name, str) else f"gpus[{index}]"
    unknown = set(raw) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        raise GpuCatalogError(at, f"unknown fields {sorted(unknown)}")
    for key, kind in (*_REQUIRED.items(), *_OPTIONAL.items()):
        if key not in raw:
            if key in _REQUIRED:
                raise GpuCatalogError(at, f"missing {key!r}")
            continue
        value = raw[key]
        if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
            raise GpuCatalogError(at, f"{key}: wrong type {type(value).__name__}")
    if ("total_gib" in raw) == ("total_bytes" in raw):
        raise GpuCatalogError(at, "needs exactly one of total_gib and total_bytes")
    total = gib(raw["total_gib"]) if "total_gib" in raw else raw["total_bytes"]
    if total <= 0:
        raise GpuCatalogError(at, "memory must be positive")
    if raw["vendor"] not in _VENDORS:
        raise GpuCatalogError(at, f"vendor {raw['vendor']!r}: one of {sorted(_VENDORS)}")
    if raw["interconnect"] not in _INTERCONNECTS:
        raise GpuCatalogError(at, f"interconnect {raw['interconnect']!r}")
    if raw["source_kind"] not in _SOURCE_KINDS:
        raise GpuCatalogError(at, f"source_kind {raw['source_kind']!r}")
    if not raw["source"].strip():
        raise GpuCatalogError(at, "source must cite where the memory figure was seen")
    cc = raw["compute_capability"]
    if cc is not None and (
        len(cc) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in cc)
    ):
        raise GpuCatalogError(at, "compute_capability must be [major, minor]")
    sms = raw.get("sm_count")
    if sms is not None and sms <= 0:
        raise GpuCatalogError(at, "sm_count must be positive")
    if (sms is None) != (not str(raw.get("sm_count_source", "")).strip()):
        raise GpuCatalogError(at, "sm_count and sm_count_source (where it was seen) go together")
    gpu = Gpu(
        name=raw["name"],
        aliases=_strings(f"{at}.aliases", raw["aliases"]),
        vendor=raw["vendor"],
        total_bytes=total,
        marketed_memory_gb=raw["marketed_memory_gb"],
        memory_type=raw["memory_type"],
        hbm_bandwidth_bytes_per_s=_rate(f"{at}.hbm_bandwidth", raw["hbm_bandwidth"], _BANDWIDTH),
        compute_capability=(cc[0], cc[1]) if cc is not None else None,
        gfx_arch=raw["gfx_arch"],
        supports_bf16=raw["supports_bf16"],
        supports_fp8=raw["supports_fp8"],
        interconnect=raw["interconnect"],
        interconnect_bandwidth_bytes_per_s=_rate(
            f"{at}.interconnect_bandwidth", raw["interconnect_bandwidth"], _BANDWIDTH
        ),
        node_label_products=_strings(f"{at}.node_label_products", raw["node_label_products"]),
        source_kind=raw["source_kind"],
        source=raw["source"],
        sm_count=sms,
    )
    flops = _rate(f"{at}.dense_bf16_flops", raw.get("dense_bf16_flops"), ("TFLOP/s",))
    low: dict[str, float] = {}
    for dt in ("fp8", "fp4"):
        peak = _rate(f"{at}.dense_{dt}_flops", raw.get(f"dense_{dt}_flops"), ("TFLOP/s",))
        if peak is not None:
            if not raw.get(f"dense_{dt}_flops_source", "").strip():
                raise GpuCatalogError(at, f"dense_{dt}_flops needs dense_{dt}_flops_source")
            low[dt] = peak
    return gpu, flops, raw.get("larger_memory_variant"), low


def _parse_catalog(doc: Any) -> _Catalog:
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
        raise GpuCatalogError("top level", "must be an object with a 'gpus' list")
    gpus: list[Gpu] = []
    flops: dict[str, float] = {}
    larger: dict[str, str] = {}
    low_flops: dict[str, dict[str, float]] = {}
    for i, raw in enumerate(doc["gpus"]):
        gpu, peak, variant, low = _entry(raw, i)
        if low:
            low_flops[raw["name"]] = low
        if any(g.name == gpu.name for g in gpus):
            raise GpuCatalogError(f"gpus[{i}]", f"duplicate name {gpu.name!r}")
        gpus.append(gpu)
        if peak is not None:
            flops[gpu.name] = peak
        if variant is not None:
            larger[gpu.name] = variant
    names = {g.name for g in gpus}
    for small, big in larger.items():
        if big not in names:
            raise GpuCatalogError(small, f"larger_memory_variant {big!r} is not in the catalog")
    return _Catalog(tuple(gpus), flops, larger, low_flops)


def _load_catalog() -> _Catalog:
    text = resources.files("inference_capacity.catalog").joinpath(CATALOG_FILE).read_text()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GpuCatalogError("not JSON", str(exc)) from exc
    return _parse_catalog(doc)


_LOADED = _load_catalog()
_CATALOG: tuple[Gpu, ...] = _LOADED.gpus
# When GFD's product label cannot tell variants apart, nvidia.com/gpu.memory can:
# product-resolved GPU -> larger-memory variant with the same product name.
_LARGER_MEMORY_VARIANT: dict[str, str] = _LOADED.larger_variant

_VENDOR_PREFIXES = ("nvidia-", "tesla-", "geforce-", "amd-", "instinct-")


def _key(text: str) -> str:
    """Normalise a GPU spelling: case, spaces/underscores/dashes, vendor prefixes."""
    key = re.sub(r"[\s_\-]+", "-", text.strip().lower()).strip("-")
    stripped = True
    while stripped:
        stripped = False
        for prefix in _VENDOR_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key = key[len(prefix) :]
                stripped = True
    return key


def _build_index(gpus: tuple[Gpu, ...]) -> dict[str, Gpu]:
    index: dict[str, Gpu] = {}
    for gpu in gpus:
        for spelling in (gpu.name, *gpu.aliases, *gpu.node_label_products):
            key = _key(spelling)
            other = index.get(key)
            if other is not None and other.name != gpu.name:
                raise ValueError(
                    f"GPU spelling {spelling!r} is ambiguous: {other.name} and {gpu.name}"
                )
            index[key] = gpu
    return index


_INDEX: dict[str, Gpu] = _build_index(_CATALOG)
_BY_NAME: dict[str, Gpu] = {gpu.name: gpu for gpu in _CATALOG}


def list_gpus() -> tuple[Gpu, ...]:
    """All catalogued GPUs, in catalog order."""
    return _CATALOG


def find_gpu(name: str) -> Gpu | None:
    """:func:`get_gpu` without the error (and without its close-match search): None for a GPU
    the catalog does not know."""
    return _INDEX.get(_key(name))


def get_gpu(name: str) -> Gpu:
    """Look a GPU up by its name, an alias or a GFD product label value.

    Case-insensitive; spaces, underscores and dashes are equivalent and a leading
    "NVIDIA"/"Tesla"/"GeForce"/"AMD"/"Instinct" is ignored.
    """
    gpu = find_gpu(name)
    if gpu is not None:
        return gpu
    matches = difflib.get_close_matches(_key(name), list(_INDEX), n=8, cutoff=0.6)
    suggestions: list[str] = []
    for match in matches:
        candidate = _INDEX[match].name
        if candidate not in suggestions:
            suggestions.append(candidate)
    raise UnknownGpuError(name, tuple(suggestions), tuple(_BY_NAME))


def gpu_from_node_labels(labels: Mapping[str, str]) -> Gpu | None:
    """The catalogued GPU of a Node from its GFD labels, or None when unknown.

    Reads ``nvidia.com/gpu.product``. A ``-SHARED`` suffix (time-slicing) is ignored;
    MIG products (``...-MIG-1g.10gb``) give None because a slice is not the whole
    device. ``nvidia.com/gpu.memory`` (NVML MiB) only picks between variants that share
    a product name; it is never used as the memory figure, since NVML's total is
    larger than what CUDA reports.
    """
    product = labels.get(GPU_PRODUCT_LABEL, "").strip()
    if not product or "-MIG-" in product.upper():
        return None
    if product.upper().endswith("-SHARED"):
        product = product[: -len("-SHARED")]
    gpu = _INDEX.get(_key(product))
    if gpu is None:
        return None
    larger = _LARGER_MEMORY_VARIANT.get(gpu.name)
    memory_mib = _parse_mib(labels.get(GPU_MEMORY_LABEL))
    if larger is not None and memory_mib is not None:
        # NVML's total is above CUDA's, so anything well above the smaller variant's
        # CUDA total (10 % margin) is the larger variant.
        if memory_mib * MiB > gpu.total_bytes * 1.1:
            return _BY_NAME[larger]
    return gpu


def _parse_mib(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        mib = int(value.strip())
    except ValueError:
        return None
    return mib if mib > 0 else None


def custom_gpu(
    total_gib: float,
    name: str = "custom",
    *,
    supports_bf16: bool = True,
    supports_fp8: bool = False,
) -> Gpu:
    """A GPU known only by its memory, for ``--gpu-memory-gib X``.

    ``total_gib`` should be what CUDA reports (vLLM's ``total_gpu_memory``), not the
    marketed size. Bandwidth, compute capability and interconnect are unknown (None).
    """
    if not math.isfinite(total_gib) or total_gib <= 0:
        raise ValueError(f"total_gib must be a positive finite number, got {total_gib!r}")
    return Gpu(
        name=name,
        aliases=(),
        vendor="unknown",
        total_bytes=gib(total_gib),
        marketed_memory_gb=None,
        memory_type="unknown",
        hbm_bandwidth_bytes_per_s=None,
        compute_capability=None,
        gfx_arch=None,
        supports_bf16=supports_bf16,
        supports_fp8=supports_fp8,
        interconnect="unknown",
        interconnect_bandwidth_bytes_per_s=None,
        node_label_products=(),
        source_kind="user",
        source=f"user override: --gpu-memory-gib {total_gib}",
    )


# --- throughput specs for the decode/prefill latency model (sizing/latency.py) ----------------

#: Fraction of the datasheet HBM bandwidth that decode kernels (paged attention, GEMV-shaped
#: GEMMs) sustain: 70–85 % is what memory-bound kernels reach on A100/H100 (issue 14; e.g.
#: FlashMLA's 3,000 GB/s of the H800's 3,350 is 90 %, vLLM's paged attention lower); 0.80 is the
#: middle of that range. Overridable per plan (spec.hardware.hbmEfficiency, --hbm-efficiency).
DEFAULT_HBM_EFFICIENCY = 0.80
#: Fraction of dense peak FLOP/s that prefill GEMMs sustain (model FLOPs utilisation); an
#: assumed default (published prefill MFU on H100 is 40–60 %).
DEFAULT_COMPUTE_EFFICIENCY = 0.50

#: Dense (no sparsity) BF16 tensor-core peak from each vendor datasheet, FLOP/s (FP16 where the
#: GPU has no BF16: V100, T4); the catalog file cites the datasheet per GPU.
_DENSE_BF16_FLOPS: dict[str, float] = _LOADED.dense_flops


def sm100_family(compute_capability: tuple[int, int] | None) -> bool:
    """vLLM's ``is_device_capability_family(100)``: datacenter Blackwell, SM100/SM103 (B200,
    B300, GB200, GB300); not the SM12x cards (RTX 50xx, RTX PRO)."""
    return compute_capability is not None and compute_capability[0] == 10


def dense_flops(gpu: Gpu) -> float | None:
    """Dense BF16 (or FP16) tensor peak in FLOP/s from the datasheet; None when unknown."""
    return _DENSE_BF16_FLOPS.get(gpu.name)


def tensor_flops(gpu: Gpu, dtype: str) -> float | None:
    """Dense tensor peak for GEMM inputs of ``dtype`` ("bf16", "fp8", "fp4"), FLOP/s; a dtype
    the datasheet gives no peak for runs at the next wider one (FP4 → FP8 → BF16), as vLLM
    then dequantizes to it (Marlin-style weight-only kernels)."""
    low = _LOADED.low_precision_flops.get(gpu.name, {})
    if dtype == "fp4" and "fp4" in low:
        return low["fp4"]
    if dtype in ("fp4", "fp8") and "fp8" in low:
        return low["fp8"]
    return dense_flops(gpu)
