"""The operator with a real Prometheus (backfilled vLLM trace) and the test API server: the
observed workload feeds the plan, the predicted pool is compared with vLLM's real one, and a
failing Prometheus leaves the operator sizing from the spec, saying so."""

from __future__ import annotations

from typing import Any

from tests.operator_harness import Cluster, cluster, load_example

__all__ = ["cluster"]

SELECTOR = 'namespace="default",pod=~"llama-8b-6d5f8-.*"'


def _with_prometheus(url: str, mode: str = "max", selector: str = SELECTOR) -> Any:
    def edit(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        icap["spec"]["workload"]["fromPrometheus"] = {
            "url": url,
            "window": "7d",
            "selector": selector,
            "mode": mode,
        }

    return edit


def _apply(c: Cluster, ns: str, edit: Any) -> None:
    icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
    edit(icap, dep)
    c.api.apply(icap, dep)


def test_observed_workload_and_calibration(cluster: Cluster, prometheus_url: str) -> None:
    c = cluster
    ns = c.namespace("prom")
    _apply(c, ns, _with_prometheus(prometheus_url, mode="max"))
    c.wait_condition(ns, "llama-8b", "Observed", "True", timeout=40)
    st = c.icap(ns, "llama-8b")["status"]
    obs = st["observed"]
    assert obs["samples"] > 1000 and obs["peakConcurrency"] > 0
    assert obs["promptTokens"]["p95"] > obs["promptTokens"]["p50"] > 0
    # the trace's llama pods report num_gpu_blocks 27910 (and the others) at u = 0.9
    assert obs["numGpuBlocks"] is not None and obs["predictedNumGpuBlocks"] is not None
    cal = c.condition(ns, "llama-8b", "Calibrated")
    assert cal is not None and cal["status"] in ("True", "False")
    err = obs["predictionErrorPercent"]
    assert err is not None
    assert (cal["status"] == "True") == (cal["reason"] == "Calibrated")
    # max mode: the observed peak (thousands) raises the replicas above the spec's peak of 300
    assert st["recommendation"]["minReplicasForPeak"] >= -(
        -int(obs["peakConcurrency"]) // st["recommendation"]["perReplicaConcurrency"]
    )


def test_spec_only_ignores_the_observation(cluster: Cluster, prometheus_url: str) -> None:
    c = cluster
    ns = c.namespace("specon")
    _apply(c, ns, _with_prometheus(prometheus_url, mode="spec-only"))
    c.wait_condition(ns, "llama-8b", "Observed", "True", timeout=40)
    rec = c.icap(ns, "llama-8b")["status"]["recommendation"]
    assert rec["minReplicasForPeak"] == -(-300 // rec["perReplicaConcurrency"])


def test_unreachable_prometheus_keeps_serving_from_the_spec(
    cluster: Cluster, closed_port_url: str
) -> None:
    c = cluster
    ns = c.namespace("noprom")
    _apply(c, ns, _with_prometheus(closed_port_url))
    cond = c.wait_condition(
        ns, "llama-8b", "Observed", "False", "PrometheusUnreachable", timeout=40
    )
    assert "sizing from the spec" in cond["message"]
    c.wait_condition(ns, "llama-8b", "Applied", "True", timeout=40)


def test_no_series_for_the_selector(cluster: Cluster, prometheus_url: str) -> None:
    c = cluster
    ns = c.namespace("noseries")
    _apply(c, ns, _with_prometheus(prometheus_url, selector='namespace="nowhere"'))
    c.wait_condition(ns, "llama-8b", "Observed", "False", "NoSeries", timeout=40)
    c.wait_condition(ns, "llama-8b", "Applied", "True", timeout=40)
