"""`inference-capacity observe` and `plan FILE --observe` against the real prometheus binary
serving the generated vLLM trace (tests/promfixtures.py, tests/vllm_trace.py; issue 25).

The trace knows the lengths it drew: every quantile `observe` prints must lie in the histogram
bucket that holds the true (empirical) quantile of the drawn lengths, so it is within one bucket
of the truth; peak concurrency, KV usage and preemptions are what the trace computes."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from inference_capacity.cli import main
from inference_capacity.cli.observe import deployment_of
from tests.vllm_trace import BUCKETS

if TYPE_CHECKING:
    from tests.promfixtures import PromServer, Proxy

pytestmark = pytest.mark.prometheus

EXAMPLE = Path("examples") / "llama-3.1-8b-h100.yaml"
SELECTOR = 'namespace="default",pod=~"llama-8b-6d5f8-.*"'


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _bucket(value: float) -> int:
    """The index of the bucket (le) that holds value: (BUCKETS[i-1], BUCKETS[i]]."""
    return next((i for i, b in enumerate(BUCKETS) if value <= b), len(BUCKETS))


@pytest.fixture(scope="module")
def observed(prometheus_server: PromServer) -> list[dict[str, Any]]:
    code, out, err = _cli(
        "observe",
        "--prometheus",
        prometheus_server.url,
        "--selector",
        '{namespace="default"}',
        "--window",
        "7d",
        "-o",
        "json",
    )
    assert code == 0, err
    got: list[dict[str, Any]] = json.loads(out)
    return got


def test_one_entry_per_deployment(observed: list[dict[str, Any]], vllm_trace: Any) -> None:
    assert [(r["namespace"], r["deployment"]) for r in observed] == [
        ("default", "llama-8b"),
        ("default", "longctx"),
    ]
    llama = observed[0]
    assert set(llama["pods"]) == {p.spec.name for p in vllm_trace.select("llama-8b")}
    assert deployment_of("llama-8b-canary-x9") == "llama-8b"


@pytest.mark.parametrize("which,key", [("prompt", "promptTokens"), ("output", "outputTokens")])
@pytest.mark.parametrize("name,q", [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)])
def test_quantiles_within_one_bucket_of_the_drawn_lengths(
    observed: list[dict[str, Any]], vllm_trace: Any, which: str, key: str, name: str, q: float
) -> None:
    llama = observed[0]
    pods = vllm_trace.select("llama-8b")
    true = vllm_trace.true_quantile(pods, which, q)
    value = llama[key][name]
    lo, hi = llama[key]["buckets"][name]
    assert lo < true <= hi and lo <= value <= hi
    assert _bucket(value) == _bucket(true) or (value == lo and _bucket(value) == _bucket(true) - 1)
    # and the lognormal mixture the trace drew from agrees with the drawn lengths
    assert abs(_bucket(vllm_trace.mixture_quantile("llama-8b", which, q)) - _bucket(value)) <= 1


def test_concurrency_kv_preemptions(observed: list[dict[str, Any]], vllm_trace: Any) -> None:
    llama = observed[0]
    pods = vllm_trace.select("llama-8b")
    assert llama["peakConcurrency"] == vllm_trace.peak_concurrency(pods)
    assert llama["kvUsageP95"] == pytest.approx(vllm_trace.kv_usage_p95(pods), abs=1e-9)
    # observed now, not at the trace's end: the span may read up to the 5 m lookback long
    # (observe/queries.py, _span_instants)
    truth = vllm_trace.preemptions_per_hour(pods)
    hours = (vllm_trace.end - vllm_trace.start) / 3600
    assert truth * hours / (hours + 5 / 60) * 0.99 <= llama["preemptionsPerHour"] <= truth * 1.01


def test_the_stanza_is_a_valid_workload(observed: list[dict[str, Any]]) -> None:
    from inference_capacity.api import InferenceCapacity

    llama = observed[0]
    stanza = llama["spec"]["workload"]
    cohort = stanza["cohorts"][0]
    # the operator's rounding (observe/merge.py): whole tokens, up
    assert cohort["promptTokens"]["p95"] == math.ceil(llama["promptTokens"]["p95"] - 1e-9)
    assert stanza["peakConcurrency"] == math.ceil(llama["peakConcurrency"] - 1e-9)
    doc = next(
        d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] == "InferenceCapacity"
    )
    doc["spec"]["workload"].update(stanza)
    icap = InferenceCapacity.from_manifest(doc, ignore_status=True)
    assert icap.spec.workload.cohorts[0].prompt_tokens.p95 == cohort["promptTokens"]["p95"]


def test_the_table_names_the_numbers(prometheus_server: PromServer) -> None:
    code, out, err = _cli(
        "observe", "--prometheus", prometheus_server.url, "--selector", SELECTOR, "--window", "7d"
    )
    assert code == 0, err
    assert out.startswith("default/llama-8b  (3 pods, 7d")
    for word in ("prompt", "output", "P95", "peak concurrency", "KV usage", "preemptions"):
        assert word in out
    assert "spec:\n" in out and "workload:" in out


def test_observe_errors_are_one_line(prometheus_server: PromServer, closed_port_url: str) -> None:
    code, out, err = _cli("observe", "--prometheus", closed_port_url)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert f"cannot reach Prometheus at {closed_port_url}: connection refused" in err
    code, _, err = _cli(
        "observe", "--prometheus", prometheus_server.url, "--selector", 'namespace="nowhere"'
    )
    assert code == 2 and err.startswith("inference-capacity: error: NoSeries:")
    code, _, err = _cli("observe", "--prometheus", "ftp://x", "--selector", "a")
    assert code == 2 and "http(s)://" in err


def test_observe_token_from_an_env_var(
    bearer_proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("observe", "--prometheus", bearer_proxy.url, "--selector", SELECTOR, "--window", "7d")
    code, _, err = _cli(*args)
    assert code == 2 and "AuthRefused" in err and "401" in err
    monkeypatch.setenv("PROM_TOKEN", bearer_proxy.token or "")
    code, out, err = _cli(*args, "--prometheus-token-env", "PROM_TOKEN", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["ok"]


# ---- plan FILE --observe ----------------------------------------------------------------------


def _manifest(tmp_path: Path, url: str, **fp: Any) -> Path:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    for d in docs:
        if d["kind"] == "InferenceCapacity":
            d["spec"]["workload"]["fromPrometheus"] = {
                "url": url,
                "window": "7d",
                "selector": SELECTOR,
                "mode": "max",
                **fp,
            }
            d["spec"]["rollout"]["maxReplicas"] = 64
    f = tmp_path / "icap.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    return f


def test_without_observe_stderr_says_so(
    tmp_path: Path, prometheus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFERENCE_CAPACITY_OBSERVE", raising=False)
    f = _manifest(tmp_path, prometheus_url)
    code, out, err = _cli("plan", str(f), "-o", "json")
    assert code == 0, err
    assert "observed traffic not used" in err and "--observe" in err
    assert json.loads(out)["observed"] == {"used": False, "reason": "NotObserved"}
    # the spec's peak (300) sized it
    rec = json.loads(out)["recommendation"]
    assert rec["minReplicasForPeak"] == -(-300 // rec["perReplicaConcurrency"])


def test_observe_sizes_from_the_observation(
    tmp_path: Path, prometheus_server: PromServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = _manifest(tmp_path, prometheus_server.url)
    allow = ("--prometheus-allowed-url-prefix", "http://127.0.0.1:")
    code, out, err = _cli("plan", str(f), "-o", "json", "--observe", *allow)
    assert code == 0, err
    got = json.loads(out)
    obs = got["observed"]
    assert obs["used"] and obs["reason"] == "Observed"
    peak = prometheus_server.trace.peak_concurrency(
        prometheus_server.trace.select(
            "llama-8b", [f"llama-8b-6d5f8-{s}" for s in ("a1", "b2", "c3")]
        )
    )
    assert obs["peakConcurrency"] == peak
    rec = got["recommendation"]
    assert rec["minReplicasForPeak"] == -(-int(peak) // rec["perReplicaConcurrency"])
    # the env var does the same for CI
    monkeypatch.setenv("INFERENCE_CAPACITY_OBSERVE", "1")
    code, out2, err = _cli("plan", str(f), "-o", "json", *allow)
    assert code == 0, err
    assert json.loads(out2)["recommendation"] == rec


def test_a_refused_prefix_sends_nothing(
    tmp_path: Path, prometheus_server: PromServer, reply_count: Any
) -> None:
    url, hits = reply_count
    f = _manifest(tmp_path, url)
    # the operator's environment variable (set for the tests' operators) does not allow it here
    for allow in ((), ("--prometheus-allowed-url-prefix", "http://127.0.0.1:1/")):
        code, out, err = _cli("plan", str(f), "-o", "patch", "--observe", *allow)
        assert code == 2 and out == "", err
        assert "not in plan --observe's allowed Prometheus URL prefixes" in err
        assert "nothing was sent" in err and err.count("\n") == 1
    assert hits == []


def test_a_token_secret_needs_an_explicit_token(tmp_path: Path, prometheus_url: str) -> None:
    f = _manifest(
        tmp_path, prometheus_url, bearerTokenSecretRef={"name": "prom-token", "key": "token"}
    )
    code, _, err = _cli(
        "plan", str(f), "--observe", "--prometheus-allowed-url-prefix", "http://127.0.0.1:"
    )
    assert code == 2
    assert "the CLI reads no Secret" in err and "--prometheus-token-file" in err


def test_a_token_file(tmp_path: Path, bearer_proxy: Proxy) -> None:
    f = _manifest(
        tmp_path, bearer_proxy.url, bearerTokenSecretRef={"name": "prom-token", "key": "token"}
    )
    tok = tmp_path / "token"
    tok.write_text((bearer_proxy.token or "") + "\n")
    code, out, err = _cli(
        "plan",
        str(f),
        "-o",
        "json",
        "--observe",
        "--prometheus-allowed-url-prefix",
        "http://127.0.0.1:",
        "--prometheus-token-file",
        str(tok),
    )
    assert code == 0, err
    assert json.loads(out)["observed"]["reason"] == "Observed"


def test_an_unreachable_prometheus_sizes_from_the_spec(
    tmp_path: Path, closed_port_url: str
) -> None:
    """As the operator: Observed=False, the spec's workload, said on stderr."""
    f = _manifest(tmp_path, closed_port_url)
    code, out, err = _cli(
        "plan",
        str(f),
        "-o",
        "json",
        "--observe",
        "--prometheus-allowed-url-prefix",
        "http://127.0.0.1:",
    )
    assert code == 0, err
    assert "Observed=False (PrometheusUnreachable)" in err and "sizing from the spec" in err
    rec = json.loads(out)["recommendation"]
    assert rec["minReplicasForPeak"] == -(-300 // rec["perReplicaConcurrency"])


@pytest.fixture
def reply_count() -> Any:
    import http.server
    import threading

    hits: list[str] = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            self.send_response(500)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hits
    server.shutdown()
    server.server_close()


def test_the_peak_is_in_the_burst(observed: list[dict[str, Any]], vllm_trace: Any) -> None:
    """When the peak was: custom_query_range of the fleet's running + waiting (at most 10,000
    points: a 61 s step over 7d) finds the trace's ten-minute burst."""
    import datetime as dt

    at = dt.datetime.fromisoformat(observed[0]["peakAt"].replace("Z", "+00:00")).timestamp()
    start, end = vllm_trace.burst
    assert start - 61 <= at <= end + 61
