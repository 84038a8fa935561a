"""Bad requests get the real server's status codes and ``Status`` bodies, never a traceback."""

from __future__ import annotations

import pytest

from .fixtures import KubeAPI
from .helpers import WIDGETS, Http

CM = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
def http(kubeapi: KubeAPI) -> Http:
    client = Http(kubeapi.url)
    client.crd()
    return client


def _status(response: object, code: int, reason: str) -> dict:
    assert response.status_code == code, response.text  # type: ignore[attr-defined]
    assert response.headers["Content-Type"] == "application/json"  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert body["kind"] == "Status" and body["apiVersion"] == "v1"
    assert body["status"] == "Failure" and body["code"] == code and body["reason"] == reason
    assert "Traceback" not in body["message"]
    return dict(body)


def test_400_bad_requests(http: Http) -> None:
    _status(http.post(CM, "{not json"), 400, "BadRequest")
    mismatch = _status(
        http.post(CM, {"metadata": {"name": "a", "namespace": "other"}}), 400, "BadRequest"
    )
    assert "does not match the namespace" in mismatch["message"]
    _status(http.get(f"{CM}?labelSelector=a%20in%20("), 400, "BadRequest")
    _status(
        http.post(CM, {"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "a"}}),
        400,
        "BadRequest",
    )


def test_404_not_found_shapes(http: Http) -> None:
    body = _status(http.get(f"{WIDGETS}/missing"), 404, "NotFound")
    assert body["message"] == 'widgets.example.com "missing" not found'
    assert body["details"] == {"name": "missing", "group": "example.com", "kind": "widgets"}
    body = _status(http.get("/apis/nothing.io/v1/things"), 404, "NotFound")
    assert body["message"] == "the server could not find the requested resource"
    body = _status(
        http.post("/api/v1/namespaces/absent/configmaps", {"metadata": {"name": "a"}}),
        404,
        "NotFound",
    )
    assert body["message"] == 'namespaces "absent" not found'
    _status(http.get("/api/v1/configmaps/a"), 404, "NotFound")  # namespaced without namespace
    _status(http.get("/api/v1/namespaces/default/nodes"), 404, "NotFound")  # cluster type
    _status(http.get("/api/v1/namespaces/default/configmaps/a/status"), 404, "NotFound")


def test_405_method_not_allowed(http: Http) -> None:
    http.widget("w1")
    _status(http.post(f"{WIDGETS}/w1", {"metadata": {"name": "w1"}}), 405, "MethodNotAllowed")
    _status(http.put(WIDGETS, {"metadata": {"name": "w1"}}), 405, "MethodNotAllowed")
    _status(
        http.post("/apis/example.com/v1/widgets", {"metadata": {"name": "x"}}),
        405,
        "MethodNotAllowed",
    )


def test_409_already_exists_and_conflict(http: Http) -> None:
    created = http.widget("w1")
    body = _status(
        http.post(WIDGETS, {"metadata": {"name": "w1"}, "spec": {"size": 1}}), 409, "AlreadyExists"
    )
    assert body["message"] == 'widgets.example.com "w1" already exists'
    stale = dict(created)
    http.patch(f"{WIDGETS}/w1", {"spec": {"size": 2}})
    body = _status(http.put(f"{WIDGETS}/w1", stale), 409, "Conflict")
    assert "the object has been modified" in body["message"]
    _status(
        http.patch(f"{WIDGETS}/w1", {"metadata": {"resourceVersion": "1"}, "spec": {"size": 5}}),
        409,
        "Conflict",
    )
    _status(http.delete(f"{WIDGETS}/w1", {"preconditions": {"uid": "nope"}}), 409, "Conflict")


def test_410_expired_continue_token(kubeapi: KubeAPI, http: Http) -> None:
    for name in ("a", "b", "c"):
        http.widget(name)
    page = http.get(f"{WIDGETS}?limit=2").json()
    assert [i["metadata"]["name"] for i in page["items"]] == ["a", "b"]
    token = page["metadata"]["continue"]
    rest = http.get(f"{WIDGETS}?limit=2&continue={token}").json()
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c"]
    assert "continue" not in rest["metadata"]
    kubeapi.faults.expire()
    _status(http.get(f"{WIDGETS}?limit=2&continue={token}"), 410, "Expired")
    _status(http.get(f"{WIDGETS}?resourceVersion=2&resourceVersionMatch=Exact"), 410, "Expired")


def test_415_unsupported_media_types(http: Http) -> None:
    http.widget("w1")
    body = _status(
        http.patch(f"{WIDGETS}/w1", {"spec": {}}, kind="strategic-merge"),
        415,
        "UnsupportedMediaType",
    )
    assert "application/merge-patch+json" in body["message"]
    _status(
        http.request(
            "PATCH", f"{WIDGETS}/w1", "spec: {}", content_type="application/apply-patch+yaml"
        ),
        415,
        "UnsupportedMediaType",
    )
    _status(
        http.request("POST", CM, b"k8s\x00", content_type="application/vnd.kubernetes.protobuf"),
        415,
        "UnsupportedMediaType",
    )


def test_422_invalid(http: Http) -> None:
    body = _status(
        http.post(WIDGETS, {"metadata": {"name": "Bad_Name"}, "spec": {"size": 1}}), 422, "Invalid"
    )
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    body = _status(
        http.post(WIDGETS, {"metadata": {"name": "w"}, "spec": {"size": "big"}}), 422, "Invalid"
    )
    assert body["message"].startswith(
        'Widget.example.com "w" is invalid: [spec.size: Invalid value: "string": spec.size in '
        'body must be of type integer: "string", <nil>: Invalid value: "null": some validation '
        "rules were not checked because the object was invalid"
    )
    assert body["details"]["causes"][0] == {
        "reason": "FieldValueTypeInvalid",
        "field": "spec.size",
        "message": 'Invalid value: "string": spec.size in body must be of type integer: "string"',
    }
    body = _status(http.post(WIDGETS, {"metadata": {"name": "w"}, "spec": {}}), 422, "Invalid")
    assert body["message"].startswith(
        'Widget.example.com "w" is invalid: [spec.size: Required '
        'value, spec: Invalid value: "object": no such key: size'
    )
    http.widget("w1")
    _status(
        http.patch(f"{WIDGETS}/w1", [{"op": "remove", "path": "/spec/nothing"}], kind="json"),
        422,
        "Invalid",
    )
    _status(http.patch(f"{WIDGETS}/w1", {"metadata": {"name": "other"}}), 422, "Invalid")
    put = http.get(f"{WIDGETS}/w1").json()
    del put["metadata"]["resourceVersion"]
    body = _status(http.put(f"{WIDGETS}/w1", put), 422, "Invalid")
    assert "must be specified for an update" in body["message"]
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "wrong.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": [],
        },
    }
    _status(
        http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd), 422, "Invalid"
    )


def test_internal_errors_are_status_500(kubeapi: KubeAPI) -> None:
    http = Http(kubeapi.url)
    kubeapi.faults.fail(500, "GET", "/api/v1/namespaces$")
    _status(http.get("/api/v1/namespaces"), 500, "InternalError")
    assert http.get("/api/v1/namespaces").status_code == 200
