"""Speculative decoding: vLLM's CUDA-graph capture sizes with ``1 + k`` tokens per decode
request, by version, and drafters outside the built-in catalog (a Hub id or a local folder)
sized from their own config and safetensors headers.

The capture rules are vLLM's ``config/vllm.py::VllmConfig._set_cudagraph_sizes`` and
``config/compilation.py::CompilationConfig.adjust_cudagraph_sizes_for_spec_decode`` as read in
the 0.11.0–0.33.0 wheels (:func:`inference_capacity.engines.vllm.spec_capture_sizes` cites the
versions); every count below is derived in its comment from those rules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from inference_capacity.api import InferenceCapacity
from inference_capacity.engines import EngineSettings, parse_speculative_config
from inference_capacity.engines.versions import parse_version
from inference_capacity.engines.vllm import (
    CG_BASE_GIB,
    CG_PER_LAYER_GIB,
    SettingsError,
    predict_startup,
    spec_capture_sizes,
)
from inference_capacity.engines.vllm_flags import classify
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model
from inference_capacity.model.source import clear_cache
from inference_capacity.resolve import draft_model_ref, resolve
from inference_capacity.units import MiB, gib
from tests import checkpoints as ck
from tests.hubserver import HubServer
from tests.test_cudagraph_estimate import llama_8b_estimate_mib

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"
_SHARED = ROOT.parent / "shared" / "data" / "model-configs"
CONFIGS = _SHARED if _SHARED.is_dir() else ROOT / "operator/inference_capacity/catalog/models"
LLAMA_1B: dict[str, Any] = json.loads((CONFIGS / "meta-llama__Llama-3.2-1B.json").read_text())
H100 = get_gpu("H100-SXM-80GB")
LLAMA_8B = load_model("meta-llama/Llama-3.1-8B-Instruct")


def sizes(version: str, k: int, v2: bool = False, R: int = 1024, T: int = 8192) -> Any:
    return spec_capture_sizes(parse_version(version), R, T, k, None, None, H100.name, v2)


# --- capture sizes ------------------------------------------------------------------------------
#
# R = 1024, T = 8192 (the H100 defaults). Without max_cudagraph_capture_size the largest size is
# min(2 R q, 512) = 512 (0.13+; min(2 R, 512) = 512 through 0.12), min(512, T) = 512.
# The 0.12+ grid up to 512: [1, 2, 4] + 8..248 step 8 (31) + 256..512 step 16 (17) = 51 sizes.
#
# 0.11 (no rounding; SchedulerConfig.cuda_graph_sizes = [min(2 R, 512)]): [1, 2, 4] + 8..512
# step 8 = 3 + 64 = 67 PIECEWISE; FULL decode graphs are the sizes s with q <= s <= R q
# (GPUModelRunner.capture_model): q = 2 drops 1 (66), q = 4 drops 1, 2 (65), q = 6 drops
# 1, 2, 4 (64).
#
# 0.12–0.28, V1 runner: every size rounded up to a multiple of q, kept if <= 512:
#   k = 1, q = 2: 1 -> 2 joins 2; the rest are even: 2 + 31 + 17 = 50, largest 512;
#   k = 3, q = 4: 1, 2, 4 -> 4; multiples of 8 and 16 stay: 1 + 31 + 17 = 49, largest 512;
#   k = 5, q = 6: 1, 2, 4 -> 6; 8m -> ceil(8m / 6) × 6 (31 distinct, steps of 8 > 6, the first
#     12); 256..496 step 16 -> 16 distinct values (258 .. 498), 512 -> 516 > 512 dropped:
#     1 + 31 + 16 = 48, largest 498 (496 -> 498).
#   FULL decode graphs: all of them (q <= s <= 1024 q).
#
# 0.29+ adds the uniform decode sizes n q (n in the grid up to min(R, 512), and R) within 512;
# for q = 2, 4, 6 after rounding they are already there (V1 runner: 50, 49, 48 again).
# The V2 runner (every model from 0.29) does not round from 0.25: 51 grid sizes plus the n q
# not in the grid: q = 2: 2n for n <= 256 are 2, 4, 16..496 step 16, 512: all in the grid (51);
# q = 4: 4n for n <= 128 are 4, 8, 32m: all in the grid (51); q = 6: 6n for n <= 85 are 6, 12,
# 24, 48m: 6 and 12 are new (53). Its FULL decode graphs (CudaGraphManager._init_candidates) are
# the sizes rounded up to q within min(R q, 512): the V1 runner's rounded sets, 50, 49, 48.
CAPTURES = [
    # version, k, V2 runner, PIECEWISE, FULL decode, largest
    ("0.11.0", 1, False, 67, 66, 512),
    ("0.11.0", 3, False, 67, 65, 512),
    ("0.11.0", 5, False, 67, 64, 512),
    ("0.12.0", 1, False, 50, 50, 512),
    ("0.12.0", 3, False, 49, 49, 512),
    ("0.12.0", 5, False, 48, 48, 498),
    ("0.20.0", 1, False, 50, 50, 512),
    ("0.20.0", 3, False, 49, 49, 512),
    ("0.20.0", 5, False, 48, 48, 498),
    ("0.29.0", 5, False, 48, 48, 498),
    ("0.33.0", 1, True, 51, 50, 512),
    ("0.33.0", 3, True, 51, 49, 512),
    ("0.33.0", 5, True, 53, 48, 512),
]


@pytest.mark.parametrize(("version", "k", "v2", "mixed", "decode", "largest"), CAPTURES)
def test_capture_sizes_with_k_speculative_tokens(
    version: str, k: int, v2: bool, mixed: int, decode: int, largest: int
) -> None:
    c = sizes(version, k, v2)
    assert (len(c.mixed), len(c.decode), c.max_size) == (mixed, decode, largest)
    q = 1 + k
    if version != "0.11.0" and not v2:
        assert all(x % q == 0 for x in c.mixed)  # adjust_cudagraph_sizes_for_spec_decode


def test_k5_sizes_are_rounded_up_to_multiples_of_6() -> None:
    # 1, 2, 4 -> 6; 8 -> 12; 16 -> 18; 24; 32 -> 36; ...; 496 -> 498
    c = sizes("0.20.0", 5)
    assert c.mixed[:5] == (6, 12, 18, 24, 36)
    assert c.mixed[-2:] == (480, 498)


def test_the_largest_size_grows_with_q_from_0_13() -> None:
    # R = 64, k = 3 (q = 4): 0.12 takes min(2 R, 512) = 128: the grid [1, 2, 4] + 8..128 step 8
    # (16) rounded to 4 is 4, 8..128: 17 sizes, all <= R q = 256 (17 FULL decode graphs).
    c = sizes("0.12.0", 3, R=64)
    assert (c.max_size, len(c.mixed), len(c.decode)) == (128, 17, 17)
    # 0.13 takes min(2 R q, 512) = 512: the 49 sizes of q = 4 above; FULL decode only those
    # <= R q = 256: 4, 8..248 (31), 256 = 33
    c = sizes("0.13.0", 3, R=64)
    assert (c.max_size, len(c.mixed), len(c.decode)) == (512, 49, 33)


def test_user_capture_sizes_that_round_past_the_maximum_fail_as_vllm_does() -> None:
    # sizes [3], max 3, q = 4: round_up(3, 4) = 4 > 3 and q > 3: vLLM raises
    v = parse_version("0.20.0")
    with pytest.raises(SettingsError, match="No valid cudagraph sizes"):
        spec_capture_sizes(v, 256, 8192, 3, (3,), 3, H100.name, False)
    # sizes [1, 2, 4], max 4: all round up to 4 <= 4: [4]
    c = spec_capture_sizes(v, 256, 8192, 3, (1, 2, 4), 4, H100.name, False)
    assert c.mixed == (4,)
    # sizes [8, 600] without a maximum: the largest is 600 (the last size, not min(2Rq, 512)),
    # so 600 (a multiple of 4) stays
    c = spec_capture_sizes(v, 256, 8192, 3, (8, 600), None, H100.name, False)
    assert (c.mixed, c.max_size) == ((8, 600), 600)
    # a maximum other than the last size, with sizes: vLLM raises
    with pytest.raises(SettingsError, match="should be consistent"):
        spec_capture_sizes(v, 256, 8192, 3, (8, 16), 32, H100.name, False)


def test_a_batch_budget_below_the_grid_caps_the_rounding() -> None:
    # T = 300, R = 1024, k = 3, 0.20: largest min(2 R q, 512, T) = 300; the grid [1, 2, 4] +
    # 8..248 step 8 + 256..288 step 16 ends at 288, which becomes the largest; rounded to 4:
    # 4, 8..248 (31), 256, 272, 288 = 35 sizes (0.22+ would add T = 300 itself)
    c = sizes("0.20.0", 3, T=300)
    assert (len(c.mixed), c.max_size) == (35, 288)


def _cg(version: str, k: int, draft: str | None = None) -> tuple[int, Any]:
    spec = parse_speculative_config(
        json.dumps(
            {"method": "draft_model" if draft else "ngram", "num_speculative_tokens": k}
            | ({"model": draft} if draft else {})
        )
    )
    s = EngineSettings(
        version=version,
        max_model_len=8192,
        speculative=spec,
        draft_model=load_model(draft) if draft else None,
    )
    p = predict_startup(LLAMA_8B, H100.total_bytes, H100.name, 1, 1, s)
    return p.ranks[0].cuda_graph, p


def _capture(version: str, k: int) -> Any:
    # vLLM 0.19+ defaults on an H100: max-num-seqs 1024, 8,192 batched tokens
    return spec_capture_sizes(parse_version(version), 1024, 8192, k, None, None, H100.name, False)


def test_cuda_graph_estimate_follows_the_graph_count() -> None:
    # 0.20 (V1 runner for Llama), n-gram, k = 3: 49 + 49 graphs; vLLM's estimate is a first
    # capture plus an increment per further graph (the oracle: tests/test_cudagraph_estimate.py)
    cg, p = _cg("0.20.0", 3)
    c = _capture("0.20.0", 3)
    assert (len(c.mixed), len(c.decode)) == (49, 49)
    expected = llama_8b_estimate_mib(max(c.mixed), 49, 49, True, max(c.decode))
    assert cg == pytest.approx(expected * MiB, abs=2)
    assert p.settings.cg_in_budget  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on from 0.20
    assert any("49 PIECEWISE + 49 FULL" in n for n in p.notes)
    # k = 5: 48 + 48
    c5 = _capture("0.20.0", 5)
    assert (len(c5.mixed), len(c5.decode)) == (48, 48)
    expected5 = llama_8b_estimate_mib(max(c5.mixed), 48, 48, True, max(c5.decode))
    assert _cg("0.20.0", 5)[0] == pytest.approx(expected5 * MiB, abs=2)


def test_the_graph_note_names_speculative_decoding_only_with_speculative_tokens() -> None:
    # Llama-3.1-8B on an H100, vLLM 0.19.0 defaults (max-num-seqs 1024, 8,192 batched tokens):
    # the capture list is worked out with q = 1; vLLM's default sizes up to 512 are
    # [1, 2, 4] + range(8, 256, 8) + range(256, 513, 16) = 3 + 31 + 17 = 51, each captured
    # PIECEWISE and FULL. Without speculation the note must not name it.
    p = predict_startup(
        LLAMA_8B, H100.total_bytes, H100.name, 1, 1, EngineSettings(version="0.19.0")
    )
    assert "captures 51 PIECEWISE + 51 FULL CUDA graphs, largest 512" in p.notes
    assert not any("speculative" in n for n in p.notes)
    # with k = 3 n-gram tokens it is named (q = 4)
    _, spec = _cg("0.20.0", 3)
    assert any(n.startswith("speculative decoding (q = 4 tokens") for n in spec.notes)


def test_v2_runner_counts_the_drafter_graphs_from_0_30() -> None:
    # 0.33, V2 runner, draft model Llama-3.2-1B (16 layers), k = 3: 51 + 49 graphs; the V2
    # profile_cudagraph_memory measures the speculator's graphs too: + 16 × CG_PER_LAYER
    base = gib(CG_BASE_GIB + 32 * CG_PER_LAYER_GIB) + gib(16 * CG_PER_LAYER_GIB)
    cg, _ = _cg("0.33.0", 3, draft="meta-llama/Llama-3.2-1B")
    assert cg == base * 100 // 102
    # 0.20's V1 runner estimates the target's graphs only: 49 + 49, as without a drafter
    cg, _ = _cg("0.20.0", 3, draft="meta-llama/Llama-3.2-1B")
    assert cg == _cg("0.20.0", 3)[0]


def test_draft_model_method_before_0_16_is_refused() -> None:
    # engine/arg_utils.py (0.11.0–0.14.0): "Draft model speculative decoding is not supported"
    with pytest.raises(SettingsError, match="draft_model"):
        _cg("0.14.0", 3, draft="meta-llama/Llama-3.2-1B")


@pytest.mark.parametrize(
    ("method", "named"),
    [("medusa", "Medusa"), ("mlp_speculator", "MLP speculator"), ("lookahead", "lookahead")],
)
def test_unmodelled_drafter_methods_are_refused_by_name(method: str, named: str) -> None:
    value = json.dumps({"method": method, "model": "acme/heads", "num_speculative_tokens": 3})
    bad = classify({"speculative-config": value}, {})
    assert [u.name for u in bad] == ["--speculative-config"]
    assert named in bad[0].why and method in bad[0].why


# --- drafters outside the catalog ---------------------------------------------------------------


def manifest(draft: str, k: int = 3, method: str = "draft_model") -> list[dict[str, Any]]:
    icap, dep = list(yaml.safe_load_all(EXAMPLE.read_text()))
    c = dep["spec"]["template"]["spec"]["containers"][0]
    spec = {"method": method, "model": draft, "num_speculative_tokens": k}
    c["args"] = ["--port", "8000", "--max-model-len", "32768"]
    c["args"] += ["--speculative-config", json.dumps(spec)]
    return [icap, dep]


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HubServer, Any, Path]]:
    """A drafter outside the catalog on the test Hub: Llama-3.2-1B's config and tensors plus
    an EAGLE-style ``fc`` (2H -> H) that the config does not describe, so only the safetensors
    header can give its bytes."""
    server = HubServer().start()
    folder = tmp_path_factory.mktemp("draft") / "llama-3.2-1b-draft"
    h = LLAMA_1B["hidden_size"]
    spec = {**ck.dense(LLAMA_1B), "fc.weight": ("BF16", (h, 2 * h))}
    files = ck.write_checkpoint(folder, spec, LLAMA_1B)
    server.add("acme/llama-3.2-1b-draft", dict(files))
    try:
        yield server, spec, folder
    finally:
        server.stop()


@pytest.fixture
def hub_env(
    hub: tuple[HubServer, Any, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    monkeypatch.setenv("HF_ENDPOINT", hub[0].url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    clear_cache()
    yield {**os.environ}
    clear_cache()


def _plan_json(docs: list[dict[str, Any]], tmp_path: Path, env: dict[str, str]) -> Any:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    r = subprocess.run(
        [sys.executable, "-m", "inference_capacity.cli", "plan", str(path), "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _drafter_bytes(out: Any) -> int:
    items = {i["name"]: i["bytes"] for i in out["ledger"]["ranks"][0]["items"]}
    return int(items["weights.drafter"])


def test_cli_plans_a_hub_drafter_from_its_headers(
    hub: tuple[HubServer, Any, Path], hub_env: dict[str, str], tmp_path: Path
) -> None:
    server, spec, _ = hub
    out = _plan_json(manifest("acme/llama-3.2-1b-draft", method="eagle"), tmp_path, hub_env)
    # the drafter's weights at TP 1: the header's tensors exactly (Σ elements × 2 B, bf16, with
    # fc's 2048 × 4096 × 2 B = 16 MiB that no config formula has) plus
    # its own rotary cache, max_position_embeddings × head_dim × 2 B (as for a Hub model in
    # test_model_source.py::test_cli_plans_a_hub_model_with_header_weights)
    rope = LLAMA_1B["max_position_embeddings"] * LLAMA_1B["head_dim"] * 2
    assert _drafter_bytes(out) == ck.expected_bytes(spec) + rope
    assert server.count("GET", "_blobs") >= 1  # the header was read by range request
    # its 16 layers share the target's KV blocks: Llama-3.1-8B 32 × 16 × 2 × 8 × 128 × 2 B
    # plus Llama-3.2-1B 16 × 16 × 2 × 8 × 64 × 2 B per 16-token block, one group
    assert out["vllm_startup"]["bytes_per_block"] == (
        32 * 16 * 2 * 8 * 128 * 2 + 16 * 16 * 2 * 8 * 64 * 2
    )
    assert out["vllm_startup"]["kv_groups"] == 1
    commit = server.repos["acme/llama-3.2-1b-draft"].refs["main"]
    assert any(f"at commit {commit}" in n for n in out["notes"])


def test_a_local_drafter_folder_in_the_cli(
    hub: tuple[HubServer, Any, Path], hub_env: dict[str, str], tmp_path: Path
) -> None:
    _, spec, folder = hub
    out = _plan_json(manifest(str(folder)), tmp_path, hub_env)
    rope = LLAMA_1B["max_position_embeddings"] * LLAMA_1B["head_dim"] * 2
    assert _drafter_bytes(out) == ck.expected_bytes(spec) + rope


def test_an_eagle_head_shares_the_targets_embedding_head_and_rotary_cache(
    hub_env: dict[str, str], tmp_path: Path
) -> None:
    # an EAGLE-style head for Llama-3.1-8B in a local folder: the target's config with one
    # layer, its checkpoint without embed_tokens and lm_head (vLLM then uses the target's:
    # llm_base_proposer.py::_maybe_share_embeddings / _maybe_share_lm_head, 0.20) plus fc
    # (2H -> H). Its rotary cache has the target's configuration, so get_rope hands it the
    # target's cache. Its weights are the header's bytes exactly.
    cfg = json.loads((CONFIGS / "meta-llama__Llama-3.1-8B-Instruct.json").read_text())
    cfg = {**cfg, "num_hidden_layers": 1}
    h = cfg["hidden_size"]
    spec = {
        k: v
        for k, v in ck.dense(cfg).items()
        if k not in ("model.embed_tokens.weight", "lm_head.weight")
    } | {"fc.weight": ("BF16", (h, 2 * h))}
    folder = tmp_path / "eagle-head"
    ck.write_checkpoint(folder, spec, cfg)
    out = _plan_json(manifest(str(folder), method="eagle"), tmp_path, hub_env)
    assert _drafter_bytes(out) == ck.expected_bytes(spec)
    # one more full-attention layer of the target's shape: 33 × 16 × 2 × 8 × 128 × 2 B a block
    assert out["vllm_startup"]["bytes_per_block"] == 33 * 16 * 2 * 8 * 128 * 2


def test_an_unknown_hub_drafter_is_refused_by_name(hub_env: dict[str, str]) -> None:
    icap, dep = manifest("acme/no-such-drafter")
    r = resolve(InferenceCapacity.from_manifest(icap, ignore_status=True).spec, dep)
    assert [u.name for u in r.unsupported] == ["--speculative-config"]
    assert "acme/no-such-drafter" in r.unsupported[0].why


def test_the_operator_reads_the_drafter_ref_from_the_deployment() -> None:
    icap, dep = manifest("acme/llama-3.2-1b-draft", method="eagle")
    spec = InferenceCapacity.from_manifest(icap, ignore_status=True).spec
    assert draft_model_ref(spec, dep) == ("acme/llama-3.2-1b-draft", None)
    icap, dep = manifest("acme/x", method="ngram")
    assert draft_model_ref(spec, dep) is None
    # a drafter the operator did not resolve is never looked up inside resolve()
    icap, dep = manifest("acme/llama-3.2-1b-draft")
    r = resolve(spec, dep, draft_sources={})
    assert "was not resolved" in r.unsupported_message()
