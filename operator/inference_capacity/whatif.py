"""What-if plans: the levers of seed 003 and the cheapest fleet (issue 14, points 3 and 4).

A lever is a plan, not a rule of thumb: each one re-runs :func:`~inference_capacity.planner.
make_plan` with one input changed and reports what it buys (max-num-seqs, replicas, GPUs,
preemption probability, ITL):

* ``fp8-kv-cache``: ``--kv-cache-dtype fp8`` (1 byte per element instead of 2);
* ``max-model-len-p99``: ``--max-model-len`` at the largest cohort p99 context (prompt p99 +
  output p99, in whole blocks), with the fraction of requests it would reject (from the fitted
  distributions: the Monte Carlo pool's share longer than it);
* ``more-tensor-parallel`` / ``more-pipeline-parallel``: TP × 2 (when the attention heads divide)
  or PP + 1;
* ``larger-gpu``: the smallest catalog GPU with more memory;
* ``prefix-caching``: the cohorts' shared prefixes cached once per replica (vLLM V1's default),
  against the same workload with nothing shared (what turning it off would cost).

The sweep plans every catalog GPU × TP (× fp8 KV) for the workload, with replicas sized for the
peak plus the recovery replicas, and ranks the options that fit: meeting the ITL target first,
then by cost per hour and per million output tokens where prices are given, else by GPUs.
Cost per million output tokens = cost per hour / (output tokens per hour of the fleet at peak,
i.e. the replicas for the peak each at its share of it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .engines import SettingsError
from .hardware import Gpu, list_gpus
from .model import cdiv
from .planner import Plan, PlanCache, PlanInput, RolloutInput, make_plan
from .sizing import Cohort, Quantiles, Workload

#: Tensor-parallel sizes the sweep tries (a replica within one 8-GPU node).
SWEEP_TP = (1, 2, 4, 8)
SWEEP_KV = ("auto", "fp8")


class WhatIfError(ValueError):
    pass


# --- workload from flags ---------------------------------------------------------------------


def parse_quantiles(text: str, flag: str, minimum: int = 0) -> Quantiles:
    """``P50,P95,P99`` (tokens, non-decreasing)."""
    parts = text.split(",")
    if len(parts) != 3:
        raise WhatIfError(f"{flag}: expected P50,P95,P99 (three integers), got {text!r}")
    try:
        p50, p95, p99 = (int(x) for x in parts)
    except ValueError:
        raise WhatIfError(f"{flag}: expected P50,P95,P99 (three integers), got {text!r}") from None
    if min(p50, p95, p99) < minimum:
        raise WhatIfError(f"{flag}: quantiles must be >= {minimum}, got {text!r}")
    if not p50 <= p95 <= p99:
        raise WhatIfError(f"{flag}: quantiles must satisfy p50 <= p95 <= p99, got {text!r}")
    return Quantiles(p50, p95, p99)


def parse_cohort(text: str) -> Cohort:
    """``NAME:WEIGHT:P50,P95,P99:O50,O95,O99[:SHARED_PREFIX[:N]]``."""
    parts = text.split(":")
    flag = f"--cohort {text}"
    if not 4 <= len(parts) <= 6:
        raise WhatIfError(
            f"{flag}: expected NAME:WEIGHT:P50,P95,P99:O50,O95,O99[:SHARED_PREFIX[:N]]"
        )
    name = parts[0]
    if not name:
        raise WhatIfError(f"{flag}: the cohort needs a name")
    try:
        weight = float(parts[1])
    except ValueError:
        raise WhatIfError(f"{flag}: WEIGHT must be a number, got {parts[1]!r}") from None
    if not 0 < weight <= 1:
        raise WhatIfError(f"{flag}: WEIGHT must be in (0, 1], got {weight}")
    prompt = parse_quantiles(parts[2], f"{flag} (prompt tokens)")
    output = parse_quantiles(parts[3], f"{flag} (output tokens)", minimum=1)
    shared, n = 0, 1
    try:
        if len(parts) > 4:
            shared = int(parts[4])
        if len(parts) > 5:
            n = int(parts[5])
    except ValueError:
        raise WhatIfError(f"{flag}: SHARED_PREFIX and N must be integers") from None
    if shared < 0 or not 1 <= n <= 64:
        raise WhatIfError(f"{flag}: SHARED_PREFIX must be >= 0 and N in [1, 64]")
    return Cohort(name, weight, prompt, output, shared, n)


def parse_burst(text: str, cohorts: Sequence[Cohort]) -> tuple[float, ...]:
    """``NAME=WEIGHT,...`` → one weight per cohort (absent ones 0)."""
    names = [c.name for c in cohorts]
    weights = dict.fromkeys(names, 0.0)
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or key not in weights:
            raise WhatIfError(
                f"--burst: {item!r} must be NAME=WEIGHT with NAME one of {', '.join(names)}"
            )
        try:
            weights[key] = float(value)
        except ValueError:
            raise WhatIfError(f"--burst: weight of {key} must be a number, got {value!r}") from None
        if not 0 <= weights[key] <= 1:
            raise WhatIfError(f"--burst: weight of {key} must be in [0, 1]")
    if not any(weights.values()):
        raise WhatIfError("--burst: at least one weight must be positive")
    return tuple(weights[n] for n in names)


def workload_from_flags(
    prompt: str | None,
    output: str | None,
    cohorts: Sequence[str],
    peak: int | None,
    itl_target_ms: float | None,
    shared_prefix: int = 0,
    n: int = 1,
    burst: str | None = None,
    itl_quantile: str = "p95",
    ttft_target_ms: float | None = None,
) -> Workload | None:
    """The flags form's workload, or None when no length distribution is given."""
    parsed: list[Cohort] = [parse_cohort(c) for c in cohorts]
    if (prompt is None) != (output is None):
        raise WhatIfError("--prompt-tokens and --output-tokens go together")
    if prompt is not None and output is not None:
        parsed.insert(
            0,
            Cohort(
                "default",
                1.0,
                parse_quantiles(prompt, "--prompt-tokens"),
                parse_quantiles(output, "--output-tokens", minimum=1),
                shared_prefix,
                n,
            ),
        )
    names = [c.name for c in parsed]
    if len(set(names)) != len(names):
        raise WhatIfError(f"--cohort: duplicate cohort names in {', '.join(names)}")
    if itl_target_ms is not None and not itl_target_ms > 0:
        raise WhatIfError(f"--itl-target-ms must be > 0, got {itl_target_ms}")
    if ttft_target_ms is not None and not ttft_target_ms > 0:
        raise WhatIfError(f"--ttft-target-ms must be > 0, got {ttft_target_ms}")
    if itl_quantile not in ("p95", "p99"):
        raise WhatIfError(f"--itl-quantile must be p95 or p99, got {itl_quantile!r}")
    if not parsed:
        if burst is not None:
            raise WhatIfError("--burst needs cohorts (--cohort or --prompt-tokens)")
        if peak is None and itl_target_ms is None and ttft_target_ms is None:
            return None
        raise WhatIfError(
            "--peak-concurrency/--itl-target-ms/--ttft-target-ms need a length distribution: "
            "--prompt-tokens and --output-tokens, or --cohort"
        )
    return Workload(
        tuple(parsed),
        peak_concurrency=peak,
        itl_target_ms=itl_target_ms,
        itl_quantile=itl_quantile,
        ttft_target_ms=ttft_target_ms,
        burst_weights=parse_burst(burst, parsed) if burst is not None else None,
    )


# --- a plan in a few numbers -----------------------------------------------------------------


def summary(plan: Plan) -> dict[str, Any]:
    """The numbers a person compares plans by."""
    rec = plan.recommendation
    ro = rec.rollout
    d = plan.distribution
    lat = plan.latency
    at = lat.at_max_num_seqs if lat is not None else None
    return {
        "fits": plan.fits,
        "reason": plan.reason,
        "gpu": plan.input.gpu.name,
        "tp": plan.input.tp,
        "pp": plan.input.pp,
        "kv_cache_dtype": plan.prediction.settings.kv_cache_dtype,
        "max_model_len": rec.max_model_len,
        "kv_token_capacity": plan.prediction.kv_cache_tokens,
        "max_num_seqs": rec.max_num_seqs,
        "replicas": ro.replicas,
        "gpus": ro.replicas * plan.input.tp * plan.input.pp,
        "preemption_probability": (
            round(d.probability(rec.max_num_seqs), 5) if d is not None else None
        ),
        "itl_ms_p95": round(at.itl_ms_p95, 3) if at is not None else None,
        "ttft_ms_p95": round(at.ttft_ms_p95, 1) if at is not None else None,
        "output_tokens_per_s": round(at.output_tokens_per_s, 1) if at is not None else None,
    }


def _try(inp: PlanInput, cache: PlanCache | None = None) -> Plan | None:
    """The plan, or None where vLLM would refuse the settings; ``cache``: the caller's memo
    when it plans several in a row on one thread (a sweep)."""
    try:
        return make_plan(inp, cache)
    except (SettingsError, ValueError):
        return None


def _words(name: str, base: dict[str, Any], new: dict[str, Any], extra: str = "") -> str:
    if not new["fits"]:
        return f"{name}: does not fit ({new['reason']})"
    return (
        f"{name}: max-num-seqs {base['max_num_seqs']} → {new['max_num_seqs']}, replicas "
        f"{base['replicas']} → {new['replicas']}, GPUs {base['gpus']} → {new['gpus']}" + extra
    )


def _lever(name: str, what: str, base: Plan, plan: Plan | None, extra: str = "") -> dict[str, Any]:
    b = summary(base)
    if plan is None:
        return {"name": name, "change": what, "plan": None, "summary": f"{name}: not possible"}
    s = summary(plan)
    delta = {k: s[k] - b[k] for k in ("max_num_seqs", "replicas", "gpus", "kv_token_capacity")}
    return {
        "name": name,
        "change": what,
        "plan": s,
        "delta": delta,
        "summary": _words(name, b, s, extra),
    }


def _larger_gpu(gpu: Gpu) -> Gpu | None:
    bigger = [
        g
        for g in list_gpus()
        if g.total_bytes > gpu.total_bytes * 1.05
        and g.vendor == gpu.vendor
        and g.hbm_bandwidth_bytes_per_s
    ]
    return min(bigger, key=lambda g: g.total_bytes) if bigger else None


def levers(base: Plan) -> list[dict[str, Any]]:
    """Every lever of seed 003 that applies, each as a what-if plan."""
    inp = base.input
    out: list[dict[str, Any]] = []
    rs = base.prediction.settings
    if rs.kv_cache_dtype in ("auto", "bfloat16", "float16"):  # a 16-bit KV (or fp32)
        p = _try(replace(inp, engine=replace(inp.engine, kv_cache_dtype="fp8")))
        out.append(_lever("fp8-kv-cache", "--kv-cache-dtype fp8", base, p))
    wl = inp.workload
    if wl is not None and wl.cohorts:
        bs = rs.block_size
        p99 = max(c.prompt.p99 + c.output.p99 for c in wl.cohorts)
        new_len = cdiv(p99, bs) * bs
        if new_len < rs.max_model_len:
            rejected = None
            if base.distribution is not None:
                rejected = base.distribution.mixes[0].rejected_fraction(new_len)
            p = _try(replace(inp, engine=replace(inp.engine, max_model_len=new_len)))
            lever = _lever(
                "max-model-len-p99",
                f"--max-model-len {new_len}",
                base,
                p,
                f"; rejects {rejected:.2%} of requests" if rejected is not None else "",
            )
            lever["rejected_fraction"] = round(rejected, 5) if rejected is not None else None
            out.append(lever)
    heads = inp.model.num_attention_heads
    # the smallest larger TP that fits (TP 2 may not be enough where TP 4 is)
    tps = [t for t in (inp.tp * 2, inp.tp * 4, inp.tp * 8) if t <= 8 and heads % t == 0]
    if tps:
        tried = [(t, _try(replace(inp, tp=t))) for t in tps]
        t, p = next(((t, p) for t, p in tried if p is not None and p.fits), tried[0])
        out.append(_lever("more-tensor-parallel", f"--tensor-parallel-size {t}", base, p))
    if inp.model.num_layers >= inp.pp + 1:
        p = _try(replace(inp, pp=inp.pp + 1))
        out.append(
            _lever("more-pipeline-parallel", f"--pipeline-parallel-size {inp.pp + 1}", base, p)
        )
    bigger = _larger_gpu(inp.gpu)
    if bigger is not None:
        # the smallest larger GPU that fits
        larger = [bigger]
        while (nxt := _larger_gpu(larger[-1])) is not None and len(larger) < 8:
            larger.append(nxt)
        tried_gpus = [(g, _try(replace(inp, gpu=g))) for g in larger]
        g, p = next(((g, p) for g, p in tried_gpus if p is not None and p.fits), tried_gpus[0])
        out.append(_lever("larger-gpu", f"GPU {g.name}", base, p))
    if wl is not None and any(c.shared_prefix > 0 for c in wl.cohorts):
        off = replace(wl, cohorts=tuple(replace(c, shared_prefix=0) for c in wl.cohorts))
        p = _try(replace(inp, workload=off))
        lever = _lever("prefix-caching", "prefix caching on (vLLM V1's default)", base, base)
        if p is not None:
            s, b = summary(p), summary(base)
            lever["without"] = s
            lever["summary"] = (
                f"prefix-caching: keeps the shared prefixes once per replica; without it "
                f"max-num-seqs {b['max_num_seqs']} → {s['max_num_seqs']}, replicas "
                f"{b['replicas']} → {s['replicas']}: keep --enable-prefix-caching on"
            )
        out.append(lever)
    return out


# --- the sweep -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Option:
    plan: Plan
    replicas: int
    gpus: int
    cost_per_hour: float | None
    cost_per_million_output_tokens: float | None
    fleet_output_tokens_per_s: float | None
    meets_itl: bool | None  # meets every latency target given (ITL and TTFT)
    binds: str | None = None  # the target that stops max-num-seqs: "itl", "ttft" or None

    def to_json(self) -> dict[str, Any]:
        s = summary(self.plan)
        return {
            "gpu": self.plan.input.gpu.name,
            "tp": self.plan.input.tp,
            "pp": self.plan.input.pp,
            "kv_cache_dtype": s["kv_cache_dtype"],
            "replicas": self.replicas,
            "gpus": self.gpus,
            "max_num_seqs": s["max_num_seqs"],
            "preemption_probability": s["preemption_probability"],
            "itl_ms_p95": s["itl_ms_p95"],
            "fleet_output_tokens_per_s": (
                round(self.fleet_output_tokens_per_s, 1)
                if self.fleet_output_tokens_per_s is not None
                else None
            ),
            "cost_per_hour": (
                round(self.cost_per_hour, 4) if self.cost_per_hour is not None else None
            ),
            "cost_per_million_output_tokens": (
                round(self.cost_per_million_output_tokens, 4)
                if self.cost_per_million_output_tokens is not None
                else None
            ),
            "meets_itl": self.meets_itl,
            "meets_latency_targets": self.meets_itl,
            "ttft_ms_p95": s["ttft_ms_p95"],
            "binding_target": self.binds,
        }


def option(plan: Plan, price: float | None) -> Option:
    """One sweep option: its fleet, cost and whether it meets the ITL target."""
    ro = plan.recommendation.rollout
    gpus = ro.replicas * plan.input.tp * plan.input.pp
    lat = plan.latency
    fleet = None
    if lat is not None and lat.at_peak is not None:
        fleet = ro.min_replicas_for_peak * lat.at_peak.output_tokens_per_s
    cost = gpus * price if price is not None else None
    per_million = cost / (fleet * 3600 / 1e6) if cost is not None and fleet else None
    wl = plan.input.workload
    meets = None
    binds = None
    if wl is not None and (wl.itl_target_ms is not None or wl.ttft_target_ms is not None):
        at = lat.at_max_num_seqs if lat is not None else None
        meets = at is not None
        if at is not None and wl.itl_target_ms is not None:
            meets = meets and at.itl_target_ms(wl.itl_quantile) <= wl.itl_target_ms
        if at is not None and wl.ttft_target_ms is not None:
            meets = meets and at.ttft_ms_p95 <= wl.ttft_target_ms
        limited = plan.seqs.limited_by if plan.seqs is not None else None
        binds = limited if limited in ("itl", "ttft") else None
    return Option(plan, ro.replicas, gpus, cost, per_million, fleet, meets, binds)


def rank(options: Sequence[Option], priced: bool) -> list[Option]:
    """Meeting the ITL target first; then cost per hour and per million output tokens (priced),
    else GPUs; ties by higher fleet throughput."""

    def key(o: Option) -> tuple[Any, ...]:
        miss = o.meets_itl is False
        tput = -(o.fleet_output_tokens_per_s or 0.0)
        if priced:
            return (
                miss,
                o.cost_per_hour if o.cost_per_hour is not None else math.inf,
                o.cost_per_million_output_tokens
                if o.cost_per_million_output_tokens is not None
                else math.inf,
                o.gpus,
                tput,
            )
        return (miss, o.gpus, tput)

    return sorted(options, key=key)


def sweep(
    base: PlanInput,
    prices: Mapping[str, float],
    gpus: Sequence[Gpu] | None = None,
    tps: Sequence[int] = SWEEP_TP,
    kv_dtypes: Sequence[str] = SWEEP_KV,
) -> list[Option]:
    """Every GPU × TP × KV dtype that serves the workload, ranked. Replica bounds are lifted
    (the sweep asks what the peak needs); ``prices`` are per GPU-hour by catalog name."""
    if base.workload is None or base.workload.peak_concurrency is None:
        raise WhatIfError("--sweep needs a workload with a peak concurrency to size the fleet")
    heads = base.model.num_attention_heads
    out: list[Option] = []
    cache = PlanCache()  # this call's plans, in a row on this thread
    unpriced = [g for g in prices if g not in {x.name for x in (gpus or list_gpus())}]
    if unpriced:
        raise WhatIfError(f"--gpu-price: unknown GPU(s) {', '.join(unpriced)}")
    for gpu in gpus or list_gpus():
        if prices and gpu.name not in prices:
            continue  # priced sweeps compare the priced GPUs
        for tp in tps:
            if heads % tp:
                continue
            for kv in kv_dtypes:
                if kv != "auto" and not gpu.supports_fp8:
                    continue
                inp = replace(
                    base,
                    latency_curve=False,  # the options compare the chosen batch only
                    gpu=gpu,
                    tp=tp,
                    engine=replace(base.engine, kv_cache_dtype=kv),
                    rollout=RolloutInput(
                        base.rollout.min_replicas, 1 << 20, base.rollout.spare_gpus
                    ),
                )
                plan = _try(inp, cache)
                if plan is None or not plan.fits:
                    continue
                o = option(plan, prices.get(gpu.name))
                if o.meets_itl is False:
                    continue  # ranks only options meeting the latency targets
                out.append(o)
    return rank(out, bool(prices))


def parse_prices(items: Sequence[str], table: Mapping[str, Any] | None) -> dict[str, float]:
    """``--gpu-price NAME=PRICE`` (repeatable) over a YAML table ``{NAME: PRICE}``; names are
    resolved through the catalog."""
    from .hardware import get_gpu

    raw: dict[str, Any] = dict(table or {})
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise WhatIfError(f"--gpu-price: {item!r} must be NAME=PRICE (per GPU-hour)")
        raw[name] = value
    prices: dict[str, float] = {}
    for name, value in raw.items():
        try:
            price = float(value)
        except (TypeError, ValueError):
            raise WhatIfError(
                f"--gpu-price: price of {name} must be a number, got {value!r}"
            ) from None
        if not price > 0 or not math.isfinite(price):
            raise WhatIfError(f"--gpu-price: price of {name} must be positive, got {price}")
        try:
            prices[get_gpu(str(name)).name] = price
        except ValueError as exc:
            raise WhatIfError(f"--gpu-price: {exc}") from None
    return prices
