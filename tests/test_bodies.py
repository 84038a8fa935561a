"""Kopf's watch events without managedFields (controller/bodies.py, issue 22: the operator's
memory at 1,000 resources). The wrapper is checked on Kopf's real watcher module: if a Kopf
upgrade renames what its watcher reads events from, these tests fail rather than the memory
quietly growing back."""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from inference_capacity.controller import bodies

EVENT: dict[str, Any] = {
    "type": "MODIFIED",
    "object": {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "d",
            "namespace": "ns",
            "annotations": {"a": "1"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"replicas": 2},
    },
}


def test_trim_drops_only_managed_fields() -> None:
    ev = copy.deepcopy(EVENT)
    bodies.trim(ev)
    want = copy.deepcopy(EVENT)
    del want["object"]["metadata"]["managedFields"]
    assert ev == want
    odds: list[Any] = [
        None,
        "LISTED",
        {"type": "BOOKMARK"},
        {"object": []},
        {"object": {"metadata": 1}},
    ]
    for odd in odds:
        before = copy.deepcopy(odd)
        bodies.trim(odd)  # no error, nothing changed
        assert odd == before


def test_the_wrapper_trims_each_event_and_closes_the_stream() -> None:
    closed: list[bool] = []

    async def original(*, n: int) -> AsyncGenerator[Any, None]:
        try:
            for _ in range(n):
                yield copy.deepcopy(EVENT)
            yield "LISTED"
        finally:
            closed.append(True)

    async def take(k: int) -> list[Any]:
        out = []
        gen = bodies.trimmed(original)(n=3)
        async for ev in gen:
            out.append(ev)
            if len(out) == k:
                break
        await gen.aclose()
        return out

    got = asyncio.run(take(2))
    assert len(got) == 2
    assert all("managedFields" not in ev["object"]["metadata"] for ev in got)
    assert got[0]["object"]["spec"] == {"replicas": 2}
    assert closed == [True]  # closing the wrapper closed Kopf's stream
    assert asyncio.run(take(10))[-1] == "LISTED"


def test_install_wraps_the_function_kopfs_watcher_reads_once() -> None:
    from kopf._cogs.clients import watching
    from kopf._core.reactor import queueing

    # Kopf's watcher reads its events through the module attribute that install replaces
    assert "watching.infinite_watch(" in inspect.getsource(queueing.watcher)
    before = watching.infinite_watch
    try:
        assert bodies.install() is True
        wrapped = watching.infinite_watch
        assert getattr(wrapped, bodies.WRAPPED, False)
        assert bodies.install() is True
        assert watching.infinite_watch is wrapped  # not wrapped twice
    finally:
        watching.infinite_watch = before


def test_a_list_that_expires_is_listed_again_and_other_errors_end_the_stream() -> None:
    """A 410 from a page of Kopf's first list (its continue token expired) lists again, after
    a backoff that doubles per expiry in a row and resets once a list completes; any other
    error ends the stream as before."""
    from kopf._cogs.clients.errors import APIClientError, APIForbiddenError

    slept: list[float] = []

    def gone() -> APIClientError:
        return APIClientError("continue parameter is too old", status=410, headers={})

    def original_with(scripts: list[list[Any]]) -> Any:
        async def original(**_: Any) -> AsyncGenerator[Any, None]:
            for item in scripts.pop(0):  # one script per call: what that listing gives
                if isinstance(item, BaseException):
                    raise item
                yield copy.deepcopy(item)

        return original

    async def sleep(s: float) -> None:
        slept.append(s)

    async def collect(scripts: list[list[Any]]) -> list[Any]:
        return [ev async for ev in bodies.trimmed(original_with(scripts), sleep)(resource="r")]

    scripts: list[list[Any]] = [
        [EVENT, gone()],  # the first page, then the next one has expired
        [EVENT, gone()],  # again: the wait doubles
        [EVENT, "LISTED", EVENT, gone()],  # a list completed: the wait starts over
        [EVENT, "LISTED"],
    ]
    got = asyncio.run(collect(scripts))
    assert not scripts and slept == [1.0, 2.0, 1.0]
    assert got.count("LISTED") == 2 and len(got) == 7
    assert all("managedFields" not in ev["object"]["metadata"] for ev in got if ev != "LISTED")

    forbidden: list[list[Any]] = [[EVENT, APIForbiddenError("no", status=403, headers={})], [EVENT]]
    with pytest.raises(APIForbiddenError):
        asyncio.run(collect(forbidden))
    assert forbidden == [[EVENT]]  # not listed again
