"""vLLM's multimodal encoder profile (``--limit-mm-per-prompt``, ``--skip-mm-profiling``):
the rules read from vLLM's code (0.11–0.33), the Gemma 3 SigLIP profile they size, and the
refusal of every multimodal model whose profile is not sized.

Sources of the rules (engines/vllm_mm.py cites them): ``v1/worker/gpu_model_runner.py::
profile_run`` / ``_get_mm_dummy_batch``, ``v1/core/encoder_cache_manager.py::
compute_mm_encoder_budget``, ``MultiModalBudget._get_max_items`` (``v1/worker/utils.py``,
later ``multimodal/budget.py``), ``config/multimodal.py::MultiModalConfig``,
``model_executor/models/gemma3_mm.py::Gemma3ProcessingInfo``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from benchmarks.accuracy import IN_SAMPLE
from benchmarks.helpers import load_points, predict_point

from inference_capacity.api import InferenceCapacity
from inference_capacity.budget import build_ledger
from inference_capacity.cli import main as cli_main
from inference_capacity.engines.vllm import EngineSettings, predict_startup
from inference_capacity.engines.vllm_flags import classify
from inference_capacity.engines.vllm_mm import (
    CALIBRATED_PROFILES,
    LLAMA4_ENCODER_PROFILE_GIB,
    ProfileSizing,
    encoder_budget,
    max_items_per_batch,
    parse_limit_mm_per_prompt,
    profile_sizing,
    text_only,
)
from inference_capacity.model import catalog_names, load_model
from inference_capacity.resolve import resolve
from inference_capacity.units import gib

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"
H100 = int(79.19 * 2**30)  # hardware.py's H100 80GB as CUDA reports it

# Gemma 3 (google/gemma-3-*-it config.json): SigLIP hidden 1152, intermediate 4304, 27 layers,
# image_size 896, patch 14 → (896 / 14)² = 4096 patches; mm_tokens_per_image 256
SIGLIP_H, SIGLIP_I, PATCHES, IMAGE, TOKENS = 1152, 4304, 4096, 896, 256


SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E-Instruct"
LOGS = ROOT / "tests" / "data" / "vllm-startup-logs.jsonl"


def scout_manifest(args: list[str], model: str = SCOUT) -> list[Any]:
    """vllm-startup-041's start as a Deployment: TP4, 0.19.0, max-model-len 8192, u 0.95."""
    icap, dep = list(yaml.safe_load_all(EXAMPLE.read_text()))
    icap["spec"]["model"]["name"] = model
    icap["spec"]["hardware"]["tensorParallel"] = 4
    icap["spec"]["workload"]["maxModelLen"] = 8192
    for cohort in icap["spec"]["workload"]["cohorts"]:
        for q in ("promptTokens", "outputTokens"):
            cohort[q] = {"p50": 500, "p95": 1000, "p99": 2000}
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["command"] = ["vllm", "serve", model]
    c["args"] = ["--port", "8000", "--max-model-len", "8192", "--tensor-parallel-size", "4"]
    c["args"] += ["--gpu-memory-utilization", "0.95", *args]
    c["resources"]["limits"]["nvidia.com/gpu"] = "4"
    return [icap, dep]


def resolved(model: str, args: list[str], version: str | None = None) -> Any:
    icap, dep = list(yaml.safe_load_all(EXAMPLE.read_text()))
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["args"] = ["--port", "8000", "--max-model-len", "32768", *args]
    icap["spec"]["model"]["name"] = model
    if version is not None:
        icap["spec"]["engine"]["version"] = version
    return resolve(InferenceCapacity.from_manifest(icap, ignore_status=True).spec, dep)


# --- the flag -----------------------------------------------------------------------------------


def test_limit_mm_per_prompt_forms() -> None:
    # config/multimodal.py: the legacy count form, the options form, and both mixed
    assert parse_limit_mm_per_prompt('{"image": 2, "video": 0}') == {"image": 2, "video": 0}
    mixed = '{"image": 16, "video": {"count": 1, "num_frames": 32, "width": 512, "height": 512}}'
    assert parse_limit_mm_per_prompt(mixed) == {"image": 16, "video": 1}
    # BaseDummyOptions.count defaults to 999 when an options object leaves it out
    assert parse_limit_mm_per_prompt('{"image": {"width": 512, "height": 512}}') == {"image": 999}
    assert parse_limit_mm_per_prompt('{"audio": {"count": 0, "length": 16000}}') == {"audio": 0}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("[1]", "JSON object"),
        ('{"image": -1}', ">= 0"),  # count: Field(999, ge=0)
        ('{"image": true}', ">= 0"),
        ('{"image": {"num_frames": 8}}', "not num_frames"),  # ImageDummyOptions extra="forbid"
        ('{"video": {"count": 1, "width": 0}}', "> 0"),  # width: Field(None, gt=0)
    ],
)
def test_limit_mm_per_prompt_refuses_what_vllm_refuses(value: str, why: str) -> None:
    with pytest.raises(ValueError, match="--limit-mm-per-prompt") as exc:
        parse_limit_mm_per_prompt(value)
    assert why in str(exc.value)
    bad = classify({"limit-mm-per-prompt": value}, {})
    assert [u.name for u in bad] == ["--limit-mm-per-prompt"]


def test_multimodal_flags_classified() -> None:
    # modelled: the profile flags; host memory: the processor cache (config/multimodal.py sizes
    # it per process in host RAM); refused: encoder data parallel, another ViT attention kernel
    ok = {
        "skip-mm-profiling": "true",
        "mm-encoder-tp-mode": "weights",
        "mm-processor-cache-gb": "8",
        "limit-mm-per-prompt": '{"image": 1}',
    }
    assert classify(ok, {}) == []
    bad = {u.name for u in classify({"mm-encoder-tp-mode": "data"}, {})}
    assert bad == {"--mm-encoder-tp-mode"}
    assert {u.name for u in classify({"mm-encoder-attn-backend": "TORCH_SDPA"}, {})} == {
        "--mm-encoder-attn-backend"
    }


def test_text_only_needs_every_supported_modality_at_zero() -> None:
    # MultiModalConfig.get_limit_per_prompt: a modality the flag leaves out allows 999 items
    assert text_only({"image": 0, "video": 0}, ("image", "video"))
    assert not text_only({"image": 0}, ("image", "video"))
    assert not text_only(None, ("image",))
    assert text_only({"image": 0}, ("image",))


# --- the budget rule (MultiModalBudget._get_max_items) ------------------------------------------


def test_items_per_batch_rule() -> None:
    # budget = max(T, tokens) = 8192; 8192 // 256 = 32 by the encoder; per prompt
    # max(1, min(999, 32768 // 256 = 128)) = 128, × 1024 sequences: the encoder bounds it
    assert encoder_budget(256, 8192) == 8192
    assert max_items_per_batch(256, 999, 32768, 1024, 8192, True) == 32
    # limit 1 image per prompt, 16 sequences: 16 × 1 = 16 < 32
    assert max_items_per_batch(256, 1, 32768, 16, 8192, True) == 16
    # without chunked prefill max_num_reqs = min(256, 2048 // 256 = 8): 8 × 1 = 8
    assert max_items_per_batch(256, 1, 32768, 256, 2048, False) == 8
    # an item larger than T: the budget is raised to it (compute_mm_encoder_budget) → 1 item
    assert encoder_budget(16384, 8192) == 16384
    assert max_items_per_batch(16384, 999, 32768, 256, 8192, True) == 1
    # a limit of 0 makes the modality inactive
    assert max_items_per_batch(256, 0, 32768, 256, 8192, True) == 0


# --- Gemma 3: the profile sized --------------------------------------------------------------


def _predict(model: str, tp: int, **kw: Any) -> Any:
    return predict_startup(
        load_model(model),
        H100,
        "H100-SXM-80GB",
        tp,
        1,
        EngineSettings(version="0.19.0", max_model_len=32768, **kw),
    )


def test_gemma3_tower_from_config() -> None:
    t = load_model("google/gemma-3-27b-it").vision_tower
    assert t is not None
    assert (t.tokens_per_item, t.patches_per_crop, t.image_size) == (TOKENS, PATCHES, IMAGE)
    assert t.output_hidden == 5376  # text_config.hidden_size: embeddings the projector hands on


def test_gemma3_encoder_outputs_kept_during_the_text_forward() -> None:
    # 0.19 H100 defaults: T = 8192, R = 1024 → 32 images of 256 tokens (rule above).
    # Encoder step: pixels 32 × 3 × 896² × 2 B = 154,140,672; SigLIP layer peak per patch
    # 2·1152 + 2·4304 = 10,912 elements → 32 × 4096 × 10,912 × 2 B = 2,860,515,328.
    # The 27B's text step (sampler at R = 1024 × 262,208 vocab) is larger, so the profile adds
    # the outputs held in encoder_cache: 32 × 256 × 5376 × 2 B = 88,080,384.
    p = _predict("google/gemma-3-27b-it", 1)
    r = p.ranks[0]
    prof = r.mm_profile
    assert prof is not None and (prof.items, prof.budget) == (32, 8192)
    assert prof.pixel_bytes == 32 * 3 * IMAGE**2 * 2 == 154_140_672
    assert prof.tower_peak == 32 * PATCHES * (2 * SIGLIP_H + 2 * SIGLIP_I) * 2 == 2_860_515_328
    assert prof.outputs == 32 * TOKENS * 5376 * 2 == 88_080_384
    assert r.mm_encoder == 88_080_384
    text = _predict("google/gemma-3-27b-it", 1, mm_limits=(("image", 0),)).ranks[0]
    assert r.activation_peak - text.activation_peak == 88_080_384
    assert text.available_kv - r.available_kv == 88_080_384


def test_gemma3_encoder_step_bounds_the_peak_at_few_sequences() -> None:
    # --max-num-seqs 16: the 4B's text step is small, so the peak is the encoder step itself:
    # 154,140,672 + 2,860,515,328 = 3,014,656,000 (TP1). At TP2 fc1 is column-parallel:
    # 2·1152 + 2·(4304 / 2) = 6,608 → 32 × 4096 × 6,608 × 2 = 1,732,247,552 (+ the pixels).
    one = _predict("google/gemma-3-4b-it", 1, max_num_seqs=16).ranks[0]
    assert one.activation_peak == 154_140_672 + 2_860_515_328 == 3_014_656_000
    two = _predict("google/gemma-3-4b-it", 2, max_num_seqs=16).ranks[0]
    assert two.mm_profile is not None and two.mm_profile.tower_peak == 1_732_247_552
    assert two.activation_peak == 154_140_672 + 1_732_247_552


def test_limit_and_sequences_shrink_the_batch() -> None:
    # --limit-mm-per-prompt image 1 with --max-num-seqs 8: 8 × 1 = 8 images, a quarter of 32
    p = _predict("google/gemma-3-4b-it", 1, max_num_seqs=8, mm_limits=(("image", 1),))
    prof = p.ranks[0].mm_profile
    assert prof is not None and prof.items == 8
    assert prof.tower_peak == 8 * PATCHES * (2 * SIGLIP_H + 2 * SIGLIP_I) * 2


def test_text_only_profiles_keep_todays_numbers() -> None:
    # every modality 0, or --skip-mm-profiling: profile_run runs no encoder; the prediction is
    # the one of the same model without a tower, rank by rank
    m = load_model("google/gemma-3-27b-it")
    bare = replace(m, vision_tower=None)
    base = EngineSettings(version="0.19.0", max_model_len=32768)
    want = predict_startup(bare, H100, "H100-SXM-80GB", 1, 1, base)
    for s in (replace(base, mm_limits=(("image", 0),)), replace(base, skip_mm_profiling=True)):
        got = predict_startup(m, H100, "H100-SXM-80GB", 1, 1, s)
        assert got.ranks == want.ranks
        assert got.ranks[0].mm_encoder == 0


def test_ledger_names_the_encoder_term() -> None:
    p = _predict("google/gemma-3-27b-it", 1)
    items = {i.name: i for i in build_ledger(p, 0.05)[0].items}
    item = items["mm_encoder_profile"]
    assert item.bytes == 88_080_384 and item.in_vllm_budget
    assert "32 image items × 256 tokens" in item.note
    text = _predict("google/gemma-3-27b-it", 1, skip_mm_profiling=True)
    assert "mm_encoder_profile" not in {i.name for i in build_ledger(text, 0.05)[0].items}


# --- the class of each architecture's profile (vllm_mm.profile_sizing) ----------------------


def test_every_multimodal_catalog_model_has_its_profile_class() -> None:
    # every multimodal config of the catalog (operator/inference_capacity/catalog/models):
    # Gemma 3 sized by formula, Llama 4
    # calibrated (vllm-startup-041), the rest unknown (refused unless text-only)
    got = {}
    for name in catalog_names():
        m = load_model(name)
        if m.is_multimodal:
            got[name] = profile_sizing(m)
    assert got == {
        "google/gemma-3-27b-it": ProfileSizing.SIZED,
        "google/gemma-3-4b-it": ProfileSizing.SIZED,
        SCOUT: ProfileSizing.CALIBRATED,
        MAVERICK: ProfileSizing.CALIBRATED,
        "Qwen/Qwen2.5-VL-7B-Instruct": ProfileSizing.UNKNOWN,
        "Qwen/Qwen3.5-35B-A3B": ProfileSizing.UNKNOWN,
        "Qwen/Qwen3-VL-8B-Instruct": ProfileSizing.UNKNOWN,
        "Qwen/Qwen3-VL-30B-A3B-Instruct": ProfileSizing.UNKNOWN,
        "google/gemma-4-26B-A4B": ProfileSizing.UNKNOWN,
        "meta-llama/Llama-3.2-90B-Vision-Instruct": ProfileSizing.UNKNOWN,
        "moonshotai/Kimi-K2.5": ProfileSizing.UNKNOWN,
        "nvidia/Kimi-K2.5-NVFP4": ProfileSizing.UNKNOWN,
        "nvidia/Qwen3.6-27B-NVFP4": ProfileSizing.UNKNOWN,
        "nvidia/Qwen3.6-35B-A3B-NVFP4": ProfileSizing.UNKNOWN,
        "nvidia/Qwen3.5-397B-A17B-NVFP4": ProfileSizing.UNKNOWN,
        "nvidia/Qwen3.5-122B-A10B-NVFP4": ProfileSizing.UNKNOWN,
        "nvidia/Gemma-4-31B-IT-NVFP4": ProfileSizing.UNKNOWN,
        "nvidia/Gemma-4-26B-A4B-NVFP4": ProfileSizing.UNKNOWN,
        "nvidia/Kimi-K2.6-NVFP4": ProfileSizing.UNKNOWN,
        "Qwen/Qwen3.5-27B": ProfileSizing.UNKNOWN,
        "Qwen/Qwen3.5-397B-A17B": ProfileSizing.UNKNOWN,
    }
    assert profile_sizing(load_model("meta-llama/Llama-3.1-8B-Instruct")) is None


def test_calibrations_name_an_in_sample_log_of_their_architecture() -> None:
    # each calibrated profile names a point of the log collection that ran the architecture and
    # that benchmarks.accuracy lists as in-sample for the constant
    points = {p.id: p for p in load_points(LOGS)}
    for arch, cal in CALIBRATED_PROFILES.items():
        assert load_model(points[cal.log].model).architecture == arch
        assert cal.constant.removesuffix("_GIB") in IN_SAMPLE[cal.log]


def test_a_calibrated_profile_is_not_added_even_with_a_tower() -> None:
    # no double counting: were a tower read for Llama 4, the calibrated class still wins and
    # predict_startup adds its calibrated bytes once, no formula step (rank by rank the same as
    # without the tower)
    scout = load_model(SCOUT)
    towered = replace(scout, vision_tower=load_model("google/gemma-3-4b-it").vision_tower)
    assert profile_sizing(towered) is ProfileSizing.CALIBRATED
    s = EngineSettings(version="0.19.0", max_model_len=8192)
    a = predict_startup(scout, H100, "H100-SXM-80GB", 4, 1, s)
    b = predict_startup(towered, H100, "H100-SXM-80GB", 4, 1, s)
    assert a.ranks == b.ranks and b.ranks[0].mm_profile is None
    assert b.ranks[0].mm_encoder == gib(LLAMA4_ENCODER_PROFILE_GIB)


def _scout(args: list[str], version: str = "0.19.0", model: str = SCOUT) -> Any:
    icap, dep = scout_manifest(args, model)
    icap["spec"]["engine"]["version"] = version
    return resolve(InferenceCapacity.from_manifest(icap, ignore_status=True).spec, dep)


def test_llama4_is_planned_from_its_calibration() -> None:
    # vllm-startup-041 as a Deployment (no --limit-mm-per-prompt: 999 images, as in the log):
    # supported, the note names the constant and the log, and the activation peak is the one
    # benchmarks.accuracy replays for the point (logged 3.19 GiB; +0.10 % there)
    r = _scout([])
    assert r.supported, r.unsupported_message()
    (note,) = [n for n in r.notes if "encoder profile" in n]
    assert "LLAMA4_ENCODER_PROFILE_GIB" in note and "vllm-startup-041" in note
    pred = predict_startup(r.plan_input.model, H100, "H100-SXM-80GB", 4, 1, r.plan_input.engine)
    point = {p.id: p for p in load_points(LOGS)}["vllm-startup-041"]
    replay, _ = predict_point(point)
    assert replay is not None
    act = pred.ranks[0].activation_peak / 2**30
    assert round(act, 4) == replay["ranks"][0]["activation_peak_gib"]
    assert abs(act / point.logged["activation_peak_gib"] - 1) < 0.005
    assert pred.ranks[0].mm_encoder == gib(LLAMA4_ENCODER_PROFILE_GIB)
    assert pred.ranks[0].mm_profile is None
    # Maverick: the same tower and constant, the same class
    mav = _scout([], model=MAVERICK)
    assert mav.supported and any("vllm-startup-041" in n for n in mav.notes)


def test_llama4_refusals_that_stay() -> None:
    # the dummy image may change (Mllama4ProcessingInfo tiles): outside the calibration
    bad = _scout(["--mm-processor-kwargs", '{"max_patches": 4}'])
    assert [u.name for u in bad.unsupported] == ["--mm-processor-kwargs"]
    assert "calibrated" in bad.unsupported[0].why
    # before 0.11 the profile's batch rule is not the one read: unknown there
    old = _scout([], version="0.10.1")
    assert [u.name for u in old.unsupported] == ["--limit-mm-per-prompt"]
    assert "0.10.1" in old.unsupported[0].why
    # text-only: planned, and the calibrated profile is not counted (no encoder step runs)
    text = _scout(["--limit-mm-per-prompt", '{"image": 0}'])
    assert text.supported
    p = text.plan_input
    assert predict_startup(p.model, H100, "H100-SXM-80GB", 4, 1, p.engine).ranks[0].mm_encoder == 0


# --- refusals (resolve.py) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "arch"),
    [
        ("Qwen/Qwen2.5-VL-7B-Instruct", "Qwen2_5_VLForConditionalGeneration"),
        ("Qwen/Qwen3.5-35B-A3B", "Qwen3_5MoeForConditionalGeneration"),
        ("google/gemma-4-26B-A4B", "Gemma4ForConditionalGeneration"),
        ("meta-llama/Llama-3.2-90B-Vision-Instruct", "MllamaForConditionalGeneration"),
    ],
)
def test_unsized_towers_are_refused_with_the_fix(model: str, arch: str) -> None:
    r = resolved(model, [])
    assert not r.supported
    (u,) = [u for u in r.unsupported if u.name == "--limit-mm-per-prompt"]
    assert arch in u.why and "--skip-mm-profiling" in u.why and "every modality at 0" in u.why


def test_text_only_flags_make_an_unsized_tower_plannable() -> None:
    qwen = "Qwen/Qwen2.5-VL-7B-Instruct"
    # Qwen2.5-VL takes images and videos: image 0 alone leaves video at 999, still profiled
    assert not resolved(qwen, ["--limit-mm-per-prompt", '{"image": 0}']).supported
    assert resolved(
        qwen, ["--limit-mm-per-prompt", '{"image": 0, "video": {"count": 0}}']
    ).supported
    assert resolved(qwen, ["--skip-mm-profiling"]).supported
    # before 0.11 the V1 profile with MultiModalBudget is not the one modelled: refused, and the
    # fix offered is the limit only
    old = resolved(qwen, [], version="0.10.1")
    (u,) = old.unsupported
    assert "0.10.1" in u.why and "--skip-mm-profiling" not in u.why
    assert not resolved(qwen, ["--skip-mm-profiling"], version="0.10.1").supported


def test_gemma3_is_planned_and_processor_kwargs_refused() -> None:
    gemma = "google/gemma-3-27b-it"
    r = resolved(gemma, [])
    assert r.supported and r.plan_input.model.vision_tower is not None
    # pan-and-scan (Gemma3ProcessingInfo.get_num_crops) would add crops to the dummy image
    bad = resolved(gemma, ["--mm-processor-kwargs", '{"do_pan_and_scan": true}'])
    assert [u.name for u in bad.unsupported] == ["--mm-processor-kwargs"]
    # with the profile text-only the processor kwargs no longer touch it
    ok = resolved(
        gemma,
        [
            "--mm-processor-kwargs",
            '{"do_pan_and_scan": true}',
            "--limit-mm-per-prompt",
            '{"image": 0}',
        ],
    )
    assert ok.supported
    assert r.plan_input.engine.mm_limits is None
    assert ok.plan_input.engine.mm_limits == (("image", 0),)


def test_options_form_needs_0_11_1() -> None:
    # config/multimodal.py's options objects came with PR #25631 (0.11.1); 0.11.0 reads counts
    gemma = "google/gemma-3-27b-it"
    opts = '{"image": {"count": 2, "width": 512, "height": 512}}'
    old = resolved(gemma, ["--limit-mm-per-prompt", opts], version="0.11.0")
    assert [u.name for u in old.unsupported] == ["--limit-mm-per-prompt"]
    assert "0.11.1" in old.unsupported[0].why
    new = resolved(gemma, ["--limit-mm-per-prompt", opts], version="0.11.1")
    assert new.supported and new.plan_input.engine.mm_limits == (("image", 2),)
    assert resolved(gemma, ["--limit-mm-per-prompt", '{"image": 2}'], version="0.11.0").supported


# --- the command line (plan --model): the same rules ------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("inference-capacity", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "inference_capacity.cli"]
    return subprocess.run(
        [*cmd, "plan", "--gpu", "H100-SXM-80GB", "--max-model-len", "32768", "-o", "json", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_cli_what_if_of_an_unsized_tower_is_the_text_only_plan_labelled() -> None:
    # plan --model: Supported=False is said, and the numbers shown are those of the text-only
    # profile (the same as with either fix); exit 0, or 1 with --fail-if-not-fits
    qwen = ["--model", "Qwen/Qwen2.5-VL-7B-Instruct"]
    p = _cli(*qwen)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["supported"] is False
    assert "Qwen2_5_VLForConditionalGeneration" in out["unsupported"][0]["why"]
    assert "text-only profile" in out["unsupported_message"]
    text = _cli(*qwen, "--limit-mm-per-prompt", '{"image": 0, "video": 0}')
    skipped = _cli(*qwen, "--skip-mm-profiling")
    assert text.returncode == skipped.returncode == 0
    a, b = json.loads(text.stdout), json.loads(skipped.stdout)
    assert "supported" not in a and "supported" not in b
    # every modality at 0 also leaves the tower unbuilt (its 1,353,100,288 B, test below);
    # --skip-mm-profiling builds it, and so does the refused what-if (limits unset)
    kv = a["vllm_startup"]["available_kv_cache_gib"]
    assert round(kv - b["vllm_startup"]["available_kv_cache_gib"], 3) == round(
        1_353_100_288 / 2**30, 3
    )
    assert out["vllm_startup"] == b["vllm_startup"]
    strict = _cli(*qwen, "--fail-if-not-fits")
    assert strict.returncode == 1
    assert "Qwen/Qwen2.5-VL-7B-Instruct: Supported=False: --limit-mm-per-prompt" in strict.stderr


def test_cli_text_labels_the_numbers_before_the_ledger(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "H100-SXM-80GB"]
    assert cli_main(args) == 0
    shown = capsys.readouterr().out
    label = shown.index("Supported=False (UnsupportedFlag): the command line sets (or leaves")
    assert label < shown.index("ledger") and "text-only profile" in shown[label:]
    assert "Recommended for the text-only profile: " in shown


def test_cli_gemma3_profile_in_the_ledger() -> None:
    # the 4B at --max-num-seqs 16 (test above): the encoder step 3,014,656,000 B is the peak
    p = _cli(
        "--model", "google/gemma-3-4b-it", "--max-num-seqs", "16", "--engine-version", "0.19.0"
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["vllm_startup"]["activation_peak_gib"] == round(3_014_656_000 / 2**30, 4)
    items = {i["name"]: i for i in out["ledger"]["ranks"][0]["items"]}
    # the term is the encoder step less the text step (681,993,830 B at T = 8192)
    assert items["mm_encoder_profile"]["bytes"] == 3_014_656_000 - items["activation_peak"]["bytes"]


def test_manifest_plan_of_an_unsized_tower_is_supported_false(tmp_path: Path) -> None:
    # the operator's decision, through plan FILE: Supported=False naming the architecture, and
    # nothing patched (exit 5 for -o patch); the text-only limit on the container makes it
    # plannable. Llama 4 (calibrated) plans without it.
    vision = "meta-llama/Llama-3.2-90B-Vision-Instruct"
    icap, dep = scout_manifest([], model=vision)
    f = tmp_path / "vision.yaml"
    f.write_text(yaml.safe_dump_all([icap, dep]))
    exe = shutil.which("inference-capacity", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "inference_capacity.cli"]
    p = subprocess.run([*cmd, "plan", str(f), "-o", "json"], capture_output=True, text=True)
    out = json.loads(p.stdout)
    (u,) = out["unsupported"]
    assert u["name"] == "--limit-mm-per-prompt"
    assert "MllamaForConditionalGeneration" in u["why"] and '{"image": 0}' in u["why"]
    # the condition's message, for -o patch to print on stderr
    assert out["patch"]["note"].startswith("not patched: Supported=False (UnsupportedFlag): ")
    assert '{"image": 0}' in out["patch"]["note"]
    assert "ledger" not in out  # the manifest path makes no plan
    patch = subprocess.run([*cmd, "plan", str(f), "-o", "patch"], capture_output=True, text=True)
    assert patch.returncode == 5 and patch.stdout == ""
    icap, dep = scout_manifest(["--limit-mm-per-prompt", '{"image": 0}'], model=vision)
    f.write_text(yaml.safe_dump_all([icap, dep]))
    p = subprocess.run([*cmd, "plan", str(f), "-o", "json"], capture_output=True, text=True)
    assert "unsupported" not in json.loads(p.stdout), p.stderr
    f.write_text(yaml.safe_dump_all(scout_manifest([])))
    p = subprocess.run([*cmd, "plan", str(f), "-o", "json"], capture_output=True, text=True)
    scout = json.loads(p.stdout)
    assert scout["supported"] is True, p.stderr
    assert any("vllm-startup-041" in n for n in scout["notes"])


# --- Qwen2.5-VL: the dynamic-resolution dummy image (issue 11) ---------------------------------

QWEN_VL = "Qwen/Qwen2.5-VL-7B-Instruct"
# Qwen2.5-VL-7B vision_config: hidden 1280, intermediate 3420, depth 32, out_hidden 3584,
# patch 14, spatial merge 2, temporal patch 2, 3 channels → unit 28, 3·2·14² = 1176 pixel
# elements per patch. Block peak per patch (vllm_mm.vit_layer_peak_per_patch): MLP
# 2·1280 + 3·3420 = 12,820 (gate_up 2i + SiluAndMul i) > attention 2·1280 + 8·1280 = 12,800.
QWEN_PEAK = 12_820


def _qwen(args: list[str], version: str = "0.19.0") -> Any:
    return resolved(QWEN_VL, args, version)


def test_qwen25_vl_sized_from_max_pixels_in_processor_kwargs() -> None:
    # max_pixels 1,003,520 = 1280 units of 28²; get_image_size_with_most_features (0.13+,
    # models/qwen2_vl.py closest_factor_pair): 32 × 40 → 896 × 1120 px, 64 × 80 = 5120 patches,
    # 5120 / 4 = 1280 tokens. 0.19 H100: T = 8192, R = 1024 → _get_max_items: 8192 // 1280 = 6.
    r = _qwen(
        [
            "--limit-mm-per-prompt",
            '{"video": 0}',
            "--mm-processor-kwargs",
            '{"max_pixels": 1003520}',
        ]
    )
    assert r.supported, r.unsupported_message()
    p = predict_startup(r.plan_input.model, H100, "H100-SXM-80GB", 1, 1, r.plan_input.engine)
    prof = p.ranks[0].mm_profile
    assert prof is not None and (prof.items, prof.tokens_per_item, prof.budget) == (6, 1280, 8192)
    # pixels: the bf16 copy the tower runs on and the processor's float32 batch (2 + 4 B)
    assert prof.pixel_bytes == 6 * 5120 * 1176 * (2 + 4) == 216_760_320
    assert prof.tower_peak == 6 * 5120 * QWEN_PEAK * 2 == 787_660_800
    assert prof.outputs == 6 * 1280 * 3584 * 2 == 55_050_240
    # the 7B's text step (sampler at R = 1024 × 152,064 vocab) is larger: the outputs are added
    assert p.ranks[0].mm_encoder == 55_050_240


def test_qwen25_vl_options_width_height_cap_the_dummy_image() -> None:
    # max_pixels 12,845,056 (the repository's preprocessor_config.json value) = 16384 units →
    # 128 × 128 → 3584² px, 16384 tokens per image: the budget unit (get_max_image_tokens
    # ignores the options), so max(8192, 16384) // 16384 = 1 item. The item itself is
    # _get_dummy_images' min(3584, 1024) × min(3584, 768), smart_resize'd to multiples of 28:
    # round(768 / 28) = 27 → 756, round(1024 / 28) = 37 → 1036; 54 × 74 = 3996 patches, 999 tokens.
    opts = '{"video": 0, "image": {"count": 2, "width": 1024, "height": 768}}'
    kw = '{"max_pixels": 12845056, "min_pixels": 3136}'
    r = _qwen(["--limit-mm-per-prompt", opts, "--mm-processor-kwargs", kw])
    assert r.supported, r.unsupported_message()
    p = predict_startup(r.plan_input.model, H100, "H100-SXM-80GB", 1, 1, r.plan_input.engine)
    prof = p.ranks[0].mm_profile
    assert prof is not None and (prof.items, prof.tokens_per_item, prof.budget) == (1, 16384, 16384)
    assert prof.pixel_bytes == 3996 * 1176 * (2 + 4)
    assert prof.tower_peak == 3996 * QWEN_PEAK * 2
    assert prof.outputs == 999 * 3584 * 2
    # the options form shrinking the image needs min_pixels (smart_resize may scale it up)
    bad = _qwen(
        ["--limit-mm-per-prompt", opts, "--mm-processor-kwargs", '{"max_pixels": 12845056}']
    )
    assert [u.name for u in bad.unsupported] == ["--mm-processor-kwargs"]
    assert "min_pixels" in bad.unsupported[0].why


def test_qwen25_vl_catalog_without_pixels_names_the_three_ways() -> None:
    r = _qwen(["--limit-mm-per-prompt", '{"video": 0}'])
    (u,) = r.unsupported
    assert "Qwen2_5_VLForConditionalGeneration" in u.why and "max_pixels" in u.why
    for way in ("--mm-processor-kwargs", "preprocessor_config.json", "width/height"):
        assert way in u.why
    # an active video (999 by default) is the profiled modality (0.20 get_modality_with_max_tokens)
    # and its dummy goes through the video processor: refused, naming "video": 0
    (v,) = _qwen([]).unsupported
    assert '"video": 0' in v.why
    # other processor kwargs may change the item: refused
    odd = _qwen(["--limit-mm-per-prompt", '{"video": 0}', "--mm-processor-kwargs", '{"fps": 2}'])
    assert [u.name for u in odd.unsupported] == ["--mm-processor-kwargs"]


def test_qwen25_vl_tower_not_built_at_limit_zero() -> None:
    # models/qwen2_5_vl.py __init__: 0.11–0.14 self.visual = None, 0.15–0.33
    # _mark_tower_model (interfaces.py no_init_weights) when image and video limits are 0.
    # Tower parameters (model/config/vision.py, vision_config above, h = 1280, i = 3420):
    # per block 2h + (3h² + 3h) + (h² + h) + (3hi + 2i + h) = 19,702,200, × 32 = 630,470,400;
    # patch embed 1280 × 1176 = 1,505,280; merger h + (4h)² + 4h = 26,220,800 and
    # 3584 × (4h + 1) = 18,353,664: 676,550,144 parameters × 2 B (bfloat16) = 1,353,100,288 B.
    m = load_model(QWEN_VL)
    s = EngineSettings(version="0.19.0", max_model_len=32768)
    skipped = predict_startup(m, H100, "H100-SXM-80GB", 1, 1, replace(s, skip_mm_profiling=True))
    zero = predict_startup(
        m, H100, "H100-SXM-80GB", 1, 1, replace(s, mm_limits=(("image", 0), ("video", 0)))
    )
    a, b = skipped.ranks[0], zero.ranks[0]
    assert a.weights.total - b.weights.total == 676_550_144 * 2 == 1_353_100_288
    assert b.available_kv - a.available_kv == 1_353_100_288
    # image 0 alone leaves video at 999: the tower is built
    one = predict_startup(m, H100, "H100-SXM-80GB", 1, 1, replace(s, mm_limits=(("image", 0),)))
    assert one.ranks[0].weights.total == a.weights.total
    # Gemma 3 is not in the rule here (its _mark_tower_model skip from 0.15 is not modelled)
    g = load_model("google/gemma-3-4b-it")
    gs = predict_startup(g, H100, "H100-SXM-80GB", 1, 1, replace(s, skip_mm_profiling=True))
    gz = predict_startup(g, H100, "H100-SXM-80GB", 1, 1, replace(s, mm_limits=(("image", 0),)))
    assert gs.ranks[0].weights.total == gz.ranks[0].weights.total


# --- the processor's pixel bounds from the model repository (preprocessor_config.json) --------

# Qwen/Qwen2.5-VL-7B-Instruct's preprocessor_config.json holds min_pixels 3136 and max_pixels
# 12,845,056; the repository served here lowers max_pixels to 1,003,520 (the numbers of
# test_qwen25_vl_sized_from_max_pixels_in_processor_kwargs above)
QWEN_PRE = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "min_pixels": 3136,
    "max_pixels": 1003520,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
}


def _serve_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repo: str, files: dict[str, Any]
) -> Any:
    """A local Hub serving ``repo`` with ``files`` (JSON objects), the environment pointed at
    it; yields the server."""
    from inference_capacity.model.source import clear_cache
    from tests.hubserver import HubServer

    server = HubServer().start()
    server.add(repo, {name: json.dumps(obj).encode() for name, obj in files.items()})
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    clear_cache()
    try:
        yield server
    finally:
        clear_cache()
        server.stop()


@pytest.fixture
def vl_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    files = {"config.json": json.loads(_qwen_cfg_text()), "preprocessor_config.json": QWEN_PRE}
    yield from _serve_hub(tmp_path, monkeypatch, "acme/qwen2.5-vl-7b-small-images", files)


def _qwen_cfg_text() -> str:
    from inference_capacity.model.catalog import load_config

    return json.dumps(load_config(QWEN_VL)[1])


def test_cli_plans_a_hub_model_from_its_preprocessor_config(
    vl_hub: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    rest = ["--gpu", "H100-SXM-80GB", "--max-model-len", "32768", "--engine-version", "0.19.0"]
    rest += ["-o", "json", "--limit-mm-per-prompt", '{"video": 0}', "--fail-if-not-fits"]
    assert cli_main(["plan", "--model", "acme/qwen2.5-vl-7b-small-images", *rest]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "supported" not in out
    assert any("preprocessor_config.json (max_pixels 1003520)" in n for n in out["notes"])
    items = {i["name"]: i for i in out["ledger"]["ranks"][0]["items"]}
    # 6 images × 1280 tokens × 3584 × 2 B kept during the text step (the test above)
    assert items["mm_encoder_profile"]["bytes"] == 55_050_240
    assert vl_hub.count("GET", "preprocessor_config.json") == 1
    # the same config from the catalog (no preprocessor_config.json) is refused: exit 1 with
    # --fail-if-not-fits, the refusal naming the three ways
    assert cli_main(["plan", "--model", QWEN_VL, *rest]) == 1
    refused = json.loads(capsys.readouterr().out)
    assert refused["supported"] is False
    assert "preprocessor_config.json" in refused["unsupported"][0]["why"]


def test_local_folder_preprocessor_config_is_read(tmp_path: Path) -> None:
    from inference_capacity.model.source import resolve_model_ref

    (tmp_path / "config.json").write_text(_qwen_cfg_text())
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(QWEN_PRE))
    src = resolve_model_ref(str(tmp_path))
    assert src.preprocessor == QWEN_PRE
    (tmp_path / "preprocessor_config.json").write_text("[1]")
    with pytest.raises(Exception, match="expected a JSON object"):
        resolve_model_ref(str(tmp_path))


def test_dummy_image_rule_by_version() -> None:
    # max_pixels 1,003,520 = 1280 units of 28². 0.13+ (closest_factor_pair): 32 × 40 units,
    # 1280 tokens. 0.11–0.12 (_get_vision_info of a 9999999² image): smart_resize scales to
    # floor(sqrt(1,003,520) / 28) = floor(35.78) = 35 units a side, 980² px: 70² = 4900
    # patches, 1225 tokens
    kw = ["--mm-processor-kwargs", '{"max_pixels": 1003520}', "--limit-mm-per-prompt"]
    new = _qwen([*kw, '{"video": 0}'], version="0.13.0").plan_input.model.vision_tower
    old = _qwen([*kw, '{"video": 0}'], version="0.12.0").plan_input.model.vision_tower
    assert (new.tokens_per_item, new.patches_per_crop) == (1280, 5120)
    assert (old.tokens_per_item, old.patches_per_crop, old.image_size) == (1225, 4900, 980)


def _qwen2_vl() -> Any:
    """Qwen/Qwen2-VL-7B-Instruct's config.json: the Qwen2.5-VL-7B text model (the same Qwen2
    7B decoder) with Qwen2-VL's vision_config."""
    from inference_capacity.model import shape_from_config
    from inference_capacity.model.catalog import load_config

    cfg = dict(load_config(QWEN_VL)[1])
    cfg["model_type"] = "qwen2_vl"
    cfg["architectures"] = ["Qwen2VLForConditionalGeneration"]
    cfg["vision_config"] = {
        "depth": 32,
        "embed_dim": 1280,
        "mlp_ratio": 4,
        "num_heads": 16,
        "in_chans": 3,
        "hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "temporal_patch_size": 2,
    }
    return shape_from_config(cfg, name="Qwen2-VL-7B")


def test_qwen2_vl_tower_and_profile() -> None:
    # Qwen2VisionTransformer (models/qwen2_vl.py): h = 1280, i = 4·1280 = 5120; per block
    # LayerNorms 4h + qkv 3h² + 3h + proj h² + h + fc1/fc2 2hi + i + h = 19,677,440, × 32 =
    # 629,678,080; patch embed 1,505,280; merger 2h + (4h)² + 4h = 26,222,080 and
    # 3584 × (4h + 1) = 18,353,664: 675,759,104 parameters, × 2 B not loaded at limit 0
    m = _qwen2_vl()
    s = EngineSettings(version="0.19.0", max_model_len=32768)
    built = predict_startup(m, H100, "H100-SXM-80GB", 1, 1, replace(s, skip_mm_profiling=True))
    zero = predict_startup(
        m, H100, "H100-SXM-80GB", 1, 1, replace(s, mm_limits=(("image", 0), ("video", 0)))
    )
    assert built.ranks[0].weights.total - zero.ranks[0].weights.total == 675_759_104 * 2
    # the profile at max_pixels 1,003,520: 6 items of 5120 patches (test above); QuickGELU MLP
    # 2·1280 + 2·5120 = 12,800 = the attention's 2·1280 + 8·1280
    from inference_capacity.engines.versions import parse_version
    from inference_capacity.engines.vllm_mm import ImagePixels, size_dynamic_tower

    assert m.vision_tower is not None
    tower = size_dynamic_tower(
        m.vision_tower, ImagePixels(1003520, 3136, None, None, "test"), parse_version("0.19.0")
    )
    p = predict_startup(
        replace(m, vision_tower=tower),
        H100,
        "H100-SXM-80GB",
        1,
        1,
        replace(s, mm_limits=(("video", 0),)),
    )
    prof = p.ranks[0].mm_profile
    assert prof is not None and prof.items == 6
    assert prof.tower_peak == 6 * 5120 * 12_800 * 2


def test_operator_path_sizes_from_the_resolved_model_preprocessor() -> None:
    # controller/reconcile.py hands resolve() the model it resolved (model_source): a Hub
    # model's preprocessor_config.json sizes the profile there as in plan --model
    from inference_capacity.model.catalog import load_config
    from inference_capacity.model.source import ResolvedModel

    icap, dep = list(yaml.safe_load_all(EXAMPLE.read_text()))
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["args"] = ["--port", "8000", "--max-model-len", "32768"]
    c["args"] += ["--limit-mm-per-prompt", '{"video": 0}']
    icap["spec"]["model"]["name"] = "acme/qwen2.5-vl-7b-small-images"
    icap["spec"]["engine"]["version"] = "0.19.0"
    spec = InferenceCapacity.from_manifest(icap, ignore_status=True).spec
    cfg = load_config(QWEN_VL)[1]
    src = ResolvedModel("hub", "acme/qwen2.5-vl-7b-small-images", "0" * 40, None, cfg)
    bare = resolve(spec, dep, model_source=src)
    assert not bare.supported and "preprocessor_config.json" in bare.unsupported[0].why
    r = resolve(spec, dep, model_source=replace(src, preprocessor=QWEN_PRE))
    assert r.supported, r.unsupported_message()
    tower = r.plan_input.model.vision_tower
    assert tower is not None and (tower.tokens_per_item, tower.patches_per_crop) == (1280, 5120)


# --- Qwen3-VL / Qwen3.5: the same dynamic-resolution dummy image (issue 21) ----------------------

QWEN35_MOE = "Qwen/Qwen3.5-35B-A3B"
# Qwen3.5-35B-A3B vision_config: hidden 1152, intermediate 4304, depth 27, out_hidden 2048,
# patch 16, spatial merge 2, temporal patch 2, 3 channels → unit 32, 3·2·16² = 1536 pixel
# elements per patch. Block peak per patch (vllm_mm.vit_layer_peak_per_patch): attention
# 2·1152 + 8·1152 = 11,520 > MLP 2·1152 + 2·4304 = 10,912 (Qwen3_VisionMLP: linear_fc1's
# output and its GELU's, models/qwen3_vl.py 0.24.0), plus the encoder_metadata kept through the
# blocks: position embeddings (1152) and rotary cos/sin (72 / 2 each) = 1224.
QWEN35_PEAK = 11_520 + 1152 + 72


def test_qwen35_tower_sized_from_max_pixels() -> None:
    # max_pixels 16,777,216 (size.longest_edge of the Qwen3-VL / Qwen3.5 image processor) =
    # 16384 units of 32² → 128 × 128 units = 4096 × 4096 px: 65,536 patches, 16,384 tokens.
    # vllm-startup-049's settings (0.24.0): max-model-len 131072, R = 1, T = 8192, chunked
    # prefill, image limit 2 → encoder budget max(8192, 16384) = 16384; _get_max_items:
    # max(1, min(16384 // 16384, 1 × min(2, 131072 // 16384))) = 1.
    mm = '{"image": 2, "video": 0}'
    r = resolved(
        QWEN35_MOE,
        [
            "--limit-mm-per-prompt",
            mm,
            "--mm-processor-kwargs",
            '{"max_pixels": 16777216}',
            "--max-num-seqs",
            "1",
            "--max-num-batched-tokens",
            "8192",
        ],
        "0.24.0",
    )
    assert r.supported, r.unsupported_message()
    tower = r.plan_input.model.vision_tower
    assert tower is not None and (tower.tokens_per_item, tower.patches_per_crop) == (16384, 65536)
    eng = replace(r.plan_input.engine, max_model_len=131072)
    p = predict_startup(r.plan_input.model, H100, "H100-SXM-80GB", 1, 1, eng)
    prof = p.ranks[0].mm_profile
    assert prof is not None and (prof.items, prof.tokens_per_item, prof.budget) == (1, 16384, 16384)
    # the bf16 copy and the processor's float32 pixels (2 + 4 B an element)
    assert prof.pixel_bytes == 65536 * 1536 * (2 + 4) == 603_979_776
    assert prof.tower_peak == 65536 * QWEN35_PEAK * 2 == 1_670_381_568
    assert prof.outputs == 16384 * 2048 * 2 == 67_108_864
    # an active video (999 by default) is still refused, naming "video": 0
    (v,) = resolved(QWEN35_MOE, ["--mm-processor-kwargs", '{"max_pixels": 16777216}']).unsupported
    assert '"video": 0' in v.why and "Qwen3_5MoeForConditionalGeneration" in v.why


# the Qwen3-VL / Qwen3.5 processors as public checkpoints ship them (Qwen3.8-27B's
# video_preprocessor_config.json, Qwen3-VL's and Qwen3.5's: image size 65,536..16,777,216 px,
# video size 4,096..25,165,824 px over all frames, patch 16, merge 2, temporal patch 2)
QWEN3_IMAGE_PRE = {
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
}
QWEN3_VIDEO_PRE = {
    "video_processor_type": "Qwen3VLVideoProcessor",
    "size": {"longest_edge": 25165824, "shortest_edge": 4096},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
}


def test_qwen3_dummy_video_tokens() -> None:
    from inference_capacity.engines.versions import parse_version
    from inference_capacity.engines.vllm_mm import profiled_modality, qwen3_video_tokens

    tower = load_model(QWEN35_MOE).vision_tower
    assert tower is not None
    v = parse_version("0.24.0")
    # get_max_video_tokens: most features under 25,165,824 // 2 = 12,582,912 px = 12,288 units of
    # 32²; closest factor pair 96 × 128 units = 3072 × 4096 px; 2 frames (t = 2) × 3072 × 4096 =
    # 25,165,824 ≤ longest_edge: no resize; 192 × 256 = 49,152 patches, one temporal patch, / 4
    assert qwen3_video_tokens(tower, QWEN3_VIDEO_PRE, {}, v) == 12_288
    # --mm-processor-kwargs max_pixels 16,777,216 is merged over the video size too: 2 × 3072 ×
    # 4096 > 16,777,216 → beta = sqrt(25,165,824 / 16,777,216) = 1.2247; floor(3072 / β / 32) =
    # 78, floor(4096 / β / 32) = 104 → 2496 × 3328 px, 156 × 208 = 32,448 patches, / 4 = 8112
    assert qwen3_video_tokens(tower, QWEN3_VIDEO_PRE, {"max_pixels": 16777216}, v) == 8112
    # get_modality_with_max_tokens: the most tokens, ties to "video"
    assert profiled_modality({"image": 16384, "video": 12288}) == "image"
    assert profiled_modality({"image": 12288, "video": 12288}) == "video"
    with pytest.raises(ValueError, match="longest_edge"):
        qwen3_video_tokens(tower, {"size": {"longest_edge": 0, "shortest_edge": 1}}, {}, v)


def _qwen35_folder(tmp_path: Path, video: dict[str, Any] | None) -> Path:
    from inference_capacity.model.catalog import load_config

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(load_config(QWEN35_MOE)[1]))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(QWEN3_IMAGE_PRE))
    if video is not None:
        (tmp_path / "video_preprocessor_config.json").write_text(json.dumps(video))
    return tmp_path


def test_qwen35_active_video_profiles_the_image_when_it_has_more_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # vllm-startup-049's flags: image 2, audio 0 (not a Qwen3.5 modality), video unset (999)
    folder = _qwen35_folder(tmp_path, QWEN3_VIDEO_PRE)
    rest = ["--gpu", "H100-SXM-80GB", "--max-model-len", "131072", "--engine-version", "0.24.0"]
    rest += ["--max-num-seqs", "1", "--max-num-batched-tokens", "8192", "-o", "json"]
    rest += ["--limit-mm-per-prompt", '{"image": 2}', "--fail-if-not-fits"]
    assert cli_main(["plan", "--model", str(folder), *rest]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("12288 tokens, fewer than an image's 16384" in n for n in out["notes"])
    items = {i["name"]: i for i in out["ledger"]["ranks"][0]["items"]}
    assert items["mm_encoder_profile"]["bytes"] > 0
    # the same model with "video": 0 plans the same profile (one image of 65,536 patches)
    zero = [*rest[:-3], "--limit-mm-per-prompt", '{"image": 2, "video": 0}']
    assert cli_main(["plan", "--model", str(folder), *zero]) == 0
    same = json.loads(capsys.readouterr().out)
    it2 = {i["name"]: i for i in same["ledger"]["ranks"][0]["items"]}
    assert it2["mm_encoder_profile"]["bytes"] == items["mm_encoder_profile"]["bytes"]


def test_qwen35_video_with_more_tokens_or_unknown_is_refused(tmp_path: Path) -> None:
    from inference_capacity.model.source import VIDEO_PROCESSOR_KEY, resolve_model_ref

    # longest_edge 67,108,864 over 2 frames: 33,554,432 px a frame = 32,768 units = 128 × 256
    # → 32,768 tokens ≥ the image's 16,384: the video is the profiled modality, not sized
    big = {**QWEN3_VIDEO_PRE, "size": {"longest_edge": 67108864, "shortest_edge": 4096}}
    src = resolve_model_ref(str(_qwen35_folder(tmp_path / "a", big)))
    assert src.preprocessor is not None and src.preprocessor[VIDEO_PROCESSOR_KEY] == big
    from inference_capacity.engines.vllm_config import MultimodalSettings
    from inference_capacity.resolve import size_dynamic

    mm = MultimodalSettings(limits={"image": 2}, limit_mm_per_prompt='{"image": 2}')
    got = size_dynamic(src.shape(None), "0.24.0", mm, src.preprocessor, [])
    assert isinstance(got, tuple) and "32768 tokens" in got[1] and '"video": 0' in got[1]
    # no video_preprocessor_config.json: refused, naming the file
    src = resolve_model_ref(str(_qwen35_folder(tmp_path / "b", None)))
    got = size_dynamic(src.shape(None), "0.24.0", mm, src.preprocessor, [])
    assert isinstance(got, tuple) and "video_preprocessor_config.json" in got[1]
    # a vLLM whose dummy video was not read (0.19): refused as before
    src = resolve_model_ref(str(_qwen35_folder(tmp_path / "c", QWEN3_VIDEO_PRE)))
    got = size_dynamic(src.shape(None), "0.19.0", mm, src.preprocessor, [])
    assert isinstance(got, tuple) and '"video": 0' in got[1]


@pytest.fixture
def qwen3_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from inference_capacity.model.catalog import load_config

    files = {
        "config.json": load_config(QWEN35_MOE)[1],
        "preprocessor_config.json": QWEN3_IMAGE_PRE,
        "video_preprocessor_config.json": QWEN3_VIDEO_PRE,
    }
    yield from _serve_hub(tmp_path, monkeypatch, "acme/qwen3.5-35b-a3b", files)


def test_hub_reads_the_video_processor_sync_and_async(qwen3_hub: Any) -> None:
    import asyncio

    from inference_capacity.model.hub_async import HubClient, resolve_model_ref_async
    from inference_capacity.model.source import (
        VIDEO_PROCESSOR_KEY,
        clear_cache,
        resolve_model_ref,
    )

    want = {**QWEN3_IMAGE_PRE, VIDEO_PROCESSOR_KEY: QWEN3_VIDEO_PRE}
    assert resolve_model_ref("acme/qwen3.5-35b-a3b").preprocessor == want
    assert qwen3_hub.count("GET", "video_preprocessor_config.json") == 1

    async def go() -> Any:
        client = HubClient(connections=8, shard_parallel=4)
        try:
            return await resolve_model_ref_async("acme/qwen3.5-35b-a3b", None, None, 5.0, client)
        finally:
            await client.close()

    clear_cache()  # the in-process cache (this repository has no shards: no header cache)
    assert asyncio.run(go()).preprocessor == want
    assert qwen3_hub.count("GET", "video_preprocessor_config.json") == 2
    # a header cache written before the video file was read is incomplete: read again
    from inference_capacity.model.source import processors_complete

    siblings = {"config.json", "preprocessor_config.json", "video_preprocessor_config.json"}
    assert not processors_complete(QWEN3_IMAGE_PRE, siblings)
    assert processors_complete(want, siblings)
    assert not processors_complete(None, siblings)
    assert processors_complete(None, {"config.json"})
