"""``inference-capacity``: plan / crd / models / gpus / run.

Every expected failure (bad input, unknown model or GPU, a config the ledger cannot size) is one
line on stderr naming the field, and exit status 2; a plan that does not fit exits 1 with
``--fail-if-not-fits`` (for CI), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from .engines.versions import NEWEST_SUPPORTED
from .engines.vllm import EngineSettings
from .hardware import custom_gpu, get_gpu, list_gpus
from .model import catalog_names, load_model
from .model.source import checkpoint_json, describe, resolve_model_ref
from .planner import Headroom, PlanInput, make_plan
from .report import chart, latency_chart, plan_json, sweep_chart, sweep_table, table
from .whatif import levers, parse_prices, sweep, workload_from_flags

EXIT_INPUT = 2
EXIT_NOT_FITS = 1


class CliError(Exception):
    pass


def _positive_int(name: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        return value

    return parse


def _fraction(name: str) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not 0.0 < value <= 1.0:
            raise argparse.ArgumentTypeError(f"{name} must be in (0, 1], got {value}")
        return value

    return parse


def _gib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of GiB, got {text!r}") from None
    if not 0 < value < 100_000:
        raise argparse.ArgumentTypeError(f"must be a positive number of GiB, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="inference-capacity",
        description="Size vLLM inference fleets from a per-GPU memory ledger.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    plan = sub.add_parser(
        "plan",
        help="plan an InferenceCapacity manifest, or a what-if given as flags",
        description="Plan FILE.yaml (an InferenceCapacity, optionally with its Deployment), or "
        "a what-if from flags (--model and --gpu/--gpu-memory-gib).",
    )
    plan.add_argument("file", nargs="?", help="InferenceCapacity manifest (YAML; - for stdin)")
    plan.add_argument(
        "--model",
        help="a config.json or model folder, a catalog name (see `models`), or a Hugging Face "
        "Hub id (org/name; HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE apply)",
    )
    plan.add_argument(
        "--revision", help="Hub revision of --model: a branch, tag or commit (default main)"
    )
    plan.add_argument("--gpu", help="GPU catalog name (see `gpus`)")
    plan.add_argument("--gpu-memory-gib", type=_gib, help="device memory as CUDA reports it")
    plan.add_argument(
        "--tp", "--tensor-parallel-size", dest="tp", type=_positive_int("--tp"), default=None
    )
    plan.add_argument(
        "--pp", "--pipeline-parallel-size", dest="pp", type=_positive_int("--pp"), default=None
    )
    plan.add_argument(
        "--dp", "--data-parallel-size", dest="dp", type=_positive_int("--dp"), default=1
    )
    plan.add_argument("--enable-expert-parallel", action="store_true")
    plan.add_argument("--gpu-memory-utilization", type=_fraction("--gpu-memory-utilization"))
    plan.add_argument("--max-model-len", type=_positive_int("--max-model-len"))
    plan.add_argument("--max-num-seqs", type=_positive_int("--max-num-seqs"))
    plan.add_argument("--max-num-batched-tokens", type=_positive_int("--max-num-batched-tokens"))
    plan.add_argument("--block-size", type=_positive_int("--block-size"))
    plan.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"],
    )
    plan.add_argument(
        "--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32", "half"]
    )
    plan.add_argument("--quantization", help="vLLM --quantization (e.g. fp8, gptq_marlin)")
    plan.add_argument(
        "--engine-version",
        default=None,
        help=f"vLLM version as it reports it (default {NEWEST_SUPPORTED})",
    )
    plan.add_argument(
        "--engine", choices=["v0", "v1"], default=None, help="force the V0 engine (vLLM <= 0.10)"
    )
    plan.add_argument("--enforce-eager", action="store_true")
    plan.add_argument("--max-loras", type=int, default=0)
    plan.add_argument("--max-lora-rank", type=int, default=16)
    plan.add_argument(
        "--kv-cache-gib",
        type=_gib,
        help="inverse: the KV pool wanted per GPU; prints the utilization for it",
    )
    plan.add_argument(
        "--operational-headroom",
        type=float,
        default=0.05,
        help="fraction of the device kept free beyond vLLM's view (0.05)",
    )
    plan.add_argument(
        "--deployment",
        help="the target Deployment manifest (YAML), for the patch preview; may also be in FILE",
    )
    w = plan.add_argument_group(
        "workload and sizing (issue 14)",
        "Length quantiles as P50,P95,P99 tokens; --cohort NAME:WEIGHT:P50,P95,P99:O50,O95,O99"
        "[:SHARED_PREFIX[:N]] (repeatable) for several cohorts.",
    )
    w.add_argument("--prompt-tokens", metavar="P50,P95,P99", help="prompt length quantiles")
    w.add_argument("--output-tokens", metavar="P50,P95,P99", help="output length quantiles")
    w.add_argument("--shared-prefix-tokens", type=int, default=0, help="with --prompt-tokens")
    w.add_argument("--samples", type=_positive_int("--samples"), default=1, help="n per request")
    w.add_argument("--cohort", action="append", default=[], metavar="SPEC")
    w.add_argument("--burst", metavar="NAME=W,...", help="the burst hour's cohort weights")
    w.add_argument("--peak-concurrency", type=_positive_int("--peak-concurrency"))
    w.add_argument("--itl-target-ms", type=float)
    w.add_argument(
        "--sizing",
        choices=["distribution", "conservative"],
        help="max-num-seqs rule (default: the manifest's spec.policy.sizing, else distribution)",
    )
    w.add_argument("--preemption-target", type=float, help="P(preemption) target (0.01)")
    w.add_argument(
        "--hbm-efficiency",
        type=_fraction("--hbm-efficiency"),
        help="fraction of datasheet HBM bandwidth decode reaches (0.80)",
    )
    w.add_argument("--sweep", action="store_true", help="rank every GPU x TP x KV dtype")
    w.add_argument(
        "--gpu-price", action="append", default=[], metavar="NAME=PRICE", help="per GPU-hour"
    )
    w.add_argument("--gpu-prices", metavar="FILE.yaml", help="a YAML table {GPU: price}")
    w.add_argument("--latency-chart", help="write the N → ITL / tokens/s curve (.svg/.png)")
    w.add_argument("--sweep-chart", help="write the sweep's options as bars (.svg/.png)")
    plan.add_argument("-o", "--output", default="table", choices=["table", "json", "yaml", "patch"])
    plan.add_argument("--chart", help="write the per-rank ledger as a stacked bar (.svg/.png)")
    plan.add_argument(
        "--fail-if-not-fits", action="store_true", help="exit 1 when the plan does not fit (for CI)"
    )
    sub.add_parser("crd", help="print the InferenceCapacity CustomResourceDefinition (YAML)")
    sub.add_parser("models", help="list the built-in model catalog")
    sub.add_parser("gpus", help="list the GPU catalog")
    run = sub.add_parser("run", help="run the operator (Kopf)")
    run.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch only these namespaces (repeatable); default all",
    )
    run.add_argument("--standalone", action="store_true", help="no peering (single replica)")
    run.add_argument("--peering", default=None, help="Kopf peering name for several replicas")
    run.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority (default: random per process, so exactly one replica works)",
    )
    run.add_argument(
        "--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint URL"
    )
    run.add_argument("--metrics-port", type=int, default=9090)
    run.add_argument(
        "--prometheus-allowed-url-prefix",
        action="append",
        default=[],
        metavar="PREFIX",
        help="a URL prefix spec.workload.fromPrometheus.url may start with (repeatable), e.g. "
        "http://prometheus.monitoring:9090/; none (the default): every fromPrometheus is refused",
    )
    run.add_argument("--verbose", "-v", action="store_true")
    return p


# --- plan ------------------------------------------------------------------------------------


def _flags_plan(a: argparse.Namespace) -> tuple[dict[str, Any], str, Any]:
    if not a.model:
        raise CliError("plan: give FILE.yaml, or --model NAME_OR_CONFIG_JSON with --gpu")
    if not a.gpu and a.gpu_memory_gib is None:
        raise CliError("plan: --gpu NAME or --gpu-memory-gib X is required with --model")
    source = resolve_model_ref(a.model, revision=a.revision)
    shape = source.shape(a.quantization)
    if a.gpu_memory_gib is not None:
        gpu = custom_gpu(a.gpu_memory_gib, name=a.gpu or "custom")
        if a.gpu:
            gpu = replace(get_gpu(a.gpu), total_bytes=gpu.total_bytes)
    else:
        gpu = get_gpu(a.gpu)
    settings = EngineSettings(
        version=a.engine_version or NEWEST_SUPPORTED,
        engine=a.engine,
        gpu_memory_utilization=a.gpu_memory_utilization,
        max_model_len=a.max_model_len,
        max_num_seqs=a.max_num_seqs,
        max_num_batched_tokens=a.max_num_batched_tokens,
        block_size=a.block_size,
        kv_cache_dtype=a.kv_cache_dtype,
        dtype=a.dtype,
        enforce_eager=a.enforce_eager,
        max_loras=a.max_loras,
        max_lora_rank=a.max_lora_rank,
        data_parallel=a.dp,
        expert_parallel=a.enable_expert_parallel,
    )
    if not 0 <= a.operational_headroom < 1:
        raise CliError("--operational-headroom must be in [0, 1)")
    workload = workload_from_flags(
        a.prompt_tokens,
        a.output_tokens,
        a.cohort,
        a.peak_concurrency,
        a.itl_target_ms,
        a.shared_prefix_tokens,
        a.samples,
        a.burst,
    )
    base = _sizing_overrides(
        a,
        PlanInput(
            model=shape,
            gpu=gpu,
            tp=a.tp or 1,
            pp=a.pp or 1,
            engine=settings,
            workload=workload,
            headroom=Headroom(operational_fraction=a.operational_headroom),
        ),
    )
    # what-if: vLLM at exactly these flags
    whatif = make_plan(
        replace(
            base, choose_utilization=a.gpu_memory_utilization is None, choose_max_num_seqs=False
        )
    )
    # recommendation: the utilization the ledger recommends (or the one for --kv-cache-gib)
    kv_pool = int(a.kv_cache_gib * 2**30) if a.kv_cache_gib is not None else None
    rec = make_plan(
        replace(
            base,
            kv_pool_bytes=kv_pool,
            choose_max_num_seqs=workload is not None and a.max_num_seqs is None,
        )
    )
    out = {"model": source.json(), **plan_json(whatif)}
    ckpt = checkpoint_json(source, shape)
    if ckpt is not None:
        out["checkpoint"] = ckpt
    rec_json = plan_json(rec)
    out["recommendation"] = rec_json["recommendation"]
    if workload is not None:
        # sizing and latency of the recommendation; of the given --max-num-seqs as "given"
        out["given"] = {"sizing": out["sizing"], "latency": out["latency"]}
        out["sizing"], out["latency"] = rec_json["sizing"], rec_json["latency"]
    out["recommended_flags"] = rec.recommendation.flags()
    if kv_pool is not None:
        out["inverse"] = {
            "fits": rec.fits,
            "reason": rec.reason,
            "message": rec.message,
            "kv_cache_gib": a.kv_cache_gib,
            "gpu_memory_utilization": rec.recommendation.gpu_memory_utilization,
            "num_gpu_blocks": rec.prediction.num_gpu_blocks,
            "available_kv_cache_gib": round(
                rec.prediction.ranks[rec.prediction.binding_rank].available_kv / 2**30, 4
            ),
        }
    text = (
        describe(source, shape)
        + "\n\n"
        + table(whatif if workload is None else rec)
        + "\n\nRecommended: "
        + " ".join(f"--{k} {v}" for k, v in rec.recommendation.flags().items())
    )
    if kv_pool is not None and not rec.fits:
        text += f"\n\n--kv-cache-gib {a.kv_cache_gib:g}: {rec.reason}: {rec.message}"
        # --fail-if-not-fits judges the plan asked for: the inverse one
        return out, text, rec
    return out, text, rec if workload is not None else whatif


def _read_text(path: str) -> str:
    """A manifest's text, read at most MAX_MANIFEST_BYTES + 1 bytes (``/dev/zero`` or a huge
    file is refused, not read to the end)."""
    from .api.bounded_yaml import MAX_MANIFEST_BYTES

    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1)
        else:
            with Path(path).open("rb") as f:
                raw = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise CliError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _name_of(doc: Any) -> Any:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    return meta.get("name") if isinstance(meta, dict) else None


def _manifest_plans(a: argparse.Namespace) -> list[tuple[dict[str, Any], str, Any]]:
    from .api import InferenceCapacity, load_manifests
    from .patching import apply_strategic, build_change
    from .resolve import resolve

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
    results: list[tuple[dict[str, Any], str, Any]] = []
    for doc in docs.capacities:
        icap = InferenceCapacity.from_manifest(doc, ignore_status=True)
        spec = icap.spec
        dep = next(
            (
                d
                for d in others
                if d.get("kind") == "Deployment" and _name_of(d) == spec.target_ref.name
            ),
            None,
        )
        resolved = resolve(spec, dep, config_maps)
        if not resolved.supported:
            results.append(_unsupported_result(icap, resolved))
            continue
        plan = make_plan(_sizing_overrides(a, resolved.plan_input))
        rec = plan.recommendation
        flags = rec.flags(
            max_model_len=spec.policy.set_max_model_len,
            batched_tokens=spec.policy.set_max_num_batched_tokens,
            kv_cache_dtype=spec.policy.set_kv_cache_dtype,
            kv_cache_memory=spec.policy.use_kv_cache_memory_bytes,
        )
        remove = rec.removed_flags(kv_cache_memory=spec.policy.use_kv_cache_memory_bytes)
        extra: dict[str, Any] = {
            "name": icap.metadata.name,
            "namespace": icap.metadata.namespace,
            "mode": spec.mode,
            "engine_version": resolved.engine_version,
            "engine_version_source": resolved.engine_version_source,
            "flags": flags,
            "removed_flags": list(remove),
            "conflicts": list(resolved.conflicts),
            "supported": True,
        }
        patch: dict[str, Any] | None = None
        if dep is not None and resolved.container_index is not None and plan.fits:
            ro = rec.rollout
            change = build_change(
                dep,
                resolved.container_index,
                flags,
                resolved.running_flags,
                ro.replicas if spec.rollout.manage_replicas else None,
                {"maxSurge": ro.max_surge, "maxUnavailable": ro.max_unavailable}
                if spec.rollout.manage_strategy and ro.safe
                else None,
                remove=remove,
            )
            patch = change.patch
            extra["patch"] = {
                "target": f"deployment/{spec.target_ref.name}",
                "strategicMergePatch": patch,
                "changedFlags": {
                    k: {"from": v[0], "to": v[1]} for k, v in change.changed_flags.items()
                },
            }
            if patch:
                new = apply_strategic(dep, patch)
                c = new["spec"]["template"]["spec"]["containers"][resolved.container_index]
                extra["patch"]["container"] = {"command": c.get("command"), "args": c.get("args")}
        elif dep is None:
            extra["patch"] = {
                "target": f"deployment/{spec.target_ref.name}",
                "note": "Deployment not in the input: flags only",
                "flags": flags,
            }
        else:
            extra["patch"] = {
                "target": f"deployment/{spec.target_ref.name}",
                "note": f"not patched: {plan.reason}",
            }
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
        text += "\n\nWould patch " + extra["patch"]["target"] + ": "
        if patch:
            text += "\n" + yaml.safe_dump(patch, sort_keys=False).rstrip()
        elif "note" in extra["patch"]:
            text += extra["patch"]["note"]
        else:
            text += "nothing (already as recommended)"
        if resolved.conflicts:
            text += "\nConflicts: " + "; ".join(resolved.conflicts)
        results.append((out, text, plan))
    return results


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


def _unsupported_result(icap: Any, resolved: Any) -> tuple[dict[str, Any], str, None]:
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
            "note": "not patched: Supported=False",
        },
    }
    text = (
        f"{icap.metadata.name}: Supported=False (UnsupportedFlag): the vLLM container sets "
        f"what the ledger does not model, so no plan is made: {message}\n\nWould patch "
        f"deployment/{spec.target_ref.name}: nothing (Supported=False)"
    )
    return out, text, None


def _sizing_overrides(a: argparse.Namespace, inp: PlanInput) -> PlanInput:
    """--sizing / --preemption-target / --hbm-efficiency over the spec's (or the defaults)."""
    if a.preemption_target is not None and not 0 < a.preemption_target < 0.5:
        raise CliError(f"--preemption-target must be in (0, 0.5), got {a.preemption_target}")
    return replace(
        inp,
        sizing_rule=a.sizing or inp.sizing_rule,
        preemption_target=(
            a.preemption_target if a.preemption_target is not None else inp.preemption_target
        ),
        hbm_efficiency=a.hbm_efficiency if a.hbm_efficiency is not None else inp.hbm_efficiency,
    )


def _prices(a: argparse.Namespace) -> dict[str, float]:
    table = None
    if a.gpu_prices:
        try:
            table = yaml.safe_load(_read_text(a.gpu_prices))
        except yaml.YAMLError as exc:
            raise CliError(f"--gpu-prices {a.gpu_prices}: not valid YAML: {exc}") from None
        if not isinstance(table, dict):
            raise CliError(f"--gpu-prices {a.gpu_prices}: expected a mapping GPU: price")
    return parse_prices(a.gpu_price, table)


def _add_whatifs(a: argparse.Namespace, result: tuple[dict[str, Any], str, Any]) -> str:
    """levers[] always; options[] with --sweep. Returns the text to append to the table."""
    out, _, plan = result
    if plan is None:  # no plan was made (Supported=False): nothing to vary
        return ""
    found = levers(plan)
    out["levers"] = [
        {"name": x["name"], **{k: v for k, v in x.items() if k != "name"}} for x in found
    ]
    text = ""
    if found:
        text += "\n\nLevers (each a what-if plan)\n" + "\n".join(f"  {x['summary']}" for x in found)
    if a.sweep or a.gpu_price or a.gpu_prices or a.sweep_chart:
        prices = _prices(a)
        options = sweep(plan.input, prices)
        out["options"] = [o.to_json() for o in options]
        text += "\n\n" + sweep_table(out["options"], bool(prices))
        if a.sweep_chart:
            sweep_chart(out["options"], a.sweep_chart)
            print(f"sweep chart written to {a.sweep_chart}", file=sys.stderr)
    return text


def cmd_plan(a: argparse.Namespace) -> int:
    if a.file and a.model:
        raise CliError("plan: give either FILE.yaml or --model, not both")
    if a.file:
        results = _manifest_plans(a)
    else:
        results = [_flags_plan(a)]
    results = [(r[0], r[1] + _add_whatifs(a, r), r[2]) for r in results]
    if a.latency_chart:
        latency_chart(results[0][2], a.latency_chart)
        print(f"latency chart written to {a.latency_chart}", file=sys.stderr)
    if a.output == "json":
        payload: Any = results[0][0] if len(results) == 1 else [r[0] for r in results]
        print(json.dumps(payload, indent=2, default=str))
    elif a.output == "yaml":
        payload = results[0][0] if len(results) == 1 else [r[0] for r in results]
        print(yaml.safe_dump(json.loads(json.dumps(payload, default=str)), sort_keys=False))
    elif a.output == "patch":
        if not a.file:
            raise CliError("-o patch needs FILE.yaml (an InferenceCapacity and its Deployment)")
        # the strategic-merge patch itself, ready for `kubectl patch --type strategic`
        patches = [r[0].get("patch", {}).get("strategicMergePatch", {}) for r in results]
        print(json.dumps(patches[0] if len(patches) == 1 else patches, indent=2))
    else:
        print("\n\n".join(r[1] for r in results))
    if a.chart and results[0][2] is not None:
        chart(results[0][2], a.chart)
        print(f"chart written to {a.chart}", file=sys.stderr)
    refused = [r[0] for r in results if r[2] is None]
    if a.fail_if_not_fits and refused:
        for out in refused:
            names = "; ".join(f"{u['name']}: {u['why']}" for u in out["unsupported"])
            print(
                f"inference-capacity: error: {out['name']}: Supported=False: {names}",
                file=sys.stderr,
            )
        return EXIT_NOT_FITS
    if a.fail_if_not_fits and not all(r[2] is not None and r[2].fits for r in results):
        return EXIT_NOT_FITS
    return 0


def cmd_crd(_: argparse.Namespace) -> int:
    from .api.crd import render_crd_yaml

    sys.stdout.write(render_crd_yaml())
    return 0


def cmd_models(_: argparse.Namespace) -> int:
    for name in catalog_names():
        try:
            m = load_model(name)
            desc = (
                f"{m.model_type:<18} {m.num_parameters / 1e9:>8.2f}B  "
                f"{','.join(m.attention_kinds)}"
                + (f"  {m.quantization.method}" if m.quantization else "")
            )
        except ValueError as exc:
            desc = f"not sizeable: {exc}"
        print(f"{name:<50} {desc}")
    return 0


def cmd_gpus(_: argparse.Namespace) -> int:
    for g in list_gpus():
        bw = g.hbm_bandwidth_bytes_per_s
        print(
            f"{g.name:<18} {g.total_bytes / 2**30:>8.2f} GiB  "
            f"{(bw or 0) / 1e12:>5.2f} TB/s  {g.vendor}"
        )
    return 0


def cmd_run(a: argparse.Namespace) -> int:
    from .controller.main import run_operator

    code: int = run_operator(
        namespaces=a.namespace,
        standalone=a.standalone,
        peering=a.peering,
        liveness=a.liveness,
        metrics_port=a.metrics_port,
        verbose=a.verbose,
        priority=a.priority,
        prometheus_allowed_url_prefixes=a.prometheus_allowed_url_prefix,
    )
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    handlers = {
        "plan": cmd_plan,
        "crd": cmd_crd,
        "models": cmd_models,
        "gpus": cmd_gpus,
        "run": cmd_run,
    }
    try:
        return handlers[a.command](a)
    except (CliError, ValueError, KeyError, FileNotFoundError) as exc:
        msg = str(exc)
        if isinstance(exc, KeyError):
            msg = f"missing key {msg}"
        print(f"inference-capacity: error: {msg}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:
        return 0
    except (RecursionError, OverflowError, ZeroDivisionError, MemoryError) as exc:
        # input that slipped past the bounds: one line, not a traceback (a test fuzzes for it)
        print(
            f"inference-capacity: error: input out of bounds ({type(exc).__name__}: {exc})",
            file=sys.stderr,
        )
        return EXIT_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
