"""The HTTP layer: routing, discovery, OpenAPI, verbs, watch streams, admin API."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from tests.realk8s.faults import FaultRule, Faults, RequestLog, RequestRecord

from .cluster import CRD_KEY, NS_KEY, Cluster
from .errors import (
    ApiError,
    bad_request,
    invalid,
    invalid_value,
    method_not_allowed,
    resource_not_found,
    status_body,
    unsupported_media_type,
)
from .resources import SUB_VERBS, ResourceDef
from .selectors import combine, parse_field_selector, parse_label_selector
from .store import CLOSE, LogEntry
from .tables import make_table

log = logging.getLogger("kubeapi")
access_log = logging.getLogger("kubeapi.access")
T = TypeVar("T")

ADMIN_PREFIX = "/_kubeapi/"
VERSION_INFO = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.0",
    "gitCommit": "0",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.26",
    "compiler": "gc",
    "platform": "linux/amd64",
}
PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}


def parse_bool(value: str | None) -> bool:
    """Go's strconv.ParseBool; anything unparsable is false."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def json_response(
    obj: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(body=dumps(obj).encode(), status=status, headers=all_headers)


def error_response(error: ApiError) -> web.Response:
    return json_response(error.body(), error.code, error.headers or None)


@dataclass
class Target:
    """A parsed resource URL."""

    rdef: ResourceDef
    version: str
    namespace: str | None
    name: str | None
    subresource: str | None


def write_kubeconfig(path: str | Path, url: str, namespace: str = "default") -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubeapi", "cluster": {"server": url}}],
        "users": [{"name": "kubeapi", "user": {"token": "kubeapi-test-token"}}],
        "contexts": [
            {
                "name": "kubeapi",
                "context": {"cluster": "kubeapi", "user": "kubeapi", "namespace": namespace},
            }
        ],
        "current-context": "kubeapi",
        "preferences": {},
    }
    target = Path(path)
    target.write_text(yaml.safe_dump(config, sort_keys=False))
    return target


class KubeAPIServer:
    """An in-memory Kubernetes API server over HTTP on 127.0.0.1.

    Run it in a background thread (``start()``/``stop()``, or as a context manager) or in the
    current event loop (``await start_async()`` / ``await stop_async()``).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        bookmark_interval: float = 30.0,
        rollout_delay: float = 0.05,
        deployment_controller: bool = True,
        verbose: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.bookmark_interval = bookmark_interval
        self.verbose = verbose
        self.cluster = Cluster(
            rollout_delay=rollout_delay, deployment_controller=deployment_controller
        )
        self.faults = Faults()
        self.requests = RequestLog()
        self.faults.bind("drop_watches", lambda: self.call(self.cluster.store.close_watchers))
        self.faults.bind("expire", lambda: self.call(self.cluster.store.expire))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._stopping = False
        self._streams: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        return write_kubeconfig(path, self.url, namespace)

    async def start_async(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.cluster.start()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=1.0, handle_signals=False
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        server = site._server  # noqa: SLF001 - the only way to learn the bound port
        if server is not None and getattr(server, "sockets", None):
            self.port = server.sockets[0].getsockname()[1]

    async def stop_async(self) -> None:
        self._stopping = True
        self.cluster.store.close_watchers()
        await asyncio.sleep(0)
        if self._runner is not None:
            await self._runner.cleanup()
        await self.cluster.stop()

    def start(self, timeout: float = 10.0) -> KubeAPIServer:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.stop_async())
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name="kubeapi", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError("the kubeapi server did not start in time")
        if failure:
            raise failure[0]
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    def __enter__(self) -> KubeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the server's loop (from any thread) and return its result."""
        loop = self._loop
        if loop is None or not loop.is_running():
            return fn(*args)
        try:
            if asyncio.get_running_loop() is loop:
                return fn(*args)
        except RuntimeError:
            pass

        async def run() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), loop).result(10)

    # ------------------------------------------------------------------------ convenience

    def get_object(
        self, group: str, plural: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """A copy of a stored object (storage form), for assertions."""

        def read() -> dict[str, Any] | None:
            obj = self.cluster.store.get((group, plural), namespace, name)
            return json.loads(dumps(obj)) if obj is not None else None

        return self.call(read)

    @property
    def resource_version(self) -> int:
        return self.cluster.store.rv

    # ------------------------------------------------------------------------ dispatch

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        path = request.path
        record: dict[str, Any] = {}
        response: web.StreamResponse
        try:
            if path.startswith(ADMIN_PREFIX):
                response = await self._admin(request)
            else:
                delay, rule = self.faults.take(request.method, request.path_qs)
                if delay:
                    await asyncio.sleep(delay)
                self._describe(request, record)
                if rule is not None:
                    response = self._fault_response(rule)
                else:
                    response = await self._dispatch(request, record)
        except ApiError as exc:
            response = error_response(exc)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - never a traceback to the client
            log.exception("internal error on %s %s", request.method, request.path_qs)
            response = error_response(
                ApiError(500, f"Internal error occurred: {exc}", "InternalError")
            )
        if not path.startswith(ADMIN_PREFIX) and not record.get("logged"):
            self._record(request, record, response.status)
        if self.verbose:
            access_log.info(
                "%s %s %d %.1fms",
                request.method,
                request.path_qs,
                response.status,
                (time.monotonic() - started) * 1000,
            )
        return response

    def _record(self, request: web.Request, record: dict[str, Any], code: int) -> None:
        record["logged"] = True
        self.requests.add(
            RequestRecord(
                verb=record.get("verb", request.method.lower()),
                group=record.get("group", ""),
                version=record.get("version", ""),
                resource=record.get("resource", ""),
                namespace=record.get("namespace", ""),
                subresource=record.get("subresource", ""),
                name=record.get("name", ""),
                method=request.method,
                path=request.path_qs,
                code=code,
                user_agent=request.headers.get("User-Agent", ""),
            )
        )

    def _fault_response(self, rule: FaultRule) -> web.Response:
        code = rule.status or 500
        message = rule.message or {
            409: "Operation cannot be fulfilled: the object has been modified; please apply "
            "your changes to the latest version and try again (injected)",
            429: "Too many requests, please try again later. (injected)",
            500: "Internal error occurred: injected fault",
            503: "The server is currently unable to handle the request (injected)",
        }.get(code, "injected fault")
        headers = {}
        details: dict[str, Any] | None = None
        if rule.retry_after is not None or code == 429:
            retry = rule.retry_after if rule.retry_after is not None else 1
            headers["Retry-After"] = str(retry)
            details = {"retryAfterSeconds": retry}
        return json_response(status_body(code, message, details=details), code, headers)

    def _describe(self, request: web.Request, record: dict[str, Any]) -> None:
        """Fill the RBAC-style description of a request (best effort, before dispatch)."""
        record["verb"] = {
            "GET": "get",
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete",
        }.get(request.method, request.method.lower())
        try:
            target = self._route(request.path)
        except ApiError:
            return
        if target is None:
            return
        record.update(
            group=target.rdef.group,
            version=target.version,
            resource=target.rdef.plural,
            namespace=target.namespace or "",
            subresource=target.subresource or "",
            name=target.name or "",
        )
        if target.name is None:
            if request.method == "GET":
                record["verb"] = "watch" if parse_bool(request.query.get("watch")) else "list"
            elif request.method == "DELETE":
                record["verb"] = "deletecollection"
        elif request.method == "GET" and parse_bool(request.query.get("watch")):
            record["verb"] = "watch"

    async def _dispatch(self, request: web.Request, record: dict[str, Any]) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path in ("/healthz", "/readyz", "/livez") or path.startswith(
            ("/healthz/", "/readyz/", "/livez/")
        ):
            return web.Response(text="ok", content_type="text/plain")
        if path == "/version":
            return json_response(VERSION_INFO)
        if path == "/":
            return json_response(
                {
                    "paths": sorted(
                        ["/api", "/api/v1", "/apis", "/version", "/healthz", "/openapi/v3"]
                        + [f"/apis/{g}" for g in self.cluster.registry.groups() if g]
                    )
                }
            )
        if path == "/api":
            return json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}
                    ],
                }
            )
        if path == "/apis":
            return json_response(self._group_list())
        if path.startswith("/openapi/"):
            return self._openapi(path)
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) == 2:
            if parts[1] != "v1":
                raise resource_not_found()
            return json_response(self._resource_list("", "v1"))
        if parts[0] == "apis" and len(parts) == 2:
            group = self._group(parts[1])
            if group is None:
                raise resource_not_found()
            return json_response(group)
        if parts[0] == "apis" and len(parts) == 3:
            if parts[2] not in self.cluster.registry.groups().get(parts[1], []):
                raise resource_not_found()
            return json_response(self._resource_list(parts[1], parts[2]))
        target = self._route(request.path)
        if target is None:
            raise resource_not_found()
        return await self._resource(request, target, record)

    # ------------------------------------------------------------------------ discovery

    def _group(self, name: str) -> dict[str, Any] | None:
        versions = self.cluster.registry.groups().get(name)
        if not versions or not name:
            return None
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": name,
            "versions": entries,
            "preferredVersion": entries[0],
        }

    def _group_list(self) -> dict[str, Any]:
        groups = []
        for name in sorted(self.cluster.registry.groups()):
            group = self._group(name)
            if group is not None:
                group.pop("kind")
                group.pop("apiVersion")
                groups.append(group)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources: list[dict[str, Any]] = []
        for rdef in sorted(
            self.cluster.registry.resources_in(group, version), key=lambda r: r.plural
        ):
            entry: dict[str, Any] = {
                "name": rdef.plural,
                "singularName": rdef.singular,
                "namespaced": rdef.namespaced,
                "kind": rdef.kind,
                "verbs": list(rdef.verbs),
            }
            if rdef.short_names:
                entry["shortNames"] = list(rdef.short_names)
            if rdef.categories:
                entry["categories"] = list(rdef.categories)
            entry["storageVersionHash"] = base64.b64encode(
                hashlib.sha256(f"{rdef.group}/{rdef.plural}".encode()).digest()[:8]
            ).decode()
            resources.append(entry)
            vdef = rdef.versions[version]
            if vdef.status:
                resources.append(
                    {
                        "name": f"{rdef.plural}/status",
                        "singularName": "",
                        "namespaced": rdef.namespaced,
                        "kind": rdef.kind,
                        "verbs": list(SUB_VERBS),
                    }
                )
            if vdef.scale is not None or "scale" in rdef.extra_subresources:
                resources.append(
                    {
                        "name": f"{rdef.plural}/scale",
                        "singularName": "",
                        "namespaced": rdef.namespaced,
                        "group": "autoscaling",
                        "version": "v1",
                        "kind": "Scale",
                        "verbs": list(SUB_VERBS),
                    }
                )
            if "finalize" in rdef.extra_subresources:
                resources.append(
                    {
                        "name": f"{rdef.plural}/finalize",
                        "singularName": "",
                        "namespaced": rdef.namespaced,
                        "kind": rdef.kind,
                        "verbs": ["update"],
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    # ------------------------------------------------------------------------ OpenAPI v3

    def _openapi(self, path: str) -> web.Response:
        if path == "/openapi/v3":
            paths = {}
            for group, versions in self.cluster.registry.groups().items():
                for version in versions:
                    key = f"apis/{group}/{version}" if group else f"api/{version}"
                    doc = self._openapi_doc(group, version)
                    digest = hashlib.sha512(dumps(doc).encode()).hexdigest()[:16].upper()
                    paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
            return json_response({"paths": paths})
        parts = path.strip("/").split("/")[2:]
        if parts[:1] == ["api"] and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[:1] == ["apis"] and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            raise resource_not_found()
        if version not in self.cluster.registry.groups().get(group, []):
            raise resource_not_found()
        return json_response(self._openapi_doc(group, version))

    def _openapi_doc(self, group: str, version: str) -> dict[str, Any]:
        paths: dict[str, Any] = {}
        schemas: dict[str, Any] = {}
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        for rdef in self.cluster.registry.resources_in(group, version):
            gvk = {"group": group, "version": version, "kind": rdef.kind}
            body = {
                "content": {
                    "application/json-patch+json": {"schema": {"type": "object"}},
                    "application/merge-patch+json": {"schema": {"type": "object"}},
                }
            }
            op = {
                "x-kubernetes-group-version-kind": gvk,
                "x-kubernetes-action": "patch",
                "parameters": [
                    {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                ],
                "requestBody": body,
                "responses": {"200": {"description": "OK"}},
            }
            item = (
                f"{prefix}/namespaces/{{namespace}}/{rdef.plural}/{{name}}"
                if (rdef.namespaced)
                else f"{prefix}/{rdef.plural}/{{name}}"
            )
            paths[item] = {"patch": op}
            schema_name = ".".join(
                [*reversed((group or "io.k8s.api.core").split(".")), version, rdef.kind]
            )
            schema = rdef.versions[version].schema
            component: dict[str, Any] = (
                dict(schema)
                if schema
                else {
                    "type": "object",
                    "description": f"{rdef.kind} (schema not served by kubeapi)",
                }
            )
            props = dict(component.get("properties") or {})
            props.setdefault(
                "apiVersion",
                {
                    "type": "string",
                    "description": "APIVersion "
                    "defines the versioned schema of this representation of an object.",
                },
            )
            props.setdefault(
                "kind",
                {
                    "type": "string",
                    "description": "Kind is a string value "
                    "representing the REST resource this object represents.",
                },
            )
            props.setdefault(
                "metadata", {"type": "object", "description": "Standard object's metadata."}
            )
            component["properties"] = props
            component["x-kubernetes-group-version-kind"] = [gvk]
            schemas[schema_name] = component
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.37.0"},
            "paths": paths,
            "components": {"schemas": schemas},
        }

    # ------------------------------------------------------------------------ routing

    def _route(self, path: str) -> Target | None:
        parts = [p for p in path.strip("/").split("/") if p != ""]
        if not parts:
            return None
        if parts[0] == "api":
            if len(parts) < 3 or parts[1] != "v1":
                return None
            group, version, rest = "", "v1", parts[2:]
        elif parts[0] == "apis":
            if len(parts) < 4:
                return None
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        registry = self.cluster.registry
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = registry.lookup(group, version, rest[2])
            if group == "" and (candidate is None or not candidate.namespaced):
                # /api/v1/namespaces/{name}/{status|finalize}
                rdef = registry.lookup("", "v1", "namespaces")
                if rdef is None or len(rest) != 3 or rest[2] not in ("status", "finalize"):
                    raise resource_not_found()
                return Target(rdef, version, None, rest[1], rest[2])
            namespace = rest[1]
            rest = rest[2:]
            if candidate is None or not candidate.namespaced:
                raise resource_not_found()
        rdef = registry.lookup(group, version, rest[0])
        if rdef is None:
            raise resource_not_found()
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) >= 3 else None
        if len(rest) > 3:
            raise resource_not_found()
        if rdef.namespaced and namespace is None and name is not None:
            raise resource_not_found()
        if sub is not None:
            vdef = rdef.versions[version]
            allowed = {"status"} if vdef.status else set()
            if vdef.scale is not None or "scale" in rdef.extra_subresources:
                allowed.add("scale")
            allowed.update(s for s in rdef.extra_subresources if s != "scale")
            if sub not in allowed:
                raise resource_not_found()
        return Target(rdef, version, namespace, name, sub)

    # ------------------------------------------------------------------------ verbs

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw.strip():
            return None
        ctype = request.content_type
        try:
            if "yaml" in ctype:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(f"error decoding request body: {exc}") from exc

    def _check_write_type(self, request: web.Request) -> None:
        ctype = request.content_type
        if ctype in (
            "application/json",
            "application/yaml",
            "application/octet-stream",
            "",
            "text/plain",
            "*/*",
        ):
            return
        raise unsupported_media_type(ctype, ["application/json", "application/yaml"])

    def _dry_run(self, request: web.Request) -> bool:
        values = request.query.getall("dryRun", [])
        for value in values:
            if value != "All":
                raise invalid(
                    "DryRun", "", "", [invalid_value("dryRun", value, 'supported values: "All"')]
                )
        return bool(values)

    async def _resource(
        self, request: web.Request, target: Target, record: dict[str, Any]
    ) -> web.StreamResponse:
        method = request.method
        rdef = target.rdef
        cluster = self.cluster
        if target.name is None:
            if method == "GET":
                if parse_bool(request.query.get("watch")):
                    return await self._watch(request, target, record)
                return self._list(request, target)
            if method == "POST":
                if rdef.namespaced and target.namespace is None:
                    raise method_not_allowed()
                if "create" not in rdef.verbs:
                    raise method_not_allowed()
                self._check_write_type(request)
                body = await self._body(request)
                obj = cluster.create(
                    rdef, target.version, target.namespace, body, self._dry_run(request)
                )
                return json_response(obj, 201)
            if method == "DELETE":
                if "deletecollection" not in rdef.verbs:
                    raise method_not_allowed()
                return await self._delete_collection(request, target)
            raise method_not_allowed()
        namespace = target.namespace or ""
        name = target.name
        if target.subresource == "scale":
            return await self._scale(request, target)
        if target.subresource == "finalize":
            if method != "PUT":
                raise method_not_allowed()
            body = await self._body(request)
            obj = cluster.update(
                rdef, target.version, namespace, name, body, None, self._dry_run(request)
            )
            return json_response(obj)
        if method == "GET":
            if parse_bool(request.query.get("watch")):
                return await self._watch(request, target, record)
            obj = cluster.to_wire(rdef, target.version, cluster._existing(rdef, namespace, name))  # noqa: SLF001
            if self._wants_table(request) and target.subresource is None:
                return json_response(self._table(request, target, [obj]))
            return json_response(obj)
        if method == "PUT":
            self._check_write_type(request)
            body = await self._body(request)
            obj = cluster.update(
                rdef,
                target.version,
                namespace,
                name,
                body,
                target.subresource,
                self._dry_run(request),
            )
            return json_response(obj)
        if method == "PATCH":
            patch_type = PATCH_TYPES.get(request.content_type)
            accepted = ["application/json-patch+json", "application/merge-patch+json"]
            if rdef.builtin:
                accepted.append("application/strategic-merge-patch+json")
            if (
                patch_type is None
                or patch_type == "apply"
                or (patch_type == "strategic" and not rdef.builtin)
            ):
                raise unsupported_media_type(request.content_type, accepted)
            body = await self._body(request)
            obj = cluster.patch(
                rdef,
                target.version,
                namespace,
                name,
                patch_type,
                body,
                target.subresource,
                self._dry_run(request),
            )
            return json_response(obj)
        if method == "DELETE" and target.subresource is None:
            body = await self._body(request)
            options = dict(body) if isinstance(body, dict) else {}
            if "propagationPolicy" in request.query:
                options["propagationPolicy"] = request.query["propagationPolicy"]
            if "orphanDependents" in request.query:
                options["orphanDependents"] = parse_bool(request.query["orphanDependents"])
            for key in ("uid", "resourceVersion"):
                if f"preconditions.{key}" in request.query:
                    options.setdefault("preconditions", {})[key] = request.query[
                        f"preconditions.{key}"
                    ]
            policy = options.get("propagationPolicy")
            if policy not in (None, "Background", "Foreground", "Orphan"):
                raise invalid(
                    "DeleteOptions",
                    "",
                    "",
                    [
                        invalid_value(
                            "propagationPolicy",
                            policy,
                            'supported values: "Background", "Foreground", "Orphan"',
                        )
                    ],
                )
            dry_run = self._dry_run(request) or "All" in (options.get("dryRun") or [])
            obj, removed = cluster.delete(rdef, target.version, namespace, name, options, dry_run)
            if removed and rdef.key not in (("", "pods"), ("", "services"), NS_KEY):
                details: dict[str, Any] = {
                    "name": name,
                    "kind": rdef.plural,
                    "uid": obj["metadata"]["uid"],
                }
                if rdef.group:
                    details["group"] = rdef.group
                return json_response(
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": details,
                    }
                )
            return json_response(obj)
        raise method_not_allowed()

    async def _scale(self, request: web.Request, target: Target) -> web.Response:
        rdef = target.rdef
        cluster = self.cluster
        namespace = target.namespace or ""
        assert target.name is not None
        vdef = rdef.versions[target.version]
        paths = vdef.scale or {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }

        def dig(obj: dict[str, Any], path: str | None) -> Any:
            current: Any = obj
            for key in (path or "").strip(".").split("."):
                if not key or not isinstance(current, dict):
                    return None
                current = current.get(key)
            return current

        def scale_of(obj: dict[str, Any]) -> dict[str, Any]:
            meta = obj["metadata"]
            status: dict[str, Any] = {"replicas": dig(obj, paths.get("statusReplicasPath")) or 0}
            selector = dig(obj, paths.get("labelSelectorPath"))
            if rdef.builtin:
                labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
                selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None
            if selector:
                status["selector"] = selector
            return {
                "kind": "Scale",
                "apiVersion": "autoscaling/v1",
                "metadata": {
                    k: meta[k]
                    for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                    if k in meta
                },
                "spec": {"replicas": dig(obj, paths.get("specReplicasPath")) or 0},
                "status": status,
            }

        current = cluster._existing(rdef, namespace, target.name)  # noqa: SLF001
        if request.method == "GET":
            return json_response(scale_of(current))
        if request.method not in ("PUT", "PATCH"):
            raise method_not_allowed()
        body = await self._body(request)
        scale = scale_of(current)
        if request.method == "PUT":
            new_scale = body
        else:
            patch_type = PATCH_TYPES.get(request.content_type)
            if patch_type not in ("json", "merge", "strategic"):
                raise unsupported_media_type(
                    request.content_type,
                    [
                        "application/json-patch+json",
                        "application/merge-patch+json",
                        "application/strategic-merge-patch+json",
                    ],
                )
            from .patches import PatchError, json_patch, merge_patch

            try:
                new_scale = (
                    json_patch(scale, body) if patch_type == "json" else merge_patch(scale, body)
                )
            except PatchError as exc:
                raise ApiError(422, exc.message, "Invalid", {}) from exc
        if not isinstance(new_scale, dict):
            raise bad_request("the body of the request must be a JSON object")
        rv = (new_scale.get("metadata") or {}).get("resourceVersion")
        replicas = (new_scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid(
                "Scale",
                "autoscaling",
                target.name,
                [invalid_value("spec.replicas", replicas, "must be greater than or equal to 0")],
            )
        wire = cluster.to_wire(rdef, target.version, current)
        spec_path = (paths.get("specReplicasPath") or ".spec.replicas").strip(".").split(".")
        patch: dict[str, Any] = {"metadata": {"resourceVersion": rv}} if rv else {}
        node = patch
        for key in spec_path[:-1]:
            node = node.setdefault(key, {})
        node[spec_path[-1]] = replicas
        del wire
        updated = cluster.patch(
            rdef,
            target.version,
            namespace,
            target.name,
            "merge",
            patch,
            None,
            self._dry_run(request),
        )
        stored = cluster.store.get(rdef.key, namespace, target.name) or current
        result = scale_of(stored)
        result["metadata"]["resourceVersion"] = updated["metadata"]["resourceVersion"]
        return json_response(result)

    # ------------------------------------------------------------------------ lists

    def _matcher(self, request: web.Request, target: Target) -> Callable[[dict[str, Any]], bool]:
        labels = parse_label_selector(request.query.get("labelSelector"))
        field_text = request.query.get("fieldSelector")
        fields = parse_field_selector(field_text)
        if field_text:
            for part in field_text.split(","):
                label = part.split("!=")[0].split("=")[0].strip()
                if label and not target.rdef.supported_field(label):
                    raise bad_request(f"field label not supported: {label}")
        if target.name is not None:
            name = target.name
            fields = combine(fields, lambda o: o["metadata"].get("name") == name)
        matcher = combine(labels, fields)
        return matcher or (lambda obj: True)

    def _wants_table(self, request: web.Request) -> bool:
        accept = request.headers.get("Accept", "")
        for part in accept.split(","):
            params = {
                p.split("=", 1)[0].strip(): p.split("=", 1)[1].strip()
                for p in part.split(";")[1:]
                if "=" in p
            }
            if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
                return True
        return False

    def _table(
        self,
        request: web.Request,
        target: Target,
        objects: list[dict[str, Any]],
        meta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        columns = target.rdef.versions[target.version].columns
        include = request.query.get("includeObject", "Metadata")
        return make_table(columns, objects, str(self.cluster.store.rv), meta, include)

    def _list(self, request: web.Request, target: Target) -> web.Response:
        cluster = self.cluster
        store = cluster.store
        rdef = target.rdef
        matcher = self._matcher(request, target)
        query = request.query
        rv_text = query.get("resourceVersion")
        match = query.get("resourceVersionMatch")
        if match and not rv_text:
            raise invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                [
                    invalid_value(
                        "resourceVersionMatch",
                        match,
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    )
                ],
            )
        if match and match not in ("Exact", "NotOlderThan"):
            raise invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                [
                    invalid_value(
                        "resourceVersionMatch", match, 'supported values: "Exact", "NotOlderThan"'
                    )
                ],
            )
        if parse_bool(query.get("sendInitialEvents")):
            raise invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                [
                    invalid_value(
                        "sendInitialEvents", True, "sendInitialEvents is forbidden for list"
                    )
                ],
            )
        continue_token = query.get("continue")
        start_after: tuple[str, str] | None = None
        list_rv = store.rv
        if continue_token:
            try:
                data = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                list_rv = int(data["rv"])
                start_after = (str(data["ns"]), str(data["name"]))
            except (ValueError, KeyError, TypeError, binascii.Error) as exc:
                raise bad_request("continue key is not valid: " + str(exc)) from exc
            if list_rv < store.expired_before:
                raise ApiError(
                    410,
                    "The provided continue parameter is too old to display a consistent "
                    "list result. You can start a new list without the continue parameter.",
                    "Expired",
                )
            items = store.snapshot_at(rdef.key, list_rv, target.namespace)
        elif rv_text and match == "Exact":
            try:
                list_rv = int(rv_text)
            except ValueError as exc:
                raise bad_request(f'invalid resource version "{rv_text}"') from exc
            if list_rv < store.expired_before:
                raise ApiError(
                    410, f"too old resource version: {list_rv} ({store.expired_before})", "Expired"
                )
            if list_rv > store.rv:
                raise ApiError(
                    504,
                    f"Too large resource version: {list_rv}, current: {store.rv}",
                    "Timeout",
                    {"retryAfterSeconds": 1},
                )
            items = store.snapshot_at(rdef.key, list_rv, target.namespace)
        else:
            items = store.items(rdef.key, target.namespace)
        wire = [cluster.to_wire(rdef, target.version, o) for o in items]
        wire = [o for o in wire if matcher(o)]
        if start_after is not None:
            wire = [
                o
                for o in wire
                if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start_after
            ]
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        limit_text = query.get("limit")
        if limit_text:
            try:
                limit = int(limit_text)
            except ValueError as exc:
                raise bad_request(f"invalid limit {limit_text!r}") from exc
            if 0 < limit < len(wire):
                last = wire[limit - 1]["metadata"]
                token = {"rv": list_rv, "ns": last.get("namespace", ""), "name": last["name"]}
                meta["continue"] = base64.urlsafe_b64encode(dumps(token).encode()).decode()
                meta["remainingItemCount"] = len(wire) - limit
                wire = wire[:limit]
        if self._wants_table(request):
            return json_response(self._table(request, target, wire, meta))
        return json_response(
            {
                "kind": rdef.list_kind,
                "apiVersion": rdef.api_version(target.version),
                "metadata": meta,
                "items": wire,
            }
        )

    async def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        cluster = self.cluster
        rdef = target.rdef
        matcher = self._matcher(request, target)
        body = await self._body(request)
        options = dict(body) if isinstance(body, dict) else {}
        if "propagationPolicy" in request.query:
            options["propagationPolicy"] = request.query["propagationPolicy"]
        dry_run = self._dry_run(request)
        deleted = []
        for obj in cluster.store.items(rdef.key, target.namespace):
            wire = cluster.to_wire(rdef, target.version, obj)
            if not matcher(wire):
                continue
            result, _ = cluster.delete(
                rdef,
                target.version,
                obj["metadata"].get("namespace", ""),
                obj["metadata"]["name"],
                options,
                dry_run,
            )
            deleted.append(result)
        return json_response(
            {
                "kind": rdef.list_kind,
                "apiVersion": rdef.api_version(target.version),
                "metadata": {"resourceVersion": str(cluster.store.rv)},
                "items": deleted,
            }
        )

    # ------------------------------------------------------------------------ watch

    async def _watch(
        self, request: web.Request, target: Target, record: dict[str, Any]
    ) -> web.StreamResponse:
        cluster = self.cluster
        store = cluster.store
        rdef = target.rdef
        query = request.query
        matcher = self._matcher(request, target)
        bookmarks = parse_bool(query.get("allowWatchBookmarks"))
        send_initial_text = query.get("sendInitialEvents")
        send_initial = parse_bool(send_initial_text)
        rv_text = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch")
        as_table = self._wants_table(request)
        timeout: float | None = None
        if query.get("timeoutSeconds"):
            try:
                timeout = float(query["timeoutSeconds"])
            except ValueError as exc:
                raise bad_request("invalid timeoutSeconds") from exc
        if send_initial_text is not None:
            errors = []
            if match != "NotOlderThan":
                errors.append(
                    invalid_value(
                        "resourceVersionMatch",
                        match or "",
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    )
                )
            if send_initial and not bookmarks:
                errors.append(
                    invalid_value(
                        "allowWatchBookmarks",
                        False,
                        "sendInitialEvents requires setting allowWatchBookmarks to true",
                    )
                )
            if errors:
                raise invalid("ListOptions", "meta.k8s.io", "", errors)
        elif match:
            raise invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                [
                    invalid_value(
                        "resourceVersionMatch",
                        match,
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is "
                        "provided",
                    )
                ],
            )
        since: int | None = None
        if rv_text not in ("", "0") and not send_initial:
            try:
                since = int(rv_text)
            except ValueError as exc:
                raise bad_request(f'invalid resource version "{rv_text}"') from exc
        expired = since is not None and since < store.expired_before
        # -- everything below until the first await is atomic with respect to the store
        events: list[tuple[str, dict[str, Any]]] = []
        watcher = None
        if not expired:
            watcher = store.add_watcher(rdef.key, target.namespace)
            if since is None:
                for obj in store.items(rdef.key, target.namespace):
                    wire = cluster.to_wire(rdef, target.version, obj)
                    if matcher(wire):
                        events.append(("ADDED", wire))
                if send_initial:
                    events.append(("BOOKMARK", self._bookmark(rdef, target.version, True)))
            else:
                for entry in store.entries_after(since):
                    if entry.key == rdef.key and target.namespace in (None, entry.namespace):
                        event = self._translate(entry, rdef, target.version, matcher)
                        if event is not None:
                            events.append(event)
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        task = asyncio.current_task()
        if task is not None:
            self._streams.add(task)
        try:
            await response.prepare(request)
            self._record(request, record, 200)
            if expired:
                status = status_body(
                    410, f"too old resource version: {since} ({store.expired_before})", "Expired"
                )
                await self._send(response, "ERROR", status)
                await response.write_eof()
                return response
            assert watcher is not None
            for kind, obj in events:
                await self._send(
                    response, kind, self._maybe_table(request, target, obj, kind, as_table)
                )
            deadline = time.monotonic() + timeout if timeout else None
            while not self._stopping:
                wait = self.bookmark_interval if bookmarks else None
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    wait = remaining if wait is None else min(wait, remaining)
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), wait)
                except TimeoutError:
                    if (
                        bookmarks
                        and watcher.queue.empty()
                        and (deadline is None or deadline - time.monotonic() > 0)
                    ):
                        await self._send(
                            response, "BOOKMARK", self._bookmark(rdef, target.version, False)
                        )
                    continue
                if item is CLOSE:
                    break
                event = self._translate(item, rdef, target.version, matcher)
                if event is not None:
                    kind, obj = event
                    await self._send(
                        response, kind, self._maybe_table(request, target, obj, kind, as_table)
                    )
            with contextlib.suppress(ConnectionError, RuntimeError):
                await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if watcher is not None:
                store.remove_watcher(watcher)
            if task is not None:
                self._streams.discard(task)
        return response

    def _maybe_table(
        self, request: web.Request, target: Target, obj: dict[str, Any], kind: str, as_table: bool
    ) -> dict[str, Any]:
        if not as_table or kind in ("BOOKMARK", "ERROR"):
            return obj
        return self._table(request, target, [obj])

    def _bookmark(self, rdef: ResourceDef, version: str, initial_end: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(self.cluster.store.rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": rdef.kind, "apiVersion": rdef.api_version(version), "metadata": meta}

    def _translate(
        self,
        entry: LogEntry,
        rdef: ResourceDef,
        version: str,
        matcher: Callable[[dict[str, Any]], bool],
    ) -> tuple[str, dict[str, Any]] | None:
        obj = self.cluster.to_wire(rdef, version, entry.object)
        now = matcher(obj)
        if entry.type == "MODIFIED" and entry.old is not None:
            before = matcher(self.cluster.to_wire(rdef, version, entry.old))
            if now and not before:
                return ("ADDED", obj)
            if before and not now:
                return ("DELETED", obj)
        return (entry.type, obj) if now else None

    async def _send(self, response: web.StreamResponse, kind: str, obj: dict[str, Any]) -> None:
        await response.write((dumps({"type": kind, "object": obj}) + "\n").encode())

    # ------------------------------------------------------------------------ admin API

    async def _admin(self, request: web.Request) -> web.Response:
        action = request.path[len(ADMIN_PREFIX) :].strip("/")
        method = request.method
        if action == "requests":
            if method == "GET":
                return json_response({"items": [r.as_dict() for r in self.requests.records()]})
            if method == "DELETE":
                self.requests.clear()
                return json_response({"cleared": True})
        elif action == "faults":
            if method == "GET":
                return json_response({"items": [vars(r) for r in self.faults.rules]})
            if method == "DELETE":
                self.faults.clear()
                return json_response({"cleared": True})
            if method == "POST":
                body = await self._body(request) or {}
                if not isinstance(body, dict):
                    raise bad_request("a fault is a JSON object")
                times = body.get("times", 1)
                if body.get("status") is not None:
                    rule = self.faults.fail(
                        int(body["status"]),
                        body.get("method", "*"),
                        body.get("path", ".*"),
                        times,
                        body.get("message"),
                        body.get("retryAfter"),
                    )
                else:
                    rule = self.faults.delay(
                        float(body.get("delay", 0)),
                        body.get("method", "*"),
                        body.get("path", ".*"),
                        times,
                    )
                return json_response(vars(rule), 201)
        elif action == "drop-watches" and method == "POST":
            return json_response({"dropped": self.cluster.store.close_watchers()})
        elif action == "expire" and method == "POST":
            return json_response({"expiredBefore": str(self.cluster.store.expire())})
        elif action == "crds" and method == "GET":
            return json_response(
                {"items": [c["metadata"]["name"] for c in self.cluster.store.items(CRD_KEY)]}
            )
        raise resource_not_found()
