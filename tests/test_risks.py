"""The seven OOM kinds per resource (risks.py): margins from the plan's own ledger, the host memory
against a container's memory, and ``plan`` printing them (text and JSON ``risks[]``)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from inference_capacity.api import InferenceCapacity
from inference_capacity.decision import plan_for_target
from inference_capacity.engines.vllm import cold_compile_loss, predict_startup
from inference_capacity.model import load_model
from inference_capacity.planner import make_plan
from inference_capacity.resolve import resolve
from inference_capacity.risks import (
    HOST_BASE_BYTES,
    HostInput,
    assess,
    compile_cache_state,
    host_input,
    host_peak_bytes,
)
from inference_capacity.units import GiB

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"
KINDS = ["load", "startup", "kvExhaustion", "activation", "cudaGraph", "compileCache", "host"]


def _plan():  # type: ignore[no-untyped-def]
    icap, dep = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    spec = InferenceCapacity.from_manifest(icap).spec
    resolved = resolve(spec, dep)
    plan, _ = plan_for_target(resolved.plan_input, spec, dep, None, None, "")
    return plan


def test_margins_come_from_the_ledger() -> None:
    plan = _plan()
    risks = {r.kind: r for r in assess(plan)}
    assert list(risks) == KINDS
    rank = plan.prediction.ranks[0]
    items = {i.name: i.bytes for i in plan.ledger[0].items}
    total = plan.input.gpu.total_bytes
    # vLLM's startup check: free memory (device less the CUDA context) >= utilization x total
    assert risks["startup"].margin_bytes == total - items["cuda_context"] - rank.requested
    one = plan.prediction.settings.max_model_len * plan.kv_bytes_per_token_rank
    assert risks["kvExhaustion"].margin_bytes == rank.available_kv - one
    assert risks["activation"].margin_bytes == items["operational_headroom"] + items["unallocated"]
    # 0.19: the graph pool is captured outside vLLM's budget
    assert not plan.prediction.settings.cg_in_budget
    outside = total - rank.requested - items["cuda_context"]
    assert risks["cudaGraph"].margin_bytes == outside - items["cuda_graph_pool"]
    assert not any(r.at_risk for r in risks.values())
    assert risks["host"].margin_bytes is None  # no container memory given


def test_host_memory_against_the_container() -> None:
    plan = _plan()
    weights = plan.prediction.ranks[0].weights.total
    h = HostInput(memory_limit=8 * GiB, cpu_offload_gb=4)
    peak = host_peak_bytes(plan, h)
    assert peak == HOST_BASE_BYTES + weights + 4 * GiB
    host = assess(plan, h)[-1]
    assert host.kind == "host" and host.at_risk and host.margin_bytes == 8 * GiB - peak
    roomy = assess(plan, HostInput(memory_request=64 * GiB))[-1]
    assert not roomy.at_risk and roomy.margin_bytes == 64 * GiB - HOST_BASE_BYTES - weights


def test_plan_prints_the_seven_risks() -> None:
    cmd = [sys.executable, "-m", "inference_capacity.cli", "plan", str(EXAMPLE)]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "OOM risks" in text
    for kind in KINDS:
        assert f"    {kind} " in text
    out = json.loads(
        subprocess.run([*cmd, "-o", "json"], capture_output=True, text=True, check=True).stdout
    )
    doc = out[0] if isinstance(out, list) else out
    assert [r["kind"] for r in doc["risks"]] == KINDS
    assert all(isinstance(r["margin_bytes"], int) for r in doc["risks"][:5])


def _cache_risk(plan, container, volumes):  # type: ignore[no-untyped-def]
    host = host_input(container, {}, volumes)
    return next(r for r in assess(plan, host) if r.kind == "compileCache")


def test_a_compile_cache_that_goes_with_the_pod_is_a_risk() -> None:
    # vLLM counts a cold torch.compile's temporaries as activation (vllm-project/vllm#54122;
    # vllm-startup-171/173: 0.99 GiB of KV on Qwen3-8B): a pod whose cache directory
    # (VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm, else $HOME/.cache/vllm: vllm/envs.py) is on
    # no volume that outlives it compiles cold at every start
    plan = _plan()
    bare = _cache_risk(plan, {"name": "vllm"}, [])
    # the margin: minus the KV a cold boot loses at the plan's own batch (the example's sized
    # max-num-seqs keeps the warm sampler peak under the compile's embedding copy)
    i = plan.input
    engine = replace(i.engine, max_num_seqs=plan.prediction.settings.max_num_seqs)
    # what a cold boot loses, made independently: the same engine predicted cold
    made_cold = predict_startup(
        i.model, i.gpu.total_bytes, i.gpu.name, i.tp, i.pp, replace(engine, compile_cache="cold")
    )
    lost = max(r.compile_excess for r in made_cold.ranks)
    assert cold_compile_loss(plan.prediction) == lost
    assert lost > 0 and bare.at_risk and bare.margin_bytes == -lost
    assert f"{lost / GiB:.2f} GiB smaller" in bare.detail
    assert "/root/.cache/vllm" in bare.detail and "container's filesystem" in bare.detail
    # at vLLM's default 1,024 sequences on the H100 the warm sampler peak is the larger (the
    # llm-d sweep's warm and cold boots print the same peak, vllm-startup-105/177): no loss
    big = make_plan(
        replace(i, engine=replace(i.engine, max_num_seqs=1024), choose_max_num_seqs=False)
    )
    same = _cache_risk(big, {"name": "vllm"}, [])
    assert not same.at_risk and same.margin_bytes == 0 and "the KV pool is the same" in same.detail
    pvc = [{"name": "cache", "persistentVolumeClaim": {"claimName": "vllm-cache"}}]
    mounted = {"name": "vllm", "volumeMounts": [{"name": "cache", "mountPath": "/root/.cache"}]}
    assert not _cache_risk(plan, mounted, pvc).at_risk
    scratch = [{"name": "cache", "emptyDir": {}}]
    assert _cache_risk(plan, mounted, scratch).at_risk  # emptyDir goes with the pod
    # the directory follows the environment; the mount with the longest path holding it wins
    moved = {
        "name": "vllm",
        "env": [{"name": "VLLM_CACHE_ROOT", "value": "/models/vllm-cache"}],
        "volumeMounts": [
            {"name": "cache", "mountPath": "/root/.cache"},
            {"name": "models", "mountPath": "/models"},
        ],
    }
    vols = [*pvc, {"name": "models", "emptyDir": {}}]
    assert compile_cache_state(moved, vols).volume == "models"
    assert _cache_risk(plan, moved, vols).at_risk
    # a mount at the root holds every path; a trailing slash is the same mount
    root = {"volumeMounts": [{"name": "cache", "mountPath": "/"}]}
    assert compile_cache_state(root, pvc).persistent
    slash = {"volumeMounts": [{"name": "cache", "mountPath": "/root/.cache/vllm/"}]}
    assert compile_cache_state(slash, pvc).volume == "cache"
    home = {"env": [{"name": "HOME", "value": "/home/vllm"}]}
    assert compile_cache_state(home, []).path == "/home/vllm/.cache/vllm"
    xdg = {"env": [{"name": "XDG_CACHE_HOME", "value": "/xdg"}]}
    assert compile_cache_state(xdg, []).path == "/xdg/vllm"
    ref = {"env": [{"name": "VLLM_CACHE_ROOT", "valueFrom": {"configMapKeyRef": {}}}]}
    assert compile_cache_state(ref, []).path is None
    assert not _cache_risk(plan, ref, []).at_risk  # not resolved: not claimed either way
    # no pod spec read (the CLI's plan): unknown; --enforce-eager compiles nothing
    unknown = next(r for r in assess(plan) if r.kind == "compileCache")
    assert not unknown.at_risk and "unknown" in unknown.detail
    engine = replace(plan.input.engine, enforce_eager=True)
    eager = replace(plan, input=replace(plan.input, engine=engine))
    assert not _cache_risk(eager, {"name": "vllm"}, []).at_risk


def test_a_plan_made_cold_counts_the_compile_and_is_not_at_risk() -> None:
    # spec.engine.compileCache: cold plans the compile's peak (engines/vllm.py::
    # cold_compile_bytes), so a cache that goes with the pod is no longer a surprise
    icap, dep = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    icap["spec"].setdefault("engine", {})["compileCache"] = "cold"
    spec = InferenceCapacity.from_manifest(icap).spec
    assert spec.engine.compile_cache == "cold"
    cold, _ = plan_for_target(resolve(spec, dep).plan_input, spec, dep, None, None, "")
    peak = cold.prediction.ranks[0].compile_peak
    assert peak > 0
    risk = _cache_risk(cold, {"name": "vllm"}, [])
    assert not risk.at_risk and "planned cold" in risk.detail
    assert f"{peak / GiB:.2f} GiB" in risk.detail
    warm = _cache_risk(_plan(), {"name": "vllm"}, [])
    assert warm.at_risk and "compileCache: cold" in warm.detail
    # a multimodal model's runner embeds outside the compiled graph: nothing to count
    vl = make_plan(replace(cold.input, model=load_model("google/gemma-3-4b-it")))
    assert vl.prediction.ranks[0].compile_peak == 0
    none = _cache_risk(vl, {"name": "vllm"}, [])
    assert not none.at_risk and "nothing to count" in none.detail
    icap["spec"]["engine"]["compileCache"] = "tepid"
    with pytest.raises(ValueError, match="compileCache"):
        InferenceCapacity.from_manifest(icap)
