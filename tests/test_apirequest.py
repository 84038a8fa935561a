"""The verb and resource of each API request, as the kube-apiserver names them
(controller/apirequest.py). The oracle is the fault proxy's own reading (tests/realk8s/proxy.py
``rbac_of``, written from the apiserver's RequestInfoFactory and checked against the real
server's RBAC in tests/test_rbac_calls.py), so the two are compared path by path."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from inference_capacity.controller.apirequest import NON_RESOURCE, classify
from tests.realk8s.proxy import rbac_of

CASES = [
    ("GET", "/apis/capacity.inference.dev/v1alpha1/inferencecapacities?watch=true&rv=1"),
    ("GET", "/apis/capacity.inference.dev/v1alpha1/inferencecapacities?limit=500"),
    ("GET", "/apis/capacity.inference.dev/v1alpha1/namespaces/ns/inferencecapacities/a"),
    ("PATCH", "/apis/capacity.inference.dev/v1alpha1/namespaces/ns/inferencecapacities/a/status"),
    ("PATCH", "/apis/apps/v1/namespaces/ns/deployments/d"),
    ("GET", "/apis/apps/v1/deployments?watch=1"),
    ("POST", "/apis/policy/v1/namespaces/ns/poddisruptionbudgets"),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/shard-0"),
    ("DELETE", "/apis/policy/v1/namespaces/ns/poddisruptionbudgets/p"),
    ("DELETE", "/api/v1/namespaces/ns/events"),
    ("POST", "/api/v1/namespaces/ns/events"),
    ("GET", "/api/v1/namespaces/ns/pods/p/log?container=vllm&tailLines=200"),
    ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%21%3D&watch=true"),
    ("GET", "/api/v1/nodes"),
    ("GET", "/api/v1/namespaces"),
    ("GET", "/api/v1/namespaces/ns"),
    ("GET", "/api/v1/namespaces/ns/configmaps/c"),
]


@pytest.mark.parametrize(("method", "path"), CASES)
def test_the_same_verb_and_resource_as_the_proxy(method: str, path: str) -> None:
    split = urlsplit(path)
    want = rbac_of(method, split.path, parse_qs(split.query))
    res = f"{want.resource}/{want.subresource}" if want.subresource else want.resource
    assert classify(method, path) == (want.verb, res)
    # an absolute URL (what the clients hold) reads the same
    assert classify(method, f"https://10.0.0.1:6443{path}") == (want.verb, res)


def test_non_resource_requests_are_one_label() -> None:
    for path in ("/version", "/apis", "/api", "/apis/apps/v1", "/api/v1", "/healthz", ""):
        assert classify("GET", path) == ("get", NON_RESOURCE)
