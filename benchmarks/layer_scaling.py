"""Plan time against the layer count (issue 13): a plan's cost must not grow with the number of
decoder layers beyond what the ledger needs, because identical layers are grouped.

Two synthetic configs at hidden size 128 (so 100,000 layers fit one H100, and the per-layer
work, not the tensor arithmetic, is what a layer costs): a plain dense Llama (one kind of layer)
and a Gemma-2 (sliding and full layers alternating, two kinds). Each is built and planned at
32, 1,024 and 100,000 layers; 100,000 is above
:data:`inference_capacity.model.limits.SHAPE_LIMITS` (1,024), so the benchmark, and only the
benchmark, lifts that bound for the run.

    python -m benchmarks.layer_scaling [--repeat N]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from inference_capacity.engines.vllm import EngineSettings
from inference_capacity.hardware import Gpu, get_gpu
from inference_capacity.ledger import weights
from inference_capacity.model import ModelShape, limits
from inference_capacity.model.config import shape_from_config
from inference_capacity.planner import PlanInput, make_plan

LAYERS = (32, 1024, 100_000)


def config(family: str, layers: int) -> dict[str, Any]:
    """A small config of ``family`` ("llama" or "gemma2") with ``layers`` decoder layers."""
    base: dict[str, Any] = {
        "hidden_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 128,
        "vocab_size": 1024,
        "max_position_embeddings": 4096,
        "num_hidden_layers": layers,
        "torch_dtype": "bfloat16",
    }
    if family == "gemma2":
        gemma = {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"]}
        return {**base, **gemma, "head_dim": 64, "sliding_window": 1024}
    return {**base, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}


def _time(fn: Any, repeat: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def _plan(m: ModelShape, gpu: Gpu, engine: EngineSettings, pp: int) -> None:
    weights._MEMO.clear()  # cold: the per-shape weight memo would hide the ledger's work
    make_plan(PlanInput(model=m, gpu=gpu, tp=1, pp=pp, engine=engine))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    gpu = get_gpu("H100-SXM-80GB")
    # eager: the CUDA-graph pool is modelled per layer (0.0195 GiB each), 100,000 layers would not
    # fit; the work, not the fit, is what is measured here
    engine = EngineSettings(version="0.19.0", max_model_len=4096, enforce_eager=True)
    saved = dict(limits.SHAPE_LIMITS)
    limits.SHAPE_LIMITS["num_hidden_layers"] = max(LAYERS)  # the benchmark only
    try:
        print(f"{'model':<8} {'layers':>8} {'shape ms':>9} {'plan ms':>9} {'pp=4 ms':>9}")
        for family in ("llama", "gemma2"):
            for n in LAYERS:
                cfg = config(family, n)
                build = _time(lambda c=cfg: shape_from_config(c), a.repeat)
                m = shape_from_config(cfg)
                one = _time(lambda m=m: _plan(m, gpu, engine, 1), a.repeat)
                four = _time(lambda m=m: _plan(m, gpu, engine, 4), a.repeat)
                print(
                    f"{family:<8} {n:>8,} {build * 1e3:>9.2f} {one * 1e3:>9.2f} {four * 1e3:>9.2f}"
                )
    finally:
        limits.SHAPE_LIMITS.clear()
        limits.SHAPE_LIMITS.update(saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
