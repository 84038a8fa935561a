"""Speculative tokens widen a hybrid model's conv state (issue 21, replay of the club-3090
Qwen3.6-27B logs): vLLM's mamba_utils.py::gated_delta_net_state_shape and mamba2_state_shape
give the conv state ``conv_kernel - 1 + num_spec`` columns, num_spec being the
``--speculative-config`` num_speculative_tokens. Gated DeltaNet passes it in every release read
(0.11-0.33); NemotronH/Mamba2 from 0.17; FalconH1, GraniteMoeHybrid, Zamba2 from 0.32."""

from __future__ import annotations

from inference_capacity.engines.versions import parse_version
from inference_capacity.engines.vllm import EngineSettings, predict_startup
from inference_capacity.engines.vllm_flags import SpeculativeConfig
from inference_capacity.engines.vllm_rules import VllmRules
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_config, shape_from_config
from inference_capacity.units import GiB

TEXT_ONLY = (("image", 0), ("video", 0), ("audio", 0))


def _qwen36_tp2(k: int) -> dict[str, object]:
    name, cfg = load_config("nvidia/Qwen3.6-27B-NVFP4")
    shape = shape_from_config(cfg, name=name)
    gpu = get_gpu("RTX-3090")
    s = EngineSettings(
        version="0.24.0",
        max_model_len=262144,
        max_num_seqs=2,
        max_num_batched_tokens=8192,
        kv_cache_dtype="fp8_e5m2",
        dtype="float16",
        enable_prefix_caching=True,
        kv_cache_memory_bytes=int(11.05 * GiB),
        speculative=SpeculativeConfig("mtp", k) if k else None,
        mm_limits=TEXT_ONLY,
    )
    return predict_startup(shape, gpu.total_bytes, gpu.name, 2, 1, s).to_json()


def test_mtp3_widens_the_gdn_conv_state_and_the_block() -> None:
    # GDN state per layer on a TP2 rank: conv (2*16*128 + 48*128)/2 channels x (4 - 1 + 3)
    # columns x 2 B = 61,440; temporal 24*128*128 x 4 B (mamba_ssm_dtype float32) = 1,572,864;
    # 1,634,304 B over fp8 attention's 2*2*256 = 1,024 B/token -> 1596 -> the 16-token
    # multiple 1600 (platforms/interface.py::_align_hybrid_block_size). Without MTP: 1,603,584
    # B -> 1566 -> 1568.
    assert _qwen36_tp2(3)["block_size"] == 1600
    assert _qwen36_tp2(0)["block_size"] == 1568


def test_tokens_as_the_public_0_24_log_counts_them() -> None:
    # vllm-startup-073 (club-3090#642, 0.24.0, 2x RTX 3090): 11.05 GiB -> 623,873 tokens, 2.38x.
    # 17 layers a group (16 attention + the MTP layer; GDN 48 padded to 3 x 17), pages of
    # 1600 x 1,024 B: 11.05 GiB (rounded in the log) / (17 x 1,638,400 B) = 425 blocks here
    # (426 in the log: the printed GiB is rounded down); a request needs cdiv(262144, 1600) = 164
    # attention blocks + 3 GDN groups x (2 "align" + 3 speculative) = 179, so
    # tokens = int(425 / 179 x 262144) = 622,408 (kv_cache_utils.py::get_kv_cache_capacity).
    got = _qwen36_tp2(3)
    assert got["num_gpu_blocks"] == 425
    assert got["kv_cache_tokens"] == int(425 / 179 * 262144) == 622408
    assert abs(got["kv_cache_tokens"] / 623873 - 1) < 0.003  # one block of rounding


def test_which_mamba2_models_widen_by_version() -> None:
    def archs(v: str) -> frozenset[str]:
        return VllmRules.for_version(parse_version(v)).spec_conv_mamba2_archs

    assert archs("0.16.0") == frozenset()
    assert archs("0.17.0") == {"NemotronHForCausalLM", "Mamba2ForCausalLM"}
    assert "FalconH1ForCausalLM" not in archs("0.30.0")
    assert {"FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM", "Zamba2ForCausalLM"} <= archs(
        "0.32.0"
    )


def test_the_tp4_int8_log_replays_its_layout_exactly() -> None:
    # vllm-startup-095 (club-3090#446, vLLM 0.22.0, 4x RTX 3090, int8_per_token_head, MTP 3):
    # 15.73 GiB -> 1,746,661 tokens, 6.66x at 262,144 (tokens given the logged KV)
    from benchmarks.helpers import load_points, predict_point

    from tests.test_startup_log_sources import DATA

    point = next(p for p in load_points(DATA) if p.id == "vllm-startup-095")
    pred, reason = predict_point(point)
    assert reason is None and pred is not None
    assert pred["replay"] == "layout"
    assert pred["kv_cache_tokens"] == 1746661
    assert pred["max_concurrency"] == 6.66


def test_the_dual_3090_logs_of_vllm_0_24_replay_their_layout() -> None:
    # club-3090's dual-card Qwen3.6-27B composes on vLLM 0.24.0 (2x RTX 3090, 262,144, MTP 3,
    # max-num-seqs 2): vllm-startup-069 (issue #602, int8_per_token_head) 5.23 GiB -> 289,661
    # tokens, 1.10x; vllm-startup-071 (PR #594, fp8) 5.33 GiB -> 300,220, 1.15x;
    # vllm-startup-073 (issue #642, AutoRound INT4) 11.05 GiB -> 623,873, 2.38x (tokens given
    # the logged KV; out of sample, nothing is fitted on them)
    from benchmarks.helpers import load_points, predict_point

    from tests.test_startup_log_sources import DATA

    points = {p.id: p for p in load_points(DATA)}
    got = {}
    for pid in ("vllm-startup-069", "vllm-startup-071", "vllm-startup-073"):
        pred, reason = predict_point(points[pid])
        assert reason is None and pred is not None, pid
        assert pred["replay"] == "layout" and pred["engine_version"] == "0.24.0"
        got[pid] = (pred["kv_cache_tokens"], pred["max_concurrency"])
    assert got["vllm-startup-069"] == (289661, 1.1)
    assert got["vllm-startup-071"] == (300220, 1.15)
    # 073: -0.23 % of the log's 623,873 tokens (1,465 tokens: about what two boots of one
    # setup differ by, vllm-startup-065/067)
    tokens, conc = got["vllm-startup-073"]
    assert abs(tokens - 623873) / 623873 < 0.0025 and abs(conc - 2.38) <= 0.01


def test_the_0_20_0_rtx_5090_boots_replay_their_layout() -> None:
    # 99sono/DockerBuildFiles' vLLM 0.20.0 boots of a Qwen3.6-35B-A3B NVFP4 on one RTX 5090
    # (fp8 KV, prefix caching on: Mamba cache mode 'align', attention block 2,096 tokens, both
    # printed): the tokens 0.20.0 prints (num_blocks // groups x block size) and the
    # concurrency, given the logged KV (out of sample, nothing is fitted on them)
    from benchmarks.helpers import load_points, predict_point

    from tests.test_startup_log_sources import DATA

    points = {p.id: p for p in load_points(DATA)}
    logged = {
        "vllm-startup-151": (75456, 3.87),  # 2.95 GiB, 65,536 a request
        "vllm-startup-153": (33536, 1.68),  # 1.28 GiB
        "vllm-startup-155": (79648, 4.03),  # 3.07 GiB
        "vllm-startup-157": (75456, 14.7),  # 2.95 GiB, 8,192 a request
    }
    for pid, want in logged.items():
        pred, reason = predict_point(points[pid])
        assert reason is None and pred is not None, pid
        assert pred["replay"] == "layout" and pred["engine_version"] == "0.20.0"
        assert pred["block_size"] == 2096
        assert (pred["kv_cache_tokens"], pred["max_concurrency"]) == want, pid
        # 36, 16, 38 and 36 blocks of 2,096 tokens
        assert pred["kv_cache_tokens"] % 2096 == 0
