"""The command line, run as users run it: the console script in a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("inference-capacity", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "inference_capacity.cli"]
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, input=stdin, timeout=120, cwd=ROOT
    )


FLAGS = [
    "plan",
    "--model",
    "meta-llama/Llama-3.1-8B-Instruct",
    "--gpu",
    "H100-SXM-80GB",
    "--tp",
    "1",
    "--pp",
    "1",
    "--gpu-memory-utilization",
    "0.95",
    "--max-model-len",
    "16384",
    "--max-num-seqs",
    "1024",
    "--max-num-batched-tokens",
    "8192",
    "--kv-cache-dtype",
    "auto",
    "--dtype",
    "auto",
    "--engine-version",
    "0.19.0",
]


def test_flags_form_json_contract() -> None:
    r = run(*FLAGS, "-o", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    vs = out["vllm_startup"]
    for key in (
        "weights_gib",
        "activation_peak_gib",
        "non_torch_gib",
        "cuda_graph_gib",
        "available_kv_cache_gib",
        "num_gpu_blocks",
        "kv_cache_tokens",
        "max_concurrency",
        "starts",
        "error",
    ):
        assert key in vs
    # the 0.19.0 llm-d log of this exact setup: 58.11 GiB, 476,016 tokens, 29.05x
    assert abs(vs["available_kv_cache_gib"] - 58.11) < 0.58
    assert abs(vs["kv_cache_tokens"] - 476_016) / 476_016 < 0.01
    assert vs["starts"] is True and vs["error"] is None
    assert out["ledger"]["ranks"][0]["totalBytes"] == out["gpu"]["total_bytes"]
    assert out["kv"]["bytes_per_token_per_rank"] == 131072


def test_engine_version_forms_accepted() -> None:
    for v in ("0.6.4.post1", "0.10.1.dev101+gbda9d0535", "0.19.0"):
        r = run(
            "plan",
            "--model",
            "meta-llama/Llama-3.2-1B",
            "--gpu",
            "L4",
            "--max-model-len",
            "8192",
            "--engine-version",
            v,
            "-o",
            "json",
        )
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["vllm_startup"]["engine_version"] == v


def test_inverse_kv_target() -> None:
    r = run(
        "plan",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "H100-SXM-80GB",
        "--max-model-len",
        "16384",
        "--engine-version",
        "0.19.0",
        "--kv-cache-gib",
        "40",
        "-o",
        "json",
    )
    assert r.returncode == 0, r.stderr
    inv = json.loads(r.stdout)["inverse"]
    assert 40 <= inv["available_kv_cache_gib"] < 40.01
    # re-run forward at that utilization: vLLM would allocate the same pool
    r2 = run(
        "plan",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "H100-SXM-80GB",
        "--max-model-len",
        "16384",
        "--engine-version",
        "0.19.0",
        "--gpu-memory-utilization",
        str(inv["gpu_memory_utilization"]),
        "-o",
        "json",
    )
    assert json.loads(r2.stdout)["vllm_startup"]["num_gpu_blocks"] == inv["num_gpu_blocks"]


def test_manifest_table_yaml_json_patch_and_chart(tmp_path: Path) -> None:
    r = run("plan", str(EXAMPLE))
    assert r.returncode == 0, r.stderr
    assert "Rank 0 (stage 0) ledger" in r.stdout and "kv_cache_pool" in r.stdout
    assert "--gpu-memory-utilization" in r.stdout and "Would patch deployment/llama-8b" in r.stdout
    y = yaml.safe_load(run("plan", str(EXAMPLE), "-o", "yaml").stdout)
    j = json.loads(run("plan", str(EXAMPLE), "-o", "json").stdout)
    assert y["recommendation"] == j["recommendation"]
    assert j["fits"] is True and j["flags"]["max-num-seqs"] == str(
        j["recommendation"]["maxNumSeqs"]
    )
    patch = json.loads(run("plan", str(EXAMPLE), "-o", "patch").stdout)
    args = patch["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:4] == ["--port", "8000", "--max-model-len", "32768"]  # untouched
    assert "--gpu-memory-utilization" in args and "--max-num-seqs" in args
    for ext in ("svg", "png"):
        out = tmp_path / f"ledger.{ext}"
        r = run("plan", str(EXAMPLE), "--chart", str(out))
        assert r.returncode == 0 and out.stat().st_size > 1000


def test_every_example_plans() -> None:
    for f in sorted((ROOT / "examples").glob("*.yaml")):
        r = run("plan", str(f), "-o", "json", "--fail-if-not-fits")
        assert r.returncode == 0, (f, r.stderr, r.stdout[-500:])


def test_stdin_manifest() -> None:
    r = run("plan", "-", "-o", "json", stdin=EXAMPLE.read_text())
    assert r.returncode == 0 and json.loads(r.stdout)["name"] == "llama-8b"


@pytest.mark.parametrize(
    "args,message",
    [
        (["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H900"], "unknown GPU"),
        (["plan", "--model", "nope-model", "--gpu", "L4"], "unknown model 'nope-model'"),
        (
            ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4", "--tp", "3"],
            "does not divide",
        ),
        (
            [
                "plan",
                "--model",
                "meta-llama/Llama-3.1-8B-Instruct",
                "--gpu",
                "L4",
                "--gpu-memory-utilization",
                "1.2",
            ],
            "must be in (0, 1]",
        ),
        (
            [
                "plan",
                "--model",
                "meta-llama/Llama-3.1-8B-Instruct",
                "--gpu",
                "L4",
                "--gpu-memory-utilization",
                "0",
            ],
            "must be in (0, 1]",
        ),
        (
            [
                "plan",
                "--model",
                "meta-llama/Llama-3.1-8B-Instruct",
                "--gpu",
                "L4",
                "--max-model-len",
                "-4",
            ],
            "--max-model-len must be >= 1",
        ),
        (
            [
                "plan",
                "--model",
                "meta-llama/Llama-3.1-8B-Instruct",
                "--gpu",
                "L4",
                "--max-model-len",
                "999999999",
            ],
            # bounded as on a container (engines/vllm_config.py MAX_MODEL_LEN)
            "--max-model-len: 999999999 is outside (0, 10000000]",
        ),
        (["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct"], "--gpu NAME or --gpu-memory-gib"),
        (["plan"], "give FILE.yaml"),
        (["plan", "/nonexistent.yaml"], "cannot read"),
        (
            [
                "plan",
                "--model",
                "meta-llama/Llama-3.1-8B-Instruct",
                "--gpu",
                "L4",
                "--engine-version",
                "latest",
            ],
            "cannot parse 'latest'",
        ),
    ],
)
def test_errors_are_one_clear_line(args: list[str], message: str) -> None:
    r = run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_model_type_in_user_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "t5", "d_model": 512}))
    r = run("plan", "--model", str(cfg), "--gpu", "L4")
    assert r.returncode == 2 and "unsupported model_type 't5'" in r.stderr


def test_invalid_manifest_names_the_field(tmp_path: Path) -> None:
    doc = yaml.safe_load_all(EXAMPLE.read_text())
    icap, dep = list(doc)
    icap["spec"]["hardware"]["tensorParallel"] = 0
    icap["spec"]["workload"]["cohorts"][0]["promptTokens"]["p95"] = -3
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump_all([icap, dep]))
    r = run("plan", str(f))
    assert r.returncode == 2
    assert "spec.hardware.tensorParallel" in r.stderr
    assert "spec.workload.cohorts[0].promptTokens.p95" in r.stderr
    assert "Traceback" not in r.stderr


def test_not_fitting_plan_exits_1_with_fail_flag(tmp_path: Path) -> None:
    icap, dep = list(yaml.safe_load_all(EXAMPLE.read_text()))
    icap["spec"]["model"]["name"] = "meta-llama/Llama-3.1-70B-Instruct"
    f = tmp_path / "big.yaml"
    f.write_text(yaml.safe_dump_all([icap, dep]))
    r = run("plan", str(f), "--fail-if-not-fits", "-o", "json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["fits"] is False and out["reason"] == "VllmWillNotStart"
    assert "not patched" in out["patch"]["note"]


def test_models_and_gpus_lists() -> None:
    assert "meta-llama/Llama-3.1-8B-Instruct" in run("models").stdout
    assert "H100-SXM-80GB" in run("gpus").stdout
