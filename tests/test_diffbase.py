"""Kopf's last-handled state stays under the API server's annotation limit (issue 13: a large
inline config made Kopf's own metadata patch fail with 422 after every handling)."""

from __future__ import annotations

import json
from typing import Any

from inference_capacity.controller.diffbase import STANZA_BUDGET_BYTES, bounded_essence, digest
from inference_capacity.model.limits import MAX_CONFIG_BYTES

#: apimachinery ``TotalAnnotationSizeLimitB``: all annotations of an object together
ANNOTATIONS_LIMIT = 256 * 1024


def _essence(config: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"spec": {"model": {"config": config}, "gpu": {"type": "H100-SXM-80GB"}}}
    if annotations:
        e["metadata"] = {"annotations": annotations}
    return e


def test_the_config_is_kept_as_its_digest_and_the_rest_as_is() -> None:
    out = bounded_essence(_essence({"hidden_size": 4096}))
    assert out["spec"]["gpu"] == {"type": "H100-SXM-80GB"}
    text = json.dumps({"hidden_size": 4096}, sort_keys=True, separators=(",", ":")).encode()
    assert out["spec"]["model"]["config"] == digest({"hidden_size": 4096})
    assert out["spec"]["model"]["config"]["bytes"] == len(text)


def test_a_change_inside_the_config_changes_the_essence() -> None:
    a = bounded_essence(_essence({"hidden_size": 4096, "num_key_value_heads": 8}))
    b = bounded_essence(_essence({"hidden_size": 4096, "num_key_value_heads": 4}))
    assert a != b
    # key order does not matter: the digest is of canonical JSON
    c = bounded_essence(_essence({"num_key_value_heads": 8, "hidden_size": 4096}))
    assert a == c


def test_the_largest_config_and_large_annotations_fit_under_the_limit() -> None:
    big = {"pad": "x" * (MAX_CONFIG_BYTES - 100)}
    user_annotations = {"example.com/notes": "y" * (ANNOTATIONS_LIMIT // 2)}
    raw = _essence(big, user_annotations)
    assert len(json.dumps(raw)) > ANNOTATIONS_LIMIT
    out = bounded_essence(raw)
    encoded = json.dumps(out, separators=(",", ":"))
    assert len(encoded) < 2 * STANZA_BUDGET_BYTES
    assert out["metadata"] == {"digest": digest(raw["metadata"])}


def test_an_essence_without_a_model_config_is_unchanged() -> None:
    raw = {"spec": {"model": {"name": "org/model"}}, "metadata": {"labels": {"a": "b"}}}
    assert bounded_essence(raw) == raw


def test_the_state_is_stored_in_the_status_and_the_old_annotation_is_still_read() -> None:
    """Kopf's diff base rides on the status write of the handling (one request, no metadata
    patch); an object handled by an earlier version (annotation only) is not taken for new."""
    import kopf

    from inference_capacity.controller.diffbase import (
        LEGACY_ANNOTATION,
        BoundedDiffBaseStorage,
        handled_by_kopf,
    )

    storage = BoundedDiffBaseStorage()
    raw: dict[str, Any] = {
        "metadata": {"name": "a", "annotations": {"team": "x"}},
        "spec": {"model": {"config": {"hidden_size": 4096}}},
    }
    body = kopf.Body(raw)
    essence = storage.build(body=body)
    assert essence["spec"]["model"]["config"] == digest({"hidden_size": 4096})
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=essence)
    assert set(patch) == {"status"}  # nothing for the metadata
    assert not patch.get("metadata")
    stored = patch["status"]["kopf"]["lastHandled"]
    assert json.loads(stored) == essence
    assert not handled_by_kopf(raw)
    in_status = {**raw, "status": {"kopf": {"lastHandled": stored}}}
    assert handled_by_kopf(in_status)
    assert storage.fetch(body=kopf.Body(in_status)) == essence
    legacy = {
        **raw,
        "metadata": {"name": "a", "annotations": {"team": "x", LEGACY_ANNOTATION: stored}},
    }
    assert handled_by_kopf(legacy)
    assert storage.fetch(body=kopf.Body(legacy)) == essence
    # the old annotation is not part of what is compared: its presence is not a change
    assert storage.build(body=kopf.Body(legacy)) == essence


def test_the_essence_is_kopfs_without_copying_the_status() -> None:
    """``BoundedDiffBaseStorage.build`` hands Kopf's build only the parts Kopf keeps (it
    deep-copied the whole body, ledger and managedFields included, on every event): the essence
    is the one Kopf's own storages build from the whole body."""
    import kopf

    from inference_capacity.controller.diffbase import (
        DIFFBASE_FIELD,
        LEGACY_KEY,
        LEGACY_PREFIX,
        BoundedDiffBaseStorage,
    )

    body = {
        "apiVersion": "capacity.inference.dev/v1alpha1",
        "kind": "InferenceCapacity",
        "metadata": {
            "name": "a",
            "namespace": "n",
            "uid": "u-1",
            "resourceVersion": "7",
            "generation": 3,
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "labels": {"team": "x"},
            "annotations": {
                "example.com/note": "keep",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                f"{LEGACY_PREFIX}/{LEGACY_KEY}": "{}",
            },
        },
        "spec": {"model": {"name": "org/model"}, "gpu": {"type": "H100-SXM-80GB"}},
        "status": {"ledger": {"ranks": [{"rank": 0, "items": [{"bytes": 1}] * 50}]}},
    }
    kopfs = kopf.MultiDiffBaseStorage(
        [
            kopf.StatusDiffBaseStorage(field=DIFFBASE_FIELD),
            kopf.AnnotationsDiffBaseStorage(prefix=LEGACY_PREFIX, key=LEGACY_KEY),
        ]
    ).build(body=kopf.Body(body))
    ours = BoundedDiffBaseStorage().build(body=kopf.Body(body))
    assert ours == bounded_essence(dict(kopfs))
    assert ours["metadata"] == {
        "labels": {"team": "x"},
        "annotations": {"example.com/note": "keep"},
    }
    assert "status" not in ours and "managedFields" not in json.dumps(ours)
