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

Pure: standard library only.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .units import GiB, MiB, gib

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

    @property
    def totalgib(self) -> float:
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


_TB = 1e12
_GBS = 1e9

# Datasheet figures used below (bandwidths in decimal units, as NVIDIA/AMD quote them):
# NVLink per GPU: V100 300 GB/s, A100 600 GB/s, H100/H200/H20 900 GB/s, B200 1.8 TB/s,
# H100 NVL bridge 600 GB/s. PCIe x16: Gen3 32 GB/s, Gen4 64 GB/s, Gen5 128 GB/s.
# MI300X: 7 Infinity Fabric links, 896 GB/s.

_CATALOG: tuple[Gpu, ...] = (
    Gpu(
        name="A10G",
        aliases=("a10g", "a10g-24gb", "nvidia a10g"),
        vendor="nvidia",
        total_bytes=gib(22.20),
        marketed_memory_gb=24,
        memory_type="GDDR6",
        hbm_bandwidth_bytes_per_s=600 * _GBS,
        compute_capability=(8, 6),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=False,
        interconnect="pcie",
        interconnect_bandwidth_bytes_per_s=64 * _GBS,
        node_label_products=("NVIDIA-A10G",),
        source_kind="cuda",
        source=(
            "XavierXiao/Dreambooth-Stable-Diffusion issue #18 (comment by schematical, "
            "2023-03-16, AWS g5.12xlarge = 4x A10G): 'CUDA out of memory. Tried to allocate "
            "20.00 MiB (GPU 0; 22.20 GiB total capacity; ...'. Rounded to the logged "
            "precision. Spread: 22.49 GiB in AUTOMATIC1111/stable-diffusion-webui issue "
            "#1259 (A10G, equal to the nvidia-smi total 23028 MiB seen in vllm issue #9373; "
            "other driver/OS). ECC is on by default on A10G."
        ),
    ),
    Gpu(
        name="L4",
        aliases=("l4", "l4-24gb", "nvidia l4"),
        vendor="nvidia",
        total_bytes=gib(22.03),
        marketed_memory_gb=24,
        memory_type="GDDR6",
        hbm_bandwidth_bytes_per_s=300 * _GBS,
        compute_capability=(8, 9),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=True,
        interconnect="pcie",
        interconnect_bandwidth_bytes_per_s=64 * _GBS,
        node_label_products=("NVIDIA-L4",),
        source_kind="cuda",
        source=(
            "ArcInstitute/evo2 issue #190 (picousse, 2025-11-14, 'Is a L4 GPU not enough'): "
            "'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.60 GiB. GPU 0 "
            "has a total capacity of 22.03 GiB of which 1.25 GiB is free.' Rounded to the "
            "logged precision. nvidia-smi total is 23034 MiB (modal-labs/modal-client PR "
            "#2797). ECC is on by default."
        ),
    ),
    Gpu(
        name="L40S",
        aliases=("l40s", "l40s-48gb", "nvidia l40s"),
        vendor="nvidia",
        total_bytes=gib(44.53),
        marketed_memory_gb=48,
        memory_type="GDDR6",
        hbm_bandwidth_bytes_per_s=864 * _GBS,
        compute_capability=(8, 9),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=True,
        interconnect="pcie",
        interconnect_bandwidth_bytes_per_s=64 * _GBS,
        node_label_products=("NVIDIA-L40S",),
        source_kind="cuda",
        source=(
            "Wan-Video/Wan2.1 issue #205 (nichellehouston, 2025-03-07, 'GPU:L40S 48GB'): "
            "'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 100.00 MiB. "
            "GPU 0 has a total capacity of 44.53 GiB of which 91.25 MiB is free.' Rounded "
            "to the logged precision. Spread: 44.42 GiB in stepfun-ai/Step-Video-T2V issue "
            "#8 (8x L40S). nvidia-smi total 46068 MiB (modal-labs/modal-client PR #2797). "
            "ECC is on by default."
        ),
    ),
    Gpu(
        name="A100-SXM-40GB",
        aliases=("a100-40gb", "a100-sxm4-40gb", "nvidia a100-sxm4-40gb", "a100-sxm-40g"),
        vendor="nvidia",
        total_bytes=gib(39.56),
        marketed_memory_gb=40,
        memory_type="HBM2",
        hbm_bandwidth_bytes_per_s=1555 * _GBS,
        compute_capability=(8, 0),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=False,
        interconnect="nvlink",
        interconnect_bandwidth_bytes_per_s=600 * _GBS,
        node_label_products=("NVIDIA-A100-SXM4-40GB",),
        source_kind="cuda",
        source=(
            "threestudio-project/threestudio issue #402 (pavankay, 2024-01-06; its "
            "nvidia-smi shows 'NVIDIA A100-SXM4-40GB', driver 535.104.05): 'CUDA out of "
            "memory. Tried to allocate 310.00 MiB. GPU 0 has a total capacty of 39.56 GiB "
            "of which 158.81 MiB is free.' Rounded to the logged precision. Spread: 39.50 "
            "GiB in TianheWu/CoSeR issue #10 (an A100 40GB, form factor not stated)."
        ),
    ),
    Gpu(
        name="A100-PCIe-40GB",
        aliases=("a100-pcie-40gb", "nvidia a100-pcie-40gb", "a100-40gb-pcie"),
        vendor="nvidia",
        total_bytes=gib(39.56),
        marketed_memory_gb=40,
        memory_type="HBM2",
        hbm_bandwidth_bytes_per_s=1555 * _GBS,
        compute_capability=(8, 0),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=False,
        interconnect="pcie",
        interconnect_bandwidth_bytes_per_s=64 * _GBS,
        node_label_products=("NVIDIA-A100-PCIE-40GB",),
        source_kind="inferred",
        source=(
            "INFERRED from A100-SXM-40GB (same 40 GB HBM2 configuration): 39.56 GiB as "
            "logged in threestudio-project/threestudio issue #402. No public CUDA log for a "
            "confirmed A100-PCIE-40GB was found; TianheWu/CoSeR issue #10 logs 'GPU 0 has a "
            "total capacity of 39.50 GiB' on an A100 40GB of unstated form factor."
        ),
    ),
    Gpu(
        name="A100-SXM-80GB",
        aliases=("a100-80gb", "a100-sxm4-80gb", "nvidia a100-sxm4-80gb", "a100-sxm-80g"),
        vendor="nvidia",
        total_bytes=gib(79.14),
        marketed_memory_gb=80,
        memory_type="HBM2e",
        hbm_bandwidth_bytes_per_s=2039 * _GBS,
        compute_capability=(8, 0),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=False,
        interconnect="nvlink",
        interconnect_bandwidth_bytes_per_s=600 * _GBS,
        node_label_products=("NVIDIA-A100-SXM4-80GB",),
        source_kind="cuda",
        source=(
            "lianqi1008/Control-GIC issue #6 (Chengbin-Liang, 2025-10-16, 'a single NVIDIA "
            "A100 card which has 80GB'): 'GPU 0 has a total capacity of 79.14 GiB of which "
            "58.59 GiB is free.' Form factor not stated. Rounded to the logged precision. "
            "Spread: 79.25 GiB (HiDream-ai/VAREdit issue #6, levihsu/OOTDiffusion issue "
            "#235), 79.35 GiB = 85198045184 bytes as an older-driver NVML total in "
            "hkust-adsl/kubernetes-scheduler-simulator pkg/type/open-gpu-share/utils/const.go."
        ),
    ),
    Gpu(
        name="A100-PCIe-80GB",
        aliases=("a100-pcie-80gb", "nvidia a100 80gb pcie", "a100-80gb-pcie"),
        vendor="nvidia",
        total_bytes=gib(79.14),
        marketed_memory_gb=80,
        memory_type="HBM2e",
        hbm_bandwidth_bytes_per_s=1935 * _GBS,
        compute_capability=(8, 0),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=False,
        interconnect="pcie",
        interconnect_bandwidth_bytes_per_s=64 * _GBS,
        node_label_products=("NVIDIA-A100-80GB-PCIe",),
        source_kind="inferred",
        source=(
            "INFERRED from A100-SXM-80GB (same 80 GB HBM2e configuration): 79.14 GiB as "
            "logged in lianqi1008/Control-GIC issue #6 ('GPU 0 has a total capacity of "
            "79.14 GiB'). No public CUDA log for a confirmed A100 80GB PCIe was found."
        ),
    ),
    Gpu(
        name="H100-PCIe-80GB",
        aliases=("h100-pcie", "h100-pcie-80gb", "nvidia h100 pcie"),
        vendor="nvidia",
        total_bytes=gib(79.19),
        marketed_memory_gb=80,
        memory_type="HBM2e",
        hbm_bandwidth_bytes_per_s=2.0 * _TB,
        compute_capability=(9, 0),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=True,
        interconnect="pcie",
        interconnect_bandwidth_bytes_per_s=128 * _GBS,
        node_label_products=("NVIDIA-H100-PCIe",),
        source_kind="inferred",
        source=(
            "INFERRED from H100-SXM-80GB (80 GiB of HBM on both): 79.19 GiB as logged "
            "'total_memory=79.19GiB' in jgchn/llm-d-planner "
            "accuracy/results/v0.19.0/logs/*h100-80gb*.log. No public CUDA log for a "
            "confirmed H100 PCIe was found."
        ),
    ),
    Gpu(
        name="H100-SXM-80GB",
        aliases=(
            "h100",
            "h100-80gb",
            "h100-sxm",
            "h100-sxm5-80gb",
            "h100-80gb-hbm3",
            "nvidia h100 80gb hbm3",
        ),
        vendor="nvidia",
        total_bytes=gib(79.19),
        marketed_memory_gb=80,
        memory_type="HBM3",
        hbm_bandwidth_bytes_per_s=3.35 * _TB,
        compute_capability=(9, 0),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=True,
        interconnect="nvlink",
        interconnect_bandwidth_bytes_per_s=900 * _GBS,
        node_label_products=("NVIDIA-H100-80GB-HBM3",),
        source_kind="cuda",
        source=(
            "jgchn/llm-d-planner @ d3121e059da88662db39a926a3ead964be97359b (head of "
            "llm-d-incubation/llm-d-planner PR #205), accuracy/results/v0.19.0/logs/"
            "meta-llama-llama-3-1-8b---h100-80gb--tp2pp1dp1--8192.log, vLLM 0.19.0: "
            "'worker init memory snapshot: torch_peak=0.01GiB, free_memory=77.66GiB, "
            "total_memory=79.19GiB'. Rounded to the logged precision. Spread across public "
            "logs: 79.18 GiB (llm-d/llm-d-benchmark config_explorer/"
            "empirical-vllm-memory-results.md), 79.22 GiB (vllm-project/vllm PR #10511, "
            "'total_gpu_memory     79.22GiB'), 79.10 GiB (huggingface/trl issue #2688). "
            "nvidia-smi total is 81559 MiB."
        ),
    ),
    Gpu(
        name="H100-NVL-94GB",
        aliases=("h100-nvl", "h100-nvl-94gb", "nvidia h100 nvl"),
        vendor="nvidia",
        total_bytes=gib(93.00),
        marketed_memory_gb=94,
        memory_type="HBM3",
        hbm_bandwidth_bytes_per_s=3.9 * _TB,
        compute_capability=(9, 0),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=True,
        interconnect="nvlink",
        interconnect_bandwidth_bytes_per_s=600 * _GBS,
        node_label_products=("NVIDIA-H100-NVL",),
        source_kind="cuda",
        source=(
            "ali-vilab/VACE issue #56 (comment by ugursoysal, 2025-05-16, 'H100 NVL 94GB "
            "VRAM (RunPod)'): 'CUDA out of memory. Tried to allocate 1.58 GiB. GPU 0 has a "
            "total capacity of 93.00 GiB of which 1.08 GiB is free.' Rounded to the logged "
            "precision."
        ),
    ),
    Gpu(
        name="H200-SXM-141GB",
        aliases=("h200", "h200-141gb", "h200-sxm", "nvidia h200"),
        vendor="nvidia",
        total_bytes=gib(139.80),
        marketed_memory_gb=141,
        memory_type="HBM3e",
        hbm_bandwidth_bytes_per_s=4.8 * _TB,
        compute_capability=(9, 0),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=True,
        interconnect="nvlink",
        interconnect_bandwidth_bytes_per_s=900 * _GBS,
        node_label_products=("NVIDIA-H200",),
        source_kind="cuda",
        source=(
            "suesie/grpocredit experiment_report_0427.md (vLLM v0.6.4.post1 on host "
            "h200-066-044): 'Memory profiling results: total_gpu_memory=139.80GiB "
            "initial_memory_usage=2.71GiB ...'. GPU identified by the host name. Rounded to "
            "the logged precision."
        ),
    ),
    Gpu(
        name="H20-96GB",
        aliases=("h20", "h20-96gb", "nvidia h20"),
        vendor="nvidia",
        total_bytes=gib(95.00),
        marketed_memory_gb=96,
        memory_type="HBM3",
        hbm_bandwidth_bytes_per_s=4.0 * _TB,
        compute_capability=(9, 0),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=True,
        interconnect="nvlink",
        interconnect_bandwidth_bytes_per_s=900 * _GBS,
        node_label_products=("NVIDIA-H20",),
        source_kind="cuda",
        source=(
            "modelscope/DiffSynth-Studio issue #1238 (xiaojun3619, 2026-01-29, 'H20 96G'): "
            "'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.00 MiB. "
            "GPU  has a total capacity of 95.00 GiB of which 6.50 MiB is free.' Rounded to "
            "the logged precision."
        ),
    ),
    Gpu(
        name="H20-141GB",
        aliases=("h20-141gb", "h20-hbm3e"),
        vendor="nvidia",
        total_bytes=gib(139.80),
        marketed_memory_gb=141,
        memory_type="HBM3e",
        hbm_bandwidth_bytes_per_s=4.8 * _TB,
        compute_capability=(9, 0),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=True,
        interconnect="nvlink",
        interconnect_bandwidth_bytes_per_s=900 * _GBS,
        # Both H20 variants report the product name "NVIDIA H20"; gpu_from_node_labels
        # tells them apart by nvidia.com/gpu.memory.
        node_label_products=(),
        source_kind="inferred",
        source=(
            "INFERRED from H200-SXM-141GB (same 141 GB HBM3e configuration): 139.80 GiB as "
            "logged 'total_gpu_memory=139.80GiB' in suesie/grpocredit "
            "experiment_report_0427.md. Consistent with vllm-project/recipes PR #12 "
            "(8x H20, available KV cache rose 48.66 -> 55.65 GiB for +0.05 "
            "gpu_memory_utilization, i.e. ~140 GiB per GPU). No direct log found."
        ),
    ),
    Gpu(
        name="B200-180GB",
        aliases=("b200", "b200-180gb", "nvidia b200", "hgx-b200"),
        vendor="nvidia",
        total_bytes=gib(178.35),
        marketed_memory_gb=180,
        memory_type="HBM3e",
        hbm_bandwidth_bytes_per_s=8.0 * _TB,
        compute_capability=(10, 0),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=True,
        interconnect="nvlink",
        interconnect_bandwidth_bytes_per_s=1800 * _GBS,
        node_label_products=("NVIDIA-B200",),
        source_kind="cuda",
        source=(
            "pytorch/ao PR #4002 'update b200 peak memory bandwidth' (danielvegamyhre, "
            "2026-03-05), cudaGetDeviceProperties dump: '=== Device 0: NVIDIA B200 === ... "
            "Total Global Memory: 178.35 GB' (GiB, labelled GB). PyTorch OOM messages 'GPU 0 "
            "has a total capacity of 178.35 GiB' appear in several public repositories. "
            "Rounded to the logged precision. The same PR measures 7.67 TB/s from the "
            "7680-bit bus; the datasheet figure 8 TB/s is kept here."
        ),
    ),
    Gpu(
        name="RTX-3090",
        aliases=("rtx-3090", "3090", "geforce rtx 3090", "nvidia geforce rtx 3090"),
        vendor="nvidia",
        total_bytes=gib(23.58),
        marketed_memory_gb=24,
        memory_type="GDDR6X",
        hbm_bandwidth_bytes_per_s=936 * _GBS,
        compute_capability=(8, 6),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=False,
        interconnect="pcie",
        interconnect_bandwidth_bytes_per_s=64 * _GBS,
        node_label_products=("NVIDIA-GeForce-RTX-3090",),
        source_kind="cuda",
        source=(
            "vllm-project/vllm issue #10517 (comment by kaspersiminski, 2024-12-02, RTX "
            "3090): 'Memory profiling results: total_gpu_memory=23.58GiB "
            "initial_memory_usage=15.34GiB ...'. Rounded to the logged precision. Same "
            "figure in vllm-project/vllm PR #14447 ('total_gpu_memory (23.58GiB)'). Older "
            "drivers report 23.69-23.70 GiB (NVML 24268 MiB)."
        ),
    ),
    Gpu(
        name="RTX-4090",
        aliases=("rtx-4090", "4090", "geforce rtx 4090", "nvidia geforce rtx 4090"),
        vendor="nvidia",
        total_bytes=gib(23.52),
        marketed_memory_gb=24,
        memory_type="GDDR6X",
        hbm_bandwidth_bytes_per_s=1008 * _GBS,
        compute_capability=(8, 9),
        gfx_arch=None,
        supports_bf16=True,
        supports_fp8=True,
        interconnect="pcie",
        interconnect_bandwidth_bytes_per_s=64 * _GBS,
        node_label_products=("NVIDIA-GeForce-RTX-4090",),
        source_kind="cuda",
        source=(
            "Soul-AILab/SoulX-FlashTalk issue #5 (comment by swizardlv, 2026-01-09, '4090 "
            "24G'): 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 "
            "GiB. GPU 0 has a total capacity of 23.52 GiB of which 1.90 GiB is free.' "
            "Rounded to the logged precision. Older drivers report more: 23.64 GiB "
            "(3DTopia/Phidias-Diffusion issue #8), 23.68 GiB (zai-org/CogVideo issue #36)."
        ),
    ),
    Gpu(
        name="T4",
        aliases=("t4", "t4-16gb", "tesla t4", "nvidia tesla t4"),
        vendor="nvidia",
        total_bytes=gib(14.56),
        marketed_memory_gb=16,
        memory_type="GDDR6",
        hbm_bandwidth_bytes_per_s=320 * _GBS,
        compute_capability=(7, 5),
        gfx_arch=None,
        supports_bf16=False,
        supports_fp8=False,
        interconnect="pcie",
        interconnect_bandwidth_bytes_per_s=32 * _GBS,
        node_label_products=("Tesla-T4", "NVIDIA-Tesla-T4"),
        source_kind="cuda",
        source=(
            "Zheng-Chong/CatVTON issue #133 (far3x, 2025-11-25, 'GCP, Tesla T4'): "
            "'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 36.00 GiB. GPU "
            "0 has a total capacity of 14.56 GiB of which 10.22 GiB is free.' Same figure "
            "in AlphaGPU/leetgpu-challenges issue #52 (Tesla T4). Rounded to the logged "
            "precision. Older drivers report 14.73-14.76 GiB (googlecolab/colabtools issue "
            "#3439, xinge008/Cylinder3D issue #109). ECC is on by default."
        ),
    ),
    Gpu(
        name="V100-16GB",
        aliases=("v100-16gb", "v100-sxm2-16gb", "tesla v100-sxm2-16gb"),
        vendor="nvidia",
        total_bytes=16944988160,
        marketed_memory_gb=16,
        memory_type="HBM2",
        hbm_bandwidth_bytes_per_s=900 * _GBS,
        compute_capability=(7, 0),
        gfx_arch=None,
        supports_bf16=False,
        supports_fp8=False,
        interconnect="nvlink",
        interconnect_bandwidth_bytes_per_s=300 * _GBS,
        node_label_products=("Tesla-V100-SXM2-16GB",),
        source_kind="nvml",
        source=(
            "NVML total, not a CUDA log: hkust-adsl/kubernetes-scheduler-simulator "
            'pkg/type/open-gpu-share/utils/const.go: \'"V100M16": int64(16944988160 / 1024 '
            '/ 1024), // 16160 MiB, "Tesla-V100-SXM2-16GB"\' (15.78 GiB). On the drivers '
            "of that era NVML and CUDA totals agreed (the same table's T4 figure 14.76 GiB "
            "matches PyTorch logs of the time); PyTorch logs '15.78 GiB total capacity' on "
            "16 GB V100s (e.g. googlecolab/colabtools issue #2001)."
        ),
    ),
    Gpu(
        name="V100-32GB",
        aliases=("v100-32gb", "v100-sxm2-32gb", "tesla v100-sxm2-32gb"),
        vendor="nvidia",
        total_bytes=34089205760,
        marketed_memory_gb=32,
        memory_type="HBM2",
        hbm_bandwidth_bytes_per_s=900 * _GBS,
        compute_capability=(7, 0),
        gfx_arch=None,
        supports_bf16=False,
        supports_fp8=False,
        interconnect="nvlink",
        interconnect_bandwidth_bytes_per_s=300 * _GBS,
        node_label_products=("Tesla-V100-SXM2-32GB",),
        source_kind="nvml",
        source=(
            "NVML total, not a CUDA log: hkust-adsl/kubernetes-scheduler-simulator "
            'pkg/type/open-gpu-share/utils/const.go: \'"V100M32": int64(34089205760 / 1024 '
            '/ 1024), // 32510 MiB, "Tesla-V100-SXM2-32GB"\' (31.75 GiB). Older-driver '
            "figure; current drivers may report slightly less."
        ),
    ),
    Gpu(
        name="MI300X",
        aliases=("mi300x", "amd instinct mi300x", "mi300x-192gb"),
        vendor="amd",
        total_bytes=201310208 * 1024,
        marketed_memory_gb=192,
        memory_type="HBM3",
        hbm_bandwidth_bytes_per_s=5.3 * _TB,
        compute_capability=None,
        gfx_arch="gfx942",
        supports_bf16=True,
        supports_fp8=True,
        interconnect="infinity-fabric",
        interconnect_bandwidth_bytes_per_s=896 * _GBS,
        node_label_products=(),
        source_kind="rocm",
        source=(
            "ROCm/rocm-examples issue #187 (rocminfo on an MI300X system): 'Segment: "
            "GLOBAL; FLAGS: COARSE GRAINED  Size: 201310208(0xbffc000) KB' = 206141652992 "
            "bytes = 191.98 GiB; PyTorch on ROCm logs the same total: 'HIP out of memory. "
            "Tried to allocate 3.25 GiB. GPU 0 has a total capacity of 191.98 GiB of which "
            "1.32 GiB is free.' (vllm-project/vllm issue #7951, 8x MI300X). vLLM on newer "
            "ROCm logs 191.69 GiB (vllm-project/router issue #265)."
        ),
    ),
)

# When GFD's product label cannot tell variants apart, nvidia.com/gpu.memory can:
# product-resolved GPU -> larger-memory variant with the same product name.
_LARGER_MEMORY_VARIANT: dict[str, str] = {"H20-96GB": "H20-141GB"}

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


def get_gpu(name: str) -> Gpu:
    """Look a GPU up by its name, an alias or a GFD product label value.

    Case-insensitive; spaces, underscores and dashes are equivalent and a leading
    "NVIDIA"/"Tesla"/"GeForce"/"AMD"/"Instinct" is ignored.
    """
    gpu = _INDEX.get(_key(name))
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
#: GPU has no BF16: V100, T4). Datasheets quote "with sparsity" figures at twice these.
_DENSE_BF16_FLOPS: dict[str, float] = {
    "A10G": 70e12,  # AWS G5: "up to 70 TFLOPS" FP16/BF16 tensor per A10G (dense)
    "L4": 121e12,  # NVIDIA L4 datasheet: 242 TFLOPS BF16 with sparsity
    "L40S": 362e12,  # NVIDIA L40S datasheet: 733 TFLOPS BF16 with sparsity (362.05 dense)
    "A100-SXM-40GB": 312e12,  # NVIDIA A100 datasheet: 312 TFLOPS BF16 dense
    "A100-PCIe-40GB": 312e12,
    "A100-SXM-80GB": 312e12,
    "A100-PCIe-80GB": 312e12,
    "H100-PCIe-80GB": 756e12,  # NVIDIA H100 datasheet: 1,513 TFLOPS BF16 with sparsity
    "H100-SXM-80GB": 989e12,  # NVIDIA H100 datasheet: 1,979 TFLOPS BF16 with sparsity
    "H100-NVL-94GB": 835e12,  # NVIDIA H100 NVL: 1,671 TFLOPS BF16 with sparsity
    "H200-SXM-141GB": 989e12,  # NVIDIA H200 datasheet: same compute as H100 SXM
    "H20-96GB": 148e12,  # NVIDIA H20: 148 TFLOPS BF16 dense
    "H20-141GB": 148e12,
    "B200-180GB": 2250e12,  # NVIDIA DGX B200: 4.5 PFLOPS BF16 with sparsity per GPU
    "RTX-3090": 71e12,  # GA102 whitepaper: 71 TFLOPS FP16 tensor (FP16 accumulate), dense
    "RTX-4090": 165e12,  # AD102 whitepaper: 165.2 TFLOPS FP16 tensor (FP16 accumulate), dense
    "T4": 65e12,  # NVIDIA T4 datasheet: 65 TFLOPS FP16 mixed precision
    "V100-16GB": 125e12,  # NVIDIA V100 SXM2 datasheet: 125 TFLOPS tensor
    "V100-32GB": 125e12,
    "MI300X": 1307e12,  # AMD MI300X datasheet: 1,307.4 TFLOPS BF16 dense
}


def dense_flops(gpu: Gpu) -> float | None:
    """Dense BF16 (or FP16) tensor peak in FLOP/s from the datasheet; None when unknown."""
    return _DENSE_BF16_FLOPS.get(gpu.name)
