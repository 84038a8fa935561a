"""Reconcile latency, bulk throughput and memory of the operator, end to end.

Starts the in-memory Kubernetes API server of the tests (``tests/kubeapi``) in this process, as
the integration tests do, and the real operator (``inference-capacity run --standalone``, Kopf)
as a subprocess, then measures:

1. edit latency: a material edit of an InferenceCapacity (``spec.workload.maxModelLen`` and
   ``spec.model.kvCacheDtype``, alternating) until the Deployment carries the new flag, and
   until ``status.observedGeneration`` catches up; p50/p95 over ``--edits`` edits;
2. bulk reconcile: N InferenceCapacities and their Deployments created at once (thread pool,
   kubernetes client) until every Deployment carries the flags and every InferenceCapacity has
   ``status.observedGeneration``; one fresh API server and operator per size;
3. the operator's peak RSS (``VmHWM``) and CPU time in every run, next to the emulator's CPU
   time (the server thread of this process), to tell which side is the bottleneck.

Targets: edit→flags p50 < 1 s; 1,000 InferenceCapacities < 60 s on 2 cores; RSS < 250 MB.

    python benchmarks/reconcile.py [--sizes 100,1000] [--edits 30] [--quick]
    python benchmarks/reconcile.py --quick --profile /tmp/prof   # per-thread cProfile dumps
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kubernetes import client, config  # noqa: E402
from tests.kubeapi.fixtures import KubeAPI, wait_for  # noqa: E402
from tests.kubeapi.server import KubeAPIServer  # noqa: E402
from tests.operator_harness import (  # noqa: E402
    CRD,
    flag_value,  # noqa: E402
    load_example,
)

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
        self, api: KubeAPI, log_path: Path, env: dict[str, str], profile: Path | None = None
    ) -> None:
        self.api = api
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
        env = dict(self.api.env)
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"
        run = ["run", "--standalone", "--metrics-port", "0", "--liveness", ""]
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
            self.api, self.workdir / "operator.log", self.env, self.profile
        ).start()
        self._wait_watching()
        return self

    def __exit__(self, *exc: object) -> None:
        self.op.stop()
        self.client.close()  # type: ignore[no-untyped-call]
        self.server.stop()

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


def pair(ns: str, name: str, kv_policy: bool = False) -> list[dict[str, Any]]:
    """The example's InferenceCapacity and Deployment, renamed."""
    icap, dep = load_example(EXAMPLE, ns)
    icap["metadata"]["name"] = name
    icap["spec"]["targetRef"]["name"] = name
    if kv_policy:
        icap["spec"]["policy"]["setKvCacheDtype"] = True
    dep["metadata"]["name"] = name
    dep["metadata"]["labels"] = {"app": name}
    dep["spec"]["selector"] = {"matchLabels": {"app": name}}
    dep["spec"]["template"]["metadata"]["labels"] = {"app": name}
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


class CpuWindow:
    """CPU seconds used by the operator, the emulator thread and the rest of this process."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.op0 = proc_cpu(rig.op.pid)
        self.threads0 = thread_cpu(rig.op.pid)
        self.emu0 = rig.emulator_cpu()
        self.me0 = time.process_time()

    def close(self, stats: RunStats) -> None:
        stats.op_cpu_s = proc_cpu(self.rig.op.pid) - self.op0
        pid = self.rig.op.pid
        stats.op_main_cpu_s = thread_cpu(pid).get(pid, 0.0) - self.threads0.get(pid, 0.0)
        stats.emu_cpu_s = self.rig.emulator_cpu() - self.emu0
        stats.bench_cpu_s = time.process_time() - self.me0 - stats.emu_cpu_s


def count_requests(rig: Rig, since: int) -> Counter[str]:
    out: Counter[str] = Counter()
    for r in rig.operator_requests()[since:]:
        res = f"{r.resource}/{r.subresource}" if r.subresource else r.resource
        who = "kopf" if r.user_agent.startswith("kopf") else "client"
        out[f"{who} {r.verb} {res or r.path.split('?')[0]}"] += 1
    return out


def wait_quiet(rig: Rig, quiet_for: float, timeout: float) -> float:
    """Seconds until the operator has sent no request (but watches) for ``quiet_for``."""
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


def edit_latency(
    workdir: Path, env: dict[str, str], edits: int, timeout: float, profile: Path | None
) -> RunStats:
    stats = RunStats(label="edits", n=edits)
    ns, name = "edit", "llama-8b"
    with Rig(workdir, env, profile) as rig:
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
        req0 = len(rig.operator_requests())
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
    workdir: Path,
    env: dict[str, str],
    n: int,
    namespaces: int,
    threads: int,
    timeout: float,
    profile: Path | None,
) -> RunStats:
    stats = RunStats(label=f"bulk {n}", n=n)
    nss = [f"bulk-{k}" for k in range(namespaces)]
    objs = [o for i in range(n) for o in pair(nss[i % namespaces], f"m{i:04d}")]
    names = [(nss[i % namespaces], f"m{i:04d}") for i in range(n)]
    with Rig(workdir, env, profile) as rig:
        for ns in nss:
            rig.namespace(ns)
        time.sleep(0.3)
        stats.base_mb = proc_kb(rig.op.pid, "VmRSS") / 1024
        req0 = len(rig.operator_requests())

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

        cpu = CpuWindow(rig)
        t0 = time.monotonic()
        created = threading.Event()

        def create_all() -> None:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(rig.create, objs))
            stats.create_s = time.monotonic() - t0
            created.set()

        creator = threading.Thread(target=create_all, name="creator", daemon=True)
        creator.start()
        last = (0, 0)
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


# ----------------------------------------------------------------------------- report


def fmt(v: float, unit: str = "s", digits: int = 2) -> str:
    return "—" if v != v else f"{v:.{digits}f} {unit}"


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def print_report(edit: RunStats | None, runs: list[RunStats]) -> None:
    print()
    print(
        f"inference-capacity reconcile benchmark — {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}"
    )
    print()
    w = 52
    print(f"{'measurement':<{w}} {'measured':>12} {'target':>10} {'':>5}")
    print("-" * (w + 30))
    if edit is not None:
        p50, p95 = pct(edit.latencies, 0.5), pct(edit.latencies, 0.95)
        n = len(edit.latencies)
        print(
            f"{f'edit → Deployment flags, p50 ({n} edits)':<{w}} {fmt(p50):>12} "
            f"{'< 1 s':>10} {verdict(p50 < TARGET_P50_S):>5}"
        )
        print(f"{'edit → Deployment flags, p95':<{w}} {fmt(p95):>12} {'':>10}")
        print(f"{'edit → Deployment flags, max':<{w}} {fmt(max(edit.latencies, default=0)):>12}")
        sp50, sp95 = pct(edit.status_latencies, 0.5), pct(edit.status_latencies, 0.95)
        print(
            f"{'edit → status.observedGeneration, p50 / p95':<{w}} "
            f"{fmt(sp50) + ' / ' + fmt(sp95):>12}"
        )
        if edit.failures:
            print(f"{'edits with no result (timeout)':<{w}} {edit.failures:>12}")
    for r in runs:
        target = "< 60 s" if r.n >= 1000 else ""
        ok = (r.status_s <= TARGET_1000_S and r.flags_s <= TARGET_1000_S) if r.n >= 1000 else None
        total = max(r.flags_s, r.status_s) if r.done == r.n else float("nan")
        label = f"reconcile {r.n:,} (flags + observedGeneration on all)"
        print(
            f"{label:<{w}} {fmt(total):>12} {target:>10} {verdict(ok) if ok is not None else '':>5}"
        )
        print(f"{'  all Deployments carry the flags':<{w}} {fmt(r.flags_s):>12}")
        print(f"{'  all status.observedGeneration set':<{w}} {fmt(r.status_s):>12}")
        print(f"{'  creates done (client, 2 per pair)':<{w}} {fmt(r.create_s):>12}")
        print(f"{'  operator quiet (no request for 2 s)':<{w}} {fmt(r.quiet_s):>12}")
        if r.done != r.n:
            print(f"{'  done within the timeout':<{w}} {f'{r.done}/{r.n}':>12}")
    for r in [*([edit] if edit else []), *runs]:
        label = f"operator peak RSS (VmHWM), {r.label} run"
        print(
            f"{label:<{w}} {fmt(r.hwm_mb, 'MB', 0):>12} {'< 250 MB':>10} "
            f"{verdict(r.hwm_mb < TARGET_RSS_MB):>5}"
        )
    print()
    print("Where the time went (CPU seconds inside the measured window; wall = window length;")
    print("operator = the whole process: kopf loop = its main thread (Kopf's asyncio loop),")
    print("handlers = the other threads (the sync handlers, in Kopf's thread pool))")
    print(
        f"{'run':<12} {'wall':>8} {'operator':>9} {'kopf loop':>9} {'handlers':>9} "
        f"{'emulator':>9} {'bench':>7} {'op req':>7} {'req/obj':>8} {'RSS base':>9} "
        f"{'RSS peak':>9}"
    )
    for r in [*([edit] if edit else []), *runs]:
        nreq = sum(v for k, v in r.requests.items() if " watch " not in k)
        per = nreq / max(r.n, 1)
        print(
            f"{r.label:<12} {r.wall_s:>7.1f}s {r.op_cpu_s:>8.1f}s {r.op_main_cpu_s:>8.1f}s "
            f"{r.op_cpu_s - r.op_main_cpu_s:>8.1f}s {r.emu_cpu_s:>8.1f}s "
            f"{r.bench_cpu_s:>6.1f}s {nreq:>7} {per:>8.1f} {r.base_mb:>7.0f}MB "
            f"{r.hwm_mb:>7.0f}MB"
        )
    for r in [*([edit] if edit else []), *runs]:
        print()
        print(f"operator requests, {r.label} run (per {'edit' if r is edit else 'object'}):")
        for k, v in r.requests.most_common(14):
            print(f"  {k:<60} {v:>7} {v / max(r.n, 1):>7.2f}")
        if r.reasons:
            print(f"  Applied condition: {dict(r.reasons)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    a = ap.parse_args(argv)
    sizes = [20] if a.quick else [int(s) for s in a.sizes.split(",") if s.strip()]
    edits = 5 if a.quick else a.edits
    env = {
        "INFERENCE_CAPACITY_REFRESH_SECONDS": str(a.refresh),
        "INFERENCE_CAPACITY_RETRY_SECONDS": str(a.retry),
        "INFERENCE_CAPACITY_WATCH_TIMEOUT": "300",
    }
    if a.workers is not None:
        env["INFERENCE_CAPACITY_WORKERS"] = str(a.workers)
    if a.profile is not None:
        a.profile.mkdir(parents=True, exist_ok=True)

    def prof(label: str) -> Path | None:
        return a.profile / f"operator-{label}.prof" if a.profile is not None else None

    with tempfile.TemporaryDirectory(prefix="reconcile-bench-") as tmp:
        work = a.workdir or Path(tmp)
        edit = None
        if not a.skip_edits and edits > 0:
            print(f"edit latency: {edits} edits ...", file=sys.stderr, flush=True)
            edit = edit_latency(work / "edits", env, edits, 30.0, prof("edits"))
        runs = []
        for n in sizes:
            print(f"bulk: {n} InferenceCapacities ...", file=sys.stderr, flush=True)
            runs.append(
                bulk(
                    work / f"bulk-{n}",
                    env,
                    n,
                    a.namespaces,
                    a.threads,
                    a.timeout,
                    prof(f"bulk-{n}"),
                )
            )
        print_report(edit, runs)
        if a.workdir:
            print(f"\noperator logs under {a.workdir}")
    ok = (edit is None or pct(edit.latencies, 0.5) < TARGET_P50_S) and all(
        r.hwm_mb < TARGET_RSS_MB and r.done == r.n for r in runs
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
