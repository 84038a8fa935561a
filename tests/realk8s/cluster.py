"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok managing fake GPU Nodes, from the binaries ``build.sh`` makes.

What runs, and what is left out (and why):

* kube-apiserver: RBAC authorization, static-token and TokenRequest (ServiceAccount) authentication,
  and the default admission chain. Only ``TaintNodesByCondition`` is disabled: it taints every new
  Node ``node.kubernetes.io/not-ready:NoSchedule`` and only the node-lifecycle-controller (which
  evicts pods when a kubelet stops heartbeating) removes that taint. kwok keeps the Nodes Ready, so
  the taint would only ever block scheduling here. ``ServiceAccount`` admission stays on; the
  serviceaccount-controller creates each namespace's ``default`` ServiceAccount, as in a cluster.
* kube-controller-manager: only the controllers the tests need (deployments, replicasets, garbage
  collector, namespaces, service accounts, pod GC, disruption for PDB status).
* kube-scheduler: the default profile; ``nvidia.com/gpu`` is an extended resource it fits.
* kwok: manages Nodes labelled ``type=kwok`` (Ready, leases) and their Pods (Running/Ready, deleted
  at once when terminating), with kwok's own stages read at build time from its module. It also
  serves the Nodes' kubelet API on loopback (each Node's InternalIP and kubelet port point at it),
  with its ``Logs`` and ``ClusterLogs`` CRDs installed and enabled: a ``ClusterLogs`` object
  (``spec.selector.matchNamespaces``, ``spec.logs[].containers``, ``logsFile`` in the CRI log
  format) makes ``pods/log`` of the real apiserver return that file, as a kubelet would.

Every component logs to ``<workdir>/logs/<name>.log``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(__file__).resolve().parent / "build.sh"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kwok")
DEFAULT_PRODUCT = "NVIDIA-H100-80GB-HBM3"
#: GPU Feature Discovery labels per product: (memory MiB, family, compute major, minor). Values
#: are what GFD prints for these boards (``nvidia.com/gpu.memory`` is the board's MiB).
GFD = {
    "NVIDIA-H100-80GB-HBM3": (81559, "hopper", 9, 0),
    "NVIDIA-A100-SXM4-80GB": (81920, "ampere", 8, 0),
    "NVIDIA-H200": (143771, "hopper", 9, 0),
    "NVIDIA-L4": (23034, "ada-lovelace", 8, 9),
}
READY_TIMEOUT = 120.0
#: kwok's CRDs the cluster serves (``--enable-crds``): pod logs through kwok's kubelet API
KWOK_CRDS = ("Logs", "ClusterLogs")


class ClusterError(RuntimeError):
    """The control plane could not start; the message carries the failing component's log."""


def binaries_dir(build: bool = True) -> Path:
    """The folder with the five binaries: ``REALK8S_BIN``, else ``build.sh``'s (cached) output."""
    explicit = os.environ.get("REALK8S_BIN")
    if explicit:
        path = Path(explicit)
    elif build:
        out = subprocess.run(
            ["bash", str(BUILD)], capture_output=True, text=True, check=False, timeout=5400
        )
        if out.returncode != 0:
            raise ClusterError(f"tests/realk8s/build.sh failed:\n{out.stderr[-4000:]}")
        path = Path(out.stdout.strip().splitlines()[-1])
    else:
        cache = os.environ.get("REALK8S_CACHE") or str(
            Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
            / "inference-capacity"
            / "realk8s"
        )
        path = Path(cache) / "current"
    missing = [b for b in BINARIES if not (path / b).exists()]
    if missing:
        raise ClusterError(f"{path}: missing {', '.join(missing)}; run tests/realk8s/build.sh")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:  # in the child, before exec
    os.setpgrp()
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: IO[bytes]


@dataclass
class Processes:
    logs: Path
    items: list[_Proc] = field(default_factory=list)

    def start(
        self, name: str, argv: Sequence[str | Path], env: dict[str, str] | None = None
    ) -> _Proc:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop_all
        popen = subprocess.Popen(
            [str(a) for a in argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=_die_with_parent,
        )
        proc = _Proc(name, popen, log)
        self.items.append(proc)
        return proc

    def stop(self, proc: _Proc, grace: float = 15.0) -> None:
        if proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
            try:
                proc.popen.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait()
        proc.log.close()

    def stop_all(self) -> None:
        for proc in reversed(self.items):  # kwok, scheduler, KCM, apiserver, etcd
            self.stop(proc)
        self.items.clear()


def _wait_ok(
    url: str,
    proc: _Proc,
    log: Path,
    ctx: ssl.SSLContext | None = None,
    token: str | None = None,
    timeout: float = READY_TIMEOUT,
) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    end = time.monotonic() + timeout
    last = ""
    while time.monotonic() < end:
        if proc.popen.poll() is not None:
            raise ClusterError(f"{proc.name} exited ({proc.popen.returncode}):\n{tail(log, 4000)}")
        try:
            req = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(req, context=ctx, timeout=3) as r:
                if r.status == 200:
                    return
        except OSError as exc:
            last = str(exc)
        time.sleep(0.25)
    raise ClusterError(f"{url} not ready after {timeout:.0f} s ({last}):\n{tail(log, 4000)}")


def tail(path: Path, n: int = 3000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n:].decode(errors="replace")


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *(str(a) for a in args)], check=True, capture_output=True)


def make_pki(d: Path) -> None:
    """A CA, the apiserver's serving certificate (127.0.0.1) and the ServiceAccount signing key."""
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
        "-subj", "/CN=realk8s-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", d / "ca.key", "-out", d / "ca.crt",
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
        "-keyout", d / "apiserver.key", "-out", d / "apiserver.csr",
    )  # fmt: skip
    (d / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", d / "apiserver.csr", "-CA", d / "ca.crt", "-CAkey", d / "ca.key",
        "-CAcreateserial", "-days", "3650", "-extfile", d / "ext.cnf", "-out", d / "apiserver.crt",
    )  # fmt: skip
    _openssl("genrsa", "-out", d / "sa.key", "2048")


def write_kubeconfig(path: Path, server: str, ca: Path, token: str, user: str) -> Path:
    """A kubeconfig with a bearer token (JSON is YAML: kubectl and the clients read it)."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "realk8s",
                "clusters": [
                    {
                        "name": "realk8s",
                        "cluster": {"server": server, "certificate-authority": str(ca)},
                    }
                ],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": "realk8s", "context": {"cluster": "realk8s", "user": user}}],
            },
            indent=1,
        )
    )
    path.chmod(0o600)
    return path


def gpu_node(
    name: str,
    gpus: int,
    product: str = DEFAULT_PRODUCT,
    kwok: bool = True,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node advertising ``nvidia.com/gpu`` with the GPU Feature Discovery labels."""
    mem, family, major, minor = GFD.get(product, (0, "unknown", 0, 0))
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.compute.major": str(major),
        "nvidia.com/gpu.compute.minor": str(minor),
    }
    if mem:
        labels["nvidia.com/gpu.memory"] = str(mem)
    if kwok:
        labels["type"] = "kwok"
    labels.update(extra_labels or {})
    capacity = {"cpu": "64", "memory": "1024Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake"} if kwok else {},
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


class RealCluster:
    """Start with :meth:`start`, stop with :meth:`stop` (every process, in reverse order)."""

    def __init__(
        self,
        workdir: Path,
        gpu_nodes: int = 2,
        gpus_per_node: int = 8,
        gpu_product: str = DEFAULT_PRODUCT,
        bin_dir: Path | None = None,
    ) -> None:
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.gpu_nodes = gpu_nodes
        self.gpus_per_node = gpus_per_node
        self.gpu_product = gpu_product
        self.bin_dir = bin_dir
        self.procs = Processes(self.logs)
        self.server = ""
        self.admin_token = secrets.token_hex(16)
        self.timings: dict[str, float] = {}

    # --- paths ----------------------------------------------------------------------------------
    @property
    def ca(self) -> Path:
        return self.workdir / "ca.crt"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    def bin(self, name: str) -> Path:
        assert self.bin_dir is not None
        return self.bin_dir / name

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> RealCluster:
        t0 = time.monotonic()
        self.logs.mkdir(parents=True, exist_ok=True)
        if self.bin_dir is None:
            self.bin_dir = binaries_dir()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - t0
        return self

    def _start(self) -> None:
        d = self.workdir
        make_pki(d)
        (d / "tokens.csv").write_text(
            f'{self.admin_token},realk8s-admin,realk8s-admin,"system:masters"\n'
        )
        etcd_port, peer_port, api_port, kcm_port, sch_port = (free_port() for _ in range(5))
        self.kubelet_port = free_port()
        self.server = f"https://127.0.0.1:{api_port}"

        etcd = self.procs.start(
            "etcd",
            [
                self.bin("etcd"), "--name=realk8s", f"--data-dir={d / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=realk8s=http://127.0.0.1:{peer_port}",
                "--listen-metrics-urls=", "--unsafe-no-fsync=true", "--log-level=warn",
            ],
        )  # fmt: skip
        _wait_ok(f"http://127.0.0.1:{etcd_port}/health", etcd, self.logs / "etcd.log")
        self.timings["etcd"] = time.monotonic()

        api = self.procs.start(
            "kube-apiserver",
            [
                self.bin("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                # a loopback advertise address is not valid for the kubernetes Endpoints object
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--cert-dir={d / 'certs'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={d / 'sa.key'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                f"--token-auth-file={d / 'tokens.csv'}",
                f"--client-ca-file={d / 'ca.crt'}",
                "--authorization-mode=RBAC",
                "--disable-admission-plugins=TaintNodesByCondition",
                "--allow-privileged=true",
                # pods/log, exec and port-forward go to the Node's InternalIP (kwok's, loopback)
                # at the port the Node reports (kwok's kubelet API); kwok serves it with a
                # self-signed certificate, so no --kubelet-certificate-authority (not verified)
                "--kubelet-preferred-address-types=InternalIP",
                "--v=1",
            ],
        )  # fmt: skip
        ctx = ssl.create_default_context(cafile=str(self.ca))
        _wait_ok(
            f"{self.server}/readyz", api, self.logs / "kube-apiserver.log", ctx, self.admin_token
        )
        write_kubeconfig(self.admin_kubeconfig, self.server, self.ca, self.admin_token, "admin")

        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # KCM and the scheduler self-sign their /healthz
        common = [
            f"--kubeconfig={self.admin_kubeconfig}",
            f"--authentication-kubeconfig={self.admin_kubeconfig}",
            f"--authorization-kubeconfig={self.admin_kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--v=1",
        ]
        kcm = self.procs.start(
            "kube-controller-manager",
            [
                self.bin("kube-controller-manager"), *common, f"--secure-port={kcm_port}",
                f"--cert-dir={d / 'kcm-certs'}",
                "--controllers=deployment-controller,replicaset-controller,"
                "garbage-collector-controller,namespace-controller,serviceaccount-controller,"
                "pod-garbage-collector-controller,disruption-controller",
                "--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
                "--kube-api-qps=200", "--kube-api-burst=400",
            ],
        )  # fmt: skip
        sch = self.procs.start(
            "kube-scheduler",
            [
                self.bin("kube-scheduler"), *common, f"--secure-port={sch_port}",
                f"--cert-dir={d / 'scheduler-certs'}",
                "--kube-api-qps=200", "--kube-api-burst=400",
            ],
        )  # fmt: skip
        home = d / "kwok-home"
        home.mkdir(exist_ok=True)
        self.install_kwok_crds()
        kwok = self.procs.start(
            "kwok",
            [
                self.bin("kwok"), f"--kubeconfig={self.admin_kubeconfig}",
                f"--config={self.bin('kwok-stages.yaml')}",
                "--manage-all-nodes=false", "--manage-nodes-with-label-selector=type=kwok",
                "--cidr=10.244.0.0/16",
                # the kubelet API of every kwok Node: kwok's server on loopback, the Nodes'
                # InternalIP and daemonEndpoints port set to it (kwok's node-initialize stage),
                # serving pod logs from the Logs / ClusterLogs objects (kubectl apply them)
                "--node-ip=127.0.0.1", f"--node-port={self.kubelet_port}",
                f"--server-address=127.0.0.1:{self.kubelet_port}",
                f"--enable-crds={','.join(KWOK_CRDS)}",
                "--node-lease-duration-seconds=40",
            ],
            env={**os.environ, "HOME": str(home)},
        )  # fmt: skip
        _wait_ok(
            f"https://127.0.0.1:{kcm_port}/healthz",
            kcm,
            self.logs / "kube-controller-manager.log",
            insecure,
        )
        _wait_ok(
            f"https://127.0.0.1:{sch_port}/healthz", sch, self.logs / "kube-scheduler.log", insecure
        )
        if kwok.popen.poll() is not None:
            raise ClusterError(f"kwok exited:\n{tail(self.logs / 'kwok.log')}")
        nodes = [
            gpu_node(f"gpu-node-{i}", self.gpus_per_node, self.gpu_product)
            for i in range(self.gpu_nodes)
        ]
        if nodes:
            self.create(*nodes)
            self.wait_nodes_ready([n["metadata"]["name"] for n in nodes])
        self.wait_default_serviceaccount("default")

    def stop(self) -> None:
        self.procs.stop_all()

    def install_kwok_crds(self, timeout: float = 60.0) -> None:
        """kwok's ``Logs`` and ``ClusterLogs`` CRDs (copied from kwok's module by build.sh), so
        ``kubectl apply`` of a ``ClusterLogs`` points pods' logs at a file kwok serves."""
        import yaml  # the tests' and the standalone mode's venv has it

        folder = self.bin("kwok-crds")
        names = []
        for kind in KWOK_CRDS:
            path = folder / f"kwok.x-k8s.io_{kind.lower()}.yaml"
            if not path.exists():
                raise ClusterError(f"{path}: missing; run tests/realk8s/build.sh")
            crd = yaml.safe_load(path.read_text())
            self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            names.append(crd["metadata"]["name"])
        end = time.monotonic() + timeout
        for name in names:
            while True:
                got = self.request(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
                # a CRD just created can answer with "conditions": null
                status = got.get("status") or {}
                conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > end:
                    raise ClusterError(f"CRD {name} not Established")
                time.sleep(0.2)

    def alive(self) -> list[str]:
        """Names of components that have exited."""
        return [p.name for p in self.procs.items if p.popen.poll() is not None]

    # --- API access (stdlib only, so the standalone mode needs nothing installed) --------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        content_type: str = "application/json",
    ) -> Any:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {token or self.admin_token}",
                "Content-Type": content_type,
                "Accept": "application/json",
            },
        )
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return json.loads(r.read() or b"null")

    def create(self, *objs: dict[str, Any]) -> None:
        """Create Nodes (with their status: a kubelet registers a Node the same way)."""
        for obj in objs:
            assert obj["kind"] == "Node", obj["kind"]
            self.request("POST", "/api/v1/nodes", obj)

    def wait_nodes_ready(self, names: list[str], timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        pending = set(names)
        while time.monotonic() < end:
            items = self.request("GET", "/api/v1/nodes")["items"]
            for n in items:
                conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions", [])}
                if conds.get("Ready") == "True":
                    pending.discard(n["metadata"]["name"])
            if not pending:
                return
            time.sleep(0.25)
        raise ClusterError(f"nodes not Ready: {sorted(pending)}\n{tail(self.logs / 'kwok.log')}")

    def wait_default_serviceaccount(self, namespace: str, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                self.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
                return
            except OSError:
                time.sleep(0.2)
        raise ClusterError(f"no default ServiceAccount in {namespace}")

    def serviceaccount_token(self, namespace: str, name: str, seconds: int = 86400) -> str:
        """A token for a ServiceAccount, minted by the TokenRequest API."""
        out = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        token: str = out["status"]["token"]
        return token

    def serviceaccount_kubeconfig(
        self, namespace: str, name: str, path: Path, server: str | None = None
    ) -> Path:
        """A kubeconfig authenticating as ``system:serviceaccount:NAMESPACE:NAME``."""
        token = self.serviceaccount_token(namespace, name)
        return write_kubeconfig(
            path, server or self.server, self.ca, token, f"system:serviceaccount:{namespace}:{name}"
        )

    def log_tails(self, n: int = 2500) -> str:
        """The end of every component's log, without the lines that repeat all the time."""
        parts = []
        for log in sorted(self.logs.glob("*.log")):
            lines = [
                line
                for line in tail(log, 200_000).splitlines()
                if not any(noise in line for noise in _LOG_NOISE)
            ]
            text = "\n".join(lines)[-n:]
            parts.append(f"----- {log.name} (last {n} bytes, routine lines left out) -----\n{text}")
        return "\n".join(parts)


#: routine lines of a healthy control plane: the requestheader CA bundle that KCM and the scheduler
#: look for (no front proxy here), optimistic-concurrency retries, kwok's heartbeats
_LOG_NOISE = (
    "extension-apiserver-authentication",
    "is not as new as written version",
    "Syncing lease",
    "the object has been modified",
    "cacher (",
    "quota admission added evaluator",
)


@contextlib.contextmanager
def running(workdir: Path, **kwargs: Any) -> Iterator[RealCluster]:
    cluster = RealCluster(workdir, **kwargs).start()
    try:
        yield cluster
    finally:
        cluster.stop()
