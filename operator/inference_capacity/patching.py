"""Build the Deployment patch a plan implies (pure: dicts in, dicts out).

The patch is a strategic-merge patch: the vLLM container is matched by name and only its
``command``/``args`` (and, for ``$(VAR)`` flags, the one ``env`` entry) change; replicas and the
rolling-update strategy are set when the policy manages them. What was applied is recorded in an
annotation with a hash, so re-running the same plan is a no-op (idempotent across restarts).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .engines.vllm_args import rewrite_flags

ANNOTATION_APPLIED = "capacity.inference.dev/applied"
ANNOTATION_OWNER = "capacity.inference.dev/owner"
FIELD_MANAGER = "inference-capacity"
#: the "new value" of a flag the patch deletes
REMOVED = "(removed)"


@dataclass(frozen=True)
class DeploymentChange:
    patch: dict[str, Any]  # strategic-merge patch; {} when nothing changes
    changed_flags: dict[str, tuple[str | None, str]]  # flag -> (old, new)
    replicas: tuple[int | None, int] | None
    strategy: tuple[dict[str, Any] | None, dict[str, Any]] | None
    applied_hash: str
    #: the container's ``resources`` the patch sets (spec.policy.setMemoryRequest), None: none
    resources: dict[str, Any] | None = None

    @property
    def empty(self) -> bool:
        return not self.patch


def applied_hash(
    flags: Mapping[str, str],
    replicas: int | None,
    strategy: Mapping[str, Any] | None,
    resources: Mapping[str, Any] | None = None,
) -> str:
    body: dict[str, Any] = {
        "flags": dict(sorted(flags.items())),
        "replicas": replicas,
        "strategy": strategy,
    }
    if resources:
        body["resources"] = resources
    blob = json.dumps(body, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_change(
    deployment: Mapping[str, Any],
    container_index: int,
    flags: Mapping[str, str],
    current_flags: Mapping[str, str],
    replicas: int | None,
    strategy: Mapping[str, Any] | None,
    owner: str | None = None,
    remove: Collection[str] = (),
    resources: Mapping[str, Any] | None = None,
) -> DeploymentChange:
    """The patch that sets ``flags`` on the container and deletes the flags of ``remove`` that
    it carries, the container's ``resources`` (memory: merged key by key by the strategic merge)
    and replicas/strategy when given."""
    spec = deployment.get("spec", {})
    containers = spec.get("template", {}).get("spec", {}).get("containers", [])
    container = containers[container_index]
    changed = {k: (current_flags.get(k), v) for k, v in flags.items() if current_flags.get(k) != v}
    dropped = [k for k in remove if k in current_flags]
    changed.update({k: (current_flags[k], REMOVED) for k in dropped})
    patch: dict[str, Any] = {}
    cpatch: dict[str, Any] = {"name": container["name"]}
    if changed:
        new = rewrite_flags(container, {k: v for k, v in flags.items()}, dropped)
        for key in ("command", "args"):
            if new.get(key) != container.get(key):
                cpatch[key] = new.get(key)
        if new.get("env") != container.get("env"):
            old_env = {e.get("name"): e for e in container.get("env", []) or []}
            cpatch["env"] = [e for e in new.get("env", []) or [] if old_env.get(e.get("name")) != e]
    if resources:
        cpatch["resources"] = json.loads(json.dumps(resources))
    if len(cpatch) > 1:
        patch.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})[
            "containers"
        ] = [cpatch]
    rep_change = None
    if replicas is not None and spec.get("replicas") != replicas:
        patch.setdefault("spec", {})["replicas"] = replicas
        rep_change = (spec.get("replicas"), replicas)
    strat_change = None
    if strategy is not None:
        cur = spec.get("strategy", {}).get("rollingUpdate")
        cur_type = spec.get("strategy", {}).get("type", "RollingUpdate")
        if cur != dict(strategy) or cur_type != "RollingUpdate":
            patch.setdefault("spec", {})["strategy"] = {
                "type": "RollingUpdate",
                "rollingUpdate": dict(strategy),
            }
            strat_change = (cur, dict(strategy))
    h = applied_hash({**flags, **{k: REMOVED for k in dropped}}, replicas, strategy, resources)
    if patch:
        ann = {
            ANNOTATION_APPLIED: json.dumps(
                {
                    "flags": dict(sorted(flags.items())),
                    **({"removed": sorted(dropped)} if dropped else {}),
                    "replicas": replicas,
                    "strategy": dict(strategy) if strategy else None,
                    **({"resources": dict(resources)} if resources else {}),
                    "hash": h,
                },
                sort_keys=True,
            )
        }
        if owner:
            ann[ANNOTATION_OWNER] = owner
        patch.setdefault("metadata", {})["annotations"] = ann
    return DeploymentChange(
        patch, changed, rep_change, strat_change, h, dict(resources) if resources else None
    )


def apply_strategic(deployment: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Apply our own patch shape locally (for `plan` previews); containers merge by name."""
    out = json.loads(json.dumps(deployment))

    def merge(dst: dict[str, Any], src: Mapping[str, Any], path: str) -> None:
        for k, v in src.items():
            if k == "containers" and isinstance(v, list):
                by_name = {c["name"]: c for c in dst.get(k, [])}
                for c in v:
                    tgt = by_name.get(c["name"])
                    if tgt is None:
                        dst.setdefault(k, []).append(c)
                        continue
                    for ck, cv in c.items():
                        if ck == "env":
                            envs = {e["name"]: e for e in tgt.get("env", [])}
                            for e in cv:
                                if e["name"] in envs:
                                    envs[e["name"]].clear()
                                    envs[e["name"]].update(e)
                                else:
                                    tgt.setdefault("env", []).append(e)
                        elif ck == "resources" and isinstance(cv, Mapping):
                            res = tgt.setdefault("resources", {})
                            for part, vals in cv.items():
                                res.setdefault(part, {}).update(vals)
                        else:
                            tgt[ck] = cv
            elif isinstance(v, Mapping) and isinstance(dst.get(k), dict):
                merge(dst[k], v, f"{path}.{k}")
            else:
                dst[k] = json.loads(json.dumps(v))

    merge(out, patch, "")
    result: dict[str, Any] = out
    return result
