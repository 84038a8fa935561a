"""The ten semantics that break naive emulators (research file §13), one or more tests each."""

from __future__ import annotations

import json
import time

import pytest

from .fixtures import KubeAPI
from .helpers import WIDGETS, Http, WatchReader


@pytest.fixture
def http(kubeapi: KubeAPI) -> Http:
    client = Http(kubeapi.url)
    client.crd()
    return client


# 1. watch resume replays every change, one event per resourceVersion


def test_1_watch_resume_replays_each_change_with_its_rv(http: Http) -> None:
    created = http.widget("w1")
    start = created["metadata"]["resourceVersion"]
    rvs = []
    for size in (4, 5):
        response = http.patch(f"{WIDGETS}/w1", {"spec": {"size": size}})
        rvs.append(response.json()["metadata"]["resourceVersion"])
    deleted = http.delete(f"{WIDGETS}/w1")
    assert deleted.status_code == 200
    watch = WatchReader(http, f"{WIDGETS}?watch=true&resourceVersion={start}")
    events = watch.take(3)
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert [e["object"]["spec"]["size"] for e in events[:2]] == [4, 5]
    assert [e["object"]["metadata"]["resourceVersion"] for e in events[:2]] == rvs
    assert int(events[2]["object"]["metadata"]["resourceVersion"]) > int(rvs[1])
    # a live patch's response RV is the RV of the event that follows it (Kopf's consistency)
    http.widget("w2")
    assert watch.next()["type"] == "ADDED"
    live = http.patch(f"{WIDGETS}/w2", {"metadata": {"annotations": {"a": "b"}}}).json()
    event = watch.next()
    assert event["type"] == "MODIFIED"
    assert event["object"]["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]
    watch.close()


# 2. expiry is an in-stream ERROR 410 on HTTP 200


def test_2_expired_resource_version_is_an_in_stream_410(kubeapi: KubeAPI, http: Http) -> None:
    old = http.widget("w1")["metadata"]["resourceVersion"]
    kubeapi.faults.expire()
    response = http.get(f"{WIDGETS}?watch=true&resourceVersion={old}")
    assert response.status_code == 200
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert len(lines) == 1
    assert lines[0]["type"] == "ERROR"
    status = lines[0]["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"
    # a relist gives a usable resourceVersion again
    listed = http.get(WIDGETS).json()["metadata"]["resourceVersion"]
    watch = WatchReader(http, f"{WIDGETS}?watch=true&resourceVersion={listed}")
    http.patch(f"{WIDGETS}/w1", {"spec": {"size": 9}})
    assert watch.next()["type"] == "MODIFIED"
    watch.close()


def test_2_python_client_watch_raises_410_after_expiry(kubeapi: KubeAPI) -> None:
    from kubernetes import client, watch
    from kubernetes.client.exceptions import ApiException

    api = client.CoreV1Api(kubeapi.api_client())
    cm = api.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    kubeapi.faults.expire()
    with pytest.raises(ApiException) as info:
        for _ in watch.Watch().stream(
            api.list_namespaced_config_map,
            "default",
            resource_version=cm.metadata.resource_version,
            timeout_seconds=5,
        ):
            pass
    assert info.value.status == 410


# 3. sendInitialEvents


def test_3_send_initial_events_ends_with_the_marked_bookmark(http: Http) -> None:
    http.widget("w1")
    http.widget("w2")
    watch = WatchReader(
        http,
        f"{WIDGETS}?watch=true&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    )
    events = watch.take(3)
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events[:2]] == [
        ("ADDED", "w1"),
        ("ADDED", "w2"),
    ]
    assert events[2]["type"] == "BOOKMARK"
    assert events[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    http.patch(f"{WIDGETS}/w1", {"spec": {"size": 8}})
    assert watch.next()["type"] == "MODIFIED"
    watch.close()
    refused = http.get(f"{WIDGETS}?watch=true&sendInitialEvents=true")
    assert refused.status_code == 422 and refused.json()["reason"] == "Invalid"


def test_3_kubectl_wait_uses_watch_list(kubeapi: KubeAPI, http: Http) -> None:
    import subprocess

    from .fixtures import kubectl_path, wait_for

    http.widget("w1")
    waiter = subprocess.Popen(
        [kubectl_path(), "wait", "--for=jsonpath={.spec.size}=4", "widget/w1", "--timeout=10s"],
        env=kubeapi.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: any(
                "sendInitialEvents=true" in r.path
                for r in kubeapi.requests.filter(verb="watch", resource="widgets")
            ),
            message="kubectl's watch-list request",
        )
        http.patch(f"{WIDGETS}/w1", {"spec": {"size": 4}})
        out, err = waiter.communicate(timeout=10)
    finally:
        if waiter.poll() is None:
            waiter.kill()
    assert waiter.returncode == 0, err
    assert "condition met" in out


# 4. OpenAPI for kubectl's validation


def test_4_openapi_v3_declares_field_validation_and_v2_is_404(kubeapi: KubeAPI) -> None:
    http = Http(kubeapi.url)
    index = http.get("/openapi/v3").json()["paths"]
    assert "api/v1" in index and "apis/apps/v1" in index
    doc = http.get(index["api/v1"]["serverRelativeURL"]).json()
    namespace_patch = doc["paths"]["/api/v1/namespaces/{name}"]["patch"]
    assert namespace_patch["x-kubernetes-group-version-kind"]["kind"] == "Namespace"
    assert "fieldValidation" in [p["name"] for p in namespace_patch["parameters"]]
    assert "application/strategic-merge-patch+json" not in namespace_patch["requestBody"]["content"]
    assert http.get("/openapi/v2").status_code == 404
    # kubectl apply with default (strict) validation works against it
    out = kubeapi.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    assert "configmap/x created" in out.stdout
    assert "fieldValidation=Strict" in kubeapi.requests.filter(verb="create")[-1].path


# 5. status subresource


def test_5_status_subresource_separates_spec_and_status(http: Http) -> None:
    resources = http.get("/apis/example.com/v1").json()["resources"]
    assert "widgets/status" in [r["name"] for r in resources]
    created = http.widget("w1", status={"phase": "Ignored"})
    assert "status" not in created  # create drops status
    main = http.patch(f"{WIDGETS}/w1", {"status": {"phase": "Main"}}).json()
    assert "status" not in main  # main-resource writes keep the (absent) status
    status = http.patch(
        f"{WIDGETS}/w1/status", {"spec": {"size": 99}, "status": {"phase": "Ready"}}
    ).json()
    assert status["status"] == {"phase": "Ready"} and status["spec"]["size"] == 3
    assert status["metadata"]["generation"] == 1  # status does not bump generation
    labelled = http.patch(f"{WIDGETS}/w1", {"metadata": {"labels": {"x": "y"}}}).json()
    assert labelled["metadata"]["generation"] == 1  # metadata neither
    resized = http.patch(f"{WIDGETS}/w1", {"spec": {"size": 4}}).json()
    assert resized["metadata"]["generation"] == 2 and resized["status"] == {"phase": "Ready"}
    put = dict(resized, status={"phase": "PutIgnored"})
    kept = http.put(f"{WIDGETS}/w1", put).json()
    assert kept["status"] == {"phase": "Ready"}


def test_5_without_status_subresource_status_is_ordinary(kubeapi: KubeAPI) -> None:
    http = Http(kubeapi.url)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    assert (
        http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd).status_code == 201
    )
    made = http.post(
        "/apis/example.com/v1/gadgets", {"metadata": {"name": "g"}, "status": {"a": 1}}
    ).json()
    assert made["status"] == {"a": 1}
    changed = http.patch("/apis/example.com/v1/gadgets/g", {"status": {"a": 2}}).json()
    assert changed["metadata"]["generation"] == 2  # status is part of the spec-like content
    assert http.get("/apis/example.com/v1/gadgets/g/status").status_code == 404
    resources = http.get("/apis/example.com/v1").json()["resources"]
    assert [r["name"] for r in resources] == ["gadgets"]


# 6. patch flavours


def test_6_merge_patch_null_deletes_and_json_patch_test_is_422(http: Http) -> None:
    http.widget("w1", metadata={"name": "w1", "annotations": {"a": "1", "b": "2"}})
    merged = http.patch(f"{WIDGETS}/w1", {"metadata": {"annotations": {"a": None}}}).json()
    assert merged["metadata"]["annotations"] == {"b": "2"}
    rv = merged["metadata"]["resourceVersion"]
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/finalizers", "value": ["x.io/f"]},
    ]
    assert http.patch(f"{WIDGETS}/w1", ops, kind="json").status_code == 200
    stale = http.patch(f"{WIDGETS}/w1", ops, kind="json")
    assert stale.status_code == 422 and stale.json()["reason"] == "Invalid"
    escaped = http.patch(
        f"{WIDGETS}/w1",
        [{"op": "add", "path": "/metadata/annotations/example.com~1key", "value": "v"}],
        kind="json",
    ).json()
    assert escaped["metadata"]["annotations"]["example.com/key"] == "v"
    smp = http.patch(f"{WIDGETS}/w1", {"spec": {"size": 1}}, kind="strategic-merge")
    assert smp.status_code == 415 and smp.json()["reason"] == "UnsupportedMediaType"


def test_6_strategic_merge_on_builtins(kubeapi: KubeAPI) -> None:
    http = Http(kubeapi.url)
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "image": "a:1",
                    "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80}],
                },
                {"name": "b", "image": "b:1"},
            ]
        },
    }
    assert http.post("/api/v1/namespaces/default/pods", pod).status_code == 201
    patch = {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "image": "a:2",
                    "env": [{"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 81}],
                },
                {"name": "b", "$patch": "delete"},
            ]
        },
        "metadata": {"labels": {"x": "1"}},
    }
    response = http.patch("/api/v1/namespaces/default/pods/p", patch, kind="strategic-merge")
    assert response.status_code == 200, response.text
    result = response.json()
    containers = result["spec"]["containers"]
    assert [c["name"] for c in containers] == ["a"]
    assert containers[0]["image"] == "a:2"
    assert containers[0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert [p["containerPort"] for p in containers[0]["ports"]] == [80, 81]
    assert "$setElementOrder/containers" not in json.dumps(result)


def test_6_python_client_patch_flavours(kubeapi: KubeAPI) -> None:
    from kubernetes import client

    api_client = kubeapi.api_client()
    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("c", "default", {"data": {"b": "2"}})  # SMP
    core.patch_namespaced_config_map(
        "c", "default", [{"op": "remove", "path": "/data/a"}]
    )  # JSON patch
    assert core.read_namespaced_config_map("c", "default").data == {"b": "2"}
    kinds = {r.path.split("?")[0]: r for r in kubeapi.requests.filter(verb="patch")}
    assert kinds, "patches were recorded"


# 7. deletion with finalizers


def test_7_finalizers_mark_then_last_removal_deletes(http: Http) -> None:
    http.widget("w1", metadata={"name": "w1", "finalizers": ["x.io/a", "x.io/b"]})
    rv = http.get(WIDGETS).json()["metadata"]["resourceVersion"]
    watch = WatchReader(http, f"{WIDGETS}?watch=true&resourceVersion={rv}")
    marked = http.delete(f"{WIDGETS}/w1").json()
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["generation"] == 2
    assert http.delete(f"{WIDGETS}/w1").status_code == 200  # repeated: no change
    event = watch.next()
    assert event["type"] == "MODIFIED" and event["object"]["metadata"]["deletionTimestamp"]
    added = http.patch(
        f"{WIDGETS}/w1", {"metadata": {"finalizers": ["x.io/a", "x.io/b", "x.io/c"]}}
    )
    assert added.status_code == 422  # no new finalizers on a deleting object
    http.patch(f"{WIDGETS}/w1", {"metadata": {"finalizers": ["x.io/b"]}})
    assert watch.next()["type"] == "MODIFIED"
    final = http.patch(
        f"{WIDGETS}/w1", [{"op": "remove", "path": "/metadata/finalizers"}], kind="json"
    )
    assert final.status_code == 200
    event = watch.next()
    assert event["type"] == "DELETED"
    assert http.get(f"{WIDGETS}/w1").status_code == 404
    watch.close()


def test_7_propagation_policies_do_not_leave_objects_hanging(kubeapi: KubeAPI) -> None:
    http = Http(kubeapi.url)
    owner = http.post(
        "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "owner"}}
    ).json()
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    http.post(
        "/api/v1/namespaces/default/configmaps",
        {"metadata": {"name": "child", "ownerReferences": [ref]}},
    )
    response = http.delete(
        "/api/v1/namespaces/default/configmaps/owner", {"propagationPolicy": "Foreground"}
    )
    assert response.status_code == 200
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
        http.get("/api/v1/namespaces/default/configmaps/owner").status_code != 404
    ):
        time.sleep(0.02)
    assert http.get("/api/v1/namespaces/default/configmaps/owner").status_code == 404
    assert http.get("/api/v1/namespaces/default/configmaps/child").status_code == 404
    # Orphan keeps dependents, without the owner reference
    owner = http.post(
        "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "owner2"}}
    ).json()
    ref["uid"], ref["name"] = owner["metadata"]["uid"], "owner2"
    http.post(
        "/api/v1/namespaces/default/configmaps",
        {"metadata": {"name": "child2", "ownerReferences": [ref]}},
    )
    http.delete("/api/v1/namespaces/default/configmaps/owner2?propagationPolicy=Orphan")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
        http.get("/api/v1/namespaces/default/configmaps/owner2").status_code != 404
    ):
        time.sleep(0.02)
    child = http.get("/api/v1/namespaces/default/configmaps/child2").json()
    assert "ownerReferences" not in child["metadata"]


def test_7_owner_reference_gc_of_pdb_owned_by_custom_resource(http: Http) -> None:
    owner = http.widget("w1")
    pdb = {
        "metadata": {
            "name": "w1-pdb",
            "ownerReferences": [
                {
                    "apiVersion": "example.com/v1",
                    "kind": "Widget",
                    "name": "w1",
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"maxUnavailable": 1},
    }
    path = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
    assert http.post(path, pdb).status_code == 201
    http.delete(f"{WIDGETS}/w1")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and http.get(f"{path}/w1-pdb").status_code != 404:
        time.sleep(0.02)
    assert http.get(f"{path}/w1-pdb").status_code == 404


# 8. discovery


def test_8_discovery_shapes_and_crd_registration_before_event(kubeapi: KubeAPI) -> None:
    http = Http(kubeapi.url)
    apis = http.get(
        "/apis",
        headers={
            "Accept": "application/json;g=apidiscovery.k8s.io;v=v2;"
            "as=APIGroupDiscoveryList,application/json"
        },
    )
    assert apis.headers["Content-Type"].split(";")[0] == "application/json"
    assert "g=" not in apis.headers["Content-Type"]
    for group in apis.json()["groups"]:
        assert group["preferredVersion"]["version"] in [v["version"] for v in group["versions"]]
    core = http.get("/api/v1").json()
    for resource in core["resources"]:
        assert {"name", "singularName", "namespaced", "kind", "verbs"} <= set(resource)
    namespaces = next(r for r in core["resources"] if r["name"] == "namespaces")
    assert {"list", "watch", "patch"} <= set(namespaces["verbs"])
    assert http.get("/apis/example.com/v1").status_code == 404

    rv = http.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").json()["metadata"][
        "resourceVersion"
    ]
    watch = WatchReader(
        http,
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions?watch=true&resourceVersion={rv}",
    )
    from .helpers import CRD_PATH

    kubeapi.kubectl("create", "-f", str(CRD_PATH))
    assert watch.next()["type"] == "ADDED"
    # the moment the event is seen, the new group-version is served
    listing = http.get("/apis/example.com/v1")
    assert listing.status_code == 200
    assert "example.com" in [g["name"] for g in http.get("/apis").json()["groups"]]
    kubeapi.kubectl("delete", "crd", "widgets.example.com", "--wait=false")
    while True:
        event = watch.next()
        assert event is not None
        if event["type"] == "DELETED":
            break
    assert http.get("/apis/example.com/v1").status_code == 404
    watch.close()


# 9. type strictness and shapes


def test_9_types_shapes_generate_name_and_noop_patches(kubeapi: KubeAPI, http: Http) -> None:
    made = http.post(WIDGETS, {"metadata": {"generateName": "w-"}, "spec": {"size": 2}})
    assert made.status_code == 201
    obj = made.json()
    name = obj["metadata"]["name"]
    assert name.startswith("w-") and len(name) == 7
    assert obj["apiVersion"] == "example.com/v1" and obj["kind"] == "Widget"
    assert isinstance(obj["metadata"]["resourceVersion"], str)
    assert isinstance(obj["metadata"]["generation"], int)
    assert obj["metadata"]["creationTimestamp"].endswith("Z")
    listing = http.get(WIDGETS).json()
    assert listing["kind"] == "WidgetList" and listing["apiVersion"] == "example.com/v1"
    assert isinstance(listing["metadata"]["resourceVersion"], str)
    assert all(i["kind"] == "Widget" and i["apiVersion"] for i in listing["items"])
    before = kubeapi.server.resource_version
    same = http.patch(f"{WIDGETS}/{name}", {"spec": {"size": 2}}).json()
    assert same["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    assert kubeapi.server.resource_version == before
    events = http.get(f"{WIDGETS}?watch=true&resourceVersion={before}&timeoutSeconds=0.3")
    assert events.text == ""
    assert http.post(WIDGETS, {"metadata": {}, "spec": {"size": 1}}).status_code == 422
    strict = http.post(
        "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "c", "labels": {"a": 1}}}
    )
    assert strict.status_code == 400


# 10. streaming hygiene


def test_10_headers_flush_timeout_closes_and_no_unasked_bookmarks(
    kubeapi_factory: object,
) -> None:
    api = kubeapi_factory(bookmark_interval=0.1)  # type: ignore[operator]
    http = Http(api.url)
    started = time.monotonic()
    response = http.session.get(
        api.url + "/api/v1/namespaces/default/configmaps"
        "?watch=true&resourceVersion=1&timeoutSeconds=1",
        stream=True,
        timeout=5,
    )
    assert response.status_code == 200  # headers before any event
    assert time.monotonic() - started < 0.5
    assert response.headers["Content-Type"] == "application/json"
    body = response.content  # ends cleanly after timeoutSeconds, without bookmarks
    assert 0.9 <= time.monotonic() - started < 3
    assert b"BOOKMARK" not in body and b"ERROR" not in body
    with_bookmarks = http.get(
        "/api/v1/namespaces/default/configmaps?watch=true"
        "&resourceVersion=1&allowWatchBookmarks=true&timeoutSeconds=0.5"
    )
    events = [json.loads(line) for line in with_bookmarks.text.splitlines()]
    assert events and all(e["type"] == "BOOKMARK" for e in events)
    assert all(e["object"]["kind"] == "ConfigMap" for e in events)


def test_10_selectors_apply_to_watches_with_transitions(kubeapi: KubeAPI) -> None:
    http = Http(kubeapi.url)
    base = "/api/v1/namespaces/default/configmaps"
    http.post(base, {"metadata": {"name": "a", "labels": {"tier": "gold"}}})
    http.post(base, {"metadata": {"name": "b"}})
    watch = WatchReader(http, f"{base}?watch=true&labelSelector=tier%3Dgold")
    first = watch.next()
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "a")
    http.patch(f"{base}/b", {"metadata": {"labels": {"tier": "gold"}}})
    event = watch.next()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "b")
    http.patch(f"{base}/a", {"metadata": {"labels": {"tier": None}}})
    event = watch.next()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("DELETED", "a")
    watch.close()
    fields = WatchReader(http, f"{base}?watch=true&fieldSelector=metadata.name%3Db")
    assert fields.next()["object"]["metadata"]["name"] == "b"
    http.patch(f"{base}/a", {"data": {"x": "y"}})
    http.patch(f"{base}/b", {"data": {"x": "y"}})
    event = fields.next()
    assert event["object"]["metadata"]["name"] == "b" and event["type"] == "MODIFIED"
    fields.close()
