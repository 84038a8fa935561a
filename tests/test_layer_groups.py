"""Identical decoder layers are grouped (issue 13): a shape holds one entry per distinct layer
kind, not per layer, and the ledger counts layers per pipeline stage without walking them.

The per-layer expansion (:meth:`ModelShape.per_layer`) is the reference the grouped ledger is
checked against: every grouped count equals the count over the expanded list.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from inference_capacity.engines.vllm import EngineSettings
from inference_capacity.hardware import get_gpu
from inference_capacity.ledger import weights
from inference_capacity.ledger.kv import kv_bytes_per_token, layers_on_rank
from inference_capacity.ledger.weights import pp_layer_range, weight_breakdown
from inference_capacity.model import AttnKind, Quantization, load_config, shape_from_config
from inference_capacity.model.layerset import LayerSet, Pattern
from inference_capacity.model.quant import quantized_bytes, quantized_copies
from inference_capacity.planner import PlanInput, make_plan

H100 = get_gpu("H100-SXM-80GB")


def small(family: str, layers: int) -> dict[str, Any]:
    """A small config: hidden 128, 2 heads of 64, 1 KV head, MLP 128, vocab 1024."""
    cfg: dict[str, Any] = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
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
        cfg.update(model_type="gemma2", architectures=["Gemma2ForCausalLM"], head_dim=64)
        cfg["sliding_window"] = 1024
    return cfg


def test_a_1024_layer_dense_model_is_one_layer_group() -> None:
    m = shape_from_config(small("llama", 1024))
    assert m.num_layers == 1024
    [group] = m.layer_groups
    assert group.attention.kind is AttnKind.FULL and group.layers.runs == (range(0, 1024),)
    # the same tensors as a 32-layer model: one entry per kind of tensor, 1,024 copies each
    m32 = shape_from_config(small("llama", 32))
    assert len(m.tensors) == len(m32.tensors)
    layer_tensors = [t for t in m.tensors if t.layers is not None]
    assert layer_tensors and all(t.copies == 1024 for t in layer_tensors)
    # per layer: q 128×128 + k, v 64×128 + o 128×128 + gate, up, down 128×128 + 2 norms of 128
    per_layer = 128 * 128 + 2 * 64 * 128 + 128 * 128 + 3 * 128 * 128 + 2 * 128
    # embedding and lm_head 1024 × 128 each (untied), final norm 128
    assert m.num_parameters == 1024 * per_layer + 2 * 1024 * 128 + 128


def test_an_alternating_gemma2_of_1024_layers_is_two_layer_groups() -> None:
    m = shape_from_config(small("gemma2", 1024))
    sliding, full = m.layer_groups
    assert sliding.attention.kind is AttnKind.SLIDING and sliding.attention.window == 1024
    assert sliding.layers.runs == (range(0, 1024, 2),)
    assert full.attention.kind is AttnKind.FULL and full.layers.runs == (range(1, 1024, 2),)
    # 1,024 layers × K and V × 1 KV head × 64 × 2 B (bf16), sliding or full alike
    assert kv_bytes_per_token(m, 1, 2) == 1024 * 2 * 64 * 2 == 262_144
    # 1,024 = 3 × 341 + 1: get_pp_indices gives the one extra layer to the stage before the
    # last, so stage 1 of 3 holds layers 341..682 (342): 171 odd (full) ones 341..681 and 171
    # even (sliding) ones 342..682, the first one full
    assert pp_layer_range(1024, 3, 1) == range(341, 683)
    assert layers_on_rank(m, 3, 1) == [(full.attention, 171), (sliding.attention, 171)]


def _get_pp_indices(num_layers: int, pp: int) -> list[range]:
    """vLLM ``distributed/utils.py::get_pp_indices`` (0.6–0.33, without
    VLLM_PP_LAYER_PARTITION), spelt out: ``num_layers // pp`` each, then one more to each of
    the ``num_layers % pp`` stages before the last, walking back from the second-to-last."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    out, start = [], 0
    for n in parts:
        out.append(range(start, start + n))
        start += n
    return out


def test_the_stage_split_is_vllms_for_every_layer_count_and_pp_size() -> None:
    for n in range(1, 80):
        for pp in range(1, n + 1):
            assert [pp_layer_range(n, pp, s) for s in range(pp)] == _get_pp_indices(n, pp)


@pytest.mark.parametrize(
    "name",
    [
        "google/gemma-3-27b-it",  # 5 sliding, 1 full, period 6, 62 layers
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",  # chunked ×3 + full, MoE every layer
        "deepseek-ai/DeepSeek-V3",  # 3 dense layers, then MoE
        "nvidia/Nemotron-H-56B-Base-8K",  # an irregular Mamba/attention/MLP string
        "google/gemma-4-26B-A4B",  # layer_types with K=V full layers
        "Qwen/Qwen3.5-35B-A3B",  # Gated DeltaNet every 4th-but-one layer
    ],
)
def test_grouped_stage_counts_equal_the_per_layer_expansion(name: str) -> None:
    _, cfg = load_config(name)
    m = shape_from_config(cfg)
    layers = m.per_layer()
    for pp in (1, 2, 3, 5, 7):
        for stage in range(pp):
            span = pp_layer_range(m.num_layers, pp, stage)
            grouped = Counter(dict(layers_on_rank(m, pp, stage)))
            assert grouped == Counter(layers[i] for i in span)
            # tensors: copies on the stage equal the layers of the stage that hold them
            for t in m.tensors:
                if t.layers is not None:
                    assert t.layers.count_in(span) == sum(1 for i in span if i in t.layers)


def test_a_quantization_exclusion_naming_one_layer_leaves_that_copy_in_the_model_dtype() -> None:
    m = shape_from_config(small("llama", 8))
    gate = next(t for t in m.tensors if t.name == "mlp.gate_proj")
    q = Quantization("fp8", 8, group_size=0, excluded=("model.layers.3.mlp.gate_proj",))
    # stage 0 of 2 holds layers 0..3: layer 3's gate stays bf16, the other three are fp8
    assert quantized_copies(q, gate, range(0, 4)) == 3
    assert quantized_copies(q, gate, range(4, 8)) == 4
    assert quantized_copies(q, gate) == 7
    # ".03." does not name layer 3 (the module path spells indices without leading zeros)
    assert quantized_copies(replace(q, excluded=("model.layers.03.mlp.gate_proj",)), gate) == 8
    # a pattern without "layers" excludes every copy
    assert quantized_copies(replace(q, excluded=("mlp.gate_proj",)), gate) == 0
    w0 = weight_breakdown(m, 1, 2, 0, 2, q)
    w1 = weight_breakdown(m, 1, 2, 1, 2, q)
    fp8 = quantized_bytes(q, 128, 128, 1)  # one 128 × 128 MLP matrix in fp8
    bf16 = 128 * 128 * 2
    # mlp per layer: gate, up, down; stage 0 has one bf16 gate, stage 1 none
    assert w0.by_group["mlp"] == 4 * 3 * fp8 - fp8 + bf16
    assert w1.by_group["mlp"] == 4 * 3 * fp8


ENGINE = EngineSettings(version="0.19.0", max_model_len=4096)


def _peak_plan_bytes(layers: int) -> int:
    """Peak bytes Python allocates building the shape of ``layers`` layers and planning it."""
    cfg = small("gemma2", layers)
    weights._MEMO.clear()
    tracemalloc.start()
    try:
        m = shape_from_config(cfg)
        make_plan(PlanInput(model=m, gpu=H100, tp=1, pp=2, engine=ENGINE))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _peaks_in_a_fresh_process() -> tuple[int, int]:
    """(64-layer, 1,024-layer) peaks measured in a new interpreter: tracemalloc counts every
    thread's allocations, and a thread another test left running (a server, a pool) allocating
    inside the window made this flaky in the full suite (265 KB apart once, ~1 KiB alone)."""
    code = (
        "from inference_capacity.planner import PlanInput, make_plan\n"
        "from inference_capacity.model import shape_from_config\n"
        "from tests.test_layer_groups import ENGINE, H100, _peak_plan_bytes, small\n"
        "make_plan(PlanInput(model=shape_from_config(small('llama', 16)), gpu=H100,"
        " engine=ENGINE))\n"  # warm every lazy module-level cache on another shape first
        "print(_peak_plan_bytes(64), _peak_plan_bytes(1024))\n"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=300
    )
    assert out.returncode == 0, out.stderr
    p64, p1024 = (int(x) for x in out.stdout.split())
    return p64, p1024


def test_planning_1024_layers_does_the_per_layer_work_of_64() -> None:
    p64, p1024 = _peaks_in_a_fresh_process()
    # a tensor and a spec per layer (the code before issue 13) peaked at ~140 KB for 64
    # layers and ~2.2 MB for 1,024; grouped, both allocate the same objects (~17 KB here, ~1 KiB
    # apart run to run)
    assert abs(p1024 - p64) < 16 * 1024, (p64, p1024)
    assert len(shape_from_config(small("gemma2", 1024)).layer_groups) == 2


def test_patterns_find_a_config_arrays_period() -> None:
    # Gemma-3 layer_types: five sliding, one full, repeated, cut at 62 layers
    types = (["s"] * 5 + ["f"]) * 10 + ["s", "s"]
    p = Pattern.from_list(types)
    assert p.cycle == ("s",) * 5 + ("f",) and p.prefix == ()
    groups = p.groups()
    assert groups["f"].runs == (range(5, 62, 6),)
    assert sorted(groups["s"]) == [i for i, t in enumerate(types) if t == "s"]
    # an index list from the config (mlp_only_layers) keeps the cycle's phase after it
    q = Pattern.constant(True, 10).with_values([2], False)
    assert [q.at(i) for i in range(10)] == [i != 2 for i in range(10)]
    assert q.groups()[True].runs == (range(0, 2), range(3, 10))


def test_a_layer_set_counts_a_span_without_walking_it() -> None:
    s = LayerSet((range(1, 100_001, 2),))
    assert s.count == 50_000
    assert s.count_in(range(10, 21)) == 5  # 11, 13, 15, 17, 19
    assert s.within(range(10, 21)).first() == 11 and s.within(range(10, 21)).last() == 19
    assert s.count_in(range(99_990, 200_000)) == 5  # 99,991 ... 99,999
    assert 99_999 in s and 100_000 not in s
