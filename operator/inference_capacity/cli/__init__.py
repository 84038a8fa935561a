"""``inference-capacity``: plan / observe / crd / models / gpus / run.

The parts: :mod:`.parser` (every flag), :mod:`.flags` (``plan --model ...``: what-ifs),
:mod:`.manifest` (``plan FILE``: the operator's decision for each resource and its patch),
:mod:`.common` (exit codes, errors, input); the commands and :func:`main` here.

Every expected failure (bad input, unknown model or GPU, a config the ledger cannot size) is one
line on stderr naming the field, and exit status 2; a plan that does not fit exits 1 with
``--fail-if-not-fits`` (for CI), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from ..hardware import list_gpus
from ..model import catalog_names, load_model
from ..report import chart, latency_chart
from ..units import GiB
from .common import (
    EXIT_INPUT,
    EXIT_NO_DEPLOYMENT,
    EXIT_NOT_FITS,
    EXIT_NOTHING_TO_PATCH,
    EXIT_REFUSED,
    CliError,
)
from .flags import _add_whatifs, _flags_plan
from .manifest import _manifest_plans, _print_patches
from .observe import cmd_observe
from .parser import build_parser

__all__ = [
    "EXIT_INPUT",
    "EXIT_NOT_FITS",
    "EXIT_NOTHING_TO_PATCH",
    "EXIT_NO_DEPLOYMENT",
    "EXIT_REFUSED",
    "CliError",
    "build_parser",
    "main",
]


def cmd_plan(a: argparse.Namespace) -> int:
    if a.file and a.model:
        raise CliError("plan: give either FILE.yaml or --model, not both")
    if a.observe and not a.file:
        raise CliError("plan: --observe reads spec.workload.fromPrometheus: it needs FILE.yaml")
    if a.file:
        results = _manifest_plans(a)
    else:
        results = [_flags_plan(a)]
    results = [(r[0], r[1] + _add_whatifs(a, r), r[2]) for r in results]
    patch_code = 0
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
        patch_code = _print_patches(results)
    else:
        print("\n\n".join(r[1] for r in results))
    if a.chart and results[0][2] is not None:
        chart(results[0][2], a.chart)
        print(f"chart written to {a.chart}", file=sys.stderr)
    errors = [r[0]["error"] for r in results if r[0].get("error")]
    for e in errors:
        print(f"inference-capacity: error: {e}", file=sys.stderr)
    if errors:
        return EXIT_NOT_FITS
    # Supported=False: no plan (a manifest), or a what-if of the text-only profile (--model)
    refused = [r[0] for r in results if r[0].get("supported") is False]
    if a.fail_if_not_fits and refused:
        for out in refused:
            names = "; ".join(f"{u['name']}: {u['why']}" for u in out["unsupported"])
            who = out.get("name") or out["model"]["id"]
            print(f"inference-capacity: error: {who}: Supported=False: {names}", file=sys.stderr)
        return EXIT_NOT_FITS
    if a.fail_if_not_fits and not all(r[2] is not None and r[2].fits for r in results):
        return EXIT_NOT_FITS
    if a.fail_if_not_fits:
        # the plan fits but the operator would refuse to apply it (a spec/container conflict,
        # too few GPUs per pod, a foreign PDB, no safe rollout)
        refusals = [r[0] for r in results if (r[0].get("patch") or {}).get("action") == "refuse"]
        for out in refusals:
            print(
                f"inference-capacity: error: {out.get('name')}: {out['patch']['note']}",
                file=sys.stderr,
            )
        if refusals:
            return EXIT_NOT_FITS
    return patch_code


def cmd_crd(_: argparse.Namespace) -> int:
    from ..api.crd import render_crd_yaml

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
            f"{g.name:<18} {g.total_bytes / GiB:>8.2f} GiB  "
            f"{(bw or 0) / 1e12:>5.2f} TB/s  {g.vendor}"
        )
    return 0


def cmd_run(a: argparse.Namespace) -> int:
    from ..controller import k8s
    from ..controller.main import run_operator
    from ..settings import Settings

    try:
        config = Settings.from_env().replace(
            namespaces=tuple(a.namespace),
            standalone=a.standalone,
            peering=a.peering,
            liveness=a.liveness,
            metrics_port=a.metrics_port,
            verbose=a.verbose,
            **({"peering_priority": a.priority} if a.priority is not None else {}),
            **(
                {"prometheus_allowed_url_prefixes": tuple(a.prometheus_allowed_url_prefix)}
                if a.prometheus_allowed_url_prefix
                else {}
            ),
        )
        code: int = run_operator(config)
    except k8s.Unreachable as exc:
        raise CliError(f"run: {exc}") from None
    return code


def cmd_ui(a: argparse.Namespace) -> int:
    from ..ui.server import serve

    if not 0 <= a.port <= 65535:
        raise CliError(f"ui: --port must be in [0, 65535], got {a.port}")
    return serve(a.host, a.port)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    handlers = {
        "plan": cmd_plan,
        "crd": cmd_crd,
        "models": cmd_models,
        "gpus": cmd_gpus,
        "run": cmd_run,
        "observe": cmd_observe,
        "ui": cmd_ui,
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
