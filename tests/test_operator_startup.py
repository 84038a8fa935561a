"""The operator reads vLLM's own startup lines back from the pods, through the real apiserver's
``pods/log``, which reaches kwok's kubelet API: kwok serves each pod's log from the file a
``ClusterLogs`` object names (tests/realk8s/podlogs.py). The logs are real vLLM 0.19.0 startup
logs from tests/data/vllm-startup-logs.jsonl; every expected number is the ``logged`` value
recorded there for that log.

One operator for the module, one namespace per scenario, all applied before any is waited for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inference_capacity.observe.startup_log import LIMIT_BYTES
from tests.operator_harness import Cluster, cluster, poll
from tests.realk8s.fixtures import wait_for
from tests.realk8s.podlogs import cluster_logs, write_cri_log

__all__ = ["cluster"]

DATA = Path(__file__).resolve().parent / "data" / "vllm-startup-logs.jsonl"
POINTS = {json.loads(line)["id"]: json.loads(line) for line in DATA.read_text().splitlines()}
#: codellama/CodeLlama-7b-hf, vLLM 0.19.0, one H100 80GB, --gpu-memory-utilization 0.95,
#: --max-model-len 8192 (the llm-d capacity-planner accuracy sweep's raw server log)
POINT = POINTS["vllm-startup-033"]
NAME = "codellama"


def _objects(ns: str, util: float, drift_percent: float = 3.0) -> list[dict[str, Any]]:
    icap = {
        "apiVersion": "capacity.inference.dev/v1alpha1",
        "kind": "InferenceCapacity",
        "metadata": {"name": NAME, "namespace": ns},
        "spec": {
            "mode": "Recommend",
            "targetRef": {"kind": "Deployment", "name": NAME, "container": "vllm"},
            "model": {"name": "codellama/CodeLlama-7b-hf"},
            "hardware": {"gpu": "H100-SXM-80GB"},
            "engine": {"version": "0.19.0"},
            "workload": {"maxModelLen": 8192},
            "policy": {"predictionDriftPercent": drift_percent},
        },
    }
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": ns, "labels": {"app": NAME}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.19.0",
                            "command": ["vllm", "serve", "codellama/CodeLlama-7b-hf"],
                            "args": [
                                "--max-model-len",
                                "8192",
                                "--gpu-memory-utilization",
                                str(util),
                            ],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            },
        },
    }
    return [icap, dep]


def _startup(c: Cluster, ns: str) -> list[dict[str, Any]]:
    status = c.icap(ns, NAME).get("status") or {}
    out: list[dict[str, Any]] = (status.get("observed") or {}).get("startup") or []
    return out


def _wait_entry(c: Cluster, ns: str, reason: str, timeout: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        got = _startup(c, ns)
        return got[0] if got and got[0]["reason"] == reason else None

    try:
        out: dict[str, Any] = wait_for(check, timeout=timeout, interval=0.5, message=reason)
    except AssertionError:
        raise AssertionError(
            f"{ns}: startup entry {reason} not reached: {_startup(c, ns)}\n{c.diagnostics()}"
        ) from None
    return out


def _drift_events(c: Cluster, ns: str) -> list[dict[str, Any]]:
    return [
        e
        for e in c.events(ns)
        if e["reason"] == "PredictionDrift" and e["involvedObject"]["name"] == NAME
    ]


@pytest.fixture(scope="module")
def scenarios(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every scenario's namespace, its ClusterLogs and objects applied at once."""
    c = cluster
    work = tmp_path_factory.mktemp("podlogs")
    real = POINT["raw_lines"]
    files = {
        "match": write_cri_log(work / "match.log", real),
        "drift": write_cri_log(work / "drift.log", real),
        "silent": write_cri_log(work / "silent.log", []),
        "hostile": write_cri_log(
            work / "hostile.log",
            [
                "x" * (64 * 1024),  # a huge line
                bytes(b for b in range(256) if b != 10) * 8,  # binary
                *real,
                "(EngineCore pid=1) INFO 04-22 00:26:42 [v1/core/kv_cache_utils.py:1319] GPU KV "
                "cache size: 99,999,999,999 tokens",  # vLLM's format, a number no vLLM prints
            ],
        ),
        # the startup lines come after the first 256 KiB: never read
        "bound": write_cri_log(
            work / "bound.log",
            ["(APIServer pid=1) INFO 04-22 00:00:00 [x.py:1] " + "y" * 900] * 300 + real,
        ),
    }
    out = {}
    for key, path in files.items():
        ns = c.namespace(f"st-{key}")
        c.api.apply(cluster_logs(ns, ns, path, containers=("vllm",)))
        out[key] = ns
    out["nolog"] = c.namespace("st-nolog")  # no ClusterLogs: kwok has no log for the pod
    for key, ns in out.items():
        # the drift scenario's Deployment claims 0.90 while its vLLM ran (and printed) 0.95
        c.api.apply(*_objects(ns, 0.90 if key == "drift" else 0.95))
    return out


def test_observed_equals_what_the_pod_printed(cluster: Cluster, scenarios: dict[str, str]) -> None:
    c, ns = cluster, scenarios["match"]
    e = _wait_entry(c, ns, "Observed")
    logged = POINT["logged"]
    assert e["weightsGib"] == logged["weights_gib"]
    assert e["activationPeakGib"] == logged["activation_peak_gib"]
    assert e["nonTorchGib"] == logged["non_torch_gib"]
    assert e["cudaGraphGib"] == logged["cuda_graph_gib"]
    assert e["availableKvCacheGib"] == logged["kv_cache_gib"]
    assert e["kvCacheTokens"] == logged["kv_cache_tokens"]
    assert e["numGpuBlocks"] == logged["gpu_blocks"]
    assert e["maxConcurrency"] == logged["max_concurrency"]
    assert e["maxConcurrencyLen"] == logged["max_concurrency_len"]
    assert e["cudaGraphEstimatedGib"] == 0.84  # "Estimated CUDA graph memory: 0.84 GiB total"
    pod = c.api.get_json("pods", "-n", ns, "-l", f"app={NAME}")["items"][0]
    assert e["pod"] == pod["metadata"]["name"]
    assert e["templateHash"] == pod["metadata"]["labels"]["pod-template-hash"]
    assert 0 < e["bytesRead"] <= LIMIT_BYTES
    errors = e["predictionErrorPercent"]
    assert set(errors) >= {"weights", "availableKvCache", "kvCacheTokens", "maxConcurrency"}
    predicted = e["predictedKvCacheTokens"]
    observed = logged["kv_cache_tokens"]
    expected = (predicted - observed) / observed * 100
    assert errors["kvCacheTokens"] == pytest.approx(expected, abs=1e-3)
    # the ledger is within the threshold on this log: no drift, no Event
    cond = c.wait_condition(ns, NAME, "PredictionDrift", "False", "WithinThreshold")
    assert f"{observed:,}" in cond["message"]
    assert _drift_events(c, ns) == []


def test_a_drift_raises_the_condition_and_one_event(
    cluster: Cluster, scenarios: dict[str, str]
) -> None:
    c, ns = cluster, scenarios["drift"]
    e = _wait_entry(c, ns, "Observed")
    err = e["predictionErrorPercent"]["kvCacheTokens"]
    # predicted at --gpu-memory-utilization 0.90: ~0.05 x 79.19 GiB less pool than vLLM printed
    assert err < -3.0
    c.wait_condition(ns, NAME, "PredictionDrift", "True", "KvTokensDrift")
    wait_for(lambda: _drift_events(c, ns), timeout=20, message="a PredictionDrift Event")
    poll(4 * c.operator.refresh)  # several refreshes later: still the one Event
    events = _drift_events(c, ns)
    assert len(events) == 1 and events[0].get("count", 1) == 1, events
    assert f"{e['kvCacheTokens']:,}" in events[0]["message"]


def test_a_pod_that_never_logs_and_one_without_a_log(
    cluster: Cluster, scenarios: dict[str, str]
) -> None:
    c = cluster
    silent = _wait_entry(c, scenarios["silent"], "NoStartupLines")
    assert "kvCacheTokens" not in silent and silent["bytesRead"] == 0
    c.wait_condition(scenarios["silent"], NAME, "PredictionDrift", "Unknown", "NotObserved")
    nolog = _wait_entry(c, scenarios["nolog"], "LogUnavailable")
    assert "pods/log" in nolog["message"] and "kvCacheTokens" not in nolog


def test_a_hostile_log_and_the_byte_bound(cluster: Cluster, scenarios: dict[str, str]) -> None:
    c = cluster
    hostile = _wait_entry(c, scenarios["hostile"], "Rejected")
    for key in ("kvCacheTokens", "weightsGib", "availableKvCacheGib", "predictionErrorPercent"):
        assert key not in hostile, key
    c.wait_condition(scenarios["hostile"], NAME, "PredictionDrift", "Unknown", "NotObserved")
    bound = _wait_entry(c, scenarios["bound"], "NoStartupLines")
    assert 0 < bound["bytesRead"] <= LIMIT_BYTES and "kvCacheTokens" not in bound


#: vLLM 0.19.0's free-memory check at startup (v1/worker/utils.py::request_memory), as its
#: traceback's last line prints it: 75.23 GiB requested (0.95 x 79.19), 70.10 GiB free
FREE_MEMORY_ERROR = (
    "ValueError: Free memory on device cuda:0 (70.1/79.19 GiB) on startup is less than desired "
    "GPU memory utilization (0.95, 75.23 GiB). Decrease GPU memory utilization or reduce GPU "
    "memory used by other processes."
)


def _deployment_patches(c: Cluster, ns: str) -> int:
    return sum(
        1
        for r in c.operator_requests()
        if r.method == "PATCH" and r.resource == "deployments" and f"/namespaces/{ns}/" in r.path
    )


def _current_pods(c: Cluster, ns: str) -> list[dict[str, Any]] | None:
    """Every pod, once all run the current template and are Ready."""
    d = c.deployment(ns, NAME)
    args = d["spec"]["template"]["spec"]["containers"][0]["args"]
    pods = c.api.get_json("pods", "-n", ns, "-l", f"app={NAME}")["items"]
    ok = [
        p
        for p in pods
        if p["spec"]["containers"][0]["args"] == args
        and any(
            x["type"] == "Ready" and x["status"] == "True"
            for x in p["status"].get("conditions", [])
        )
    ]
    return ok if ok and len(ok) == len(pods) == d["spec"]["replicas"] else None


def _fail(c: Cluster, ns: str, pods: list[dict[str, Any]]) -> None:
    # every container restarted after vLLM's startup check failed; none is Ready (nothing
    # serves: the operator may patch, as a Deployment whose pods all crash)
    for pod in pods:
        statuses = pod["status"]["containerStatuses"]
        for st in statuses:
            st.update(
                ready=False,
                restartCount=1,
                lastState={"terminated": {"exitCode": 1, "reason": "Error"}},
            )
        conditions = [
            {**x, "status": "False"} if x["type"] in ("Ready", "ContainersReady") else x
            for x in pod["status"]["conditions"]
        ]
        body = {"status": {"containerStatuses": statuses, "conditions": conditions}}
        c.api.kubectl(
            "patch", "pod", pod["metadata"]["name"], "-n", ns, "--subresource=status",
            "--type=merge", "-p", json.dumps(body),
        )  # fmt: skip


def test_a_failed_start_steps_back_once(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    ns = c.namespace("st-failed")
    empty = write_cri_log(tmp_path / "now.log", [])
    prev = write_cri_log(tmp_path / "prev.log", [*POINT["raw_lines"][:4], FREE_MEMORY_ERROR])
    c.api.apply(cluster_logs(ns, ns, empty, containers=("vllm",), previous_logs_file=prev))
    icap, dep = _objects(ns, 0.95)
    icap["spec"]["mode"] = "Enforce"
    icap["spec"]["policy"]["stabilizationWindowSeconds"] = 3600
    c.api.apply(icap, dep)
    c.wait_condition(ns, NAME, "Applied", "True", timeout=60)

    pods = wait_for(
        lambda: _current_pods(c, ns), timeout=90, message="the current template's pods Ready"
    )
    args0 = c.container(ns, NAME)["args"]
    util_before = float(args0[args0.index("--gpu-memory-utilization") + 1])
    poll(2 * c.operator.refresh)
    before = _deployment_patches(c, ns)
    _fail(c, ns, pods)
    wait_for(
        lambda: [e for e in c.events(ns) if e["reason"] == "StartupFailed"],
        timeout=60,
        message="a StartupFailed Event",
    )
    args = c.wait_args(
        ns,
        NAME,
        lambda a: float(a[a.index("--gpu-memory-utilization") + 1]) < util_before,
        timeout=60,
    )
    util_after = float(args[args.index("--gpu-memory-utilization") + 1])
    # the measured shortfall: 75.23 - 70.10 GiB of the H100's 79.19 GiB (catalog bytes)
    shortfall = (75.23 - 70.1) / 79.19
    assert util_before - util_after == pytest.approx(shortfall, abs=0.002)
    adjustment = c.icap(ns, NAME)["status"]["observed"]["adjustment"]
    assert adjustment["kind"] == "StepBack"
    poll(5 * c.operator.refresh)  # refreshes later: one step back, not a loop
    assert _deployment_patches(c, ns) == before + 1
    events = [e for e in c.events(ns) if e["reason"] == "StartupFailed"]
    assert len(events) == 1


def test_a_failed_start_is_ready_false(cluster: Cluster, tmp_path: Path) -> None:
    """Recommend mode: the failure is reported (Ready=False naming it), nothing is patched."""
    c = cluster
    ns = c.namespace("st-failrec")
    empty = write_cri_log(tmp_path / "now.log", [])
    prev = write_cri_log(tmp_path / "prev.log", [*POINT["raw_lines"][:4], FREE_MEMORY_ERROR])
    c.api.apply(cluster_logs(ns, ns, empty, containers=("vllm",), previous_logs_file=prev))
    c.api.apply(*_objects(ns, 0.95))
    pods = wait_for(lambda: _current_pods(c, ns), timeout=90, message="the pods Ready")
    _fail(c, ns, pods)
    ready = c.wait_condition(ns, NAME, "Ready", "False", "StartupFailedFreeMemoryCheck", timeout=60)
    assert "Free memory on device" in ready["message"]
    entry = _startup(c, ns)[0]
    assert entry["reason"] == "Failed" and entry["failure"] == "FreeMemoryCheck"
    assert entry["shortfallGib"] == pytest.approx(75.23 - 70.1)
    assert _deployment_patches(c, ns) == 0
