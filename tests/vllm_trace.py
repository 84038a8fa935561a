"""A synthetic but realistic vLLM metrics trace, in OpenMetrics, for backfilling a Prometheus.

What it models (vLLM V1 metric names unless a pod is marked legacy):

- a ``llama-8b`` Deployment of three pods for six hours, plus a canary that lived four minutes
  and served 12 requests, and one pod that restarted in place (counters reset) mid-trace;
- one legacy pod exporting the older names (``vllm:gpu_cache_usage_perc``,
  ``vllm:num_preemptions``);
- a ``longctx`` Deployment whose prompts mostly exceed the last finite bucket (20000 tokens for
  max-model-len 32768), so its upper quantiles fall in ``+Inf``;
- cohorts with lognormal lengths (long tails), a diurnal load swing, and a ten-minute burst
  that saturates ``max-num-seqs`` (requests wait, KV fills, preemptions happen);
- histograms with vLLM's 1-2-5 buckets up to max-model-len, prefix-cache counters in tokens,
  and ``vllm:cache_config_info`` with the pool's labels.

Every request is generated individually from a seeded RNG, so the trace knows the truth the
tests compare against: the empirical quantiles of the lengths it drew (and the lognormal
mixture's own quantiles), the fleet-wide concurrency at every scrape, each pod's KV usage
samples, the preemption and prefix-cache totals. Truth functions take the pods a selector
covers and compute what Prometheus should compute (same quantile rules, same staleness).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

INTERVAL = 30  # seconds between scrapes
MAX_MODEL_LEN = 32768
NAMESPACE = "default"


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, … while ≤ max_value."""
    out: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return out
            out.append(value)
        exponent += 1


BUCKETS = build_1_2_5_buckets(MAX_MODEL_LEN)


@dataclass(frozen=True)
class CohortSpec:
    name: str
    weight: float
    prompt_median: float
    prompt_sigma: float
    output_median: float
    output_sigma: float
    shared_prefix: int = 0  # tokens of system prompt a prefix-cache hit saves
    prefix_hit_prob: float = 0.0


@dataclass(frozen=True)
class PodSpec:
    name: str
    deployment: str
    model: str
    ip: str
    start: int  # seconds after trace start
    end: int  # seconds after trace start (last scrape)
    rate: float  # requests per second at load factor 1
    num_gpu_blocks: int
    gpu_memory_utilization: float
    block_size: int = 16
    max_num_seqs: int = 256
    legacy_names: bool = False
    restart_at: int | None = None  # seconds after trace start: down for 60 s, counters reset
    fixed_requests: int | None = None  # exactly this many requests over the pod's life

    def labels(self) -> str:
        return (
            f'engine="0",instance="{self.ip}:8000",job="vllm",model_name="{self.model}",'
            f'namespace="{NAMESPACE}",pod="{self.name}"'
        )


LLAMA_COHORTS = (
    CohortSpec("chat", 0.6, 700, 0.6, 150, 0.7, shared_prefix=400, prefix_hit_prob=0.8),
    CohortSpec("rag", 0.3, 3000, 0.45, 300, 0.5, shared_prefix=1200, prefix_hit_prob=0.5),
    CohortSpec("agent", 0.1, 6500, 0.5, 700, 0.6),
)
LONGCTX_COHORTS = (CohortSpec("docs", 1.0, 14000, 0.5, 250, 0.5),)
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
LONGCTX = "Qwen/Qwen2.5-7B-Instruct-1M"


@dataclass
class PodSeries:
    """Everything one pod exported, scrape by scrape, plus the requests behind it."""

    spec: PodSpec
    times: list[int] = field(default_factory=list)
    prompt_buckets: list[list[int]] = field(default_factory=list)  # cumulative per le, +Inf
    prompt_sum: list[int] = field(default_factory=list)
    output_buckets: list[list[int]] = field(default_factory=list)
    output_sum: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    kv_usage: list[float] = field(default_factory=list)
    preemptions: list[int] = field(default_factory=list)
    prefix_hits: list[int] = field(default_factory=list)
    prefix_queries: list[int] = field(default_factory=list)
    prompts: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    total_preemptions: int = 0
    total_hits: int = 0
    total_queries: int = 0


@dataclass
class Trace:
    start: int  # unix seconds of the first scrape
    end: int  # unix seconds of the last scrape
    pods: dict[str, PodSeries]
    cohorts: dict[str, tuple[CohortSpec, ...]]  # per deployment
    burst: tuple[int, int]  # unix seconds

    def select(self, deployment: str | None = None, pods: Iterable[str] = ()) -> list[PodSeries]:
        names = set(pods)
        return [
            p
            for p in self.pods.values()
            if (deployment is None or p.spec.deployment == deployment)
            and (not names or p.spec.name in names)
        ]

    # ---- truth, as Prometheus should compute it --------------------------------------------

    @staticmethod
    def requests(pods: Sequence[PodSeries], which: str) -> list[int]:
        out: list[int] = []
        for p in pods:
            out.extend(p.prompts if which == "prompt" else p.outputs)
        return sorted(out)

    @classmethod
    def true_quantile(cls, pods: Sequence[PodSeries], which: str, q: float) -> int:
        """The empirical quantile: the ceil(q·N)-th smallest length (what bucket counts rank)."""
        values = cls.requests(pods, which)
        return values[max(0, math.ceil(q * len(values)) - 1)]

    def mixture_quantile(self, deployment: str, which: str, q: float) -> float:
        """The quantile of the lognormal mixture the generator drew from (no truncation)."""
        cohorts = self.cohorts[deployment]
        total = sum(c.weight for c in cohorts)

        def cdf(x: float) -> float:
            acc = 0.0
            for c in cohorts:
                median, sigma = (
                    (c.prompt_median, c.prompt_sigma)
                    if which == "prompt"
                    else (c.output_median, c.output_sigma)
                )
                z = (math.log(x) - math.log(median)) / sigma
                acc += c.weight / total * 0.5 * (1 + math.erf(z / math.sqrt(2)))
            return acc

        lo, hi = 1e-3, 1e7
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
        return math.sqrt(lo * hi)

    def peak_concurrency(self, pods: Sequence[PodSeries]) -> int:
        """Max over scrape instants of Σ pods (running + waiting). Every pod's last sample before
        a gap or its end is 0 (it drained), so staleness never carries a stale non-zero."""
        totals: dict[int, int] = {}
        for p in pods:
            for t, r, w in zip(p.times, p.running, p.waiting, strict=True):
                totals[t] = totals.get(t, 0) + r + w
        return max(totals.values())

    @staticmethod
    def quantile_over_time(values: Sequence[float], q: float) -> float:
        """PromQL's ``quantile_over_time`` (linear between closest ranks)."""
        v = sorted(values)
        rank = q * (len(v) - 1)
        lower = max(0, math.floor(rank))
        upper = min(len(v) - 1, lower + 1)
        weight = rank - math.floor(rank)
        return v[lower] * (1 - weight) + v[upper] * weight

    def kv_usage_p95(self, pods: Sequence[PodSeries]) -> float:
        return max(self.quantile_over_time(p.kv_usage, 0.95) for p in pods)

    @staticmethod
    def preemptions_per_hour(pods: Sequence[PodSeries]) -> float:
        total = sum(p.total_preemptions for p in pods)
        span = max(p.times[-1] for p in pods) - min(p.times[0] for p in pods)
        return total / (span / 3600.0)

    @staticmethod
    def prefix_hit_rate(pods: Sequence[PodSeries]) -> float:
        return sum(p.total_hits for p in pods) / sum(p.total_queries for p in pods)

    # ---- exposition ------------------------------------------------------------------------

    def openmetrics(self) -> str:
        out: list[str] = []
        pods = sorted(self.pods.values(), key=lambda p: p.spec.name)
        les = [f"{float(b)}" for b in BUCKETS] + ["+Inf"]
        for family, pick_b, pick_s in (
            ("vllm:request_prompt_tokens", "prompt_buckets", "prompt_sum"),
            ("vllm:request_generation_tokens", "output_buckets", "output_sum"),
        ):
            out.append(f"# TYPE {family} histogram")
            for p in pods:
                lab = p.spec.labels()
                buckets: list[list[int]] = getattr(p, pick_b)
                sums: list[int] = getattr(p, pick_s)
                for t, cum, s in zip(p.times, buckets, sums, strict=True):
                    for le, c in zip(les, cum, strict=True):
                        out.append(f'{family}_bucket{{{lab},le="{le}"}} {c} {t}')
                    out.append(f"{family}_count{{{lab}}} {cum[-1]} {t}")
                    out.append(f"{family}_sum{{{lab}}} {s} {t}")

        def family(
            name: str, kind: str, sample: str, attr: str, which: Iterable[PodSeries]
        ) -> None:
            chosen = list(which)
            if not chosen:
                return
            out.append(f"# TYPE {name} {kind}")
            for p in chosen:
                lab = p.spec.labels()
                for t, v in zip(p.times, getattr(p, attr), strict=True):
                    out.append(f"{sample}{{{lab}}} {v!r} {t}")

        modern = [p for p in pods if not p.spec.legacy_names]
        legacy = [p for p in pods if p.spec.legacy_names]
        family("vllm:num_requests_running", "gauge", "vllm:num_requests_running", "running", pods)
        family("vllm:num_requests_waiting", "gauge", "vllm:num_requests_waiting", "waiting", pods)
        family("vllm:kv_cache_usage_perc", "gauge", "vllm:kv_cache_usage_perc", "kv_usage", modern)
        family(
            "vllm:gpu_cache_usage_perc", "gauge", "vllm:gpu_cache_usage_perc", "kv_usage", legacy
        )
        family(
            "vllm:num_preemptions",
            "counter",
            "vllm:num_preemptions_total",
            "preemptions",
            modern,
        )
        # Older vLLM: the counter stored without the _total suffix (an untyped family here, as
        # OpenMetrics would otherwise require the suffix).
        family(
            "vllm:num_preemptions_legacy", "unknown", "vllm:num_preemptions", "preemptions", legacy
        )
        family(
            "vllm:prefix_cache_hits", "counter", "vllm:prefix_cache_hits_total", "prefix_hits", pods
        )
        family(
            "vllm:prefix_cache_queries",
            "counter",
            "vllm:prefix_cache_queries_total",
            "prefix_queries",
            pods,
        )
        out.append("# TYPE vllm:cache_config_info gauge")
        for p in pods:
            ps = p.spec
            info = (
                f'block_size="{ps.block_size}",cache_dtype="auto",enable_prefix_caching="True",'
                f'gpu_memory_utilization="{ps.gpu_memory_utilization}",'
                f'num_cpu_blocks="0",num_gpu_blocks="{ps.num_gpu_blocks}",'
                f"{ps.labels()}"
            )
            for t in p.times:
                out.append(f"vllm:cache_config_info{{{info}}} 1.0 {t}")
        out.append("# EOF")
        return "\n".join(out) + "\n"


def default_pods(duration: int) -> list[PodSpec]:
    canary_start = duration // 3
    return [
        PodSpec("llama-8b-6d5f8-a1", "llama-8b", LLAMA, "10.0.0.11", 0, duration, 1.2, 27910, 0.9),
        PodSpec(
            "llama-8b-6d5f8-b2",
            "llama-8b",
            LLAMA,
            "10.0.0.12",
            0,
            duration,
            1.2,
            27910,
            0.9,
            restart_at=duration // 2,
        ),
        PodSpec(
            "llama-8b-6d5f8-c3",
            "llama-8b",
            LLAMA,
            "10.0.0.13",
            0,
            duration,
            1.2,
            27910,
            0.9,
            legacy_names=True,
        ),
        PodSpec(
            "llama-8b-canary-x9",
            "llama-8b",
            LLAMA,
            "10.0.0.14",
            canary_start,
            canary_start + 240,
            0.05,
            28730,
            0.92,
            fixed_requests=12,
        ),
        PodSpec("longctx-7c4b9-z1", "longctx", LONGCTX, "10.0.1.21", 0, duration, 0.15, 61200, 0.9),
    ]


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(median), sigma)


def generate(
    end: int, *, duration: int = 6 * 3600, seed: int = 20250505, pods: list[PodSpec] | None = None
) -> Trace:
    """A trace whose last scrape is at ``end`` (unix seconds, a multiple of INTERVAL)."""
    if end % INTERVAL:
        raise ValueError("end must be a multiple of INTERVAL")
    rng = random.Random(seed)
    start = end - duration
    burst = (start + duration * 2 // 3, start + duration * 2 // 3 + 600)
    specs = pods if pods is not None else default_pods(duration)
    cohorts = {"llama-8b": LLAMA_COHORTS, "longctx": LONGCTX_COHORTS}
    trace = Trace(start, end, {}, cohorts, burst)
    for spec in specs:
        trace.pods[spec.name] = _pod(rng, spec, start, burst, cohorts[spec.deployment])
    return trace


def _pod(
    rng: random.Random,
    spec: PodSpec,
    start: int,
    burst: tuple[int, int],
    cohorts: Sequence[CohortSpec],
) -> PodSeries:
    s = PodSeries(spec)
    nb = len(BUCKETS) + 1
    weights = [c.weight for c in cohorts]
    steps = list(range(start + spec.start, start + spec.end + 1, INTERVAL))
    restart = start + spec.restart_at if spec.restart_at is not None else None
    fixed_left = spec.fixed_requests
    fixed_slots = max(1, len(steps) - 2)  # requests arrive between the first and last scrape

    def reset() -> tuple[list[int], list[int], list[int]]:
        return [0] * nb, [0] * nb, [0, 0, 0, 0, 0]  # prompt, output, (psum, osum, pre, hit, q)

    pb, ob, acc = reset()
    for i, t in enumerate(steps):
        if restart is not None and restart <= t < restart + 60:
            continue  # the pod is down
        first_after_restart = restart is not None and restart + 60 <= t < restart + 60 + INTERVAL
        if first_after_restart:
            pb, ob, acc = reset()
        last_before_gap = restart is not None and t < restart <= t + INTERVAL
        edge = i == 0 or i == len(steps) - 1 or first_after_restart or last_before_gap
        in_burst = burst[0] <= t < burst[1]
        load = 1.0 + 0.35 * math.sin(2 * math.pi * (t - start) / (6 * 3600))
        if in_burst:
            load *= 6.0  # arrivals; queueing also stretches latency (below)
        # arrivals in the interval ending at t (none before the first scrape or after a reset)
        if i == 0 or first_after_restart:
            n = 0
        elif fixed_left is not None:
            n = fixed_left // fixed_slots + (1 if i - 1 < fixed_left % fixed_slots else 0)
            n = n if 1 <= i <= fixed_slots else 0
        else:
            lam = spec.rate * load * INTERVAL
            n = max(0, round(rng.gauss(lam, math.sqrt(lam))))
        for _ in range(n):
            c = rng.choices(cohorts, weights)[0]
            p = min(
                MAX_MODEL_LEN - 1, max(1, round(_lognormal(rng, c.prompt_median, c.prompt_sigma)))
            )
            o = min(
                MAX_MODEL_LEN - p, max(1, round(_lognormal(rng, c.output_median, c.output_sigma)))
            )
            s.prompts.append(p)
            s.outputs.append(o)
            pb[bisect.bisect_left(BUCKETS, p)] += 1
            ob[bisect.bisect_left(BUCKETS, o)] += 1
            acc[0] += p
            acc[1] += o
            hit = min(p, c.shared_prefix) if rng.random() < c.prefix_hit_prob else 0
            acc[3] += hit
            acc[4] += p
            s.total_hits += hit
            s.total_queries += p
        # gauges: Little's law around ~40 s per request, capped by max-num-seqs; a pod is
        # drained (0) at its first and last scrape and on both sides of a restart
        if edge:
            running = waiting = 0
        else:
            latency = 40.0 * (3.5 if in_burst else 1.0)
            demand = spec.rate * load * latency * rng.uniform(0.85, 1.15)
            if spec.fixed_requests is not None:
                demand = rng.randint(1, 3)
            running = min(spec.max_num_seqs, round(demand))
            waiting = max(0, round(demand) - spec.max_num_seqs)
        pool_tokens = spec.num_gpu_blocks * spec.block_size
        usage = min(1.0, running * 2600 / pool_tokens + rng.uniform(0.0, 0.05))
        usage = round(usage if running else 0.0, 4)
        if usage > 0.95 and waiting > 0:
            pre = max(0, round(rng.gauss(waiting / 12, 2)))
        else:
            pre = 1 if rng.random() < 0.02 else 0
        if edge:
            pre = 0
        acc[2] += pre
        s.total_preemptions += pre
        s.times.append(t)
        s.prompt_buckets.append(_cumulative(pb))
        s.output_buckets.append(_cumulative(ob))
        s.prompt_sum.append(acc[0])
        s.output_sum.append(acc[1])
        s.running.append(running)
        s.waiting.append(waiting)
        s.kv_usage.append(usage)
        s.preemptions.append(acc[2])
        s.prefix_hits.append(acc[3])
        s.prefix_queries.append(acc[4])
    return s


def _cumulative(counts: list[int]) -> list[int]:
    out: list[int] = []
    total = 0
    for c in counts:
        total += c
        out.append(total)
    return out
