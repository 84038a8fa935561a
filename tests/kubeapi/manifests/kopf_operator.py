"""A tiny Kopf operator used by the kubeapi tests (run with ``kopf run`` as a subprocess)."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import kubernetes


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 10
    settings.persistence.consistency_timeout = 5
    kubernetes.config.load_kube_config()


@kopf.on.create("example.com", "v1", "widgets")
def created(spec: Any, name: str, namespace: str, body: Any, patch: Any, **_: Any) -> Any:
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"{name}-pdb"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"widget": name}}},
    }
    kopf.adopt(pdb, owner=body)
    kubernetes.client.PolicyV1Api().create_namespaced_pod_disruption_budget(namespace, pdb)
    kopf.info(body, reason="Created", message=f"widget {name} created")
    patch.status["phase"] = "Created"
    return {"size": spec["size"]}


@kopf.on.update("example.com", "v1", "widgets", field="spec.size")
def resized(old: Any, new: Any, patch: Any, **_: Any) -> None:
    patch.status["phase"] = "Resized"
    patch.status["seenSize"] = new


@kopf.on.delete("example.com", "v1", "widgets")
def deleted(name: str, namespace: str, **_: Any) -> None:
    kubernetes.client.CoreV1Api().create_namespaced_config_map(
        namespace, {"metadata": {"name": f"deleted-{name}"}, "data": {"widget": name}}
    )


@kopf.timer("example.com", "v1", "widgets", interval=0.3)
def tick(status: Any, patch: Any, **_: Any) -> None:
    patch.status["ticks"] = int(status.get("ticks") or 0) + 1
