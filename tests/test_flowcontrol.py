"""The chart's API Priority and Fairness objects on the real kube-apiserver (``tests/realk8s``):
the FlowSchema and PriorityLevelConfiguration the Helm chart renders apply, and the requests the
operator's own client sends as the chart's ServiceAccount (a TokenRequest token, straight to the
API server) are classified into them: the API server names the matched FlowSchema and priority
level in every response (``X-Kubernetes-PF-FlowSchema-UID`` / ``-PriorityLevel-UID``, set by
the priority-and-fairness filter, k8s.io/apiserver/pkg/server/filters/priority-and-fairness.go)."""

from __future__ import annotations

from typing import Any

from kubernetes import client, config
from kubernetes.client import ApiException

from inference_capacity.api import GROUP, VERSION
from inference_capacity.controller import k8s
from tests.realk8s.fixtures import (
    OPERATOR_NAMESPACE,
    OPERATOR_RELEASE,
    OPERATOR_VALUES,
    CleanKubeAPI,
    RealKubeAPI,
    wait_for,
)
from tests.test_packaging import ICAP_CRD, chart_crd_docs, chart_docs, one

FS_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"
FLOW_KINDS = ("PriorityLevelConfiguration", "FlowSchema")


def _flow_docs() -> list[dict[str, Any]]:
    """The chart's flowcontrol objects for the release the tests' operator runs as."""
    docs = chart_docs(OPERATOR_VALUES, release=OPERATOR_RELEASE, namespace=OPERATOR_NAMESPACE)
    return [d for d in docs if d["kind"] in FLOW_KINDS]


def _operator_client(api: RealKubeAPI) -> client.ApiClient:
    """The operator's client (k8s.new_api_client: the token bucket and retries) as the chart's
    ServiceAccount, straight to the API server. ``api``: the session's RealKubeAPI, never the
    test's CleanKubeAPI, whose cleanup would delete the ServiceAccount that every later test's
    cached token is bound to (401 for the rest of the session)."""
    api.operator_env()  # the chart's ServiceAccount and RBAC, installed once per session
    sa = one(_flow_docs(), "FlowSchema")["spec"]["rules"][0]["subjects"][0]["serviceAccount"]
    kubeconfig = api.serviceaccount_kubeconfig(sa["namespace"], sa["name"], through_proxy=False)
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)  # type: ignore[no-untyped-call]
    return k8s.new_api_client(cfg)


def _classified(api: client.ApiClient) -> dict[str, tuple[str, str]]:
    """(FlowSchema UID, priority level UID) of one request of each kind the operator makes."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    custom = client.CustomObjectsApi(api)
    responses: dict[str, Any] = {
        "namespaced list": core.list_namespaced_pod(OPERATOR_NAMESPACE, _preload_content=False),
        "cluster-wide list": apps.list_deployment_for_all_namespaces(
            limit=1, _preload_content=False
        ),
        "custom resource": custom.list_cluster_custom_object(
            GROUP, VERSION, k8s.PLURAL, _preload_content=False
        ),
        "non-resource URL": client.VersionApi(api).get_code(_preload_content=False),
    }
    watch = core.list_node(watch=True, timeout_seconds=1, _preload_content=False)
    responses["watch"] = watch
    out = {
        what: (r.headers.get(FS_HEADER, ""), r.headers.get(PL_HEADER, ""))
        for what, r in responses.items()
    }
    for r in responses.values():
        r.close()
        r.release_conn()
    try:  # not granted (no Secret named): classified all the same, before authorization
        core.list_namespaced_secret(OPERATOR_NAMESPACE)
        raise AssertionError("the ServiceAccount may list Secrets")
    except ApiException as exc:
        assert exc.status == 403, exc
        out["denied"] = (exc.headers.get(FS_HEADER, ""), exc.headers.get(PL_HEADER, ""))
    return out


def test_the_chart_objects_apply_and_the_operators_requests_are_classified_into_them(
    kube: CleanKubeAPI, real_kube: RealKubeAPI
) -> None:
    api = _operator_client(real_kube)
    kube.apply(*(d for d in chart_crd_docs() if d["metadata"]["name"] == ICAP_CRD))
    kube.kubectl("wait", "--for=condition=Established", f"crd/{ICAP_CRD}", "--timeout=60s")
    # before: the ServiceAccount's requests go where every ServiceAccount's go
    shared = kube.get_json("flowschema", "service-accounts")["metadata"]["uid"]
    assert {fs for fs, _ in _classified(api).values()} == {shared}

    docs = _flow_docs()
    # the precedence the chart picks sits where docs/install.md says, among the server's own
    precedence = {
        d["metadata"]["name"]: d["spec"]["matchingPrecedence"]
        for d in kube.get_json("flowschemas")["items"]
    }
    ours_first = one(docs, "FlowSchema")["spec"]["matchingPrecedence"]
    assert precedence["kube-controller-manager"] < ours_first
    assert ours_first < precedence["kube-system-service-accounts"] < precedence["service-accounts"]
    kube.apply(*docs)
    name = one(docs, "FlowSchema")["metadata"]["name"]
    schema = kube.get_json("flowschema", name)
    level = kube.get_json("prioritylevelconfiguration", name)
    assert level["spec"]["limited"]["nominalConcurrencyShares"] == 10
    # the API server resolved the schema's level (not Dangling)
    wait_for(
        lambda: any(
            c["type"] == "Dangling" and c["status"] == "False"
            for c in kube.get_json("flowschema", name).get("status", {}).get("conditions", [])
        ),
        timeout=60,
        message=f"flowschema/{name} Dangling=False",
    )
    ours = (schema["metadata"]["uid"], level["metadata"]["uid"])
    # the API server's flow-control configuration follows its informer: soon, not at once
    try:
        wait_for(lambda: set(_classified(api).values()) == {ours}, timeout=60, interval=0.5)
    except AssertionError:
        pass  # the assertion below says which requests went elsewhere
    assert _classified(api) == dict.fromkeys(
        ("namespaced list", "cluster-wide list", "custom resource", "non-resource URL", "watch",
         "denied"),
        ours,
    )  # fmt: skip

    # nobody else's: the admin (system:masters) is still exempt
    admin = k8s.new_api_client(kube.api_client().configuration)
    resp = client.VersionApi(admin).get_code(_preload_content=False)
    resp.release_conn()
    assert resp.headers.get(FS_HEADER) == kube.get_json("flowschema", "exempt")["metadata"]["uid"]
