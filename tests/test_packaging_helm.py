"""The Helm chart, rendered and linted by the real Helm engine (``helm-python-sdk``, Helm's Go
library), validated by its ``values.schema.json``, and applied to the real kube-apiserver
(``tests/realk8s``) with the real ``kubectl``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.realk8s.fixtures import CleanKubeAPI as KubeAPI
from tests.test_packaging import (
    CHART,
    ICAP_CRD,
    NAMESPACE,
    assert_installed,
    chart_crd_docs,
    chart_docs,
    container,
    dump_all,
    find,
    install,
    one,
    render_chart,
)

helm = pytest.importorskip("helm_python")

FULLNAME = "inference-capacity"  # release "inference-capacity" contains the chart name
NON_DEFAULT: list[dict[str, Any]] = [
    {"watchNamespaces": ["inference", "team-b"]},
    {"watchNamespaces": ["inference"], "rbac": {"spareGpuCounting": True}},
    {"replicaCount": 2},
    {"shards": 4, "shardLeaseSeconds": 30},
    {"replicaCount": 3, "watchNamespaces": ["inference"], "podDisruptionBudget": {"enabled": True}},
    {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}, "scrapeTimeout": "10s"}},
    {"dashboard": {"enabled": True, "namespace": "monitoring"}},
    {
        "image": {"digest": "sha256:" + "a" * 64},
        "rbac": {"secretNames": ["prom-token"]},
        "operator": {"verbose": True, "extraArgs": ["--extra"], "extraEnv": [{"name": "X"}]},
        "serviceAccount": {"create": False, "name": "preexisting"},
    },
    {"rbac": {"create": False}},
    {"global": {"imageRegistry": "mirror.example.com"}},  # what a parent chart passes down
    {
        "flowControl": {
            "matchingPrecedence": 500,
            "distinguisher": "ByUser",
            "nominalConcurrencyShares": 30,
            "lendablePercent": 0,
            "borrowingLimitPercent": None,
            "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 100},
        }
    },
    {"flowControl": {"enabled": False}},
]


def rules_of(doc: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...]]]:
    return {
        (group, resource, tuple(rule["verbs"]))
        for rule in doc["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def resources_of(doc: dict[str, Any]) -> set[str]:
    return {f"{g}/{r}" if g else r for g, r, _ in rules_of(doc)}


# --- lint -------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [None, *NON_DEFAULT], ids=lambda v: json.dumps(v)[:60])
def test_lint_strict_has_no_warnings(values: dict[str, Any] | None) -> None:
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version="v1.30.0")
    assert report["errors"] == []
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == []


def test_lint_reports_a_schema_violation_as_an_error() -> None:
    report = helm.lint(CHART, {"replicaCount": -1}, strict=True)
    assert any(m["severity"] == 3 and "/replicaCount" in m["error"] for m in report["messages"])


def test_chart_metadata_and_crds_as_helm_loads_them() -> None:
    with helm.Chart.load(CHART) as chart:
        assert chart.metadata["apiVersion"] == "v2"
        assert chart.name == "inference-capacity"
        crd_files = sorted({c["filename"] for c in chart.crds})
        assert chart.schema is not None and chart.schema["additionalProperties"] is False
        chart.validate_schema(chart.values)  # the defaults satisfy the schema
    assert crd_files == [
        "inference-capacity/crds/inferencecapacities.capacity.inference.dev.yaml",
        "inference-capacity/crds/kopf-peerings.kopf.dev.yaml",
    ]
    names = {d["metadata"]["name"] for d in chart_crd_docs()}
    assert names == {ICAP_CRD, "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"}


# --- schema ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"replicaCount": -1}, "/replicaCount"),
        ({"replicaCount": 0}, "/replicaCount"),
        ({"replicaCount": "2"}, "/replicaCount"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"image": {"digest": "latest"}}, "/image/digest"),
        ({"imagePullPolicy": "Always"}, "additional properties 'imagePullPolicy'"),
        ({"serviceMonitor": {"enabled": "yes"}}, "/serviceMonitor/enabled"),
        ({"serviceMonitor": {"interval": "30 seconds"}}, "/serviceMonitor/interval"),
        ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
        ({"watchNamespaces": ["a", "a"]}, "/watchNamespaces"),
        ({"operator": {"metricsPort": 70000}}, "/operator/metricsPort"),
        ({"probes": {"liveness": {"failureThreshold": 0}}}, "/probes/liveness/failureThreshold"),
        ({"securityContext": {"allowPrivilegeEscalation": True}}, "/securityContext"),
        ({"podSecurityContext": {"runAsNonRoot": False}}, "/podSecurityContext"),
        ({"rbac": {"clusterWide": True}}, "/rbac"),
        ({"flowControl": {"distinguisher": "ByPod"}}, "/flowControl/distinguisher"),
        ({"flowControl": {"matchingPrecedence": 0}}, "/flowControl/matchingPrecedence"),
        ({"flowControl": {"matchingPrecedence": 10001}}, "/flowControl/matchingPrecedence"),
        ({"flowControl": {"nominalConcurrencyShares": 0}}, "/flowControl/nominalConcurrency"),
        ({"flowControl": {"lendablePercent": 101}}, "/flowControl/lendablePercent"),
        ({"flowControl": {"queuing": {"queues": 0}}}, "/flowControl/queuing/queues"),
        ({"flowControl": {"queuing": {"size": 4}}}, "/flowControl/queuing"),
        ({"shards": 0}, "/shards"),
        ({"shardLeaseSeconds": 1}, "/shardLeaseSeconds"),
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], where: str) -> None:
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmValuesError) as raised:
            chart.validate_schema(values)
        assert where in str(raised.value)
        with pytest.raises(helm.HelmValuesError):  # and the install path refuses them too
            chart.render(values=values, name="x", namespace="y")


def test_schema_accepts_every_documented_non_default() -> None:
    with helm.Chart.load(CHART) as chart:
        for values in NON_DEFAULT:
            chart.validate_schema(values)


# --- rendering: defaults ---------------------------------------------------------------------


def test_default_render_is_a_cluster_wide_standalone_install() -> None:
    docs = chart_docs()
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == sorted(
        [
            ("ServiceAccount", FULLNAME),
            ("ClusterRole", FULLNAME),
            ("ClusterRoleBinding", FULLNAME),
            ("Deployment", FULLNAME),
            ("Service", f"{FULLNAME}-metrics"),
            ("PriorityLevelConfiguration", FULLNAME),
            ("FlowSchema", FULLNAME),
        ]
    )
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    c = container(docs)
    assert c["args"] == [
        "--liveness=http://0.0.0.0:8080/healthz",
        "--metrics-port=9090",
        "--standalone",
    ]
    assert c["image"] == "ghcr.io/inference-capacity/inference-capacity:0.1.0"  # appVersion
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    ]
    assert binding["roleRef"]["name"] == one(docs, "ClusterRole")["metadata"]["name"]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == FULLNAME


def test_operator_pod_is_hardened() -> None:
    docs = chart_docs()
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    c = container(docs)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532  # the image's USER
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in sc or sc["privileged"] is False
    assert {"cpu", "memory"} <= set(c["resources"]["requests"])
    assert "memory" in c["resources"]["limits"]
    # A writable /tmp for the read-only root filesystem, memory-backed and bounded.
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    tmp = {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}
    assert pod["volumes"] == [tmp]
    assert "hostNetwork" not in pod and "hostPID" not in pod


def test_probes_and_ports_match_the_operator_flags() -> None:
    c = container(chart_docs({"operator": {"healthPort": 8181, "metricsPort": 9191}}))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"health": 8181, "metrics": 9191}
    assert "--liveness=http://0.0.0.0:8181/healthz" in c["args"]
    assert "--metrics-port=9191" in c["args"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}, probe
    # The startup probe gives the operator time; liveness never kills it before that.
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60


def _mi(quantity: str) -> int:
    assert quantity.endswith("Mi"), quantity
    return int(quantity[:-2])


#: peak RSS (MB) measured by benchmarks.reconcile --cluster real --skip-edits --drain, 2 cores,
#: 2026-12-03 (README, "10,000 on one process"): the points the chart's formula is fitted on
MEASURED_PEAK_MB = {1000: 202, 10_000: 562}


@pytest.mark.parametrize("fleet", [100, 1000, 10_000])
def test_fleet_size_sets_memory_from_the_measured_formula(fleet: int) -> None:
    """The chart requests 160Mi + 0.04Mi x N (the line through the two measured peaks, 1,000 and
    10,000, rounded up) and limits at max(512Mi, 1.5 x)."""
    c = container(chart_docs({"fleetSize": fleet}))
    request, limit = (
        _mi(c["resources"]["requests"]["memory"]),
        _mi(c["resources"]["limits"]["memory"]),
    )
    assert request == 160 + fleet // 25
    assert limit == max(512, request * 3 // 2)
    assert c["resources"]["requests"]["cpu"] == "50m"  # what fleetSize does not set is kept
    peak = MEASURED_PEAK_MB.get(fleet)
    if peak is not None:
        assert request * 1024 * 1024 > peak * 1e6  # the request holds the measured peak


def test_fleet_size_zero_keeps_the_given_resources() -> None:
    given = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    assert container(chart_docs({"resources": given}))["resources"] == given


# --- rendering: modes ------------------------------------------------------------------------


def test_namespace_scoped_mode_uses_roles_and_a_minimal_cluster_role() -> None:
    docs = chart_docs({"watchNamespaces": ["inference", "team-b"]})
    roles = find(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["inference", "team-b"]
    for ns in ("inference", "team-b"):
        binding = one(docs, "RoleBinding", namespace=ns)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": FULLNAME,
        }
        assert binding["subjects"][0]["namespace"] == NAMESPACE
    assert "apps/deployments" in resources_of(roles[0])
    assert "nodes" not in resources_of(roles[0])
    cluster_role = one(docs, "ClusterRole")
    assert resources_of(cluster_role) == {"apiextensions.k8s.io/customresourcedefinitions"}
    assert rules_of(cluster_role) == {
        ("apiextensions.k8s.io", "customresourcedefinitions", ("list", "watch"))
    }
    args = container(docs)["args"]
    assert args[-2:] == ["--namespace=inference", "--namespace=team-b"]


def test_namespace_scoped_spare_gpu_counting_adds_only_node_and_pod_reads() -> None:
    docs = chart_docs({"watchNamespaces": ["inference"], "rbac": {"spareGpuCounting": True}})
    assert rules_of(one(docs, "ClusterRole")) == {
        ("", "nodes", ("list", "watch")),
        ("", "pods", ("list", "watch")),
        ("apiextensions.k8s.io", "customresourcedefinitions", ("list", "watch")),
    }


def test_cluster_wide_rules_are_the_union_of_namespaced_and_cluster_rules() -> None:
    cluster = rules_of(one(chart_docs(), "ClusterRole"))
    namespaced_docs = chart_docs({"watchNamespaces": ["inference"]})
    role = rules_of(one(namespaced_docs, "Role"))
    assert role < cluster
    # pods list is in both: the namespaced rules list the target's pods (their startup logs,
    # issue 23), the cluster rules list and watch every pod (spare GPUs, watch-fed)
    assert cluster - role == {
        ("", "nodes", ("list", "watch")),
        ("", "pods", ("list", "watch")),
        ("apiextensions.k8s.io", "customresourcedefinitions", ("list", "watch")),
    }
    # Least privilege: nothing the controller does not use (tests/test_rbac_calls.py compares
    # the rules with the calls the operator really makes).
    verbs = {v for _, _, vs in cluster for v in vs}
    assert verbs == {"get", "list", "watch", "patch", "create", "update"}
    updaters = {r for _, r, vs in cluster if "update" in vs}
    assert updaters == {"inferencecapacities/finalizers"}  # the PDB's owner reference only
    assert not any("*" in g or "*" in r for g, r, _ in cluster)
    # no Secret by default: bearer tokens only from Secrets named in rbac.secretNames
    assert [vs for g, r, vs in cluster if r == "secrets"] == []
    deleters = {r for _, r, vs in cluster if "delete" in vs}
    assert deleters == set()  # the PDB goes by garbage collection


def test_replicas_above_one_turn_kopf_peering_on_cluster_wide() -> None:
    docs = chart_docs({"replicaCount": 2})
    args = container(docs)["args"]
    assert "--peering=inference-capacity" in args and "--standalone" not in args
    peering = one(docs, "ClusterKopfPeering")
    assert peering["apiVersion"] == "kopf.dev/v1"
    assert peering["metadata"]["name"] == "inference-capacity"
    assert ("kopf.dev", "clusterkopfpeerings", ("get", "list", "watch", "patch")) in rules_of(
        one(docs, "ClusterRole")
    )
    strategy = one(docs, "Deployment")["spec"]["strategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    env = {e["name"]: e for e in container(docs)["env"]}
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # Without peering none of it is there.
    standalone = chart_docs()
    assert not find(standalone, "ClusterKopfPeering")
    assert "kopf.dev" not in {g for g, _, _ in rules_of(one(standalone, "ClusterRole"))}


def test_shards_run_a_statefulset_of_standalone_replicas_with_lease_rights() -> None:
    docs = chart_docs({"shards": 3, "shardLeaseSeconds": 20})
    assert not find(docs, "Deployment") and not find(docs, "ClusterKopfPeering")
    sts = one(docs, "StatefulSet")
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["selector"]["matchLabels"].items() <= (
        sts["spec"]["template"]["metadata"]["labels"].items()
    )
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    assert "--standalone" in c["args"] and not any(a.startswith("--peering") for a in c["args"])
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["INFERENCE_CAPACITY_SHARDS"] == "3"
    assert env["INFERENCE_CAPACITY_SHARD_LEASE_PREFIX"] == FULLNAME
    assert env["INFERENCE_CAPACITY_SHARD_LEASE_SECONDS"] == "20"
    assert "INFERENCE_CAPACITY_SHARD_INDEX" not in env  # the pod's ordinal
    # the shard Leases, by name, in the release namespace only
    roles = {d["metadata"]["name"]: d for d in find(docs, "Role")}
    role = roles[f"{FULLNAME}-shards"]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [f"{FULLNAME}-shard-{i}" for i in range(3)],
            "verbs": ["get", "update"],
        },
    ]
    binding = {d["metadata"]["name"]: d for d in find(docs, "RoleBinding")}[f"{FULLNAME}-shards"]
    assert binding["roleRef"]["name"] == f"{FULLNAME}-shards"
    assert "coordination.k8s.io" not in {g for g, _, _ in rules_of(one(docs, "ClusterRole"))}
    # one shard (the default): none of it
    plain = chart_docs()
    assert not find(plain, "StatefulSet") and not find(plain, "Role")


@pytest.mark.parametrize("values", [{"replicaCount": 2}, {"peering": {"enabled": True}}])
def test_shards_refuse_peering(values: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="shards > 1 runs one standalone replica per shard"):
        chart_docs({"shards": 2, **values})


def test_namespace_scoped_peering_uses_kopfpeerings_in_every_namespace() -> None:
    docs = chart_docs(
        {"replicaCount": 3, "watchNamespaces": ["inference", "team-b"], "peering": {"name": "icap"}}
    )
    peerings = find(docs, "KopfPeering")
    assert sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in peerings) == [
        ("inference", "icap"),
        ("team-b", "icap"),
    ]
    assert not find(docs, "ClusterKopfPeering")
    for role in find(docs, "Role"):
        assert ("kopf.dev", "kopfpeerings", ("get", "list", "watch", "patch")) in rules_of(role)
    assert "kopf.dev/clusterkopfpeerings" not in resources_of(one(docs, "ClusterRole"))
    assert "--peering=icap" in container(docs)["args"]


def test_peering_can_be_forced_on_with_one_replica() -> None:
    docs = chart_docs({"peering": {"enabled": True}})
    assert one(docs, "Deployment")["spec"]["replicas"] == 1
    assert "--peering=inference-capacity" in container(docs)["args"]
    assert find(docs, "ClusterKopfPeering")


def test_service_monitor_selects_the_metrics_service() -> None:
    docs = chart_docs(
        {
            "serviceMonitor": {
                "enabled": True,
                "labels": {"release": "kps"},
                "interval": "15s",
                "scrapeTimeout": "10s",
            }
        }
    )
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert (
        service["spec"]["selector"].items()
        <= one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}
    ]
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_dashboard_configmap_holds_the_dashboard_json() -> None:
    docs = chart_docs(
        {
            "dashboard": {
                "enabled": True,
                "namespace": "monitoring",
                "annotations": {"grafana_folder": "Inference"},
            }
        }
    )
    cm = one(docs, "ConfigMap")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Inference"}
    embedded = json.loads(cm["data"]["inference-capacity.json"])
    assert embedded == json.loads((CHART / "dashboards" / "inference-capacity.json").read_text())


def test_image_digest_rbac_toggles_and_extras() -> None:
    digest = "sha256:" + "b" * 64
    docs = chart_docs(
        {
            "image": {"digest": digest, "tag": "ignored"},
            "rbac": {"secretNames": ["prom-token"]},
            "operator": {
                "verbose": True,
                "extraArgs": ["--x"],
                "extraEnv": [{"name": "X", "value": "1"}],
            },
        }
    )
    c = container(docs)
    assert c["image"] == f"ghcr.io/inference-capacity/inference-capacity@{digest}"
    assert c["args"][-2:] == ["--verbose", "--x"]
    assert {"name": "X", "value": "1"} in c["env"]
    secrets = [r for r in one(docs, "ClusterRole")["rules"] if r["resources"] == ["secrets"]]
    assert secrets == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["prom-token"],
            "verbs": ["get"],
        }
    ]
    bare = chart_docs(
        {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "mine"}}
    )
    assert not find(bare, "ClusterRole") and not find(bare, "ClusterRoleBinding")
    assert not find(bare, "ServiceAccount")
    assert one(bare, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "mine"


def test_release_name_and_namespace_flow_into_names_and_subjects() -> None:
    docs = chart_docs(release="prod", namespace="ops")
    assert one(docs, "Deployment")["metadata"] == {
        "name": "prod-inference-capacity",
        "namespace": "ops",
        "labels": one(docs, "Deployment")["metadata"]["labels"],
    }
    assert one(docs, "ClusterRoleBinding")["subjects"][0] == {
        "kind": "ServiceAccount",
        "name": "prod-inference-capacity",
        "namespace": "ops",
    }
    selector = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert selector == {
        "app.kubernetes.io/name": "inference-capacity",
        "app.kubernetes.io/instance": "prod",
    }


def test_flow_control_puts_the_service_account_in_a_level_of_its_own() -> None:
    docs = chart_docs()
    level, schema = one(docs, "PriorityLevelConfiguration"), one(docs, "FlowSchema")
    assert level["spec"] == {
        "type": "Limited",
        "limited": {
            "nominalConcurrencyShares": 10,
            "lendablePercent": 50,
            "borrowingLimitPercent": 100,
            "limitResponse": {
                "type": "Queue",
                "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 50},
            },
        },
    }
    spec = schema["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": level["metadata"]["name"]}
    assert spec["matchingPrecedence"] == 850
    assert spec["distinguisherMethod"] == {"type": "ByNamespace"}
    binding = one(docs, "ClusterRoleBinding")["subjects"][0]
    (rule,) = spec["rules"]
    assert rule["subjects"] == [
        {
            "kind": "ServiceAccount",
            "serviceAccount": {"name": binding["name"], "namespace": binding["namespace"]},
        }
    ]
    # every request of that ServiceAccount: any resource, verb and scope, and non-resource URLs
    assert rule["resourceRules"] == [
        {
            "verbs": ["*"],
            "apiGroups": ["*"],
            "resources": ["*"],
            "clusterScope": True,
            "namespaces": ["*"],
        }
    ]
    assert rule["nonResourceRules"] == [{"verbs": ["*"], "nonResourceURLs": ["*"]}]


def test_flow_control_values_names_and_toggle() -> None:
    docs = chart_docs(NON_DEFAULT[-2], release="prod", namespace="ops")
    level, schema = one(docs, "PriorityLevelConfiguration"), one(docs, "FlowSchema")
    assert level["metadata"]["name"] == schema["metadata"]["name"] == "prod-inference-capacity"
    limited = level["spec"]["limited"]
    assert "borrowingLimitPercent" not in limited  # null: no limit
    assert (limited["nominalConcurrencyShares"], limited["lendablePercent"]) == (30, 0)
    assert limited["limitResponse"]["queuing"] == {
        "queues": 64,
        "handSize": 8,
        "queueLengthLimit": 100,
    }
    assert schema["spec"]["matchingPrecedence"] == 500
    assert schema["spec"]["distinguisherMethod"] == {"type": "ByUser"}
    subject = schema["spec"]["rules"][0]["subjects"][0]["serviceAccount"]
    assert subject == {"name": "prod-inference-capacity", "namespace": "ops"}
    mine = chart_docs({"serviceAccount": {"create": False, "name": "mine"}})
    assert one(mine, "FlowSchema")["spec"]["rules"][0]["subjects"][0]["serviceAccount"] == {
        "name": "mine",
        "namespace": NAMESPACE,
    }
    off = chart_docs({"flowControl": {"enabled": False}})
    assert not find(off, "FlowSchema") and not find(off, "PriorityLevelConfiguration")


def test_notes_describe_the_mode() -> None:
    notes = render_chart({"watchNamespaces": ["a"], "replicaCount": 2})
    text = next(v for k, v in notes.items() if k.endswith("NOTES.txt"))
    assert "namespace-scoped, watching: a" in text
    assert 'Kopf peering "inference-capacity"' in text
    default = next(v for k, v in render_chart().items() if k.endswith("NOTES.txt"))
    assert "cluster-wide" in default and "standalone" in default


# --- applied to the API server ----------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        None,
        {
            "watchNamespaces": ["inference", "team-b"],
            "replicaCount": 2,
            "rbac": {"spareGpuCounting": True},
        },
        {
            "replicaCount": 2,
            "serviceMonitor": {"enabled": True},
            "dashboard": {"enabled": True},
            "podDisruptionBudget": {"enabled": True},
        },
    ],
    ids=["defaults", "namespaced-peering", "cluster-ha-monitoring"],
)
def test_rendered_chart_applies_with_kubectl(
    kube: KubeAPI,
    values: dict[str, Any] | None,
) -> None:
    docs = chart_docs(values)
    output = install(kube, docs, crds=chart_crd_docs())
    assert_installed(kube, docs, output)
    for crd in ("kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"):
        kube.kubectl("get", crd.split(".")[0], "-A")  # the peering CRDs are served too
    deployment = kube.get_json("deployment", FULLNAME, "-n", NAMESPACE)
    assert (
        deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"][
            "readOnlyRootFilesystem"
        ]
        is True
    )
    # Re-applying the same render changes nothing (GitOps drift check). Except a PDB: its
    # spec.selector has patchStrategy=replace, so kubectl always sends it and says "configured"
    # (a real API server answers the same).
    again = kube.apply(dump_all([d for d in docs if d["kind"] != "CustomResourceDefinition"]))
    lines = again.stdout.splitlines()
    assert all(
        line.endswith(" unchanged") for line in lines if not line.startswith("poddisruptionbudget.")
    ), again.stdout


def test_examples_validate_against_the_installed_crd(kube: KubeAPI) -> None:
    install(kube, chart_docs(), crds=chart_crd_docs())
    result = kube.kubectl("apply", "-k", str(CHART.parent.parent / "manifests" / "examples"))
    assert result.stdout.count("inferencecapacity.capacity.inference.dev/") == 3, result.stdout
    table = kube.kubectl("get", "icap", "-n", "default").stdout
    assert "llama-8b" in table


def test_prometheus_allowed_prefixes_become_run_flags_none_by_default() -> None:
    assert not [a for a in container(chart_docs())["args"] if "prometheus" in a]
    prefixes = ["http://prometheus-operated.monitoring:9090/", "https://thanos.obs:10902/"]
    args = container(chart_docs({"prometheus": {"allowedUrlPrefixes": prefixes}}))["args"]
    assert [a for a in args if a.startswith("--prometheus-allowed-url-prefix=")] == [
        f"--prometheus-allowed-url-prefix={p}" for p in prefixes
    ]


def test_sigterm_exit_timeout_is_inside_the_grace_period() -> None:
    for grace in (30, 90):
        docs = chart_docs({"operator": {"terminationGracePeriodSeconds": grace}})
        pod = one(docs, "Deployment")["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == grace
        env = {e["name"]: e.get("value") for e in container(docs)["env"]}
        assert 0 < float(env["INFERENCE_CAPACITY_EXIT_TIMEOUT_SECONDS"]) <= grace - 10
