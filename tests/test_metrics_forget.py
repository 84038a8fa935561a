"""The per-InferenceCapacity series: written from one row per resource at each scrape, and a
deleted InferenceCapacity leaves no series behind (at 1,000 resources created and deleted,
series that stayed were memory that grew with every resource the operator had ever seen)."""

from __future__ import annotations

import sys

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inference_capacity.controller import metrics


def _series_naming(name: str) -> list[str]:
    text = generate_latest(REGISTRY).decode()
    return [
        line
        for line in text.splitlines()
        if line.startswith("inference_capacity_") and f'name="{name}"' in line
    ]


def _touch_every_metric(ns: str, name: str) -> None:
    per = metrics.PER_RESOURCE
    per.count(ns, name, "reconciles")
    per.count(ns, name, "patches_applied")
    per.count(ns, name, "refused", "DoesNotFit")
    per.update(
        ns,
        name,
        max_concurrency=1.0,
        desired_replicas=1.0,
        kv_tokens=1.0,
        predicted_blocks=1.0,
        observed_blocks=1.0,
        ledger=((0, "weights", 1),),
    )
    per.set_in(ns, name, "kv_by_source", "observed", 1.0)
    per.set_in(ns, name, "prediction_error", "kv", 1.0)


def test_forget_drops_every_series_of_the_resource_and_keeps_the_others() -> None:
    _touch_every_metric("fg", "gone-icap")
    _touch_every_metric("fg", "kept-icap")
    # every per-resource family has a series for the resource
    families = {line.split("{", 1)[0] for line in _series_naming("gone-icap")}
    assert families == set(metrics.per_resource_labels())

    metrics.forget("fg", "gone-icap")

    assert _series_naming("gone-icap") == []
    assert {line.split("{", 1)[0] for line in _series_naming("kept-icap")} == families
    metrics.forget("fg", "kept-icap")
    metrics.forget("fg", "never-seen")  # nothing to drop: no error


def test_series_carry_their_values_and_labels() -> None:
    per = metrics.PER_RESOURCE
    per.update("vl", "a", kv_tokens=123456.0, ledger=((0, "weights", 10), (1, "kv_cache_pool", 7)))
    for _ in range(3):
        per.count("vl", "a", "reconciles")
    per.count("vl", "a", "refused", "DoesNotFit")
    per.count("vl", "a", "refused", "DoesNotFit")
    per.count("vl", "a", "refused", "Conflict")
    per.set_in("vl", "a", "prediction_error", "kv", -1.5)
    try:
        got: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for fam in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
            for s in fam.samples:
                if s.labels.get("namespace") == "vl":
                    got[(s.name, tuple(sorted(s.labels.items())))] = s.value
        base = (("name", "a"), ("namespace", "vl"))
        assert got[("inference_capacity_kv_cache_tokens", base)] == 123456.0
        assert got[("inference_capacity_reconciles_total", base)] == 3.0
        refused = "inference_capacity_patches_refused_total"
        assert got[(refused, tuple(sorted((*base, ("reason", "DoesNotFit")))))] == 2.0
        assert got[(refused, tuple(sorted((*base, ("reason", "Conflict")))))] == 1.0
        ledger = "inference_capacity_ledger_bytes"
        assert got[(ledger, tuple(sorted((*base, ("item", "weights"), ("rank", "0")))))] == 10
        assert got[(ledger, tuple(sorted((*base, ("item", "kv_cache_pool"), ("rank", "1")))))] == 7
        err = "inference_capacity_prediction_error_percent"
        assert got[(err, tuple(sorted((*base, ("term", "kv")))))] == -1.5
        # a resource with no plan yet has no gauge series, only what it counted
        assert ("inference_capacity_desired_replicas", base) not in got
    finally:
        metrics.forget("vl", "a")


def test_a_resource_costs_one_row_not_a_child_per_series() -> None:
    # the memory the design is for: 1,000 resources with a 17-item ledger each stay far below
    # the ~15 KB per resource that one prometheus_client child per series took (each row
    # with its own ledger tuples and integers, as plans give them)
    per = metrics.PerResource()
    names = [sys.intern(f"item{j}") for j in range(17)]
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(1000):
            ledger = tuple((0, names[j], 10**9 + i * 100 + j) for j in range(17))
            per.update("mem", f"icap-{i}", max_concurrency=1.0, kv_tokens=2.0, ledger=ledger)
            per.count("mem", f"icap-{i}", "reconciles")
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert used / 1000 < 5_000
