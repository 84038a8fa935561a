"""Run the real operator (``inference-capacity run``, i.e. Kopf) as a subprocess against the real
control plane (``tests/realk8s``), as the chart's ServiceAccount with the chart's RBAC, through the
fault-injecting proxy; and helpers to wait for what it does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realk8s.cluster import gpu_node
from tests.realk8s.fixtures import RealKubeAPI, wait_for

ROOT = Path(__file__).resolve().parent.parent
CRD = ROOT / "crds" / "inferencecapacities.capacity.inference.dev.yaml"


class Operator:
    """``inference-capacity run --standalone`` in a subprocess, logs to a file."""

    def __init__(
        self,
        api: RealKubeAPI,
        log_path: Path,
        refresh: float = 2.0,
        extra_env: dict[str, str] | None = None,
        run_args: tuple[str, ...] = ("--standalone",),
        rbac_values: dict[str, Any] | None = None,
        release: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.api = api
        self.log_path = log_path
        self.refresh = refresh
        self.extra_env = extra_env or {}
        self.run_args = run_args
        self.rbac_values = rbac_values
        self.base_env = env
        self.release = release
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()
        self.health_port = free_port()

    def start(self) -> Operator:
        env = (
            dict(self.base_env)
            if self.base_env is not None
            else self.api.operator_env(self.rbac_values, self.release)
        )
        env.update(
            {
                "INFERENCE_CAPACITY_REFRESH_SECONDS": str(self.refresh),
                "INFERENCE_CAPACITY_RETRY_SECONDS": "0.5",
                "INFERENCE_CAPACITY_WATCH_TIMEOUT": "30",
                "INFERENCE_CAPACITY_NODES_TTL_SECONDS": "0",
                "INFERENCE_CAPACITY_HPA_TTL_SECONDS": "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        exe = Path(sys.executable).parent / "inference-capacity"
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "inference_capacity.cli"]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                *cmd,
                "run",
                *self.run_args,
                "--metrics-port",
                str(self.metrics_port),
                "--liveness",
                f"http://127.0.0.1:{self.health_port}/healthz",
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if getattr(self, "_log", None):
            self._log.close()

    def kill(self) -> None:
        """Crash it (SIGKILL): no graceful shutdown."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def assert_alive(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, self.log()[-3000:]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def load_example(name: str, namespace: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if d]
    for d in docs:
        d["metadata"]["namespace"] = namespace
    return docs


class Cluster:
    """One API server and one operator shared by a test module; each test uses a namespace."""

    def __init__(self, api: RealKubeAPI, operator: Operator) -> None:
        self.api = api
        self.operator = operator
        self._n = 0
        self.namespaces: list[str] = []
        #: where this module's operator begins in the proxy's (session-wide) request log
        self.requests_from = 0

    def operator_requests(self) -> list[Any]:
        """The requests this module's operator made (through the proxy)."""
        return self.api.requests.records()[self.requests_from :]

    def namespace(self, prefix: str = "t") -> str:
        """A new namespace (deleted when the module ends), once its ``default`` ServiceAccount
        exists: the ServiceAccount admission plugin refuses pods until then."""
        self._n += 1
        ns = f"{prefix}-{self._n}"
        self.api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self.namespaces.append(ns)
        self.api.cluster.wait_default_serviceaccount(ns)
        return ns

    def deployment(self, ns: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.api.get_json("deployment", name, "-n", ns)
        return out

    def icap(self, ns: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.api.get_json("inferencecapacity", name, "-n", ns)
        return out

    def container(self, ns: str, name: str) -> dict[str, Any]:
        c: dict[str, Any] = self.deployment(ns, name)["spec"]["template"]["spec"]["containers"][0]
        return c

    def condition(self, ns: str, name: str, type_: str) -> dict[str, Any] | None:
        for c in (self.icap(ns, name).get("status") or {}).get("conditions", []):
            if c["type"] == type_:
                return dict(c)
        return None

    def wait_condition(
        self,
        ns: str,
        name: str,
        type_: str,
        status: str,
        reason: str | None = None,
        timeout: float = 60,
    ) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            c = self.condition(ns, name, type_)
            if c and c["status"] == status and (reason is None or c["reason"] == reason):
                return c
            return None

        try:
            out: dict[str, Any] = wait_for(
                check,
                timeout=timeout,
                interval=0.2,
                message=f"{type_}={status} ({reason}) on {ns}/{name}",
            )
        except AssertionError:
            st = (self.icap(ns, name).get("status") or {}).get("conditions")
            raise AssertionError(
                f"{type_}={status}/{reason} not reached; conditions: {st}\n{self.diagnostics()}"
            ) from None
        return out

    def wait_args(
        self, ns: str, name: str, predicate: Callable[[list[str]], bool], timeout: float = 60
    ) -> list[str]:
        def check() -> list[str] | None:
            c = self.container(ns, name)
            args = [*(c.get("command") or []), *(c.get("args") or [])]
            return args if predicate(args) else None

        try:
            out: list[str] = wait_for(
                check, timeout=timeout, interval=0.2, message=f"args of {ns}/{name}"
            )
        except AssertionError:
            conds = (
                [
                    (x["type"], x["status"], x["reason"], x.get("message", "")[:300])
                    for x in (self.icap(ns, name).get("status") or {}).get("conditions", [])
                ]
                if self.api.kubectl("get", "icap", name, "-n", ns, check=False).returncode == 0
                else []
            )
            raise AssertionError(
                f"args not as expected: {self.container(ns, name)}\nconditions: {conds}\n"
                f"{self.diagnostics()}"
            ) from None
        return out

    def diagnostics(self) -> str:
        """What a failing wait prints: requests the apiserver refused with 403 (RBAC), and the
        operator's log tail."""
        forbidden = [
            f"  {r.method} {r.path} -> 403 ({r.verb} {r.group}/{r.resource})"
            for r in self.operator_requests()
            if r.rbac_denied
        ]
        head = "operator requests forbidden by RBAC:\n" + "\n".join(forbidden[-10:]) + "\n"
        return (head if forbidden else "") + f"operator log tail:\n{self.operator.log()[-2500:]}"

    def patch_icap(self, ns: str, name: str, body: dict[str, Any]) -> None:
        """Merge-patch an InferenceCapacity (``kubectl patch icap --type=merge``)."""
        self.api.kubectl("patch", "icap", name, "-n", ns, "--type=merge", "-p", json.dumps(body))

    def patch_container(self, ns: str, name: str, container: dict[str, Any]) -> None:
        """Strategic-merge ``container`` (it names the container) into a Deployment, as a
        person editing it by hand would."""
        body = {"spec": {"template": {"spec": {"containers": [container]}}}}
        self.api.kubectl(
            "patch", "deployment", name, "-n", ns, "--type=strategic", "-p", json.dumps(body)
        )

    def node_pool(self, ns: str, gpus: list[int]) -> list[str]:
        """kwok GPU Nodes of their own (label ``pool=<ns>``), Ready: a test whose pods select
        them does not depend on how the scheduler spread other tests' pods."""
        names = [f"{ns}-n{i}" for i in range(len(gpus))]
        self.api.cluster.create(
            *(gpu_node(n, g, extra_labels={"pool": ns}) for n, g in zip(names, gpus, strict=True))
        )
        self.api.cluster.wait_nodes_ready(names)
        return names

    def delete_node_pool(self, ns: str, names: list[str]) -> None:
        """The Deployments first (kwok deletes their pods while it still manages their Nodes),
        then the Nodes: a Pod left on a deleted Node waits for the pod GC's 40 s quarantine."""
        self.api.kubectl("delete", "deployment", "--all", "-n", ns, "--wait=true", check=False)
        self.api.kubectl("delete", "node", *names, "--ignore-not-found", check=False)

    def events(self, ns: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.get_json("events", "-n", ns)["items"]
        return items


def flag_value(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def apply_crd(api: RealKubeAPI) -> None:
    """The CRD from ``crds/``, applied with kubectl and waited for until Established."""
    api.kubectl("apply", "-f", str(CRD))
    api.kubectl(
        "wait",
        "--for=condition=Established",
        "crd/inferencecapacities.capacity.inference.dev",
        "--timeout=60s",
    )


@pytest.fixture(scope="module")
def cluster(real_kube: RealKubeAPI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Module-wide: the session's real control plane, the CRD applied with kubectl, an operator
    running as the chart's ServiceAccount. The module's namespaces are deleted at its end."""
    work = tmp_path_factory.mktemp("cluster")
    apply_crd(real_kube)
    real_kube.faults.clear()
    start = len(real_kube.requests)
    op = Operator(real_kube, work / "operator.log").start()
    c = Cluster(real_kube, op)
    c.requests_from = start
    try:
        yield c
    finally:
        real_kube.faults.clear()
        # waited for: the next module's operator would otherwise reconcile what is left
        real_kube.delete_namespaces(c.namespaces, wait=True)
        op.stop()


def poll(seconds: float) -> None:
    time.sleep(seconds)


__all__ = [
    "Cluster",
    "Operator",
    "apply_crd",
    "cluster",
    "flag_value",
    "load_example",
    "poll",
    "os",
]
