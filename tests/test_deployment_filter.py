"""Kopf's filter on Deployment events (controller/handlers._deployment_needs_a_look): an event
of a Deployment no InferenceCapacity targets, or a status-only update of a targeted one, is
dropped before a handler is queued; a spec change, a first sight and a deletion pass. Before
any InferenceCapacity of it is handled, only a deletion passes (its own handler reads the
Deployment), and a reconcile records the generation it read."""

from __future__ import annotations

from typing import Any

import pytest

from inference_capacity.controller import handlers, state
from inference_capacity.controller.targets import TargetIndex


def _event(kind: str, generation: int | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "dep", "namespace": "ns"}
    if generation is not None:
        meta["generation"] = generation
    return {"type": kind, "object": {"metadata": meta}}


@pytest.fixture(autouse=True)
def _clean() -> Any:
    state.forget_deployment("ns", "dep")
    state.handled.set(("ns", "icap"), True)  # its InferenceCapacity's creation was handled
    yield
    state.forget_deployment("ns", "dep")
    state.forget_resource("ns", "icap", "uid")


TARGETED = {("ns", "dep"): [("2026-01-01T00:00:00Z", "icap")]}


def index_of(targets: dict[tuple[str, str], list[tuple[str, str]]]) -> TargetIndex:
    """The operator's targets index holding ``targets``, fed as Kopf's watch stream feeds it."""
    idx = TargetIndex()
    for (ns, dep), claims in targets.items():
        for created, name in claims:
            meta = {
                "name": name,
                "namespace": ns,
                "uid": f"uid-{name}",
                "creationTimestamp": created,
            }
            idx.event(
                {
                    "type": "ADDED",
                    "object": {"metadata": meta, "spec": {"targetRef": {"name": dep}}},
                }
            )
    return idx


def look(event: dict[str, Any], targets: Any = TARGETED) -> bool:
    saved = handlers._index
    handlers._index = index_of(targets)
    try:
        return handlers._deployment_needs_a_look(event=event, namespace="ns", name="dep")
    finally:
        handlers._index = saved


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


def test_before_its_resource_is_handled_only_a_deletion_passes() -> None:
    state.forget_resource("ns", "icap", "uid")
    assert state.handled.get(("ns", "icap")) is None
    assert not look(_event("ADDED", 1))
    assert not look(_event("MODIFIED", 2))
    assert look(_event("DELETED", 2))
    # a second claimant handled: its events pass again
    two = {("ns", "dep"): [("2026-01-01T00:00:00Z", "icap"), ("2026-02-01T00:00:00Z", "b")]}
    state.handled.set(("ns", "b"), True)
    try:
        assert look(_event("MODIFIED", 2), targets=two)
    finally:
        state.forget_resource("ns", "b", "uid-b")


def test_a_reconcile_records_the_generation_it_read() -> None:
    """state.note_generation: what reconcile calls with the Deployment it evaluated."""
    state.note_generation("ns", "dep", 4)
    assert not look(_event("MODIFIED", 4))  # its status updates
    assert not look(_event("MODIFIED", 3))  # older
    assert look(_event("MODIFIED", 5))  # an edit after the read
    state.note_generation("ns", "dep", 2)  # an older read never moves it back
    assert not look(_event("MODIFIED", 4))
    state.note_generation("ns", "dep", None)  # no generation: nothing recorded
    assert not look(_event("MODIFIED", 4))
