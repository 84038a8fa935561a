"""Predicted vs observed KV blocks: how far the ledger is from what vLLM allocated.

For each engine that reports ``num_gpu_blocks`` in ``vllm:cache_config_info``:
``error = (predicted − observed) / observed × 100`` (positive: the ledger promised more blocks
than vLLM found). ``error_percent`` is the mean over pods; ``drift`` is any pod beyond the
threshold, so one odd node is not averaged away. Drift is reported (a ``Calibrated=False``
condition, an Event, a warning), never fed back into the formulas: a silent correction would
hide the bug the drift points at.

The prediction must be for the flags each pod actually runs with (``gpu_memory_utilization``,
``block_size`` are in ``PodPool``): pass one number when every pod runs the same flags, or a
mapping per pod when they differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..vocab import CalibrationReason, ConditionStatus
from .observation import Condition, PodPool


@dataclass(frozen=True, slots=True)
class Calibration:
    ok: bool
    reason: CalibrationReason
    message: str
    error_percent: float | None
    per_pod: dict[str, float] = field(default_factory=dict)
    drift: bool = False

    def condition(self) -> Condition:
        """The ``Calibrated`` condition (Unknown without pool data)."""
        status: ConditionStatus
        if self.reason == "NoPoolData":
            status = "Unknown"
        else:
            status = "True" if self.ok else "False"
        return Condition(type="Calibrated", status=status, reason=self.reason, message=self.message)


def calibrate(
    predicted_blocks: int | Mapping[str, int],
    pods: Mapping[str, PodPool],
    threshold_percent: float = 5.0,
) -> Calibration:
    """Compare the ledger's predicted KV blocks with each pod's ``num_gpu_blocks``."""
    if threshold_percent < 0:
        raise ValueError("threshold_percent must not be negative")
    per_pod: dict[str, float] = {}
    predicted_of: dict[str, int] = {}
    for name, pool in sorted(pods.items()):
        if pool.num_gpu_blocks is None or pool.num_gpu_blocks <= 0:
            continue
        if isinstance(predicted_blocks, Mapping):
            if name not in predicted_blocks:
                continue
            predicted = predicted_blocks[name]
        else:
            predicted = predicted_blocks
        if predicted < 0:
            raise ValueError(f"predicted blocks must not be negative, got {predicted}")
        predicted_of[name] = predicted
        per_pod[name] = (predicted - pool.num_gpu_blocks) / pool.num_gpu_blocks * 100.0
    if not per_pod:
        return Calibration(
            ok=False,
            reason="NoPoolData",
            message="no pod reports num_gpu_blocks in vllm:cache_config_info",
            error_percent=None,
        )
    mean = sum(per_pod.values()) / len(per_pod)
    worst = max(per_pod, key=lambda n: abs(per_pod[n]))
    drift = abs(per_pod[worst]) > threshold_percent
    observed = pods[worst].num_gpu_blocks
    detail = (
        f"predicted {predicted_of[worst]:,} KV blocks, {worst} has {observed:,} "
        f"({per_pod[worst]:+.2f}%)"
    )
    if drift:
        message = (
            f"prediction drift: {detail}, beyond ±{threshold_percent:g}%; mean error "
            f"{mean:+.2f}% over {len(per_pod)} pods. The formulas are not adjusted: check the "
            "vLLM version, flags and GPU the ledger assumed"
        )
    else:
        message = (
            f"mean error {mean:+.2f}% over {len(per_pod)} pods, within ±{threshold_percent:g}% "
            f"(worst: {detail})"
        )
    return Calibration(
        ok=not drift,
        reason="PredictionDrift" if drift else "Calibrated",
        message=message,
        error_percent=mean,
        per_pod=per_pod,
        drift=drift,
    )
