"""Kopf's last-handled state of an InferenceCapacity, bounded in size.

Kopf keeps the "essence" of each object it has handled (spec, labels, annotations) as JSON in an
annotation, and compares the next version with it to tell a real change from a status write.
The API server refuses an object whose annotations total more than 256 KiB
(``apimachinery/pkg/api/validation::ValidateAnnotationsSize``, ``TotalAnnotationSizeLimitB``).
An inline ``spec.model.config`` may be up to 1 MiB (:data:`..model.limits.MAX_CONFIG_BYTES`), so
Kopf's copy of it made Kopf's own metadata patch fail with 422 after every handling: the
annotation was never stored, Kopf took the object for new at every event, and re-ran the
creation handler forever, behind its error throttle.

Here the essence keeps digests instead of large values: ``spec.model.config`` always (a config
is compared as a whole, never diffed field by field), and any top-level stanza whose JSON is
larger than :data:`STANZA_BUDGET_BYTES`. A change to a digested value changes its digest, so
Kopf still sees it (the handlers read the object itself, never Kopf's diff).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, cast

import kopf

#: a top-level stanza of the essence (``spec``, ``metadata``) larger than this is kept as its
#: digest: the annotation stays well under the API server's 256 KiB for all annotations together
STANZA_BUDGET_BYTES = 32 * 1024


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def digest(value: Any) -> dict[str, Any]:
    """What the essence keeps of a large value: its SHA-256 and size (canonical JSON)."""
    text = _canonical(value).encode()
    return {"sha256": hashlib.sha256(text).hexdigest(), "bytes": len(text)}


def bounded_essence(essence: dict[str, Any]) -> dict[str, Any]:
    """``essence`` with ``spec.model.config`` and every stanza over the budget digested."""
    out = dict(essence)
    spec = out.get("spec")
    if isinstance(spec, dict):
        model = spec.get("model")
        if isinstance(model, dict) and "config" in model:
            out["spec"] = {**spec, "model": {**model, "config": digest(model["config"])}}
    for key, value in list(out.items()):
        if len(_canonical(value)) > STANZA_BUDGET_BYTES:
            out[key] = {"digest": digest(value)}
    return out


#: where Kopf keeps its last-handled state and its retry progress: in the status, so that a
#: handling is one status write (the reconcile's status and Kopf's state together), not a
#: metadata patch plus a status patch (issue 22: requests per object). ``kopf`` is in the CRD's
#: status schema (api.status.HandlerState), so the API server keeps it.
DIFFBASE_FIELD = "status.kopf.lastHandled"
PROGRESS_FIELD = "status.kopf.progress"
#: the annotation earlier versions kept it in: still read (a resource handled by an earlier
#: version is not taken for new), never written
LEGACY_PREFIX = "capacity.inference.dev"
LEGACY_KEY = "last-handled-configuration"
LEGACY_ANNOTATION = f"{LEGACY_PREFIX}/{LEGACY_KEY}"


Owns = Callable[[Mapping[str, Any]], bool]


def _essence_parts(body: Mapping[str, Any]) -> dict[str, Any]:
    """What Kopf's ``DiffBaseStorage.build`` keeps of a body without extra fields
    (``kopf/_cogs/configs/diffbase.py``): everything but ``status``, and of ``metadata`` only
    ``labels`` and ``annotations``. Not copied: Kopf's build copies what it keeps."""
    meta = body.get("metadata") or {}
    out = {k: v for k, v in body.items() if k not in ("status", "metadata")}
    out["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
    return out


def _everything(_body: Mapping[str, Any]) -> bool:
    return True


class BoundedDiffBaseStorage(kopf.MultiDiffBaseStorage):
    """Kopf's diff base in ``status.kopf.lastHandled``, with :func:`bounded_essence` applied;
    the annotation of earlier versions is read when the status has none, and not written.

    ``owns``: with shards, whether this replica holds the object's shard. Kopf stores the diff
    base of an object whose handlers its ``when=`` filters all skipped
    (``kopf/_core/reactor/processing.py``, ``process_changing_cause``: ``skip`` → store): on
    another shard's object that is a write by a replica that does not own it, marking it handled
    without its handler having run. Not stored then."""

    def __init__(self, owns: Owns = _everything) -> None:
        self._owns = owns
        self.status = kopf.StatusDiffBaseStorage(field=DIFFBASE_FIELD)
        self.legacy = kopf.AnnotationsDiffBaseStorage(prefix=LEGACY_PREFIX, key=LEGACY_KEY)
        super().__init__([self.status, self.legacy])

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        if not extra_fields:
            # Kopf's build deep-copies the whole body, then drops the status and all metadata
            # but labels and annotations: on every event of every resource, a copy of the
            # ledger and the managedFields thrown away (the largest CPU cost of the operator's
            # loop in a 1,000-resource drain). The same essence from those parts only.
            body = cast(kopf.Body, _essence_parts(body))
        essence = super().build(body=body, extra_fields=extra_fields)
        return cast(kopf.BodyEssence, bounded_essence(dict(essence)))

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if self._owns(body):
            self.status.store(body=body, patch=patch, essence=essence)


class _OwnedProgressStorage(kopf.StatusProgressStorage):
    """Kopf's progress storage that writes only objects of a held shard (see
    :class:`BoundedDiffBaseStorage`: Kopf may purge another purpose's progress even when no
    handler of this replica is selected)."""

    def __init__(self, owns: Owns) -> None:
        super().__init__(field=PROGRESS_FIELD, touch_field=TOUCH_FIELD)
        self._owns = owns

    def store(self, *, key: Any, record: Any, body: kopf.Body, patch: kopf.Patch) -> None:
        if self._owns(body):
            super().store(key=key, record=record, body=body, patch=patch)

    def purge(self, *, key: Any, body: kopf.Body, patch: kopf.Patch) -> None:
        if self._owns(body):
            super().purge(key=key, body=body, patch=patch)

    def touch(self, *, body: kopf.Body, patch: kopf.Patch, value: str | None) -> None:
        if self._owns(body):
            super().touch(body=body, patch=patch, value=value)


#: the status field Kopf writes to be woken (an event) after a retry's delay
TOUCH_FIELD = "status.kopf.dummy"


def progress_storage(owns: Owns = _everything) -> kopf.StatusProgressStorage:
    """Kopf's retry progress in ``status.kopf.progress`` (a retry's state rides on the status
    write of that handling)."""
    return _OwnedProgressStorage(owns)


def handled_by_kopf(body: Mapping[str, Any]) -> bool:
    """Whether Kopf has finished handling this object once (its diff base is stored): until
    then Kopf's own creation handler owns it, and a status written from elsewhere would make
    Kopf take the object for unhandled again."""
    kopf_state = (body.get("status") or {}).get("kopf") or {}
    if isinstance(kopf_state, Mapping) and kopf_state.get("lastHandled"):
        return True
    return LEGACY_ANNOTATION in ((body.get("metadata") or {}).get("annotations") or {})
