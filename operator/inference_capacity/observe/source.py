"""Where to read vLLM's metrics: a Prometheus HTTP API, a look-back window and a selector.

``PromSource`` is the plain-value form of ``spec.workload.fromPrometheus``: the controller
resolves the Secret (bearer token) and the ConfigMap (CA bundle) and hands their contents here,
so this package never talks to Kubernetes. Invalid values (a window that is not a Prometheus
duration, a non-positive timeout) raise ``ValueError`` at construction: they are programming or
validation errors, not the failure modes ``observe`` reports as conditions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNIT_SECONDS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
    "y": 365 * 86400.0,
}
_DURATION = re.compile(r"^(?:(\d+)(ms|s|m|h|d|w|y))+$")
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


#: characters that may follow an allowed prefix that does not itself end in / or :
_BOUNDARY = frozenset("/:?#")


def url_allowed(url: str, prefixes: tuple[str, ...] | list[str]) -> bool:
    """Whether ``url`` starts with one of ``prefixes`` at a boundary: the prefix
    ``http://prometheus.monitoring:9090`` allows ``http://prometheus.monitoring:9090/x`` but
    not ``http://prometheus.monitoring:90901`` nor ``http://prometheus.monitoring:9090@evil``,
    and ``http://prometheus`` not ``http://prometheus.evil.com``. Scheme and host compare
    case-insensitively. No prefixes: nothing is allowed."""
    low = url.strip()
    for prefix in prefixes:
        p = prefix.strip()
        if not p or "://" not in p:
            continue
        scheme_host = p.lower()
        if not low.lower().startswith(scheme_host):
            continue
        rest = low[len(p) :]
        if p.endswith(("/", ":")) or not rest or rest[0] in _BOUNDARY:
            if "@" in low.split("://", 1)[1].split("/", 1)[0]:
                return False  # userinfo: the real host follows the @
            return True
    return False


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration (``90s``, ``1h30m``, ``7d``, ``1w``, ``500ms``)."""
    if not _DURATION.match(text):
        raise ValueError(f"not a Prometheus duration: {text!r} (e.g. 30m, 6h, 7d)")
    seconds = sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _PART.findall(text))
    if seconds <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    return seconds


@dataclass(frozen=True, slots=True)
class PromSource:
    """A Prometheus to query for one target's vLLM pods.

    url: base URL of the Prometheus HTTP API (``http://prometheus.monitoring:9090``), no
        trailing ``/api/v1``.
    window: look-back window, a Prometheus duration (``7d``); every statistic covers it.
    selector: PromQL label matchers without braces that pick the target's vLLM series, e.g.
        ``namespace="default",pod=~"llama-8b-.*"``. None: every vLLM series in Prometheus.
    bearer_token: sent as ``Authorization: Bearer <token>``. None: no header.
    insecure_skip_verify: do not verify the server's TLS certificate (testing only).
    ca_cert_pem: PEM bundle that signs the server's certificate. None: the system trust store.
    timeout_s: per-request timeout (connect and read), seconds.
    """

    url: str
    window: str = "7d"
    selector: str | None = None
    bearer_token: str | None = None
    insecure_skip_verify: bool = False
    ca_cert_pem: str | None = None
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"PromSource.url must be http(s)://…, got {self.url!r}")
        parse_duration(self.window)
        if self.timeout_s <= 0:
            raise ValueError(f"PromSource.timeout_s must be positive, got {self.timeout_s}")
        if self.selector is not None and self.selector.strip().startswith("{"):
            raise ValueError("PromSource.selector takes label matchers without braces")

    @property
    def window_seconds(self) -> float:
        return parse_duration(self.window)

    def select(self, metric: str, extra: str = "") -> str:
        """``metric{selector,extra}`` (or the bare metric when there is nothing to match)."""
        matchers = ",".join(m for m in (self.selector or "", extra) if m.strip())
        return f"{metric}{{{matchers}}}" if matchers else metric
