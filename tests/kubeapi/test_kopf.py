"""``kopf run`` as a subprocess against the server: create, update, timer, finalizer, GC."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .fixtures import KubeAPI, wait_for

HERE = Path(__file__).parent
CRD = (HERE / "manifests" / "widgets-crd.yaml").read_text()
OPERATOR = HERE / "manifests" / "kopf_operator.py"


@pytest.fixture
def kopf_operator(kubeapi: KubeAPI, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    kubeapi.apply(CRD)
    kubeapi.kubectl(
        "wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=10s"
    )
    log_path = tmp_path / "kopf.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kopf",
                "run",
                "--standalone",
                "--all-namespaces",
                "--verbose",
                str(OPERATOR),
            ],
            env=kubeapi.env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            text=True,
        )
    proc.log_path = log_path  # type: ignore[attr-defined]
    yield proc
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _status(kubeapi: KubeAPI, name: str) -> dict:
    obj = kubeapi.object("example.com", "widgets", name, "default")
    return (obj or {}).get("status") or {}


@pytest.mark.timeout(60)
def test_kopf_handles_create_update_timer_and_delete(
    kubeapi: KubeAPI, kopf_operator: subprocess.Popen[str]
) -> None:
    kubeapi.apply(
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "default"},
            "spec": {"size": 2},
        }
    )

    status = wait_for(
        lambda: _status(kubeapi, "w1").get("created") and _status(kubeapi, "w1"),
        timeout=20,
        message="the create handler",
    )
    assert status["created"] == {"size": 2}
    assert status["phase"] == "Created"
    widget = kubeapi.object("example.com", "widgets", "w1", "default")
    assert "kopf.zalando.org/KopfFinalizerMarker" in widget["metadata"]["finalizers"]
    assert widget["metadata"]["generation"] == 1  # status and metadata writes keep generation
    pdb = kubeapi.get_json("pdb", "w1-pdb")
    assert pdb["metadata"]["ownerReferences"][0]["uid"] == widget["metadata"]["uid"]

    kubeapi.kubectl("patch", "widget", "w1", "--type=merge", "-p", '{"spec":{"size":5}}')
    wait_for(
        lambda: _status(kubeapi, "w1").get("seenSize") == 5,
        timeout=15,
        message="the update handler",
    )
    wait_for(
        lambda: int(_status(kubeapi, "w1").get("ticks") or 0) >= 2,
        timeout=15,
        message="two timer ticks",
    )

    # resilience: all watches dropped and every known resourceVersion expired -> Kopf gets an
    # in-stream 410 on its re-watch, relists, and keeps handling changes
    kubeapi.faults.expire()
    assert kubeapi.faults.drop_watches() >= 1
    kubeapi.kubectl("patch", "widget", "w1", "--type=merge", "-p", '{"spec":{"size":6}}')
    wait_for(
        lambda: _status(kubeapi, "w1").get("seenSize") == 6,
        timeout=15,
        message="the update handler after a forced 410",
    )
    expired_rewatch = [r for r in kubeapi.requests.filter(verb="watch", resource="widgets")]
    assert len(expired_rewatch) >= 3  # initial watch, the expired resume, the fresh one

    events = kubeapi.get_json("events", "--field-selector", "involvedObject.name=w1")
    assert any(e["reason"] == "Created" for e in events["items"])

    kubeapi.kubectl("delete", "widget", "w1", "--timeout=20s")
    assert kubeapi.object("example.com", "widgets", "w1", "default") is None
    configmap = kubeapi.get_json("configmap", "deleted-w1")
    assert configmap["data"] == {"widget": "w1"}
    wait_for(
        lambda: kubeapi.object("policy", "poddisruptionbudgets", "w1-pdb", "default") is None,
        timeout=5,
        message="the owned PodDisruptionBudget to be collected",
    )

    kopf_operator.terminate()
    kopf_operator.wait(15)
    output = kopf_operator.log_path.read_text()  # type: ignore[attr-defined]
    assert "Traceback" not in output, output
    assert "inconsistencies" not in output, output
    assert "Handler 'created' succeeded" in output
    assert "Handler 'deleted' succeeded" in output
