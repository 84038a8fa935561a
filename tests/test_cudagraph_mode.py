"""``--compilation-config '{"cudagraph_mode": ...}'``: the CUDA graphs each mode captures, and the
CUDA-graph term scaled by them over FULL_AND_PIECEWISE's (the mode the CG constants were fitted
on; the scaling is assumed linear in the graph count).

vLLM's rules, read in the 0.20.0 and 0.28.0 sources (identical for what is used here):

* ``config/compilation.py::CUDAGraphMode``: FULL_DECODE_ONLY = (FULL, NONE) and
  FULL_AND_PIECEWISE = (FULL, PIECEWISE) are ``separate_routine()``; ``mixed_mode()`` /
  ``decode_mode()`` are the tuple's second / first member, or the mode itself (NONE,
  PIECEWISE, FULL).
* ``v1/cudagraph_dispatcher.py::CudagraphDispatcher.initialize_cudagraph_keys`` (V1 runner): one
  key per capture size and LoRA case for a mixed mode other than NONE; with a separate routine
  whose decode mode is FULL, one FULL key per capture size ``s`` with ``q ≤ s ≤ R × q`` and LoRA
  case. ``v1/worker/gpu/cudagraph_utils.py::CudaGraphManager._init_candidates`` (V2 runner,
  0.28.0): the same mixed set; the decode set is each size rounded up to a multiple of ``q``,
  kept when ≤ ``R × q`` and ≤ the largest size.
* ``config/compilation.py::CompilationConfig.resolve_cudagraph_mode_and_sizes``: the downgrades
  by the weakest attention backend's ``AttentionCGSupport`` (see
  :func:`resolve_cudagraph_mode`); the V1 runner rounds the sizes to multiples of ``q`` only
  when the decode mode is FULL (``adjust_cudagraph_sizes_for_spec_decode``), not for PIECEWISE.
* sizes (``config/vllm.py::VllmConfig._set_cudagraph_sizes``, 0.20.0): largest
  ``min(2 R q, 512, T)``; grid [1, 2, 4] + 8..248 step 8 + 256.. step 16.
"""

from __future__ import annotations

import json

import pytest

from inference_capacity.engines import EngineSettings, parse_speculative_config
from inference_capacity.engines.versions import parse_version
from inference_capacity.engines.vllm import (
    SettingsError,
    cudagraph_mode_graphs,
    cudagraph_mode_scale,
    predict_startup,
    resolve_cudagraph_mode,
    spec_capture_sizes,
)
from inference_capacity.engines.vllm_config import read_engine
from inference_capacity.engines.vllm_flags import classify
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model

H100 = get_gpu("H100-SXM-80GB")
LLAMA_8B = load_model("meta-llama/Llama-3.1-8B-Instruct")
MODES = ("PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
NEVER, SINGLE_TOKEN_DECODE, UNIFORM_BATCH, ALWAYS = range(4)


def _graphs(version: str, mode: str, k: int, v2: bool = False, never: bool = False) -> int:
    v = parse_version(version)
    full = spec_capture_sizes(v, 256, 8192, k, None, None, H100.name, v2)
    piece = spec_capture_sizes(v, 256, 8192, k, None, None, H100.name, v2, full_decode=False)
    return cudagraph_mode_graphs(v, mode, full, piece, never)


def _cg(version: str, mode: str | None, k: int = 0, max_loras: int = 0) -> int:
    spec = None
    if k:
        text = json.dumps({"method": "ngram", "num_speculative_tokens": k})
        spec = parse_speculative_config(text)
    s = EngineSettings(
        version=version,
        max_model_len=8192,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        speculative=spec,
        cudagraph_mode=mode,
        max_loras=max_loras,
    )
    return predict_startup(LLAMA_8B, H100.total_bytes, H100.name, 1, 1, s).ranks[0].cuda_graph


# --- the downgrades (resolve_cudagraph_mode_and_sizes, 0.20.0 / 0.28.0) -----------------------


@pytest.mark.parametrize(
    ("mode", "support", "q", "runs"),
    [
        # mixed FULL needs ALWAYS; otherwise FULL_AND_PIECEWISE (attention in splitting_ops)
        ("FULL", ALWAYS, 1, "FULL"),
        ("FULL", UNIFORM_BATCH, 1, "FULL_AND_PIECEWISE"),
        ("FULL", SINGLE_TOKEN_DECODE, 1, "FULL_AND_PIECEWISE"),
        # ... and that FULL decode with q > 1 below UNIFORM_BATCH: PIECEWISE
        ("FULL", SINGLE_TOKEN_DECODE, 2, "PIECEWISE"),
        ("FULL", NEVER, 1, None),  # vLLM raises
        ("FULL_DECODE_ONLY", SINGLE_TOKEN_DECODE, 1, "FULL_DECODE_ONLY"),
        ("FULL_DECODE_ONLY", SINGLE_TOKEN_DECODE, 2, "PIECEWISE"),
        ("FULL_DECODE_ONLY", UNIFORM_BATCH, 2, "FULL_DECODE_ONLY"),
        ("FULL_DECODE_ONLY", NEVER, 1, "PIECEWISE"),
        ("FULL_AND_PIECEWISE", NEVER, 1, "PIECEWISE"),
        ("FULL_AND_PIECEWISE", SINGLE_TOKEN_DECODE, 2, "PIECEWISE"),
        ("PIECEWISE", NEVER, 2, "PIECEWISE"),  # no FULL routine: nothing checked
    ],
)
def test_resolve(mode: str, support: int, q: int, runs: str | None) -> None:
    assert resolve_cudagraph_mode(mode, support, q) == runs


# --- graph counts per mode ---------------------------------------------------------------------
#
# R = max_num_seqs = 256, T = 8192, H100, no LoRA.
# q = 1: largest min(2 × 256, 512, 8192) = 512; grid [1, 2, 4] + 8..248 (31) + 256..512 step 16
# (17) = 51 sizes; decode sizes 1 ≤ s ≤ 256: 3 + 31 + 1 = 35.
#   PIECEWISE 51; FULL_AND_PIECEWISE 51 + 35 = 86; FULL_DECODE_ONLY 35 (q = 1: every backend
#   but NEVER keeps it); FULL: 51 with ALWAYS, else the FULL_AND_PIECEWISE fallback, 86 (the
#   most is counted: the ledger does not pick the backend).
# q = 2 (n-gram, k = 1), V1 runner: largest min(2 × 256 × 2, 512) = 512; with FULL decode the
# sizes are rounded to multiples of 2: 1 → 2, so {2, 4} + 8..248 + 256..512 = 50; decode
# 2 ≤ s ≤ 512: 50. PIECEWISE keeps the 51 unrounded sizes.
#   FULL_AND_PIECEWISE 100; PIECEWISE 51; FULL: 50 (ALWAYS), 100 (UNIFORM_BATCH: F&P),
#   51 (SINGLE_TOKEN_DECODE: F&P, then PIECEWISE) → 100; FULL_DECODE_ONLY: 50 (ALWAYS,
#   UNIFORM_BATCH), 51 (SINGLE_TOKEN_DECODE: PIECEWISE) → 51.
# q = 2, V2 runner (0.28.0): no rounding (the V2 runner sizes its own graphs); mixed 51; decode
# round_up(s, 2) ≤ min(512, 512), distinct: 50. F&P 101; FULL max(51, 101) = 101;
# FULL_DECODE_ONLY max(50, 51) = 51; PIECEWISE 51.


@pytest.mark.parametrize(
    ("version", "k", "v2", "counts"),
    [
        ("0.20.0", 0, False, (51, 86, 35, 86)),
        ("0.28.0", 0, True, (51, 86, 35, 86)),
        ("0.20.0", 1, False, (51, 100, 51, 100)),
        ("0.28.0", 1, False, (51, 100, 51, 100)),
        ("0.28.0", 1, True, (51, 101, 51, 101)),
    ],
)
def test_graph_counts(version: str, k: int, v2: bool, counts: tuple[int, ...]) -> None:
    assert tuple(_graphs(version, m, k, v2) for m in MODES) == counts


def test_never_backend() -> None:
    # chunked local attention (ChunkedLocalAttentionBuilder.get_cudagraph_support: NEVER,
    # model_executor/layers/attention/chunked_local_attention.py 0.20.0/0.28.0): FULL raises,
    # FULL_DECODE_ONLY falls back to PIECEWISE (51 sizes, q = 1)
    with pytest.raises(SettingsError, match="chunked local"):
        _graphs("0.20.0", "FULL", 0, never=True)
    assert _graphs("0.20.0", "FULL_DECODE_ONLY", 0, never=True) == 51
    assert _graphs("0.20.0", "PIECEWISE", 0, never=True) == 51


def test_scale_is_relative_to_the_default() -> None:
    v = parse_version("0.20.0")
    args = (256, 8192, 0, None, None, H100.name, False, False)
    assert cudagraph_mode_scale(v, None, *args) == (1, 1)
    assert cudagraph_mode_scale(v, "FULL_AND_PIECEWISE", *args) == (1, 1)
    assert cudagraph_mode_scale(v, "PIECEWISE", *args) == (51, 86)


# --- the CUDA-graph term ------------------------------------------------------------------------


def test_cuda_graph_term_scales_with_the_mode() -> None:
    base = _cg("0.20.0", None)
    assert base > 0
    assert _cg("0.20.0", "FULL_AND_PIECEWISE") == base
    assert _cg("0.20.0", "PIECEWISE") == base * 51 // 86
    assert _cg("0.20.0", "FULL_DECODE_ONLY") == base * 35 // 86
    assert _cg("0.20.0", "FULL") == base  # counted as its FULL_AND_PIECEWISE fallback
    assert _cg("0.20.0", "NONE") == 0
    # n-gram k = 1: the default term is the fitted pool × 100 / 102; PIECEWISE 51 of those 100
    spec = _cg("0.20.0", None, k=1)
    assert _cg("0.20.0", "PIECEWISE", k=1) == spec * 51 // 100


def test_lora_doubles_every_mode_s_graphs() -> None:
    # _get_lora_cases: [0, max_loras + 1], every descriptor captured per case (0.20.0); the
    # estimate keeps one first capture and doubles the graphs after it
    # (tests/test_cudagraph_estimate.py), and a mode takes its share of that as before
    one = _cg("0.20.0", "PIECEWISE")
    two = _cg("0.20.0", "PIECEWISE", max_loras=1)
    assert one < two < 2 * one
    assert two == _cg("0.20.0", None, max_loras=1) * 51 // 86


@pytest.mark.parametrize("version", ["0.19.0", "0.29.0", "0.33.0"])
def test_unread_versions_are_refused(version: str) -> None:
    with pytest.raises(SettingsError, match="0.20–0.28"):
        _cg(version, "PIECEWISE")
    flags = {"compilation-config": '{"cudagraph_mode": "piecewise"}'}
    (u,) = classify(flags, {}, version)
    assert u.name == "--compilation-config" and "0.20–0.28" in u.why
    # the default mode and NONE stay modelled everywhere
    assert _cg(version, "FULL_AND_PIECEWISE") == _cg(version, None)
    assert classify({"compilation-config": '{"cudagraph_mode": "NONE"}'}, {}, version) == []


def test_flags() -> None:
    (u,) = classify({"compilation-config": '{"cudagraph_mode": "FULLX"}'}, {}, "0.20.0")
    assert "FULLX" in u.why
    flags = {"compilation-config": '{"cudagraph_mode": "FULL"}', "optimization-level": "0"}
    (u,) = classify(flags, {}, "0.20.0")
    assert "optimization level 0" in u.why
    assert classify({"compilation-config": '{"cudagraph_mode": "full"}'}, {}, "0.20.0") == []
    cfg = read_engine(
        ["m", "--compilation-config", '{"cudagraph_mode": "full_decode_only"}'], {}, "0.20.0"
    )
    assert cfg.settings().cudagraph_mode == "FULL_DECODE_ONLY"
