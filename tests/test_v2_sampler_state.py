"""The V2 model runner's persistent sampler tensors (engines/vllm.py::v2_sampler_state_bytes):
``Penalties.output_bin_counts`` (max-num-seqs × vocab int32), ``prompt_bin_mask`` and
``StructuredOutputsWorker.grammar_bitmask`` (× ⌈vocab / 32⌉ int32), built in ``load_model``
after the weights' load window (v1/worker/gpu/, read in the 0.22.0–0.33.0 sdists). vLLM's
consumed budget counts them from 0.27; before, they are held beyond the budget."""

from __future__ import annotations

import pytest

from inference_capacity.budget import build_ledger
from inference_capacity.engines import Era
from inference_capacity.engines.vllm import (
    EngineSettings,
    SettingsError,
    predict_startup,
    v2_sampler_state_bytes,
)
from inference_capacity.hardware import get_gpu
from inference_capacity.model import load_model
from inference_capacity.units import GiB

QWEN3_32B = load_model("Qwen/Qwen3-32B")
PRO6000 = get_gpu("RTX-PRO-6000-Blackwell-Server")


def _predict(version: str, tp: int = 2, pp: int = 1, **kw: object) -> object:
    s = EngineSettings(version=version, max_model_len=32768, gpu_memory_utilization=0.426, **kw)  # type: ignore[arg-type]
    return predict_startup(QWEN3_32B, int(95.01 * GiB), PRO6000.name, tp, pp, s)


#: the V2 sampler's fixed-width int32/fp32 states per request (0.27.1 v1/worker/gpu/sample/):
#: logit_bias.py allowed ids, bias ids, bias values (3 × 1,024) and stop ids (128),
#: bad_words.py ids and offsets (1,024 + 129), logprob.py token ids (128)
FIXED = 3 * 1024 + 128 + 1024 + 129 + 128
STATE = 4 * 1024 * (151_936 + 2 * 4_748 + FIXED + 1)


def test_the_bytes_from_the_code() -> None:
    # Qwen3's vocabulary of 151,936 ids, 1,024 sequences (the default on a 95 GiB card), one
    # token a request: 4 × 1,024 × (151,936 + 2 × ⌈151,936 / 32⌉ = 4,748 + the fixed-width
    # states + one logits index) B
    assert QWEN3_32B.vocab_size == 151_936
    assert v2_sampler_state_bytes(151_936, 1024, 1) == STATE == 679_583_744
    # three speculative tokens: the grammar bitmask and logits indices hold four rows a request
    assert v2_sampler_state_bytes(151_936, 1024, 4) == 4 * 1024 * (151_936 + 5 * 4_748 + FIXED + 4)


def test_consumed_from_0_27_and_beyond_the_budget_before() -> None:
    p27 = _predict("0.27.1")
    p26 = _predict("0.26.0")
    for p in (p27, p26):
        assert p.settings.v2_runner  # type: ignore[attr-defined]
        assert p.ranks[0].sampler_state == STATE  # type: ignore[attr-defined]
    assert p27.settings.era is Era.V1_CONSUMED  # type: ignore[attr-defined]
    # kubesimplify/website's TP2 boot (vllm-startup-161) printed 8.22 GiB; the ledger now says
    # 8.13 (8.74 without the state)
    assert abs(p27.ranks[0].available_kv / GiB - 8.13) < 0.01  # type: ignore[attr-defined]
    [ledger27] = build_ledger(p27, 0.0)  # type: ignore[arg-type]
    [ledger26] = build_ledger(p26, 0.0)  # type: ignore[arg-type]
    item27 = next(i for i in ledger27.items if i.name == "v2_sampler_state")
    item26 = next(i for i in ledger26.items if i.name == "v2_sampler_state")
    assert item27.in_vllm_budget and not item26.in_vllm_budget
    assert item27.bytes == item26.bytes == STATE
    # only the last pipeline stage samples
    pp = _predict("0.27.1", tp=1, pp=2)
    assert [r.sampler_state for r in pp.ranks] == [0, STATE]  # type: ignore[attr-defined]
    # the V1 runner has none of these tensors (Llama-3.1-8B on 0.21: V1)
    llama = predict_startup(
        load_model("meta-llama/Llama-3.1-8B-Instruct"),
        PRO6000.total_bytes,
        PRO6000.name,
        1,
        1,
        EngineSettings(version="0.21.0", max_model_len=8192),
    )
    assert not llama.settings.v2_runner and llama.ranks[0].sampler_state == 0


def test_vllm_use_v2_model_runner_chooses_the_runner() -> None:
    # VLLM_USE_V2_MODEL_RUNNER is a choice both ways from 0.22 (envs.py maybe_convert_bool;
    # config/vllm.py::VllmConfig.use_v2_model_runner returns it before the default rules):
    # Qwen3-32B runs V2 by default on 0.27.1; =0 puts it on the V1 runner, which holds no
    # sampler state and whose CUDA-graph estimate is in the budget (the V2 runner's
    # profile_cudagraph_memory returns 0 in 0.21-0.28)
    v2 = _predict("0.27.1")
    v1 = _predict("0.27.1", use_v2_model_runner=False)
    assert v2.settings.v2_runner and not v1.settings.v2_runner  # type: ignore[attr-defined]
    assert v1.ranks[0].sampler_state == 0  # type: ignore[attr-defined]
    assert not v2.settings.cg_in_budget and v1.settings.cg_in_budget  # type: ignore[attr-defined]
    # and =1 puts a model the default keeps on V1 (Llama-3.1-8B on 0.22: V2 takes Qwen3 only)
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct")

    def llama_on(version: str, choice: bool | None) -> object:
        s = EngineSettings(version=version, max_model_len=8192, use_v2_model_runner=choice)
        return predict_startup(llama, PRO6000.total_bytes, PRO6000.name, 1, 1, s)

    assert not llama_on("0.22.0", None).settings.v2_runner  # type: ignore[attr-defined]
    assert llama_on("0.22.0", True).settings.v2_runner  # type: ignore[attr-defined]
    # before 0.22 the variable only opts in (bool(int(...)), "0" the default), to a V2 runner
    # the ledger does not model: refused by name; 0 is the default there
    with pytest.raises(SettingsError, match="VLLM_USE_V2_MODEL_RUNNER=1"):
        llama_on("0.21.0", True)
    assert not llama_on("0.21.0", False).settings.v2_runner  # type: ignore[attr-defined]


def test_the_runners_buffers() -> None:
    # v1/worker/gpu_model_runner.py (0.27.1): inputs_embeds = _make_buffer(max_num_tokens,
    # inputs_embeds_size, dtype) on the GPU whatever the flags (0.18.0-0.28.0), the input
    # buffers (21 T + 8 max(N + 1, T) + 41 N + 4), the InputBatch's sampling parameters and
    # min-p (28 N + 4), the constructor's placeholder block table (N x W int32, W = 32768 / 16
    # = 2,048 blocks, a multiple of 8) and slot mapping (8 T), and on the last stage the
    # sampler's FlashInfer row states (1 MiB) and Triton tables (1,600 B): consumed memory
    # from 0.27 (vllm-startup-167's V1 runner), beyond the budget before
    qwen235 = load_model("Qwen/Qwen3-235B-A22B-FP8")
    n, t = 32, 8192

    def v1(version: str) -> object:
        s = EngineSettings(version=version, max_model_len=32768, max_num_seqs=n)
        return predict_startup(qwen235, int(95.01 * GiB), PRO6000.name, 4, 1, s)

    v1_bytes = t * 4096 * 2 + 21 * t + 8 * t + 41 * n + 4 + 28 * n + 4
    v1_bytes += 4 * n * 2048 + 8 * t + (1 << 20) + 1_600
    # the profile's seeded second sampler call (0.22+) leaves the Triton top-k/top-p scratch:
    # min(next_pow2(min(188 SMs, 32 rows)), 188) = 32 rows x 151,936 fp32 (18.5 MiB)
    assert PRO6000.sm_count == 188
    v1_bytes += 4 * 32 * 151_936
    p27, p26 = v1("0.27.1"), v1("0.26.0")
    for p in (p27, p26):
        assert not p.settings.v2_runner  # type: ignore[attr-defined]
        assert {r.runner_buffers for r in p.ranks} == {v1_bytes}  # type: ignore[attr-defined]
    [l27] = build_ledger(p27, 0.0)  # type: ignore[arg-type]
    [l26] = build_ledger(p26, 0.0)  # type: ignore[arg-type]
    i27 = next(i for i in l27.items if i.name == "runner_buffers")
    i26 = next(i for i in l26.items if i.name == "runner_buffers")
    assert i27.in_vllm_budget and not i26.in_vllm_budget and i27.bytes == v1_bytes
    assert i27.owner == "V1 runner"
    # a --block-size of 128: W = 256 blocks, rounded to a multiple of 128 / gcd(128, 128) = 1
    s = EngineSettings(version="0.27.1", max_model_len=32768, max_num_seqs=n, block_size=128)
    p = predict_startup(qwen235, int(95.01 * GiB), PRO6000.name, 4, 1, s)
    assert p.ranks[0].runner_buffers == v1_bytes - 4 * n * (2048 - 256)  # type: ignore[attr-defined]
    # the V2 runner (v1/worker/gpu/): InputBuffers 13 T + 12 N + 4 and RequestState 20 N; its
    # block tables come with the KV cache; at 1,024 sequences and 8,192 tokens
    v2 = _predict("0.27.1")
    assert {r.runner_buffers for r in v2.ranks} == {13 * 8192 + 32 * 1024 + 4}  # type: ignore[attr-defined]
    # a stage after the first also holds the intermediate tensors it receives (hidden states
    # and residual: 2 x 8,192 x 5,120 x 2 B)
    pp = _predict("0.27.1", tp=1, pp=2)
    first, second = (r.runner_buffers for r in pp.ranks)  # type: ignore[attr-defined]
    assert second - first == 2 * 8192 * 5120 * 2


def test_the_v1_samplers_triton_scratch() -> None:
    """v1/sample/ops/topk_topp_triton.py (0.27.1, 0.33.0): the scratch holds
    min(next_power_of_2(min(SMs, rows)), SMs) fp32 rows of the vocabulary and stays for the
    process's life; below 8 rows vLLM sorts in PyTorch (topk_topp_sampler.py) and keeps
    nothing; without a catalogued SM count the rule's largest, next_power_of_2(rows)."""
    from inference_capacity.engines.vllm import triton_topk_scratch_bytes

    h100 = get_gpu("H100-SXM-80GB")
    assert h100.sm_count == 132  # NVIDIA's H100 SXM5: 132 SMs
    v = 151_936
    assert triton_topk_scratch_bytes(h100.name, 1024, v) == 4 * 132 * v
    assert triton_topk_scratch_bytes(h100.name, 100, v) == 4 * 128 * v
    assert triton_topk_scratch_bytes(h100.name, 7, v) == 0
    assert triton_topk_scratch_bytes(h100.name, 8, v) == 4 * 8 * v
    assert triton_topk_scratch_bytes("my-custom-gpu", 1000, v) == 4 * 1024 * v
    # the V1 runner from 0.22 only (0.20.0's profile samples once, on FlashInfer)
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct")

    def scratch(version: str) -> int:
        s = EngineSettings(
            version=version, max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=8192
        )
        p = predict_startup(llama, h100.total_bytes, h100.name, 1, 1, s)
        assert not p.settings.v2_runner  # type: ignore[attr-defined]
        r: int = p.ranks[0].runner_buffers  # type: ignore[attr-defined]
        return r

    assert scratch("0.22.0") - scratch("0.20.0") == 4 * 132 * 128_256
