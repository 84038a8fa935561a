"""What the operator asks of the Kubernetes API, counted by verb and resource as the
kube-apiserver names them (``k8s.io/apiserver/pkg/endpoints/request/requestinfo.go``,
``RequestInfoFactory.NewRequestInfo``): ``get``/``list``/``watch`` for GET (``watch=true`` or
``watch=1`` in the query), ``create``, ``update``, ``patch``, ``delete`` or ``deletecollection``,
and ``resource[/subresource]``. Pure: the Kopf session's trace hook and the official client's REST
layer (``controller/session.py``, ``controller/k8s.py``) call it, and the counter is
``inference_capacity_api_requests_total`` (``controller/metrics.py``).
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

#: the resource label of a request outside /api and /apis (discovery, /version, /healthz)
NON_RESOURCE = "(non-resource)"

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def classify(method: str, url: str) -> tuple[str, str]:
    """``(verb, resource[/subresource])`` of one request to ``url`` (absolute or a path)."""
    split = urlsplit(url)
    parts = [p for p in split.path.split("/") if p]
    m = method.upper()
    if not parts or parts[0] not in ("api", "apis"):
        return m.lower(), NON_RESOURCE
    rest = parts[2:] if parts[0] == "api" else parts[3:]  # past the (group and) version
    if not rest:
        return m.lower(), NON_RESOURCE  # a group's or version's discovery document
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]  # namespaced: /namespaces/{ns}/{resource}/...
    resource = rest[0]
    named = len(rest) > 1
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if m == "GET":
        watch = parse_qs(split.query).get("watch", ["false"])[0] in ("true", "1")
        return ("watch" if watch else "get" if named else "list"), resource
    if m == "DELETE":
        return ("delete" if named else "deletecollection"), resource
    return _VERBS.get(m, m.lower()), resource
