"""The operator end to end: real kubectl, the test API server, and `inference-capacity run`
(Kopf) as a subprocess. Each test works in its own namespace of one shared cluster."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
import yaml

from tests.operator_harness import Cluster, cluster, flag_value, load_example, poll
from tests.realk8s.fixtures import wait_for

__all__ = ["cluster"]

GMU = "--gpu-memory-utilization"
SEQS = "--max-num-seqs"


def apply_example(
    c: Cluster, ns: str, name: str = "llama-3.1-8b-h100.yaml", edit: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    icap, dep = load_example(name, ns)
    if edit:
        edit(icap, dep)
    c.api.apply(icap, dep)
    return icap, dep


def test_example_gets_flags_rollout_and_printer_columns(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("basic")
    apply_example(c, ns)
    args = c.wait_args(ns, "llama-8b", lambda a: GMU in a and SEQS in a)
    # everything else left as it was
    assert args[:4] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--port"]
    c.api.kubectl("wait", "--for=condition=Ready", "icap/llama-8b", "-n", ns, "--timeout=20s")
    st = c.icap(ns, "llama-8b")["status"]
    rec = st["recommendation"]
    assert flag_value(args, SEQS) == str(rec["maxNumSeqs"])
    assert float(flag_value(args, GMU) or 0) == pytest.approx(rec["gpuMemoryUtilization"])
    dep = c.deployment(ns, "llama-8b")
    assert dep["spec"]["replicas"] == rec["replicas"]
    assert dep["spec"]["strategy"]["rollingUpdate"] == {
        "maxSurge": rec["maxSurge"],
        "maxUnavailable": rec["maxUnavailable"],
    }
    # status: ledger sums to the device; observedGeneration; provenance
    rank = st["ledger"]["ranks"][0]
    assert sum(i["bytes"] for i in rank["items"]) == st["ledger"]["deviceBytes"]
    assert st["observedGeneration"] == c.icap(ns, "llama-8b")["metadata"]["generation"]
    assert set(rec["provenance"].values()) <= {"exact", "calibrated", "assumed"}
    # the PDB is owned by the InferenceCapacity
    pdb = c.api.get_json("pdb", "llama-8b", "-n", ns)
    assert pdb["spec"]["minAvailable"] == rec["pdbMinAvailable"]
    assert pdb["metadata"]["ownerReferences"][0]["kind"] == "InferenceCapacity"
    wide = c.api.kubectl("get", "icap", "-n", ns, "-o", "wide").stdout
    for col in ("MODEL", "GPU", "TP", "UTIL", "MAXSEQS", "KV-TOKENS", "REPLICAS", "READY", "AGE"):
        assert col in wide
    assert "H100-SXM-80GB" in wide and str(rec["maxNumSeqs"]) in wide
    # the first write to the Deployment is recorded in the status, not as an Event (an Event
    # per object per creation is a request per object for the API server)
    assert st["applied"]["flags"]["max-num-seqs"] == str(rec["maxNumSeqs"])
    reasons = {e["reason"] for e in c.events(ns)}
    assert "Applied" not in reasons and "PodDisruptionBudgetCreated" not in reasons, reasons


def test_material_edits_change_flags_and_noop_edits_do_not(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("edit")
    apply_example(c, ns)
    args = c.wait_args(ns, "llama-8b", lambda a: SEQS in a)
    seqs0 = int(flag_value(args, SEQS) or 0)
    # fp8 KV: half the bytes per token, so about twice the sequences, and the flag is set
    c.api.kubectl(
        "patch",
        "icap",
        "llama-8b",
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps(
            {"spec": {"model": {"kvCacheDtype": "fp8"}, "policy": {"setKvCacheDtype": True}}}
        ),
    )
    args = c.wait_args(ns, "llama-8b", lambda a: flag_value(a, "--kv-cache-dtype") == "fp8")
    seqs1 = int(flag_value(args, SEQS) or 0)
    assert seqs1 > 1.8 * seqs0
    # a bigger context: max-model-len follows (setMaxModelLen is on in the example)
    c.api.kubectl(
        "patch",
        "icap",
        "llama-8b",
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"workload": {"maxModelLen": 65536}}}),
    )
    c.wait_args(ns, "llama-8b", lambda a: flag_value(a, "--max-model-len") == "65536")
    wait_for(
        lambda: (
            c.condition(ns, "llama-8b", "Applied")
            and c.condition(ns, "llama-8b", "Applied")["status"] == "True"
        ),
        timeout=20,
    )  # type: ignore[index]
    # a non-material edit (maxReplicas 8 -> 9: the plan does not change): nothing patched
    gen = c.deployment(ns, "llama-8b")["metadata"]["generation"]
    rv = c.deployment(ns, "llama-8b")["metadata"]["resourceVersion"]
    c.api.kubectl(
        "patch",
        "icap",
        "llama-8b",
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"rollout": {"maxReplicas": 9}}}),
    )
    wait_for(
        lambda: (
            c.icap(ns, "llama-8b")["status"]["observedGeneration"]
            == c.icap(ns, "llama-8b")["metadata"]["generation"]
        ),
        timeout=20,
    )
    poll(2 * c.operator.refresh)
    dep = c.deployment(ns, "llama-8b")
    assert dep["metadata"]["generation"] == gen
    assert dep["metadata"]["resourceVersion"] == rv or dep["metadata"]["generation"] == gen


def test_more_tp_sets_the_flag_when_the_pod_has_the_gpus(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("tp")
    apply_example(c, ns)
    c.wait_args(ns, "llama-8b", lambda a: SEQS in a)
    c.api.kubectl(
        "patch",
        "icap",
        "llama-8b",
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"hardware": {"tensorParallel": 2}}}),
    )
    c.wait_condition(ns, "llama-8b", "Applied", "False", "InsufficientGpusPerPod")
    c.patch_container(
        ns, "llama-8b", {"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    )
    args = c.wait_args(ns, "llama-8b", lambda a: flag_value(a, "--tensor-parallel-size") == "2")
    c.wait_condition(ns, "llama-8b", "Applied", "True")  # the status follows the patch
    assert c.icap(ns, "llama-8b")["status"]["summary"]["tensorParallel"] == 2
    assert GMU in args


def test_hand_edit_is_put_back_in_enforce_mode(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("drift")
    apply_example(c, ns)
    args = c.wait_args(ns, "llama-8b", lambda a: SEQS in a)
    want = flag_value(args, SEQS)
    dep = c.deployment(ns, "llama-8b")
    cont = copy.deepcopy(dep["spec"]["template"]["spec"]["containers"][0])
    cont["args"] = [
        ("999" if (i > 0 and cont["args"][i - 1] == SEQS) else a)
        for i, a in enumerate(cont["args"])
    ]
    c.patch_container(ns, "llama-8b", {"name": "vllm", "args": cont["args"]})
    c.wait_args(ns, "llama-8b", lambda a: flag_value(a, SEQS) == want)


def test_recommend_mode_reports_and_never_writes(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("rec")

    def recommend(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        icap["spec"]["mode"] = "Recommend"

    apply_example(c, ns, edit=recommend)
    cond = c.wait_condition(ns, "llama-8b", "Applied", "False", "RecommendOnly")
    assert "would set" in cond["message"] and GMU in cond["message"]
    c.wait_condition(ns, "llama-8b", "Ready", "True")
    dep = c.deployment(ns, "llama-8b")
    assert dep["metadata"]["generation"] == 1
    assert GMU not in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "Recommendation" in {e["reason"] for e in c.events(ns)}


@pytest.mark.parametrize(
    "example,expect",
    [
        ("llama-3.1-70b-fp8-tp4.yaml", lambda a: "--gpu-memory-utilization" in " ".join(a)),
    ],
)
def test_args_only_form_with_equals(cluster: Cluster, example: str, expect: Any) -> None:
    c = cluster
    ns = c.namespace("eq")
    # two 4-GPU pods need two Nodes with 4 free GPUs each: a pool of their own, so a pod left
    # Pending by other tests' spread (a rollout the operator rightly waits for) cannot happen
    pool = c.node_pool(ns, [8, 8])

    def on_pool(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        dep["spec"]["template"]["spec"]["nodeSelector"] = {"pool": ns}

    try:
        apply_example(c, ns, example, on_pool)
        args = c.wait_args(ns, "llama-70b-fp8", lambda a: any(x.startswith(GMU) for x in a))
        assert "--tensor-parallel-size=4" in args  # untouched, same spelling
        assert any(x.startswith("--max-num-seqs") for x in args)
    finally:
        c.delete_node_pool(ns, pool)


def test_shell_form_is_rewritten_inside_the_string(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("sh")

    def enforce(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        icap["spec"]["mode"] = "Enforce"

    apply_example(c, ns, "deepseek-v2-lite-mla.yaml", edit=enforce)
    args = c.wait_args(ns, "deepseek-v2-lite", lambda a: GMU in " ".join(a))
    assert args[:2] == ["/bin/sh", "-c"] and len(args) == 3
    assert args[2].startswith("exec vllm serve deepseek-ai/DeepSeek-V2-Lite --trust-remote-code")


def _refusal(
    c: Cluster,
    edit: Any,
    reason: str,
    example: str = "llama-3.1-8b-h100.yaml",
    name: str = "llama-8b",
) -> dict[str, Any]:
    ns = c.namespace("refuse")
    apply_example(c, ns, example, edit=edit)
    cond = c.wait_condition(ns, name, "Applied", "False", reason)
    dep = c.deployment(ns, name)
    assert dep["metadata"]["generation"] == 1, "a refused plan must not patch"
    assert reason in {e["reason"] for e in c.events(ns)}
    return cond


def test_refuses_a_model_that_does_not_fit(cluster: Cluster) -> None:
    def big(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        icap["spec"]["model"]["name"] = "meta-llama/Llama-3.1-70B-Instruct"

    cond = _refusal(cluster, big, "NotFits")
    assert "No available memory for the cache blocks" in cond["message"]


def test_refuses_max_model_len_larger_than_kv(cluster: Cluster) -> None:
    def long_ctx(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        icap["spec"]["hardware"]["gpu"] = "L4"
        icap["spec"]["workload"]["maxModelLen"] = 131072

    cond = _refusal(cluster, long_ctx, "NotFits")
    assert "max seq len (131072)" in cond["message"]


def test_refuses_a_flag_the_ledger_does_not_model(cluster: Cluster) -> None:
    def made_up(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        dep["spec"]["template"]["spec"]["containers"][0]["args"] += [
            "--hypothetical-cache-size",
            "5",
        ]

    cond = _refusal(cluster, made_up, "UnsupportedFlag")
    assert "--hypothetical-cache-size" in cond["message"]
    ns = f"refuse-{cluster._n}"
    supported = cluster.condition(ns, "llama-8b", "Supported")
    assert supported is not None and supported["status"] == "False"
    assert "--hypothetical-cache-size" in supported["message"]


def test_kv_cache_memory_bytes_is_replaced_not_kept_beside(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("kvbytes")

    def kv_bytes(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        icap["spec"]["rollout"]["maxReplicas"] = 20  # the smaller pool needs more replicas
        dep["spec"]["template"]["spec"]["containers"][0]["args"] += [
            "--kv-cache-memory-bytes",
            "20000000000",
        ]

    apply_example(c, ns, edit=kv_bytes)
    args = c.wait_args(ns, "llama-8b", lambda a: GMU in a)
    assert "--kv-cache-memory-bytes" not in args
    c.wait_condition(ns, "llama-8b", "Applied", "True")  # the status follows the patch
    st = c.icap(ns, "llama-8b")["status"]
    # the pool the Deployment asked for (20e9 B = 9,536 blocks of 2 MiB) is what was planned
    assert st["vllmStartup"]["numGpuBlocks"] == 20_000_000_000 // (2 * 2**20)


def test_refuses_an_unknown_model(cluster: Cluster) -> None:
    def unknown(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        icap["spec"]["model"]["name"] = "not-a-model"

    cond = _refusal(cluster, unknown, "UnknownModel")
    assert "spec.model" in cond["message"] and "not-a-model" in cond["message"]


def test_refuses_a_missing_target(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("missing")
    icap, _ = load_example("llama-3.1-8b-h100.yaml", ns)
    c.api.apply(icap)
    cond = c.wait_condition(ns, "llama-8b", "Ready", "False", "TargetNotFound")
    assert "spec.targetRef.name" in cond["message"]


def test_refuses_a_target_without_vllm(cluster: Cluster) -> None:
    def no_vllm(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        icap["spec"]["targetRef"].pop("container")
        dep["spec"]["template"]["spec"]["containers"][0] = {
            "name": "web",
            "image": "nginx:1.27",
            "args": ["--port", "80"],
        }

    cond = _refusal(cluster, no_vllm, "NoVllmContainer")
    assert "spec.targetRef.container" in cond["message"]


def test_refuses_when_no_safe_rollout_exists(cluster: Cluster) -> None:
    def no_headroom(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        icap["spec"]["headroom"]["recoveryReplicas"] = 0
        # no spare GPUs for its pods: the nodeSelector matches no Node of the cluster (the
        # scheduler could not place a surge pod either)
        dep["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "no-such-pool"}

    cond = _refusal(cluster, no_headroom, "NoSafeRollout")
    assert "deadlock or drop below peak" in cond["message"]
    c = cluster
    ns = [
        n
        for n in [f"refuse-{i}" for i in range(1, 50)]
        if c.api.kubectl("get", "icap", "llama-8b", "-n", n, check=False).returncode == 0
    ][-1]
    rs = c.condition(ns, "llama-8b", "RolloutSafe")
    assert rs is not None and rs["status"] == "False"


def test_crd_schema_rejects_bad_specs_naming_the_field(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("schema")
    icap, _ = load_example("llama-3.1-8b-h100.yaml", ns)
    bad = copy.deepcopy(icap)
    bad["spec"]["hardware"]["tensorParallel"] = 0
    r = c.api.apply(bad, check=False)
    assert r.returncode != 0 and "spec.hardware.tensorParallel" in r.stderr
    bad = copy.deepcopy(icap)
    bad["spec"]["mode"] = "Sometimes"
    r = c.api.apply(bad, check=False)
    assert r.returncode != 0 and "spec.mode" in r.stderr
    bad = copy.deepcopy(icap)
    bad["spec"]["workload"]["cohorts"][0]["promptTokens"] = {"p50": 5000, "p95": 10, "p99": 10}
    r = c.api.apply(bad, check=False)
    assert r.returncode != 0 and "spec.workload.cohorts[0].promptTokens" in r.stderr


def test_kubectl_explain_reads_the_served_schema(cluster: Cluster) -> None:
    """The real apiserver publishes the CRD's OpenAPI schema; kubectl explain reads it."""
    out = cluster.api.kubectl("explain", "inferencecapacity.spec.hardware.tensorParallel").stdout
    assert "FIELD: tensorParallel <integer>" in out
    assert "capacity.inference.dev" in out


def test_deleting_leaves_the_deployment_and_removes_the_pdb(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("del")
    apply_example(c, ns)
    args = c.wait_args(ns, "llama-8b", lambda a: SEQS in a)
    wait_for(
        lambda: c.api.kubectl("get", "pdb", "llama-8b", "-n", ns, check=False).returncode == 0,
        timeout=60,
    )
    c.api.kubectl("delete", "icap", "llama-8b", "-n", ns, "--wait=true", "--timeout=60s")
    wait_for(
        lambda: c.api.kubectl("get", "pdb", "llama-8b", "-n", ns, check=False).returncode != 0,
        timeout=60,
        message="PDB garbage-collected",
    )
    c2 = c.container(ns, "llama-8b")
    assert [*(c2.get("command") or []), *c2["args"]] == args


def test_operator_restart_causes_no_new_patch(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("restart")
    # no pods scheduled: the spare GPUs (and so maxSurge) do not move while other tests run
    apply_example(c, ns, edit=_no_nodes)
    c.wait_args(ns, "llama-8b", lambda a: SEQS in a)
    # converged first: a reconcile found nothing left to change
    c.wait_condition(ns, "llama-8b", "Applied", "True", "UpToDate", timeout=60)
    # settled too: on a real cluster the Deployment controller's status updates make the
    # operator's first patch retry (409) and later reconciles may still adjust the strategy
    _settle(c, ns, "llama-8b", 3 * c.operator.refresh)
    before = c.deployment(ns, "llama-8b")["metadata"]
    c.operator.kill()
    c.operator.start()
    poll(3 * c.operator.refresh + 2)
    c.operator.assert_alive()
    after = c.deployment(ns, "llama-8b")["metadata"]
    assert after["generation"] == before["generation"], (
        [e.get("message") for e in c.events(ns)],
        before.get("annotations"),
        after.get("annotations"),
    )
    assert (
        after["annotations"]["capacity.inference.dev/applied"]
        == before["annotations"]["capacity.inference.dev/applied"]
    )


def test_example_manifests_apply_cleanly(cluster: Cluster) -> None:
    ns = cluster.namespace("yaml")
    for name in (
        "llama-3.1-8b-h100.yaml",
        "llama-3.1-70b-fp8-tp4.yaml",
        "deepseek-v2-lite-mla.yaml",
    ):
        docs = load_example(name, ns)
        cluster.api.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs))


A100 = "NVIDIA-A100-SXM4-80GB"


def _settle(c: Cluster, ns: str, name: str, quiet: float, timeout: float = 60) -> None:
    """Wait until the Deployment's generation has not moved for ``quiet`` seconds."""
    end = time.monotonic() + timeout
    gen, since = c.deployment(ns, name)["metadata"]["generation"], time.monotonic()
    while time.monotonic() < end:
        poll(0.5)
        now = c.deployment(ns, name)["metadata"]["generation"]
        if now != gen:
            gen, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
    raise AssertionError(f"{ns}/{name} kept changing for {timeout} s")


def _no_nodes(icap: dict[str, Any], dep: dict[str, Any]) -> None:
    dep["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "no-such-pool"}


def _node(name: str, gpus: int, product: str = "NVIDIA-H100-80GB-HBM3") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_max_surge_comes_from_spare_gpus_on_matching_nodes(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("surge")
    # two A100 nodes with 8 GPUs, one busy pod using 5 of them; an H100 node does not count
    # (nor do the session cluster's H100 kwok nodes). These nodes have no kubelet (nor kwok): their
    # status is what the test writes, and with no "pods" allocatable nothing else lands on them.
    nodes = [
        _node("gpu-a", 8, product=A100),
        _node("gpu-b", 8, product=A100),
        _node("gpu-c", 8),
    ]
    c.api.apply(*nodes)
    for n in nodes:  # status is a subresource: the kubelet writes it, as here
        c.api.kubectl(
            "patch",
            "node",
            n["metadata"]["name"],
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": n["status"]}),
        )
    c.api.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "busy", "namespace": ns},
            "spec": {
                "nodeName": "gpu-a",
                "containers": [
                    {
                        "name": "x",
                        "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": "5"}},
                    }
                ],
            },
        }
    )
    c.api.kubectl(
        "patch",
        "pod",
        "busy",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"phase": "Running"}}),
    )

    def zero_recovery(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        icap["spec"]["headroom"]["recoveryReplicas"] = 0
        icap["spec"]["hardware"]["gpu"] = "A100-SXM-80GB"

    apply_example(c, ns, edit=zero_recovery)
    cond = c.wait_condition(ns, "llama-8b", "RolloutSafe", "True")
    rec = c.icap(ns, "llama-8b")["status"]["recommendation"]
    # spare A100 GPUs: (8 - 5) + 8 = 11, one GPU per replica -> maxSurge = min(11, N)
    assert rec["maxUnavailable"] == 0
    assert rec["maxSurge"] == min(11, rec["replicas"])
    assert "11 spare nvidia.com/gpu" in cond["message"]
    # no kubelet will confirm the busy pod's deletion: force it, or it waits for the pod GC
    c.api.kubectl("delete", "pod", "busy", "-n", ns, "--force", "--grace-period=0")
    for n in ("gpu-a", "gpu-b", "gpu-c"):
        c.api.kubectl("delete", "node", n)


def test_an_hpa_owns_replicas(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("hpa")
    c.api.apply(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "llama-8b", "namespace": ns},
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "llama-8b",
                },
                "minReplicas": 7,
                "maxReplicas": 20,
            },
        }
    )
    apply_example(c, ns)
    c.wait_args(ns, "llama-8b", lambda a: SEQS in a)
    dep = c.deployment(ns, "llama-8b")
    assert dep["spec"]["replicas"] == 1, "replicas belong to the HPA"
    # the status is written after the Deployment's patch: wait for it, not only for the args
    c.wait_condition(ns, "llama-8b", "Applied", "True")
    rec = c.icap(ns, "llama-8b")["status"]["recommendation"]
    assert rec["replicas"] >= 7  # at least the HPA's minReplicas


def test_health_and_metrics_endpoints(cluster: Cluster) -> None:
    import urllib.request

    c = cluster
    ns = c.namespace("metrics")
    apply_example(c, ns)
    args = c.wait_args(ns, "llama-8b", lambda a: SEQS in a)

    def get(port: int, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            body: str = r.read().decode()
            return body

    wait_for(lambda: get(c.operator.health_port, "/healthz") is not None, timeout=20)
    text = get(c.operator.metrics_port, "/metrics")
    line = next(
        x
        for x in text.splitlines()
        if x.startswith("inference_capacity_per_pod_max_concurrency{") and f'namespace="{ns}"' in x
    )
    assert float(line.rsplit(" ", 1)[1]) == float(flag_value(args, SEQS) or 0)
    assert f'inference_capacity_desired_replicas{{name="llama-8b",namespace="{ns}"}}' in text
    assert "inference_capacity_reconciles_total" in text
    assert 'item="kv_cache_pool"' in text
