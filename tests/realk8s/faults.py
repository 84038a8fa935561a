"""Fault injection and request recording, thread-safe: the fault proxy in front of the real
kube-apiserver (``tests/realk8s/proxy.py``) and the in-memory emulator (``tests/kubeapi``) use
them."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class FaultRule:
    """Answer the next ``times`` requests matching method/path with ``status`` (or delay them)."""

    method: str = "*"
    path: str = ".*"  # a regular expression searched in the path (with the query string)
    status: int | None = None
    times: int | None = 1  # None: forever
    delay: float = 0.0
    message: str | None = None
    retry_after: int | None = None
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.method not in ("*", method.upper()):
            return False
        return re.search(self.path, path) is not None


class Faults:
    """The fault-injection control of one server. Every method is safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rules: list[FaultRule] = []
        self._actions: dict[str, Callable[[], Any]] = {}

    def bind(self, name: str, action: Callable[[], Any]) -> None:
        self._actions[name] = action

    def fail(
        self,
        status: int,
        method: str = "*",
        path: str = ".*",
        times: int | None = 1,
        message: str | None = None,
        retry_after: int | None = None,
    ) -> FaultRule:
        """Answer the next ``times`` matching requests with an error ``Status`` of ``status``."""
        rule = FaultRule(
            method=method.upper(),
            path=path,
            status=status,
            times=times,
            message=message,
            retry_after=retry_after,
        )
        with self._lock:
            self.rules.append(rule)
        return rule

    def delay(
        self, seconds: float, method: str = "*", path: str = ".*", times: int | None = 1
    ) -> FaultRule:
        """Delay the next ``times`` matching requests by ``seconds`` before answering."""
        rule = FaultRule(method=method.upper(), path=path, delay=seconds, times=times)
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def take(self, method: str, path: str) -> tuple[float, FaultRule | None]:
        """Consume the rules matching a request: (total delay, the failing rule if any)."""
        delay = 0.0
        failing: FaultRule | None = None
        with self._lock:
            for rule in list(self.rules):
                if not rule.matches(method, path):
                    continue
                if rule.status is not None and failing is not None:
                    continue
                rule.hits += 1
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times <= 0:
                        self.rules.remove(rule)
                if rule.status is not None:
                    failing = rule
                else:
                    delay += rule.delay
        return delay, failing

    def drop_watches(self) -> int:
        """End every open watch stream now (cleanly, as an API server restart would)."""
        return int(self._actions["drop_watches"]())

    def expire(self) -> int:
        """Make all resourceVersions seen so far too old: resuming watches get 410 Expired."""
        return int(self._actions["expire"]())


@dataclass(frozen=True)
class RequestRecord:
    verb: str  # RBAC verb: get, list, watch, create, update, patch, delete, deletecollection
    group: str
    version: str
    resource: str  # plural; "" for non-resource requests
    namespace: str
    subresource: str
    name: str = ""
    method: str = ""
    path: str = ""
    code: int = 0
    user_agent: str = field(default="", compare=False)
    message: str = field(default="", compare=False)  # the Status message of an error answer

    @property
    def rbac_denied(self) -> bool:
        """A 403 from the authorizer (RBAC), not from admission: NamespaceLifecycle answers 403
        too when an object is created in a namespace being deleted."""
        return self.code == 403 and "being terminated" not in self.message

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RequestLog:
    """Every API request as (verb, group, version, resource, namespace, subresource, ...)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def __iter__(self) -> Any:
        return iter(self.records())

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def resource_requests(self) -> list[RequestRecord]:
        return [r for r in self.records() if r.resource]

    def filter(self, **criteria: Any) -> list[RequestRecord]:
        return [r for r in self.records() if all(getattr(r, k) == v for k, v in criteria.items())]

    def permissions(self) -> set[tuple[str, str, str]]:
        """(group, resource[/subresource], verb) of every resource request."""
        return {
            (r.group, f"{r.resource}/{r.subresource}" if r.subresource else r.resource, r.verb)
            for r in self.resource_requests()
        }

    def not_allowed_by(self, rules: Iterable[dict[str, Any]]) -> set[tuple[str, str, str]]:
        """Permissions used but not granted by RBAC ``rules`` (a Role's ``rules`` list)."""
        missing = set()
        rules = list(rules)
        for group, resource, verb in self.permissions():
            if not any(_rule_allows(rule, group, resource, verb) for rule in rules):
                missing.add((group, resource, verb))
        return missing


def _rule_allows(rule: dict[str, Any], group: str, resource: str, verb: str) -> bool:
    groups = rule.get("apiGroups") or []
    resources = rule.get("resources") or []
    verbs = rule.get("verbs") or []
    if "*" not in groups and group not in groups:
        return False
    base = resource.split("/", 1)[0]
    if (
        "*" not in resources
        and resource not in resources
        and not ("/" in resource and f"*/{resource.split('/', 1)[1]}" in resources)
        and not ("/" not in resource and base in resources)
    ):
        return False
    return "*" in verbs or verb in verbs
