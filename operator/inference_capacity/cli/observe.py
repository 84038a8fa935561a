"""Observed traffic on the command line (issue 25): ``plan FILE --observe`` and ``observe``.

``plan FILE --observe`` (or ``INFERENCE_CAPACITY_OBSERVE=1``): each InferenceCapacity with
``spec.workload.fromPrometheus`` is observed through the CLI's synchronous transport
(observe/sync_reader.py, prometheus-api-client) with the operator's queries and folded into the
plan with the operator's rules (observe/fromspec.py), so ``-o patch`` is the operator's patch for
the same answers. The URL must start with a prefix given with ``--prometheus-allowed-url-prefix``
(none given: refused, nothing sent); a token only from ``--prometheus-token-file`` or
``--prometheus-token-env``. Without ``--observe`` the spec's workload is used and stderr says so.

``observe --prometheus URL --selector '{…}'``: the observed cohort quantiles, peak concurrency, KV
usage and preemption rate per vLLM Deployment, and the ``spec.workload`` stanza to paste.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from ..observe import Observation, PromSource, fromspec
from ..observe.merge import OBSERVED_COHORT, merge_cohorts, peak_concurrency
from ..observe.queries import RUNNING, Failed
from .common import CliError

OBSERVE_ENV = "INFERENCE_CAPACITY_OBSERVE"
_TRUE = ("1", "true", "yes", "on")


def _quiet_urllib3() -> None:
    """urllib3 logs each retry as a warning, which Python's last-resort handler prints: the
    CLI says what failed in one line itself."""
    logging.getLogger("urllib3").setLevel(logging.ERROR)


# ---- flags -----------------------------------------------------------------------------------


def _add_connection_flags(p: Any) -> None:
    p.add_argument(
        "--prometheus-token-file",
        metavar="PATH",
        help="read the bearer token sent to Prometheus from this file (never from anywhere else)",
    )
    p.add_argument(
        "--prometheus-token-env",
        metavar="VAR",
        help="read the bearer token sent to Prometheus from this environment variable",
    )
    p.add_argument(
        "--prometheus-ca-file", metavar="PATH", help="PEM bundle that signs Prometheus' certificate"
    )
    p.add_argument(
        "--prometheus-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="per-request timeout (10, as the operator's)",
    )


def add_plan_flags(plan: Any) -> None:
    """``plan FILE --observe`` and its bounds."""
    g = plan.add_argument_group(
        "observed traffic (issue 25)",
        "Size each InferenceCapacity with spec.workload.fromPrometheus from Prometheus, as the "
        "operator does. Off unless --observe or INFERENCE_CAPACITY_OBSERVE=1.",
    )
    g.add_argument(
        "--observe",
        action="store_true",
        help="query spec.workload.fromPrometheus and size from the observed traffic",
    )
    g.add_argument(
        "--prometheus-allowed-url-prefix",
        action="append",
        default=[],
        metavar="PREFIX",
        help="a URL prefix fromPrometheus.url may start with (repeatable); none given: every "
        "fromPrometheus URL is refused and nothing is sent",
    )
    _add_connection_flags(g)


def add_observe(sub: Any) -> None:
    p = sub.add_parser(
        "observe",
        help="show a vLLM fleet's observed traffic (per Deployment) and the spec.workload stanza",
    )
    p.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus base URL")
    p.add_argument(
        "--selector",
        default="",
        metavar="'{LABEL=\"VALUE\",…}'",
        help="PromQL label matchers of the vLLM series (braces optional)",
    )
    p.add_argument("--window", default="1h", help="look-back window, a Prometheus duration (1h)")
    p.add_argument(
        "--min-samples",
        type=int,
        default=30,
        help="finished requests needed per Deployment (30, as the operator's)",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=["table", "json"],
        default="table",
        help="table (default) or json: one object per Deployment (a list when several)",
    )
    _add_connection_flags(p)


# ---- shared pieces ----------------------------------------------------------------------------


def _token(a: argparse.Namespace) -> str | None:
    if a.prometheus_token_file and a.prometheus_token_env:
        raise CliError("give --prometheus-token-file or --prometheus-token-env, not both")
    if a.prometheus_token_file:
        try:
            token = Path(a.prometheus_token_file).read_text().strip()
        except OSError as exc:
            raise CliError(f"cannot read {a.prometheus_token_file}: {exc.strerror}") from None
        if not token:
            raise CliError(f"--prometheus-token-file {a.prometheus_token_file}: empty")
        return token
    if a.prometheus_token_env:
        token = os.environ.get(a.prometheus_token_env, "").strip()
        if not token:
            raise CliError(f"--prometheus-token-env {a.prometheus_token_env}: not set or empty")
        return token
    return None


def _ca(a: argparse.Namespace) -> str | None:
    if not a.prometheus_ca_file:
        return None
    try:
        return Path(a.prometheus_ca_file).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {a.prometheus_ca_file}: {exc.strerror}") from None


def _timeout(a: argparse.Namespace) -> float:
    if not 0 < a.prometheus_timeout <= 300:
        raise CliError("--prometheus-timeout must be in (0, 300] seconds")
    return float(a.prometheus_timeout)


def observation_json(obs: Observation) -> dict[str, Any]:
    def q(x: Any) -> dict[str, Any] | None:
        if x is None:
            return None
        return {
            "p50": x.p50,
            "p95": x.p95,
            "p99": x.p99,
            "buckets": {n: list(x.bounds(n)) for n in ("p50", "p95", "p99")},
            "coarse": sorted(x.coarse),
        }

    return {
        "ok": obs.ok,
        "reason": obs.reason,
        "message": obs.message,
        "window": obs.window,
        "samples": obs.samples,
        "promptTokens": q(obs.prompt_tokens),
        "outputTokens": q(obs.output_tokens),
        "peakConcurrency": obs.peak_concurrency,
        "kvUsageP95": obs.kv_usage_p95,
        "preemptionsPerHour": obs.preemptions_per_hour,
        "prefixCacheHitRate": obs.prefix_cache_hit_rate,
        "pods": sorted(obs.pods),
        "warnings": list(obs.warnings),
    }


# ---- plan FILE --observe ----------------------------------------------------------------------


def observe_enabled(a: argparse.Namespace) -> bool:
    return bool(getattr(a, "observe", False)) or (
        os.environ.get(OBSERVE_ENV, "").strip().lower() in _TRUE
    )


def observed_input(
    a: argparse.Namespace, spec: Any, namespace: str, name: str, inp: Any, config_maps: Any
) -> tuple[Any, dict[str, Any] | None]:
    """The plan input for one resource, with the observed workload folded in as the operator
    folds it; and the ``observed`` object of ``-o json`` (None: no ``fromPrometheus``)."""
    fp = spec.workload.from_prometheus
    if fp is None:
        return inp, None
    if not observe_enabled(a):
        print(
            f"inference-capacity: {name}: spec.workload.fromPrometheus: observed traffic not "
            f"used, sized from the spec's workload (--observe or {OBSERVE_ENV}=1 to use it)",
            file=sys.stderr,
        )
        return inp, {"used": False, "reason": "NotObserved"}
    _quiet_urllib3()
    try:
        fromspec.check_url(
            fp.url,
            tuple(a.prometheus_allowed_url_prefix),
            "plan --observe's",
            "none given",
            "Allow it with --prometheus-allowed-url-prefix PREFIX (repeatable)",
        )
    except fromspec.NotAllowed as exc:
        raise CliError(f"{name}: {exc}") from None
    token = _token(a)
    if fp.bearer_token_secret_ref is not None and token is None:
        raise CliError(
            f"{name}: spec.workload.fromPrometheus.bearerTokenSecretRef: the CLI reads no Secret; "
            "give the token with --prometheus-token-file or --prometheus-token-env"
        )
    ca = _ca(a)
    if ca is None and fp.ca_config_map_ref is not None:
        ref = fp.ca_config_map_ref
        ca = (config_maps.get(ref.name) or {}).get(ref.key)
        if ca is None:
            raise CliError(
                f"{name}: spec.workload.fromPrometheus.caConfigMapRef: ConfigMap {ref.name!r} "
                f"(key {ref.key!r}) not in the input; give it in FILE or --prometheus-ca-file"
            )
    from ..observe.sync_reader import observe_sync

    src = fromspec.source(spec, namespace, token, ca)
    src = PromSource(
        url=src.url,
        window=src.window,
        selector=src.selector,
        bearer_token=src.bearer_token,
        insecure_skip_verify=src.insecure_skip_verify,
        ca_cert_pem=src.ca_cert_pem,
        timeout_s=_timeout(a),
    )
    obs = observe_sync(src)
    if not obs.ok:
        print(
            f"inference-capacity: {name}: Observed=False ({obs.reason}): {obs.message}; sizing "
            "from the spec's workload (as the operator does)",
            file=sys.stderr,
        )
    elif fp.mode == "spec-only":
        print(
            f"inference-capacity: {name}: fromPrometheus.mode spec-only: observed, not used",
            file=sys.stderr,
        )
    out = {"used": obs.ok and fp.mode != "spec-only", "mode": fp.mode, **observation_json(obs)}
    workload = fromspec.fold(inp.workload, obs, fp.mode)
    return (inp if workload is inp.workload else replace(inp, workload=workload)), out


# ---- observe ----------------------------------------------------------------------------------

_K8S_POD = re.compile(r"^(?P<dep>.+)-[^-]+-[^-]+$")


def deployment_of(pod: str) -> str:
    """A Deployment's pod is ``<deployment>-<replicaset hash>-<suffix>``; other names stand for
    themselves."""
    m = _K8S_POD.match(pod)
    return m.group("dep") if m else pod


def _selector(text: str) -> str:
    s = text.strip()
    if s.startswith("{"):
        if not s.endswith("}"):
            raise CliError(f"--selector {text!r}: unbalanced braces")
        s = s[1:-1].strip()
    return s


def _groups(src: PromSource, at: float) -> dict[tuple[str, str], str]:
    """(namespace, Deployment) -> the selector of its vLLM series."""
    from ..observe.sync_reader import query_sync

    promql = f"count by (namespace, pod) (last_over_time({src.select(RUNNING)}[{src.window}]))"
    try:
        rows = query_sync(src, promql, at)
    except Failed as f:
        raise CliError(f"{f.reason}: {f.message}") from None
    groups: dict[tuple[str, str], str] = {}
    base = src.selector or ""
    for labels, _ in rows:
        ns, pod = labels.get("namespace", ""), labels.get("pod", "")
        if not pod:
            groups.setdefault((ns, ""), base)
            continue
        dep = deployment_of(pod)
        # a Deployment's name is DNS-1123 (letters, digits, '-', '.'): only '.' needs escaping,
        # doubled for the PromQL string literal
        name = re.escape(dep).replace("\\-", "-").replace("\\", "\\\\")
        pattern = name if dep == pod else name + "-[^-]+-[^-]+"
        extra = [f'pod=~"{pattern}"']
        if ns and f'namespace="{ns}"' not in base:
            extra.append(f'namespace="{ns}"')
        groups.setdefault((ns, dep), ",".join(m for m in (base, *extra) if m))
    return dict(sorted(groups.items()))


def _stanza(obs: Observation, src: PromSource) -> dict[str, Any] | None:
    cohorts = merge_cohorts([], obs, "replace")
    if not cohorts:
        return None
    (c,) = cohorts
    assert c.name == OBSERVED_COHORT
    workload: dict[str, Any] = {
        "cohorts": [
            {
                "name": c.name,
                "weight": 1.0,
                "promptTokens": {"p50": c.prompt.p50, "p95": c.prompt.p95, "p99": c.prompt.p99},
                "outputTokens": {
                    "p50": max(1, c.output.p50),
                    "p95": max(1, c.output.p95),
                    "p99": max(1, c.output.p99),
                },
            }
        ]
    }
    peak = peak_concurrency(None, obs.peak_concurrency, "replace")
    if peak is not None:
        workload["peakConcurrency"] = max(1, peak)
    workload["fromPrometheus"] = {
        "url": src.url,
        "window": src.window,
        "selector": src.selector or "",
        "mode": "max",
    }
    return {"workload": workload}


def cmd_observe(a: argparse.Namespace) -> int:
    from ..observe.sync_reader import observe_sync, peak_time_sync

    _quiet_urllib3()
    try:
        src = PromSource(
            url=a.prometheus,
            window=a.window,
            selector=_selector(a.selector) or None,
            bearer_token=_token(a),
            ca_cert_pem=_ca(a),
            timeout_s=_timeout(a),
        )
    except ValueError as exc:
        raise CliError(f"observe: {exc}") from None
    if a.min_samples < 1:
        raise CliError("--min-samples must be at least 1")
    at = time.time()
    groups = _groups(src, at)
    if not groups:
        where = f"{{{src.selector}}}" if src.selector else "(no selector)"
        raise CliError(f"NoSeries: no vLLM series ({RUNNING}) match {where} in {src.window}")
    results: list[dict[str, Any]] = []
    for (ns, dep), selector in groups.items():
        one = PromSource(
            url=src.url,
            window=src.window,
            selector=selector or None,
            bearer_token=src.bearer_token,
            ca_cert_pem=src.ca_cert_pem,
            timeout_s=src.timeout_s,
        )
        obs = observe_sync(one, now=at, min_samples=a.min_samples)
        stanza = _stanza(obs, one) if obs.ok else None
        peak_at = None
        if obs.ok and obs.peak_concurrency is not None:
            try:
                when = peak_time_sync(one, at)
            except Failed as f:
                obs.warnings.append(f"when the peak was: {f.message}")
            else:
                peak_at = None if when is None else _iso(when)
        results.append(
            {
                "namespace": ns or None,
                "deployment": dep or None,
                "selector": selector,
                **observation_json(obs),
                "peakAt": peak_at,
                "spec": stanza,
            }
        )
    if a.output == "json":
        print(json.dumps(results if len(results) != 1 else results[0], indent=2))
    else:
        print("\n\n".join(_text(r) for r in results))
    return 0 if all(r["ok"] for r in results) else 1


def _iso(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat().replace("+00:00", "Z")


def _num(x: float | None, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def _text(r: dict[str, Any]) -> str:
    title = "/".join(x for x in (r["namespace"], r["deployment"]) if x) or "(all series)"
    lines = [f"{title}  ({len(r['pods'])} pods, {r['window']}, selector {{{r['selector']}}})"]
    if not r["ok"]:
        lines.append(f"  {r['reason']}: {r['message']}")
        return "\n".join(lines)
    lines.append(f"  requests   {r['samples']:,}")
    for label, key in (("prompt", "promptTokens"), ("output", "outputTokens")):
        q = r[key]
        if q is None:
            lines.append(f"  {label:<10} -")
            continue
        cells = []
        for n in ("p50", "p95", "p99"):
            lo, hi = q["buckets"][n]
            mark = " (coarse)" if n in q["coarse"] else ""
            cells.append(f"{n.upper()} {q[n]:,.0f} in ({lo:g}, {hi:g}]{mark}")
        lines.append(f"  {label:<10} " + "   ".join(cells))
    at = f" (about {r['peakAt']})" if r.get("peakAt") else ""
    lines.append(f"  peak concurrency      {_num(r['peakConcurrency'])}{at}")
    kv = r["kvUsageP95"]
    lines.append(f"  KV usage P95 (max pod) {'-' if kv is None else f'{kv:.1%}'}")
    lines.append(f"  preemptions / hour    {_num(r['preemptionsPerHour'], ',.1f')}")
    hit = r["prefixCacheHitRate"]
    lines.append(f"  prefix-cache hit rate {'-' if hit is None else f'{hit:.1%}'}")
    for w in r["warnings"]:
        lines.append(f"  warning: {w}")
    if r["spec"] is not None:
        lines.append("  spec (paste into the InferenceCapacity's spec):")
        text = yaml.safe_dump(
            {"spec": r["spec"]}, sort_keys=False, default_flow_style=None, width=1000
        )
        lines += ["    " + ln for ln in text.rstrip().splitlines()]
    return "\n".join(lines)
