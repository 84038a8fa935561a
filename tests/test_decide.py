"""Safety decisions: rollout in progress, material changes with hysteresis, conditions."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from inference_capacity.decide import material_changes, rollout_in_progress, set_condition


def deployment(
    replicas: int | None = 3,
    generation: int | None = 5,
    observed: int | None = 5,
    updated: int | None = 3,
    total: int | None = 3,
    available: int | None = 3,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    for key, value in (
        ("observedGeneration", observed),
        ("updatedReplicas", updated),
        ("replicas", total),
        ("availableReplicas", available),
        ("readyReplicas", available),
    ):
        if value is not None:
            status[key] = value
    dep: dict[str, Any] = {
        "metadata": {"name": "llama", "namespace": "serving"},
        "spec": {"template": {"spec": {"containers": [{"name": "vllm"}]}}},
        "status": status,
    }
    if generation is not None:
        dep["metadata"]["generation"] = generation
    if replicas is not None:
        dep["spec"]["replicas"] = replicas
    return dep


# ------------------------------------------------------------------- rollout_in_progress


def test_settled_deployment() -> None:
    assert rollout_in_progress(deployment()) is None


def test_unobserved_generation() -> None:
    why = rollout_in_progress(deployment(generation=6, observed=5))
    assert why is not None and "generation 6" in why
    # a brand-new Deployment without status: nothing is serving, patching is safe (its pods
    # then start once, with the right flags)
    assert (
        rollout_in_progress(
            deployment(generation=1, observed=None, updated=None, total=None, available=None)
        )
        is None
    )


def test_nothing_available_is_safe_to_patch() -> None:
    assert rollout_in_progress(deployment(updated=1, total=4, available=0)) is None
    assert rollout_in_progress(deployment(updated=1, total=4, available=1)) is not None


def test_not_all_replicas_updated() -> None:
    why = rollout_in_progress(deployment(updated=1, total=4))
    assert why is not None and "1/3 replicas updated" in why


def test_old_pods_still_running() -> None:
    why = rollout_in_progress(deployment(updated=3, total=4))
    assert why is not None and "4 replicas running for 3 wanted" in why


def test_default_replicas_is_one() -> None:
    dep = deployment(replicas=None, updated=0, total=1)
    assert rollout_in_progress(dep) is not None  # spec.replicas defaults to 1
    assert rollout_in_progress(deployment(replicas=None, updated=1, total=1)) is None


def test_scaled_to_zero() -> None:
    assert rollout_in_progress(deployment(replicas=0, updated=0, total=0, available=0)) is None
    # pods of a Deployment scaled to zero still terminating
    assert rollout_in_progress(deployment(replicas=0, updated=0, total=2, available=2)) is not None


def test_updated_but_not_yet_available_is_in_progress() -> None:
    # kubectl/pkg/polymorphichelpers/rollout_status.go: "Waiting for deployment rollout to
    # finish: 2 of 3 updated replicas are available"
    assert rollout_in_progress(deployment(updated=3, total=3, available=2)) is not None


# ----------------------------------------------------------------------- material_changes


def test_absent_flag_is_material() -> None:
    out = material_changes({"model": "m"}, {"max-num-seqs": "151"}, 5.0)
    assert out == {"max-num-seqs": (None, "151")}


def test_numeric_change_within_hysteresis_is_not_material() -> None:
    cur = {"max-num-seqs": "256", "gpu-memory-utilization": "0.9"}
    # 256 → 250: |250 − 256| / 256 = 2.34 % ≤ 5 %; 0.9 → 0.92: 2.2 % ≤ 5 %
    assert (
        material_changes(cur, {"max-num-seqs": "250", "gpu-memory-utilization": "0.92"}, 5.0) == {}
    )
    # 256 → 151: 41 % > 5 %
    assert material_changes(cur, {"max-num-seqs": "151"}, 5.0) == {"max-num-seqs": ("256", "151")}


def test_hysteresis_boundary_is_inclusive() -> None:
    # exactly 10 % (100 → 110 and 100 → 90) is not material; 100 → 111 is
    assert material_changes({"x": "100"}, {"x": "110"}, 10.0) == {}
    assert material_changes({"x": "100"}, {"x": "90"}, 10.0) == {}
    assert material_changes({"x": "100"}, {"x": "111"}, 10.0) == {"x": ("100", "111")}
    assert material_changes({"x": "100"}, {"x": "89"}, 10.0) == {"x": ("100", "89")}


def test_zero_hysteresis_any_move_is_material_but_same_value_is_not() -> None:
    assert material_changes({"x": "256"}, {"x": "257"}, 0.0) == {"x": ("256", "257")}
    # same number spelled differently is not a change
    assert (
        material_changes({"gpu-memory-utilization": "0.90"}, {"gpu-memory-utilization": "0.9"}, 0.0)
        == {}
    )
    assert material_changes({"x": "8192"}, {"x": "8192.0"}, 0.0) == {}


def test_from_zero_is_always_material() -> None:
    assert material_changes({"x": "0"}, {"x": "1"}, 1000.0) == {"x": ("0", "1")}


def test_text_flags() -> None:
    assert material_changes({"kv-cache-dtype": "auto"}, {"kv-cache-dtype": "fp8"}, 50.0) == {
        "kv-cache-dtype": ("auto", "fp8")
    }
    assert material_changes({"kv-cache-dtype": "fp8"}, {"kv-cache-dtype": "fp8"}, 0.0) == {}
    # one side numeric, the other text: compared as text
    assert material_changes({"x": "$(SEQS)"}, {"x": "151"}, 50.0) == {"x": ("$(SEQS)", "151")}


def test_flags_only_in_current_are_ignored() -> None:
    assert (
        material_changes({"port": "8000", "max-num-seqs": "256"}, {"max-num-seqs": "256"}, 0.0)
        == {}
    )


num_text = st.integers(1, 100_000).map(str) | st.floats(0.01, 1.0).map(lambda f: f"{f:.4f}")


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), num_text),
    st.dictionaries(st.sampled_from(["a", "b", "c", "e"]), num_text),
    st.floats(0.0, 50.0),
    st.floats(0.0, 50.0),
)
def test_material_changes_properties(
    cur: dict[str, str], want: dict[str, str], h: float, more: float
) -> None:
    out = material_changes(cur, want, h)
    assert set(out) <= set(want)
    for flag, (old, new) in out.items():
        assert new == want[flag] and old == cur.get(flag)
        if old is not None:
            a, b = float(old), float(new)
            assert abs(b - a) / abs(a) * 100 > h
    for flag in set(want) - set(cur):
        assert flag in out  # absent is always material
    # more hysteresis never makes more flags material
    assert set(material_changes(cur, want, h + more)) <= set(out)
    # applying the material changes leaves nothing material
    assert material_changes({**cur, **{k: v for k, (_, v) in out.items()}}, want, h) == {}


# -------------------------------------------------------------------------- set_condition

T0, T1 = "2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z"


def test_new_condition_is_appended() -> None:
    out = set_condition([], "Ready", "True", "Fits", "ok", 3, T0)
    assert out == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Fits",
            "message": "ok",
            "lastTransitionTime": T0,
            "observedGeneration": 3,
        }
    ]


def test_same_status_keeps_transition_time() -> None:
    first = set_condition([], "Ready", "True", "Fits", "ok", 3, T0)
    again = set_condition(first, "Ready", "True", "Fits", "new message", 4, T1)
    assert again[0]["lastTransitionTime"] == T0
    assert again[0]["message"] == "new message"
    assert again[0]["observedGeneration"] == 4


def test_status_change_moves_transition_time() -> None:
    first = set_condition([], "Ready", "True", "Fits", "ok", 3, T0)
    flipped = set_condition(first, "Ready", "False", "OverCommitted", "no", 3, T1)
    assert flipped[0]["lastTransitionTime"] == T1
    assert (flipped[0]["status"], flipped[0]["reason"]) == ("False", "OverCommitted")


def test_missing_transition_time_is_filled() -> None:
    out = set_condition([{"type": "Ready", "status": "True"}], "Ready", "True", "R", "m", 1, T1)
    assert out[0]["lastTransitionTime"] == T1


def test_other_conditions_untouched_order_kept_input_not_mutated() -> None:
    conds: list[dict[str, Any]] = [
        {
            "type": "Applied",
            "status": "True",
            "reason": "Applied",
            "message": "x",
            "lastTransitionTime": T0,
        },
        {
            "type": "Ready",
            "status": "True",
            "reason": "Fits",
            "message": "ok",
            "lastTransitionTime": T0,
            "observedGeneration": 1,
        },
        {
            "type": "Degraded",
            "status": "False",
            "reason": "OK",
            "message": "",
            "lastTransitionTime": T0,
        },
    ]
    before = copy.deepcopy(conds)
    out = set_condition(conds, "Ready", "False", "NoSafeRollout", "m", 2, T1)
    assert conds == before
    assert [c["type"] for c in out] == ["Applied", "Ready", "Degraded"]
    assert out[0] == conds[0] and out[2] == conds[2]
    assert out[0] is not conds[0]
    assert len([c for c in out if c["type"] == "Ready"]) == 1


def test_message_is_truncated_to_the_api_limit() -> None:
    out = set_condition([], "Ready", "False", "R", "x" * 40_000, None, T0)
    assert len(out[0]["message"]) == 32_000


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["True", "False", "Unknown"]), st.sampled_from(["A", "B"])),
        min_size=1,
        max_size=8,
    )
)
def test_transition_time_tracks_status_changes(steps: list[tuple[str, str]]) -> None:
    conds: list[dict[str, Any]] = []
    last_status: str | None = None
    last_change = ""
    for i, (status, reason) in enumerate(steps):
        now = f"t{i}"
        conds = set_condition(conds, "Ready", status, reason, "m", i, now)
        if status != last_status:
            last_change = now
        last_status = status
        assert len(conds) == 1
        assert conds[0]["lastTransitionTime"] == last_change
        assert conds[0]["reason"] == reason
