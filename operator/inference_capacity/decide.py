"""Safety decisions before the operator writes a Deployment (pure).

- never while a rollout of the target is in progress;
- only on a material change: a numeric flag moves by more than the hysteresis, or a text flag
  changes (so the operator does not cause a rollout storm by chasing small differences);
- conditions keep their lastTransitionTime while their status does not change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .engines.vllm_args import flag_int


def rollout_in_progress(deployment: Mapping[str, Any]) -> str | None:
    """Why the Deployment is mid-rollout, or None when patching it now is safe.

    Safe means: the rollout has settled (the controller observed the latest generation, every
    replica is updated and available, no old pods left); or it has stalled
    (ProgressDeadlineExceeded: pods crash on the current flags, and waiting would wait
    forever); or nothing is serving at all (no available replica: no capacity to protect, and
    a new Deployment then starts once, with the right flags, instead of rolling twice).
    """
    meta = deployment.get("metadata", {})
    spec = deployment.get("spec", {})
    st = deployment.get("status", {}) or {}
    for cond in st.get("conditions", []) or []:
        if (
            cond.get("type") == "Progressing"
            and cond.get("status") == "False"
            and cond.get("reason") == "ProgressDeadlineExceeded"
        ):
            return None
    available = st.get("availableReplicas", 0) or 0
    if available == 0:
        return None
    gen = meta.get("generation")
    observed = st.get("observedGeneration")
    if gen is not None and (observed is None or observed < gen):
        return f"the Deployment controller has not observed generation {gen} yet"
    want = spec.get("replicas", 1)
    updated = st.get("updatedReplicas", 0) or 0
    total = st.get("replicas", 0) or 0
    if want and updated < want:
        return f"rollout in progress: {updated}/{want} replicas updated"
    if total > want:
        return f"rollout in progress: {total} replicas running for {want} wanted (old pods)"
    if want and available < want:
        return f"rollout in progress: {available}/{want} updated replicas available"
    return None


def _number(text: str | None, flag: str = "") -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:  # vLLM's human-readable integers: --max-model-len 32k is 32000
        return float(flag_int(flag, text)) if flag else None
    except ValueError:
        return None


#: flags whose lower recommended value is a safety fix, applied whatever the hysteresis: a
#: running utilization above the recommendation over-commits the device
ALWAYS_IF_LOWER = ("gpu-memory-utilization", "kv-cache-memory-bytes")


def material_changes(
    current: Mapping[str, str], desired: Mapping[str, str], hysteresis_percent: float
) -> dict[str, tuple[str | None, str]]:
    """The flags whose change is material: absent, a text change, or a numeric move beyond the
    hysteresis (relative to the current value). Lowering a flag of :data:`ALWAYS_IF_LOWER` is
    always material."""
    out: dict[str, tuple[str | None, str]] = {}
    for flag, want in desired.items():
        have = current.get(flag)
        if have is None:
            out[flag] = (None, want)
            continue
        a, b = _number(have, flag), _number(want, flag)
        if a is not None and b is not None:
            if a == b:
                continue
            if flag in ALWAYS_IF_LOWER and b < a:
                out[flag] = (have, want)
                continue
            if a != 0 and abs(b - a) / abs(a) * 100.0 <= hysteresis_percent:
                continue
            out[flag] = (have, want)
        elif have != want:
            out[flag] = (have, want)
    return out


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """Conditions with ``type_`` set; lastTransitionTime moves only when the status changes."""
    out: list[dict[str, Any]] = []
    found = False
    for c in conditions:
        if c.get("type") != type_:
            out.append(dict(c))
            continue
        found = True
        ltt = c.get("lastTransitionTime") if c.get("status") == status else now
        out.append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message[:32000],
                "lastTransitionTime": ltt or now,
                "observedGeneration": generation,
            }
        )
    if not found:
        out.append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message[:32000],
                "lastTransitionTime": now,
                "observedGeneration": generation,
            }
        )
    return out


#: the last pod-template change the operator made, on the Deployment (survives restarts)
ANNOTATION_TEMPLATE_CHANGED = "capacity.inference.dev/template-changed-at"


def safety_lowering(changes: Mapping[str, tuple[str | None, str]]) -> bool:
    """Every change lowers a flag of :data:`ALWAYS_IF_LOWER` (a fix for an over-committed
    device, never held back by a stabilization window)."""
    if not changes:
        return False
    for flag, (have, want) in changes.items():
        a, b = _number(have), _number(want)
        if flag not in ALWAYS_IF_LOWER or a is None or b is None or not b < a:
            return False
    return True


def template_hold(
    changes: Mapping[str, tuple[str | None, str]],
    last_change: float | None,
    now: float,
    window_s: float,
) -> float | None:
    """Seconds to wait before this pod-template change may be written, or None to write now:
    at most one change per ``window_s`` since ``last_change`` (unix seconds), except changes
    that only lower a safety flag."""
    if not changes or last_change is None or window_s <= 0 or safety_lowering(changes):
        return None
    left = last_change + window_s - now
    return left if left > 0 else None


def stabilized_replicas(
    history: Sequence[tuple[float, int]],
    desired: int,
    current: int | None,
    now: float,
    window_s: float,
) -> int:
    """The replicas to set, like the HPA's scale-down stabilization: up at once to
    ``desired``; down only to the highest count recommended within ``window_s`` (``history``:
    (unix seconds, recommended replicas), this recommendation included), so a recommendation
    that flaps down and up moves nothing."""
    if current is None or desired >= current or window_s <= 0:
        return desired
    recent = [r for t, r in history if now - t < window_s]
    return min(current, max([desired, *recent]))
