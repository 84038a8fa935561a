"""Resource types: the built-in kinds and those defined by CustomResourceDefinitions."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import FieldError, invalid_value, required, unsupported
from .tables import Column, age_column, cell_value, name_column, printer_columns

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUB_VERBS = ["get", "patch", "update"]
StorageKey = tuple[str, str]  # (group, plural)
Converter = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class VersionDef:
    name: str
    schema: dict[str, Any] | None = None
    status: bool = False
    scale: dict[str, Any] | None = None
    columns: list[Column] = field(default_factory=list)
    storage: bool = False
    deprecated: bool = False
    deprecation_warning: str | None = None


@dataclass
class ResourceDef:
    group: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    versions: dict[str, VersionDef]
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    verbs: list[str] = field(default_factory=lambda: list(ALL_VERBS))
    builtin: bool = True
    generation: bool = False
    field_labels: set[str] = field(default_factory=set)
    storage_key: StorageKey | None = None
    #: converters between this type's wire form and the shared storage form
    to_storage: Converter | None = None
    from_storage: Converter | None = None
    extra_subresources: list[str] = field(default_factory=list)
    crd_name: str | None = None
    defaults: Callable[[dict[str, Any]], None] | None = None

    @property
    def key(self) -> StorageKey:
        return self.storage_key or (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def storage_version(self) -> str:
        for version in self.versions.values():
            if version.storage:
                return version.name
        return next(iter(self.versions))

    def has_status(self, version: str) -> bool:
        return self.versions[version].status

    def supported_field(self, label: str) -> bool:
        return label in ("metadata.name", "metadata.namespace") or label in self.field_labels


def _status_columns(*columns: Column) -> list[Column]:
    return [name_column(), *columns, age_column()]


def _path(path: str, kind: str = "string", name: str = "", priority: int = 0) -> Column:
    return Column(name, kind, lambda o: cell_value(o, path, kind), priority=priority)


def _ready(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    return f"{status.get('readyReplicas', 0)}/{spec.get('replicas', status.get('replicas', 0))}"


def _pod_ready(obj: dict[str, Any]) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    containers = (obj.get("spec") or {}).get("containers") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    return f"{ready}/{len(containers)}"


def _node_status(obj: dict[str, Any]) -> str:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            text = "Ready" if cond.get("status") == "True" else "NotReady"
            if (obj.get("spec") or {}).get("unschedulable"):
                text += ",SchedulingDisabled"
            return text
    return "Unknown"


def _node_roles(obj: dict[str, Any]) -> str:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k
    )
    return ",".join(roles) or "<none>"


def _deployment_defaults(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
        if isinstance(strategy, dict) and strategy.get("type", "RollingUpdate") == "RollingUpdate":
            strategy.setdefault("type", "RollingUpdate")
            strategy.setdefault("rollingUpdate", {"maxUnavailable": "25%", "maxSurge": "25%"})


def _pod_defaults(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("terminationGracePeriodSeconds", 30)
    status = obj.setdefault("status", {})
    if isinstance(status, dict):
        status.setdefault("phase", "Pending")


def _service_defaults(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                port.setdefault("targetPort", port.get("port"))


def _secret_defaults(obj: dict[str, Any]) -> None:
    obj.setdefault("type", "Opaque")


def _namespace_defaults(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("finalizers", ["kubernetes"])
    obj["status"] = {"phase": "Active"}
    labels = obj.setdefault("metadata", {}).setdefault("labels", {})
    labels.setdefault("kubernetes.io/metadata.name", obj["metadata"].get("name", ""))


# -- events: core/v1 is the storage form; events.k8s.io/v1 is converted to and from it

_EVENT_RENAMES = [  # (events.k8s.io field, core field)
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
]


def event_to_core(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for new, old in _EVENT_RENAMES:
        if new in out:
            out[old] = out.pop(new)
    out["apiVersion"] = "v1"
    return out


def event_from_core(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for new, old in _EVENT_RENAMES:
        if old in out:
            out[new] = out.pop(old)
    out["apiVersion"] = "events.k8s.io/v1"
    return out


def _builtin(
    group: str,
    version: str,
    plural: str,
    kind: str,
    namespaced: bool = True,
    *,
    short: list[str] | None = None,
    status: bool = False,
    generation: bool = False,
    fields: set[str] | None = None,
    columns: list[Column] | None = None,
    categories: list[str] | None = None,
    verbs: list[str] | None = None,
    defaults: Callable[[dict[str, Any]], None] | None = None,
    extra_subresources: list[str] | None = None,
) -> ResourceDef:
    singular = kind.lower()
    return ResourceDef(
        group=group,
        plural=plural,
        singular=singular,
        kind=kind,
        namespaced=namespaced,
        versions={
            version: VersionDef(
                version,
                status=status,
                storage=True,
                columns=columns or [name_column(), age_column()],
            )
        },
        short_names=short or [],
        categories=categories or [],
        verbs=verbs or list(ALL_VERBS),
        generation=generation,
        field_labels=fields or set(),
        defaults=defaults,
        extra_subresources=extra_subresources or [],
    )


def builtin_resources() -> list[ResourceDef]:
    event_fields = {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
    event_columns = [
        Column("Last Seen", "string", lambda o: cell_value(o, ".lastTimestamp", "date")),
        _path(".type", name="Type"),
        _path(".reason", name="Reason"),
        Column(
            "Object",
            "string",
            lambda o: "{}/{}".format(
                str((o.get("involvedObject") or {}).get("kind", "")).lower(),
                (o.get("involvedObject") or {}).get("name", ""),
            ),
        ),
        _path(".message", name="Message"),
    ]
    events_v1 = _builtin(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        short=["ev"],
        fields={
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "reason",
            "reportingController",
            "type",
        },
    )
    events_v1.storage_key = ("", "events")
    events_v1.to_storage = event_to_core
    events_v1.from_storage = event_from_core
    resources = [
        _builtin(
            "",
            "v1",
            "namespaces",
            "Namespace",
            False,
            short=["ns"],
            status=True,
            fields={"status.phase"},
            defaults=_namespace_defaults,
            extra_subresources=["finalize"],
            columns=_status_columns(_path(".status.phase", name="Status")),
        ),
        _builtin(
            "", "v1", "events", "Event", short=["ev"], fields=event_fields, columns=[*event_columns]
        ),
        events_v1,
        _builtin(
            "",
            "v1",
            "configmaps",
            "ConfigMap",
            short=["cm"],
            columns=_status_columns(
                Column(
                    "Data",
                    "integer",
                    lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                )
            ),
        ),
        _builtin(
            "",
            "v1",
            "secrets",
            "Secret",
            fields={"type"},
            defaults=_secret_defaults,
            columns=_status_columns(
                _path(".type", name="Type"),
                Column("Data", "integer", lambda o: len(o.get("data") or {})),
            ),
        ),
        _builtin(
            "",
            "v1",
            "nodes",
            "Node",
            False,
            short=["no"],
            status=True,
            fields={"spec.unschedulable"},
            columns=[
                name_column(),
                Column("Status", "string", _node_status),
                Column("Roles", "string", _node_roles),
                age_column(),
                _path(".status.nodeInfo.kubeletVersion", name="Version"),
                _path(".status.addresses[0].address", name="Internal-IP", priority=1),
            ],
        ),
        _builtin(
            "",
            "v1",
            "pods",
            "Pod",
            short=["po"],
            status=True,
            generation=True,
            categories=["all"],
            defaults=_pod_defaults,
            fields={
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            },
            columns=[
                name_column(),
                Column("Ready", "string", _pod_ready),
                _path(".status.phase", name="Status"),
                Column(
                    "Restarts",
                    "string",
                    lambda o: str(
                        sum(
                            s.get("restartCount", 0)
                            for s in (o.get("status") or {}).get("containerStatuses") or []
                        )
                    ),
                ),
                age_column(),
                _path(".status.podIP", name="IP", priority=1),
                _path(".spec.nodeName", name="Node", priority=1),
            ],
        ),
        _builtin(
            "",
            "v1",
            "services",
            "Service",
            short=["svc"],
            status=True,
            categories=["all"],
            defaults=_service_defaults,
            columns=_status_columns(
                _path(".spec.type", name="Type"), _path(".spec.clusterIP", name="Cluster-IP")
            ),
        ),
        _builtin("", "v1", "serviceaccounts", "ServiceAccount", short=["sa"]),
        _builtin("", "v1", "endpoints", "Endpoints", short=["ep"]),
        _builtin(
            "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", short=["pvc"], status=True
        ),
        _builtin("", "v1", "resourcequotas", "ResourceQuota", short=["quota"], status=True),
        _builtin("", "v1", "limitranges", "LimitRange", short=["limits"]),
        _builtin(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            short=["deploy"],
            status=True,
            generation=True,
            categories=["all"],
            defaults=_deployment_defaults,
            extra_subresources=["scale"],
            columns=_status_columns(
                Column("Ready", "string", _ready),
                _path(".status.updatedReplicas", "integer", "Up-to-date"),
                _path(".status.availableReplicas", "integer", "Available"),
            ),
        ),
        _builtin(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            short=["rs"],
            status=True,
            generation=True,
            categories=["all"],
            fields={"status.replicas"},
            extra_subresources=["scale"],
        ),
        _builtin(
            "apps",
            "v1",
            "statefulsets",
            "StatefulSet",
            short=["sts"],
            status=True,
            generation=True,
            categories=["all"],
            extra_subresources=["scale"],
        ),
        _builtin(
            "apps",
            "v1",
            "daemonsets",
            "DaemonSet",
            short=["ds"],
            status=True,
            generation=True,
            categories=["all"],
        ),
        _builtin(
            "batch",
            "v1",
            "jobs",
            "Job",
            status=True,
            generation=True,
            categories=["all"],
            fields={"status.successful"},
        ),
        _builtin(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            short=["pdb"],
            status=True,
            generation=True,
            columns=_status_columns(
                _path(".spec.minAvailable", name="Min Available"),
                _path(".spec.maxUnavailable", name="Max Unavailable"),
                _path(".status.disruptionsAllowed", "integer", "Allowed Disruptions"),
            ),
        ),
        _builtin(
            "autoscaling",
            "v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            short=["hpa"],
            status=True,
            generation=True,
            categories=["all"],
            columns=_status_columns(
                Column(
                    "Reference",
                    "string",
                    lambda o: "{}/{}".format(
                        ((o.get("spec") or {}).get("scaleTargetRef") or {}).get("kind", ""),
                        ((o.get("spec") or {}).get("scaleTargetRef") or {}).get("name", ""),
                    ),
                ),
                _path(".spec.minReplicas", "integer", "MinPods"),
                _path(".spec.maxReplicas", "integer", "MaxPods"),
                _path(".status.currentReplicas", "integer", "Replicas"),
            ),
        ),
        _builtin(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            columns=_status_columns(_path(".spec.holderIdentity", name="Holder")),
        ),
        _builtin("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        _builtin("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        _builtin("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
        _builtin(
            "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
        ),
        _builtin(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            False,
        ),
        _builtin(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            False,
        ),
        _builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            short=["crd", "crds"],
            status=True,
            generation=True,
            columns=[
                name_column(),
                Column(
                    "Created At",
                    "date",
                    lambda o: (o.get("metadata") or {}).get("creationTimestamp"),
                ),
            ],
        ),
    ]
    resources[-1].singular = "customresourcedefinition"
    for res in resources:
        res.singular = res.kind.lower()
    return resources


# ----------------------------------------------------------------------------- CRD handling

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def validate_crd(crd: dict[str, Any]) -> list[FieldError]:
    """The checks of the real server that matter to tests (names, scope, versions, storage)."""
    errors: list[FieldError] = []
    spec = crd.get("spec")
    name = (crd.get("metadata") or {}).get("name", "")
    if not isinstance(spec, dict):
        return [required("spec")]
    group = spec.get("group")
    names = spec.get("names") or {}
    if not group:
        errors.append(required("spec.group"))
    elif not _DNS_SUBDOMAIN.match(str(group)) or "." not in str(group):
        errors.append(
            invalid_value("spec.group", group, "should be a domain with at least one dot")
        )
    if not names.get("plural"):
        errors.append(required("spec.names.plural"))
    elif not _DNS_LABEL.match(str(names["plural"])):
        errors.append(
            invalid_value(
                "spec.names.plural",
                names["plural"],
                "a lowercase RFC 1123 label must consist of lower case "
                "alphanumeric characters or '-'",
            )
        )
    if not names.get("kind"):
        errors.append(required("spec.names.kind"))
    if group and names.get("plural") and name != f"{names['plural']}.{group}":
        errors.append(
            invalid_value("metadata.name", name, 'must be spec.names.plural+"."+spec.group')
        )
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        if scope is None:
            errors.append(required("spec.scope"))
        else:
            errors.append(unsupported("spec.scope", scope, ["Cluster", "Namespaced"]))
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        errors.append(
            invalid_value(
                "spec.versions",
                versions or [],
                "must have exactly one version marked as storage version",
            )
        )
        return errors
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    if len(storage) != 1:
        errors.append(
            invalid_value(
                "spec.versions", versions, "must have exactly one version marked as storage version"
            )
        )
    seen: set[str] = set()
    for index, version in enumerate(versions):
        if not isinstance(version, dict) or not version.get("name"):
            errors.append(required(f"spec.versions[{index}].name"))
            continue
        if version["name"] in seen:
            errors.append(
                invalid_value(f"spec.versions[{index}].name", version["name"], "must be unique")
            )
        seen.add(version["name"])
        if "served" not in version:
            errors.append(required(f"spec.versions[{index}].served"))
        if "storage" not in version:
            errors.append(required(f"spec.versions[{index}].storage"))
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            errors.append(
                required(f"spec.versions[{index}].schema.openAPIV3Schema", "schemas are required")
            )
        elif schema.get("type") != "object":
            errors.append(
                invalid_value(
                    f"spec.versions[{index}].schema.openAPIV3Schema.type",
                    schema.get("type"),
                    "must be object at the root",
                )
            )
    return errors


def resource_from_crd(crd: dict[str, Any]) -> ResourceDef:
    spec = crd["spec"]
    names = spec["names"]
    versions: dict[str, VersionDef] = {}
    for version in spec["versions"]:
        if not version.get("served"):
            continue
        sub = version.get("subresources") or {}
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        versions[version["name"]] = VersionDef(
            name=version["name"],
            schema=schema,
            status="status" in sub,
            scale=sub.get("scale"),
            columns=printer_columns(version.get("additionalPrinterColumns") or []),
            storage=bool(version.get("storage")),
            deprecated=bool(version.get("deprecated")),
            deprecation_warning=version.get("deprecationWarning"),
        )
    fields: set[str] = set()
    for version in spec["versions"]:
        for selectable in version.get("selectableFields") or []:
            path = str(selectable.get("jsonPath", "")).lstrip(".")
            if path:
                fields.add(path)
    plural = names["plural"]
    return ResourceDef(
        group=spec["group"],
        plural=plural,
        singular=names.get("singular") or names["kind"].lower(),
        kind=names["kind"],
        namespaced=spec["scope"] == "Namespaced",
        versions=versions,
        short_names=list(names.get("shortNames") or []),
        categories=list(names.get("categories") or []),
        builtin=False,
        generation=True,
        field_labels=fields,
        crd_name=crd["metadata"]["name"],
    )


def version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version ordering: GA > beta > alpha, higher numbers first (lower tuple wins)."""
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (3, 0, 0)
    major = int(match.group(1))
    level = {"alpha": 2, "beta": 1, None: 0}[match.group(2)]
    minor = int(match.group(3) or 0)
    return (level, -major, -minor)
