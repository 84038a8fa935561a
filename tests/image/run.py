"""``python -m tests.image.run --image OUTDIR --kubeconfig K``: the operator image, started.

Unpacks the OCI layout OUTDIR (``tests/image/build.sh``) with ``umoci`` and starts the image's
own entrypoint and user with ``crun``, as the chart's pod runs it: the chart's ServiceAccount
(its RBAC applied with K's admin credentials) with a TokenRequest token, ``ca.crt`` and
``namespace`` mounted at /var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST
and _PORT set, a read-only root filesystem with a tmpfs /tmp, and no shell (/usr/bin/sh, dash
and bash masked by /dev/null). It shares the host's network (the control plane listens on
loopback). Prints ``running`` once the operator inside has logged in (Kopf's login activity
succeeded), its log after that to stderr, and stops the container on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
NAMESPACE = "icap-operator"
SHELLS = ("/usr/bin/sh", "/usr/bin/dash", "/usr/bin/bash")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubectl(kubeconfig: Path, *args: str, input: str | None = None) -> str:
    from tests.realk8s.fixtures import kubectl_path

    r = subprocess.run(
        [kubectl_path(), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True, text=True, input=input, timeout=120,
    )  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def serviceaccount(kubeconfig: Path, secrets: Path) -> tuple[str, int]:
    """Apply the chart's ServiceAccount and RBAC; write token, ca.crt and namespace into
    ``secrets``; return the API server's host and port."""
    from tests.realk8s.fixtures import OPERATOR_VALUES, chart_rbac

    docs = chart_rbac(OPERATOR_VALUES)
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    kubectl(kubeconfig, "apply", "-f", "-", input=yaml.safe_dump_all([ns, *docs]))
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    token = kubectl(kubeconfig, "create", "token", sa, "-n", NAMESPACE, "--duration=2h").strip()
    cfg = yaml.safe_load(kubeconfig.read_text())
    cluster = cfg["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        ca = base64.b64decode(cluster["certificate-authority-data"])
    else:
        ca = (kubeconfig.parent / cluster["certificate-authority"]).read_bytes()
    secrets.mkdir(parents=True, exist_ok=True)
    (secrets / "token").write_text(token)
    (secrets / "ca.crt").write_bytes(ca)
    (secrets / "namespace").write_text(NAMESPACE)
    for f in secrets.iterdir():
        f.chmod(0o644)
    url = urllib.parse.urlsplit(cluster["server"])
    return url.hostname or "127.0.0.1", url.port or 443


def configure(
    bundle: Path, secrets: Path, host: str, port: int, health: int, metrics: int
) -> dict[str, Any]:
    """The runtime spec umoci wrote from the image's config, made into the chart's pod."""
    path = bundle / "config.json"
    spec: dict[str, Any] = json.loads(path.read_text())
    proc = spec["process"]
    # the chart's args (deployment.yaml), on free ports of the shared network
    proc["args"] = [*proc["args"], "--standalone", f"--liveness=http://127.0.0.1:{health}/healthz",
                    f"--metrics-port={metrics}"]  # fmt: skip
    proc["env"] = [e for e in proc.get("env", []) if not e.startswith("KUBERNETES_SERVICE_")]
    proc["env"] += [f"KUBERNETES_SERVICE_HOST={host}", f"KUBERNETES_SERVICE_PORT={port}"]
    proc["terminal"] = False
    spec["root"] = {"path": "rootfs", "readonly": True}
    rootfs = bundle / "rootfs"
    # the mount points exist in the image (a read-only root cannot get new ones)
    (rootfs / SA_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
    spec["mounts"] += [
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "nodev", "mode=1777", "size=256m"]},
        {"destination": SA_DIR, "type": "bind", "source": str(secrets),
         "options": ["rbind", "ro"]},
        {"destination": "/etc/resolv.conf", "type": "bind", "source": "/etc/resolv.conf",
         "options": ["rbind", "ro"]},
    ]  # fmt: skip
    for sh in SHELLS:
        if (rootfs / sh.lstrip("/")).exists() or (rootfs / sh.lstrip("/")).is_symlink():
            spec["mounts"].append(
                {
                    "destination": sh,
                    "type": "bind",
                    "source": "/dev/null",
                    "options": ["bind", "ro"],
                }
            )
    ns = spec["linux"]["namespaces"]
    spec["linux"]["namespaces"] = [n for n in ns if n["type"] != "network"]
    path.write_text(json.dumps(spec, indent=2))
    return spec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.image.run", description=__doc__)
    p.add_argument("--image", required=True, type=Path, help="OCI layout (build.sh OUTDIR)")
    p.add_argument("--kubeconfig", required=True, type=Path, help="the cluster's admin kubeconfig")
    p.add_argument("--tag", default="latest")
    p.add_argument("--workdir", type=Path, help="bundle and secrets (default: a temporary one)")
    args = p.parse_args(argv)
    for tool in ("umoci", "crun"):
        if shutil.which(tool) is None:
            print(
                f"tests.image.run: {tool} is required (apt-get install -y {tool})", file=sys.stderr
            )
            return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix="icap-image-"))
    work.mkdir(parents=True, exist_ok=True)
    bundle, secrets = work / "bundle", work / "secrets"
    shutil.rmtree(bundle, ignore_errors=True)
    t0 = time.monotonic()
    subprocess.run(
        ["umoci", "unpack", "--image", f"{args.image}:{args.tag}", str(bundle)],
        check=True, capture_output=True,
    )  # fmt: skip
    host, port = serviceaccount(args.kubeconfig, secrets)
    spec = configure(bundle, secrets, host, port, free_port(), free_port())
    user = spec["process"]["user"]
    print(f"tests.image.run: uid {user.get('uid')} gid {user.get('gid')}, read-only root, "
          f"args {spec['process']['args']}", file=sys.stderr)  # fmt: skip
    cid = f"icap-{os.getpid()}"
    proc = subprocess.Popen(
        ["crun", "run", "--bundle", str(bundle), cid],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def pump() -> None:
        announced = False
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stderr.write(line)
            if not announced and "login" in line and "succeeded" in line:
                announced = True
                print(f"tests.image.run: logged in {time.monotonic() - t0:.1f} s after unpack "
                      "began", file=sys.stderr)  # fmt: skip
                print("running", flush=True)
        stop.set()

    threading.Thread(target=pump, daemon=True).start()
    stop.wait()
    if proc.poll() is None:
        subprocess.run(["crun", "kill", cid, "TERM"], capture_output=True)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            subprocess.run(["crun", "kill", cid, "KILL"], capture_output=True)
            proc.wait()
    subprocess.run(["crun", "delete", "-f", cid], capture_output=True)
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if proc.returncode in (0, -signal.SIGTERM, 143) else int(proc.returncode or 1)


if __name__ == "__main__":
    sys.exit(main())
