"""Fit the constants of sizing/perf.py on aiconfigurator-core's per-OPERATION tables only.

    pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp/aic
    unzip -q /tmp/aic/aiconfigurator_core-0.12.0-*.whl -d /tmp/aic/x
    pip install pandas pyarrow          # only this script reads parquet; not a dependency
    python -m benchmarks.latency_fit /tmp/aic/x/aiconfigurator_core/systems/data

Data (aiconfigurator-core 0.12.0, NVIDIA, Apache-2.0, wheel
``aiconfigurator_core-0.12.0-cp311-abi3-manylinux_2_28_x86_64.whl``, sha256
``aadc4aad0a00bf8a61c477c62bef43de479849c3aa0b1c3078068e08309eccc4``), systems ``h100_sxm``,
``h200_sxm`` and ``b200_sxm`` (the three GPUs of the validation points), under
``aiconfigurator_core/systems/data/<system>/``:

* ``gemm/vllm/0.24.0/gemm_perf.parquet``: vLLM's linear kernels, BF16
  (``torch.nn.functional.linear``) and per-tensor FP8 (``CutlassFP8ScaledMMLinearKernel``, what
  ``--quantization fp8`` runs), M 1..16384, N and K 1024..65536 → ``GEMM_EFFICIENCY``,
  ``GEMM_HALF_M``, ``GEMM_LAUNCH_S``; its block-FP8 rows are printed, not fitted (their
  small-M floor is host time: :func:`block_fp8_floors`).
* ``moe/vllm/0.24.0/moe_perf.parquet``: the fused-MoE kernel (balanced routing, no EP, MoE-TP
  1..8) of the MoE checkpoints' float formats: FP8 block (Qwen3-235B-A22B-FP8, MiniMax-M2.5:
  Triton on Hopper, FlashInfer-TRTLLM on B200), MXFP4 (gpt-oss: ``vllm_gptossmxfp4moe_*``)
  and, on B200, NVFP4 (FlashInfer-TRTLLM) → a (plateau, fixed latency) pair per GPU family:
  ``MOE_OTHER`` (h100_sxm and h200_sxm), ``MOE_BLACKWELL_DC`` (b200_sxm) (:func:`fit_moe`);
  its weight-only INT4 rows (``int4_wo``, Marlin, h200/b200: the Kimi-K2 shape) →
  ``MOE_WO_LAUNCH_S`` (shared) and a (bandwidth share, BF16-peak efficiency) pair per system:
  ``MOE_WO_OTHER`` (h200_sxm), ``MOE_WO_BLACKWELL_DC`` (b200_sxm).
* ``mla/vllm/0.24.0/mla_generation_module_perf.parquet``: the MLA attention module of a decode
  step (DeepSeek-V3, BF16 weights and KV; FLASH_ATTN_MLA on h200, FLASHINFER_MLA on b200) →
  ``MLA_MODULE_FIXED_S_OTHER`` (h200_sxm), ``MLA_MODULE_FIXED_S_SM100`` (b200_sxm).
* ``attention/vllm/0.24.0/context_attention_perf.parquet``: prefill attention (FA3 on Hopper,
  FlashInfer-TRTLLM prefill on B200), BF16 KV, no window, head_dim 64/128, prompts ≥ 1024 →
  ``ATTENTION_EFFICIENCY``; ``generation_attention_perf.parquet`` (one decode sequence, the
  shortest context) → ``ATTENTION_LAUNCH_S``; its FP8-KV rows of FlashAttention 3 (h100/h200:
  ``vllm_flash_attn_fa3``, head_dim 64/128, no window, contexts ≥ 128) →
  ``FA3_FP8_KV_DECODE_BYTES_PER_S`` (:func:`fit_fa3_fp8_decode`).
* ``comm/vllm/<v>/custom_allreduce_perf.parquet``: vLLM's custom all-reduce under CUDA graphs
  (``backend == vllm_graph``), BF16, TP 2/4/8, messages of 128 .. 512 Mi ELEMENTS (2 bytes
  each; a step's are hidden × tokens: up to 64 Mi), at the vLLM
  version nearest the validation runs' (0.14.0 on H100/H200, 0.19.0 on B200) →
  ``ALLREDUCE_LATENCY_S``, ``LINK_EFFICIENCY``.
* PCIe-only GPUs (``rtx_pro_6000_server``, ``l40s``): the pair's all-reduce vLLM runs at TP2
  (``comm/vllm/0.24.0`` and ``0.22.0/custom_allreduce_perf.parquet``, ``vllm_graph``) and, from
  TP4, NCCL's (``comm/nccl/2.29.2/nccl_perf.parquet``, ``all_reduce``, half: vLLM turns its
  custom all-reduce off on more than two PCIe-only GPUs, custom_all_reduce.py) of the RTX PRO
  6000 Server node, whose GPUs reach each other peer to peer → ``PCIE_ALLREDUCE_HOP_S``,
  ``PCIE_PAIR_LINK_EFFICIENCY``, ``PCIE_RING_LINK_EFFICIENCY`` (:func:`fit_allreduce_pcie`;
  the L40S node's TP4/8 NCCL rows, 5.1 / 1.5 GB/s, are printed: a node without peer access).
* ``quantize/vllm/0.24.0/scale_matrix_perf.parquet``: ``static_scaled_fp8_quant``, the smallest
  elementwise kernel vLLM runs in a layer; its latency at M ≤ 16 → ``SMALL_KERNEL_S``.

Each fit minimises the mean |log(model / measured)| of the op's latency with the op's term of
sizing/latency.py (the same formula, the catalog's peaks and the default HBM efficiency), by
coordinate descent from round values. No end-to-end point (``tests/data/latency-points.jsonl``,
aiconfigurator's ``silicon_sample.csv``) is read here. Prints the constants for perf.py.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inference_capacity.hardware import DEFAULT_HBM_EFFICIENCY, dense_flops, get_gpu, tensor_flops
from inference_capacity.sizing import perf

SYSTEMS = {"h100_sxm": "H100-SXM-80GB", "h200_sxm": "H200-SXM-141GB", "b200_sxm": "B200-180GB"}
ALLREDUCE_VERSION = {"h100_sxm": "0.14.0", "h200_sxm": "0.14.0", "b200_sxm": "0.19.0"}
#: (table dtype, kernel) -> (weight bytes per element, the model's GEMM dtype)
GEMM_KERNELS = {
    ("bfloat16", "torch.nn.functional.linear"): (2.0, "bf16"),
    ("fp8", "CutlassFP8ScaledMMLinearKernel"): (1.0, "fp8"),
}
#: MoE kernels by system: (moe_dtype, kernel) -> (weight bytes per element, model dtype)
MOE_KERNELS = {
    "h100_sxm": {
        ("fp8_block", "vllm_fp8moe_triton_tritonexperts"): (1.0, "fp8"),
        ("w4a16_mxfp4", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"): (
            0.5 + 1 / 32,
            "fp4",
        ),
    },
    "h200_sxm": {
        ("fp8_block", "vllm_fp8moe_triton_tritonexperts"): (1.0, "fp8"),
        ("w4a16_mxfp4", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"): (
            0.5 + 1 / 32,
            "fp4",
        ),
    },
    "b200_sxm": {
        ("fp8_block", "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic"): (1.0, "fp8"),
        (
            "w4a16_mxfp4",
            "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic",
        ): (0.5 + 1 / 32, "fp4"),
        (
            "nvfp4",
            "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4expertsmonolithic",
        ): (0.5 + 1 / 16, "fp4"),
    },
}
#: the float-experts pair each system's rows fit (sizing/perf.py::moe_terms)
MOE_FAMILIES = {
    "MOE_OTHER": ("h100_sxm", "h200_sxm"),
    "MOE_BLACKWELL_DC": ("b200_sxm",),
}
ATTN_KERNELS = {"vllm_flash_attn_fa3", "vllm_flashinfer_trtllmprefill"}


def _read(path: Path) -> Any:
    import pandas as pd  # type: ignore[import-untyped]  # benchmark-only

    return pd.read_parquet(path)


def descend(
    loss: Callable[[dict[str, float]], float],
    start: dict[str, float],
    caps: dict[str, float] | None = None,
) -> dict[str, float]:
    """Coordinate descent with multiplicative steps (each parameter stays positive)."""
    caps = caps or {}
    x = dict(start)
    best = loss(x)
    step = 2.0
    for _ in range(12):
        for name in x:
            for factor in (step, 1 / step):
                while True:
                    trial = dict(x)
                    trial[name] = x[name] * factor
                    if trial[name] > caps.get(name, math.inf):
                        break
                    val = loss(trial)
                    if val < best - 1e-7:
                        x, best = trial, val
                    else:
                        break
        step = math.sqrt(step)
    return x


def _hbm(gname: str) -> float:
    """The catalog GPU's achievable HBM bandwidth (the model's default efficiency)."""
    peak = get_gpu(gname).hbm_bandwidth_bytes_per_s
    assert peak, gname
    return float(peak) * DEFAULT_HBM_EFFICIENCY


def _logerr(pred: Any, meas: Any) -> float:
    return float(np.mean(np.abs(np.log(pred / meas))))


def fit_gemm(root: Path) -> dict[str, float]:
    """t = launch + max(weights+activations bytes / BW, 2MNK / (peak × eff(M)))."""
    rows: list[tuple[Any, ...]] = []
    for system, gname in SYSTEMS.items():
        gpu = get_gpu(gname)
        bw = _hbm(gname)
        d = _read(root / system / "gemm/vllm/0.24.0/gemm_perf.parquet")
        d = d[(d.n >= 1024) & (d.k >= 1024) & (d.m <= 16384)]
        for (dtype, kernel), (wb, mdt) in GEMM_KERNELS.items():
            s = d[(d.gemm_dtype == dtype) & (d.kernel_source == kernel)]
            m, n, k = (s[c].to_numpy(np.float64) for c in ("m", "n", "k"))
            nbytes = n * k * wb + m * k * wb + m * n * 2.0
            top = tensor_flops(gpu, mdt) or 0.0
            rows.append((m, 2 * m * n * k, nbytes / bw, np.full_like(m, top)))
            rows[-1] = (*rows[-1], s.latency.to_numpy(np.float64) * 1e-3)
    m, fl, mem, peak, meas = (np.concatenate([r[i] for r in rows]) for i in range(5))

    def loss(x: dict[str, float]) -> float:
        eff = x["GEMM_EFFICIENCY"] * m / (m + x["GEMM_HALF_M"])
        return _logerr(x["GEMM_LAUNCH_S"] + np.maximum(mem, fl / (peak * eff)), meas)

    x = descend(
        loss,
        {"GEMM_EFFICIENCY": 0.7, "GEMM_HALF_M": 64.0, "GEMM_LAUNCH_S": 4e-6},
        {"GEMM_EFFICIENCY": 1.0},
    )
    print(f"gemm: {len(meas)} rows, mean |log err| {loss(x):.3f}")
    return x


def block_fp8_floors(root: Path) -> None:
    """Why no constant is fitted on the ``fp8_block`` rows (sizing/perf.py): per kernel, the
    latency at the smallest M of each shape, across shapes whose weights span 1 to 1,000+ MB.
    A GPU cannot run those in one time; a timing loop's host time per call can."""
    for system in SYSTEMS:
        d = _read(root / system / "gemm/vllm/0.24.0/gemm_perf.parquet")
        d = d[d.gemm_dtype == "fp8_block"]
        for kernel, g in d.groupby("kernel_source"):
            first = g[g.m == g.groupby(["n", "k"]).m.transform("min")]
            mb = first.n * first.k / 2**20
            q = (first.latency * 1e3).quantile([0.1, 0.5, 0.9]).to_numpy()
            print(
                f"block-FP8 {system} {kernel}: {len(first)} shapes ({mb.min():.0f}-"
                f"{mb.max():.0f} MB) at their smallest M: p10/p50/p90 {q[0]:.0f} / {q[1]:.0f} / "
                f"{q[2]:.0f} us (host-bound; not fitted)"
            )


def _moe_table(root: Path, system: str) -> Any:
    """The system's fused-MoE rows the fits read: balanced routing, no EP, MoE-TP ≤ 8,
    ≤ 8,192 tokens."""
    d = _read(root / system / "moe/vllm/0.24.0/moe_perf.parquet")
    d = d[(d.moe_ep_size == 1) & (d.distribution == "balanced") & (d.moe_tp_size <= 8)]
    return d[d.num_tokens <= 8192]


def _moe_terms(s: Any) -> tuple[Any, Any, Any, Any]:
    """(tokens, top-k, parameters of one expert on a rank, experts touched) of MoE rows; the
    table's "balanced" routing spreads T × k picks evenly: min(E, T k) experts."""
    t, h, i, kk, e, tp = (
        s[c].to_numpy(np.float64)
        for c in ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size")
    )
    return t, kk, 3 * h * i / tp, np.minimum(e, t * kk)


def fit_moe(root: Path, half_m: float) -> dict[str, tuple[float, float]]:
    """t = launch + max(touched experts' bytes / BW, 2·3·H·I·k·T / (peak × eff(T k / touched))),
    touched = min(E, T k) (the table's balanced routing; the model's uniform-random routing
    touches E (1 − (1 − k/E)^T), the same at T k ≪ E and at T k ≫ E), eff(M) = plateau × M /
    (M + half_m): one (plateau, launch) pair per GPU family (:data:`MOE_FAMILIES`)."""
    out: dict[str, tuple[float, float]] = {}
    for name, systems in MOE_FAMILIES.items():
        parts: list[tuple[Any, ...]] = []
        for system in systems:
            gname = SYSTEMS[system]
            gpu = get_gpu(gname)
            bw = _hbm(gname)
            d = _moe_table(root, system)
            for (dtype, kernel), (wb, mdt) in MOE_KERNELS[system].items():
                s = d[(d.moe_dtype == dtype) & (d.kernel_source == kernel)]
                t, kk, per_expert, touched = _moe_terms(s)
                mem = touched * per_expert * wb / bw
                fl = 2 * per_expert * kk * t
                mm = t * kk / np.maximum(touched, 1e-9)
                top = tensor_flops(gpu, mdt) or 0.0
                meas = s.latency.to_numpy(np.float64) * 1e-3
                parts.append((mem, fl, mm, np.full_like(t, top), meas))
        mem, fl, mm, peak, meas = (np.concatenate([p[i] for p in parts]) for i in range(5))

        def loss(
            x: dict[str, float],
            mem: Any = mem,
            fl: Any = fl,
            mm: Any = mm,
            peak: Any = peak,
            meas: Any = meas,
        ) -> float:
            eff = x["plateau"] * mm / (mm + half_m)
            return _logerr(x["launch"] + np.maximum(mem, fl / (peak * eff)), meas)

        x = descend(loss, {"plateau": 0.3, "launch": 10e-6}, {"plateau": 1.0})
        print(f"moe {name} ({', '.join(systems)}): {len(meas)} rows, mean |log err| {loss(x):.3f}")
        out[name] = (round(x["plateau"], 3), round(x["launch"], 7))
    return out


#: the weight-only integer MoE kernel (Marlin) by system: (moe_dtype, kernel), weight bytes per
#: element (INT4 + a 2-byte scale per group of 32, the table's compressed-tensors WNA16 layout)
MOE_WO_KERNEL = ("int4_wo", "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts")
MOE_WO_BYTES = 0.5 + 2 / 32
MOE_WO_SYSTEMS = ("h200_sxm", "b200_sxm")  # the systems whose table has the kernel


#: the perf.py constant each system's (bandwidth share, efficiency) pair fits
MOE_WO_PAIRS = {"h200_sxm": "MOE_WO_OTHER", "b200_sxm": "MOE_WO_BLACKWELL_DC"}


def fit_moe_weight_only(root: Path) -> dict[str, Any]:
    """t = launch + max(touched experts' bytes / (BW × share), FLOPs / (BF16 peak × eff)), eff
    flat in M (Marlin dequantizes in the kernel: a small M is bound by the weight reads), on the
    Marlin rows (balanced routing, MoE-TP 1..8): the launch shared, the share and the efficiency
    per system (one pair for both leaves H200 20 % slow and B200 15 % fast)."""
    parts: dict[str, tuple[Any, ...]] = {}
    for system in MOE_WO_SYSTEMS:
        gname = SYSTEMS[system]
        bw, top = _hbm(gname), tensor_flops(get_gpu(gname), "bf16") or 0.0
        d = _moe_table(root, system)
        s = d[(d.moe_dtype == MOE_WO_KERNEL[0]) & d.kernel_source.str.startswith(MOE_WO_KERNEL[1])]
        t, kk, per_expert, touched = _moe_terms(s)
        mem = touched * per_expert * MOE_WO_BYTES / bw
        fl = 2 * per_expert * kk * t / top
        parts[system] = (mem, fl, s.latency.to_numpy(np.float64) * 1e-3)
    meas = np.concatenate([p[2] for p in parts.values()])

    def model(x: dict[str, float]) -> Any:
        return np.concatenate(
            [
                x["MOE_WO_LAUNCH_S"] + np.maximum(mem / x[f"{sy}_share"], fl / x[f"{sy}_eff"])
                for sy, (mem, fl, _) in parts.items()
            ]
        )

    def loss(x: dict[str, float]) -> float:
        return _logerr(model(x), meas)

    start: dict[str, float] = {"MOE_WO_LAUNCH_S": 20e-6}
    bounds: dict[str, float] = {}
    for sy in parts:
        start |= {f"{sy}_share": 0.8, f"{sy}_eff": 0.2}
        bounds |= {f"{sy}_share": 1.0, f"{sy}_eff": 1.0}
    x = descend(loss, start, bounds)
    print(f"weight-only MoE (Marlin): {len(meas)} rows, mean |log err| {loss(x):.3f}")
    out: dict[str, Any] = {"MOE_WO_LAUNCH_S": x["MOE_WO_LAUNCH_S"]}
    for sy, name in MOE_WO_PAIRS.items():
        out[name] = (round(x[f"{sy}_share"], 4), round(x[f"{sy}_eff"], 4))
    return out


#: the perf.py constant each system's MLA module fits
MLA_MODULE_CONSTANTS = {
    "h200_sxm": "MLA_MODULE_FIXED_S_OTHER",
    "b200_sxm": "MLA_MODULE_FIXED_S_SM100",
}


def fit_mla_module(root: Path) -> dict[str, float]:
    """t = fixed + (the module's weights + the batch's latent KV) / BW, per system, on the MLA
    generation-module rows (DeepSeek-V3, BF16 weights and KV, batch ≤ 256, context ≤ 32,768,
    1..128 heads a rank: TP 1..128 of its 128 heads). The module's BF16 weights on a rank with h
    heads: q_a 7168×1536 and kv_a 7168×576 (replicated), q_b 1536 × h·192, the absorbed kv_b
    512 × h·256, o_proj h·128 × 7168; the latent KV 576 elements a token."""
    out: dict[str, float] = {}
    for system, name in MLA_MODULE_CONSTANTS.items():
        bw = _hbm(SYSTEMS[system])
        d = _read(root / system / "mla/vllm/0.24.0/mla_generation_module_perf.parquet")
        d = d[
            (d.kv_cache_dtype == "bfloat16")
            & (d.model == "deepseek-ai/DeepSeek-V3")
            & (d.step <= 32768)
            & (d.batch_size <= 256)
        ]
        h, b, ctx = (d[c].to_numpy(np.float64) for c in ("num_heads", "batch_size", "step"))
        weights = 2 * (7168 * 1536 + 1536 * h * 192 + 7168 * 576 + 512 * h * 256 + h * 128 * 7168)
        reads = (weights + b * ctx * 576 * 2) / bw
        meas = d.latency.to_numpy(np.float64) * 1e-3

        def loss(x: dict[str, float], reads: Any = reads, meas: Any = meas) -> float:
            return _logerr(x["F"] + reads, meas)

        x = descend(loss, {"F": 30e-6})
        print(f"MLA module ({system}): {len(meas)} rows, mean |log err| {loss(x):.3f}")
        out[name] = x["F"]
    return out


def fit_attention(root: Path) -> dict[str, float]:
    """Prefill: t = 4 × heads × head_dim × (isl / 2) × isl × batch / (BF16 peak × eff) (the
    model's FLOPs: every prompt token attends to its mean causal position); decode floor."""
    parts = []
    floors = []
    for system, gname in SYSTEMS.items():
        gpu = get_gpu(gname)
        bf16 = dense_flops(gpu) or 0.0
        base = root / system / "attention/vllm/0.24.0"
        d = _read(base / "context_attention_perf.parquet")
        d = d[
            d.kernel_source.isin(ATTN_KERNELS)
            & (d.kv_cache_dtype == "bfloat16")
            & (d.window_size == 0)
            & d.head_dim.isin([64, 128])
            & (d.isl >= 1024)
        ]
        fl = (
            4.0
            * d.num_heads.to_numpy(np.float64)
            * d.head_dim.to_numpy(np.float64)
            * d.isl.to_numpy(np.float64) ** 2
            / 2.0
            * d.batch_size.to_numpy(np.float64)
        )
        parts.append((fl / bf16, d.latency.to_numpy(np.float64) * 1e-3))
        g = _read(base / "generation_attention_perf.parquet")
        g = g[(g.batch_size == 1) & (g.kv_cache_dtype == "bfloat16") & (g.window_size == 0)]
        g = g[g.step == g.step.min()]
        floors.append(float(np.median(g.latency.to_numpy(np.float64))) * 1e-3)
    t_peak, meas = (np.concatenate([p[i] for p in parts]) for i in range(2))

    def loss(x: dict[str, float]) -> float:
        return _logerr(t_peak / x["ATTENTION_EFFICIENCY"], meas)

    x = descend(loss, {"ATTENTION_EFFICIENCY": 0.5}, {"ATTENTION_EFFICIENCY": 1.0})
    print(f"context attention: {len(meas)} rows, mean |log err| {loss(x):.3f}")
    x["ATTENTION_LAUNCH_S"] = float(np.median(floors))
    print(f"decode attention floor (median of {len(floors)} systems): {floors}")
    return x


def fit_fa3_fp8_decode(root: Path) -> dict[str, float]:
    """FlashAttention 3's decode over an FP8 KV cache (Hopper): t = ATTENTION_LAUNCH_S + the
    KV bytes (batch × context × KV heads × head_dim × 2 × 1 byte) / one read rate shared by
    H100 and H200. The BF16 rows of the same table read at 0.79–0.89 of the datasheet
    bandwidth (the model's default 0.8 holds), the FP8 ones at 0.61 (H100) and 0.45 (H200): about
    the same bytes per second on both, a kernel bound, not the HBM's share."""
    parts = []
    for system in ("h100_sxm", "h200_sxm"):
        g = _read(root / system / "attention/vllm/0.24.0/generation_attention_perf.parquet")
        g = g[
            (g.kernel_source == "vllm_flash_attn_fa3")
            & (g.kv_cache_dtype == "fp8")
            & (g.window_size == 0)
            & g.head_dim.isin([64, 128])
            & (g.step >= 127)
        ]
        kv = (
            g.batch_size.to_numpy(np.float64)
            * (g.step.to_numpy(np.float64) + 1.0)
            * g.num_key_value_heads.to_numpy(np.float64)
            * g.head_dim.to_numpy(np.float64)
            * 2.0
        )
        parts.append((kv, g.latency.to_numpy(np.float64) * 1e-3))
    kv, meas = (np.concatenate([p[i] for p in parts]) for i in range(2))

    def loss(x: dict[str, float]) -> float:
        rate = x["FA3_FP8_KV_DECODE_TBPS"] * 1e12
        return _logerr(perf.ATTENTION_LAUNCH_S + kv / rate, meas)

    x = descend(loss, {"FA3_FP8_KV_DECODE_TBPS": 2.0}, {})
    print(f"FA3 decode, FP8 KV: {len(meas)} rows, mean |log err| {loss(x):.3f}")
    return {"FA3_FP8_KV_DECODE_BYTES_PER_S": x["FA3_FP8_KV_DECODE_TBPS"] * 1e12}


def fit_allreduce(root: Path) -> dict[str, float]:
    """t = latency + 2 (tp − 1)/tp × bytes / (one-direction link × efficiency)."""
    parts = []
    for system, gname in SYSTEMS.items():
        gpu = get_gpu(gname)
        assert gpu.interconnect_bandwidth_bytes_per_s, gname
        link = gpu.interconnect_bandwidth_bytes_per_s / perf.LINK_DIRECTIONS
        v = ALLREDUCE_VERSION[system]
        d = _read(root / system / f"comm/vllm/{v}/custom_allreduce_perf.parquet")
        d = d[d.backend == "vllm_graph"]
        tp = d.num_gpus.to_numpy(np.float64)
        # message_size counts ELEMENTS, not bytes: aiconfigurator queries the table with
        # tokens × hidden (sdk/models/gpt.py, ``ops.CustomAllReduce(name, layers, h, tp)``;
        # sdk/perf_database.py, ``_factor_message_size``: "an element count"), BF16 here
        nbytes = d.message_size.to_numpy(np.float64) * perf.ACTIVATION_BYTES
        wire = 2 * (tp - 1) / tp * nbytes / link
        parts.append((wire, d.latency.to_numpy(np.float64) * 1e-3))
    wire, meas = (np.concatenate([p[i] for p in parts]) for i in range(2))

    def loss(x: dict[str, float]) -> float:
        return _logerr(x["ALLREDUCE_LATENCY_S"] + wire / x["LINK_EFFICIENCY"], meas)

    x = descend(
        loss, {"ALLREDUCE_LATENCY_S": 8e-6, "LINK_EFFICIENCY": 0.5}, {"LINK_EFFICIENCY": 1.0}
    )
    print(f"all-reduce: {len(meas)} rows, mean |log err| {loss(x):.3f}")
    return x


#: PCIe-only systems: (catalog GPU, vLLM version of its custom all-reduce table, NCCL version)
PCIE_SYSTEMS = {
    "rtx_pro_6000_server": ("RTX-PRO-6000-Blackwell-Server", "0.24.0", "2.29.2"),
    "l40s": ("L40S", "0.22.0", "2.27.3"),
}
#: the PCIe system whose TP ≥ 4 rings fit the ring efficiency (peer-to-peer between its GPUs)
PCIE_RING_SYSTEM = "rtx_pro_6000_server"


def _pcie_rows(root: Path, system: str) -> tuple[Any, Any, Any, Any]:
    """(tp, wire seconds at the full one-way link, measured seconds, is-ring) of a PCIe system:
    the custom all-reduce's TP2 rows and NCCL's TP ≥ 4 all-reduce rows (elements of 2 bytes)."""
    gname, v, nccl = PCIE_SYSTEMS[system]
    gpu = get_gpu(gname)
    assert gpu.interconnect_bandwidth_bytes_per_s, gname
    link = gpu.interconnect_bandwidth_bytes_per_s / perf.LINK_DIRECTIONS
    c = _read(root / system / f"comm/vllm/{v}/custom_allreduce_perf.parquet")
    c = c[(c.backend == "vllm_graph") & (c.num_gpus == 2)]
    n = _read(root / system / f"comm/nccl/{nccl}/nccl_perf.parquet")
    n = n[(n.op_name == "all_reduce") & (n.nccl_dtype == "half") & (n.num_gpus >= 4)]
    tps, wires, meas, ring = [], [], [], []
    for d, is_ring in ((c, False), (n, True)):
        tp = d.num_gpus.to_numpy(np.float64)
        nbytes = d.message_size.to_numpy(np.float64) * perf.ACTIVATION_BYTES
        tps.append(tp)
        wires.append(2 * (tp - 1) / tp * nbytes / link)
        meas.append(d.latency.to_numpy(np.float64) * 1e-3)
        ring.append(np.full(len(tp), is_ring))
    return tuple(np.concatenate(x) for x in (tps, wires, meas, ring))  # type: ignore[return-value]


def fit_allreduce_pcie(root: Path) -> dict[str, float]:
    """PCIe-only GPUs: t = hop × (tp − 1) + 2 (tp − 1)/tp × bytes / (one-way link × eff), eff
    the pair's (TP2: both systems) or the ring's (TP ≥ 4: the peer-to-peer node)."""
    rows = {s: _pcie_rows(root, s) for s in PCIE_SYSTEMS}
    # every system's pair rows; the ring rows of the peer-to-peer node only
    kept = [
        tuple(a[~r | (s == PCIE_RING_SYSTEM)] for a in rows[s])
        for s in PCIE_SYSTEMS
        for r in (rows[s][3],)
    ]
    tp, wire, meas, ring = (np.concatenate([k[i] for k in kept]) for i in range(4))

    def model(x: dict[str, float], tp: Any, wire: Any, ring: Any) -> Any:
        eff = np.where(ring, x["PCIE_RING_LINK_EFFICIENCY"], x["PCIE_PAIR_LINK_EFFICIENCY"])
        return x["PCIE_ALLREDUCE_HOP_S"] * (tp - 1) + wire / eff

    def loss(x: dict[str, float]) -> float:
        return _logerr(model(x, tp, wire, ring), meas)

    x = descend(
        loss,
        {
            "PCIE_ALLREDUCE_HOP_S": 5e-6,
            "PCIE_PAIR_LINK_EFFICIENCY": 0.5,
            "PCIE_RING_LINK_EFFICIENCY": 0.5,
        },
        {"PCIE_PAIR_LINK_EFFICIENCY": 1.0, "PCIE_RING_LINK_EFFICIENCY": 1.0},
    )
    print(f"PCIe all-reduce: {len(meas)} rows, mean |log err| {loss(x):.3f}")
    for s in PCIE_SYSTEMS:
        t, w, m, r = rows[s]
        for size in sorted(set(t.tolist())):
            sel = t == size
            err = _logerr(model(x, t[sel], w[sel], r[sel]), m[sel])
            big = sel & (w == w[sel].max())
            rate = float(
                (
                    w[big]
                    * get_gpu(PCIE_SYSTEMS[s][0]).interconnect_bandwidth_bytes_per_s
                    / perf.LINK_DIRECTIONS
                    / m[big]
                )[0]
            )
            print(
                f"  {s} TP{int(size)}: mean |log err| {err:.3f}, largest message at "
                f"{rate / 1e9:.1f} GB/s a direction"
            )
    return x


def fit_small_kernel(root: Path) -> dict[str, float]:
    vals = []
    for system in SYSTEMS:
        d = _read(root / system / "quantize/vllm/0.24.0/scale_matrix_perf.parquet")
        d = d[(d.kernel_source == "static_scaled_fp8_quant") & (d.m <= 16)]
        vals.append(float(np.median(d.latency.to_numpy(np.float64))) * 1e-3)
    print(f"small elementwise kernel (M ≤ 16), per system: {vals}")
    return {"SMALL_KERNEL_S": float(np.median(vals))}


def main(argv: Sequence[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    root = Path(argv[0])
    out: dict[str, Any] = {}
    out.update(fit_gemm(root))
    block_fp8_floors(root)
    out.update(fit_moe(root, out["GEMM_HALF_M"]))
    out.update(fit_moe_weight_only(root))
    out.update(fit_mla_module(root))
    out.update(fit_attention(root))
    out.update(fit_fa3_fp8_decode(root))
    out.update(fit_allreduce(root))
    out.update(fit_allreduce_pcie(root))
    out.update(fit_small_kernel(root))
    for name, value in out.items():
        print(f"{name} = {value if isinstance(value, tuple) else format(value, '.4g')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
