"""The pure half of an observation (observe/queries.py): the steps, fed answers by hand, and
the transport-neutral names of failures (no server needed; issue 25)."""

from __future__ import annotations

import socket
import ssl

import pytest

from inference_capacity.cli.observe import deployment_of
from inference_capacity.observe import PromSource
from inference_capacity.observe.queries import (
    first_batch,
    matrix_points,
    selection,
    short,
    statistics_batch,
    steps,
)

SRC = PromSource("http://p:9090", window="1h", selector='pod=~"a-.*"')


def _wrapped(inner: BaseException) -> BaseException:
    """As requests / aiohttp wrap an OSError: in args, or as the cause."""
    outer = RuntimeError(inner)
    try:
        try:
            raise inner
        except BaseException as e:
            raise ValueError("wrapper") from e
    except ValueError as w:
        return outer if isinstance(inner, socket.gaierror) else w


@pytest.mark.parametrize(
    "inner,word",
    [
        (ConnectionRefusedError(111, "refused"), "connection refused"),
        (socket.gaierror(-2, "Name or service not known"), "host not found"),
        (ssl.SSLCertVerificationError(1, "self-signed"), "certificate not trusted"),
        (ssl.SSLError(1, "wrong version"), "TLS error"),
        (ConnectionResetError(104, "reset"), "connection closed"),
        (OSError(113, "no route"), "connection failed"),
    ],
)
def test_failures_are_named_alike_whatever_wraps_them(inner: BaseException, word: str) -> None:
    assert short(inner) == word
    assert short(_wrapped(inner)) == word


def test_no_series_ends_after_the_first_batch() -> None:
    gen = steps(SRC, 1000.0)
    batch = next(gen)
    assert batch == first_batch(selection(SRC))
    with pytest.raises(StopIteration) as done:
        gen.send({"pods": [], "running": [], "samples": []})
    obs = done.value.value
    assert obs.reason == "NoSeries" and 'pod=~"a-.*"' in obs.message


def test_enough_samples_ask_the_statistics() -> None:
    gen = steps(SRC, 1000.0, min_samples=5)
    next(gen)
    batch = gen.send({"pods": [], "running": [({}, 2.0)], "samples": [({}, 40.0)]})
    assert set(batch) == set(statistics_batch(selection(SRC)))
    rows = [({"le": le}, n) for le, n in (("100", 10.0), ("200", 30.0), ("+Inf", 40.0))]
    answers = {k: [({}, 150.0)] for k in batch}
    answers["prompt.rows"] = answers["output.rows"] = rows
    answers["preemptions"], answers["span"] = [({}, 6.0)], [({}, 1800.0)]
    with pytest.raises(StopIteration) as done:
        gen.send(answers)
    obs = done.value.value
    assert obs.ok and obs.samples == 40
    assert obs.prompt_tokens is not None and obs.prompt_tokens.p50_bounds == (100.0, 200.0)
    assert obs.preemptions_per_hour == 6.0 / 0.5


def test_matrix_points() -> None:
    assert matrix_points([]) == []
    assert matrix_points([{"metric": {}, "values": [[10, "1"], [20, "3"]]}]) == [
        (10.0, 1.0),
        (20.0, 3.0),
    ]
    with pytest.raises(TypeError):
        matrix_points({"values": []})


@pytest.mark.parametrize(
    "pod,dep",
    [
        ("llama-8b-6d5f8-a1", "llama-8b"),
        ("vllm-7c4b9d-xk2p9", "vllm"),
        ("standalone", "standalone"),
        ("a-b", "a-b"),
    ],
)
def test_deployment_of(pod: str, dep: str) -> None:
    assert deployment_of(pod) == dep
