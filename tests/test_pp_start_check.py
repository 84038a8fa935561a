"""The PP start check of vLLM 0.14–0.16 (issue 21, item 10): one request of max_model_len over
the whole model's layers against the smallest worker's KV memory.

v1/core/kv_cache_utils.py::get_kv_cache_configs (0.14.0, 0.16.0) calls
``_check_enough_kv_cache_memory(min(available_memory), _max_memory_usage_bytes_from_groups(
vllm_config, global_kv_cache_groups), ...)`` with the groups of every worker's layers merged;
0.13.0 runs ``check_enough_kv_cache_memory`` per worker on its own layers and 0.17.0 on
projects the global groups to each worker (``_project_kv_cache_groups_to_worker``) first.
"""

from __future__ import annotations

import pytest

from inference_capacity.engines import StartupPrediction
from inference_capacity.engines.vllm import EngineSettings, predict_startup
from inference_capacity.engines.vllm_rules import VllmRules
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model
from inference_capacity.units import GiB

GPU = get_gpu("RTX-4090")
LLAMA = load_model("meta-llama/Llama-3.1-8B-Instruct")
L = 131072
#: Llama-3.1-8B's KV per token, every layer: 32 layers x 8 KV heads x 128 x (K, V) x 2 bytes
WHOLE_MODEL_BYTES = 32 * 8 * 128 * 2 * 2 * L  # 16 GiB; a PP2 stage holds half of it


def _plan(version: str, auto: bool = False) -> StartupPrediction:
    settings = EngineSettings(version=version, max_model_len=L, auto_max_model_len=auto)
    return predict_startup(LLAMA, GPU.total_bytes, GPU.name, 1, 2, settings)


def test_rule_versions() -> None:
    assert not VllmRules.for_version("0.13.0").pp_start_check_whole_model
    assert VllmRules.for_version("0.14.0").pp_start_check_whole_model
    assert VllmRules.for_version("0.16.0").pp_start_check_whole_model
    assert not VllmRules.for_version("0.17.0").pp_start_check_whole_model


@pytest.mark.parametrize("version", ["0.14.0", "0.16.0"])
def test_pp2_is_checked_over_the_whole_model(version: str) -> None:
    p = _plan(version)
    smallest = min(r.available_kv for r in p.ranks)
    # each stage would hold its own half (8 GiB) but not the whole model's 16 GiB
    assert WHOLE_MODEL_BYTES // 2 < smallest < WHOLE_MODEL_BYTES
    assert not p.starts
    assert p.error.startswith(
        f"To serve at least one request with the model's max seq len ({L}), "
        f"({WHOLE_MODEL_BYTES / GiB:.2f} GiB KV cache is needed, which is larger than the "
        f"available KV cache memory ({smallest / GiB:.2f} GiB)"
    )


@pytest.mark.parametrize("version", ["0.13.0", "0.17.0", "0.19.0"])
def test_pp2_is_checked_per_stage_elsewhere(version: str) -> None:
    p = _plan(version)
    assert p.starts, p.error


def test_auto_length_fits_the_whole_model_at_0_16() -> None:
    # --max-model-len -1 fits the length with the same groups: the smallest rank's memory over
    # the whole model's bytes per token, in whole blocks of 16
    p = _plan("0.16.0", auto=True)
    smallest = min(r.available_kv for r in _plan("0.16.0").ranks)
    fitted = smallest // (WHOLE_MODEL_BYTES // L) // 16 * 16
    assert p.starts
    assert p.notes[0] == f"--max-model-len -1: fitted to {fitted:,}"
    # 0.17 needs no fit: one stage's half fits
    q = _plan("0.17.0", auto=True)
    assert q.starts and not any("fitted" in n for n in q.notes)
