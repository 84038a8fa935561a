"""Issue 13 end to end: one careless or hostile InferenceCapacity neither stops the operator for
everyone nor fights another, hijacks a PDB, sends a Secret anywhere, or storms rollouts. The real
operator (Kopf subprocess) and real kubectl, through the harness's public surface only; each test
in its own namespace."""

from __future__ import annotations

import contextlib
import http.server
import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from inference_capacity.controller.refresher import REFRESHED
from inference_capacity.settings import Settings
from tests.operator_harness import Cluster, Operator, cluster, flag_value, load_example
from tests.promfixtures import SlowServer
from tests.realk8s.fixtures import wait_for

__all__ = ["cluster"]

GMU = "--gpu-memory-utilization"
SEQS = "--max-num-seqs"
EXAMPLE = "llama-3.1-8b-h100.yaml"


def example_docs(ns: str, edit: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    icap, dep = load_example(EXAMPLE, ns)
    # no pods scheduled: spare GPUs (and so maxSurge) stay put while other tests' pods come and go
    dep["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "no-such-pool"}
    if edit:
        edit(icap, dep)
    return icap, dep


def apply_example(c: Cluster, ns: str, edit: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    icap, dep = example_docs(ns, edit)
    c.api.apply(icap, dep)
    return icap, dep


def _replicasets(c: Cluster, ns: str) -> int:
    """ReplicaSets in the namespace: one per pod template the Deployment has had (read once the
    deployment controller has seen the Deployment's latest spec)."""

    def observed() -> bool:
        d = c.deployment(ns, "llama-8b")
        return bool(
            (d.get("status") or {}).get("observedGeneration") == d["metadata"]["generation"]
        )

    wait_for(observed, timeout=30, interval=0.2, message="the deployment controller")
    return len(c.api.get_json("replicasets", "-n", ns)["items"])


def pdb_or_none(c: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    r = c.api.kubectl("get", "pdb", name, "-n", ns, "-o", "json", check=False)
    if r.returncode != 0:
        assert "NotFound" in r.stderr or "not found" in r.stderr, r.stderr
        return None
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def merge(c: Cluster, ns: str, name: str, patch: dict[str, Any]) -> None:
    c.patch_icap(ns, name, patch)


def reasons(c: Cluster, ns: str) -> set[str]:
    return {e["reason"] for e in c.events(ns)}


def settle(c: Cluster, ns: str, name: str, seconds: float = 5.0) -> None:
    """Give the operator several refresh periods (the harness refreshes every 2 s)."""
    time.sleep(seconds)
    c.operator.assert_alive()


# --- item 2: PDBs ------------------------------------------------------------------------------


def test_recommend_mode_writes_no_pdb(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("rec-pdb")
    apply_example(c, ns, lambda i, d: i["spec"].update(mode="Recommend"))
    c.wait_condition(ns, "llama-8b", "Applied", "False", "RecommendOnly")
    settle(c, ns, "llama-8b")
    # the review: minAvailable 4 on a 1-replica Deployment, written in Recommend mode
    assert pdb_or_none(c, ns, "llama-8b") is None
    dep = c.deployment(ns, "llama-8b")
    assert dep["metadata"]["generation"] == 1 and dep["spec"]["replicas"] == 1
    assert not [r for r in reasons(c, ns) if r.startswith("PodDisruptionBudget")]


def test_unmanaged_replicas_get_no_pdb(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("norep-pdb")
    apply_example(c, ns, lambda i, d: i["spec"]["rollout"].update(manageReplicas=False))
    c.wait_args(ns, "llama-8b", lambda a: SEQS in a)  # flags are still managed
    c.wait_condition(ns, "llama-8b", "Ready", "True")
    settle(c, ns, "llama-8b")
    assert pdb_or_none(c, ns, "llama-8b") is None
    assert c.deployment(ns, "llama-8b")["spec"]["replicas"] == 1


def test_a_preexisting_pdb_is_never_taken_over(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("foreign-pdb")
    foreign = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "llama-8b", "namespace": ns},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "database"}}},
    }
    c.api.apply(foreign)
    apply_example(c, ns)
    cond = c.wait_condition(ns, "llama-8b", "Ready", "False", "PodDisruptionBudgetConflict")
    assert "poddisruptionbudget/llama-8b" in cond["message"]
    settle(c, ns, "llama-8b")
    pdb = pdb_or_none(c, ns, "llama-8b")
    assert pdb is not None
    assert pdb["spec"]["selector"] == {"matchLabels": {"app": "database"}}
    assert pdb["spec"]["minAvailable"] == 1
    assert not pdb["metadata"].get("ownerReferences")
    assert c.deployment(ns, "llama-8b")["metadata"]["generation"] == 1  # nothing applied
    assert "PodDisruptionBudgetConflict" in reasons(c, ns)


def test_pdb_min_available_leaves_a_disruption_to_the_replicas_the_deployment_has(
    cluster: Cluster,
) -> None:
    c = cluster
    ns = c.namespace("pdb-real")
    apply_example(c, ns)
    c.wait_condition(ns, "llama-8b", "Ready", "True")
    dep = c.deployment(ns, "llama-8b")
    pdb = pdb_or_none(c, ns, "llama-8b")
    assert pdb is not None
    assert pdb["metadata"]["ownerReferences"][0]["kind"] == "InferenceCapacity"
    assert 0 <= pdb["spec"]["minAvailable"] < dep["spec"]["replicas"]


# --- item 2: two InferenceCapacities, one Deployment ------------------------------------------


def test_two_capacities_on_one_deployment_do_not_fight(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("fight")
    first, dep = apply_example(c, ns)
    c.wait_args(ns, "llama-8b", lambda a: SEQS in a)
    c.wait_condition(ns, "llama-8b", "Ready", "True")
    time.sleep(1.1)  # a later creationTimestamp (second resolution)
    second, _ = load_example(EXAMPLE, ns)
    second["metadata"]["name"] = "llama-8b-rival"
    second["spec"]["model"]["kvCacheDtype"] = "fp8"  # a different plan: a fight if both wrote
    second["spec"]["workload"]["peakConcurrency"] = 900
    c.api.apply(second)
    cond = c.wait_condition(ns, "llama-8b-rival", "Ready", "False", "TargetConflict")
    assert f"{ns}/llama-8b" in cond["message"]
    gen = c.deployment(ns, "llama-8b")["metadata"]["generation"]
    settle(c, ns, "llama-8b", 8.0)  # the review: 13 patches in 60 s
    dep_now = c.deployment(ns, "llama-8b")
    assert dep_now["metadata"]["generation"] == gen
    args = [*dep_now["spec"]["template"]["spec"]["containers"][0]["args"]]
    assert flag_value(args, "--kv-cache-dtype") is None
    assert c.condition(ns, "llama-8b", "Ready")["status"] == "True"  # type: ignore[index]
    assert pdb_or_none(c, ns, "llama-8b-rival") is None
    # the owner goes: the other takes over (refresh timer)
    c.api.kubectl("delete", "icap", "llama-8b", "-n", ns, "--wait=true")
    c.wait_condition(ns, "llama-8b-rival", "Ready", "True", timeout=30)


# --- item 5: fail closed, bounded cost --------------------------------------------------------


def test_hostile_layer_count_is_refused_and_others_keep_working(cluster: Cluster) -> None:
    from inference_capacity.model import load_config

    c = cluster
    ns = c.namespace("hostile")
    _, cfg = load_config("meta-llama/Llama-3.1-8B-Instruct")
    cfg = {**cfg, "num_hidden_layers": 300_000}
    apply_example(c, ns, lambda i, d: i["spec"].update(model={"config": cfg}))
    cond = c.wait_condition(ns, "llama-8b", "Ready", "False", "InvalidModelConfig")
    assert "num_hidden_layers" in cond["message"] and "1024" in cond["message"]
    assert c.deployment(ns, "llama-8b")["metadata"]["generation"] == 1
    # an unrelated resource is still served promptly
    other = c.namespace("bystander")
    t = time.monotonic()
    apply_example(c, other)
    c.wait_args(other, "llama-8b", lambda a: SEQS in a)
    assert time.monotonic() - t < 15
    c.operator.assert_alive()


def test_a_large_inline_config_is_handled_and_kopf_state_stays_under_the_annotation_limit(
    cluster: Cluster,
) -> None:
    """The review's "a failing metadata patch is retried with nothing logged": Kopf's copy of a
    300 KiB inline config in its last-handled annotation exceeded the API server's 256 KiB for all
    annotations, so Kopf's own patch failed with 422 after every handling and the creation was
    re-run forever. Applied server-side (client-side ``kubectl apply`` refuses such an object
    itself, for its own last-applied annotation)."""
    from inference_capacity.controller.diffbase import STANZA_BUDGET_BYTES
    from inference_capacity.model import load_config

    c = cluster
    ns = c.namespace("bigconfig")
    _, cfg = load_config("meta-llama/Llama-3.1-8B-Instruct")
    # real configs carry long quantization ignore lists (~200 KiB); the ledger ignores this key
    pad = [f"model.layers.{i}.mlp.gate_proj.weight_scale_padding" for i in range(6000)]
    cfg = {**cfg, "padding_for_size": pad}
    assert len(json.dumps(cfg)) > 300 * 1024
    icap, dep = load_example(EXAMPLE, ns)
    dep["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "no-such-pool"}
    icap["spec"]["model"] = {"config": cfg}
    c.api.apply(dep)
    c.api.apply(icap, extra=("--server-side",))
    c.wait_args(ns, "llama-8b", lambda a: SEQS in a)

    def last_handled() -> str:
        return str(
            ((c.icap(ns, "llama-8b").get("status") or {}).get("kopf") or {}).get("lastHandled")
            or ""
        )

    # Kopf stores it (in the status) with the status of the handling that patched the Deployment
    wait_for(
        lambda: last_handled() != "",
        timeout=30,
        interval=0.5,
        message="Kopf's last-handled state stored (on the old storage: never, a 422 each time)",
    )
    # the config is kept as its digest: Kopf's copy stays small whatever the config's size
    assert len(last_handled()) < 2 * STANZA_BUDGET_BYTES
    annotations = c.icap(ns, "llama-8b")["metadata"].get("annotations") or {}
    assert sum(len(k) + len(v) for k, v in annotations.items()) < 256 * 1024
    fits = c.wait_condition(ns, "llama-8b", "Fits", "True", "Fits")["message"]
    # an edit inside the digested config is still seen: half the KV heads, another pool
    merge(c, ns, "llama-8b", {"spec": {"model": {"config": {"num_key_value_heads": 4}}}})

    def replanned() -> bool:
        cond = c.condition(ns, "llama-8b", "Fits")
        return cond is not None and cond["message"] != fits

    wait_for(replanned, timeout=60, interval=0.5, message="a re-plan after the config edit")
    log = [ln for ln in c.operator.log().splitlines() if f"[{ns}/" in ln]
    assert not [ln for ln in log if "Too long" in ln or "422" in ln], log[-5:]
    c.operator.assert_alive()


def test_deep_config_json_in_a_configmap_is_a_condition(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("deepjson")
    c.api.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": ns},
            "data": {"config.json": "[" * 100_000 + "]" * 100_000},
        }
    )
    apply_example(c, ns, lambda i, d: i["spec"].update(model={"configMapRef": {"name": "cfg"}}))
    cond = c.wait_condition(ns, "llama-8b", "Ready", "False", "InvalidModelConfig")
    assert "spec.model.configMapRef" in cond["message"]
    assert "InvalidModelConfig" in reasons(c, ns)  # an Event, not only a log line
    c.operator.assert_alive()


def test_engine_version_that_was_never_released_is_refused(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("ver")
    apply_example(c, ns, lambda i, d: i["spec"]["engine"].update(version="0.0.1"))
    cond = c.wait_condition(ns, "llama-8b", "Ready", "False", "UnsupportedEngineVersion")
    assert cond["message"].startswith("spec.engine.version")
    assert c.deployment(ns, "llama-8b")["metadata"]["generation"] == 1


def test_absurd_sizes_name_the_field_written(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("absurd")
    apply_example(c, ns, lambda i, d: i["spec"]["engine"].update(maxNumBatchedTokens=10**12))
    cond = c.wait_condition(ns, "llama-8b", "Ready", "False", "InvalidSpec")
    # the review: "gpu_memory_utilization ... got -14219" for maxNumBatchedTokens 1e12
    assert cond["message"].startswith("spec.engine.maxNumBatchedTokens")
    assert "gpu_memory_utilization" not in cond["message"]
    ns2 = c.namespace("absurd-gpu")
    apply_example(c, ns2, lambda i, d: i["spec"]["hardware"].update(gpuMemoryGiB=1e12))
    cond = c.wait_condition(ns2, "llama-8b", "Ready", "False", "InvalidSpec")
    assert cond["message"].startswith("spec.hardware.gpuMemoryGiB")
    assert c.deployment(ns2, "llama-8b")["metadata"]["generation"] == 1


def test_max_model_len_32k_is_read_as_vllm_reads_it(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("k32")

    def edit(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        icap["spec"]["workload"].pop("maxModelLen")
        icap["spec"]["policy"]["setMaxModelLen"] = False
        dep["spec"]["template"]["spec"]["containers"][0]["args"] = [
            "--port",
            "8000",
            "--max-model-len",
            "32k",
        ]

    apply_example(c, ns, edit)
    args = c.wait_args(ns, "llama-8b", lambda a: SEQS in a)
    # the review: read as unset and rewritten to 131072
    assert flag_value(args, "--max-model-len") == "32k"
    c.wait_condition(ns, "llama-8b", "Ready", "True")
    assert c.icap(ns, "llama-8b")["status"]["recommendation"]["maxModelLen"] == 32_000


# --- item 3: egress and Secrets ---------------------------------------------------------------


def test_prometheus_outside_the_allowed_prefixes_is_refused(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("egress")
    url = "http://169.254.169.254/latest/meta-data"
    apply_example(c, ns, lambda i, d: i["spec"]["workload"].update(fromPrometheus={"url": url}))
    cond = c.wait_condition(ns, "llama-8b", "Observed", "False", "PrometheusNotAllowed")
    assert "nothing was sent" in cond["message"]
    c.wait_condition(ns, "llama-8b", "Ready", "True")  # sized from the spec


def test_a_token_secret_without_the_opt_in_label_is_not_sent(
    cluster: Cluster, http_stub: Any
) -> None:
    import base64

    c = cluster
    ns = c.namespace("token")
    url = http_stub(200, b'{"status":"success","data":{"resultType":"vector","result":[]}}')
    c.api.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db-password", "namespace": ns},
            "data": {"token": base64.b64encode(b"hunter2").decode()},
        }
    )
    apply_example(
        c,
        ns,
        lambda i, d: i["spec"]["workload"].update(
            fromPrometheus={"url": url, "bearerTokenSecretRef": {"name": "db-password"}}
        ),
    )
    cond = c.wait_condition(ns, "llama-8b", "Observed", "False", "TokenSecretNotAllowed")
    assert "capacity.inference.dev/prometheus-token" in cond["message"]
    assert "hunter2" not in json.dumps(c.icap(ns, "llama-8b"))


# --- item 4: no storms ------------------------------------------------------------------------


def test_stabilization_window_holds_and_coalesces_rapid_edits(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("storm")
    apply_example(c, ns, lambda i, d: i["spec"]["policy"].update(stabilizationWindowSeconds=600))
    args = c.wait_args(ns, "llama-8b", lambda a: SEQS in a)
    first = flag_value(args, SEQS)
    rs_before = _replicasets(c, ns)
    # flapping edits (the review: 30 edits in 10 s gave 26 pod-template changes)
    for i in range(10):
        merge(c, ns, "llama-8b", {"spec": {"model": {"kvCacheDtype": "fp8" if i % 2 else "auto"}}})
    merge(c, ns, "llama-8b", {"spec": {"model": {"kvCacheDtype": "fp8"}}})
    cond = c.wait_condition(ns, "llama-8b", "Applied", "False", "StabilizationWindow")
    assert "stabilization window" in cond["message"]
    settle(c, ns, "llama-8b", 6.0)
    dep = c.deployment(ns, "llama-8b")
    template_args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert flag_value(template_args, SEQS) == first  # no second pod-template change
    # no new ReplicaSet: the real deployment controller makes one per pod template (the
    # generation also moves with replicas and strategy, which the window does not hold back)
    assert _replicasets(c, ns) == rs_before
    # the window ends (shortened here): one patch of the last desired state
    merge(c, ns, "llama-8b", {"spec": {"policy": {"stabilizationWindowSeconds": 1}}})
    args = c.wait_args(ns, "llama-8b", lambda a: flag_value(a, SEQS) != first, timeout=30)
    assert int(flag_value(args, SEQS) or 0) > int(first or 0)  # fp8: more sequences


def test_safety_lowering_changes_are_not_held(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("lower")
    apply_example(c, ns, lambda i, d: i["spec"]["policy"].update(stabilizationWindowSeconds=600))
    args = c.wait_args(ns, "llama-8b", lambda a: GMU in a)
    gmu = float(flag_value(args, GMU) or 0)
    # a hand edit raising utilization over-commits the device: lowered at once, window or not
    c.patch_container(
        ns,
        "llama-8b",
        {"name": "vllm", "args": [a if a != str(gmu) else "0.99" for a in args[3:]]},
    )
    args = c.wait_args(ns, "llama-8b", lambda a: flag_value(a, GMU) == str(gmu), timeout=20)
    assert float(flag_value(args, GMU) or 0) == gmu


# --- item 1: no blocking I/O in the shared workers --------------------------------------------


class Slow(http.server.BaseHTTPRequestHandler):
    """A Prometheus that answers every query after 9 s (the review's slow Prometheus)."""

    def do_GET(self) -> None:  # noqa: N802
        time.sleep(9)
        body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
        try:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass

    def log_message(self, *_: Any) -> None:
        pass


@contextlib.contextmanager
def slow_prometheus() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def apply_slow_resources(c: Cluster, ns: str, url: str, count: int = 8) -> None:
    """``count`` resources on the Prometheus at ``url``, in one apply: created at once, so their
    first queries overlap (one kubectl apply each took longer than a query on a busy machine)."""
    docs: list[dict[str, Any]] = []
    for k in range(count):

        def edit(icap: dict[str, Any], dep: dict[str, Any], k: int = k) -> None:
            for d in (icap, dep):
                d["metadata"]["name"] = f"slow-{k}"
            icap["spec"]["targetRef"]["name"] = f"slow-{k}"
            icap["spec"]["workload"]["fromPrometheus"] = {"url": url}

        docs += example_docs(ns, edit)
    c.api.apply(*docs)


def test_slow_prometheus_does_not_delay_unrelated_edits(cluster: Cluster) -> None:
    c = cluster
    with slow_prometheus() as url:
        slow_ns = c.namespace("slowprom")
        apply_slow_resources(c, slow_ns, url)  # the review: 8 resources, a 9-second Prometheus
        time.sleep(2)  # their reconciles (and queries) are under way
        ns = c.namespace("unrelated")
        apply_example(c, ns)
        args = c.wait_args(ns, "llama-8b", lambda a: SEQS in a)
        seqs = flag_value(args, SEQS)
        t = time.monotonic()
        merge(c, ns, "llama-8b", {"spec": {"model": {"kvCacheDtype": "fp8"}}})
        c.wait_args(ns, "llama-8b", lambda a: flag_value(a, SEQS) != seqs, timeout=90)
        took = time.monotonic() - t
        # was 21.8 s (blocking queries held every worker); the bound lives in the benchmarks:
        # a busy CI machine measures its own load, not the operator
        print(f"slow prometheus: unrelated edit patched in {took:.2f} s")
        c.operator.assert_alive()


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads")


def test_many_slow_prometheus_servers_are_queried_at_once_without_a_thread_each(
    cluster: Cluster, slow_stub: Callable[..., SlowServer]
) -> None:
    """24 resources on a 9-second Prometheus, six times the old pool of 4 query threads: all
    their observations are at the server at once (the old pool: 4 queries at a time, one per
    thread), the operator's threads do not grow with them, and an unrelated edit is patched."""
    c = cluster
    assert c.operator.proc is not None
    pid = c.operator.proc.pid
    srv = slow_stub(9.0)
    # the operator's pools (Kopf's workers, the observation pool) start on first use: one
    # resource reconciled and one slow query under way before the count is read
    warm = c.namespace("manyslow-warm")
    apply_slow_resources(c, warm, srv.url, count=1)
    wait_for(lambda: srv.open >= 1, timeout=90, interval=0.1, message="a first slow query")
    before = _threads(pid)
    ns = c.namespace("manyslow")
    apply_slow_resources(c, ns, srv.url, count=24)
    # generous (inside the test's 300 s): 24 creations, applied at once, reconciled on a busy
    # machine; what is asserted is that they are all at the server at once
    wait_for(lambda: srv.open >= 24, timeout=150, interval=0.1, message="24 queries at once")
    during = _threads(pid)
    print(f"many slow: {srv.open} queries open at once; operator threads {before} -> {during}")
    # Kopf's handler pool (settings.workers, 16) starts its threads on demand and may grow to
    # its size while the 24 reconciles wait their 0.5 s each: run first (this test alone), only
    # the warm-up's one thread had started, and 10 -> 25 was measured. A thread per observation
    # would add 24 on top of that; nothing may start one
    workers = Settings().workers  # the harness's operator runs with the default
    assert during - before <= workers, f"operator threads {before} -> {during}"
    other = c.namespace("manyslow-other")
    apply_example(c, other)
    args = c.wait_args(other, "llama-8b", lambda a: SEQS in a)
    seqs = flag_value(args, SEQS)
    t = time.monotonic()
    merge(c, other, "llama-8b", {"spec": {"model": {"kvCacheDtype": "fp8"}}})
    c.wait_args(other, "llama-8b", lambda a: flag_value(a, SEQS) != seqs, timeout=90)
    in_flight = srv.open
    took = time.monotonic() - t
    print(f"many slow: unrelated edit patched in {took:.2f} s, {in_flight} queries still open")
    # behaviour, not a wall-clock bound: the edit was handled while the slow queries were
    # still at the server (each resource re-queries every 2 s; a worker held by a query would
    # leave the edit behind them)
    assert in_flight >= 1, "the edit waited until no slow query was in flight"
    assert srv.peak >= 24
    c.operator.assert_alive()
    # 24 resources refreshing every 2 s against a 9-second server: not for the next tests
    c.api.delete_namespaces([ns, warm], wait=True, timeout=180)


def test_sigterm_under_load_stops_within_the_exit_timeout(cluster: Cluster, tmp_path: Path) -> None:
    """A second operator, scoped to one namespace of slow-Prometheus resources, gets SIGTERM:
    it is gone within its exit timeout (the chart sets it 10 s inside the grace period; the
    review saw SIGTERM ignored for over 2 minutes)."""
    c = cluster
    ns = c.namespace("sigterm")
    op = Operator(
        c.api,
        tmp_path / "op.log",
        extra_env={"INFERENCE_CAPACITY_EXIT_TIMEOUT_SECONDS": "5"},
        run_args=("--standalone", "--namespace", ns),
    ).start()
    try:
        with slow_prometheus() as url:
            apply_slow_resources(c, ns, url)
            time.sleep(6)  # every resource reconciled at least once, queries in flight
            assert op.proc is not None and op.proc.poll() is None, op.log()[-2000:]
            t = time.monotonic()
            op.proc.send_signal(signal.SIGTERM)
            try:
                op.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            took = time.monotonic() - t
            assert op.proc.poll() is not None and took < 10, f"still running after {took:.0f} s"
    finally:
        op.kill()
        op.stop()


# --- the load test ----------------------------------------------------------------------------


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_load_200_resources_one_hostile_eight_slow(cluster: Cluster) -> None:
    """200 InferenceCapacities: one hostile (300,000 layers), eight with a 9-second Prometheus.
    The operator stays small and an unrelated edit is still patched promptly (the review: 689 MB
    RSS and an OOM-kill crash loop for the hostile one; 21.8 s for an edit behind the slow ones)."""
    from inference_capacity.model import load_config

    c = cluster
    # the module's operator refreshes every resource every 2 s (production: 60 s): 100 reconciles
    # a second against a real apiserver on the same 2 cores would measure the refresh, not the
    # operator; this test runs its own with the chart's refresh
    module_operator = c.operator
    module_operator.stop()
    c.operator = Operator(c.api, module_operator.log_path.with_name("load.log"), refresh=60).start()
    try:
        _load_test(c, load_config)
    finally:
        c.operator.stop()
        c.operator = module_operator.start()


def _load_test(c: Cluster, load_config: Any) -> None:
    assert c.operator.proc is not None
    ns = c.namespace("load")
    _, cfg = load_config("meta-llama/Llama-3.1-8B-Instruct")
    hostile = {**cfg, "num_hidden_layers": 300_000}
    with slow_prometheus() as url:
        docs: list[dict[str, Any]] = []
        for k in range(200):
            icap, dep = load_example(EXAMPLE, ns)
            dep["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "no-such-pool"}
            for d in (icap, dep):
                d["metadata"]["name"] = f"m-{k}"
            icap["spec"]["targetRef"]["name"] = f"m-{k}"
            if k == 0:
                icap["spec"]["model"] = {"config": hostile}
            elif k <= 8:
                icap["spec"]["workload"]["fromPrometheus"] = {"url": url}
            # no pods: the real controllers would make each a Pending object (800 at 4 replicas)
            # that the apiserver, the controllers and the operator's spare-GPU listing all carry,
            # on the same 2 cores; the test is about the operator's cost per resource
            icap["spec"]["rollout"]["manageReplicas"] = False
            dep["spec"]["replicas"] = 0
            docs += [icap, dep]
        c.api.apply(*docs)
        applied = time.monotonic()

        def patched() -> int:
            items = c.api.get_json("deployments", "-n", ns)["items"]
            return sum(
                SEQS in d["spec"]["template"]["spec"]["containers"][0]["args"] for d in items
            )

        deadline = time.monotonic() + 180
        while patched() < 191 and time.monotonic() < deadline:
            time.sleep(2)
        assert patched() >= 191, f"only {patched()} of 191 plain resources patched"
        cond = c.wait_condition(ns, "m-0", "Ready", "False", "InvalidModelConfig")
        assert "num_hidden_layers" in cond["message"]
        # Edits of an unrelated resource: one once the creation wave is handled (the 200
        # creations, ~1,000 Deployment events and their status writes: up to ~3 s more on the
        # CI machine after the last patch), then others while the refresh timers of all 200
        # fire (each resource's first refresh is 60 s after the operator first saw it).
        _operator_quiet(c, seconds=2.0, until=applied + 50)
        took: list[float] = [_edit_and_wait(c, ns, "m-100")]
        # the later edits inside the refresh wave: waited for by the refreshes the operator
        # logs, not by the clock (a busy machine starts the wave late)
        for k, wave in ((101, 20), (102, 60), (103, 100)):
            wait_for(
                lambda wave=wave: _refreshes(c) >= wave,
                timeout=300,
                interval=0.5,
                message=f"{wave} refreshes",
            )
            took.append(_edit_and_wait(c, ns, f"m-{k}"))
        rss = _rss_mb(c.operator.proc.pid)
        refreshes = _refreshes(c)
        print(
            f"load: operator RSS {rss:.0f} MB; unrelated edits patched in "
            + ", ".join(f"{t:.2f}" for t in took)
            + f" s; {refreshes} refreshes by the last edit"
        )
        assert refreshes >= 100, "the edits were not measured during the refresh wave"
        # the review's 689 MB came from the hostile resource: the chart's 512Mi limit is the
        # behaviour (not OOM-killed); the tight RSS and edit-latency bounds are benchmarks'
        assert rss < 512, f"operator RSS {rss:.0f} MB"
        c.operator.assert_alive()
    # 200 resources would keep this module's operator busy for the tests after this one
    c.api.delete_namespaces([ns], wait=True, timeout=180)


def _refreshes(c: Cluster) -> int:
    return c.operator.log().count(REFRESHED)


def _operator_quiet(c: Cluster, seconds: float, until: float) -> None:
    """Wait until the operator's log has had no new line for ``seconds`` (or ``until``)."""
    size, since = len(c.operator.log()), time.monotonic()
    while time.monotonic() < until:
        time.sleep(0.25)
        now = len(c.operator.log())
        if now != size:
            size, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return


def _edit_and_wait(c: Cluster, ns: str, name: str) -> float:
    """Seconds from an edit of ``name`` (kubectl patch) until its Deployment has new args; prints
    where they went: kubectl's patch, the operator's handler (from its log), the polling."""
    seqs = flag_value(c.container(ns, name)["args"], SEQS)
    t0 = time.time()
    merge(c, ns, name, {"spec": {"model": {"kvCacheDtype": "fp8"}}})
    t1 = time.time()
    c.wait_args(ns, name, lambda a: flag_value(a, SEQS) != seqs, timeout=90)
    t2 = time.time()
    done = _logged_at(c.operator.log(), f"[{ns}/{name}] Handler 'icap_changed/spec' succeeded")
    handled = f"handler done +{done - t0:.2f} s" if done is not None else "handler not logged"
    print(f"edit {name}: kubectl patch {t1 - t0:.2f} s, {handled}, seen {t2 - t0:.2f} s")
    return t2 - t0


def _logged_at(log: str, text: str) -> float | None:
    """The unix time of the last line of the operator's log that contains ``text`` (Kopf's
    ``[YYYY-MM-DD HH:MM:SS,mmm]``, UTC on the test machine)."""
    import datetime as dt

    for line in reversed(log.splitlines()):
        if text in line:
            stamp = dt.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f")
            return stamp.replace(tzinfo=dt.UTC).timestamp()
    return None


def test_log_lines_about_an_object_name_it(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("logs")
    apply_example(c, ns, lambda i, d: i["spec"]["engine"].update(version="0.0.1"))
    c.wait_condition(ns, "llama-8b", "Ready", "False", "UnsupportedEngineVersion", timeout=120)
    # "[time] kopf.objects [LEVEL] [namespace/name] message"
    messages = [
        ln.split("] ", 2)[2] for ln in c.operator.log().splitlines() if " kopf.objects " in ln
    ]
    assert messages
    unnamed = [m for m in messages if not m.startswith("[")]
    assert not unnamed, unnamed[:3]
    assert any(m.startswith(f"[{ns}/llama-8b]") for m in messages)
