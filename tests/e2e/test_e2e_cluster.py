"""The same scenario against a real cluster (kind/k3d in users' CI).

Runs against the cluster ``E2E_KUBECONFIG`` names; when it is not set, against the suite's own
real control plane (``tests/realk8s``: kube-apiserver, etcd, controller-manager, scheduler, kwok),
so CI runs it instead of skipping it. The operator runs locally
(``inference-capacity run -n NAMESPACE``) against the cluster, scoped to a fresh namespace that is
deleted afterwards. No GPU is needed: the operator only edits the Deployment (its pods may stay
Pending without GPUs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realk8s.fixtures import kubectl_path

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e]
KUBECONFIG: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def e2e_kubeconfig(request: pytest.FixtureRequest) -> str:
    """``E2E_KUBECONFIG``, or the admin kubeconfig of the suite's real control plane."""
    path = os.environ.get("E2E_KUBECONFIG") or str(
        request.getfixturevalue("real_cluster").admin_kubeconfig
    )
    KUBECONFIG["path"] = path
    return path


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
    r = subprocess.run(
        [kubectl_path(), "--kubeconfig", KUBECONFIG["path"], *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check and r.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {r.stderr}")
    return r.stdout


@pytest.fixture(scope="module")
def namespace(e2e_kubeconfig: str) -> Iterator[str]:
    ns = f"icap-e2e-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", str(ROOT / "crds"))
    kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    try:
        yield ns
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def operator(namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    log = open(tmp_path_factory.mktemp("op") / "operator.log", "wb")  # noqa: SIM115
    env = {
        **os.environ,
        "KUBECONFIG": KUBECONFIG["path"],
        "INFERENCE_CAPACITY_REFRESH_SECONDS": "5",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inference_capacity.cli",
            "run",
            "-n",
            namespace,
            "--standalone",
            "--metrics-port",
            "0",
            "--liveness",
            "",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        log.close()


def _args(ns: str) -> list[str]:
    dep = json.loads(kubectl("get", "deployment", "llama-8b", "-n", ns, "-o", "json"))
    c = dep["spec"]["template"]["spec"]["containers"][0]
    out: list[str] = [*(c.get("command") or []), *(c.get("args") or [])]
    return out


def test_operator_sets_flags_on_a_real_cluster(namespace: str, operator: None) -> None:
    docs: list[dict[str, Any]] = [
        d
        for d in yaml.safe_load_all((ROOT / "examples" / "llama-3.1-8b-h100.yaml").read_text())
        if d
    ]
    for d in docs:
        d["metadata"]["namespace"] = namespace
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    deadline = time.monotonic() + 60
    while "--max-num-seqs" not in _args(namespace):
        assert time.monotonic() < deadline, "the operator did not set the flags in 60 s"
        time.sleep(1)
    kubectl("wait", "--for=condition=Ready", "icap/llama-8b", "-n", namespace, "--timeout=60s")
    assert "H100-SXM-80GB" in kubectl("get", "icap", "-n", namespace, "-o", "wide")


def test_schema_rejects_bad_spec_on_a_real_cluster(namespace: str) -> None:
    doc = next(
        d
        for d in yaml.safe_load_all((ROOT / "examples" / "llama-3.1-8b-h100.yaml").read_text())
        if d
    )
    doc["metadata"]["namespace"] = namespace
    doc["metadata"]["name"] = "bad"
    doc["spec"]["hardware"]["tensorParallel"] = 0
    r = subprocess.run(
        [kubectl_path(), "--kubeconfig", KUBECONFIG["path"], "apply", "-f", "-"],
        input=yaml.safe_dump(doc),
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode != 0 and "spec.hardware.tensorParallel" in r.stderr
