"""Events are rate-limited per object (controller/state.py::event_allowed), as client-go's
recorder limits them (a burst of 25, then one per 300 s: events_cache.go, defaultSpamBurst and
defaultSpamQPS)."""

from __future__ import annotations

from inference_capacity.controller import state
from inference_capacity.controller.reconcile import _Ctx
from inference_capacity.controller.throttle import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_try_take_takes_a_burst_then_one_per_period_and_never_goes_below_zero() -> None:
    clock = Clock()
    bucket = TokenBucket(1.0 / 300.0, 25, clock=clock)
    assert sum(bucket.try_take() for _ in range(40)) == 25
    clock.now += 299.0
    assert not bucket.try_take()  # a refusal takes nothing (no debt)
    clock.now += 1.0
    assert bucket.try_take() and not bucket.try_take()
    clock.now += 300.0 * 100  # a long quiet time refills to the burst, not beyond
    assert sum(bucket.try_take() for _ in range(40)) == 25


def test_a_chatty_object_loses_its_events_past_the_burst_and_others_keep_theirs() -> None:
    posted: list[tuple[str, str, str]] = []
    body = {"metadata": {"name": "chatty", "namespace": "ev", "uid": "uid-chatty"}}
    ctx = _Ctx(body, lambda *e: posted.append(e))
    for i in range(state.EVENT_BURST + 10):
        ctx.event("Warning", "PredictionDrift", f"drift {i}")  # each message new (no dedupe)
    assert len(posted) == state.EVENT_BURST
    quiet = _Ctx(
        {"metadata": {"name": "quiet", "namespace": "ev", "uid": "uid-quiet"}},
        lambda *e: posted.append(e),
    )
    quiet.event("Normal", "Applied", "flags applied")
    assert posted[-1] == ("Normal", "Applied", "flags applied")
    # a deleted resource's budget is forgotten with it
    state.forget_resource("ev", "chatty", "uid-chatty")
    assert state.event_budgets.get("uid-chatty") is None
    state.forget_resource("ev", "quiet", "uid-quiet")
