"""Kopf's filter on Deployment events (controller/handlers._deployment_needs_a_look): an event
of a Deployment no InferenceCapacity targets, or a status-only update of a targeted one, is
dropped before a handler is queued; a spec change, a first sight and a deletion pass."""

from __future__ import annotations

from typing import Any

import pytest

from inference_capacity.controller import handlers, state


def _event(kind: str, generation: int | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "dep", "namespace": "ns"}
    if generation is not None:
        meta["generation"] = generation
    return {"type": kind, "object": {"metadata": meta}}


@pytest.fixture(autouse=True)
def _clean() -> Any:
    state.forget_deployment("ns", "dep")
    yield
    state.forget_deployment("ns", "dep")


TARGETED = {("ns", "dep"): [("2026-01-01T00:00:00Z", "icap")]}


def look(event: dict[str, Any], targets: Any = TARGETED) -> bool:
    return handlers._deployment_needs_a_look(
        event=event, namespace="ns", name="dep", icap_targets=targets
    )


def test_an_untargeted_deployment_never_reaches_a_handler() -> None:
    assert not look(_event("ADDED", 1), targets={})
    assert not look(_event("MODIFIED", 7), targets={("ns", "other"): [("t", "icap")]})
    assert not look(_event("DELETED", 7), targets={})


def test_a_status_only_update_is_dropped_and_a_spec_change_passes() -> None:
    assert look(_event("ADDED", 3))  # nothing handled yet
    assert state.deployment_changed("ns", "dep", 3)  # the handler records it
    assert not look(_event("MODIFIED", 3))  # the rollout's status updates: same generation
    assert not look(_event("MODIFIED", 2))  # a late event of an older generation
    assert look(_event("MODIFIED", 4))  # someone changed the spec
    assert look(_event("DELETED", 3))  # a deletion always passes (its memory is dropped)
    assert look(_event("MODIFIED", None))  # no generation: cannot tell, look


def test_the_look_records_nothing() -> None:
    assert look(_event("ADDED", 5)) and look(_event("ADDED", 5))
    assert state.deployment_changed("ns", "dep", 5)
