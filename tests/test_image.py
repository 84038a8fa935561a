"""The operator image, built from the Dockerfile without a daemon (``tests/image/build.sh``:
debootstrap + buildah, vfs storage, chroot isolation) and run from its own entrypoint and user
(``tests.image.run``: umoci + bwrap, read-only root, the chart's ServiceAccount token mounted as
in a pod), reconciles an example on the real control plane.

The build is cached by its inputs' hash under ~/.cache/inference-capacity/image (a cold build:
debootstrap and pip from PyPI, minutes). Image size and times go to tmp/artifacts/image.json.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.operator_harness import apply_crd, flag_value, load_example
from tests.realk8s.fixtures import RealKubeAPI

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("debootstrap", "buildah", "skopeo", "umoci", "bwrap")
ARTIFACTS = ROOT / "tmp" / "artifacts"

missing = [t for t in TOOLS if shutil.which(t) is None]
if missing:
    pytest.skip(
        f"no {', '.join(missing)}: apt-get install -y {' '.join(missing)} (.ci/run installs them)",
        allow_module_level=True,
    )
if os.geteuid() != 0:
    pytest.skip("the chroot build and bwrap run need root here", allow_module_level=True)


def layout_bytes(layout: Path) -> int:
    return sum(p.stat().st_size for p in (layout / "blobs").rglob("*") if p.is_file())


@pytest.mark.timeout(2400)  # a cold build: debootstrap and pip from PyPI (minutes; then cached)
def test_image_reconciles_an_example(real_kube: RealKubeAPI, tmp_path: Path) -> None:
    image = tmp_path / "image"
    t0 = time.monotonic()
    build = subprocess.run(
        [str(ROOT / "tests" / "image" / "build.sh"), str(image)],
        capture_output=True, text=True, timeout=1800, cwd=ROOT,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-4000:]
    build_s = time.monotonic() - t0
    config = json.loads(
        subprocess.run(
            ["skopeo", "inspect", "--config", f"oci:{image}:latest"],
            capture_output=True, text=True, check=True,
        ).stdout
    )["config"]  # fmt: skip
    # the chart's securityContext promises these: a non-root user, an exec-form entrypoint
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["inference-capacity", "run"]

    apply_crd(real_kube)
    log = (tmp_path / "run.log").open("w")
    t1 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.image.run", "--image", str(image),
         "--kubeconfig", str(real_kube.kubeconfig), "--workdir", str(tmp_path / "run")],
        stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or []], daemon=True).start()
    try:
        try:
            first = lines.get(timeout=180)
        except queue.Empty:
            first = ""
        assert first.strip() == "running", (tmp_path / "run.log").read_text()[-4000:]
        start_s = time.monotonic() - t1
        ns = "image-e2e"
        real_kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
        real_kube.apply(icap, dep)
        name = dep["metadata"]["name"]
        deadline = time.monotonic() + 180
        args: list[str] = []
        while time.monotonic() < deadline:
            d = real_kube.get_json("deployment", name, "-n", ns)
            args = d["spec"]["template"]["spec"]["containers"][0].get("args", [])
            if flag_value(args, "--max-num-seqs") is not None:
                break
            time.sleep(1)
        assert flag_value(args, "--max-num-seqs") is not None, (tmp_path / "run.log").read_text()[
            -4000:
        ]
        real_kube.kubectl(
            "wait", "--for=condition=Ready", f"icap/{icap['metadata']['name']}", "-n", ns,
            "--timeout=60s",
        )  # fmt: skip
        reconcile_s = time.monotonic() - t1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        real_kube.delete_namespaces(["image-e2e"])
    assert proc.returncode == 0, (tmp_path / "run.log").read_text()[-4000:]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "image.json").write_text(
        json.dumps(
            {
                "layout_bytes": layout_bytes(image),
                "build_or_cache_s": round(build_s, 1),
                "unpack_to_running_s": round(start_s, 1),
                "unpack_to_reconciled_s": round(reconcile_s, 1),
            },
            indent=2,
        )
    )
