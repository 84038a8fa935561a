"""The official ``kubernetes`` Python client (typed models, strict pydantic parsing)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from .fixtures import KubeAPI, wait_for
from .helpers import CRD_PATH


@pytest.fixture
def api(kubeapi: KubeAPI) -> client.ApiClient:
    return kubeapi.api_client()


def test_version_discovery_and_typed_reads(api: client.ApiClient) -> None:
    assert client.VersionApi(api).get_code().git_version == "v1.37.0"
    namespaces = client.CoreV1Api(api).list_namespace()
    assert {n.metadata.name for n in namespaces.items} >= {"default", "kube-system"}
    assert isinstance(namespaces.metadata.resource_version, str)
    groups = client.ApisApi(api).get_api_versions()
    assert "apps" in [g.name for g in groups.groups]
    resources = client.CoreV1Api(api).get_api_resources()
    assert "configmaps" in [r.name for r in resources.resources]


def test_custom_objects_crud_and_conflict_retry(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    crd = ext.create_custom_resource_definition(yaml.safe_load(CRD_PATH.read_text()))
    assert crd.status.accepted_names.kind == "Widget"
    custom = client.CustomObjectsApi(api)
    args = ("example.com", "v1", "default", "widgets")
    created = custom.create_namespaced_custom_object(
        *args,
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 1},
        },
    )
    assert created["spec"] == {"size": 1, "maxSize": 50, "mode": "fast"}  # defaults applied
    stale = custom.get_namespaced_custom_object(*args, "w1")
    custom.patch_namespaced_custom_object(*args, "w1", {"spec": {"size": 2}})
    stale["spec"]["size"] = 3
    with pytest.raises(ApiException) as info:
        custom.replace_namespaced_custom_object(*args, "w1", stale)
    assert info.value.status == 409
    for _ in range(3):  # the usual read-modify-write retry loop
        fresh = custom.get_namespaced_custom_object(*args, "w1")
        fresh["spec"]["size"] = 3
        try:
            custom.replace_namespaced_custom_object(*args, "w1", fresh)
            break
        except ApiException as exc:
            assert exc.status == 409
    assert custom.get_namespaced_custom_object(*args, "w1")["spec"]["size"] == 3
    custom.patch_namespaced_custom_object_status(*args, "w1", {"status": {"phase": "Ok"}})
    listed = custom.list_namespaced_custom_object(*args, label_selector="!missing")
    assert [i["status"] for i in listed["items"]] == [{"phase": "Ok"}]
    custom.delete_namespaced_custom_object(*args, "w1")
    with pytest.raises(ApiException) as info:
        custom.get_namespaced_custom_object(*args, "w1")
    assert info.value.status == 404


def test_watch_stream_sees_changes_in_order(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    start = core.list_namespaced_config_map("default").metadata.resource_version
    seen: list[tuple[str, str, Any]] = []
    ready = threading.Event()

    def consume() -> None:
        ready.set()
        for event in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=5
        ):
            obj = event["object"]
            seen.append((event["type"], obj.metadata.name, obj.data))
            if event["type"] == "DELETED":
                return

    thread = threading.Thread(target=consume)
    thread.start()
    ready.wait()
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("c", "default", {"data": {"a": "2"}})
    core.delete_namespaced_config_map("c", "default")
    thread.join(10)
    assert seen == [
        ("ADDED", "c", {"a": "1"}),
        ("MODIFIED", "c", {"a": "2"}),
        ("DELETED", "c", {"a": "2"}),
    ]


def test_deployment_generation_and_rollout(kubeapi: KubeAPI, api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    body = {
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x:1"}]},
            },
        },
    }
    made = apps.create_namespaced_deployment("default", body)
    assert made.metadata.generation == 1 and made.spec.replicas == 2

    def rolled_out(generation: int) -> bool:
        status = apps.read_namespaced_deployment_status("web", "default").status
        return bool(
            status.observed_generation == generation
            and status.updated_replicas == status.replicas == status.available_replicas
        )

    wait_for(lambda: rolled_out(1), message="first rollout")
    apps.patch_namespaced_deployment("web", "default", {"spec": {"replicas": 4}})
    changed = apps.read_namespaced_deployment("web", "default")
    assert changed.metadata.generation == 2
    wait_for(lambda: rolled_out(2), message="second rollout")
    scale = apps.read_namespaced_deployment_scale("web", "default")
    assert scale.spec.replicas == 4 and scale.status.selector == "app=web"
    starting = [e for e in kubeapi.requests.filter(verb="patch")]
    assert starting


def test_events_in_both_api_groups(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"generateName": "e-"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "Core",
            "message": "from core",
            "type": "Normal",
        },
    )
    client.EventsV1Api(api).create_namespaced_event(
        "default",
        {
            "metadata": {"generateName": "e-"},
            "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "Modern",
            "note": "from events.k8s.io",
            "type": "Normal",
            "action": "Test",
            "reportingController": "pytest",
            "reportingInstance": "x",
            "eventTime": "2026-01-01T00:00:00.000000Z",
        },
    )
    core_events = core.list_namespaced_event("default", field_selector="involvedObject.name=p")
    assert sorted(e.message for e in core_events.items) == ["from core", "from events.k8s.io"]
    modern = client.EventsV1Api(api).list_namespaced_event(
        "default", field_selector="reason=Modern"
    )
    assert [e.note for e in modern.items] == ["from events.k8s.io"]


def test_nodes_pods_and_pdb(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_node(
        {
            "metadata": {"name": "gpu-1", "labels": {"gpu": "h100"}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}},
        }
    )
    core.patch_node_status(
        "gpu-1", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    node = core.read_node("gpu-1")
    assert node.status.conditions[0].type == "Ready"
    assert core.list_node(label_selector="gpu=h100").items[0].metadata.name == "gpu-1"
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "p"},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "image": "x"}]},
        },
    )
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-1")
    assert [p.status.phase for p in pods.items] == ["Pending"]
    policy = client.PolicyV1Api(api)
    policy.create_namespaced_pod_disruption_budget(
        "default",
        {
            "metadata": {"name": "pdb"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}},
        },
    )
    assert policy.read_namespaced_pod_disruption_budget("pdb", "default").metadata.generation == 1
