"""`plan FILE --observe -o patch` is the patch the operator writes from the same Prometheus
(issue 25): the real Kopf operator on the real control plane (tests/operator_harness.py) and the
CLI both observe the real prometheus binary serving the generated vLLM trace
(tests/promfixtures.py) — the operator over aiohttp, the CLI over prometheus-api-client — and
fold the observation in by the same rules. The trace ended minutes before either looks and the
window (7d) holds all of it, so both get the same answers; the Deployment the operator leaves is
the live one with the CLI's patch applied. And the observation mattered: without --observe the
CLI's patch differs (the observed prompt lengths lower --max-num-seqs)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from inference_capacity.cli import main
from inference_capacity.patching import ANNOTATION_APPLIED, apply_strategic
from tests.operator_harness import Cluster, cluster, load_example
from tests.realk8s.fixtures import wait_for
from tests.test_decision_parity import _compared, _settled

__all__ = ["cluster"]

pytestmark = pytest.mark.prometheus

NAME = "llama-8b"
SELECTOR = 'namespace="default",pod=~"llama-8b-6d5f8-.*"'


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _spec(icap: dict[str, Any], url: str) -> None:
    spec = icap["spec"]
    spec["workload"]["fromPrometheus"] = {
        "url": url,
        "window": "7d",
        "selector": SELECTOR,
        "mode": "max",
    }
    # the flags only: the observed peak's replicas and the spare GPUs of the test nodes would
    # make this a test of the replica rules, which test_decision_parity covers
    spec["rollout"].update(manageReplicas=False, manageStrategy=False, maxReplicas=64)


def test_plan_observe_patch_is_the_operators(
    cluster: Cluster, prometheus_url: str, tmp_path: Path
) -> None:
    c = cluster
    ns = c.namespace("obsparity")
    icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
    _spec(icap, prometheus_url)
    c.api.apply(dep)
    live = _settled(c, ns)
    f = tmp_path / "icap.yaml"
    f.write_text(yaml.safe_dump_all([icap, live, c.api.get_json("nodes,pods", "-A")]))
    allow = ("--prometheus-allowed-url-prefix", "http://127.0.0.1:")
    code, out, err = _cli("plan", str(f), "-o", "patch", "--observe", *allow)
    assert code == 0, err
    patch = json.loads(out)
    code, spec_out, err = _cli("plan", str(f), "-o", "patch")
    assert code == 0, err
    assert "observed traffic not used" in err
    assert _compared(apply_strategic(live, json.loads(spec_out))) != _compared(
        apply_strategic(live, patch)
    )

    c.api.apply(icap)
    c.wait_condition(ns, NAME, "Observed", "True", timeout=60)

    def written() -> dict[str, Any] | None:
        d = c.deployment(ns, NAME)
        return d if ANNOTATION_APPLIED in (d["metadata"].get("annotations") or {}) else None

    after = wait_for(written, timeout=60, interval=0.2, message="operator patch")
    assert _compared(after) == _compared(apply_strategic(live, patch))
    # and the operator's observation is the CLI's (the numbers its patch was sized from)
    code, js, err = _cli("plan", str(f), "-o", "json", "--observe", *allow)
    assert code == 0, err
    cli_obs = json.loads(js)["observed"]
    op_obs = c.icap(ns, NAME)["status"]["observed"]
    assert op_obs["peakConcurrency"] == cli_obs["peakConcurrency"]
    for key in ("promptTokens", "outputTokens"):
        assert {q: op_obs[key][q] for q in ("p50", "p95", "p99")} == {
            q: cli_obs[key][q] for q in ("p50", "p95", "p99")
        }
