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
from .planner import Headroom, PlanInput, make_plan
from .report import chart, plan_json, table

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
    plan.add_argument("--model", help="catalog name (see `models`) or a config.json path")
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
    shape = load_model(a.model, quantization=a.quantization)
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
    base = PlanInput(
        model=shape,
        gpu=gpu,
        tp=a.tp or 1,
        pp=a.pp or 1,
        engine=settings,
        headroom=Headroom(operational_fraction=a.operational_headroom),
    )
    # what-if: vLLM at exactly these flags
    whatif = make_plan(
        replace(
            base, choose_utilization=a.gpu_memory_utilization is None, choose_max_num_seqs=False
        )
    )
    # recommendation: the utilization the ledger recommends (or the one for --kv-cache-gib)
    kv_pool = int(a.kv_cache_gib * 2**30) if a.kv_cache_gib is not None else None
    rec = make_plan(replace(base, kv_pool_bytes=kv_pool, choose_max_num_seqs=False))
    out = plan_json(whatif)
    out["recommendation"] = plan_json(rec)["recommendation"]
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
        table(whatif)
        + "\n\nRecommended: "
        + " ".join(f"--{k} {v}" for k, v in rec.recommendation.flags().items())
    )
    if kv_pool is not None and not rec.fits:
        text += f"\n\n--kv-cache-gib {a.kv_cache_gib:g}: {rec.reason}: {rec.message}"
        # --fail-if-not-fits judges the plan asked for: the inverse one
        return out, text, rec
    return out, text, whatif


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
    from .api.models import InferenceCapacity, load_manifests
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
    results = []
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
        plan = make_plan(resolved.plan_input)
        rec = plan.recommendation
        flags = rec.flags(
            max_model_len=spec.policy.set_max_model_len,
            batched_tokens=spec.policy.set_max_num_batched_tokens,
            kv_cache_dtype=spec.policy.set_kv_cache_dtype,
            kv_cache_memory=spec.policy.use_kv_cache_memory_bytes,
        )
        extra: dict[str, Any] = {
            "name": icap.metadata.name,
            "namespace": icap.metadata.namespace,
            "mode": spec.mode,
            "engine_version": resolved.engine_version,
            "engine_version_source": resolved.engine_version_source,
            "flags": flags,
            "conflicts": list(resolved.conflicts),
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
        out = plan_json(plan, extra)
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


def cmd_plan(a: argparse.Namespace) -> int:
    if a.file and a.model:
        raise CliError("plan: give either FILE.yaml or --model, not both")
    if a.file:
        results = _manifest_plans(a)
    else:
        results = [_flags_plan(a)]
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
    if a.chart:
        chart(results[0][2], a.chart)
        print(f"chart written to {a.chart}", file=sys.stderr)
    if a.fail_if_not_fits and not all(r[2].fits for r in results):
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
