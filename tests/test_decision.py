"""One decision for the CLI and the operator, and a CLI that keeps its word (issue 10).

The decision itself is :func:`inference_capacity.decision.decide`; `tests/test_decision_parity.py`
checks on the real control plane that the operator does what it says. Here: the two
disagreements the review reproduced (hysteresis; TP against the container's GPUs), the exit codes
of `plan -o patch`, flags that a manifest says itself, unreachable pools, plans that do not fit,
`run` without a cluster, help texts, settings and per-object state.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from inference_capacity import decision, settings
from inference_capacity.api import InferenceCapacity
from inference_capacity.cli import (
    EXIT_NO_DEPLOYMENT,
    EXIT_NOTHING_TO_PATCH,
    EXIT_REFUSED,
    build_parser,
)
from inference_capacity.controller import handlers, state
from inference_capacity.patching import ANNOTATION_APPLIED
from inference_capacity.resolve import resolve
from inference_capacity.vocab import CONDITION_REASONS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"
CLI = [sys.executable, "-m", "inference_capacity.cli"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )


def example() -> tuple[dict[str, Any], dict[str, Any]]:
    icap, dep = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    return icap, dep


def write(tmp_path: Path, *docs: dict[str, Any]) -> str:
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all(list(docs)))
    return str(f)


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def settled_as_recommended(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The example with its Deployment already at the recommendation (replicas, strategy,
    flags), and the recommendation."""
    icap, dep = example()
    rec = json.loads(run("plan", str(EXAMPLE), "-o", "json").stdout)["recommendation"]
    dep["spec"]["replicas"] = rec["replicas"]
    dep["spec"]["strategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": rec["maxSurge"], "maxUnavailable": rec["maxUnavailable"]},
    }
    dep["spec"]["template"]["spec"]["containers"][0]["args"] += [
        "--gpu-memory-utilization",
        str(rec["gpuMemoryUtilization"]),
        "--max-num-seqs",
        str(rec["maxNumSeqs"]),
    ]
    return icap, dep, rec


# --- the two reproduced disagreements --------------------------------------------------------


def test_a_change_within_the_hysteresis_is_not_patched_by_plan_either(tmp_path: Path) -> None:
    icap, dep, rec = settled_as_recommended(tmp_path)
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    running = math.floor(rec["maxNumSeqs"] * 1.03)  # 3 % above: inside the default 5 %
    args[args.index("--max-num-seqs") + 1] = str(running)
    assert icap["spec"].get("policy", {}).get("hysteresisPercent") is None  # the default 5 %
    f = write(tmp_path, icap, dep)
    r = run("plan", f, "-o", "patch")
    assert r.returncode == EXIT_NOTHING_TO_PATCH, (r.stdout, r.stderr)
    assert r.stdout == "" and "nothing to change" in r.stderr and "hysteresis" in r.stderr
    out = json.loads(run("plan", f, "-o", "json").stdout)
    applied = next(c for c in out["decision"]["conditions"] if c["type"] == "Applied")
    assert (applied["status"], applied["reason"]) == ("True", "UpToDate")
    # with no hysteresis the same Deployment gets exactly the --max-num-seqs change
    icap["spec"]["policy"]["hysteresisPercent"] = 0
    r = run("plan", write(tmp_path, icap, dep), "-o", "patch")
    assert r.returncode == 0, r.stderr
    patch = json.loads(r.stdout)
    assert "replicas" not in patch["spec"] and "strategy" not in patch["spec"]
    new_args = patch["spec"]["template"]["spec"]["containers"][0]["args"]
    assert flag(new_args, "--max-num-seqs") == str(rec["maxNumSeqs"])
    assert flag(new_args, "--gpu-memory-utilization") == str(rec["gpuMemoryUtilization"])


def test_tp_without_the_gpus_for_it_is_refused_by_plan_as_by_the_operator(tmp_path: Path) -> None:
    icap, dep = example()
    dep["spec"]["template"]["spec"]["containers"][0]["args"] += ["--tensor-parallel-size", "2"]
    f = write(tmp_path, icap, dep)  # nvidia.com/gpu: "1"
    r = run("plan", f, "-o", "patch")
    assert r.returncode == EXIT_REFUSED and r.stdout == ""
    assert "InsufficientGpusPerPod" in r.stderr and "needs 2 nvidia.com/gpu" in r.stderr
    r = run("plan", f, "--fail-if-not-fits")
    assert r.returncode == 1 and "InsufficientGpusPerPod" in r.stderr
    assert "Would patch deployment/llama-8b: not patched: InsufficientGpusPerPod" in r.stdout


def test_the_decision_is_pure_and_names_the_pdb_conflict() -> None:
    icap, dep = example()
    spec = InferenceCapacity.from_manifest(icap).spec
    resolved = resolve(spec, dep, {})
    plan, msg = decision.plan_for_target(
        resolved.plan_input, spec, dep, None, None, "spare GPUs unknown"
    )
    world = decision.World(deployment=dep, now=1_000_000.0)
    first = decision.decide(spec, "default/llama-8b", resolved, plan, world, spare_message=msg)
    again = decision.decide(spec, "default/llama-8b", resolved, plan, world, spare_message=msg)
    assert first == again and first.action == "patch" and first.change is not None
    assert first.patch["metadata"]["annotations"][decision.ANNOTATION_TEMPLATE_CHANGED] == (
        decision.iso(1_000_000.0)
    )
    foreign = decision.foreign_pdb(
        {"metadata": {"name": "llama-8b", "ownerReferences": []}}, "llama-8b", "uid-1", "X"
    )
    refused = decision.decide(
        spec,
        "default/llama-8b",
        resolved,
        plan,
        decision.World(deployment=dep, foreign_pdb=foreign, now=1.0),
    )
    assert refused.action == "refuse" and refused.reason == "PodDisruptionBudgetConflict"
    assert refused.change is None and refused.patch == {}
    # every reason the decision writes is one of the vocabulary's
    for d in (first, refused, decision.unsupported(resolved)):
        assert {c.reason for c in d.conditions} <= CONDITION_REASONS, d.conditions


def test_the_first_write_to_a_deployment_is_no_event_and_a_later_change_is() -> None:
    """An Event per creation is a request per object for the API server: the operator's first
    write to a Deployment (no applied annotation yet) is recorded in status.applied and the
    Applied condition only; a later change (an edit, a drift correction) is an Event."""
    icap, dep = example()
    spec = InferenceCapacity.from_manifest(icap).spec
    resolved = resolve(spec, dep, {})
    plan, msg = decision.plan_for_target(
        resolved.plan_input, spec, dep, None, None, "spare GPUs unknown"
    )
    first = decision.decide(
        spec, "default/llama-8b", resolved, plan, decision.World(deployment=dep, now=1e6)
    )
    assert first.action == "patch" and first.first_write and first.events == ()
    assert first.applied_message.startswith("set ")
    # the same Deployment once the operator has written to it (another flag value since)
    again = json.loads(json.dumps(dep))
    again.setdefault("metadata", {}).setdefault("annotations", {})[ANNOTATION_APPLIED] = "{}"
    later = decision.decide(
        spec, "default/llama-8b", resolved, plan, decision.World(deployment=again, now=1e6)
    )
    assert later.action == "patch" and not later.first_write
    assert [(e.reason, e.message) for e in later.events] == [("Applied", later.applied_message)]


# --- plan -o patch exit codes -------------------------------------------------------------


def test_no_deployment_in_the_input_is_its_own_exit_code(tmp_path: Path) -> None:
    icap, _ = example()
    r = run("plan", write(tmp_path, icap), "-o", "patch")
    assert r.returncode == EXIT_NO_DEPLOYMENT and r.stdout == ""
    assert "no Deployment deployment/llama-8b in the input" in r.stderr


def test_recommend_mode_prints_the_patch_it_recommends_and_says_so() -> None:
    r = run("plan", str(ROOT / "examples" / "deepseek-v2-lite-mla.yaml"), "-o", "patch")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["spec"]["template"]["spec"]["containers"]
    assert "mode Recommend: the operator writes nothing" in r.stderr


def test_the_exit_codes_are_documented() -> None:
    readme = (ROOT / "README.md").read_text()
    for code, words in (
        (EXIT_NOTHING_TO_PATCH, "nothing to change"),
        (EXIT_NO_DEPLOYMENT, "no Deployment"),
        (EXIT_REFUSED, "refuse"),
    ):
        assert f"| {code} |" in readme and words in readme


# --- flags a manifest says itself ------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--tp", "2"], "spec.hardware.tensorParallel"),
        (["--gpu", "A100-SXM-80GB"], "spec.hardware.gpu"),
        (["--gpu-memory-utilization", "0.8"], "the recommendation"),
        (["--max-model-len", "8192"], "spec.workload.maxModelLen"),
        (["--kv-cache-dtype", "fp8"], "spec.model.kvCacheDtype"),
        (["--kv-cache-gib", "20"], "spec.engine.kvCacheMemoryBytes"),
        (["--engine-version", "0.11.0"], "spec.engine.version"),
        (["--operational-headroom", "0.1"], "spec.headroom.operationalFraction"),
    ],
)
def test_what_if_flags_with_a_manifest_are_refused_naming_the_field(
    flags: list[str], field: str
) -> None:
    r = run("plan", str(EXAMPLE), *flags)
    assert r.returncode == 2 and r.stdout == ""
    assert f"{flags[0]} is a what-if flag" in r.stderr and field in r.stderr
    assert "Traceback" not in r.stderr


# --- pools and plans that cannot be had ---------------------------------------------------


def test_an_unreachable_pool_is_an_error_naming_the_largest_reachable_one() -> None:
    base = ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100-SXM-80GB"]
    r = run(*base, "--kv-cache-gib", "500")
    assert r.returncode == 1
    assert "Recommended:" not in r.stdout
    assert "--kv-cache-gib 500 is out of reach" in r.stderr
    largest = json.loads(run(*base, "-o", "json").stdout)["vllm_startup"]["ranks"][0][
        "available_kv_cache_gib"
    ]
    assert f"{largest:.2f} GiB per GPU" in r.stderr
    # the largest reachable pool is reachable
    ok = run(*base, "--kv-cache-gib", f"{math.floor(largest * 100) / 100}")
    assert ok.returncode == 0, ok.stderr


def test_weights_larger_than_the_gpu_print_no_flags_and_no_utilization_advice() -> None:
    r = run("plan", "--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "H100-SXM-80GB")
    assert r.returncode == 0
    assert "Recommended:" not in r.stdout and "Not usable: VllmWillNotStart" in r.stdout
    assert "Try increasing gpu_memory_utilization" not in r.stdout
    assert "the weights alone" in r.stdout and "exceed the GPU" in r.stdout
    tp = next(line for line in r.stdout.splitlines() if "more-tensor-parallel" in line)
    assert "does not fit" not in tp  # the lever that fits, with its numbers


def test_fits_no_with_starts_yes_names_the_headroom_and_its_flag() -> None:
    r = run(
        "plan",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "H100-SXM-80GB",
        "--gpu-memory-utilization",
        "0.95",
        "--operational-headroom",
        "0.3",
    )
    assert "starts: yes" in r.stdout and "fits: NO (OverCommitted)" in r.stdout
    why = next(line for line in r.stdout.splitlines() if line.strip().startswith("why:"))
    assert "operational headroom" in why and "--operational-headroom" in why and "30%" in why


# --- run without a cluster -----------------------------------------------------------------


def test_run_without_a_cluster_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(tmp_path / "missing")
    r = run("run", "--standalone", env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and f"kubeconfig {tmp_path / 'missing'}" in r.stderr
    cfg = tmp_path / "closed"
    cfg.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "x"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    env["KUBECONFIG"] = str(cfg)
    r = run("run", "--standalone", env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert "cannot reach the API server https://127.0.0.1:9" in r.stderr and str(cfg) in r.stderr


# --- help -------------------------------------------------------------------------------------


def test_every_flag_has_a_help_text() -> None:
    missing = []
    parsers = [build_parser()]
    while parsers:
        p = parsers.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += list(action.choices.values())
            elif action.option_strings and not action.help:
                missing.append(f"{p.prog} {action.option_strings[0]}")
    assert not missing, missing


# --- settings and per-object state ---------------------------------------------------------


def test_settings_come_from_one_object_and_bad_values_name_the_variable() -> None:
    s = settings.Settings.from_env(
        {
            "INFERENCE_CAPACITY_REFRESH_SECONDS": "7.5",
            "INFERENCE_CAPACITY_PEERING_PRIORITY": "12",
            "INFERENCE_CAPACITY_PROMETHEUS_ALLOWED_URL_PREFIXES": "http://a:9090/, https://b/",
        }
    )
    assert s.refresh_seconds == 7.5 and s.peering_priority == 12
    assert s.prometheus_allowed_url_prefixes == ("http://a:9090/", "https://b/")
    with pytest.raises(ValueError, match="INFERENCE_CAPACITY_WORKERS must be an integer"):
        settings.Settings.from_env({"INFERENCE_CAPACITY_WORKERS": "many"})
    with pytest.raises(ValueError, match="INFERENCE_CAPACITY_HUB_TIMEOUT must be >= 0"):
        settings.Settings.from_env({"INFERENCE_CAPACITY_HUB_TIMEOUT": "-1"})
    with pytest.raises(ValueError, match="not an http"):
        s.replace(prometheus_allowed_url_prefixes=("ftp://x",))


def test_every_environment_variable_is_documented() -> None:
    doc = (ROOT / "docs" / "install.md").read_text()
    missing = [name for name in settings.env_names() if f"`{name}`" not in doc]
    assert not missing, missing


def test_a_thousand_deleted_resources_leave_nothing_behind() -> None:
    before = state.retained()
    for i in range(1000):
        ns, name, uid = f"ns-{i % 7}", f"icap-{i}", f"uid-{i}"
        with state.serialised(uid):
            pass
        assert state.event_is_new(uid, "Applied", f"set {i}")
        assert not state.event_is_new(uid, "Applied", f"set {i}")
        state.pdb_seen.set(uid, (1, "{}", 0.0))
        state.deployment_changed(ns, f"dep-{i}", 3)
        state.replica_history.set((ns, f"dep-{i}"), ((0.0, 2),))
    assert state.retained() == before + 5000
    for i in range(1000):
        ns, name, uid = f"ns-{i % 7}", f"icap-{i}", f"uid-{i}"
        handlers.forget(ns, name, uid, f"dep-{i}")
    assert state.retained() == before


def test_per_object_tables_are_bounded() -> None:
    table: state.Bounded[int, int] = state.Bounded(limit=10)
    for i in range(100):
        table.set(i, i)
    assert len(table) == 10 and table.get(99) == 99 and table.get(0) is None


# --- the status contract ------------------------------------------------------------------


def test_the_status_is_written_through_the_status_models() -> None:
    from inference_capacity.api import StatusContractError, status_document
    from inference_capacity.controller import reconcile

    icap, dep = example()
    resource = InferenceCapacity.from_manifest(icap)
    spec = resource.spec
    resolved = resolve(spec, dep, {})
    plan, msg = decision.plan_for_target(resolved.plan_input, spec, dep, None, 4, "4 spare")
    body = {"metadata": {"name": "llama-8b", "namespace": "d", "uid": "u", "generation": 3}}
    ctx = reconcile._Ctx(body, lambda *_: None)
    reconcile._fill_status(
        ctx, resource, resolved.engine_version, resolved.engine_version_source, plan
    )
    chosen = decision.decide(
        spec, "d/llama-8b", resolved, plan, decision.World(deployment=dep, now=1.0)
    )
    assert chosen.change is not None
    for c in chosen.conditions:
        ctx.cond(c.type, c.status, c.reason, c.message)
    ctx.status["applied"] = {
        "flags": dict(chosen.flags),
        "replicas": chosen.replicas,
        "at": ctx.now,
        "hash": chosen.change.applied_hash,
    }
    ctx.status["latency"] = None  # a null stays: the merge patch deletes a stale value
    written = ctx.finish().status
    assert written["recommendation"]["maxNumSeqs"] == plan.recommendation.max_num_seqs
    assert written["observedGeneration"] == 3 and "latency" in written
    assert written["latency"] is None
    assert {c["type"] for c in written["conditions"]} >= {"Fits", "Applied", "Ready"}
    # a key the CRD does not describe, or a value of the wrong kind, is refused by name
    with pytest.raises(StatusContractError, match=r"status\.surprise: not in the status models"):
        status_document({**written, "surprise": 1})
    with pytest.raises(StatusContractError, match="status.observedGeneration"):
        status_document({**written, "observedGeneration": "three"})
    # inside a list (replaced whole by the merge patch) a null deletes nothing, and the API
    # server prunes a null of a non-nullable field: it is not written, so what is written is
    # what the server keeps (Kopf compares the two after each patch and warned on every write)
    host = {"kind": "host", "resource": "host", "atRisk": False, "flag": "f", "detail": "d"}
    gpu = {**host, "kind": "load", "resource": "gpu", "marginBytes": 5}
    again = status_document({**written, "risks": [{**host, "marginBytes": None}, gpu]})
    assert again["risks"] == [host, gpu]


def test_an_hpa_in_the_input_takes_replicas_away_from_the_patch(tmp_path: Path) -> None:
    icap, dep = example()
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "llama-8b", "namespace": "default"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-8b"},
            "minReplicas": 2,
            "maxReplicas": 9,
        },
    }
    without = json.loads(run("plan", write(tmp_path, icap, dep), "-o", "patch").stdout)
    assert "replicas" in without["spec"]
    out = json.loads(run("plan", write(tmp_path, icap, dep, hpa), "-o", "json").stdout)
    patch = out["patch"]["strategicMergePatch"]
    assert "replicas" not in patch["spec"]  # the HPA scales it, as the operator leaves it
    assert out["decision"]["pdbMinAvailable"] is None
    assert decision.hpa_min_replicas_by_target([hpa, {"kind": "HorizontalPodAutoscaler"}]) == {
        "llama-8b": 2
    }
