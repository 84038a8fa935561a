"""spec.policy.setMemoryRequest on the real control plane (issue 23, items 3 and 5): the memory
request the operator writes is the one ``plan FILE -o patch`` prints for the same objects, and a
container whose last termination is ``OOMKilled`` (kwok's pod status, patched through the real
apiserver's ``pods/status``) steps the request up once, not in a loop (the Deployment patches are
counted in the operator's own requests)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from inference_capacity.patching import ANNOTATION_APPLIED, apply_strategic
from inference_capacity.risks import MEMORY_STEP_FACTOR, parse_quantity, quantity
from tests.operator_harness import Cluster, cluster, load_example, poll
from tests.realk8s.fixtures import wait_for
from tests.test_decision_parity import _cli, _compared, _settled

__all__ = ["cluster"]

NAME = "llama-8b"


def _objects(ns: str, request: str, window: int | None = None) -> list[dict[str, Any]]:
    icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
    icap["spec"]["policy"]["setMemoryRequest"] = True
    if window is not None:
        icap["spec"]["policy"]["stabilizationWindowSeconds"] = window
    icap["spec"]["rollout"]["manageStrategy"] = False
    icap["spec"]["rollout"]["manageReplicas"] = False  # one pod: every GPU node is not needed
    res = dep["spec"]["template"]["spec"]["containers"][0]["resources"]
    res["requests"] = {"memory": request}
    return [icap, dep]


def _patches(c: Cluster, ns: str) -> int:
    return sum(
        1
        for r in c.operator_requests()
        if r.method == "PATCH" and r.resource == "deployments" and f"/namespaces/{ns}/" in r.path
    )


def _request(c: Cluster, ns: str) -> int | None:
    res = c.container(ns, NAME).get("resources") or {}
    return parse_quantity((res.get("requests") or {}).get("memory"))


def test_the_operator_writes_the_request_plan_prints(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    ns = c.namespace("mem-parity")
    icap, dep = _objects(ns, "4Gi")
    c.api.apply(dep)
    live = _settled(c, ns)
    world = c.api.get_json("nodes,pods", "-A")
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump_all([icap, live, world]))
    code, out, err = _cli("plan", str(f), "-o", "patch")
    assert code == 0, err
    patch = json.loads(out)
    want = patch["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"]
    assert parse_quantity(want) or 0 > 4 * 2**30
    c.api.apply(icap)

    def written() -> dict[str, Any] | None:
        d = c.deployment(ns, NAME)
        return d if ANNOTATION_APPLIED in (d["metadata"].get("annotations") or {}) else None

    after = wait_for(written, timeout=30, interval=0.2, message="operator patch")
    assert _compared(after) == _compared(apply_strategic(live, patch))
    res = after["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert res["requests"]["memory"] == want and res["limits"]["nvidia.com/gpu"] == "1"


def _ready_pods(c: Cluster, ns: str) -> list[dict[str, Any]] | None:
    d = c.deployment(ns, NAME)

    def memory(container: dict[str, Any]) -> Any:
        return ((container.get("resources") or {}).get("requests") or {}).get("memory")

    want = memory(d["spec"]["template"]["spec"]["containers"][0])
    pods = c.api.get_json("pods", "-n", ns, "-l", f"app={NAME}")["items"]
    ok = [
        p
        for p in pods
        if memory(p["spec"]["containers"][0]) == want
        and any(
            x["type"] == "Ready" and x["status"] == "True"
            for x in p["status"].get("conditions", [])
        )
    ]
    return ok if ok and len(ok) == len(pods) == d["spec"]["replicas"] else None


def _oom_kill(c: Cluster, ns: str, pods: list[dict[str, Any]]) -> None:
    for pod in pods:
        statuses = pod["status"]["containerStatuses"]
        for st in statuses:
            st.update(
                ready=False,
                restartCount=1,
                lastState={"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            )
        conditions = [
            {**x, "status": "False"} if x["type"] in ("Ready", "ContainersReady") else x
            for x in pod["status"]["conditions"]
        ]
        body = {"status": {"containerStatuses": statuses, "conditions": conditions}}
        c.api.kubectl(
            "patch", "pod", pod["metadata"]["name"], "-n", ns, "--subresource=status",
            "--type=merge", "-p", json.dumps(body),
        )  # fmt: skip


def test_oomkilled_steps_the_request_up_once(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("mem-oom")
    c.api.apply(*_objects(ns, "4Gi", window=3600))
    c.wait_condition(ns, NAME, "Applied", "True", timeout=60)
    first = wait_for(
        lambda: r if (r := _request(c, ns)) and r > 4 * 2**30 else None,
        timeout=30,
        message="the estimated request written",
    )
    pods = wait_for(lambda: _ready_pods(c, ns), timeout=90, message="the pods Ready")
    poll(2 * c.operator.refresh)
    before = _patches(c, ns)
    _oom_kill(c, ns, pods)
    # base: the request when killed (the estimate, in whole MiB); one step of 1.25x
    stepped = parse_quantity(quantity(math.ceil(MEMORY_STEP_FACTOR * first)))
    got = wait_for(
        lambda: r if (r := _request(c, ns)) and r > first else None,
        timeout=60,
        message="the request stepped up",
    )
    assert got == stepped
    adjustment = c.icap(ns, NAME)["status"]["observed"]["adjustment"]
    assert adjustment["kind"] == "MemoryStepUp" and "OOMKilled" in adjustment["reason"]
    assert adjustment["memoryBaseBytes"] == first
    events = [e for e in c.events(ns) if e["reason"] == "StartupFailed"]
    assert events and "OOMKilled" in events[0]["message"]
    poll(5 * c.operator.refresh)  # later refreshes: one step, not a loop
    assert _patches(c, ns) == before + 1
    assert _request(c, ns) == stepped
