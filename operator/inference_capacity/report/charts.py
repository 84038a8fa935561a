"""A plan as charts (matplotlib, imported only when a chart is drawn): the per-rank stacked bar
of the ledger (seed 000, figure 1), the latency curve, and the fleet options of a sweep. SVG or
PNG by the file extension."""

from __future__ import annotations

from typing import Any

from ..planner import Plan, format_utilization
from ..units import GiB

__all__ = [
    "chart",
    "latency_chart",
    "sweep_chart",
]


_COLOURS = {
    "weights": "#4C72B0",
    "lora": "#8172B3",
    "activation": "#DD8452",
    "moe": "#E5AE38",
    "non_torch": "#937860",
    "cuda_graph": "#DA8BC3",
    "kv_cache_pool": "#55A868",
    "kv_block": "#8DCB9A",
    "budget": "#CCCCCC",
    "cuda_context": "#C44E52",
    "custom": "#B07AA1",
    "allocator": "#FF9DA7",
    "post_kv": "#9C755F",
    "operational": "#76B7B2",
    "unallocated": "#EEEEEE",
}


def _colour(name: str) -> str:
    for key, c in _COLOURS.items():
        if name.startswith(key):
            return c
    return "#999999"


def _segments(rl: Any) -> list[tuple[str, str, float]]:
    """(label, colour key, GiB) of one rank's ledger, weights summed into one segment."""
    segs: list[tuple[str, str, float]] = []
    weights = sum(i.gib for i in rl.items if i.name.startswith("weights.") and i.bytes > 0)
    if weights > 0:
        segs.append(("weights", "weights", weights))
    for i in rl.items:
        if i.name.startswith("weights.") or i.bytes <= 0:
            continue
        segs.append((i.name, i.name, i.gib))
    return segs


def chart(plan: Plan, path: str) -> None:
    """Per-rank stacked bar of the ledger (GiB), saved as SVG or PNG by the file extension.

    Items tall enough carry their name and size on the bar; the small ones are listed beside
    it. The device total and vLLM's budget (``--gpu-memory-utilization``) are drawn as lines; the
    KV pool says its tokens and max-num-seqs; a plan that does not fit draws the excess above
    the device line in red."""
    _check_chart_path(path, "--chart")
    plt = _pyplot()
    pred = plan.prediction
    total = pred.total_bytes / GiB
    u = pred.settings.gpu_memory_utilization
    over = max((-rl.unallocated / GiB for rl in plan.ledger), default=0.0)
    over = max(over, 0.0)
    n = len(plan.ledger)
    fig, ax = plt.subplots(figsize=(4.5 + 2.6 * n, 7))
    label_min = 0.035 * total  # items at least this tall are labelled on the bar
    for x, rl in enumerate(plan.ledger):
        bottom = 0.0
        small: list[tuple[str, float, str]] = []
        for name, key, gib in _segments(rl):
            colour = _colour(key)
            ax.bar(
                x, gib, bottom=bottom, color=colour, edgecolor="white", linewidth=0.5, width=0.55
            )
            if name == "kv_cache_pool":
                seqs = plan.recommendation.max_num_seqs
                ax.text(
                    x,
                    bottom + gib / 2,
                    f"KV cache {gib:.2f} GiB\n{pred.kv_cache_tokens:,} tokens\nmax-num-seqs {seqs}",
                    ha="center",
                    va="center",
                    fontsize=9,
                    color="white",
                    weight="bold",
                )
            elif gib >= label_min and bottom + gib <= total:
                ax.text(
                    x,
                    bottom + gib / 2,
                    f"{name}\n{gib:.2f} GiB",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white",
                )
            else:
                small.append((name, gib, colour))
            bottom += gib
        if rl.unallocated < 0:
            deficit = -rl.unallocated / GiB
            ax.bar(
                x,
                deficit,
                bottom=total,
                color="#C44E52",
                alpha=0.9,
                hatch="//",
                edgecolor="white",
                width=0.55,
            )
            ax.text(
                x + 0.32,
                total + deficit / 2,
                f"over by\n{deficit:.2f} GiB",
                va="center",
                fontsize=8,
                color="#C44E52",
                weight="bold",
            )
        # callouts for the small items, beside the bar, top to bottom
        y = total * u * 0.93
        for name, gib, colour in reversed(small):
            ax.add_patch(
                plt.Rectangle(
                    (x + 0.32, y - total * 0.012), 0.04, total * 0.02, color=colour, clip_on=False
                )
            )
            ax.text(x + 0.38, y, f"{name} {gib:.3f} GiB", fontsize=7, va="center")
            y -= total * 0.035
    right = n - 0.5 + 0.9
    ax.axhline(total, color="black", linewidth=1.2)
    ax.text(
        right - 0.02,
        total,
        f"device {total:.2f} GiB (as CUDA reports it)",
        va="bottom",
        ha="right",
        fontsize=8,
    )
    ax.axhline(total * u, color="black", linestyle="--", linewidth=1)
    ax.text(
        right - 0.02,
        total * u,
        f"--gpu-memory-utilization {format_utilization(u)}\n= vLLM's budget {total * u:.2f} GiB",
        va="top",
        ha="right",
        fontsize=8,
    )
    ax.set_xticks(range(n), [f"rank {rl.rank}\nstage {rl.stage}" for rl in plan.ledger])
    ax.set_xlim(-0.5, right)
    ax.set_ylabel("GiB")
    ax.set_ylim(0, (total + over) * 1.04)
    fits = "fits" if plan.fits else f"DOES NOT FIT ({plan.reason})"
    ax.set_title(
        f"{plan.input.model.name} on {plan.input.gpu.name} TP{plan.input.tp} "
        f"PP{plan.input.pp}: {fits}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _check_chart_path(path: str, flag: str) -> None:
    if not (path.endswith(".svg") or path.endswith(".png")):
        raise ValueError(f"{flag}: {path!r} must end in .svg or .png")


def latency_chart(plan: Plan, path: str) -> None:
    """N → ITL p50/p95 and TTFT p50/p95 (left axis, log) and output tokens/s (right), with
    P(preemption) and saturation marked."""
    _check_chart_path(path, "--latency-chart")
    lat = plan.latency
    if lat is None or not lat.curve:
        raise ValueError("--latency-chart: no latency curve (give a workload and a catalog GPU)")
    plt = _pyplot()
    xs = [p.max_num_seqs for p in lat.curve]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(xs, [p.itl_ms_p50 for p in lat.curve], "o-", color="#4C72B0", label="ITL p50")
    ax.plot(xs, [p.itl_ms_p95 for p in lat.curve], "s--", color="#4C72B0", label="ITL p95")
    ax.plot(xs, [p.ttft_ms_p50 for p in lat.curve], "D-", color="#8172B2", label="TTFT p50")
    ax.plot(xs, [p.ttft_ms_p95 for p in lat.curve], "d--", color="#8172B2", label="TTFT p95")
    sat = [p for p in lat.curve if p.saturated]
    if sat:
        ax.plot(
            [p.max_num_seqs for p in sat],
            [p.ttft_ms_p50 for p in sat],
            "x",
            color="#C44E52",
            markersize=9,
            label="saturated (prefill budget)",
        )
    ax.set_yscale("log")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs], fontsize=7)
    ax.set_xlabel("running sequences per replica (max-num-seqs)")
    ax.set_ylabel("ITL and TTFT (ms, log)", color="#4C72B0")
    ax2 = ax.twinx()
    ax2.plot(
        xs, [p.output_tokens_per_s for p in lat.curve], "^-", color="#55A868", label="tokens/s"
    )
    ax2.set_ylabel("output tokens/s per replica", color="#55A868")
    n = plan.recommendation.max_num_seqs
    ax.axvline(n, color="black", linestyle=":", linewidth=1)
    d = plan.distribution
    p_n = d.probability(n) if d is not None else 0.0
    ax.text(
        n,
        ax.get_ylim()[1] * 0.95,
        f" max-num-seqs {n}\n P(preempt) {p_n:.2%}",
        fontsize=8,
        va="top",
    )
    wl = plan.input.workload
    if wl is not None and wl.itl_target_ms:
        ax.axhline(wl.itl_target_ms, color="#C44E52", linestyle="--", linewidth=1)
        ax.text(
            xs[0],
            wl.itl_target_ms,
            f" ITL target {wl.itl_target_ms} ms",
            color="#C44E52",
            fontsize=8,
            va="bottom",
        )
    for p in lat.curve:
        if p.preemption_probability > 0:
            ax.annotate(
                f"{p.preemption_probability:.0%}",
                (p.max_num_seqs, p.itl_ms_p95),
                fontsize=7,
                color="#C44E52",
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_title(
        f"{plan.input.model.name} on {plan.input.gpu.name} TP{plan.input.tp}: decode step "
        f"(HBM at {lat.hbm_efficiency:.0%} of peak); red % = P(preemption)",
        fontsize=9,
    )
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(lines, labels, fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.85))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def sweep_chart(options: list[dict[str, Any]], path: str, top: int = 15) -> None:
    """Horizontal bars of the best options: GPUs needed (and cost per hour when priced)."""
    _check_chart_path(path, "--sweep-chart")
    if not options:
        raise ValueError("--sweep-chart: no option fits")
    plt = _pyplot()
    shown = options[:top][::-1]
    priced = shown[0]["cost_per_hour"] is not None
    values = [o["cost_per_hour"] if priced else o["gpus"] for o in shown]
    labels = [f"{o['gpu']} TP{o['tp']} KV {o['kv_cache_dtype']}" for o in shown]
    colours = ["#55A868" if o["meets_itl"] is not False else "#C44E52" for o in shown]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(shown) + 1.5))
    bars = ax.barh(range(len(shown)), values, color=colours)
    for bar, o in zip(bars, shown, strict=True):
        text = f" {o['replicas']} × {o['tp']} = {o['gpus']} GPUs"
        if priced:
            text += f", ${o['cost_per_hour']:.2f}/h"
            if o["cost_per_million_output_tokens"] is not None:
                text += f", ${o['cost_per_million_output_tokens']:.3f}/M tokens"
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, text, va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), labels, fontsize=8)
    ax.set_xlabel("cost per hour" if priced else "GPUs for the peak (+ recovery)")
    ax.set_xlim(0, max(values) * 1.6)
    ax.set_title("Fleet options, best at the top (red: misses the ITL target)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
