"""Reconcile latency, bulk throughput and memory of the operator, end to end, on the in-memory
test API server and on a real Kubernetes control plane, side by side.

``--cluster memory``: the in-memory Kubernetes API server of the tests (``tests/kubeapi``) in this
process. ``--cluster real``: the real control plane of ``tests/realk8s`` (etcd, kube-apiserver with
RBAC and the admission chain, kube-controller-manager, kube-scheduler, kwok GPU Nodes), a fresh one
per run, the CRD applied from ``crds/`` with kubectl. ``--cluster both`` (the default) runs both and
prints them in one table, one column each. In both, the real operator (``inference-capacity run
--standalone``, Kopf) runs as a subprocess and the benchmark measures:

1. edit latency: a material edit of an InferenceCapacity (``spec.workload.maxModelLen`` and
   ``spec.model.kvCacheDtype``, alternating) until the Deployment carries the new flag, and
   until ``status.observedGeneration`` catches up; p50/p95 over ``--edits`` edits;
2. bulk reconcile: N InferenceCapacities and their Deployments created at once (thread pool,
   kubernetes client) until every Deployment carries the flags and every InferenceCapacity has
   ``status.observedGeneration``; one fresh API server and operator per size;
3. the operator's peak RSS (``VmHWM``) and CPU time in every run, next to the API server's CPU
   time (memory: the emulator's thread of this process; real: etcd, kube-apiserver, KCM,
   scheduler and kwok, each), to tell which side is the bottleneck.

On the real cluster the operator runs as the Helm chart's ServiceAccount with the chart's RBAC
(``install_operator_rbac``, a TokenRequest kubeconfig), as the real-cluster tests run it, but
straight to the kube-apiserver: no fault proxy, which would add a Python hop to every request of
the operator. ``--proxy`` puts the proxy (``tests/realk8s/proxy.py``, no faults) in between to
count the operator's requests; without it the request columns of the real runs are empty, and the
benchmark sees the operator's watches in the apiserver's ``apiserver_longrunning_requests``.

What the real Deployments do: in the edit run the example's Deployment is kept as is (one GPU per
pod, on the kwok GPU Nodes, ``--gpu-nodes`` × ``--gpus-per-node``), so every edit is a real
rolling update that the benchmark waits out before the next edit. In the bulk runs the example's
Deployments keep their replicas (and get the replicas the operator plans) and the real controllers
create their ReplicaSets and Pods, but the pod template gets a ``nodeSelector`` that matches no
Node (``BULK_NODE_SELECTOR``): the pods stay Pending, so 1,000 Deployments stay feasible on one
machine (no GPUs for thousands of pods, no kwok pod churn) while the operator still sees what it
sees on a full cluster: thousands of Pods in its Node/Pod listing, no available replica (so it
patches at once, ``rollout_in_progress`` is None) and no spare GPU for the pods' selector (so
``maxSurge`` 0; ``recoveryReplicas: 1`` keeps the rollout safe through ``maxUnavailable``).

Targets: edit→flags p50 < 1 s; 1,000 InferenceCapacities < 60 s on 2 cores; RSS < 250 MB.

    python -m benchmarks.reconcile [--cluster both|memory|real] [--sizes 100,1000] [--edits 30]
    python -m benchmarks.reconcile --quick                       # smoke run, both columns
    python -m benchmarks.reconcile --quick --profile /tmp/prof   # per-thread cProfile dumps
    python -m benchmarks.reconcile --shards 4 --sizes 200        # sharded, real cluster

``--shards N`` (N > 1, real cluster only): N operator processes, one per shard (as the chart's
StatefulSet runs them: ``INFERENCE_CAPACITY_SHARDS``, each its own ``SHARD_INDEX``, the chart's
RBAC for ``shards: N``), and for each size: the drain time of the bulk creation over all
shards, each replica's peak RSS and CPU time with the number of resources in its shard, then
``kill -9`` of the last replica and, right after, a material edit (``maxModelLen``) of every
resource in its shard: the seconds until another replica holds its Lease, and until every
edited Deployment carries the new flag (the shard's work taken over).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines
from prometheus_client.parser import text_string_to_metric_families
from tests.kubeapi.fixtures import KubeAPI, wait_for
from tests.kubeapi.server import KubeAPIServer
from tests.operator_harness import (
    CRD,
    apply_crd,
    flag_value,
    free_port,
    load_example,
)
from tests.realk8s.cluster import RealCluster
from tests.realk8s.fixtures import (
    OPERATOR_NAMESPACE,
    OPERATOR_RELEASE,
    OPERATOR_VALUES,
    RealKubeAPI,
    install_operator_rbac,
)
from tests.realk8s.proxy import FaultProxy

ROOT = Path(__file__).resolve().parent.parent
GROUP, VERSION, PLURAL = "capacity.inference.dev", "v1alpha1", "inferencecapacities"
ICAP_KEY = (GROUP, PLURAL)
DEP_KEY = ("apps", "deployments")
EXAMPLE = "llama-3.1-8b-h100.yaml"
USER_AGENT = "reconcile-bench"
SEQS, GMU = "--max-num-seqs", "--gpu-memory-utilization"
CLK_TCK = os.sysconf("SC_CLK_TCK")

TARGET_P50_S = 1.0
TARGET_1000_S = 60.0
TARGET_RSS_MB = 250.0

#: the bulk runs' pod template on the real cluster: a label no Node has, so the pods the real
#: controllers create stay Pending (see the module docstring)
BULK_NODE_SELECTOR = {"inference-capacity.dev/benchmark": "no-such-node"}
COLUMNS = {"memory": "in-memory", "real": "real"}

# Run the operator with one cProfile per thread (Kopf runs sync handlers in a thread pool, which
# `python -m cProfile` would not see) and dump them, merged, at exit.
PROFILE_BOOT = """
import atexit, cProfile, pstats, sys, threading
out = sys.argv[1]
sys.argv = ["inference-capacity", *sys.argv[2:]]
profiles = []
def _boot(*_):
    p = cProfile.Profile()
    profiles.append(p)
    p.enable()
threading.setprofile(_boot)
def _dump():
    stats = None
    for p in profiles:
        try:
            s = pstats.Stats(p)
        except (TypeError, ValueError):
            continue
        if stats is None:
            stats = s
        else:
            stats.add(s)
    if stats is not None:
        stats.dump_stats(out)
atexit.register(_dump)
# the operator ends with os._exit (controller/main.py), which runs no atexit hook
import os
_real_exit = os._exit
def _exit(code):
    _dump()
    _real_exit(code)
os._exit = _exit
main = cProfile.Profile()
profiles.append(main)
main.enable()
from inference_capacity.cli import main as cli_main
rc = cli_main()
main.disable()
sys.exit(rc)
"""


# ----------------------------------------------------------------------------- /proc readers


def proc_cpu(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process (or one of its threads) in seconds."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    try:
        rest = Path(path).read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of every thread of a process, by thread id."""
    out: dict[int, float] = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return out
    for tid in tids:
        out[tid] = proc_cpu(pid, tid)
    return out


def proc_kb(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# ----------------------------------------------------------------------------- the operator


class OperatorProc:
    """``inference-capacity run --standalone`` in a subprocess; samples its RSS and CPU."""

    def __init__(
        self,
        base_env: dict[str, str],
        log_path: Path,
        env: dict[str, str],
        profile: Path | None = None,
    ) -> None:
        self.base_env = base_env
        self.log_path = log_path
        self.env = env
        self.profile = profile
        self.proc: subprocess.Popen[bytes] | None = None
        self.peak_rss_kb = 0
        self.hwm_kb = 0
        self.cpu_s = 0.0
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> OperatorProc:
        env = dict(self.base_env)
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"
        self.metrics_port = free_port()
        run = ["run", "--standalone", "--metrics-port", str(self.metrics_port), "--liveness", ""]
        exe = Path(sys.executable).parent / "inference-capacity"
        if self.profile is not None:
            cmd = [sys.executable, "-c", PROFILE_BOOT, str(self.profile), *run]
        elif exe.exists():
            cmd = [str(exe), *run]
        else:
            cmd = [sys.executable, "-m", "inference_capacity.cli", *run]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT
        )
        self._sampler = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.snapshot()

    def snapshot(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.peak_rss_kb = max(self.peak_rss_kb, proc_kb(self.pid, "VmRSS"))
        self.hwm_kb = max(self.hwm_kb, proc_kb(self.pid, "VmHWM"))
        self.cpu_s = max(self.cpu_s, proc_cpu(self.pid))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def metrics_page(self) -> str:
        """The operator's metrics endpoint, as text; empty when it is not running."""
        if not self.alive():
            return ""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        # at 10,000 resources the page (per-resource series included) is megabytes, served by a
        # busy process: a generous time-out, tried three times
        for _ in range(3):
            try:
                with urllib.request.urlopen(url, timeout=60) as r:  # noqa: S310 - our endpoint
                    return str(r.read().decode())
            except OSError:
                continue
        return ""

    def api_requests(self, text: str | None = None) -> Counter[str]:
        """The operator's own count of its API requests (``inference_capacity_api_requests_total``
        on its metrics endpoint), as ``"kopf|client verb resource"``; empty when it is not
        running."""
        out: Counter[str] = Counter()
        for fam in text_string_to_metric_families(self.metrics_page() if text is None else text):
            if fam.name != "inference_capacity_api_requests":
                continue
            for smp in fam.samples:
                if smp.name.endswith("_total"):
                    who = "kopf" if smp.labels["client"] == "kopf" else "client"
                    key = f"{who} {smp.labels['verb']} {smp.labels['resource']}"
                    out[key] += int(smp.value)
        return out

    def refreshes(self, text: str | None = None) -> int:
        """Periodic refreshes the operator has run (``inference_capacity_refreshes_total``)."""
        for fam in text_string_to_metric_families(self.metrics_page() if text is None else text):
            if fam.name == "inference_capacity_refreshes":
                return sum(int(smp.value) for smp in fam.samples if smp.name.endswith("_total"))
        return 0

    def stop(self) -> None:
        self.snapshot()
        self._stop.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=180 if self.profile else 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()

    def log_tail(self, n: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]


# ----------------------------------------------------------------------------- the rig


@dataclass
class Rig:
    """One API server (in this process), the CRD, a client, and one operator."""

    kind: ClassVar[str] = "memory"
    #: the bulk runs' pod template nodeSelector (None: the example's template as is)
    bulk_node_selector: ClassVar[dict[str, str] | None] = None
    #: whether ``operator_requests`` sees the operator's requests
    counts_requests: ClassVar[bool] = True

    workdir: Path
    env: dict[str, str]
    profile: Path | None = None
    server: KubeAPIServer = field(init=False)
    api: KubeAPI = field(init=False)
    op: OperatorProc = field(init=False)
    client: client.ApiClient = field(init=False)

    def __enter__(self) -> Rig:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.server = KubeAPIServer(bookmark_interval=30.0).start()
        self.api = KubeAPI(self.server, self.workdir)
        self.api.kubectl("apply", "-f", str(CRD))
        wait_for(
            lambda: self.api.kubectl("get", "icap", "-A", check=False).returncode == 0,
            timeout=20,
            interval=0.1,
            message="CRD served",
        )
        cfg = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(self.api.kubeconfig), client_configuration=cfg
        )
        cfg.connection_pool_maxsize = 32
        self.client = client.ApiClient(cfg)
        self.client.user_agent = USER_AGENT
        self.op = OperatorProc(
            self.api.env, self.workdir / "operator.log", self.env, self.profile
        ).start()
        self._wait_watching()
        return self

    def __exit__(self, *exc: object) -> None:
        self.op.stop()
        self.client.close()  # type: ignore[no-untyped-call]
        self.server.stop()

    def restart_operator(self, timeout: float = 90.0) -> None:
        """Stop the operator (if running) and start a fresh process with the same settings
        (its own log and peak RSS), once it watches again (Kopf lists first: with 10,000
        resources waiting, that alone is minutes on 2 cores)."""
        self.op.stop()
        before = self._watch_marker()
        self.op = OperatorProc(
            self.op.base_env, self.op.log_path, self.env, self.op.profile
        ).start()
        self._wait_started(before, timeout)

    def _watch_marker(self) -> Any:
        return len(self.server.requests.filter(verb="watch"))

    def _wait_started(self, before: Any, timeout: float = 60.0) -> None:
        def watching() -> bool:
            if not self.op.alive():
                raise RuntimeError(f"the operator exited:\n{self.op.log_tail()}")
            watches = self.server.requests.filter(verb="watch")[before:]
            return {PLURAL, "deployments"} <= {r.resource for r in watches}

        wait_for(watching, timeout=timeout, interval=0.05, message="the operator's watches")
        time.sleep(0.5)

    def _wait_watching(self) -> None:
        """The operator is up once it watches both InferenceCapacities and Deployments."""

        def watching() -> bool:
            if not self.op.alive():
                raise RuntimeError(f"the operator exited:\n{self.op.log_tail()}")
            res = {r.resource for r in self.server.requests.filter(verb="watch")}
            return {PLURAL, "deployments"} <= res

        wait_for(watching, timeout=60, interval=0.05, message="the operator's watches")
        time.sleep(0.5)

    # -- cheap reads of the server's memory, on its loop (no HTTP, no serialization)

    def read_store(self, fn: Callable[[Any], Any]) -> Any:
        return self.server.call(fn, self.server.cluster.store)

    def emulator_cpu(self) -> float:
        thread = self.server._thread  # noqa: SLF001 - the server thread's CPU time
        tid = thread.native_id if thread is not None else None
        return proc_cpu(os.getpid(), tid) if tid else 0.0

    def server_cpu(self) -> dict[str, float]:
        """CPU seconds of the API server side, by component."""
        return {"emulator": self.emulator_cpu()}

    def inprocess_cpu(self) -> float:
        """CPU seconds of the server-side threads that run in this process (not the bench's)."""
        return self.emulator_cpu()

    def operator_requests(self) -> list[Any]:
        return [
            r
            for r in self.server.requests.records()
            if r.user_agent != USER_AGENT and not r.user_agent.startswith("kubectl")
        ]

    # -- writes through the kubernetes client (dict bodies, raw JSON answers: no models)

    def _api(self, cls: Any) -> Any:
        return cls(self.client)

    def namespace(self, name: str) -> None:
        self._api(client.CoreV1Api).create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
            _preload_content=False,
        )

    def create(self, obj: dict[str, Any]) -> None:
        ns = obj["metadata"]["namespace"]
        if obj["kind"] == "Deployment":
            self._api(client.AppsV1Api).create_namespaced_deployment(
                ns, obj, _preload_content=False
            )
        else:
            self._api(client.CustomObjectsApi).create_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, obj, _preload_content=False
            )

    def patch_icap(self, ns: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        resp = self._api(client.CustomObjectsApi).patch_namespaced_custom_object(
            GROUP,
            VERSION,
            ns,
            PLURAL,
            name,
            patch,
            _preload_content=False,
            _content_type="application/merge-patch+json",
        )
        out: dict[str, Any] = json.loads(resp.data)
        return out

    def get_deployment(self, ns: str, name: str) -> dict[str, Any]:
        resp = self._api(client.AppsV1Api).read_namespaced_deployment(
            name, ns, _preload_content=False
        )
        out: dict[str, Any] = json.loads(resp.data)
        return out

    def get_icap(self, ns: str, name: str) -> dict[str, Any]:
        resp = self._api(client.CustomObjectsApi).get_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, name, _preload_content=False
        )
        out: dict[str, Any] = json.loads(resp.data)
        return out


class WatchCache:
    """Deployments and InferenceCapacities of every namespace, mirrored in this process by a list
    and a watch each (raw JSON, no models), with the emulator store's ``get(key, ns, name)``: the
    bulk runs read progress from it instead of listing 1,000 objects every 0.2 s."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.client = api_client
        self.lock = threading.Lock()
        self.objs: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {
            ICAP_KEY: {},
            DEP_KEY: {},
        }
        self.synced = {key: threading.Event() for key in self.objs}
        self.events = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(key,), name=f"watch-{key[1]}", daemon=True)
            for key in self.objs
        ]

    def start(self) -> WatchCache:
        for t in self._threads:
            t.start()
        for key, ev in self.synced.items():
            if not ev.wait(60):
                raise RuntimeError(f"no list of {key[1]} within 60 s")
        return self

    def stop(self) -> None:
        self._stop.set()

    def get(self, key: tuple[str, str], ns: str, name: str) -> dict[str, Any] | None:
        return self.objs[key].get((ns, name))

    def _call(self, key: tuple[str, str], **kw: Any) -> Any:
        if key == DEP_KEY:
            return client.AppsV1Api(self.client).list_deployment_for_all_namespaces(
                _preload_content=False, **kw
            )
        return client.CustomObjectsApi(self.client).list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _preload_content=False, **kw
        )

    def _run(self, key: tuple[str, str]) -> None:
        store = self.objs[key]
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    body = json.loads(self._call(key).data)
                    items = {
                        (o["metadata"]["namespace"], o["metadata"]["name"]): o
                        for o in body.get("items") or []
                    }
                    with self.lock:
                        store.clear()
                        store.update(items)
                    rv = body["metadata"]["resourceVersion"]
                    self.synced[key].set()
                resp = self._call(
                    key,
                    watch=True,
                    resource_version=rv,
                    allow_watch_bookmarks=True,
                    timeout_seconds=60,
                )
                try:
                    for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                        if self._stop.is_set():
                            return
                        if not line:
                            continue
                        ev = json.loads(line)
                        obj = ev.get("object") or {}
                        if ev.get("type") == "ERROR":
                            rv = ""  # 410 Gone: list again
                            break
                        meta = obj.get("metadata") or {}
                        rv = meta.get("resourceVersion") or rv
                        if ev.get("type") == "BOOKMARK":
                            continue
                        k = (meta.get("namespace", ""), meta.get("name", ""))
                        with self.lock:
                            self.events += 1
                            if ev.get("type") == "DELETED":
                                store.pop(k, None)
                            else:
                                store[k] = obj
                finally:
                    resp.close()
            except Exception as exc:  # noqa: BLE001 - keep mirroring; the run's timeout decides
                if self._stop.is_set():
                    return
                print(f"  watch {key[1]}: {exc!r}; again", file=sys.stderr)
                rv = ""
                time.sleep(0.5)


@dataclass
class RealRig(Rig):
    """A fresh real control plane (``tests/realk8s``), the CRD applied with kubectl, the chart's
    ServiceAccount and RBAC, a client (admin), and one operator as that ServiceAccount; straight
    to the kube-apiserver, or through the (fault-free) proxy with ``use_proxy``."""

    kind: ClassVar[str] = "real"
    bulk_node_selector: ClassVar[dict[str, str] | None] = BULK_NODE_SELECTOR

    gpu_nodes: int = 4
    gpus_per_node: int = 8
    use_proxy: bool = False
    real: RealCluster = field(init=False)
    admin: RealKubeAPI = field(init=False)
    proxy: FaultProxy | None = field(init=False, default=None)
    cache: WatchCache = field(init=False)
    timings: dict[str, float] = field(init=False, default_factory=dict)

    @property
    def counts_requests(self) -> bool:  # type: ignore[override]
        return self.proxy is not None

    def __enter__(self) -> RealRig:
        self.workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self.real = RealCluster(
            self.workdir / "cluster", gpu_nodes=self.gpu_nodes, gpus_per_node=self.gpus_per_node
        )
        (self.workdir / "cluster").mkdir(exist_ok=True)
        self.real.start()
        self.timings["cluster start"] = time.monotonic() - t0
        try:
            self._setup()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _prepare(
        self, rbac_values: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], client.ApiClient]:
        """The proxy (``use_proxy``), the CRD, the chart's ServiceAccount and RBAC (for
        ``rbac_values``, default the tests' values) and the admin client; returns the
        operator's environment (its ServiceAccount kubeconfig) and a client for the benchmark's
        watch cache."""
        d = self.real.workdir
        if self.use_proxy:
            self.proxy = FaultProxy(
                self.real.server, d / "ca.crt", d / "apiserver.crt", d / "apiserver.key"
            ).start()
        # RealKubeAPI for kubectl as admin; its proxy is only used for operator_env(), which
        # the benchmark does not call (it builds the ServiceAccount's kubeconfig itself)
        self.admin = RealKubeAPI(self.real, self.proxy, self.workdir)  # type: ignore[arg-type]
        apply_crd(self.admin)
        sa = install_operator_rbac(self.admin, rbac_values)
        kubeconfig = self.real.serviceaccount_kubeconfig(
            OPERATOR_NAMESPACE,
            sa,
            self.workdir / "operator.kubeconfig",
            server=self.proxy.url if self.proxy is not None else None,
        )
        cfg = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(self.real.admin_kubeconfig), client_configuration=cfg
        )
        cfg.connection_pool_maxsize = 32
        self.client = client.ApiClient(cfg)
        self.client.user_agent = USER_AGENT
        watch_client = client.ApiClient(cfg)
        watch_client.user_agent = USER_AGENT
        base_env = self.admin.env
        base_env["KUBECONFIG"] = str(kubeconfig)
        return base_env, watch_client

    def _setup(self) -> None:
        base_env, watch_client = self._prepare()
        before = self._watches()
        self.op = OperatorProc(
            base_env, self.workdir / "operator.log", self.env, self.profile
        ).start()
        self._wait_watching_real(before)
        self.cache = WatchCache(watch_client).start()

    def __exit__(self, *exc: object) -> None:
        if getattr(self, "op", None) is not None:
            self.op.stop()
        if getattr(self, "cache", None) is not None:
            self.cache.stop()
        if getattr(self, "client", None) is not None:
            self.client.close()  # type: ignore[no-untyped-call]
        if self.proxy is not None:
            self.proxy.stop()
        self.real.stop()

    def _watches(self) -> Counter[str]:
        """The apiserver's open watches by resource (``apiserver_longrunning_requests``)."""
        ctx = ssl.create_default_context(cafile=str(self.real.ca))
        req = urllib.request.Request(
            self.real.server + "/metrics",
            headers={"Authorization": f"Bearer {self.real.admin_token}"},
        )
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            text = r.read().decode()
        out: Counter[str] = Counter()
        for line in text.splitlines():
            if line.startswith("apiserver_longrunning_requests{") and 'verb="WATCH"' in line:
                res = line.split('resource="', 1)[1].split('"', 1)[0]
                out[res] += int(float(line.rsplit(" ", 1)[1]))
        return out

    def _wait_watching_real(self, before: Counter[str]) -> None:
        """The operator is up once it watches both InferenceCapacities and Deployments: seen
        by the proxy, or else as new watches in the apiserver's metrics."""

        def watching() -> bool:
            if not self.op.alive():
                raise RuntimeError(f"the operator exited:\n{self.op.log_tail()}")
            if self.proxy is not None:
                res = {r.resource for r in self.proxy.requests.filter(verb="watch")}
                return {PLURAL, "deployments"} <= res
            now = self._watches()
            return all(now[r] > before[r] for r in (PLURAL, "deployments"))

        wait_for(watching, timeout=90, interval=0.1, message="the operator's watches")
        time.sleep(0.5)

    def _watch_marker(self) -> Any:
        if self.proxy is not None:
            return len(self.proxy.requests.filter(verb="watch"))
        return self._watches()

    def _wait_started(self, before: Any, timeout: float = 90.0) -> None:
        def watching() -> bool:
            if not self.op.alive():
                raise RuntimeError(f"the operator exited:\n{self.op.log_tail()}")
            if self.proxy is not None:
                watches = self.proxy.requests.filter(verb="watch")[before:]
                return {PLURAL, "deployments"} <= {r.resource for r in watches}
            now = self._watches()
            return all(now[r] > before[r] for r in (PLURAL, "deployments"))

        wait_for(watching, timeout=timeout, interval=0.1, message="the operator's watches")
        time.sleep(0.5)

    def namespace(self, name: str) -> None:
        super().namespace(name)
        # the ServiceAccount admission plugin refuses pods until `default` exists
        self.real.wait_default_serviceaccount(name)

    def read_store(self, fn: Callable[[Any], Any]) -> Any:
        with self.cache.lock:
            return fn(self.cache)

    def server_cpu(self) -> dict[str, float]:
        return {p.name: proc_cpu(p.popen.pid) for p in self.real.procs.items}

    def inprocess_cpu(self) -> float:
        thread = self.proxy._thread if self.proxy is not None else None  # noqa: SLF001
        tid = thread.native_id if thread is not None else None
        return proc_cpu(os.getpid(), tid) if tid else 0.0

    def emulator_cpu(self) -> float:
        return sum(self.server_cpu().values())

    def operator_requests(self) -> list[Any]:
        return self.proxy.requests.records() if self.proxy is not None else []


def container_args(dep: dict[str, Any] | None) -> list[str]:
    if not dep:
        return []
    for c in dep.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
        if c.get("name") == "vllm":
            return [*(c.get("command") or []), *(c.get("args") or [])]
    return []


def _has_max_model_len(args: list[str], value: str) -> bool:
    return flag_value(args, "--max-model-len") == value


def _has_kv_dtype(args: list[str], dtype: str) -> bool:
    got = flag_value(args, "--kv-cache-dtype")
    return got == "fp8" if dtype == "fp8" else got != "fp8"  # "auto": the flag or none


def rollout_done(dep: dict[str, Any]) -> bool:
    st, meta = dep.get("status") or {}, dep["metadata"]
    want = dep.get("spec", {}).get("replicas", 1)
    return bool(
        st.get("observedGeneration") == meta.get("generation")
        and st.get("updatedReplicas", 0) == want
        and st.get("availableReplicas", 0) == want
    )


def pair(
    ns: str, name: str, kv_policy: bool = False, node_selector: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The example's InferenceCapacity and Deployment, renamed (and its pods pinned to
    ``node_selector``)."""
    icap, dep = load_example(EXAMPLE, ns)
    icap["metadata"]["name"] = name
    icap["spec"]["targetRef"]["name"] = name
    if kv_policy:
        icap["spec"]["policy"]["setKvCacheDtype"] = True
    dep["metadata"]["name"] = name
    dep["metadata"]["labels"] = {"app": name}
    dep["spec"]["selector"] = {"matchLabels": {"app": name}}
    dep["spec"]["template"]["metadata"]["labels"] = {"app": name}
    if node_selector:
        dep["spec"]["template"]["spec"]["nodeSelector"] = dict(node_selector)
    return [icap, dep]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


# ----------------------------------------------------------------------------- measurements


@dataclass
class RunStats:
    label: str
    cluster: str = "memory"
    wall_s: float = 0.0
    create_s: float = 0.0
    flags_s: float = float("nan")
    status_s: float = float("nan")
    quiet_s: float = float("nan")
    done: int = 0
    n: int = 0
    op_cpu_s: float = 0.0
    op_main_cpu_s: float = 0.0
    emu_cpu_s: float = 0.0
    bench_cpu_s: float = 0.0
    hwm_mb: float = 0.0
    base_mb: float = 0.0
    requests: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    status_latencies: list[float] = field(default_factory=list)
    failures: int = 0
    server_cpu: dict[str, float] = field(default_factory=dict)
    counted: bool = True  # requests measured (the real cluster without --proxy: by the operator)
    setup_s: float = 0.0  # the real cluster's start
    steady_mb: float = 0.0  # VmRSS once every resource is reconciled and the operator quiet
    # --resync: a window in which every resource is refreshed once (no change to make)
    resync_s: float = float("nan")
    resync_refreshes: int = 0
    resync_requests: Counter[str] = field(default_factory=Counter)

    @property
    def kb_per_object(self) -> float:
        """Resident memory per resource: (steady RSS − RSS before the first one) / N."""
        if not self.steady_mb or not self.n:
            return float("nan")
        return (self.steady_mb - self.base_mb) * 1024 / self.n


class CpuWindow:
    """CPU seconds used by the operator, the API server side (the emulator thread, or the real
    control plane's processes) and the rest of this process."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.op0 = proc_cpu(rig.op.pid)
        self.threads0 = thread_cpu(rig.op.pid)
        self.server0 = rig.server_cpu()
        self.inproc0 = rig.inprocess_cpu()
        self.me0 = time.process_time()

    def close(self, stats: RunStats) -> None:
        stats.op_cpu_s = proc_cpu(self.rig.op.pid) - self.op0
        pid = self.rig.op.pid
        stats.op_main_cpu_s = thread_cpu(pid).get(pid, 0.0) - self.threads0.get(pid, 0.0)
        server = self.rig.server_cpu()
        stats.server_cpu = {k: v - self.server0.get(k, 0.0) for k, v in server.items()}
        stats.emu_cpu_s = sum(stats.server_cpu.values())
        inproc = self.rig.inprocess_cpu() - self.inproc0
        stats.bench_cpu_s = time.process_time() - self.me0 - inproc


def by_metrics(rig: Rig) -> bool:
    """The operator's requests are counted by its own metrics (the real cluster without the
    proxy), not by the server or proxy that sees each one."""
    return rig.kind == "real" and not rig.counts_requests


def request_mark(rig: Rig) -> int | Counter[str]:
    """Where the count of the operator's requests stands now (see :func:`count_requests`)."""
    return rig.op.api_requests() if by_metrics(rig) else len(rig.operator_requests())


def count_requests(rig: Rig, since: int | Counter[str]) -> Counter[str]:
    """The operator's requests since ``since`` (a :func:`request_mark`)."""
    if isinstance(since, Counter):
        return rig.op.api_requests() - since
    out: Counter[str] = Counter()
    for r in rig.operator_requests()[since:]:
        res = f"{r.resource}/{r.subresource}" if r.subresource else r.resource
        who = "kopf" if r.user_agent.startswith("kopf") else "client"
        out[f"{who} {r.verb} {res or r.path.split('?')[0]}"] += 1
    return out


def wait_quiet(rig: Rig, quiet_for: float, timeout: float) -> float:
    """Seconds until the operator has sent no request (but watches) for ``quiet_for``."""
    if not rig.counts_requests:
        return float("nan")
    t0 = time.monotonic()
    last_n, last_t = -1, t0
    while time.monotonic() - t0 < timeout:
        n = sum(1 for r in rig.operator_requests() if r.verb != "watch")
        now = time.monotonic()
        if n != last_n:
            last_n, last_t = n, now
        elif now - last_t >= quiet_for:
            return last_t - t0
        time.sleep(0.1)
    return float("nan")


#: a Rig (memory) or a RealRig for a workdir and a profile path
MakeRig = Callable[[Path, Path | None], Rig]


def populate(rig: Rig, n: int, namespaces: int, threads: int, timeout: float) -> None:
    """N resident pairs (pods Pending on the real cluster), created and reconciled before a
    measurement: the edits then run with a fleet of that size in the operator's memory."""
    nss = [f"resident-{k}" for k in range(namespaces)]
    for ns in nss:
        rig.namespace(ns)
    names = [(nss[i % namespaces], f"r{i:05d}") for i in range(n)]
    objs = [o for ns, name in names for o in pair(ns, name, node_selector=rig.bulk_node_selector)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(rig.create, objs))

    def reconciled(store: Any) -> bool:
        return all(SEQS in container_args(store.get(DEP_KEY, ns, name)) for ns, name in names)

    wait_for(
        lambda: rig.read_store(reconciled),
        timeout=timeout,
        interval=0.5,
        message=f"{n} resident pairs reconciled",
    )


def edit_latency(
    make_rig: MakeRig,
    workdir: Path,
    edits: int,
    timeout: float,
    profile: Path | None,
    resident: int = 0,
    namespaces: int = 4,
    threads: int = 8,
) -> RunStats:
    stats = RunStats(label=f"edits@{resident}" if resident else "edits", n=edits)
    ns, name = "edit", "llama-8b"
    with make_rig(workdir, profile) as rig:
        stats.cluster, stats.counted = rig.kind, rig.counts_requests or by_metrics(rig)
        stats.setup_s = getattr(rig, "timings", {}).get("cluster start", 0.0)
        if resident:
            populate(rig, resident, namespaces, threads, timeout=max(600.0, resident * 0.6))
            # the controllers still work through the resident pairs' ReplicaSets and Pods: the
            # edited Deployment's rollouts take longer than on an empty cluster
            timeout = max(timeout, 180.0)
        stats.base_mb = proc_kb(rig.op.pid, "VmRSS") / 1024
        rig.namespace(ns)
        for obj in pair(ns, name, kv_policy=True):
            rig.create(obj)

        def settled() -> bool:
            dep = rig.get_deployment(ns, name)
            icap = rig.get_icap(ns, name)
            st = icap.get("status") or {}
            return (
                SEQS in container_args(dep)
                and rollout_done(dep)
                and st.get("observedGeneration") == icap["metadata"]["generation"]
            )

        wait_for(settled, timeout=timeout, interval=0.05, message="the first reconcile")
        time.sleep(0.5)
        req0 = request_mark(rig)
        cpu = CpuWindow(rig)
        t_start = time.monotonic()
        mml = [65536, 32768]
        kv = ["fp8", "auto"]
        for i in range(edits):
            patch: dict[str, Any]
            want: Callable[[list[str]], bool]
            if i % 2 == 0:
                value = mml[(i // 2) % 2]
                patch = {"spec": {"workload": {"maxModelLen": value}}}
                want = functools.partial(_has_max_model_len, value=str(value))
            else:
                dtype = kv[(i // 2) % 2]
                patch = {"spec": {"model": {"kvCacheDtype": dtype}}}
                want = functools.partial(_has_kv_dtype, dtype=dtype)

            t0 = time.monotonic()
            gen = rig.patch_icap(ns, name, patch)["metadata"]["generation"]
            t_flags = t_status = None
            deadline = t0 + timeout
            while time.monotonic() < deadline:
                if t_flags is None:
                    dep = rig.get_deployment(ns, name)
                    if want(container_args(dep)):
                        t_flags = time.monotonic() - t0
                if t_flags is not None:
                    st = rig.get_icap(ns, name).get("status") or {}
                    if st.get("observedGeneration") == gen:
                        t_status = time.monotonic() - t0
                        break
                time.sleep(0.02)
            if t_flags is None or t_status is None:
                stats.failures += 1
                print(f"  edit {i}: no result within {timeout}s", file=sys.stderr)
            else:
                stats.latencies.append(t_flags)
                stats.status_latencies.append(t_status)
            # let the rollout and the follow-up reconciles settle before the next edit
            wait_for(
                lambda: rollout_done(rig.get_deployment(ns, name)),
                timeout=timeout,
                interval=0.02,
                message="the rollout",
            )
            time.sleep(0.3)
        stats.wall_s = time.monotonic() - t_start
        cpu.close(stats)
        stats.requests = count_requests(rig, req0)
        rig.op.stop()
        stats.hwm_mb = rig.op.hwm_kb / 1024
    return stats


def bulk(
    make_rig: MakeRig,
    workdir: Path,
    n: int,
    namespaces: int,
    threads: int,
    timeout: float,
    profile: Path | None,
    node_selector: dict[str, str] | None = None,
    drain: bool = False,
    resync: float = 0.0,
) -> RunStats:
    """N pairs created at once with the operator running; or, with ``drain``, created while
    it is stopped, then the operator started: the backlog after a restart (the window then
    starts at the operator's start, its boot and first lists included).

    ``resync`` (the operator's refresh interval, seconds; 0: none): once every pair is
    reconciled and the operator quiet, a window that lasts until every resource has been
    refreshed once more (its refresh counter up by N, at most two intervals): the requests of
    a no-op resync, per refresh."""
    stats = RunStats(label=f"drain {n}" if drain else f"bulk {n}", n=n)
    nss = [f"bulk-{k}" for k in range(namespaces)]
    objs = [
        o
        for i in range(n)
        for o in pair(nss[i % namespaces], f"m{i:04d}", node_selector=node_selector)
    ]
    names = [(nss[i % namespaces], f"m{i:04d}") for i in range(n)]
    with make_rig(workdir, profile) as rig:
        stats.cluster, stats.counted = rig.kind, rig.counts_requests or by_metrics(rig)
        stats.setup_s = getattr(rig, "timings", {}).get("cluster start", 0.0)
        for ns in nss:
            rig.namespace(ns)
        time.sleep(0.3)
        stats.base_mb = proc_kb(rig.op.pid, "VmRSS") / 1024
        req0 = request_mark(rig)

        def progress(store: Any) -> tuple[int, int]:
            flags = status = 0
            for ns, name in names:
                dep = store.get(DEP_KEY, ns, name)
                if dep is not None and SEQS in container_args(dep):
                    flags += 1
                icap = store.get(ICAP_KEY, ns, name)
                if icap is not None:
                    og = (icap.get("status") or {}).get("observedGeneration")
                    if og is not None and og == icap["metadata"].get("generation"):
                        status += 1
            return flags, status

        created = threading.Event()

        def create_all() -> None:
            t_c = time.monotonic()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(rig.create, objs))
            stats.create_s = time.monotonic() - t_c
            created.set()

        if drain:
            rig.op.stop()
            create_all()
            req0 = request_mark(rig)
            t0 = time.monotonic()
            rig.restart_operator(max(90.0, timeout))
            stats.base_mb = proc_kb(rig.op.pid, "VmRSS") / 1024
            cpu = CpuWindow(rig)
            # the operator's CPU from its start (its boot and first lists are in the window)
            cpu.op0, cpu.threads0 = 0.0, {}
            creator = threading.Thread(target=lambda: None)
        else:
            cpu = CpuWindow(rig)
            t0 = time.monotonic()
            creator = threading.Thread(target=create_all, name="creator", daemon=True)
        creator.start()
        last = (0, 0)
        next_tick = 0.0
        while time.monotonic() - t0 < timeout:
            time.sleep(0.2)
            flags, status = rig.read_store(progress)
            now = time.monotonic() - t0
            if flags == n and stats.flags_s != stats.flags_s:
                stats.flags_s = now
            if status == n and stats.status_s != stats.status_s:
                stats.status_s = now
            if (flags, status) != last:
                last = (flags, status)
            if now >= next_tick:
                next_tick += 5.0
                print(
                    f"  {now:6.1f} s  flags {flags:>5}  status {status:>5}  operator RSS "
                    f"{proc_kb(rig.op.pid, 'VmRSS') / 1024:.0f} MB",
                    file=sys.stderr,
                    flush=True,
                )
            if flags == n and status == n and created.is_set():
                break
            if not rig.op.alive():
                raise RuntimeError(f"the operator exited:\n{rig.op.log_tail()}")
        creator.join(timeout)
        stats.done = min(last)
        stats.wall_s = time.monotonic() - t0
        cpu.close(stats)
        stats.quiet_s = stats.wall_s + wait_quiet(rig, 2.0, 60.0)
        stats.requests = count_requests(rig, req0)
        stats.steady_mb = proc_kb(rig.op.pid, "VmRSS") / 1024
        if resync > 0:
            resync_window(rig, stats, resync)

        def ready_reasons(store: Any) -> Counter[str]:
            out: Counter[str] = Counter()
            for ns, name in names:
                icap = store.get(ICAP_KEY, ns, name) or {}
                conds = (icap.get("status") or {}).get("conditions") or []
                applied = next((c for c in conds if c.get("type") == "Applied"), None)
                out[f"{applied['status']}/{applied['reason']}" if applied else "none"] += 1
            return out

        stats.reasons = rig.read_store(ready_reasons)
        rig.op.stop()
        stats.hwm_mb = rig.op.hwm_kb / 1024
    return stats


def _refresh_wave(rig: Rig, n: int, interval: float, label: str) -> float:
    """Wait until ``n`` more refreshes have run (at most two intervals and a minute)."""
    r0 = rig.op.refreshes()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2 * interval + 60.0:
        time.sleep(2.0)
        done = rig.op.refreshes() - r0
        print(f"  {label}: {done:>5}/{n} refreshed", file=sys.stderr, flush=True)
        if done >= n:
            break
        if not rig.op.alive():
            raise RuntimeError(f"the operator exited:\n{rig.op.log_tail()}")
    return time.monotonic() - t0


def resync_window(rig: Rig, stats: RunStats, interval: float) -> None:
    """Requests while every one of the N resources is refreshed once, nothing to change. The
    first wave after the drain is not counted: a resource's first refresh after its creation
    records what the creation changed (Applied: the flags written → UpToDate: the Deployment
    runs them), a real status change; the second wave has nothing to write."""
    _refresh_wave(rig, stats.n, interval, "resync (settling, not counted)")
    mark = request_mark(rig)
    r0 = rig.op.refreshes()
    stats.resync_s = _refresh_wave(rig, stats.n, interval, "resync")
    stats.resync_requests = count_requests(rig, mark)
    stats.resync_refreshes = rig.op.refreshes() - r0


# ----------------------------------------------------------------------------- shards


#: the shard Leases of the benchmark's operators (the chart's full name for the release)
LEASE_PREFIX = f"{OPERATOR_RELEASE}-inference-capacity"


@dataclass
class ShardedRig(RealRig):
    """The real control plane with ``shards`` operator processes, one per shard."""

    shards: int = 2
    lease_seconds: float = 15.0
    ops: list[OperatorProc] = field(init=False, default_factory=list)

    def _setup(self) -> None:
        base_env, watch_client = self._prepare({**OPERATOR_VALUES, "shards": self.shards})
        before = self._watches()
        for i in range(self.shards):
            env = {
                **self.env,
                "INFERENCE_CAPACITY_SHARDS": str(self.shards),
                "INFERENCE_CAPACITY_SHARD_INDEX": str(i),
                "INFERENCE_CAPACITY_SHARD_LEASE_SECONDS": f"{self.lease_seconds:g}",
                "INFERENCE_CAPACITY_SHARD_LEASE_PREFIX": LEASE_PREFIX,
                "POD_NAMESPACE": OPERATOR_NAMESPACE,
                "POD_ID": f"replica-{i}",
            }
            self.ops.append(
                OperatorProc(base_env, self.workdir / f"operator-{i}.log", env, None).start()
            )
        self.op = self.ops[0]

        def watching() -> bool:
            for op in self.ops:
                if not op.alive():
                    raise RuntimeError(f"an operator exited:\n{op.log_tail()}")
            now = self._watches()
            return all(now[r] >= before[r] + self.shards for r in (PLURAL, "deployments"))

        wait_for(watching, timeout=120, interval=0.2, message="every operator's watches")
        for i in range(self.shards):
            wait_for(
                functools.partial(self.holds, i),
                timeout=120,
                interval=0.2,
                message=f"replica {i} holds its shard",
            )
        self.cache = WatchCache(watch_client).start()

    def __enter__(self) -> ShardedRig:
        super().__enter__()
        return self

    def holds(self, shard: int) -> bool:
        """Whether the shard's Lease is held by its own replica."""
        return self.lease_holder(shard) == f"replica-{shard}"

    def lease_holder(self, shard: int) -> str:
        try:
            lease = client.CoordinationV1Api(self.client).read_namespaced_lease(
                f"{LEASE_PREFIX}-shard-{shard}", OPERATOR_NAMESPACE
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return ""
            raise
        return str((lease.spec.holder_identity if lease.spec else None) or "")

    def __exit__(self, *exc: object) -> None:
        for op in self.ops[1:]:
            op.stop()
        super().__exit__(*exc)


@dataclass
class ShardStats:
    n: int
    shards: int
    lease_seconds: float
    drain_s: float = float("nan")
    done: int = 0
    per_shard: list[int] = field(default_factory=list)
    hwm_mb: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    killed: int = -1
    lease_takeover_s: float = float("nan")
    reconciled_s: float = float("nan")
    reconciled: int = 0
    new_holder: str = ""


def sharded_bulk(
    make_rig: Callable[[Path], ShardedRig],
    workdir: Path,
    n: int,
    namespaces: int,
    threads: int,
    timeout: float,
) -> ShardStats:
    from inference_capacity.controller.sharding import shard_of

    nss = [f"bulk-{k}" for k in range(namespaces)]
    names = [(nss[i % namespaces], f"m{i:04d}") for i in range(n)]
    objs = [o for ns, name in names for o in pair(ns, name, node_selector=BULK_NODE_SELECTOR)]
    with make_rig(workdir) as rig:
        st = ShardStats(n=n, shards=rig.shards, lease_seconds=rig.lease_seconds)
        shard = {key: shard_of(*key, rig.shards) for key in names}
        st.per_shard = [sum(1 for s in shard.values() if s == i) for i in range(rig.shards)]
        for ns in nss:
            rig.namespace(ns)

        def flagged(
            store: Any, keys: list[tuple[str, str]], want: Callable[[list[str]], bool]
        ) -> int:
            return sum(1 for ns, name in keys if want(container_args(store.get(DEP_KEY, ns, name))))

        def progress(store: Any) -> int:
            done = 0
            for ns, name in names:
                icap = store.get(ICAP_KEY, ns, name)
                og = ((icap or {}).get("status") or {}).get("observedGeneration")
                dep = store.get(DEP_KEY, ns, name)
                if og is not None and dep is not None and SEQS in container_args(dep):
                    done += 1
            return done

        t0 = time.monotonic()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(rig.create, objs))
        while time.monotonic() - t0 < timeout:
            st.done = rig.read_store(progress)
            if st.done == n:
                st.drain_s = time.monotonic() - t0
                break
            time.sleep(0.2)
        for op in rig.ops:
            op.snapshot()
        st.hwm_mb = [op.hwm_kb / 1024 for op in rig.ops]
        st.cpu_s = [op.cpu_s for op in rig.ops]
        # kill -9 the last replica, then edit every resource of its shard
        st.killed = rig.shards - 1
        victim = rig.ops[st.killed]
        assert victim.proc is not None
        victim.snapshot()
        t_kill = time.monotonic()
        victim.proc.kill()
        victim.proc.wait()

        def watch_lease() -> None:
            # polled from the kill on, beside the edits (sending 2,500 edits takes minutes)
            while time.monotonic() - t_kill < timeout:
                holder = rig.lease_holder(st.killed)
                if holder and holder != f"replica-{st.killed}":
                    st.lease_takeover_s = time.monotonic() - t_kill
                    st.new_holder = holder
                    return
                time.sleep(0.2)

        lease_watch = threading.Thread(target=watch_lease, daemon=True)
        lease_watch.start()
        edited = [key for key in names if shard[key] == st.killed]
        value = 16384
        with ThreadPoolExecutor(threads) as pool:
            list(
                pool.map(
                    lambda key: rig.patch_icap(
                        key[0], key[1], {"spec": {"workload": {"maxModelLen": value}}}
                    ),
                    edited,
                )
            )
        want = functools.partial(_has_max_model_len, value=str(value))
        while time.monotonic() - t_kill < timeout:
            st.reconciled = rig.read_store(lambda store: flagged(store, edited, want))
            if st.reconciled == len(edited) and st.lease_takeover_s == st.lease_takeover_s:
                st.reconciled_s = time.monotonic() - t_kill
                break
            time.sleep(0.2)
        lease_watch.join(timeout)
        for op in rig.ops:
            op.snapshot()
        st.hwm_mb = [op.hwm_kb / 1024 for op in rig.ops]
        st.cpu_s = [op.cpu_s for op in rig.ops]
    return st


def print_shards(runs: list[ShardStats | None]) -> None:
    for st in runs:
        if st is None:
            print("sharded run: error (see above)")
            continue
        print(
            f"\n## {st.n:,} InferenceCapacities over {st.shards} shards (real control plane, "
            f"pods Pending, Lease {st.lease_seconds:g} s)\n"
        )
        print(
            f"drain (create → every Deployment flagged, every status): {fmt(st.drain_s)} "
            f"({st.done}/{st.n})"
        )
        print("\n| shard | resources | peak RSS (VmHWM) | CPU |")
        print("|---|---:|---:|---:|")
        for i in range(st.shards):
            print(f"| {i} | {st.per_shard[i]} | {st.hwm_mb[i]:.0f} MB | {st.cpu_s[i]:.1f} s |")
        edited = st.per_shard[st.killed]
        print(
            f"\nkill -9 of replica {st.killed}: its Lease held by {st.new_holder or '-'} after "
            f"{fmt(st.lease_takeover_s)}; its {edited} resources, edited right after the kill, "
            f"applied after {fmt(st.reconciled_s)} ({st.reconciled}/{edited})"
        )


# ----------------------------------------------------------------------------- report


def fmt(v: float, unit: str = "s", digits: int = 2) -> str:
    return "—" if v != v else f"{v:.{digits}f} {unit}"


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


Result = tuple[RunStats | None, list[RunStats | None]]


def print_report(results: dict[str, Result], sizes: list[int], edits: int) -> None:
    """One table, one column per cluster (in-memory, real), PASS/FAIL next to each target."""
    modes = list(results)
    print()
    print(
        f"inference-capacity reconcile benchmark — {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}"
    )
    print()
    w, vw = 50, 16

    def row(label: str, cells: list[str], target: str = "") -> None:
        print((f"{label:<{w}}" + "".join(f" {c:>{vw}}" for c in cells) + f" {target:>9}").rstrip())

    def cell(value: str, ok: bool | None = None) -> str:
        return value if ok is None or value == "—" else f"{value} {verdict(ok)}"

    row("measurement", [COLUMNS[m] for m in modes], "target")
    print("-" * (w + (vw + 1) * len(modes) + 10))
    edit_of = {m: results[m][0] for m in modes}
    if any(e is not None for e in edit_of.values()):
        resident = {e.label.partition("@")[2] for e in edit_of.values() if e is not None} - {""}
        resident_note = f", {resident.pop()} resident" if resident else ""
        p50 = {m: pct(e.latencies, 0.5) if e else float("nan") for m, e in edit_of.items()}
        row(
            f"edit → Deployment flags, p50 ({edits} edits{resident_note})",
            [cell(fmt(p50[m]), p50[m] < TARGET_P50_S) for m in modes],
            "< 1 s",
        )
        edit_rows: list[tuple[str, Callable[[RunStats], str]]] = [
            ("edit → Deployment flags, p95", lambda e: fmt(pct(e.latencies, 0.95))),
            ("edit → Deployment flags, max", lambda e: fmt(max(e.latencies, default=0))),
            (
                "edit → status.observedGeneration, p50",
                lambda e: fmt(pct(e.status_latencies, 0.5)),
            ),
            (
                "edit → status.observedGeneration, p95",
                lambda e: fmt(pct(e.status_latencies, 0.95)),
            ),
            ("edits with no result (timeout)", lambda e: str(e.failures)),
        ]
        for label, fn in edit_rows:
            row(label, [fn(e) if e is not None else "—" for e in edit_of.values()])
    for k, n in enumerate(sizes):
        run_of = {m: results[m][1][k] if k < len(results[m][1]) else None for m in modes}
        big = n >= 1000

        def total(r: RunStats | None) -> float:
            if r is None or r.done != r.n:
                return float("nan")
            return max(r.flags_s, r.status_s)

        cells = []
        for m in modes:
            r = run_of[m]
            ok = None
            if big and r is not None:
                ok = r.done == r.n and total(r) <= TARGET_1000_S
            cells.append(cell(fmt(total(r)), ok) if r is not None else "error")
        row(f"reconcile {n:,} (flags + observedGeneration, all)", cells, "< 60 s" if big else "")
        for label, attr in (
            ("  all Deployments carry the flags", "flags_s"),
            ("  all status.observedGeneration set", "status_s"),
            ("  creates done (client, 2 per pair)", "create_s"),
            ("  operator quiet (no request for 2 s)", "quiet_s"),
        ):
            row(label, [fmt(getattr(run_of[m], attr)) if run_of[m] else "—" for m in modes])
        row(
            "  done within the timeout",
            [f"{r.done}/{r.n}" if r else "—" for r in run_of.values()],
        )
    labels: list[tuple[str, int | None]] = [("edits", None)] + [
        (f"bulk {n}", k) for k, n in enumerate(sizes)
    ]
    for label, idx in labels:
        runs_ = {
            m: (results[m][0] if idx is None else (results[m][1][idx : idx + 1] or [None])[0])
            for m in modes
        }
        if all(r is None for r in runs_.values()):
            continue
        row(
            f"operator peak RSS (VmHWM), {label} run",
            [
                cell(fmt(r.hwm_mb, "MB", 0), r.hwm_mb < TARGET_RSS_MB) if r else "—"
                for r in runs_.values()
            ],
            "< 250 MB",
        )
    all_runs = [r for m in modes for r in [results[m][0], *results[m][1]] if r is not None]
    real_setup = [r.setup_s for r in all_runs if r.cluster == "real" and r.setup_s]
    if real_setup:
        print(
            f"(real: a fresh control plane per run, started in "
            f"{min(real_setup):.1f}–{max(real_setup):.1f} s, not counted)"
        )
    print()
    print("Where the time went (CPU seconds inside the measured window; wall = window length;")
    print("operator = the whole process: kopf loop = its main thread (Kopf's asyncio loop),")
    print("handlers = the other threads (the sync handlers, in Kopf's thread pool); server = the")
    print("emulator's thread (in-memory) or etcd + kube-apiserver + KCM + scheduler + kwok (real))")
    print(
        f"{'cluster':<10} {'run':<10} {'wall':>8} {'operator':>9} {'kopf loop':>9} "
        f"{'handlers':>9} {'server':>9} {'bench':>7} {'op req':>7} {'req/obj':>8} "
        f"{'RSS base':>9} {'RSS peak':>9} {'RSS end':>8} {'KB/obj':>7}"
    )
    for r in all_runs:
        nreq = sum(v for k, v in r.requests.items() if " watch " not in k)
        per = nreq / max(r.n, 1)
        req = f"{nreq:>7} {per:>8.1f}" if r.counted else f"{'—':>7} {'—':>8}"
        print(
            f"{COLUMNS[r.cluster]:<10} {r.label:<10} {r.wall_s:>7.1f}s {r.op_cpu_s:>8.1f}s "
            f"{r.op_main_cpu_s:>8.1f}s {r.op_cpu_s - r.op_main_cpu_s:>8.1f}s "
            f"{r.emu_cpu_s:>8.1f}s {r.bench_cpu_s:>6.1f}s {req} {r.base_mb:>7.0f}MB "
            f"{r.hwm_mb:>7.0f}MB {r.steady_mb:>6.0f}MB {r.kb_per_object:>7.1f}"
        )
    print(
        "(RSS end: VmRSS once all are reconciled and the operator quiet; KB/obj: "
        "(RSS end − RSS base) / N, the state each resource keeps)"
    )
    real_runs = [r for r in all_runs if r.cluster == "real"]
    if real_runs:
        print()
        print("real control plane, CPU seconds by component inside the measured window:")
        for r in real_runs:
            parts = "  ".join(f"{k} {v:.1f}s" for k, v in r.server_cpu.items())
            print(f"  {r.label:<10} {parts}")
    for r in all_runs:
        print()
        unit = "edit" if r.label.startswith("edits") else "object"
        print(f"operator requests, {COLUMNS[r.cluster]} {r.label} run (per {unit}):")
        if not r.counted:
            print("  not counted")
        for what, v in r.requests.most_common(14):
            print(f"  {what:<60} {v:>7} {v / max(r.n, 1):>7.2f}")
        if r.reasons:
            print(f"  Applied condition: {dict(r.reasons)}")
        if not math.isnan(r.resync_s):
            print_resync(r)


def print_resync(r: RunStats) -> None:
    n = max(r.resync_refreshes, 1)
    nreq = sum(v for k, v in r.resync_requests.items() if " watch " not in k)
    print(
        f"no-op resync, {COLUMNS[r.cluster]} {r.label} run: {r.resync_refreshes} refreshes in "
        f"{fmt(r.resync_s, digits=1)}, {nreq} requests (watches aside): "
        + (f"{nreq / n:.2f} per refresh" if r.counted else "not counted")
    )
    for what, v in r.resync_requests.most_common(14):
        print(f"  {what:<60} {v:>7} {v / n:>7.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cluster",
        choices=("real", "memory", "both"),
        default="both",
        help="the in-memory test API server, the real control plane (tests/realk8s), or both "
        "side by side (default)",
    )
    ap.add_argument(
        "--sizes",
        default="100,1000",
        help="comma-separated numbers of InferenceCapacities (default 100,1000)",
    )
    ap.add_argument("--edits", type=int, default=30, help="edits for the latency run")
    ap.add_argument("--quick", action="store_true", help="smoke run: --sizes 20 --edits 5")
    ap.add_argument("--namespaces", type=int, default=4, help="namespaces for the bulk runs")
    ap.add_argument("--threads", type=int, default=8, help="client threads creating objects")
    ap.add_argument(
        "--refresh",
        type=float,
        default=300.0,
        help="INFERENCE_CAPACITY_REFRESH_SECONDS (long: no timers in the window)",
    )
    ap.add_argument("--retry", type=float, default=0.5, help="INFERENCE_CAPACITY_RETRY_SECONDS")
    ap.add_argument("--workers", type=int, default=None, help="INFERENCE_CAPACITY_WORKERS")
    ap.add_argument("--timeout", type=float, default=300.0, help="per-run limit in seconds")
    ap.add_argument(
        "--gpu-nodes", type=int, default=4, help="real cluster: kwok GPU Nodes (default 4)"
    )
    ap.add_argument(
        "--gpus-per-node", type=int, default=8, help="real cluster: GPUs per Node (default 8)"
    )
    ap.add_argument(
        "--proxy",
        action="store_true",
        help="real cluster: the operator talks through the fault proxy (no faults), which "
        "counts its requests; default: straight to the kube-apiserver",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="directory for per-run cProfile dumps of the operator (all threads)",
    )
    ap.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="keep operator logs here (default: a temporary directory)",
    )
    ap.add_argument("--skip-edits", action="store_true")
    ap.add_argument(
        "--resident",
        type=int,
        default=0,
        help="edit run: this many other pairs created and reconciled first, resident during "
        "the edits (default 0)",
    )
    ap.add_argument(
        "--drain",
        action="store_true",
        help="bulk runs: create the N pairs while the operator is stopped, then start it (the "
        "backlog after a restart; timed from the operator's start)",
    )
    ap.add_argument(
        "--resync",
        action="store_true",
        help="bulk runs: once all are reconciled, wait until every resource has been "
        "refreshed once more (about --refresh seconds; use e.g. --refresh 60) and print the "
        "requests per no-op refresh",
    )
    ap.add_argument(
        "--shards",
        type=int,
        default=1,
        help="N > 1: N operator processes, one per shard, on the real cluster only: per-shard "
        "RSS, drain time, takeover after kill -9 of one (see the module docstring)",
    )
    ap.add_argument(
        "--lease-seconds", type=float, default=15.0, help="INFERENCE_CAPACITY_SHARD_LEASE_SECONDS"
    )
    a = ap.parse_args(argv)
    sizes = [20] if a.quick else [int(s) for s in a.sizes.split(",") if s.strip()]
    edits = 5 if a.quick else a.edits
    env = {
        "INFERENCE_CAPACITY_REFRESH_SECONDS": str(a.refresh),
        "INFERENCE_CAPACITY_RETRY_SECONDS": str(a.retry),
        "INFERENCE_CAPACITY_WATCH_TIMEOUT": "300",
        # the edit run measures edit -> patch: with the default 300 s pod-template window every
        # edit after the first would be held (and time out); the window has its own tests
        "INFERENCE_CAPACITY_STABILIZATION_SECONDS": "0",
        "INFERENCE_CAPACITY_REPLICA_STABILIZATION_SECONDS": "0",
    }
    if a.workers is not None:
        env["INFERENCE_CAPACITY_WORKERS"] = str(a.workers)
    if a.profile is not None:
        a.profile.mkdir(parents=True, exist_ok=True)
    modes = ["memory", "real"] if a.cluster == "both" else [a.cluster]
    if a.shards > 1:
        return _main_shards(a, sizes, env)

    def prof(mode: str, label: str) -> Path | None:
        if a.profile is None:
            return None
        base: Path = a.profile
        return base / (
            f"operator-{label}.prof" if mode == "memory" else f"operator-real-{label}.prof"
        )

    def memory_rig(workdir: Path, profile: Path | None) -> Rig:
        return Rig(workdir, env, profile)

    def real_rig(workdir: Path, profile: Path | None) -> Rig:
        return RealRig(
            workdir,
            env,
            profile,
            gpu_nodes=a.gpu_nodes,
            gpus_per_node=a.gpus_per_node,
            use_proxy=a.proxy,
        )

    results: dict[str, Result] = {}
    with tempfile.TemporaryDirectory(prefix="reconcile-bench-") as tmp:
        work = a.workdir or Path(tmp)
        for mode in modes:
            make_rig = memory_rig if mode == "memory" else real_rig
            sub = "" if mode == "memory" else "real-"
            edit = None
            if not a.skip_edits and edits > 0:
                print(f"{mode}: edit latency: {edits} edits ...", file=sys.stderr, flush=True)
                edit = _guard(
                    mode,
                    "edits",
                    functools.partial(
                        edit_latency,
                        make_rig,
                        work / f"{sub}edits",
                        edits,
                        30.0,
                        prof(mode, "edits"),
                        a.resident,
                        a.namespaces,
                        a.threads,
                    ),
                )
            runs: list[RunStats | None] = []
            for n in sizes:
                print(f"{mode}: bulk: {n} InferenceCapacities ...", file=sys.stderr, flush=True)
                selector = RealRig.bulk_node_selector if mode == "real" else None
                runs.append(
                    _guard(
                        mode,
                        f"bulk {n}",
                        functools.partial(
                            bulk,
                            make_rig,
                            work / f"{sub}bulk-{n}",
                            n,
                            a.namespaces,
                            a.threads,
                            a.timeout,
                            prof(mode, f"bulk-{n}"),
                            selector,
                            a.drain,
                            a.refresh if a.resync else 0.0,
                        ),
                    )
                )
            results[mode] = (edit, runs)
        print_report(results, sizes, edits)
        if a.workdir:
            print(
                f"\noperator logs (and the real control plane's, under real-*/cluster/logs) "
                f"under {a.workdir}"
            )
    ok = True
    for edit, runs in results.values():
        ok = ok and (edit is None or pct(edit.latencies, 0.5) < TARGET_P50_S)
        ok = ok and all(r is not None and r.hwm_mb < TARGET_RSS_MB and r.done == r.n for r in runs)
    return 0 if ok else 1


def _main_shards(a: argparse.Namespace, sizes: list[int], env: dict[str, str]) -> int:
    def make(workdir: Path) -> ShardedRig:
        return ShardedRig(
            workdir,
            env,
            None,
            gpu_nodes=a.gpu_nodes,
            gpus_per_node=a.gpus_per_node,
            use_proxy=False,
            shards=a.shards,
            lease_seconds=a.lease_seconds,
        )

    runs: list[ShardStats | None] = []
    with tempfile.TemporaryDirectory(prefix="reconcile-bench-") as tmp:
        work = a.workdir or Path(tmp)
        for n in sizes:
            print(f"real: {a.shards} shards: {n} InferenceCapacities ...", file=sys.stderr)
            try:
                runs.append(
                    sharded_bulk(
                        make, work / f"shards-{a.shards}-{n}", n, a.namespaces, a.threads, a.timeout
                    )
                )
            except Exception:  # noqa: BLE001 - reported, the other sizes still run
                import traceback

                traceback.print_exc()
                runs.append(None)
        print_shards(runs)
    ok = all(r is not None and r.done == r.n and r.reconciled_s == r.reconciled_s for r in runs)
    return 0 if ok else 1


def _guard(mode: str, label: str, fn: Callable[[], RunStats]) -> RunStats | None:
    """Run one measurement; a failure is reported (and its column shows "error"), the others
    still run."""
    try:
        return fn()
    except Exception:  # noqa: BLE001 - report every column that could be measured
        import traceback

        print(f"{mode} {label} run failed:", file=sys.stderr)
        traceback.print_exc()
        return None


if __name__ == "__main__":
    sys.exit(main())
