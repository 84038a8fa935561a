"""Every setting of the operator in one object: the ``INFERENCE_CAPACITY_*`` environment
variables and the flags of ``inference-capacity run``.

:func:`current` is what the rest of the code reads; ``run`` builds it once from the environment
and its flags (:func:`configure`), so nothing passes settings through ``os.environ``. A value
that is not a number of the right kind, or out of range, is an error naming the variable (the
operator does not start on a setting it would have to guess).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

PREFIX = "INFERENCE_CAPACITY_"
#: settings that must be above zero (a rate, a bucket, a cap of 0 would stop every request)
POSITIVE = ("api_qps", "api_burst", "api_retry_after_max_seconds", "kopf_connections")


@dataclass(frozen=True, slots=True)
class Settings:
    # --- Kopf (controller/handlers.py) -------------------------------------------------------
    #: the refresh timer of every InferenceCapacity (seconds)
    refresh_seconds: float = 60.0
    #: delay of a retry after a transient API error (seconds)
    retry_seconds: float = 5.0
    #: server-side timeout of a watch request (seconds)
    watch_timeout: int = 300
    #: Kopf's handler worker threads (a reconcile mostly waits on the API server)
    workers: int = 16
    #: threads of the refresh timers, apart from Kopf's workers: an edit never waits behind a
    #: wave of refreshes
    refresh_workers: int = 2
    #: peering priority; None: a random one per process, so exactly one replica works
    peering_priority: int | None = None
    #: how long a dead leader's peering entry counts (seconds)
    peering_lifetime: int = 60
    #: after SIGTERM the operator kills itself if a graceful exit takes longer (seconds)
    exit_timeout_seconds: float = 20.0
    # --- the operator's own Kubernetes client (controller/k8s.py, controller/throttle.py) ---
    #: requests a second, on average, over all threads (a token bucket; Kopf's own client is
    #: not limited by it: docs/install.md "API server load")
    api_qps: float = 100.0
    #: requests sent at once before the average applies (the bucket's size)
    api_burst: int = 200
    #: retries of one request answered 429 (or 5xx with Retry-After); 0: none
    api_retries: int = 10
    #: the longest single wait for a retry (seconds): a larger Retry-After is cut to it
    api_retry_after_max_seconds: float = 60.0
    #: Kopf's own client (status patches, Kopf's reads): connections open at once beside its
    #: watch streams (controller/session.py); a request past them waits for one to free
    kopf_connections: int = 16
    # --- shards (controller/sharding.py, controller/shards.py) --------------------------------
    #: shards of the InferenceCapacities over replicas, each with a coordination Lease; 1: off
    shards: int = 1
    #: the shard this replica prefers (acquires first); None: the StatefulSet ordinal of the
    #: hostname (``<name>-<n>``)
    shard_index: int | None = None
    #: a shard Lease not renewed for this long (as another replica sees it) is taken over
    #: (seconds); a holder stops writing 2/3 of it after its last renewal
    shard_lease_seconds: float = 15.0
    #: the namespace of the shard Leases; empty: the pod's own (POD_NAMESPACE)
    shard_lease_namespace: str = ""
    #: the Leases are named ``<prefix>-shard-<i>`` (the chart: the release's full name)
    shard_lease_prefix: str = "inference-capacity"
    # --- the decision (decision.py) ----------------------------------------------------------
    #: pod-template stabilization window when spec.policy.stabilizationWindowSeconds is null
    stabilization_seconds: float = 300.0
    #: replica scale-down window when spec.policy.replicaStabilizationWindowSeconds is null
    replica_stabilization_seconds: float = 300.0
    # --- cluster reads (controller/) ---------------------------------------------------------
    #: Node/Pod listings shared by reconciles for this long (seconds)
    nodes_ttl_seconds: float = 10.0
    #: HPA listings per namespace shared by reconciles for this long (seconds)
    hpa_ttl_seconds: float = 5.0
    # --- Prometheus (controller/observing.py) ------------------------------------------------
    #: Prometheus requests open at once over all resources (async, on the operator's I/O loop;
    #: never a thread per request); each observation has at most 4 of them
    prometheus_connections: int = 64
    #: how long a reconcile waits for a query it just started (seconds)
    observe_wait_seconds: float = 0.5
    #: URL prefixes spec.workload.fromPrometheus.url may start with; empty: all refused
    prometheus_allowed_url_prefixes: tuple[str, ...] = ()
    # --- vLLM's startup lines (controller/startup.py) -----------------------------------------
    #: one pods/log read, from its start to its last byte (seconds)
    startup_log_timeout_seconds: float = 5.0
    #: a log without vLLM's startup lines (yet) is read again after this long (seconds)
    startup_log_retry_seconds: float = 30.0
    #: a log that had them is read again after this long (seconds): the bounded schedule
    startup_log_refresh_seconds: float = 600.0
    #: the target's pods are listed at most once per this long per resource (seconds)
    startup_pods_ttl_seconds: float = 5.0
    # --- the Hub (model/source.py, controller/models.py) -------------------------------------
    #: per Hub request, from its start to its last byte (seconds)
    hub_timeout: float = 10.0
    #: how long a reconcile waits for a model resolution before reporting Resolving (seconds)
    model_resolve_deadline_seconds: float = 2.0
    #: Hub requests open at once over all resolutions (async, on the operator's I/O loop;
    #: never a thread per request); each resolution reads at most 8 headers at once
    hub_connections: int = 32
    #: model resolutions running at once over all namespaces
    model_resolutions: int = 16
    #: model resolutions of one namespace running at once (the rest wait their turn)
    model_resolutions_per_namespace: int = 2
    #: resolved models kept in memory
    model_cache: int = 64
    #: how long a moving revision (a branch) resolves to the same commit (seconds)
    revision_ttl_seconds: float = 300.0
    # --- flags of `run` only -----------------------------------------------------------------
    namespaces: tuple[str, ...] = field(default=(), metadata={"env": False})
    standalone: bool = field(default=False, metadata={"env": False})
    peering: str | None = field(default=None, metadata={"env": False})
    liveness: str = field(default="http://0.0.0.0:8080/healthz", metadata={"env": False})
    metrics_port: int = field(default=9090, metadata={"env": False})
    verbose: bool = field(default=False, metadata={"env": False})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings the environment gives (defaults for the variables it does not set)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            if not f.metadata.get("env", True):
                continue
            name = env_name(f.name)
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                continue
            values[f.name] = _parse(name, str(f.type), raw)
        return cls(**values)

    def replace(self, **changes: Any) -> Settings:
        out = dataclasses.replace(self, **changes)
        out.validate()
        return out

    def validate(self) -> None:
        if self.shards < 1:
            raise ValueError(f"{env_name('shards')} must be >= 1, got {self.shards}")
        if self.shards > 1 and self.peering is not None:
            raise ValueError(
                f"{env_name('shards')}={self.shards} with --peering: the shard Leases coordinate "
                "the replicas and each runs Kopf standalone (peering would pause all but one); "
                "drop --peering"
            )
        if self.shard_index is not None and self.shard_index >= self.shards:
            raise ValueError(
                f"{env_name('shard_index')}={self.shard_index} is not below "
                f"{env_name('shards')}={self.shards}"
            )
        if self.shards > 1 and self.shard_lease_seconds < 3:
            raise ValueError(
                f"{env_name('shard_lease_seconds')} must be >= 3 s, got {self.shard_lease_seconds}"
            )
        for prefix in self.prometheus_allowed_url_prefixes:
            if not prefix.startswith(("http://", "https://")) or "," in prefix:
                raise ValueError(
                    f"--prometheus-allowed-url-prefix: {prefix!r} is not an http(s):// prefix"
                )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"{env_name(f.name)} must be >= 0, got {value}")
        for name in POSITIVE:
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{env_name(name)} must be a finite number > 0, got {value}")


def env_name(field_name: str) -> str:
    """The environment variable of a setting: INFERENCE_CAPACITY_ + the name in capitals."""
    return PREFIX + field_name.upper()


def env_names() -> tuple[str, ...]:
    """Every environment variable the operator reads (docs/install.md lists them)."""
    return tuple(env_name(f.name) for f in fields(Settings) if f.metadata.get("env", True))


def _parse(name: str, type_: str, raw: str) -> Any:
    text = raw.strip()
    try:
        if type_.startswith("int"):
            return int(text)
        if type_ == "float":
            return float(text)
        if type_.startswith("tuple"):
            return tuple(p.strip() for p in text.split(",") if p.strip())
        if type_ == "str":
            return text
    except ValueError:
        kind = "an integer" if type_.startswith("int") else "a number"
        raise ValueError(f"{name} must be {kind}, got {raw!r}") from None
    raise TypeError(f"{name}: no parser for {type_}")  # a new field's type: a bug here


_current: Settings | None = None


def current() -> Settings:
    """The operator's settings: those :func:`configure` set, else the environment's."""
    global _current
    if _current is None:
        _current = Settings.from_env()
    return _current


def configure(settings: Settings) -> None:
    """Set the settings every part of the operator reads (``run`` does, once, at start)."""
    global _current
    settings.validate()
    _current = settings
