"""The embedding and lm_head LoRA slots (issue 21, gap N8's second half): vLLM 0.20–0.33 wrap
``embed_tokens`` (VocabParallelEmbeddingWithLoRA) and ``lm_head`` (LogitsProcessorWithLoRA) for
the architectures whose class lists them in ``embedding_modules``; each holds an unsharded
A/B pair of ``max_loras × rank × (vocab + hidden)`` elements (ledger/weights.py cites the
functions)."""

from __future__ import annotations

from inference_capacity.engines.vllm import EngineSettings, predict_startup
from inference_capacity.hardware import get_gpu
from inference_capacity.ledger.weights import vocab_lora_bytes, weight_breakdown
from inference_capacity.model import load_model

H100 = get_gpu("H100-SXM-80GB")
LLAMA = load_model("meta-llama/Llama-3.1-8B-Instruct")  # vocab 128256, hidden 4096, bf16


def test_llama_pays_both_pairs_per_slot() -> None:
    # 4 slots × rank 64 × (128256 + 4096) × 2 B, for the embedding and again for the lm_head
    pair = 4 * 64 * (128_256 + 4096) * 2
    assert vocab_lora_bytes(LLAMA, True, True, 4, 64, 2) == 2 * pair == 135_528_448  # 0.13 GiB
    with_vocab = weight_breakdown(LLAMA, 1, 1, 0, 2, None, 4, 64, vocab_lora=True)
    without = weight_breakdown(LLAMA, 1, 1, 0, 2, None, 4, 64)
    assert with_vocab.lora - without.lora == 2 * pair
    # TP does not shard them (the full org_vocab_size / vocab_size)
    tp2 = weight_breakdown(LLAMA, 2, 1, 0, 2, None, 4, 64, vocab_lora=True)
    tp2_plain = weight_breakdown(LLAMA, 2, 1, 0, 2, None, 4, 64)
    assert tp2.lora - tp2_plain.lora == 2 * pair


def test_pipeline_stages_hold_their_own_half() -> None:
    pair = 4 * 64 * (128_256 + 4096) * 2
    assert vocab_lora_bytes(LLAMA, True, False, 4, 64, 2) == pair  # stage 0: embedding
    assert vocab_lora_bytes(LLAMA, False, True, 4, 64, 2) == pair  # last stage: lm_head


def test_models_without_embedding_modules_pay_nothing() -> None:
    # Qwen2ForCausalLM lists no embedding_modules (vllm/model_executor/models/qwen2.py)
    qwen2 = load_model("Qwen/Qwen2.5-7B-Instruct")
    assert vocab_lora_bytes(qwen2, True, True, 4, 64, 2) == 0
    assert vocab_lora_bytes(LLAMA, True, True, 0, 64, 2) == 0


def test_plan_counts_them_from_0_20() -> None:
    def lora(version: str) -> int:
        s = EngineSettings(version=version, max_loras=4, max_lora_rank=64, max_model_len=8192)
        p = predict_startup(LLAMA, H100.total_bytes, H100.name, 1, 1, s)
        return p.ranks[0].weights.lora

    assert lora("0.25.0") - lora("0.19.0") == 135_528_448
