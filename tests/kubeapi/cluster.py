"""API semantics over the store: create/update/patch/delete, CRDs, discovery, GC, controllers."""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
import random
import re
import uuid
from collections.abc import Callable
from typing import Any

from . import schema as schemas
from .errors import (
    ApiError,
    FieldError,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    invalid,
    invalid_value,
    not_found,
    required,
)
from .patches import PatchError, json_patch, merge_patch, strategic_merge_patch
from .resources import (
    ResourceDef,
    StorageKey,
    builtin_resources,
    resource_from_crd,
    validate_crd,
    version_priority,
)
from .store import LogEntry, Store

log = logging.getLogger("kubeapi")

CRD_KEY: StorageKey = ("apiextensions.k8s.io", "customresourcedefinitions")
NS_KEY: StorageKey = ("", "namespaces")
CRD_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _strip_meta(obj: dict[str, Any], drop_status: bool) -> dict[str, Any]:
    return {
        k: v
        for k, v in obj.items()
        if k not in ("metadata", "apiVersion", "kind") and not (drop_status and k == "status")
    }


class Registry:
    """Which resources are served, for routing and discovery."""

    def __init__(self) -> None:
        self.defs: list[ResourceDef] = []

    def register(self, rdef: ResourceDef) -> None:
        self.unregister_crd(rdef.crd_name) if rdef.crd_name else None
        self.defs.append(rdef)

    def unregister_crd(self, crd_name: str) -> ResourceDef | None:
        for rdef in list(self.defs):
            if rdef.crd_name == crd_name:
                self.defs.remove(rdef)
                return rdef
        return None

    def lookup(self, group: str, version: str, plural: str) -> ResourceDef | None:
        for rdef in self.defs:
            if rdef.group == group and rdef.plural == plural and version in rdef.versions:
                return rdef
        return None

    def by_key(self, key: StorageKey) -> ResourceDef | None:
        for rdef in self.defs:
            if rdef.key == key and rdef.storage_key is None:
                return rdef
        return None

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, preferred first."""
        result: dict[str, set[str]] = {}
        for rdef in self.defs:
            result.setdefault(rdef.group, set()).update(rdef.versions)
        return {g: sorted(vs, key=version_priority) for g, vs in result.items()}

    def resources_in(self, group: str, version: str) -> list[ResourceDef]:
        return [r for r in self.defs if r.group == group and version in r.versions]


class Cluster:
    """All state and write semantics; every method runs on the server's event loop thread."""

    def __init__(
        self,
        rollout_delay: float = 0.05,
        deployment_controller: bool = True,
        gc_delay: float = 0.0,
    ) -> None:
        self.store = Store()
        self.registry = Registry()
        for rdef in builtin_resources():
            self.registry.register(rdef)
        self.rollout_delay = rollout_delay
        self.deployment_controller = deployment_controller
        self.gc_delay = gc_delay
        self.cel_logged: set[str] = set()
        self._pending: asyncio.Queue[LogEntry] | None = None
        self._controller_task: asyncio.Task[None] | None = None
        self._rollouts: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self.store.listeners.append(self._on_commit)
        self.store.before_commit.append(self._discovery_sync)
        for name in INITIAL_NAMESPACES:
            self._create_namespace_raw(name)

    # ------------------------------------------------------------------------ helpers

    def _create_namespace_raw(self, name: str) -> None:
        obj = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": now_iso(),
                "labels": {"kubernetes.io/metadata.name": name},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        self.store.commit(NS_KEY, "ADDED", obj)

    def cel_log(self, message: str) -> None:
        if message not in self.cel_logged:
            self.cel_logged.add(message)
            log.warning("%s", message)

    def to_wire(self, rdef: ResourceDef, version: str, obj: dict[str, Any]) -> dict[str, Any]:
        out = rdef.from_storage(obj) if rdef.from_storage else dict(obj)
        out["apiVersion"] = rdef.api_version(version)
        out["kind"] = rdef.kind
        return out

    def to_storage(self, rdef: ResourceDef, obj: dict[str, Any]) -> dict[str, Any]:
        out = rdef.to_storage(obj) if rdef.to_storage else obj
        target = self.registry.by_key(rdef.key) or rdef
        out["apiVersion"] = target.api_version(target.storage_version())
        out["kind"] = target.kind
        return out

    def _existing(self, rdef: ResourceDef, namespace: str, name: str) -> dict[str, Any]:
        obj = self.store.get(rdef.key, namespace, name)
        if obj is None:
            raise not_found(rdef.plural, rdef.group, name)
        return obj

    def _invalid(self, rdef: ResourceDef, name: str, errors: list[FieldError]) -> ApiError:
        return invalid(rdef.kind, rdef.group, name, errors)

    # ------------------------------------------------------------------------ validation

    def _check_meta_types(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata")
        if meta is None:
            obj["metadata"] = {}
            return
        if not isinstance(meta, dict):
            raise bad_request(
                "json: cannot unmarshal "
                + _go_type(meta)
                + " into Go struct field Object.metadata of type v1.ObjectMeta"
            )
        for key in ("name", "generateName", "namespace", "resourceVersion", "uid"):
            if key in meta and meta[key] is not None and not isinstance(meta[key], str):
                raise bad_request(
                    f"json: cannot unmarshal {_go_type(meta[key])} into Go struct field "
                    f"ObjectMeta.metadata.{key} of type string"
                )
        for key in ("labels", "annotations"):
            value = meta.get(key)
            if value is None:
                continue
            if not isinstance(value, dict):
                raise bad_request(
                    f"json: cannot unmarshal {_go_type(value)} into Go struct field "
                    f"ObjectMeta.metadata.{key} of type map[string]string"
                )
            for item in value.values():
                if not isinstance(item, str):
                    raise bad_request(
                        f"json: cannot unmarshal {_go_type(item)} into Go struct field "
                        f"ObjectMeta.metadata.{key} of type string"
                    )
        if (
            "finalizers" in meta
            and meta["finalizers"] is not None
            and (
                not isinstance(meta["finalizers"], list)
                or not all(isinstance(f, str) for f in meta["finalizers"])
            )
        ):
            raise bad_request(
                "json: cannot unmarshal into Go struct field "
                "ObjectMeta.metadata.finalizers of type []string"
            )

    def _validate_meta(self, rdef: ResourceDef, obj: dict[str, Any]) -> list[FieldError]:
        errors: list[FieldError] = []
        meta = obj["metadata"]
        name = meta.get("name", "")
        if rdef.key == NS_KEY:
            if len(name) > 63 or not _DNS_LABEL.match(name):
                errors.append(invalid_value("metadata.name", name, LABEL_MSG))
        elif rdef.key == ("", "services"):
            if len(name) > 63 or not _DNS_1035.match(name):
                errors.append(invalid_value("metadata.name", name, DNS1035_MSG))
        elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            errors.append(invalid_value("metadata.name", name, SUBDOMAIN_MSG))
        for key, value in (meta.get("labels") or {}).items():
            if not _QUALIFIED.match(key) or len(key.split("/")[-1]) > 63:
                errors.append(
                    invalid_value(
                        "metadata.labels",
                        key,
                        "name part must consist of alphanumeric characters, "
                        "'-', '_' or '.', and must start and end with an "
                        "alphanumeric character",
                    )
                )
            if len(value) > 63 or not _LABEL_VALUE.match(value):
                errors.append(invalid_value("metadata.labels", value, LABEL_VALUE_MSG))
        for key in meta.get("annotations") or {}:
            if not _QUALIFIED.match(key):
                errors.append(
                    invalid_value(
                        "metadata.annotations",
                        key,
                        "name part must consist of alphanumeric characters, "
                        "'-', '_' or '.', and must start and end with an "
                        "alphanumeric character",
                    )
                )
        for index, ref in enumerate(meta.get("ownerReferences") or []):
            if not isinstance(ref, dict):
                errors.append(
                    invalid_value(f"metadata.ownerReferences[{index}]", ref, "must be an object")
                )
                continue
            for key in ("apiVersion", "kind", "name", "uid"):
                if not ref.get(key):
                    errors.append(
                        required(
                            f"metadata.ownerReferences[{index}].{key}"
                            if key != "uid"
                            else f"metadata.ownerReferences[{index}].uid",
                            "",
                        )
                    )
        controllers = [
            r
            for r in meta.get("ownerReferences") or []
            if isinstance(r, dict) and r.get("controller")
        ]
        if len(controllers) > 1:
            errors.append(
                invalid_value(
                    "metadata.ownerReferences",
                    meta["ownerReferences"],
                    "Only one reference can have Controller set to true",
                )
            )
        return errors

    def _schema_pipeline(
        self,
        rdef: ResourceDef,
        version: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> tuple[dict[str, Any], list[FieldError]]:
        schema = rdef.versions[version].schema
        if rdef.builtin or schema is None:
            return obj, []
        pruned = schemas.prune(obj, schema, root=True)
        pruned = schemas.apply_defaults(pruned, schema)
        errors = schemas.validate_object(pruned, schema, old, cel_log=self.cel_log)
        return pruned, errors

    # ------------------------------------------------------------------------ create

    def create(
        self,
        rdef: ResourceDef,
        version: str,
        namespace: str | None,
        body: Any,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        obj = copy.deepcopy(body)
        self._check_api_version(rdef, version, obj)
        self._check_meta_types(obj)
        meta = obj["metadata"]
        if rdef.namespaced:
            assert namespace is not None
            body_ns = meta.get("namespace")
            if body_ns and body_ns != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the "
                    "namespace sent on the request"
                )
            meta["namespace"] = namespace
            ns_obj = self.store.get(NS_KEY, "", namespace)
            if ns_obj is None:
                raise not_found("namespaces", "", namespace)
            if ns_obj["metadata"].get("deletionTimestamp"):
                raise ApiError(
                    403,
                    f"{rdef.plural}{'.' + rdef.group if rdef.group else ''} "
                    f'"{meta.get("name") or meta.get("generateName", "")}" is forbidden: unable '
                    f"to create new content in namespace {namespace} because it is being "
                    "terminated",
                    "Forbidden",
                    {"name": meta.get("name", ""), "kind": rdef.plural, "group": rdef.group},
                )
        else:
            meta.pop("namespace", None)
        if rdef.crd_name:
            crd = self.store.get(CRD_KEY, "", rdef.crd_name)
            if crd is not None and crd["metadata"].get("deletionTimestamp"):
                raise ApiError(
                    405,
                    "create not allowed while custom resource definition is terminating",
                    "MethodNotAllowed",
                    {},
                )
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(
                    random.choice(GENERATE_CHARS) for _ in range(5)
                )
            else:
                raise self._invalid(
                    rdef, "", [required("metadata.name", "name or generateName is required")]
                )
        name = meta["name"]
        for key in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        ):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        if rdef.generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rdef.has_status(version) and rdef.key != CRD_KEY:
            obj.pop("status", None)
        if rdef.defaults is not None:
            rdef.defaults(obj)
        errors = self._validate_meta(rdef, obj)
        obj, schema_errors = self._schema_pipeline(rdef, version, obj, None)
        errors.extend(schema_errors)
        if rdef.key == CRD_KEY:
            errors.extend(validate_crd(obj))
        if errors:
            raise self._invalid(rdef, name, errors)
        if self.store.get(rdef.key, meta.get("namespace", ""), name) is not None:
            raise already_exists(rdef.plural, rdef.group, name)
        stored = self.to_storage(rdef, obj)
        if rdef.key == CRD_KEY:
            self._crd_conflicts(stored)
            stored = self._crd_prepare(stored)
        if dry_run:
            return self.to_wire(rdef, version, stored)
        result = self.store.commit(rdef.key, "ADDED", stored)
        return self.to_wire(rdef, version, result)

    def _check_api_version(self, rdef: ResourceDef, version: str, obj: dict[str, Any]) -> None:
        expected = rdef.api_version(version)
        api_version = obj.get("apiVersion")
        if api_version and api_version != expected:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the "
                f"expected API version ({expected})"
            )
        kind = obj.get("kind")
        if kind and kind != rdef.kind:
            raise bad_request(
                f"the object provided is unrecognized (must be of type "
                f"{rdef.kind}): couldn't get version/kind; json parse error"
            )
        obj["apiVersion"] = expected
        obj["kind"] = rdef.kind

    # ------------------------------------------------------------------------ update/patch

    def update(
        self,
        rdef: ResourceDef,
        version: str,
        namespace: str,
        name: str,
        body: Any,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        old = self._existing(rdef, namespace, name)
        obj = copy.deepcopy(body)
        self._check_api_version(rdef, version, obj)
        self._check_meta_types(obj)
        meta = obj["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name "
                f"on the URL ({name})"
            )
        if rdef.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        rv = meta.get("resourceVersion")
        if not rv and not rdef.builtin and subresource is None:
            raise self._invalid(
                rdef,
                name,
                [
                    invalid_value(
                        "metadata.resourceVersion", "0x0", "must be specified for an update"
                    )
                ],
            )
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(rdef.plural, rdef.group, name)
        return self._write(rdef, version, old, obj, subresource, dry_run)

    def patch(
        self,
        rdef: ResourceDef,
        version: str,
        namespace: str,
        name: str,
        patch_type: str,
        body: Any,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        old = self._existing(rdef, namespace, name)
        current = self.to_wire(rdef, version, copy.deepcopy(old))
        try:
            if patch_type == "json":
                patched = json_patch(current, body)
            elif patch_type == "merge":
                if not isinstance(body, dict):
                    raise PatchError("merge patch must be a JSON object", 400)
                patched = merge_patch(current, body)
            elif patch_type == "strategic":
                if not isinstance(body, dict):
                    raise PatchError("strategic merge patch must be a JSON object", 400)
                patched = strategic_merge_patch(current, body)
            else:  # pragma: no cover - filtered by the HTTP layer
                raise PatchError(f"unknown patch type {patch_type}", 415)
        except PatchError as exc:
            if exc.code == 400:
                raise bad_request(exc.message) from exc
            raise ApiError(422, exc.message, "Invalid", {}) from exc
        if not isinstance(patched, dict):
            raise bad_request("the patched object is not a JSON object")
        self._check_meta_types(patched)
        meta = patched["metadata"]
        if meta.get("name") != name:
            raise self._invalid(
                rdef, name, [invalid_value("metadata.name", meta.get("name"), "field is immutable")]
            )
        if rdef.namespaced and meta.get("namespace") != namespace:
            raise self._invalid(
                rdef,
                name,
                [invalid_value("metadata.namespace", meta.get("namespace"), "field is immutable")],
            )
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(rdef.plural, rdef.group, name)
        if patched.get("apiVersion") != current["apiVersion"] or patched.get("kind") != rdef.kind:
            self._check_api_version(rdef, version, patched)
        return self._write(rdef, version, old, patched, subresource, dry_run)

    def _write(
        self,
        rdef: ResourceDef,
        version: str,
        old: dict[str, Any],
        new: dict[str, Any],
        subresource: str | None,
        dry_run: bool,
    ) -> dict[str, Any]:
        """Common tail of update and patch: server-owned fields, subresources, validation."""
        old_meta = old["metadata"]
        name = old_meta["name"]
        has_status = rdef.has_status(version)
        old_wire = self.to_wire(rdef, version, copy.deepcopy(old))
        if subresource == "status":
            result = copy.deepcopy(old_wire)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            new = result
        elif has_status:
            new = dict(new)
            if "status" in old_wire:
                new["status"] = copy.deepcopy(old_wire["status"])
            else:
                new.pop("status", None)
        meta = new["metadata"] = dict(new["metadata"])
        errors: list[FieldError] = []
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            errors.append(invalid_value("metadata.uid", meta["uid"], "field is immutable"))
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["name"] = name
        if rdef.namespaced:
            meta["namespace"] = old_meta.get("namespace", "")
        meta["resourceVersion"] = old_meta["resourceVersion"]
        for key in ("managedFields", "selfLink"):
            meta.pop(key, None)
        for key in ("labels", "annotations", "finalizers", "ownerReferences"):
            if key in meta and not meta[key]:
                del meta[key]
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                errors.append(
                    forbidden(
                        "metadata.finalizers",
                        "no new finalizers can be added if the object is being "
                        "deleted, found new finalizers " + repr(sorted(added)),
                    )
                )
        errors.extend(self._validate_meta(rdef, new))
        new, schema_errors = self._schema_pipeline(rdef, version, new, old_wire)
        meta = new["metadata"]
        errors.extend(schema_errors)
        if rdef.key == CRD_KEY:
            errors.extend(validate_crd(new))
        if errors:
            raise self._invalid(rdef, name, errors)
        if rdef.generation and "generation" in old_meta:
            if _strip_meta(new, has_status) != _strip_meta(old_wire, has_status):
                meta["generation"] = old_meta["generation"] + 1
        stored = self.to_storage(rdef, new)
        if rdef.key == CRD_KEY:
            self._crd_conflicts(stored)
            stored = self._crd_prepare(stored)
        if stored == old:
            return self.to_wire(rdef, version, old)  # no-op: no new RV, no event
        if dry_run:
            return self.to_wire(rdef, version, stored)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            final = self.store.commit(rdef.key, "DELETED", stored, old)
            return self.to_wire(rdef, version, final)
        result = self.store.commit(rdef.key, "MODIFIED", stored, old)
        return self.to_wire(rdef, version, result)

    # ------------------------------------------------------------------------ delete

    def delete(
        self,
        rdef: ResourceDef,
        version: str,
        namespace: str,
        name: str,
        options: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """Delete (or mark for deletion); returns (object, removed_now)."""
        options = options or {}
        old = self._existing(rdef, namespace, name)
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise ApiError(
                409,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object "
                f"meta: {old['metadata']['uid']}",
                "Conflict",
                {"name": name, "group": rdef.group, "kind": rdef.plural},
            )
        if (
            pre.get("resourceVersion")
            and pre["resourceVersion"] != old["metadata"]["resourceVersion"]
        ):
            raise ApiError(
                409,
                f"Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                f"{old['metadata']['resourceVersion']}",
                "Conflict",
                {"name": name, "group": rdef.group, "kind": rdef.plural},
            )
        return self._delete_object(rdef, version, old, options, dry_run)

    def _delete_object(
        self,
        rdef: ResourceDef,
        version: str,
        old: dict[str, Any],
        options: dict[str, Any],
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is True:
            policy = "Orphan"
        obj = copy.deepcopy(old)
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if rdef.key == NS_KEY:
            policy = None
            obj.setdefault("status", {})["phase"] = "Terminating"
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        elif policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if meta.get("deletionTimestamp"):
            if finalizers != (meta.get("finalizers") or []) and not dry_run:
                meta["finalizers"] = finalizers
                obj = self.store.commit(rdef.key, "MODIFIED", obj, old)
            return self.to_wire(rdef, version, obj), False
        pending = bool(finalizers) or rdef.key == NS_KEY
        if not pending:
            if dry_run:
                return self.to_wire(rdef, version, obj), True
            final = self.store.commit(rdef.key, "DELETED", obj, old)
            return self.to_wire(rdef, version, final), True
        if finalizers:
            meta["finalizers"] = finalizers
        meta["deletionTimestamp"] = now_iso()
        meta["deletionGracePeriodSeconds"] = 0
        if "generation" in meta:
            meta["generation"] += 1
        if dry_run:
            return self.to_wire(rdef, version, obj), False
        result = self.store.commit(rdef.key, "MODIFIED", obj, old)
        return self.to_wire(rdef, version, result), False

    def delete_internal(
        self,
        key: StorageKey,
        obj: dict[str, Any],
        policy: str = "Background",
    ) -> None:
        rdef = self.registry.by_key(key)
        if rdef is None:
            self.store.commit(key, "DELETED", obj, obj)
            return
        current = self.store.get(key, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if current is None or current["metadata"]["uid"] != obj["metadata"]["uid"]:
            return
        self._delete_object(rdef, rdef.storage_version(), current, {"propagationPolicy": policy})

    def _set_finalizers(self, key: StorageKey, obj: dict[str, Any], finalizers: list[str]) -> None:
        new = copy.deepcopy(obj)
        if finalizers:
            new["metadata"]["finalizers"] = finalizers
        else:
            new["metadata"].pop("finalizers", None)
        if new == obj:
            return
        event = (
            "DELETED" if new["metadata"].get("deletionTimestamp") and not finalizers else "MODIFIED"
        )
        self.store.commit(key, event, new, obj)

    # ------------------------------------------------------------------------ CRDs

    def _crd_conflicts(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        for rdef in self.registry.defs:
            if rdef.crd_name == crd["metadata"]["name"]:
                continue
            if rdef.group == spec["group"] and rdef.plural == spec["names"]["plural"]:
                raise already_exists(
                    "customresourcedefinitions", "apiextensions.k8s.io", crd["metadata"]["name"]
                )

    def _crd_prepare(self, crd: dict[str, Any]) -> dict[str, Any]:
        crd = copy.deepcopy(crd)
        spec = crd["spec"]
        names = dict(spec["names"])
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
        spec["names"] = names
        spec.setdefault("conversion", {"strategy": "None"})
        finalizers = crd["metadata"].setdefault("finalizers", [])
        if CRD_FINALIZER not in finalizers and not crd["metadata"].get("deletionTimestamp"):
            finalizers.append(CRD_FINALIZER)
        stamp = now_iso()
        old_status = crd.get("status") or {}
        stored_versions = list(old_status.get("storedVersions") or [])
        storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
        if storage not in stored_versions:
            stored_versions.append(storage)
        old_conditions = {c.get("type"): c for c in old_status.get("conditions") or []}

        def condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
            previous = old_conditions.get(kind)
            moved = previous is None or previous.get("status") != status
            return {
                "type": kind,
                "status": status,
                "lastTransitionTime": stamp if moved else previous["lastTransitionTime"],
                "reason": reason,
                "message": message,
            }

        conditions = [
            condition("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
            condition(
                "Established",
                "True",
                "InitialNamesAccepted",
                "the initial names have been accepted",
            ),
        ]
        if crd["metadata"].get("deletionTimestamp"):
            conditions.append(
                condition(
                    "Terminating",
                    "True",
                    "InstanceDeletionInProgress",
                    "CustomResource deletion is in progress",
                )
            )
        crd["status"] = {
            "conditions": conditions,
            "acceptedNames": names,
            "storedVersions": stored_versions,
        }
        return crd

    # ------------------------------------------------------------------------ controllers

    def start(self) -> None:
        self._pending = asyncio.Queue()
        self._controller_task = asyncio.get_running_loop().create_task(self._controllers())

    async def stop(self) -> None:
        for handle in self._rollouts.values():
            handle.cancel()
        if self._controller_task is not None:
            self._controller_task.cancel()
            try:
                await self._controller_task
            except asyncio.CancelledError:
                pass

    def _on_commit(self, entry: LogEntry) -> None:
        if self._pending is not None:
            self._pending.put_nowait(entry)

    async def _controllers(self) -> None:
        assert self._pending is not None
        while True:
            entry = await self._pending.get()
            try:
                if self.gc_delay:
                    await asyncio.sleep(self.gc_delay)
                self.reconcile(entry)
            except Exception:  # noqa: BLE001 - a controller bug must not kill the server
                log.exception("controller failed on %s", entry.key)

    def reconcile(self, entry: LogEntry) -> None:
        obj = entry.object
        meta = obj["metadata"]
        if entry.type == "DELETED":
            self._collect_dependents(meta["uid"])
            for ref in meta.get("ownerReferences") or []:
                self._owner_waiting(ref.get("uid", ""))
            if entry.key == CRD_KEY:
                self._crd_gone(obj)
            else:
                self.on_crd_dependent_deleted(entry.key)
            if entry.namespace:
                self._namespace_progress(entry.namespace)
            return
        deleting = bool(meta.get("deletionTimestamp"))
        if deleting:
            finalizers = meta.get("finalizers") or []
            if "orphan" in finalizers:
                self._orphan_dependents(meta["uid"])
                self._set_finalizers(entry.key, obj, [f for f in finalizers if f != "orphan"])
                return
            if "foregroundDeletion" in finalizers:
                if not self._collect_dependents(meta["uid"], foreground=True):
                    self._set_finalizers(
                        entry.key, obj, [f for f in finalizers if f != "foregroundDeletion"]
                    )
                return
            if entry.key == NS_KEY:
                self._namespace_progress(meta["name"])
            elif entry.key == CRD_KEY:
                self._crd_cleanup(obj)
        elif entry.namespace:
            self._namespace_progress(entry.namespace)
        if entry.key == ("apps", "deployments") and self.deployment_controller and not deleting:
            self._deployment(obj)

    def _dependents(self, uid: str) -> list[tuple[StorageKey, dict[str, Any]]]:
        found = []
        for key, obj in self.store.all_objects():
            for ref in obj["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == uid:
                    found.append((key, obj))
                    break
        return found

    def _uid_exists(self, uid: str) -> bool:
        for _, obj in self.store.all_objects():
            if obj["metadata"].get("uid") == uid:
                return True
        return False

    def _collect_dependents(self, uid: str, foreground: bool = False) -> bool:
        """Garbage-collect dependents of a removed (or foreground-deleting) owner."""
        dependents = self._dependents(uid)
        for key, obj in dependents:
            refs = obj["metadata"].get("ownerReferences") or []
            others = [r for r in refs if r.get("uid") != uid]
            if not foreground and any(self._uid_exists(r.get("uid", "")) for r in others):
                new = copy.deepcopy(obj)
                new["metadata"]["ownerReferences"] = others
                self.store.commit(key, "MODIFIED", new, obj)
                continue
            if not obj["metadata"].get("deletionTimestamp"):
                self.delete_internal(key, obj, "Foreground" if foreground else "Background")
        if foreground:
            return bool(self._dependents(uid))
        return False

    def _orphan_dependents(self, uid: str) -> None:
        for key, obj in self._dependents(uid):
            new = copy.deepcopy(obj)
            refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)
            self.store.commit(key, "MODIFIED", new, obj)

    def _owner_waiting(self, uid: str) -> None:
        for key, obj in self.store.all_objects():
            if obj["metadata"].get("uid") == uid:
                finalizers = obj["metadata"].get("finalizers") or []
                if "foregroundDeletion" in finalizers and not self._dependents(uid):
                    self._set_finalizers(
                        key, obj, [f for f in finalizers if f != "foregroundDeletion"]
                    )

    def _namespace_progress(self, namespace: str) -> None:
        ns = self.store.get(NS_KEY, "", namespace)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        remaining = False
        for key, obj in list(self.store.all_objects()):
            if obj["metadata"].get("namespace") != namespace or key == NS_KEY:
                continue
            remaining = True
            if not obj["metadata"].get("deletionTimestamp"):
                self.delete_internal(key, obj)
        if not remaining:
            final = copy.deepcopy(ns)
            final.get("spec", {}).pop("finalizers", None)
            self.store.commit(NS_KEY, "DELETED", final, ns)

    def _crd_cleanup(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        key = (spec["group"], spec["names"]["plural"])
        updated = self._crd_prepare(crd)
        if updated != crd:
            self.store.commit(CRD_KEY, "MODIFIED", updated, crd)
            return
        remaining = self.store.items(key)
        for obj in remaining:
            if not obj["metadata"].get("deletionTimestamp"):
                self.delete_internal(key, obj)
        if not self.store.items(key):
            finalizers = [f for f in crd["metadata"].get("finalizers") or [] if f != CRD_FINALIZER]
            self._set_finalizers(CRD_KEY, crd, finalizers)

    def _discovery_sync(self, key: StorageKey, event: str, obj: dict[str, Any]) -> None:
        """Serve (or stop serving) a CRD's type before the CRD's own watch event goes out."""
        if key != CRD_KEY:
            return
        if event == "DELETED":
            self.registry.unregister_crd(obj["metadata"]["name"])
        else:
            self.registry.register(resource_from_crd(obj))

    def _crd_gone(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        key = (spec["group"], spec["names"]["plural"])
        for obj in self.store.items(key):
            self.store.commit(key, "DELETED", obj, obj)
        self.store.purge(key)
        self.store.close_watchers(key)

    def on_crd_dependent_deleted(self, key: StorageKey) -> None:
        for crd in self.store.items(CRD_KEY):
            spec = crd["spec"]
            if (spec["group"], spec["names"]["plural"]) == key and crd["metadata"].get(
                "deletionTimestamp"
            ):
                self._crd_cleanup(crd)

    # -- deployments: a minimal rollout controller

    def _deployment(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        status = obj.get("status") or {}
        spec = obj.get("spec") or {}
        replicas = spec.get("replicas", 1)
        key = (meta.get("namespace", ""), meta["name"])
        done = (
            status.get("observedGeneration") == meta.get("generation")
            and status.get("updatedReplicas", 0) == replicas
            and status.get("availableReplicas", 0) == replicas
            and status.get("replicas", 0) == replicas
        )
        if done:
            return
        if status.get("observedGeneration") != meta.get("generation"):
            handle = self._rollouts.pop(key, None)
            if handle is not None:
                handle.cancel()
            stamp = now_iso()
            new_status = {
                "observedGeneration": meta.get("generation"),
                "replicas": replicas,
                "updatedReplicas": 0 if replicas else 0,
                "readyReplicas": min(status.get("readyReplicas", 0), replicas),
                "availableReplicas": min(status.get("availableReplicas", 0), replicas),
                "unavailableReplicas": replicas - min(status.get("availableReplicas", 0), replicas),
                "conditions": [
                    _condition(
                        status,
                        "Progressing",
                        "True",
                        "ReplicaSetUpdated",
                        f'ReplicaSet "{meta["name"]}" is progressing.',
                        stamp,
                    ),
                    _condition(
                        status,
                        "Available",
                        "True" if status.get("availableReplicas", 0) >= replicas else "False",
                        "MinimumReplicasAvailable"
                        if status.get("availableReplicas", 0) >= replicas
                        else "MinimumReplicasUnavailable",
                        "Deployment has minimum availability.",
                        stamp,
                    ),
                ],
            }
            self._status_write(("apps", "deployments"), obj, new_status)
            if not spec.get("paused"):
                loop = asyncio.get_running_loop()
                self._rollouts[key] = loop.call_later(
                    self.rollout_delay, self._finish_rollout, key, meta.get("generation")
                )
        elif key not in self._rollouts and not spec.get("paused"):
            self._finish_rollout(key, meta.get("generation"))

    def _finish_rollout(self, key: tuple[str, str], generation: int) -> None:
        self._rollouts.pop(key, None)
        obj = self.store.get(("apps", "deployments"), *key)
        if obj is None or obj["metadata"].get("generation") != generation:
            return
        status = obj.get("status") or {}
        replicas = (obj.get("spec") or {}).get("replicas", 1)
        stamp = now_iso()
        new_status = {
            "observedGeneration": generation,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "conditions": [
                _condition(
                    status,
                    "Available",
                    "True",
                    "MinimumReplicasAvailable",
                    "Deployment has minimum availability.",
                    stamp,
                ),
                _condition(
                    status,
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    f'ReplicaSet "{key[1]}" has successfully progressed.',
                    stamp,
                ),
            ],
        }
        if not replicas:
            for field in ("readyReplicas", "availableReplicas", "updatedReplicas"):
                new_status.pop(field)
        self._status_write(("apps", "deployments"), obj, new_status)

    def _status_write(self, key: StorageKey, obj: dict[str, Any], status: dict[str, Any]) -> None:
        new = copy.deepcopy(obj)
        new["status"] = status
        if new != obj:
            self.store.commit(key, "MODIFIED", new, obj)


def _condition(
    status: dict[str, Any], kind: str, value: str, reason: str, message: str, stamp: str
) -> dict[str, Any]:
    previous = next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)
    moved = previous is None or previous.get("status") != value
    return {
        "type": kind,
        "status": value,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp if moved else previous.get("lastTransitionTime", stamp),
        "reason": reason,
        "message": message,
    }


def _go_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


Callback = Callable[[], None]
