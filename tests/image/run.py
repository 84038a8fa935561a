"""``python -m tests.image.run --image OUTDIR --kubeconfig K``: the operator image, started.

Unpacks the OCI layout OUTDIR (``tests/image/build.sh``) with ``umoci`` and starts the image's
own entrypoint, user, environment and working directory with ``bwrap`` (crun stops here with
"cgroups in hybrid mode not supported, drop all controllers from cgroupv2", even with
``--cgroup-manager=disabled``; bwrap needs no cgroups), as the chart's pod runs it: the chart's
ServiceAccount
(its RBAC applied with K's admin credentials) with a TokenRequest token, ``ca.crt`` and
``namespace`` mounted at /var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST
and _PORT set, a read-only root filesystem with a tmpfs /tmp, and no shell (/usr/bin/sh, dash
and bash masked by /dev/null). It shares the host's network (the control plane listens on
loopback). Prints ``running`` once the operator inside has logged in (its preflight request
with the mounted token answered, then Kopf's login activity succeeded), its log after that to
stderr, and stops the container on SIGTERM or SIGINT.
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


def inside(rootfs: Path, path: str) -> Path:
    """``path`` in the image, its symlinks resolved within ``rootfs`` (Debian's /var/run is a
    link to /run: followed as is, it would lead out of the image into the host's /run)."""
    here = rootfs
    for part in Path(path).relative_to("/").parts:
        nxt = here / part
        hops = 0
        while nxt.is_symlink() and hops < 16:
            target = os.readlink(nxt)
            nxt = inside(rootfs, target) if target.startswith("/") else (here / target)
            hops += 1
        here = nxt
    return here


def sandbox(
    bundle: Path,
    secrets: Path,
    host: str,
    port: int,
    health: int,
    metrics: int,
    image_env: list[str] = (),  # type: ignore[assignment]
) -> tuple[list[str], dict[str, Any]]:
    """The bwrap command that runs the image's own entrypoint, user, env and working directory
    (from the runtime config umoci wrote from the image) as the chart's pod runs it."""
    spec: dict[str, Any] = json.loads((bundle / "config.json").read_text())
    proc = spec["process"]
    rootfs = bundle / "rootfs"
    # the chart's args (deployment.yaml), on free ports of the shared network
    args = [*proc["args"], "--standalone", f"--liveness=http://127.0.0.1:{health}/healthz",
            f"--metrics-port={metrics}"]  # fmt: skip
    # the image's own Env over umoci's (which sets HOME from /etc/passwd; the image says /tmp)
    env_map = dict(e.partition("=")[::2] for e in proc.get("env", []))
    env_map.update(dict(e.partition("=")[::2] for e in image_env))
    env = [f"{k}={v}" for k, v in env_map.items() if not k.startswith("KUBERNETES_SERVICE_")]
    env += [f"KUBERNETES_SERVICE_HOST={host}", f"KUBERNETES_SERVICE_PORT={port}"]
    # the mount point exists in the image (a read-only root cannot get new ones)
    mount_point = inside(rootfs, SA_DIR)
    mount_point.mkdir(parents=True, exist_ok=True)
    # bwrap is given the link-free path (/run/secrets/...): the image's /var/run leads there
    sa_dest = "/" + str(mount_point.relative_to(rootfs))
    cmd = ["bwrap", "--ro-bind", str(rootfs), "/", "--proc", "/proc", "--dev", "/dev",
           "--tmpfs", "/tmp", "--ro-bind", str(secrets), sa_dest]  # fmt: skip
    for sh in SHELLS:
        if os.path.lexists(inside(rootfs, sh)):
            cmd += ["--ro-bind", "/dev/null", sh]
    user = proc.get("user", {})
    cmd += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-user",
            "--uid", str(user.get("uid", 0)), "--gid", str(user.get("gid", 0)),
            "--cap-drop", "ALL", "--die-with-parent", "--chdir", proc.get("cwd", "/"),
            "--clearenv"]  # fmt: skip
    for e in env:
        k, _, v = e.partition("=")
        cmd += ["--setenv", k, v]
    return [*cmd, "--", *args], {"uid": user.get("uid"), "gid": user.get("gid"), "args": args}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.image.run", description=__doc__)
    p.add_argument("--image", required=True, type=Path, help="OCI layout (build.sh OUTDIR)")
    p.add_argument("--kubeconfig", required=True, type=Path, help="the cluster's admin kubeconfig")
    p.add_argument("--tag", default="latest")
    p.add_argument("--workdir", type=Path, help="bundle and secrets (default: a temporary one)")
    args = p.parse_args(argv)
    for tool in ("umoci", "bwrap"):
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
    config = json.loads(
        subprocess.run(
            ["skopeo", "inspect", "--config", f"oci:{args.image}:{args.tag}"],
            check=True, capture_output=True, text=True,
        ).stdout
    )["config"]  # fmt: skip
    cmd, seen = sandbox(
        bundle, secrets, host, port, free_port(), free_port(), config.get("Env") or []
    )
    print(f"tests.image.run: uid {seen['uid']} gid {seen['gid']}, read-only root, "
          f"args {seen['args']}", file=sys.stderr)  # fmt: skip
    t_start = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, start_new_session=True,
    )  # fmt: skip
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def pump() -> None:
        announced = in_cluster = False
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stderr.write(line)
            # the operator's preflight asked the API server its version with the mounted token
            # ("cluster: ... (from the in-cluster service account)"), then Kopf logged in
            in_cluster = in_cluster or "(from the in-cluster service account)" in line
            if not announced and in_cluster and "login" in line and "succeeded" in line:
                announced = True
                now = time.monotonic()
                print(f"tests.image.run: logged in {now - t_start:.1f} s after the container "
                      f"started ({now - t0:.1f} s with the unpack and the RBAC)",
                      file=sys.stderr)  # fmt: skip
                print("running", flush=True)
        stop.set()

    threading.Thread(target=pump, daemon=True).start()
    stop.wait()
    if proc.poll() is None:
        # bwrap and the operator share a process group: SIGTERM reaches Kopf, which exits cleanly
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if proc.returncode in (0, -signal.SIGTERM, 143) else int(proc.returncode or 1)


if __name__ == "__main__":
    sys.exit(main())
