"""The value sets are defined once, in inference_capacity/vocab.py (issue 10), and every user
reads them: the spec, the model parser, the ledger and the vLLM rules."""

from __future__ import annotations

from typing import get_args

import pytest

from inference_capacity import vocab
from inference_capacity.api import common as api
from inference_capacity.engines import vllm_flags
from inference_capacity.ledger import kv
from inference_capacity.model import quant
from inference_capacity.model.config import resolve_dtype, shape_from_config
from inference_capacity.model.errors import ModelConfigError


def test_one_quantization_set_for_the_spec_and_the_ledger() -> None:
    # the two lists used to disagree (the CRD lacked modelopt_fp4 and ptpc_fp8)
    assert set(get_args(api.Quantization)) == set(quant.KNOWN_METHODS) == set(vocab.QUANT_METHODS)
    assert {"modelopt_fp4", "ptpc_fp8"} <= set(vocab.QUANT_METHODS)
    assert quant.ALIASES is vocab.QUANT_ALIASES
    assert set(vocab.QUANT_ALIASES) - {"modelopt_fp8"} <= set(vocab.QUANT_METHODS)


def test_kv_dtypes_the_flags_accept_are_the_ones_the_ledger_sizes() -> None:
    assert vllm_flags._MODELLED_KV_DTYPES is vocab.KV_CACHE_DTYPES
    assert vocab.KV_CACHE_DTYPES <= set(vocab.KV_DTYPE_BYTES)
    assert kv.KV_DTYPE_BYTES is vocab.KV_DTYPE_BYTES
    assert set(get_args(api.KvCacheDtype)) == vocab.SPEC_KV_CACHE_DTYPES <= vocab.KV_CACHE_DTYPES
    assert set(vocab.CLI_KV_CACHE_DTYPE_CHOICES) <= vocab.KV_CACHE_DTYPES
    assert set(kv.KV_FORMATS) <= vocab.KV_CACHE_DTYPES


def test_dtype_tables_agree() -> None:
    assert set(vocab.DTYPE_BYTES) == set(get_args(vocab.ModelDtype))
    torch_aliases = {"float": "float32", "half": "float16"}
    for name, width in vocab.TORCH_DTYPE_BYTES.items():
        assert vocab.DTYPE_BYTES[torch_aliases.get(name, name)] == width
    assert set(get_args(api.WeightDtype)) == vocab.WEIGHT_DTYPES
    assert vocab.WEIGHT_DTYPES <= set(vocab.CLI_DTYPE_CHOICES) <= set(vocab.DTYPE_CHOICES)
    assert set(vocab.DTYPE_ALIASES.values()) <= set(vocab.DTYPE_BYTES)


def test_ledger_and_condition_vocabulary_is_the_api_vocabulary() -> None:
    assert api.Lifetime is vocab.Lifetime and api.Provenance is vocab.Provenance
    assert api.ConditionType is vocab.ConditionType
    assert vocab.LIFETIMES == {"worker", "request", "iteration", "startup"}
    assert vocab.PROVENANCES == {"exact", "calibrated", "assumed"}
    assert vocab.CONDITION_STATUSES == {"True", "False", "Unknown"}
    assert vocab.FIT_REASONS | vocab.ROLLOUT_REASONS <= vocab.CONDITION_REASONS


def test_resolve_dtype_fails_closed_on_an_unknown_checkpoint_dtype() -> None:
    assert resolve_dtype("bfloat16", "auto") == "bfloat16"
    assert resolve_dtype("torch.float16", "auto") == "float16"
    assert resolve_dtype("float32", "auto") == "bfloat16"  # vLLM serves fp32 as bf16
    assert resolve_dtype(None, "auto") == "bfloat16"
    assert resolve_dtype("float8_e4m3fn", "half") == "float16"  # explicit --dtype wins
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        resolve_dtype("float8_e4m3fn", "auto")
    with pytest.raises(ValueError, match="'int4'"):
        resolve_dtype("int4", "auto")
    with pytest.raises(ModelConfigError, match="unknown dtype 'fp64'"):
        resolve_dtype("bfloat16", "fp64")


def test_a_config_with_an_unknown_torch_dtype_is_refused() -> None:
    cfg = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "torch_dtype": "float8_e5m2",
    }
    with pytest.raises(ModelConfigError, match="torch_dtype: unknown dtype 'float8_e5m2'"):
        shape_from_config(cfg)
    assert shape_from_config({**cfg, "torch_dtype": "float16"}).dtype == "float16"
