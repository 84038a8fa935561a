"""The operator publishes issue 14's sizing and latency in status (on the real control plane with
Kopf, as tests/test_operator.py)."""

from __future__ import annotations

from typing import Any

from tests.operator_harness import Cluster, cluster  # noqa: F401  (the fixture)
from tests.realk8s.fixtures import wait_for
from tests.test_operator import apply_example


def test_status_has_sizing_and_latency(cluster: Cluster) -> None:  # noqa: F811
    ns = cluster.namespace("sizing")
    apply_example(cluster, ns)

    def ready() -> dict[str, Any] | None:
        st = cluster.icap(ns, "llama-8b").get("status") or {}
        return st if st.get("sizing") and st.get("recommendation") else None

    st: dict[str, Any] = wait_for(ready, timeout=20, interval=0.2, message="status.sizing")
    sizing, rec = st["sizing"], st["recommendation"]
    assert sizing["rule"] == "distribution"  # the default spec.policy.sizing
    assert sizing["maxNumSeqs"] == rec["maxNumSeqs"]
    assert 0 <= sizing["preemptionProbability"] < sizing["preemptionTarget"] == 0.01
    assert sizing["preemptionProbabilityAtDefault"] == 1.0
    assert sizing["defaultMaxNumSeqs"] == 1024
    lat = st["latency"]
    assert 0 < lat["itlMsP50"] <= lat["itlMsP95"]
    assert lat["outputTokensPerS"] > 0 and lat["hbmEfficiency"] == 0.8
    # issue 19: the predicted TTFT and the ITL tail are in status too
    assert lat["itlMsP95"] <= lat["itlMsP99"]
    assert 0 < lat["ttftMsP50"] <= lat["ttftMsP95"]
    assert lat["saturated"] in (True, False)
    # the example's cohorts have length spreads: its TTFT assumes spread arrivals
    assert lat["arrivals"] == "spread"
