"""``plan FILE``: each InferenceCapacity of the input planned and decided as the operator
decides it (:func:`inference_capacity.decision.decide`), and the patch it would write."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from ..decision import UNMODELLED, Decision
from ..model.source import checkpoint_json
from ..report import (
    plan_json,
    table,
)
from .common import (
    EXIT_NO_DEPLOYMENT,
    EXIT_NOTHING_TO_PATCH,
    EXIT_REFUSED,
    CliError,
    _name_of,
    _read_text,
)
from .observe import observed_input

#: flags of the what-if form that a manifest says in its own spec: given with FILE they would be
#: ignored, so they are refused (the spec field to edit instead)
MANIFEST_FIELDS: dict[str, str] = {
    "revision": "spec.model.revision",
    "gpu": "spec.hardware.gpu",
    "gpu_memory_gib": "spec.hardware.gpuMemoryGiB",
    "tp": "spec.hardware.tensorParallel",
    "pp": "spec.hardware.pipelineParallel",
    "dp": "spec.engine.dataParallel",
    "enable_expert_parallel": "the container's --enable-expert-parallel",
    "gpu_memory_utilization": "the recommendation (the operator chooses it)",
    "max_model_len": "spec.workload.maxModelLen",
    "max_num_seqs": "spec.engine.maxNumSeqsCap",
    "max_num_batched_tokens": "spec.engine.maxNumBatchedTokens",
    "block_size": "spec.engine.blockSize",
    "kv_cache_dtype": "spec.model.kvCacheDtype",
    "dtype": "spec.model.dtype",
    "quantization": "spec.model.quantization",
    "engine_version": "spec.engine.version",
    "engine": "spec.engine.version",
    "enforce_eager": "spec.engine.enforceEager",
    "compile_cache": "spec.engine.compileCache",
    "max_loras": "spec.model.maxLoras",
    "max_lora_rank": "spec.model.maxLoraRank",
    "kv_cache_gib": "spec.engine.kvCacheMemoryBytes",
    "operational_headroom": "spec.headroom.operationalFraction",
    "prompt_tokens": "spec.workload.cohorts",
    "output_tokens": "spec.workload.cohorts",
    "shared_prefix_tokens": "spec.workload.cohorts[].sharedPrefixTokens",
    "samples": "spec.workload.cohorts[].samples",
    "cohort": "spec.workload.cohorts",
    "burst": "spec.workload.burst",
    "peak_concurrency": "spec.workload.peakConcurrency",
    "itl_target_ms": "spec.workload.itlTargetMs",
    "itl_quantile": "spec.workload.itlQuantile",
    "ttft_target_ms": "spec.workload.ttftTargetMs",
    # the operator reads these from the spec alone: with FILE they would make a plan it does not
    # (--sizing conservative: max-num-seqs 85 and 5 replicas where the operator writes 120 and 4)
    "sizing": "spec.policy.sizing",
    "preemption_target": "spec.policy.preemptionTarget",
    "hbm_efficiency": "spec.hardware.hbmEfficiency",
    "limit_mm_per_prompt": "the container's --limit-mm-per-prompt",
    "mm_processor_kwargs": "the container's --mm-processor-kwargs",
    "skip_mm_profiling": "the container's --skip-mm-profiling",
}
#: flags of ``plan`` that go with FILE: they choose the output or add views beside the
#: operator's plan (levers, sweep, charts), and change nothing the operator decides
FILE_FLAGS: frozenset[str] = frozenset(
    {
        "command",
        "file",
        "model",  # refused with FILE by cmd_plan
        "deployment",
        "output",
        "chart",
        "latency_chart",
        "fail_if_not_fits",
        "sweep",
        "gpu_price",
        "gpu_prices",
        "sweep_chart",
        # plan FILE --observe: the operator's observation of spec.workload.fromPrometheus,
        # with the CLI's explicit bounds (cli/observe.py)
        "observe",
        "prometheus_allowed_url_prefix",
        "prometheus_ca_file",
        "prometheus_timeout",
        "prometheus_token_env",
        "prometheus_token_file",
    }
)


def _refuse_manifest_flags(a: argparse.Namespace) -> None:
    given = [k for k in MANIFEST_FIELDS if getattr(a, k, None) not in (None, False, [])]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise CliError(
            f"plan FILE: {flag} is a what-if flag and the manifest says this itself "
            f"({MANIFEST_FIELDS[given[0]]}): edit FILE, or plan from flags with --model"
            + (
                f" (also given: {', '.join('--' + g.replace('_', '-') for g in given[1:])})"
                if given[1:]
                else ""
            )
        )


def _manifest_plans(a: argparse.Namespace) -> list[tuple[dict[str, Any], str, Any]]:
    from .. import decision, settings
    from ..api import load_manifests

    _refuse_manifest_flags(a)
    try:
        docs = load_manifests(_read_text(a.file))
    except yaml.YAMLError as exc:
        raise CliError(f"{a.file}: not valid YAML: {exc}") from None
    others = list(docs.others)
    if a.deployment:
        others += load_manifests(_read_text(a.deployment)).others
    if not docs.capacities:
        raise CliError(f"{a.file}: no InferenceCapacity document found")
    config_maps = {
        _name_of(d): d.get("data") or {}
        for d in others
        if d.get("kind") == "ConfigMap" and isinstance(d.get("data") or {}, dict)
    }
    cfg = settings.current()
    windows = decision.Windows(cfg.stabilization_seconds, cfg.replica_stabilization_seconds)
    results: list[tuple[dict[str, Any], str, Any]] = []
    for doc in docs.capacities:
        results.append(_plan_capacity(a, doc, others, config_maps, windows))
    return results


def _plan_capacity(
    a: argparse.Namespace,
    doc: dict[str, Any],
    others: list[dict[str, Any]],
    config_maps: dict[Any, Any],
    windows: Any,
) -> tuple[dict[str, Any], str, Any]:
    """One InferenceCapacity of the input: read, plan and decide against its Deployment (and
    the Nodes, Pods, HPA and PDB of the input) with the operator's glue
    (:func:`inference_capacity.evaluate.evaluate`)."""
    import time

    from .. import decision
    from ..api import KIND, InferenceCapacity
    from ..evaluate import Snapshot, evaluate, read
    from ..patching import apply_strategic

    nodes = [d for d in others if d.get("kind") == "Node"]
    pods = [d for d in others if d.get("kind") == "Pod"]
    icap = InferenceCapacity.from_manifest(doc, ignore_status=True)
    spec = icap.spec
    ns = icap.metadata.namespace or "default"
    target = f"deployment/{spec.target_ref.name}"
    dep = next(
        (
            d
            for d in others
            if d.get("kind") == "Deployment" and _name_of(d) == spec.target_ref.name
        ),
        None,
    )
    hpa_min = decision.hpa_min_replicas_by_target(
        d for d in others if d.get("kind") == "HorizontalPodAutoscaler"
    ).get(spec.target_ref.name)
    pdb = next(
        (
            d
            for d in others
            if d.get("kind") == "PodDisruptionBudget" and _name_of(d) == icap.metadata.name
        ),
        None,
    )
    uid = str((doc.get("metadata") or {}).get("uid") or "")
    snapshot = Snapshot(
        deployment=dep,
        config_maps=config_maps,
        hpa_min_replicas=hpa_min,
        nodes=nodes or None,
        pods=pods,
        nodes_unknown="spare GPUs unknown (no Nodes in the input)",
        foreign_pdb=decision.foreign_pdb(pdb, icap.metadata.name, uid, KIND),
        now=time.time(),
    )
    resolved = read(spec, snapshot)
    if not resolved.supported:
        return _unsupported_result(icap, resolved, decision.unsupported(resolved))
    inp = resolved.plan_input  # no what-if flag reaches it (_refuse_manifest_flags)
    inp, observed = observed_input(a, spec, ns, icap.metadata.name, inp, config_maps)
    ev = evaluate(
        spec,
        snapshot,
        owner=f"{ns}/{icap.metadata.name}",
        windows=windows,
        resolved=resolved,
        plan_input=inp,
    )
    plan = ev.plan
    assert plan is not None  # supported
    extra: dict[str, Any] = {
        "name": icap.metadata.name,
        "namespace": icap.metadata.namespace,
        "mode": spec.mode,
        "engine_version": resolved.engine_version,
        "engine_version_source": resolved.engine_version_source,
        "conflicts": list(resolved.conflicts),
        "supported": True,
    }
    if observed is not None:
        extra["observed"] = observed
    if dep is None or ev.decision is None:
        # the flags the operator would want on a container that sets none of them
        flags, removed = decision.desired_flags(spec, plan, {})
        extra["flags"] = flags
        extra["removed_flags"] = list(removed)
        extra["patch"] = {
            "target": target,
            "action": "none",
            "reason": "NoDeployment",
            "note": "Deployment not in the input: flags only",
            "flags": flags,
        }
    else:
        chosen = ev.decision
        extra["flags"] = dict(chosen.flags) if chosen.change else {}
        extra["patch"] = _patch_json(chosen, target)
        extra["decision"] = {
            "action": chosen.action,
            "reason": chosen.reason,
            "conditions": [
                {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
                for c in chosen.conditions
            ],
            "held": list(chosen.held),
            "pdbMinAvailable": chosen.pdb_min_available,
        }
        if "container" not in extra["patch"] and extra["patch"].get("strategicMergePatch"):
            new = apply_strategic(dep, extra["patch"]["strategicMergePatch"])
            c = new["spec"]["template"]["spec"]["containers"][resolved.container_index or 0]
            extra["patch"]["container"] = {"command": c.get("command"), "args": c.get("args")}
    src = resolved.model_source
    if src is not None:
        out = {"model": src.json(), **plan_json(plan, extra)}
        ckpt = checkpoint_json(src, plan.input.model)
        if ckpt is not None:
            out["checkpoint"] = ckpt
    else:
        out = {"model": _config_model_json(spec), **plan_json(plan, extra)}
    text = table(
        plan,
        f"{icap.metadata.name}: {plan.input.model.name} on "
        f"{plan.input.gpu.name} TP={plan.input.tp} PP={plan.input.pp}, vLLM "
        f"{resolved.engine_version} ({resolved.engine_version_source})",
    )
    pj = extra["patch"]
    text += "\n\nWould patch " + target + ": "
    if pj.get("strategicMergePatch"):
        if pj.get("note"):
            text += pj["note"] + "\n"
        text += "\n" + yaml.safe_dump(pj["strategicMergePatch"], sort_keys=False).rstrip()
    else:
        text += pj["note"]
    if resolved.conflicts:
        text += "\nConflicts: " + "; ".join(resolved.conflicts)
    return out, text, plan


def _patch_json(chosen: Decision, target: str) -> dict[str, Any]:
    """The ``patch`` object of ``plan -o json``: what the operator does to the Deployment."""
    out: dict[str, Any] = {"target": target, "action": chosen.action, "reason": chosen.reason}
    if chosen.held:
        out["held"] = list(chosen.held)
    message = chosen.applied_message
    if chosen.action == "patch":
        out["strategicMergePatch"] = chosen.patch
    elif chosen.action == "refuse":
        out["note"] = f"not patched: {chosen.reason}: {message}"
        out["message"] = message
    elif chosen.recommended is not None and chosen.reason in ("RecommendOnly", "RolloutInProgress"):
        # the operator writes this patch in mode Enforce / once the rollout settles
        out["strategicMergePatch"] = dict(chosen.recommended.patch)
        out["note"] = (
            "mode Recommend: the operator writes nothing; this is the patch it recommends"
            if chosen.reason == "RecommendOnly"
            else f"the operator writes this once the rollout has settled ({message})"
        )
    else:
        out["note"] = f"nothing to change: {message}"
    if chosen.recommended is not None:
        out["changedFlags"] = {
            k: {"from": v[0], "to": v[1]} for k, v in chosen.recommended.changed_flags.items()
        }
    return out


def _config_model_json(spec: Any) -> dict[str, Any]:
    """The ``model`` object for a config given in the manifest (a ConfigMap or inline)."""
    ref = spec.model.config_map_ref
    return {
        "source": "local",
        "id": f"configmap/{ref.name}/{ref.key}" if ref is not None else "inline config",
        "revision": None,
        "checkpoint_bytes": None,
        "disk_bytes": None,
    }


def _unsupported_result(icap: Any, resolved: Any, chosen: Any) -> tuple[dict[str, Any], str, None]:
    """A plan refused because the container sets what the ledger does not model."""
    spec = icap.spec
    message = resolved.unsupported_message()
    out = {
        "name": icap.metadata.name,
        "namespace": icap.metadata.namespace,
        "supported": False,
        "reason": "UnsupportedFlag",
        "unsupported": [{"name": u.name, "why": u.why} for u in resolved.unsupported],
        "patch": {
            "target": f"deployment/{spec.target_ref.name}",
            "action": chosen.action,
            "reason": chosen.reason,
            "note": f"not patched: Supported=False (UnsupportedFlag): {message}",
            "message": message,
        },
    }
    text = (
        f"{icap.metadata.name}: Supported=False (UnsupportedFlag): the vLLM container "
        f"{UNMODELLED}, so no plan is made: {message}\n\nWould patch "
        f"deployment/{spec.target_ref.name}: nothing (Supported=False)"
    )
    return out, text, None


def _print_patches(results: list[tuple[dict[str, Any], str, Any]]) -> int:
    """Print the strategic-merge patch the operator writes (``kubectl patch --type strategic``);
    say on stderr why there is none. Exit code: 0 when every resource has a patch, else the
    highest of 3 (nothing to change), 4 (no Deployment in the input), 5 (the operator refuses)."""
    patches: list[Any] = []
    code = 0
    for out, _, _ in results:
        pj = out.get("patch") or {}
        name = out.get("name", "")
        if pj.get("strategicMergePatch"):
            patches.append(pj["strategicMergePatch"])
            if pj.get("note"):
                print(f"inference-capacity: {name}: {pj['note']}", file=sys.stderr)
            continue
        patches.append(None)
        if pj.get("reason") == "NoDeployment":
            why, rc = (
                f"no Deployment {pj.get('target')} in the input (give it in FILE or with "
                "--deployment): nothing to patch",
                EXIT_NO_DEPLOYMENT,
            )
        elif pj.get("action") == "refuse":
            why, rc = pj.get("note", "not patched"), EXIT_REFUSED
        else:
            why, rc = pj.get("note", "nothing to change"), EXIT_NOTHING_TO_PATCH
        print(f"inference-capacity: {name}: {why}", file=sys.stderr)
        code = max(code, rc)
    if any(p is not None for p in patches):
        print(json.dumps(patches[0] if len(patches) == 1 else patches, indent=2))
    return code
