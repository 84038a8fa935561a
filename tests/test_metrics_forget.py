"""A deleted InferenceCapacity leaves no series behind: every per-resource metric child is
dropped by ``metrics.forget`` (at 1,000 resources created and deleted, children that stayed were
memory that grew with every resource the operator had ever seen)."""

from __future__ import annotations

from prometheus_client import REGISTRY, generate_latest

from inference_capacity.controller import metrics


def _series_naming(name: str) -> list[str]:
    text = generate_latest(REGISTRY).decode()
    return [
        line
        for line in text.splitlines()
        if line.startswith("inference_capacity_") and f'name="{name}"' in line
    ]


def _touch_every_metric(ns: str, name: str) -> None:
    metrics.RECONCILES.labels(ns, name).inc()
    metrics.PATCHES_APPLIED.labels(ns, name).inc()
    metrics.PATCHES_REFUSED.labels(ns, name, "DoesNotFit").inc()
    for gauge in (
        metrics.MAX_CONCURRENCY,
        metrics.DESIRED_REPLICAS,
        metrics.KV_TOKENS,
        metrics.PREDICTED_BLOCKS,
        metrics.OBSERVED_BLOCKS,
    ):
        gauge.labels(ns, name).set(1)
    metrics.KV_TOKENS_BY_SOURCE.labels(ns, name, "observed").set(1)
    metrics.PREDICTION_ERROR.labels(ns, name, "kv").set(1)
    metrics.LEDGER_BYTES.labels(ns, name, "0", "weights").set(1)


def test_forget_drops_every_series_of_the_resource_and_keeps_the_others() -> None:
    _touch_every_metric("fg", "gone-icap")
    _touch_every_metric("fg", "kept-icap")
    # every per-resource metric of the module has a series for the resource (this list of
    # metrics is the one that forget must cover)
    families = {line.split("{", 1)[0] for line in _series_naming("gone-icap")}
    per_resource = {
        m._name  # noqa: SLF001 - the metric's family name
        for m in vars(metrics).values()
        if hasattr(m, "_labelnames") and "name" in m._labelnames  # noqa: SLF001
    }
    assert {f.removesuffix("_total").removesuffix("_created") for f in families} == per_resource

    metrics.forget("fg", "gone-icap")

    assert _series_naming("gone-icap") == []
    assert {line.split("{", 1)[0] for line in _series_naming("kept-icap")} == families
    metrics.forget("fg", "kept-icap")
    metrics.forget("fg", "never-seen")  # nothing to drop: no error
