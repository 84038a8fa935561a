"""Replay public vLLM startup logs through the predictor (used by benchmarks/accuracy.py and
tests/test_vllm_predictor.py; not shipped in the package).

A log point names a model, a GPU and the flags; this module maps each to a catalog config, a
device size and :class:`EngineSettings`. Where a log leaves something out (the vLLM version, the
quantized variant's config), the assumption is written next to the point in
:data:`POINT_SETUP`, with the reason, so a reader can check it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from inference_capacity.engines.versions import VersionError, parse_version
from inference_capacity.engines.vllm import EngineSettings, SettingsError, predict_startup
from inference_capacity.engines.vllm_config import MultimodalSettings
from inference_capacity.engines.vllm_flags import SpeculativeConfig
from inference_capacity.hardware import UnknownGpuError, get_gpu
from inference_capacity.model import load_config, load_model, shape_from_config
from inference_capacity.model.errors import ModelConfigError, UnknownModelError
from inference_capacity.resolve import size_dynamic
from inference_capacity.units import GiB


#: quantization_config blocks of the public quantized checkpoints the logs used (their
#: config.json files are not in the catalog; these mirror their published quantization blocks)
def _ct(weights: dict[str, Any], activations: dict[str, Any] | None = None) -> dict[str, Any]:
    """A compressed-tensors block of one Linear group (lm_head left out)."""
    group: dict[str, Any] = {"targets": ["Linear"], "weights": weights}
    if activations is not None:
        group["input_activations"] = activations
    return {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": group},
        "ignore": ["lm_head"],
    }


def _per_token(kind: str) -> dict[str, Any]:
    """Dynamic per-token 8-bit activations of ``kind`` (float or int)."""
    return {"num_bits": 8, "type": kind, "strategy": "token", "dynamic": True, "symmetric": True}


_CT_FP8_CHANNEL = _ct({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True})
_CT_W4A16 = _ct(
    {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
)
#: RedHatAI "-fp8-dynamic": FP8 per-channel weights, dynamic per-token FP8 activations
_CT_FP8_DYNAMIC = _ct(
    {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
    _per_token("float"),
)
#: RedHatAI "-quantized.w8a8": INT8 per-channel weights, dynamic per-token INT8 activations
_CT_W8A8 = _ct(
    {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}, _per_token("int")
)
_GPTQ_4BIT = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}
_FP8_BLOCK = {
    "quant_method": "fp8",
    "weight_block_size": [128, 128],
    "activation_scheme": "dynamic",
}


#: the skip reason of a log whose model config is not in the data (the term it blocks first)
_NO_CONFIG = "model: %s config.json is not in the data (not in the catalog, not public here)"


@dataclass(frozen=True)
class PointSetup:
    catalog: str | None
    version: str | None = None  # assumed when the log does not show it
    #: catalog GPU: its total when the log gives none, and its name for the predictor (the
    #: compute capability picks the MXFP4 MoE backend) when the log's GPU string is not one
    gpu: str | None = None
    quantization_config: dict[str, Any] | None = None
    config_patch: dict[str, Any] | None = None
    #: top-level keys the replay removes from the catalog config (a quantized checkpoint's
    #: config standing in for its unquantized base: its ``quantization_config``)
    config_drop: tuple[str, ...] = ()
    skip: str | None = None
    note: str = ""
    settings: dict[str, Any] | None = None
    #: replay the KV layout only: ``--kv-cache-memory-bytes`` = the logged available KV, so the
    #: tokens and concurrency vLLM printed for that pool are compared (the budget terms are
    #: not: the log lacks what they need); the report leaves available KV out for it
    layout: bool = False
    speculative: tuple[str, int] | None = None  # (method, num_speculative_tokens) as logged
    #: the processor files the replay assumes (model/source.py's ResolvedModel.preprocessor
    #: form): a dynamic-resolution tower's dummy image is sized from them as resolve.py does
    preprocessor: dict[str, Any] | None = None
    #: ``--limit-mm-per-prompt`` as the log's non-default args print it
    limit_mm_per_prompt: str | None = None


#: vllm-startup-069/071 (club-3090 issue #602 and PR #594, 2x RTX 3090, 2026-07-06): the
#: dual-max compose models/qwen3.6-27b/vllm/compose/dual/fp8/mtp.yml (noonghunna/club-3090
#: 6eaeb2bd, the PR that moved its KV from int8_per_token_head to fp8, and its parent):
#: --quantization fp8, --dtype bfloat16, --max-num-seqs 2, --max-num-batched-tokens 8192,
#: prefix caching, --speculative-config {"method":"mtp","num_speculative_tokens":3}; both logs'
#: non-default args print the same dtype, length, TP and KV dtype (and 071's a speculative
#: config, cut). The Qwen3.6-27B shapes are nvidia/Qwen3.6-27B-NVFP4's (catalog); the KV
#: layout does not depend on the weights' format.
_QWEN36_27B_DUAL_LAYOUT_FP8 = PointSetup(
    "nvidia/Qwen3.6-27B-NVFP4",
    version="0.24.0",  # gpu_worker.py:508 / kv_cache_utils.py:2146, 0.24.0's lines
    gpu="RTX-3090",
    layout=True,
    speculative=("mtp", 3),
    settings={
        "dtype": "bfloat16",
        "enable_prefix_caching": True,
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 2,
    },
    note="flags of club-3090's dual-max compose (dual/fp8/mtp.yml, 6eaeb2bd and its parent); "
    "without the MTP drafter the layout gives +12 % tokens, so the compose's drafter is the "
    "replay's assumption where the excerpt's args are cut",
)


#: vllm-startup-049/051 (club-3090 issues #612/#652, 1x RTX 5090, vLLM 0.24.0): the checkpoint
#: of the compose's model registry (nvidia/Qwen3.6-35B-A3B-NVFP4, catalog), the compose's flags
#: as committed on 2026-07-06 (noonghunna/club-3090 1ba1a89d, models/qwen3.6-35b-a3b/vllm/
#: compose/single/nvfp4/fp8.yml: --gpu-memory-utilization 0.92, --max-num-seqs 1,
#: --max-num-batched-tokens 8192, --limit-mm-per-prompt {"image":2,"audio":0}, fp8 KV, prefix
#: caching, chunked prefill; the log's non-default args print the same), and the Qwen3-VL
#: family's processor files as public checkpoints ship them (image size.longest_edge
#: 16,777,216 / shortest 65,536; video 25,165,824 / 4,096: tests/test_mm_profile.py
#: QWEN3_IMAGE_PRE / QWEN3_VIDEO_PRE). The checkpoint's own processor files are not in the
#: data: an assumption of the replay, stated here. With them the dummy video (12,288 tokens)
#: has fewer than an image (16,384), so the profile runs one image of 65,536 patches.
_QWEN3_PRE: dict[str, Any] = {
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "video_processor": {
        "size": {"longest_edge": 25165824, "shortest_edge": 4096},
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
    },
}
_QWEN36_35B_NVFP4_5090 = PointSetup(
    "nvidia/Qwen3.6-35B-A3B-NVFP4",
    gpu="RTX-5090",
    settings={
        "gpu_memory_utilization": 0.92,
        "max_num_batched_tokens": 8192,
        "enable_prefix_caching": True,
    },
    preprocessor=_QWEN3_PRE,
    limit_mm_per_prompt='{"image": 2, "audio": 0}',
    note="flags of the club-3090 single-nvfp4 compose (1ba1a89d); Qwen3-VL-family processor "
    "sizes assumed (the checkpoint's own files are not in the data)",
)


def _qwen36_35b_5090_layout(batched_tokens: int, max_capture: int) -> PointSetup:
    """vllm-startup-151…157: the boot's non-default args as printed (fp8_e4m3 KV, prefix
    caching, its batched tokens and largest capture size; length and max-num-seqs are the
    point's); the KV layout only (tokens and concurrency given the logged KV)."""
    return PointSetup(
        "nvidia/Qwen3.6-35B-A3B-NVFP4",
        gpu="RTX-5090",
        layout=True,
        settings={
            "max_num_batched_tokens": batched_tokens,
            "max_cudagraph_capture_size": max_capture,
            "enable_prefix_caching": True,
        },
        note="the catalog's Qwen3.6-35B-A3B shapes for RedHatAI's checkpoint (not in the "
        "data); the boot's flags as its non-default args print them",
    )


#: vllm-startup-161/163/165: Qwen3-32B BF16 at the post's flags (utilization and length are the
#: points'; everything else vLLM's default), on the catalog's RTX PRO 6000 Blackwell (the
#: compute capability; the total is the logged one)
_QWEN3_32B_PRO6000 = PointSetup(
    "Qwen/Qwen3-32B",
    gpu="RTX-PRO-6000-Blackwell-Server",
    note="the post's docker run flags (kubesimplify/website 8b1d2a5c)",
)


#: vllm-startup-171/173: Qwen3-8B BF16 at 8,192 tokens on a RunPod RTX 4090, vLLM 0.27.1's
#: defaults otherwise (alexostapiuk11/coldstart-recon-worker 5e109091: a cold and a warm
#: torch.compile boot of one endpoint)
_QWEN3_8B_4090 = PointSetup(
    "Qwen/Qwen3-8B",
    gpu="RTX-4090",
    note="the harness's vllm serve flags (coldstart-recon-worker 5e109091)",
)


POINT_SETUP: dict[str, PointSetup] = {
    "vllm-startup-001": PointSetup(
        "meta-llama/Llama-3.1-8B-Instruct",
        version="0.6.4",
        note="V0 'Memory profiling results' format of 0.6.4/0.6.5",
    ),
    "vllm-startup-003": PointSetup(
        "meta-llama/Meta-Llama-3.1-8B",
        version="0.6.4",
        config_patch={"max_position_embeddings": 8192, "rope_scaling": None},
        note="Meta-Llama-3-8B = the 3.1 shapes with 8192 positions and no rope scaling",
    ),
    "vllm-startup-005": PointSetup(
        "meta-llama/Llama-2-7b-hf",
        version="0.2.4",
        gpu="A100-SXM-80GB",
        settings={"dtype": "float16"},
        note="vLLM ~0.2.4 (Dec 2023), A100-80GB",
    ),
    "vllm-startup-007": PointSetup(
        None, skip="DeepSeek-R1-Distill-Qwen-14B config.json is not in the public data"
    ),
    "vllm-startup-009": PointSetup(
        None, skip="Kimi-Linear (KDA linear attention) config.json is not in the public data"
    ),
    "vllm-startup-011": PointSetup(
        "deepseek-ai/deepseek-coder-6.7b-instruct",
        version="0.4.3",
        gpu="T4",
        note="vLLM ~0.4.x (June 2024); T4 total from the GPU catalog",
    ),
    "vllm-startup-013": PointSetup(
        "meta-llama/Llama-3.2-1B", settings={"max_num_batched_tokens": 512}
    ),
    "vllm-startup-015": PointSetup(
        None, skip="realtreetune/rho-1b-sft-GSM8K config.json is not in the public data"
    ),
    "vllm-startup-017": PointSetup(
        "openai/gpt-oss-20b", gpu="A100-SXM-80GB", note="A100 size not stated; 80GB is consistent"
    ),
    "vllm-startup-019": PointSetup(
        "openai/gpt-oss-120b",
        version="0.11.0",
        note="summary table; version not shown; its terms do not add up to its KV figure "
        "(71.26 - 64.38 - 7.38 - 0.13 != 3.33), so KV is compared as logged",
    ),
    "vllm-startup-021": PointSetup(
        "meta-llama/Llama-3.3-70B-Instruct",
        version="0.10.1",
        quantization_config=_CT_FP8_CHANNEL,
        note="RedHatAI FP8-dynamic = compressed-tensors FP8 per-channel; version not shown, "
        "its KV figure has no CUDA-graph term (pre-0.20)",
    ),
    "vllm-startup-023": PointSetup(
        "Qwen/Qwen3-Coder-480B-A35B-Instruct",
        gpu="H20-141GB",
        quantization_config=_FP8_BLOCK,
        settings={"data_parallel": 8, "expert_parallel": True},
        note="FP8 block-128 checkpoint; -dp=8 --enable-expert-parallel; H20 141GB variant "
        "(a 96GB card cannot hold the weights)",
    ),
    "vllm-startup-025": PointSetup(
        "Qwen/Qwen1.5-7B-Chat",
        version="0.3.0",
        gpu="RTX-3090",
        quantization_config=_GPTQ_4BIT,
        note="Qwen1.5-7B-Chat-GPTQ-Int4: 4-bit, group 128",
    ),
    "vllm-startup-043": PointSetup(
        "meta-llama/Llama-3.1-8B-Instruct",
        quantization_config=_CT_W4A16,
        note="RedHatAI w4a16 = compressed-tensors W4A16 g128",
    ),
    "vllm-startup-045": PointSetup("Qwen/Qwen2.5-7B-Instruct"),
    # the llm-d-planner sweep's other setups of catalog models (out of sample, 2026-12-07)
    "vllm-startup-105": PointSetup("meta-llama/Llama-3.1-8B-Instruct"),
    "vllm-startup-107": PointSetup("meta-llama/Llama-3.1-8B-Instruct"),
    "vllm-startup-109": PointSetup("meta-llama/Llama-3.1-8B-Instruct"),
    "vllm-startup-111": PointSetup("meta-llama/Llama-3.1-8B-Instruct"),
    "vllm-startup-113": PointSetup("meta-llama/Llama-3.1-8B-Instruct"),
    "vllm-startup-115": PointSetup("Qwen/Qwen2.5-7B-Instruct"),
    "vllm-startup-117": PointSetup("Qwen/Qwen2.5-7B-Instruct"),
    "vllm-startup-119": PointSetup("Qwen/Qwen3-8B"),
    "vllm-startup-121": PointSetup("microsoft/phi-4"),
    "vllm-startup-123": PointSetup("microsoft/phi-2"),
    "vllm-startup-125": PointSetup("mistralai/Mixtral-8x7B-Instruct-v0.1"),
    "vllm-startup-127": PointSetup("openai/gpt-oss-20b"),
    "vllm-startup-129": PointSetup("google/gemma-3-4b-it"),
    "vllm-startup-131": PointSetup("google/gemma-3-27b-it"),
    "vllm-startup-133": PointSetup(
        "meta-llama/Llama-3.3-70B-Instruct",
        quantization_config=_CT_FP8_DYNAMIC,
        note="RedHatAI fp8-dynamic = compressed-tensors FP8 channel weights, dynamic tokens",
    ),
    "vllm-startup-135": PointSetup(
        "meta-llama/Llama-3.3-70B-Instruct",
        quantization_config=_CT_FP8_DYNAMIC,
        note="RedHatAI fp8-dynamic = compressed-tensors FP8 channel weights, dynamic tokens",
    ),
    "vllm-startup-137": PointSetup(
        "meta-llama/Llama-3.3-70B-Instruct",
        quantization_config=_CT_W8A8,
        note="RedHatAI w8a8 = compressed-tensors INT8 channel weights, dynamic INT8 tokens",
    ),
    "vllm-startup-139": PointSetup(
        "Qwen/Qwen2.5-7B-Instruct",
        quantization_config=_CT_FP8_DYNAMIC,
        note="RedHatAI fp8-dynamic = compressed-tensors FP8 channel weights, dynamic tokens",
    ),
    "vllm-startup-141": PointSetup(
        "Qwen/Qwen2.5-7B-Instruct",
        quantization_config=_CT_W8A8,
        note="RedHatAI w8a8 = compressed-tensors INT8 channel weights, dynamic INT8 tokens",
    ),
    "vllm-startup-143": PointSetup(
        "meta-llama/Llama-3.1-8B-Instruct",
        quantization_config=_CT_W8A8,
        note="RedHatAI w8a8 = compressed-tensors INT8 channel weights, dynamic INT8 tokens",
    ),
    "vllm-startup-145": PointSetup(
        "Qwen/Qwen2.5-72B",
        note="the Instruct checkpoint has the base model's shapes (the catalog holds the base)",
    ),
    "vllm-startup-147": PointSetup(
        "Qwen/Qwen2.5-72B",
        note="Kimi-Dev-72B is a Qwen2.5-72B fine-tune (Qwen2ForCausalLM, the same shapes)",
    ),
    "vllm-startup-149": PointSetup(
        "Qwen/Qwen2.5-72B",
        note="Kimi-Dev-72B is a Qwen2.5-72B fine-tune (Qwen2ForCausalLM, the same shapes)",
    ),
    # the sweep's two warm boots of catalog models (they load the compile a cold twin saved)
    "vllm-startup-177": PointSetup("meta-llama/Llama-3.1-8B-Instruct"),
    "vllm-startup-179": PointSetup("Qwen/Qwen2.5-7B-Instruct"),
    "vllm-startup-027": PointSetup("meta-llama/Llama-3.1-8B-Instruct"),
    "vllm-startup-029": PointSetup("meta-llama/Llama-3.1-8B-Instruct"),
    "vllm-startup-031": PointSetup("meta-llama/Llama-3.1-8B-Instruct"),
    "vllm-startup-033": PointSetup("codellama/CodeLlama-7b-hf"),
    "vllm-startup-035": PointSetup("google/gemma-2-9b-it"),
    "vllm-startup-037": PointSetup(
        "deepseek-ai/DeepSeek-V2-Lite",
        note="the -Chat variant has the same config.json shapes as DeepSeek-V2-Lite",
    ),
    "vllm-startup-039": PointSetup("Qwen/Qwen3-30B-A3B"),
    "vllm-startup-041": PointSetup("meta-llama/Llama-4-Scout-17B-16E-Instruct"),
    # vLLM >= 0.20 points (issue 21), all out-of-sample
    "vllm-startup-047": PointSetup(
        "openai/gpt-oss-120b",
        gpu="RTX-PRO-4500-Blackwell",  # the log's "compute capability 12.0": SM120
        note="max_model_len not stated: the model default (131072)",
    ),
    "vllm-startup-049": _QWEN36_35B_NVFP4_5090,
    "vllm-startup-051": _QWEN36_35B_NVFP4_5090,
    "vllm-startup-053": PointSetup(None, skip="model: Qwen3.8-27B config not in the data"),
    "vllm-startup-055": PointSetup(None, skip="model: Qwen3.8-27B-FP8 config not in the data"),
    "vllm-startup-057": PointSetup(
        None, skip="model: MiniMax-M2.7 config not in the data; device: GB10 not in the GPU catalog"
    ),
    # vLLM >= 0.20 logs added for issue 21 (all out-of-sample; nothing is fitted on them). A skip
    # reason starts with the term that blocks the replay ("model:", "device:", ...).
    "vllm-startup-059": PointSetup(None, skip=_NO_CONFIG % "Qwen3.6-27B (AutoRound INT4)"),
    "vllm-startup-061": PointSetup(None, skip=_NO_CONFIG % "Qwen3.6-27B"),
    "vllm-startup-063": PointSetup(None, skip=_NO_CONFIG % "Qwen3.6-27B (patched image)"),
    "vllm-startup-065": PointSetup(None, skip=_NO_CONFIG % "Qwen3.6-27B (AutoRound INT4)"),
    "vllm-startup-067": PointSetup(None, skip=_NO_CONFIG % "Qwen3.6-27B (AutoRound INT4)"),
    # club-3090's dual-card Qwen3.6-27B composes at the logs' dates (noonghunna/club-3090):
    # the checkpoints' quantization blocks are not public here, so only the KV layout is
    # replayed; its flags are the compose's, which the logs' non-default args print in part
    "vllm-startup-069": _QWEN36_27B_DUAL_LAYOUT_FP8,
    "vllm-startup-071": _QWEN36_27B_DUAL_LAYOUT_FP8,
    "vllm-startup-073": replace(
        _QWEN36_27B_DUAL_LAYOUT_FP8,
        settings={**(_QWEN36_27B_DUAL_LAYOUT_FP8.settings or {}), "dtype": "float16"},
        note="the Qwen3.6-27B shapes; flags of models/qwen3.6-27b/vllm/compose/dual/"
        "autoround-int4/fp8-mtp.yml at 3036766a (2026-07-08: auto_round, float16, max-num-seqs "
        "2, 8,192 batched tokens, prefix caching, MTP n=3); its default fp8_e5m2 KV or the "
        "excerpt's unknown override give the same layout here (the attention page is padded "
        "to the GDN state's)",
    ),
    "vllm-startup-075": PointSetup(None, skip=_NO_CONFIG % "Qwen3.8-27B NVFP4"),
    "vllm-startup-077": PointSetup(None, skip=_NO_CONFIG % "Qwen3.8-27B (AutoRound INT4)"),
    "vllm-startup-079": PointSetup(None, skip=_NO_CONFIG % "Qwen3.8-27B-FP8"),
    "vllm-startup-081": PointSetup(None, skip=_NO_CONFIG % "Qwen3.8-27B-FP8"),
    "vllm-startup-083": PointSetup(None, skip=_NO_CONFIG % "shawnw3i/Qwen3.6-27B-AWQ-MTP"),
    "vllm-startup-085": PointSetup(None, skip=_NO_CONFIG % "Qwen3.8-27B FP8"),
    "vllm-startup-087": PointSetup(None, skip=_NO_CONFIG % "Qwen3.8-27B NVFP4 (Inferact)"),
    "vllm-startup-089": PointSetup(
        "Qwen/Qwen3-8B",
        gpu="RTX-A5000",
        settings={"kv_transfer": True, "kv_connector": "LMCacheConnectorV1"},
        note="LMCache CPU-offload example; the RTX A5000's total memory is not logged (the "
        "catalog's 23.52 GiB is inferred from the RTX 4090's, the same NVML total). The example "
        "runs vLLM's LLM class, whose default --max-num-batched-tokens on a GPU under 70 GiB is "
        "8192 (engine/arg_utils.py::get_batch_defaults, 0.21.0), not the server's 2048 kept "
        "here: the script's own value is not in the excerpt (at 8192 this replay gives -8.7 %)",
    ),
    "vllm-startup-093": PointSetup(
        "deepseek-ai/DeepSeek-V4-Flash",
        gpu="B200-180GB",
        settings={"expert_parallel": True, "max_num_batched_tokens": 8192},
        note="the -0731 revision has the base model's 43 decoder layers; flags of the issue's "
        "DP8 command (MegaMoE backend not modelled)",
    ),
    "vllm-startup-095": PointSetup(
        "nvidia/Qwen3.6-27B-NVFP4",
        gpu="RTX-3090",
        layout=True,
        speculative=("mtp", 3),
        settings={"dtype": "float16", "enable_prefix_caching": True},
        note="the Qwen3.6-27B shapes (the AutoRound checkpoint's quantization does not move the "
        "layout); MTP n=3 and int8_per_token_head as the report states; float16 and prefix "
        "caching as every club-3090 AutoRound compose's non-default args print them",
    ),
    # 99sono/DockerBuildFiles (1x RTX 5090, 0.20.2): the encoder profile of Gemma-4's tower
    # (6 video items) is not modelled, so only the KV layout (and the weights) are replayed
    "vllm-startup-103": PointSetup(
        "nvidia/Gemma-4-26B-A4B-NVFP4",
        gpu="RTX-5090",
        layout=True,
        settings={"max_num_batched_tokens": 16384, "enable_prefix_caching": True},
        note="the compose's flags as the log's non-default args print them (16,384 batched "
        "tokens: the sliding groups' per-request blocks depend on it)",
    ),
    # 99sono/DockerBuildFiles (1x RTX 5090, 0.20.0): RedHatAI's compressed-tensors NVFP4 of
    # Qwen3.6-35B-A3B, whose quantization block is not in the data: the KV layout on the
    # catalog's shapes of the same architecture (the weights' format does not move it)
    "vllm-startup-151": _qwen36_35b_5090_layout(8192, 1),
    "vllm-startup-153": _qwen36_35b_5090_layout(16384, 1),
    "vllm-startup-155": _qwen36_35b_5090_layout(4096, 4),
    "vllm-startup-157": _qwen36_35b_5090_layout(4096, 4),
    "vllm-startup-159": PointSetup(
        None,
        skip=_NO_CONFIG % "RedHatAI/Qwen3.6-35B-A3B-NVFP4 (its quantization block)"
        + "; a failed start (-3.31 GiB of KV printed) whose budget needs its weights",
    ),
    # kubesimplify/website (2x RTX PRO 6000 Blackwell Server Edition, 0.27.1, V2 runner): the
    # logged total (95.01 GiB), the post's docker run flags
    "vllm-startup-161": _QWEN3_32B_PRO6000,
    "vllm-startup-163": _QWEN3_32B_PRO6000,
    "vllm-startup-165": _QWEN3_32B_PRO6000,
    "vllm-startup-171": _QWEN3_8B_4090,
    "vllm-startup-173": _QWEN3_8B_4090,
    # vireshkoli/LLM-Inference-Optimization (one A40, 0.26.0, V2 runner): the logged total
    # (44.43 GiB) and its non-default args
    "vllm-startup-175": PointSetup(
        "meta-llama/Llama-3.1-8B-Instruct",
        gpu="A40",
        note="the log's non-default args (4,096 tokens, 0.9, 256 sequences)",
    ),
    # kubesimplify/website (4x RTX PRO 6000 Blackwell Server Edition, 0.27.1, V1 runner): the
    # post's docker run flags; its checkpoint, Qwen3-235B-A22B-Instruct-2507-FP8, has the
    # architecture and quantization block of Qwen3-235B-A22B-FP8 (the post's config excerpt),
    # whose config.json the data holds (the 2507 one it does not)
    # johnpfeiffer/source.johnpfeiffer.github.io (one B300, 0.26.0, V1 runner forced by
    # VLLM_USE_V2_MODEL_RUNNER=0): google/gemma-4-31B-it in BF16. Its config.json is not in the
    # data; NVIDIA's NVFP4 checkpoint of it is, and NVIDIA's Gemma-4 NVFP4 configs are Google's
    # plus a quantization_config (aiconfigurator-core 0.12.0's google--gemma-4-26B-A4B and
    # nvidia--Gemma-4-26B-A4B-NVFP4 configs differ in that block, eos ids and the transformers
    # version alone), so the replay drops that block (its hf_quant_config.json with it)
    "vllm-startup-169": PointSetup(
        "nvidia/Gemma-4-31B-IT-NVFP4",
        gpu="B300-288GB",
        config_drop=("quantization_config",),
        limit_mm_per_prompt='{"image": 0, "audio": 0}',
        settings={"use_v2_model_runner": False},  # VLLM_USE_V2_MODEL_RUNNER=0
        note="the post's vllm serve command; NVIDIA's NVFP4 config without its quantization "
        "block stands for google/gemma-4-31B-it's",
    ),
    "vllm-startup-167": PointSetup(
        "Qwen/Qwen3-235B-A22B-FP8",
        gpu="RTX-PRO-6000-Blackwell-Server",
        note="the post's docker run flags (kubesimplify/website 08b151ee); the config of "
        "Qwen3-235B-A22B-FP8, the 2507 Instruct checkpoint's architecture",
    ),
    # vllm-project/vllm issue #51041 (2x H20 TP2, 0.26.0): the predictor refuses DeepSeek-V4 with
    # MTP (engines/vllm.py raises SettingsError); the issue states neither num_speculative_tokens
    # nor max_model_len, so no replay is set up around that refusal
    "vllm-startup-097": PointSetup(
        None,
        skip="settings: DeepSeek-V4 with MTP speculative decoding is not modelled (the predictor "
        "refuses it); num_speculative_tokens, max_model_len and max_num_seqs not stated",
    ),
    "vllm-startup-099": PointSetup(
        None,
        skip="settings: DeepSeek-V4 with MTP speculative decoding is not modelled (the predictor "
        "refuses it); num_speculative_tokens, max_model_len and max_num_seqs not stated",
    ),
    # vllm-project/vllm issue #50722 (4x H100, 0.26.0): the worker lines and the printed args are
    # of two launches; its TP terms fitted engines/vllm.py::PCIE_TP_INIT_SCALE (in-sample)
    "vllm-startup-101": PointSetup(
        None,
        skip="settings: the excerpt's non-default args are of an earlier launch than its worker "
        "lines (runs with and without DFlash), so the flags are not known; its TP4 non-torch "
        "(0.13 GiB) and pre-snapshot (1.55 GiB) fitted PCIE_TP_INIT_SCALE",
    ),
    "vllm-startup-091": PointSetup(
        None,
        skip="DeepSeek-V4-Flash: version not stated and only the KV terms logged; its start "
        "check is replayed by tests/test_kv_dsv4.py (6.66 GiB needed, length 13528)",
    ),
}


@dataclass(frozen=True)
class LogPoint:
    id: str
    model: str
    gpu: str
    total_gpu_memory_gib: float | None
    tp: int
    pp: int
    gpu_memory_utilization: float | None
    max_model_len: int | None
    max_num_seqs: int | None
    kv_cache_dtype: str
    quantization: str | None
    dtype: str | None
    vllm_version: str | None
    engine: str
    block_size: int | None
    logged: dict[str, Any]
    raw: dict[str, Any]

    @property
    def failed(self) -> bool:
        kv = self.logged.get("kv_cache_gib")
        if kv is not None and kv <= 0:
            return True
        text = " ".join(self.raw.get("raw_lines", [])) + " " + self.raw.get("notes", "")
        return any(
            s in text for s in ("ValueError", "start then errored", "Start FAILED", "ENGINE FAILED")
        )


def load_points(path: Path) -> list[LogPoint]:
    points = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        points.append(
            LogPoint(
                id=d["id"],
                model=d["model"],
                gpu=d["gpu"],
                total_gpu_memory_gib=d.get("total_gpu_memory_gib"),
                tp=d.get("tp") or 1,
                pp=d.get("pp") or 1,
                gpu_memory_utilization=d.get("gpu_memory_utilization"),
                max_model_len=d.get("max_model_len"),
                max_num_seqs=d.get("max_num_seqs"),
                kv_cache_dtype=d.get("kv_cache_dtype") or "auto",
                quantization=d.get("quantization"),
                dtype=d.get("dtype"),
                vllm_version=d.get("vllm_version"),
                engine=d.get("engine", "v1"),
                block_size=d.get("block_size"),
                logged=d.get("logged", {}),
                raw=d,
            )
        )
    return points


def logged_version(p: LogPoint) -> str | None:
    """The vLLM version the log itself shows: printed, or matched by its source line numbers
    (``vllm_version_from_lines``: the ``[file.py:N]`` of its lines are those of that release's
    sdist). None when the log carries neither (a replay may still assume one)."""
    v = p.vllm_version or p.raw.get("vllm_version_from_lines")
    return str(v) if v else None


#: the first release whose logs issue 21 asks evidence for
BAND_SPLIT = (0, 20)


def version_band(version: str | None) -> str:
    """``">=0.20"``, ``"<0.20"`` or ``"unknown"`` for a version string (dev builds count as their
    release: 0.20.1rc1.dev16 is >= 0.20)."""
    if not version:
        return "unknown"
    try:
        key = parse_version(version).key
    except VersionError:
        return "unknown"
    return ">=0.20" if key[:2] >= BAND_SPLIT else "<0.20"


#: error classes of the predictor -> the term a refusal blocks
_REFUSAL_TERM: tuple[tuple[type[Exception], str], ...] = (
    (UnknownGpuError, "device"),
    (ModelConfigError, "model"),
    (UnknownModelError, "model"),
    (VersionError, "version"),
    (SettingsError, "settings"),
)


def refusal_reason(exc: ValueError) -> str:
    """``"term: message"`` for a predictor refusal (the term it blocks: model, device, ...)."""
    term = next((t for cls, t in _REFUSAL_TERM if isinstance(exc, cls)), "settings")
    first = str(exc).split(". ", 1)[0].rstrip(".")
    return f"{term}: refused by the predictor ({type(exc).__name__}: {first})"


def predict_point(
    p: LogPoint, setup: PointSetup | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """(prediction JSON, None) or (None, reason the point cannot be predicted). A reason starts
    with the term it blocks (``model:``, ``device:``, ``settings:``, ...) where that is known;
    a refusal of the predictor (an unmodelled architecture, GPU or flag) is such a reason, not a
    crash of the report. ``setup``: the replay's assumptions, by default ``POINT_SETUP``'s."""
    try:
        return _predict_point(p, setup)
    except ValueError as exc:
        return None, refusal_reason(exc)


def _predict_point(
    p: LogPoint, setup: PointSetup | None
) -> tuple[dict[str, Any] | None, str | None]:
    setup = setup or POINT_SETUP.get(p.id)
    if setup is None:
        return None, "no setup for this point in benchmarks.helpers.POINT_SETUP"
    if setup.skip or setup.catalog is None:
        return None, setup.skip or "no catalog model"
    name, cfg = load_config(setup.catalog)
    cfg = copy.deepcopy(cfg)
    if setup.config_patch:
        cfg.update(setup.config_patch)
    for key in setup.config_drop:
        cfg.pop(key, None)
    if setup.quantization_config:
        cfg["quantization_config"] = setup.quantization_config
    quant_flag = None
    if (
        p.quantization == "fp8"
        and not setup.quantization_config
        and "quantization_config" not in cfg
    ):
        quant_flag = "fp8"
    shape = shape_from_config(cfg, name=name, quantization=quant_flag)
    if p.total_gpu_memory_gib is not None:
        total = int(round(p.total_gpu_memory_gib * GiB))
        gpu_name = get_gpu(setup.gpu).name if setup.gpu else p.gpu
    else:
        gpu = get_gpu(setup.gpu or p.gpu)
        total, gpu_name = gpu.total_bytes, gpu.name
    version = p.vllm_version or setup.version
    if version is None:
        version = "0.10.1" if p.engine == "v1" else "0.6.4"
    kw: dict[str, Any] = dict(
        version=version,
        engine=p.engine if p.engine == "v0" else None,
        gpu_memory_utilization=p.gpu_memory_utilization,
        max_model_len=p.max_model_len,
        max_num_seqs=p.max_num_seqs,
        block_size=p.block_size,
        kv_cache_dtype=p.kv_cache_dtype,
        dtype=p.dtype or "auto",
    )
    kw.update(setup.settings or {})
    if p.raw.get("compile_cache"):  # the boot's torch.compile cache, as its log or launch shows
        kw["compile_cache"] = p.raw["compile_cache"]
    if setup.limit_mm_per_prompt is not None:
        limits = json.loads(setup.limit_mm_per_prompt)
        kw["mm_limits"] = tuple(sorted(limits.items()))
        tower = shape.vision_tower
        if tower is not None and not tower.sized:
            mm = MultimodalSettings(setup.limit_mm_per_prompt, limits)
            got = size_dynamic(shape, version, mm, setup.preprocessor, [])
            if isinstance(got, tuple):
                return None, f"settings: {got[0]}: {got[1]}"
            shape = replace(shape, vision_tower=got)
    if setup.speculative is not None:
        kw["speculative"] = SpeculativeConfig(*setup.speculative)
    if setup.layout:
        kw["kv_cache_memory_bytes"] = int(round(p.logged["kv_cache_gib"] * GiB))
        if "text_config" in cfg:  # text only: the layout does not depend on the encoder
            kw["mm_limits"] = (("image", 0), ("video", 0), ("audio", 0))
    pred = predict_startup(shape, total, gpu_name, p.tp, p.pp, EngineSettings(**kw))
    out = pred.to_json()
    if setup.layout:
        out["replay"] = "layout"
    return out, None


# --- vLLM's CUDA-graph estimate, per setup (tests/data/vllm-cudagraph-estimates.jsonl) ----------

CUDAGRAPH_ESTIMATES = Path(__file__).resolve().parent.parent / "tests" / "data"
CUDAGRAPH_ESTIMATES = CUDAGRAPH_ESTIMATES / "vllm-cudagraph-estimates.jsonl"


def logged_capture_top(graphs: int) -> int:
    """The largest capture size of a logged default graph count: vLLM's grid
    (engines/vllm.py::capture_grid) has 51 sizes up to 512 and 83 up to 1024 (gpt-oss)."""
    return {51: 512, 83: 1024}[graphs]


def cudagraph_estimate_rows(path: Path = CUDAGRAPH_ESTIMATES) -> list[tuple[dict[str, Any], float]]:
    """(setup, the ledger's estimate in GiB) for each setup of the file whose model is in the
    catalog, with its logged graph counts and sizes, on the H100 the sweep ran on."""
    from inference_capacity.engines.versions import parse_version
    from inference_capacity.engines.vllm import (
        CaptureSizes,
        capture_grid,
        pp_layer_ranges,
        profiled_cuda_graph_estimate,
    )
    from inference_capacity.engines.vllm_rules import VllmRules

    out = []
    for line in path.read_text().splitlines():
        p = json.loads(line)
        try:
            shape = load_model(p["model"])
        except UnknownModelError:
            continue
        pw, full = p["piecewise"], p["full"]
        mixed = tuple(capture_grid(logged_capture_top(pw["graphs"])))
        decode = tuple(capture_grid(logged_capture_top(full["graphs"]))) if full else ()
        capture = CaptureSizes(1, max(mixed), mixed, decode)
        fp32 = p["activations"] == "fp32"
        est = profiled_cuda_graph_estimate(
            shape,
            pp_layer_ranges(shape.num_layers, p["pp"])[0],
            p["tp"],
            capture,
            "float32" if fp32 else "bfloat16",
            4 if fp32 else 2,
            "H100-SXM-80GB",
            kv_cache_dtype=p["kv_cache_dtype"],
            rules=VllmRules.for_version(parse_version("0.19.0")),
        )
        out.append((p, est / GiB))
    return out


CUDAGRAPH_VALIDATION = CUDAGRAPH_ESTIMATES.with_name("vllm-cudagraph-estimates-validation.jsonl")


def cudagraph_validation_rows(
    path: Path = CUDAGRAPH_VALIDATION,
) -> list[tuple[dict[str, Any], float]]:
    """(boot, the ledger's estimate in GiB) for the out-of-sample boots of ``path``: vLLM's
    printed 'Estimated CUDA graph memory' against the whole prediction's CUDA-graph term at the
    boot's flags (text only: the encoder does not enter the graphs' estimate), on the
    architecture the row names (its checkpoint's config is not in the data)."""
    out = []
    for line in path.read_text().splitlines():
        b = json.loads(line)
        gpu = get_gpu(b["gpu"])
        s = EngineSettings(
            version=b["vllm_version"],
            max_model_len=b["max_model_len"],
            max_num_seqs=b["max_num_seqs"],
            max_num_batched_tokens=b["max_num_batched_tokens"],
            max_cudagraph_capture_size=b["max_cudagraph_capture_size"],
            kv_cache_dtype=b["kv_cache_dtype"],
            enable_prefix_caching=True,
            mm_limits=(("audio", 0), ("image", 0), ("video", 0)),
        )
        shape = load_model(b["architecture_from"])
        pred = predict_startup(shape, gpu.total_bytes, gpu.name, b["tp"], b["pp"], s)
        out.append((b, float(pred.to_json()["cuda_graph_gib"])))
    return out
