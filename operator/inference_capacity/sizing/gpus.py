"""Spare GPUs in the cluster, from Node allocatable and Pod requests (pure: plain dicts).

A surge pod can only start where a whole replica's GPUs are free on Nodes of the right product.
Spare = Σ over matching, schedulable, Ready Nodes of (allocatable − requests of running/pending
Pods). Nodes whose ``nvidia.com/gpu.product`` label names another GPU model are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..hardware import GPU_PRODUCT_LABEL, Gpu, gpu_from_node_labels


def _quantity(value: Any) -> int:
    """GPU counts are integers; Kubernetes quantities may be strings like "8"."""
    if value is None:
        return 0
    try:
        return int(str(value))
    except ValueError:
        return 0


def _node_ready(node: Mapping[str, Any]) -> bool:
    if node.get("spec", {}).get("unschedulable"):
        return False
    for cond in node.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return True  # no conditions reported: assume schedulable


def container_gpu_request(container: Mapping[str, Any], resource: str) -> int | None:
    """GPUs one container asks for (requests, else limits: for extended resources they are
    equal), or None when it names none."""
    res = container.get("resources", {}) or {}
    req = (res.get("requests") or {}).get(resource)
    if req is None:
        req = (res.get("limits") or {}).get(resource)
    return None if req is None else _quantity(req)


def _pod_gpu_request(pod: Mapping[str, Any], resource: str) -> int:
    spec = pod.get("spec", {})
    total = sum(container_gpu_request(c, resource) or 0 for c in spec.get("containers", []) or [])
    init = 0
    for c in spec.get("initContainers", []) or []:
        res = c.get("resources", {}) or {}
        init = max(init, _quantity((res.get("limits") or {}).get(resource)))
    return max(total, init)


def spare_gpus(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    resource: str,
    gpu: Gpu | None,
    gpus_per_replica: int,
) -> tuple[int, str]:
    """(spare GPUs usable by surge pods, an explanation). Only whole replicas' worth of GPUs on a
    single Node count when a replica fits on one Node (TP×PP ≤ the Node's GPUs)."""
    used: dict[str, int] = {}
    for pod in pods:
        phase = pod.get("status", {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            continue
        node_name = pod.get("spec", {}).get("nodeName")
        if not node_name:
            continue
        used[node_name] = used.get(node_name, 0) + _pod_gpu_request(pod, resource)
    spare_total = 0
    usable = 0
    counted = 0
    for node in nodes:
        labels = node.get("metadata", {}).get("labels", {}) or {}
        if gpu is not None and GPU_PRODUCT_LABEL in labels:
            found = gpu_from_node_labels(labels)
            if found is None or found.name != gpu.name:
                continue
        if not _node_ready(node):
            continue
        alloc = _quantity((node.get("status", {}).get("allocatable") or {}).get(resource))
        if alloc <= 0:
            continue
        counted += 1
        free = max(0, alloc - used.get(node.get("metadata", {}).get("name", ""), 0))
        spare_total += free
        usable += (
            (free // gpus_per_replica) * gpus_per_replica if gpus_per_replica <= alloc else free
        )
    why = (
        f"{usable} spare {resource} usable by whole replicas on {counted} matching Nodes "
        f"({spare_total} free in total)"
    )
    return usable, why


def spare_after_scale_up(spare: int, adding: int, gpus_per_replica: int) -> tuple[int, int]:
    """(spare GPUs left for surge pods, GPUs taken) once ``adding`` new replicas have taken
    theirs: the replicas a plan adds are scheduled before any surge pod of a later rollout."""
    taken = max(0, adding) * gpus_per_replica
    return max(0, spare - taken), taken
