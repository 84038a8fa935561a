"""Issue 14 from the command line: the workload flags, the JSON contract (sizing, latency,
levers, options), the sweep's ranking, and the errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from inference_capacity.engines.vllm import EngineSettings
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model
from inference_capacity.planner import PlanInput
from inference_capacity.sizing.workload import Cohort, Quantiles, Workload
from inference_capacity.whatif import Option, rank, sweep
from tests.test_cli import EXAMPLE, ROOT, run

WORKLOAD = [
    "plan",
    "--model",
    "meta-llama/Llama-3.1-8B-Instruct",
    "--gpu",
    "H100-SXM-80GB",
    "--engine-version",
    "0.19.0",
    "--max-model-len",
    "32768",
    "--prompt-tokens",
    "1000,2000,4000",
    "--output-tokens",
    "80,200,500",
    "--peak-concurrency",
    "300",
]


def test_flags_form_workload_json_contract() -> None:
    r = run(*WORKLOAD, "--itl-target-ms", "60", "-o", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    s = out["sizing"]
    assert s["rule"] == "distribution"
    assert s["max_num_seqs"] == out["recommendation"]["maxNumSeqs"] > 0
    assert 0 <= s["preemption_probability"] < 0.01
    assert s["preemption_probability_at_default"] == 1.0  # 1,024 such sequences never fit
    assert s["default_max_num_seqs"] == 1024
    lat = out["latency"]
    for key in ("itl_ms_p50", "itl_ms_p95", "output_tokens_per_s"):
        assert lat[key] > 0
    assert lat["itl_ms_p95"] <= 60
    assert lat["itl_ms_p50"] <= lat["itl_ms_p95"]
    assert lat["arrivals"] == "spread"  # lengths vary: no lock step
    assert {"name", "plan"} <= set(out["levers"][0])
    names = [x["name"] for x in out["levers"]]
    assert "fp8-kv-cache" in names and "max-model-len-p99" in names
    cap = next(x for x in out["levers"] if x["name"] == "max-model-len-p99")
    # p99 context 4,000 + 500 = 4,500 → 4,512 tokens in whole 16-token blocks
    assert cap["plan"]["max_model_len"] == 4512
    assert 0 < cap["rejected_fraction"] < 0.02
    # replicas for the peak: ceil(300 / max-num-seqs) + 1 recovery
    rec = out["recommendation"]
    assert rec["replicas"] == math.ceil(300 / rec["maxNumSeqs"]) + 1


def test_conservative_rule_from_the_cli_and_the_manifest(tmp_path: Path) -> None:
    cons = json.loads(run(*WORKLOAD, "--sizing", "conservative", "-o", "json").stdout)
    dist = json.loads(run(*WORKLOAD, "-o", "json").stdout)
    assert cons["sizing"]["rule"] == "conservative"
    # p95 reservations (2,000 + 200 tokens → 138 blocks) admit fewer than the distribution
    assert cons["sizing"]["max_num_seqs"] < dist["sizing"]["max_num_seqs"]
    assert cons["sizing"]["preemption_probability"] == 0.0
    # with FILE the rule is the spec's (the operator reads only it): --sizing is refused, naming
    # the field to edit
    r = run("plan", str(EXAMPLE), "--sizing", "conservative", "-o", "json")
    assert r.returncode == 2 and "spec.policy.sizing" in r.stderr, r.stderr
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    docs[0]["spec"]["policy"]["sizing"] = "Conservative"
    f = tmp_path / "conservative.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    r = run("plan", str(f), "-o", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sizing"]["rule"] == "conservative"


def test_cohorts_and_burst_flags() -> None:
    r = run(
        *WORKLOAD[:9],
        "--cohort",
        "chat:0.8:1000,2000,4000:80,200,500:500",
        "--cohort",
        "rag:0.2:6000,12000,20000:200,500,1000",
        "--burst",
        "chat=0.4,rag=0.6",
        "--peak-concurrency",
        "300",
        "-o",
        "json",
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["sizing"]
    assert s["binding_mix"] == "burst"
    assert s["by_mix"]["burst"] < s["by_mix"]["steady"]
    assert s["max_num_seqs"] == s["by_mix"]["burst"]
    assert [f["cohort"] for f in s["fit"]] == ["chat", "rag"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prompt-tokens", "100,50,200", "--output-tokens", "1,2,3"], "p50 <= p95 <= p99"),
        (["--prompt-tokens", "100,200"], "--prompt-tokens and --output-tokens go together"),
        (["--cohort", "chat:2:1,2,3:1,2,3"], "WEIGHT must be in (0, 1]"),
        (["--cohort", "chat:0.5:1,2,3"], "expected NAME:WEIGHT"),
        (["--peak-concurrency", "10"], "need a length distribution"),
        (["--cohort", "a:1:1,2,3:1,2,3", "--burst", "b=1"], "--burst"),
        (["--cohort", "a:1:1,2,3:1,2,3", "--sweep", "--gpu-price", "H100=x"], "must be a number"),
        (["--cohort", "a:1:1,2,3:1,2,3", "--sweep", "--gpu-price", "Z9=1"], "unknown GPU"),
        (["--cohort", "a:1:1,2,3:1,2,3", "--sweep"], "peak concurrency"),
        (["--preemption-target", "0.7"], "--preemption-target"),
        (["--hbm-efficiency", "1.5"], "--hbm-efficiency"),
    ],
)
def test_workload_errors_are_one_clear_line(extra: list[str], message: str) -> None:
    r = run("plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", *extra)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_sweep_json_is_ranked_by_price(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("H100-SXM-80GB: 2.5\nH200-SXM-141GB: 3.5\n")
    r = run(
        *WORKLOAD,
        "--sweep",
        "--gpu-prices",
        str(prices),
        "--gpu-price",
        "L40S=0.9",
        "-o",
        "json",
        "--sweep-chart",
        str(tmp_path / "sweep.png"),
    )
    assert r.returncode == 0, r.stderr
    options = json.loads(r.stdout)["options"]
    keys = {"gpu", "tp", "kv_cache_dtype", "replicas", "gpus", "cost_per_hour"}
    assert keys | {"cost_per_million_output_tokens", "meets_itl"} <= set(options[0])
    assert {o["gpu"] for o in options} <= {"H100-SXM-80GB", "H200-SXM-141GB", "L40S"}
    price = {"H100-SXM-80GB": 2.5, "H200-SXM-141GB": 3.5, "L40S": 0.9}
    for o in options:
        assert o["gpus"] == o["replicas"] * o["tp"]
        assert o["cost_per_hour"] == pytest.approx(o["gpus"] * price[o["gpu"]])
    costs = [o["cost_per_hour"] for o in options]
    assert costs == sorted(costs)
    assert (tmp_path / "sweep.png").stat().st_size > 0


def _fake(gpus: int, cost: float | None, per_m: float | None, meets: bool | None) -> Option:
    return Option(None, gpus, gpus, cost, per_m, 1000.0, meets)  # type: ignore[arg-type]


def test_rank_by_hand() -> None:
    a = _fake(4, 10.0, 0.40, True)
    b = _fake(6, 9.0, 0.50, True)
    c = _fake(2, 5.0, 0.20, False)  # cheapest, but misses the ITL target: last
    d = _fake(6, 9.0, 0.45, True)  # same cost per hour as b, cheaper per token: before b
    assert rank([a, b, c, d], priced=True) == [d, b, a, c]
    assert rank([a, b, c, d], priced=False) == [a, b, d, c]


def test_sweep_ranks_a_case_by_hand() -> None:
    # Llama-3.1-8B, one cohort of constant 2,000 + 200 tokens (138 blocks per sequence), 1,000
    # at peak. On an H100 a replica holds ~26,400 × 0.9 / 138 ≈ 170 sequences; an H200 about
    # 2.4× the KV pool. With H200 at 1.5× the H100's price the H200 needs fewer GPUs and
    # costs less per hour: it ranks first; unpriced, fewer GPUs ranks first too.
    wl = Workload(
        (Cohort("c", 1.0, Quantiles(2000, 2000, 2000), Quantiles(200, 200, 200)),),
        peak_concurrency=1000,
    )
    inp = PlanInput(
        load_model("meta-llama/Llama-3.1-8B-Instruct"),
        get_gpu("H100"),
        engine=EngineSettings(version="0.19.0", max_model_len=8192),
        workload=wl,
    )
    gpus = [get_gpu("H100-SXM-80GB"), get_gpu("H200-SXM-141GB")]
    opts = sweep(inp, {"H100-SXM-80GB": 2.0, "H200-SXM-141GB": 3.0}, gpus, (1,), ("auto",))
    by_gpu = {o.plan.input.gpu.name: o for o in opts}
    h100, h200 = by_gpu["H100-SXM-80GB"], by_gpu["H200-SXM-141GB"]
    for o in opts:
        n = o.plan.recommendation.max_num_seqs
        assert o.replicas == math.ceil(1000 / n) + 1  # peak + 1 recovery replica
    assert h200.gpus < h100.gpus
    assert h200.cost_per_hour == 3.0 * h200.gpus < 2.0 * h100.gpus == h100.cost_per_hour
    assert [o.plan.input.gpu.name for o in opts] == ["H200-SXM-141GB", "H100-SXM-80GB"]


def test_latency_chart_and_table(tmp_path: Path) -> None:
    path = tmp_path / "latency.svg"
    r = run(*WORKLOAD, "--latency-chart", str(path))
    assert r.returncode == 0, r.stderr
    assert "Batch curve (per replica)" in r.stdout and "Levers" in r.stdout
    assert path.read_text().startswith("<?xml")
    assert ROOT.exists()


def test_manifest_with_samples_burst_and_policy(tmp_path: Path) -> None:
    import yaml

    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    spec = docs[0]["spec"]
    spec["workload"]["cohorts"][0]["samples"] = 2
    spec["workload"]["burst"] = {"weights": {"chat": 0.3, "rag": 0.7}}
    spec["policy"]["preemptionTarget"] = 0.05
    spec["hardware"]["hbmEfficiency"] = 0.7
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    r = run("plan", str(path), "-o", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["sizing"]["preemption_target"] == 0.05
    assert out["sizing"]["binding_mix"] == "burst"
    assert out["sizing"]["preemption_probability"] < 0.05
    assert out["latency"]["hbm_efficiency"] == 0.7
    spec["workload"]["burst"] = {"weights": {"batch": 1.0}}
    path.write_text(yaml.safe_dump_all(docs))
    r = run("plan", str(path))
    assert r.returncode == 2 and "burst.weights names 'batch'" in r.stderr
    assert "Traceback" not in r.stderr


def test_fixed_lengths_say_they_run_in_lock_step() -> None:
    # identical requests: the plan's TTFT is the lock step's (sizing/latency.py), and says so
    fixed = [
        *WORKLOAD[: WORKLOAD.index("--prompt-tokens")],
        "--prompt-tokens",
        "1000,1000,1000",
        "--output-tokens",
        "200,200,200",
        "--peak-concurrency",
        "64",
    ]
    r = run(*fixed, "-o", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["latency"]["arrivals"] == "lockstep"
    t = run(*fixed)
    assert t.returncode == 0, t.stderr
    assert "runs in lock step" in t.stdout
    assert "runs in lock step" not in run(*WORKLOAD).stdout
