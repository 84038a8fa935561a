"""Kubernetes I/O for the controller, through the official ``kubernetes`` client. Thin: reads
return plain dicts, writes take plain dicts; no arithmetic here."""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client import ApiException, rest
from urllib3.util.retry import Retry

from .. import settings
from ..api import GROUP, VERSION
from ..decision import hpa_min_replicas_by_target
from . import metrics
from .apirequest import classify
from .informer import Informer, wait_tried
from .throttle import RetryPolicy, TokenBucket

PLURAL = "inferencecapacities"
FIELD_MANAGER = "inference-capacity"
log = logging.getLogger("inference_capacity.k8s")

#: the field manager of this process's writes: FIELD_MANAGER, or with shards the replica's own
#: (controller/shards.py sets it), so managedFields say which replica wrote a field
_field_manager = FIELD_MANAGER


#: called before every write to an InferenceCapacity, a Deployment or a PDB; raises when this
#: process may not write (with shards: the object's shard is not held, controller/shards.py)
def _no_guard() -> None:
    return None


_write_guard: Callable[[], None] = _no_guard


def set_writer(field_manager: str, guard: Callable[[], None]) -> None:
    """The field manager and the write guard of this process (the shard Leases set them)."""
    global _field_manager, _write_guard
    _field_manager, _write_guard = field_manager, guard


def field_manager() -> str:
    """The field manager of this process's writes (after the write guard has passed)."""
    _write_guard()
    return _field_manager


_lock = threading.Lock()
_api: client.ApiClient | None = None


class CivilRESTClient(rest.RESTClientObject):
    """The ``kubernetes`` client's REST layer with the operator's manners: every request takes a
    token from ``bucket`` first (QPS and burst over all threads), and a request whose answer
    ``policy`` retries (429; 5xx with Retry-After) is sent again after the wait it names, up to
    its limit; the last answer is then returned as it came, so the API method raises its
    ``ApiException`` as usual.

    A retry is decided on the status line and headers, before any of the body is read: a watch
    or a log (``_preload_content=False``) is retried only when its first answer is such a
    status; what goes wrong later in the stream is the reader's to handle.

    urllib3 is left only its connection retries: its own status retries (``Retry`` with
    ``respect_retry_after_header`` retries 413/429/503 that carry Retry-After on idempotent
    methods, urllib3 ``Retry.is_retry``) would run underneath, unseen by this policy."""

    def __init__(
        self,
        configuration: client.Configuration,
        bucket: TokenBucket,
        policy: RetryPolicy,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(configuration)
        self.bucket = bucket
        self.policy = policy
        self._sleep = sleep
        # the pools are made on first use, with these keywords (urllib3 PoolManager)
        self.pool_manager.connection_pool_kw["retries"] = connection_retries_only(
            configuration.retries
        )

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, Any] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> rest.RESTResponse:
        retries = 0
        while True:
            waited = self.bucket.acquire()
            if waited > 0:
                metrics.API_THROTTLE_SECONDS.inc(waited)
            metrics.API_REQUESTS.labels("operator", *classify(method, url)).inc()
            response: rest.RESTResponse = super().request(  # type: ignore[no-untyped-call]
                method,
                url,
                # a fresh copy per attempt: the parent edits it (Content-Type) in place
                headers=dict(headers) if headers is not None else None,
                body=body,
                post_params=post_params,
                _request_timeout=_request_timeout,
            )
            wait = self.policy.wait(response.status, response.headers, retries)
            if wait is None:
                if retries and response.status in (429, *range(500, 600)):
                    log.warning(
                        "%s %s: still %s after %d retries; giving up",
                        method,
                        url.split("?", 1)[0],
                        response.status,
                        retries,
                    )
                return response
            metrics.API_RETRIES.labels(str(response.status)).inc()
            log.debug(
                "%s %s: %s; retry %d in %.1fs",
                method,
                url.split("?", 1)[0],
                response.status,
                retries + 1,
                wait,
            )
            _discard(response)
            self._sleep(wait)
            retries += 1


def connection_retries_only(retries: Any) -> Retry | bool:
    """urllib3 retries as the configuration gives them (None: urllib3's default), without any
    retry on a status or a Retry-After."""
    if retries is False:
        return False
    base = retries if isinstance(retries, Retry) else Retry.from_int(retries)
    return base.new(status=0, status_forcelist=(), respect_retry_after_header=False)


def _discard(response: rest.RESTResponse) -> None:
    """Read off and release a response that is answered with a retry (its connection is then
    reused; a body that cannot be read closes it)."""
    raw = response.response
    try:
        raw.drain_conn()
    finally:
        raw.release_conn()


_bucket: TokenBucket | None = None
_bucket_lock = threading.Lock()


def shared_bucket() -> TokenBucket:
    """The one token bucket of every client this module makes (from the settings, once)."""
    global _bucket
    with _bucket_lock:
        if _bucket is None:
            s = settings.current()
            _bucket = TokenBucket(s.api_qps, s.api_burst)
        return _bucket


def retry_policy() -> RetryPolicy:
    s = settings.current()
    return RetryPolicy(max_retries=s.api_retries, max_wait_seconds=s.api_retry_after_max_seconds)


def new_api_client(
    configuration: client.Configuration | None = None, bucket: TokenBucket | None = None
) -> client.ApiClient:
    """An ``ApiClient`` whose REST layer is a :class:`CivilRESTClient` (the shared bucket and
    the settings' retry policy unless given). ``ApiClient.__init__`` makes its ``rest_client``
    from the configuration (kubernetes/client/api_client.py); it is replaced before any
    request, with the same configuration."""
    api = client.ApiClient(configuration)
    api.rest_client.close()
    # urllib3 keeps this many connections per host; the client's default (5 per CPU: 10 on 2
    # cores) is below the threads that share it, so every request past it opened a connection
    # (a TLS handshake on both sides) and dropped it ("Connection pool is full")
    api.configuration.connection_pool_maxsize = max(
        api.configuration.connection_pool_maxsize or 0, pool_size(settings.current())
    )
    api.rest_client = CivilRESTClient(api.configuration, bucket or shared_bucket(), retry_policy())
    return api


#: threads of the operator that use the shared client besides the handler and refresh workers:
#: the informers' watches (nodes, pods, PDBs, HPAs), the shard Leases, the startup-log reader
OTHER_CLIENT_THREADS = 8


def pool_size(s: settings.Settings) -> int:
    """Connections the shared client keeps: one per thread that may use it at once."""
    return s.workers + s.refresh_workers + OTHER_CLIENT_THREADS


def api_client() -> client.ApiClient:
    """One shared client, configured from the cluster (in-cluster) or KUBECONFIG."""
    global _api
    with _lock:
        if _api is None:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
            except config.ConfigException:
                config.load_kube_config()  # type: ignore[no-untyped-call]
            _api = new_api_client()
        return _api


class Unreachable(Exception):
    """No cluster: no configuration found, or its API server does not answer."""


def preflight(timeout: float = 5.0) -> str:
    """Load the cluster configuration and ask the API server its version, in one short request;
    returns where the configuration came from. Raises :class:`Unreachable` with one line that
    names what was tried (the in-cluster service account, then KUBECONFIG or ~/.kube/config)."""
    global _api
    kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        where = "the in-cluster service account"
    except config.ConfigException:
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError, TypeError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise Unreachable(
                "no cluster configuration: not in a cluster (no service account token) and "
                f"kubeconfig {kubeconfig}: {first}"
            ) from None
        where = f"kubeconfig {kubeconfig}"
    api = new_api_client()
    host = api.configuration.host
    try:
        client.VersionApi(api).get_code(_request_timeout=timeout)
    except ApiException as exc:
        if exc.status != 403:  # 403: it answered and knows who we are (RBAC is checked later)
            raise Unreachable(
                f"the API server {host} (from {where}) answered {describe_error(exc)}"
            ) from None
    except Exception as exc:  # connection refused, DNS, TLS, timeout
        text = str(getattr(exc, "reason", None) or exc).splitlines()
        reason = f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__
        raise Unreachable(f"cannot reach the API server {host} (from {where}): {reason}") from None
    with _lock:
        _api = api
    return f"{host} (from {where})"


def _dict(obj: Any) -> dict[str, Any]:
    out = cast(dict[str, Any], api_client().sanitize_for_serialization(obj))  # type: ignore[no-untyped-call]
    return out


def is_status(exc: BaseException, *codes: int) -> bool:
    return isinstance(exc, ApiException) and exc.status in codes


def transient(exc: BaseException) -> bool:
    """Errors worth a retry: conflicts, throttling, server errors, connection trouble."""
    if isinstance(exc, ApiException):
        return exc.status in (0, 409, 429, 500, 502, 503, 504)
    return isinstance(exc, OSError | TimeoutError) or type(exc).__module__.startswith("urllib3")


def describe_error(exc: BaseException) -> str:
    """One line: the HTTP status and the API server's message (not the headers and body)."""
    if isinstance(exc, ApiException):
        message = ""
        try:
            message = json.loads(exc.body or "{}").get("message", "")
        except (ValueError, AttributeError):
            message = ""
        return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def get_icap(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        obj = client.CustomObjectsApi(api_client()).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return cast(dict[str, Any], obj)


def get_peering_status(name: str, namespace: str | None) -> dict[str, Any] | None:
    """The peers Kopf records in its peering object (ClusterKopfPeering, or KopfPeering in
    ``namespace``): ``{identity: {priority, lifetime, lastseen}}``; None when it is absent."""
    api = client.CustomObjectsApi(api_client())
    try:
        if namespace is None:
            obj = api.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name)
        else:
            obj = api.get_namespaced_custom_object(
                "kopf.dev", "v1", namespace, "kopfpeerings", name
            )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    status = cast(dict[str, Any], obj).get("status")
    return dict(status) if isinstance(status, Mapping) else {}


def patch_icap_status(namespace: str, name: str, status: dict[str, Any]) -> None:
    client.CustomObjectsApi(api_client()).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {"status": status},
        field_manager=field_manager(),
        _content_type="application/merge-patch+json",
    )


def _read_json(read: Callable[..., Any], namespace: str, name: str) -> dict[str, Any] | None:
    """``read(name, namespace)`` answered as the API server's JSON (no model objects); None
    when it is not found."""
    try:
        raw = read(name, namespace, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return _json(raw)


def get_deployment(namespace: str, name: str) -> dict[str, Any] | None:
    """The Deployment as the API server sends it (JSON, as Kopf's watch events carry it)."""
    return _read_json(client.AppsV1Api(api_client()).read_namespaced_deployment, namespace, name)


def patch_deployment(namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
    """Patch (strategic merge); the Deployment as the API server returns it (JSON)."""
    raw = client.AppsV1Api(api_client()).patch_namespaced_deployment(
        name,
        namespace,
        patch,
        field_manager=field_manager(),
        _content_type="application/strategic-merge-patch+json",
        _preload_content=False,
    )
    return _json(raw)


def get_config_maps(namespace: str, names: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    api = client.CoreV1Api(api_client())
    for n in names:
        try:
            cm = api.read_namespaced_config_map(n, namespace)
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        out[n] = dict(cm.data or {})
    return out


def slim_node(n: Mapping[str, Any]) -> dict[str, Any]:
    """What spare-GPU counting reads of a Node (sizing.gpus)."""
    meta, spec, status = n.get("metadata") or {}, n.get("spec") or {}, n.get("status") or {}
    return {
        "metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}},
        "spec": {"unschedulable": spec.get("unschedulable")},
        "status": {
            "allocatable": status.get("allocatable") or {},
            "conditions": [c for c in status.get("conditions") or [] if c.get("type") == "Ready"],
        },
    }


def slim_pod(p: Mapping[str, Any]) -> dict[str, Any]:
    """What spare-GPU counting reads of a Pod: its node, phase and containers' resources."""
    spec = p.get("spec") or {}

    def res(cs: Any) -> list[dict[str, Any]]:
        return [{"resources": c.get("resources") or {}} for c in cs or []]

    meta = p.get("metadata") or {}
    return {
        # where it runs and what selects it: the startup reader skips a target with none
        "metadata": {"namespace": meta.get("namespace"), "labels": meta.get("labels") or {}},
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": res(spec.get("containers")),
            "initContainers": res(spec.get("initContainers")),
        },
        "status": {"phase": (p.get("status") or {}).get("phase")},
    }


def _json(raw: Any) -> dict[str, Any]:
    """An object answered without deserialisation (``_preload_content=False``: the urllib3
    response, whatever the method's declared return type), as the API server's JSON."""
    return cast(dict[str, Any], json.loads(raw.data))


def _items(raw: Any) -> list[dict[str, Any]]:
    """``items`` of a list answered without deserialisation (``_preload_content=False`` gives
    the urllib3 response, whatever the method's declared return type)."""
    items: list[dict[str, Any]] = json.loads(raw.data).get("items") or []
    return items


#: the Pods that hold GPUs: on a Node and not terminated. A Pending Pod that is not scheduled
#: holds nothing and nothing here reads it (spare-GPU counting and the startup reader skip it):
#: the server leaves it out, so the operator neither receives nor keeps it (a large fleet that
#: waits for capacity is thousands of them); once scheduled it arrives as an ADDED event
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed,spec.nodeName!="


def slim_pdb(p: Mapping[str, Any]) -> dict[str, Any]:
    """What the decision reads of a PodDisruptionBudget: its owners and its spec."""
    meta, spec = p.get("metadata") or {}, p.get("spec") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "ownerReferences": meta.get("ownerReferences") or [],
        },
        "spec": {k: spec[k] for k in ("minAvailable", "maxUnavailable", "selector") if k in spec},
    }


def slim_hpa(h: Mapping[str, Any]) -> dict[str, Any]:
    """What the decision reads of a HorizontalPodAutoscaler: what it scales, from how many."""
    meta, spec = h.get("metadata") or {}, h.get("spec") or {}
    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "spec": {k: spec[k] for k in ("scaleTargetRef", "minReplicas") if k in spec},
    }


_informers: dict[str, Informer] = {}


def start_informers(wait_seconds: float = 10.0) -> None:
    """Start the watch-fed caches (once) and wait, at most ``wait_seconds``, for their first
    list, so the first reconciles read them instead of the API: Nodes and live Pods (spare-GPU
    counting), and, when the operator watches the whole cluster, PodDisruptionBudgets and
    HorizontalPodAutoscalers (a namespace-scoped install reads those per reconcile)."""
    if not _informers:
        core = client.CoreV1Api(api_client())
        timeout = settings.current().watch_timeout
        _informers["nodes"] = Informer("nodes", core.list_node, slim_node, watch_timeout=timeout)
        _informers["pods"] = Informer(
            "pods",
            core.list_pod_for_all_namespaces,
            slim_pod,
            field_selector=LIVE_PODS,
            watch_timeout=timeout,
        )
        if not settings.current().namespaces:
            policy = client.PolicyV1Api(api_client())
            hpas = client.AutoscalingV2Api(api_client())
            _informers["poddisruptionbudgets"] = Informer(
                "poddisruptionbudgets",
                policy.list_pod_disruption_budget_for_all_namespaces,
                slim_pdb,
                watch_timeout=timeout,
            )
            _informers["horizontalpodautoscalers"] = Informer(
                "horizontalpodautoscalers",
                hpas.list_horizontal_pod_autoscaler_for_all_namespaces,
                slim_hpa,
                watch_timeout=timeout,
            )
        for informer in _informers.values():
            informer.start()
    wait_tried(list(_informers.values()), wait_seconds)


def stop_informers() -> None:
    for informer in _informers.values():
        informer.stop()


def cached_nodes_and_pods() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """The Nodes and live Pods from the watch-fed caches, or None when they are not running or
    not (yet) synced (then :func:`list_nodes_and_pods` is the way)."""
    if "nodes" not in _informers:
        return None
    nodes, pods = (_informers[k].snapshot() for k in ("nodes", "pods"))
    if nodes is None or pods is None:
        return None
    return nodes, pods


def any_scheduled_pod(namespace: str, match_labels: Mapping[str, str]) -> bool | None:
    """Whether a live Pod of the namespace with these labels is on a Node (so it may have
    printed something), from the watch-fed cache; None when that is not synced."""
    if "pods" not in _informers:
        return None

    def matches(pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        if meta.get("namespace") != namespace or not (pod.get("spec") or {}).get("nodeName"):
            return False
        labels = meta.get("labels") or {}
        return all(labels.get(k) == v for k, v in match_labels.items())

    return _informers["pods"].any(matches)


def list_nodes_and_pods() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """All Nodes and non-terminated Pods (only the fields spare-GPU counting reads), or None
    when RBAC forbids it (namespace-scoped).

    Read as raw JSON from the apiserver's watch cache (resourceVersion "0") and reduced at once:
    on a real cluster with thousands of Pods, building the client's model objects for every Pod
    cost seconds of CPU and ~170 MB per listing (benchmarks/reconcile.py --cluster real)."""
    api = client.CoreV1Api(api_client())
    try:
        raw_nodes = api.list_node(resource_version="0", _preload_content=False)
        nodes = _items(raw_nodes)
        raw_pods = api.list_pod_for_all_namespaces(
            field_selector=LIVE_PODS,
            resource_version="0",
            _preload_content=False,
        )
        pods = _items(raw_pods)
    except ApiException as exc:
        if exc.status in (401, 403, 404):
            return None
        raise
    return [slim_node(n) for n in nodes], [slim_pod(p) for p in pods]


#: HPA listings per namespace are shared by reconciles for this many seconds
HPA_TTL_SECONDS = settings.current().hpa_ttl_seconds
_hpa_cache: dict[str, tuple[float, dict[str, int]]] = {}


def _hpa_targets(namespace: str) -> dict[str, int]:
    """Deployment name -> minReplicas of the HPAs in a namespace (cached briefly)."""
    now = time.monotonic()
    hit = _hpa_cache.get(namespace)
    if hit is not None and now - hit[0] < HPA_TTL_SECONDS:
        return hit[1]
    try:
        hpas = client.AutoscalingV2Api(api_client()).list_namespaced_horizontal_pod_autoscaler(
            namespace
        )
    except ApiException as exc:
        if exc.status in (403, 404):
            return {}
        raise
    out = hpa_min_replicas_by_target(_dict(h) for h in hpas.items)
    _hpa_cache[namespace] = (now, out)
    return out


def hpa_min_replicas(namespace: str, deployment: str) -> int | None:
    """minReplicas of an HPA scaling this Deployment, if one exists: from the watch-fed cache
    when it has synced, else from a (briefly cached) listing of the namespace."""
    informer = _informers.get("horizontalpodautoscalers")
    cached = (
        informer.select(lambda h: (h.get("metadata") or {}).get("namespace") == namespace)
        if informer is not None
        else None
    )
    if cached is not None:
        return hpa_min_replicas_by_target(cached).get(deployment)
    return _hpa_targets(namespace).get(deployment)


class ForeignObject(Exception):
    """An object the operator would write exists and is not owned by the resource at hand."""


def read_pdb(namespace: str, name: str) -> dict[str, Any] | None:
    """The PodDisruptionBudget (None: not found), from the watch-fed cache when it has synced,
    else from the API. The cache may lag a moment: a create that meets an existing one (409)
    reads it from the API (:func:`upsert_pdb`)."""
    informer = _informers.get("poddisruptionbudgets")
    if informer is not None:
        known, obj = informer.lookup(namespace, name)
        if known:
            return obj
    return get_pdb(namespace, name)


def get_pdb(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        obj = client.PolicyV1Api(api_client()).read_namespaced_pod_disruption_budget(
            name, namespace
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return _dict(obj)


class _NotRead:
    """The object has not been read in this reconcile (as opposed to read and not found)."""


NOT_READ = _NotRead()
#: an object as read (None: not found), or NOT_READ
Read = dict[str, Any] | None | _NotRead


def upsert_pdb(
    namespace: str, body: dict[str, Any], owner_uid: str, current: Read = NOT_READ
) -> str:
    """Create or patch the PodDisruptionBudget; returns 'created', 'patched' or 'unchanged'.
    A PDB of that name that ``owner_uid`` does not own is never changed (ForeignObject).
    ``current``: the PDB as this reconcile already read it (not read again)."""
    api = client.PolicyV1Api(api_client())
    name = body["metadata"]["name"]
    cur = read_pdb(namespace, name) if isinstance(current, _NotRead) else current
    if cur is None:
        try:
            api.create_namespaced_pod_disruption_budget(
                namespace, cast(Any, body), field_manager=field_manager()
            )
            return "created"
        except ApiException as exc2:
            if exc2.status != 409:
                raise
        # it exists after all (created meanwhile, or a cache that lagged): read it, and change
        # it only if it is this resource's
        cur = get_pdb(namespace, name)
        if cur is None:
            raise ForeignObject(f"poddisruptionbudget/{name} appeared meanwhile; not changed")
    owners = cur.get("metadata", {}).get("ownerReferences") or []
    if not any(o.get("uid") == owner_uid for o in owners):
        raise ForeignObject(
            f"poddisruptionbudget/{name} exists and is not owned by this InferenceCapacity; "
            "it is left as it is"
        )
    if (
        cur.get("spec", {}).get("minAvailable") == body["spec"]["minAvailable"]
        and cur.get("spec", {}).get("selector") == body["spec"]["selector"]
    ):
        return "unchanged"
    api.patch_namespaced_pod_disruption_budget(
        name,
        namespace,
        {"spec": body["spec"]},
        field_manager=field_manager(),
        _content_type="application/merge-patch+json",
    )
    return "patched"


def read_secret_key(namespace: str, name: str, key: str) -> str | None:
    """One decoded key of a Secret (a Hub token), or None when absent or not readable."""
    found = read_secret(namespace, name)
    return found[1].get(key) or None if found is not None else None


def read_secret(namespace: str, name: str) -> tuple[dict[str, str], dict[str, str]] | None:
    """(labels, decoded data) of a Secret, or None when absent or not readable (RBAC)."""
    try:
        s = client.CoreV1Api(api_client()).read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status in (403, 404):
            return None
        raise
    labels = dict(s.metadata.labels or {}) if s.metadata is not None else {}
    data = {}
    for k, raw in (s.data or {}).items():
        try:
            data[k] = base64.b64decode(raw).decode()
        except (ValueError, UnicodeDecodeError):
            continue
    return labels, data


def list_pods(namespace: str, label_selector: str) -> list[dict[str, Any]] | None:
    """The Pods of a namespace matching the selector (raw JSON), or None when RBAC forbids it."""
    api = client.CoreV1Api(api_client())
    try:
        raw = api.list_namespaced_pod(
            namespace, label_selector=label_selector, _preload_content=False
        )
    except ApiException as exc:
        if exc.status in (401, 403):
            return None
        raise
    return _items(raw)


def read_pod_log(
    namespace: str,
    name: str,
    container: str,
    limit_bytes: int,
    timeout: float,
    previous: bool = False,
) -> bytes:
    """The first ``limit_bytes`` of a container's log (``pods/log`` with ``limitBytes``; no more
    is read off the socket whatever the server sends), within ``timeout`` seconds."""
    # _preload_content=False gives the urllib3 response, whatever the declared return type
    resp: Any = client.CoreV1Api(api_client()).read_namespaced_pod_log(
        name,
        namespace,
        container=container,
        limit_bytes=limit_bytes,
        previous=previous,
        _preload_content=False,
        _request_timeout=(min(timeout, 3.0), timeout),
    )
    try:
        chunks: list[bytes] = []
        left = limit_bytes
        deadline = time.monotonic() + timeout
        while left > 0 and time.monotonic() < deadline:
            chunk = resp.read(min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        resp.close()
        resp.release_conn()


LEASE_GROUP = "coordination.k8s.io"


def get_lease(namespace: str, name: str) -> dict[str, Any] | None:
    """A ``coordination.k8s.io/v1`` Lease as the API server sends it; None when absent."""
    return _read_json(client.CoordinationV1Api(api_client()).read_namespaced_lease, namespace, name)


def create_lease(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a Lease (409 when it exists: another replica created it first)."""
    raw = client.CoordinationV1Api(api_client()).create_namespaced_lease(
        namespace, cast(Any, body), field_manager=_field_manager, _preload_content=False
    )
    return _json(raw)


def replace_lease(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Update a Lease; ``body`` carries the resourceVersion it was decided on (409 when the
    Lease changed since: another replica wrote it first)."""
    raw = client.CoordinationV1Api(api_client()).replace_namespaced_lease(
        body["metadata"]["name"],
        namespace,
        cast(Any, body),
        field_manager=_field_manager,
        _preload_content=False,
    )
    return _json(raw)
