"""A cold torch.compile inside vLLM's memory profile (engines/vllm.py::cold_compile_bytes):
Inductor benchmarks the first stage's fused embedding kernel on random copies of its arguments
(vLLM's ``benchmark_combo_kernel``, config/compilation.py from 0.11.1; torch 2.13.0
``_inductor/codegen/triton.py::benchmark_codegened_module``), so the profile's peak is the
larger of that and the warm forward's. The public logs that show a cold compile print it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from inference_capacity.engines.vllm import (
    EngineSettings,
    SettingsError,
    cold_compile_bytes,
    predict_startup,
)
from inference_capacity.engines.vllm_rules import VllmRules
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model
from inference_capacity.units import GiB
from tests.startup_logs import startup_log

ROOT = Path(__file__).resolve().parent.parent
LLAMA = load_model("meta-llama/Llama-3.1-8B-Instruct")  # vocab 128256, hidden 4096
QWEN = load_model("Qwen/Qwen3-8B")  # vocab 151936, hidden 4096


def _predict(shape: object, gpu: str, version: str, tp: int = 1, pp: int = 1, **kw: object):  # type: ignore[no-untyped-def]
    g = get_gpu(gpu)
    s = EngineSettings(version=version, max_model_len=8192, **kw)  # type: ignore[arg-type]
    return predict_startup(shape, g.total_bytes, g.name, tp, pp, s)  # type: ignore[arg-type]


def test_the_bytes_are_the_embedding_kernels_arguments() -> None:
    e = 128256 * 4096 * 2
    # TP1: the embedding and the normed hidden states, fused: two outputs, + int32 token ids
    assert cold_compile_bytes(e, 2048, 4096, 1, 2) == e + 2 * 2048 * 4096 * 2 + 4 * 2048
    # TP > 1: the masked gather before the all-reduce, one output
    assert cold_compile_bytes(e // 2, 8192, 4096, 2, 2) == e // 2 + 8192 * 4096 * 2 + 4 * 8192


def test_a_cold_plan_peaks_at_the_compile_where_it_exceeds_the_warm_forward() -> None:
    warm = _predict(LLAMA, "A40", "0.26.0")
    cold = _predict(LLAMA, "A40", "0.26.0", compile_cache="cold")
    w, c = warm.ranks[0], cold.ranks[0]
    t = cold.settings.max_num_batched_tokens
    embedding = w.weights.by_group["embedding"]
    assert c.compile_peak == embedding + 2 * t * 4096 * 2 + 4 * t
    assert c.activation_peak == max(w.activation_peak, c.compile_peak) > w.activation_peak
    assert c.compile_excess == c.activation_peak - w.activation_peak
    assert c.available_kv == w.available_kv - (c.activation_peak - w.activation_peak)
    assert w.compile_peak == 0


def test_where_no_compile_benchmarks_the_embedding_nothing_changes() -> None:
    base = dict(compile_cache="cold")
    # --enforce-eager compiles nothing
    eager = _predict(LLAMA, "A40", "0.26.0", enforce_eager=True, **base).ranks[0]
    assert eager.compile_peak == 0
    # 0.11.0 does not set benchmark_combo_kernel (torch 2.8); 0.11.1 does
    assert not VllmRules.for_version("0.11.0").cold_compile_benchmark
    assert VllmRules.for_version("0.11.1").cold_compile_benchmark
    assert _predict(LLAMA, "A40", "0.11.0", **base).ranks[0].compile_peak == 0
    # a later pipeline stage holds no embedding table
    pp = _predict(LLAMA, "H100-SXM-80GB", "0.19.0", pp=2, **base)
    assert pp.ranks[0].compile_peak > 0 and pp.ranks[1].compile_peak == 0
    # TP2: each rank's half of the table, one output
    tp2 = _predict(QWEN, "H100-SXM-80GB", "0.27.1", tp=2, **base)
    r = tp2.ranks[0]
    t = tp2.settings.max_num_batched_tokens
    assert r.compile_peak == r.weights.by_group["embedding"] + t * 4096 * 2 + 4 * t


def test_a_multimodal_model_embeds_outside_the_compiled_graph() -> None:
    # v1/worker/gpu_model_runner.py::_dummy_run: supports_mm_inputs -> inputs_embeds
    gemma = load_model("google/gemma-3-4b-it")
    assert (
        _predict(gemma, "H100-SXM-80GB", "0.19.0", compile_cache="cold").ranks[0].compile_peak == 0
    )
    text = (("image", 0),)
    only = _predict(gemma, "H100-SXM-80GB", "0.19.0", compile_cache="cold", mm_limits=text)
    assert only.ranks[0].compile_peak > 0


def test_an_unknown_cache_state_is_refused() -> None:
    with pytest.raises(SettingsError, match="compile_cache"):
        _predict(LLAMA, "A40", "0.26.0", compile_cache="lukewarm")


def _log(pid: str) -> dict[str, object]:
    return startup_log(pid)


@pytest.mark.parametrize(
    ("pid", "shape", "gpu", "pp"),
    [
        # in sample: the sweep's PP2 boot (its stage 0 chose the term's form, see the docstring)
        ("vllm-startup-029", LLAMA, "H100-SXM-80GB", 2),
        # out of sample: the same sweep's PP4 boot, an A40 at 0.26 and an RTX 4090 at 0.27.1
        ("vllm-startup-109", LLAMA, "H100-SXM-80GB", 4),
        ("vllm-startup-175", LLAMA, "A40", 1),
        ("vllm-startup-171", QWEN, "RTX-4090", 1),
    ],
)
def test_the_cold_logs_print_the_compile_peak(pid: str, shape: object, gpu: str, pp: int) -> None:
    """Each log shows its cold compile ('Compiling a graph for compile range', quoted in its
    raw_lines) and prints a profile peak that the warm forward does not reach: the compile's
    bytes at the log's own tokens come within 0.06 GiB of it."""
    log = _log(pid)
    assert log["compile_cache"] == "cold"
    assert any("Compiling a graph" in x for x in log["raw_lines"])  # type: ignore[attr-defined]
    logged = log["logged"]
    # 0.27's summary line prints the peak with the CUDA-graph estimate, which the V2 runner
    # leaves at 0 in 0.21-0.28 (VllmRules.v2_cuda_graph_estimate)
    printed = logged["activation_peak_gib"] or logged["transient_and_cuda_graph_estimate_gib"]  # type: ignore[index]
    g = get_gpu(gpu)
    s = EngineSettings(
        version=str(log["vllm_version"]),
        max_model_len=int(log["max_model_len"]),  # type: ignore[call-overload]
        compile_cache="cold",
    )
    pred = predict_startup(shape, g.total_bytes, g.name, 1, pp, s)  # type: ignore[arg-type]
    r = pred.ranks[0]
    warm = predict_startup(shape, g.total_bytes, g.name, 1, pp, replace(s, compile_cache="warm"))  # type: ignore[arg-type]
    assert r.compile_peak > warm.ranks[0].activation_peak
    assert abs(r.compile_peak / GiB - printed) <= 0.06, (pid, r.compile_peak / GiB, printed)


def test_plan_takes_the_cache_state_and_a_manifest_says_it_in_its_spec() -> None:
    base = [sys.executable, "-m", "inference_capacity.cli", "plan"]
    what_if = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "A40", "-o", "json"]
    warm = json.loads(
        subprocess.run([*base, *what_if], capture_output=True, text=True, check=True).stdout
    )
    cold = json.loads(
        subprocess.run(
            [*base, *what_if, "--compile-cache", "cold"], capture_output=True, text=True, check=True
        ).stdout
    )
    items = {i["name"] for i in cold["ledger"]["ranks"][0]["items"]}
    assert "cold_compile" in items
    assert "cold_compile" not in {i["name"] for i in warm["ledger"]["ranks"][0]["items"]}
    kv = [d["vllm_startup"]["available_kv_cache_gib"] for d in (warm, cold)]
    peak = [d["vllm_startup"]["activation_peak_gib"] for d in (warm, cold)]
    assert kv[1] < kv[0] and peak[1] > peak[0]
    # with FILE the spec says it (spec.engine.compileCache)
    example = ROOT / "examples" / "llama-3.1-8b-h100.yaml"
    bad = subprocess.run(
        [*base, str(example), "--compile-cache", "cold"], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "spec.engine.compileCache" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_where_the_warm_forward_is_larger_a_cold_boot_prints_the_same() -> None:
    """The sweep's warm Llama-3.1-8B boot (177) loads the compile its cold twin (105) saved
    (the AOT path its note quotes) and prints the same peak; the plan is the same cold or warm
    there, the copy (1.10 GiB at 8,192 tokens) being below the warm forward and sampler peak."""
    warm, cold = _log("vllm-startup-177"), _log("vllm-startup-105")
    assert (warm["compile_cache"], cold["compile_cache"]) == ("warm", "cold")
    assert warm["logged"]["activation_peak_gib"] == cold["logged"]["activation_peak_gib"]  # type: ignore[index]
    h100 = get_gpu("H100-SXM-80GB")
    s = EngineSettings(version="0.19.0", max_model_len=8192, compile_cache="cold")
    planned = predict_startup(LLAMA, h100.total_bytes, h100.name, 1, 1, s).ranks[0]
    assert 0 < planned.compile_peak < planned.activation_peak and planned.compile_excess == 0
    printed = warm["logged"]["activation_peak_gib"]  # type: ignore[index]
    assert abs(planned.activation_peak / GiB - printed) / printed <= 0.035
