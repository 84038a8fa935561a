"""The ``--kv-cache-dtype`` choices per vLLM release and what they move.

Sources (vLLM sdists): ``config/cache.py`` ``CacheDType`` gains ``int8_per_token_head``,
``fp8_per_token_head`` and ``nvfp4`` in 0.20.0 and ``int4_per_token_head`` in 0.25.0 (the flag
table, ``engines/data/vllm_flags.json``, generated from them); argparse refuses any other value
(``literal_to_kwargs``, engine/arg_utils.py). FLASH_ATTN's ``supports_kv_cache_dtype``
(v1/attention/backends/flash_attn.py): 0.19.0 every ``fp8*``, 0.20.0/0.21.0 every quantized
dtype (``is_quantized_kv_cache``), 0.22.0 only ``fp8``/``fp8_e4m3``; 0.28.0's FlashInfer takes
nvfp4 only on device capability family 100.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest

from inference_capacity.cli import main
from inference_capacity.engines.versions import parse_version
from inference_capacity.engines.vllm import (
    EngineSettings,
    SettingsError,
    fa3_split_buffer_bytes,
    resolve_settings,
)
from inference_capacity.engines.vllm_flag_table import flag_table
from inference_capacity.engines.vllm_flags import classify
from inference_capacity.engines.vllm_rules import VllmRules
from inference_capacity.hardware import get_gpu
from inference_capacity.ledger.kv import kv_token_format, token_bytes
from inference_capacity.model import load_model
from inference_capacity.planner import PlanInput, make_plan

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def rules(version: str) -> VllmRules:
    return VllmRules.for_version(parse_version(version))


def settle(kv: str, version: str, gpu_name: str = "H100-SXM-80GB", model: str = LLAMA) -> Any:
    """vLLM's resolved settings for ``model`` on ``gpu_name`` with ``--kv-cache-dtype kv``."""
    gpu = get_gpu(gpu_name)
    settings = EngineSettings(version=version, kv_cache_dtype=kv)
    return resolve_settings(load_model(model), gpu.total_bytes, gpu.name, settings)


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


# --- argparse's choices, per release ----------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "first"),
    [
        ("int8_per_token_head", "0.20.0"),
        ("fp8_per_token_head", "0.20.0"),
        ("nvfp4", "0.20.0"),
        ("fp8_ds_mla", "0.11.1"),
    ],
)
def test_a_kv_dtype_before_its_release_is_refused_in_vllms_words(dtype: str, first: str) -> None:
    before = {"0.20.0": "0.19.1", "0.11.1": "0.11.0"}[first]
    (u,) = classify({"kv-cache-dtype": dtype}, {}, before)
    assert u.name == "--kv-cache-dtype"
    assert u.why == f"vLLM {before}: invalid choice {dtype!r}; accepted from {first}"
    assert classify({"kv-cache-dtype": dtype}, {}, first) == []


def test_a_value_no_release_has_lists_the_choices() -> None:
    (u,) = classify({"mamba-cache-mode": "sometimes"}, {}, "0.26.0")
    assert u.why == "vLLM 0.26.0: invalid choice 'sometimes' (choose from all, align, none)"
    # 0.32 dropped "all": nothing later has it again, so the choices are named
    (u,) = classify({"mamba-cache-mode": "all"}, {}, "0.32.0")
    assert "invalid choice 'all' (choose from align, none)" in u.why


def test_integer_choices_are_compared_as_argparse_converts_them() -> None:
    # --block-size had type=int choices 1..256 in 0.11.1-0.17.1 and none from 0.18.0
    assert classify({"block-size": "16"}, {}, "0.17.1") == []
    (u,) = classify({"block-size": "24"}, {}, "0.17.1")
    assert u.why == "vLLM 0.17.1: invalid choice '24'; accepted from 0.18.0"
    (u,) = classify({"block-size": "sixteen"}, {}, "0.17.1")
    assert u.why == "vLLM 0.17.1: invalid int value 'sixteen'"
    table = flag_table()
    assert table.invalid_choice("block-size", "24", "0.18.0") is None  # no choices there
    assert table.invalid_choice("kv-cache-dtype", "nvfp4", "0.10.0") is None  # before the table


def test_the_settings_refuse_a_kv_dtype_the_release_lacks() -> None:
    """The spec's kvCacheDtype and the CLI reach the ledger without a container flag: the
    same table decides there (engines/vllm.py resolve_settings)."""
    h100 = get_gpu("H100-SXM-80GB")
    refusal = "invalid choice 'int8_per_token_head'; accepted from 0.20"
    with pytest.raises(SettingsError, match=refusal):
        settle("int8_per_token_head", "0.19.0", h100.name)
    rs = settle("int8_per_token_head", "0.22.0", h100.name)
    assert rs.kv_cache_dtype == "int8_per_token_head"


# --- per-token-head pages and the CLI ---------------------------------------------------------


def test_per_token_head_kv_plans_at_0_22_with_its_scales() -> None:
    """A per-token-head page adds one float32 scale per KV head for K and for V
    (AttentionSpec.page_size_bytes, v1/kv_cache_interface.py 0.20.0-0.28.0): Llama-3.1-8B, 8 KV
    heads of 128 at 1 byte, is 2 × 8 × 128 + 2 × 8 × 4 = 2,112 B per token and layer."""
    shape = load_model(LLAMA)
    layer = shape.layer_groups[0].attention
    assert token_bytes(layer, 1, 1, kv_token_format("int8_per_token_head")) == 2 * 8 * 128 + 64
    gpu = get_gpu("H100-SXM-80GB")

    def rank(kv: str) -> Any:
        engine = EngineSettings(version="0.22.0", kv_cache_dtype=kv, max_model_len=8192)
        return make_plan(PlanInput(model=shape, gpu=gpu, engine=engine)).prediction.ranks[0]

    plain, scaled = rank("fp8"), rank("int8_per_token_head")
    assert scaled.layout.bytes_per_token - plain.layout.bytes_per_token == 32 * 64
    # fp8 takes FLASH_ATTN (FA3) at 0.22, int8_per_token_head Triton: its first FULL capture
    # has no split buffer (largest FULL size 512 at the default max-num-seqs), so the larger
    # first capture (vLLM takes the max over modes) shrinks by at most that buffer
    split = fa3_split_buffer_bytes(shape, gpu.name, "bfloat16", 512, 1, "fp8", rules("0.22.0"))
    assert 0 < plain.cuda_graph - scaled.cuda_graph <= split


def test_cli_takes_the_0_20_kv_dtypes_and_refuses_them_earlier() -> None:
    def plan(version: str) -> tuple[int, str, str]:
        return cli(
            *("plan", "--model", LLAMA, "--gpu", "H100-SXM-80GB", "--engine-version", version),
            *("--kv-cache-dtype", "int8_per_token_head"),
        )

    code, out, err = plan("0.22.0")
    assert code == 0, err
    assert "KV dtype int8_per_token_head" in out
    code, out, err = plan("0.19.0")
    assert code != 0
    assert "invalid choice 'int8_per_token_head'; accepted from 0.20.0" in err
    assert "Traceback" not in err


# --- nvfp4 KV only on SM100 -------------------------------------------------------------------


def test_nvfp4_kv_is_refused_off_datacenter_blackwell() -> None:
    for name in ("H100-SXM-80GB", "RTX-5090"):
        gpu = get_gpu(name)
        with pytest.raises(SettingsError, match="nvfp4 on .*SM100-family"):
            settle("nvfp4", "0.25.0", gpu.name)
    b200 = get_gpu("B200-180GB")
    rs = settle("nvfp4", "0.25.0", b200.name)
    assert rs.kv_cache_dtype == "nvfp4"


# --- FA3's split buffer follows the backend the KV dtype picks --------------------------------


def test_fa3_split_buffer_only_where_flash_attn_takes_the_kv_dtype() -> None:
    llama = load_model(LLAMA)
    h100 = "H100-SXM-80GB"
    full = 32 * 512 * 32 * 128 * 4  # splits × tokens × query heads × value head × float32

    def split(kv: str, version: str) -> int:
        return fa3_split_buffer_bytes(llama, h100, "bfloat16", 512, 1, kv, rules(version))

    assert split("auto", "0.19.0") == split("auto", "0.22.0") == full
    assert split("fp8", "0.22.0") == split("fp8_e4m3", "0.28.0") == full
    assert split("fp8_e5m2", "0.19.0") == full  # startswith("fp8") there
    assert split("fp8_e5m2", "0.22.0") == split("fp8_e5m2", "0.28.0") == 0
    assert split("int8_per_token_head", "0.20.0") == full  # is_quantized_kv_cache in 0.20-0.21
    assert split("int8_per_token_head", "0.22.0") == 0  # Triton from 0.22
    assert split("nvfp4", "0.22.0") == 0


def test_fp8_mla_on_hopper_takes_flashmla_without_the_split_buffer() -> None:
    ds = load_model("deepseek-ai/DeepSeek-V2-Lite")
    h100 = "H100-SXM-80GB"
    bf16 = fa3_split_buffer_bytes(ds, h100, "bfloat16", 512, 1, "auto", rules("0.19.0"))
    assert bf16 > 0
    assert fa3_split_buffer_bytes(ds, h100, "bfloat16", 512, 1, "fp8", rules("0.19.0")) == 0
    # before 0.18 the platform picked the backend; the rule is not applied there
    assert fa3_split_buffer_bytes(ds, h100, "bfloat16", 512, 1, "fp8", rules("0.17.0")) == bf16


# --- int4 per-token-head (0.25+) and the formats a backend kind lacks ------------------------


def test_int4_per_token_head_packs_two_values_a_byte_before_its_scales() -> None:
    """``real_page_size_bytes`` (v1/kv_cache_interface.py 0.26.0: head_size // 2 for
    INT4_PER_TOKEN_HEAD, uint8) plus the per-token-head scales; 0.28.0's
    ``TritonAttentionBackend.customize_spec`` gives the same (hs_k/2 + hs_v/2 + 2 × 4 per
    head). Llama-3.1-8B: 8 KV heads × (64 + 64 + 8) = 1,088 B per token and layer."""
    shape = load_model(LLAMA)
    layer = shape.layer_groups[0].attention
    assert token_bytes(layer, 1, 1, kv_token_format("int4_per_token_head")) == 8 * 136
    assert token_bytes(layer, 2, 1, kv_token_format("int4_per_token_head")) == 4 * 136
    gpu = get_gpu("RTX-3090")
    rs = settle("int4_per_token_head", "0.26.0", gpu.name)
    assert rs.kv_cache_dtype == "int4_per_token_head"
    (u,) = classify({"kv-cache-dtype": "int4_per_token_head"}, {}, "0.24.0")
    assert u.why == "vLLM 0.24.0: invalid choice 'int4_per_token_head'; accepted from 0.25.0"
    assert classify({"kv-cache-dtype": "int4_per_token_head"}, {}, "0.25.0") == []


@pytest.mark.parametrize("kv", ["int8_per_token_head", "int4_per_token_head", "nvfp4"])
def test_mla_refuses_the_formats_no_mla_backend_takes(kv: str) -> None:
    """No v1/attention/backends/mla/*.py lists a per-token-head or nvfp4 KV in its
    ``supported_kv_cache_dtypes`` (0.22.0, 0.26.0, 0.28.0): vLLM finds no backend."""
    b200 = get_gpu("B200-180GB")
    with pytest.raises(SettingsError, match=f"{kv} with MLA attention"):
        settle(kv, "0.26.0", b200.name, "deepseek-ai/DeepSeek-V2-Lite")


def test_fp8_ds_mla_is_refused_outside_deepseek_v4() -> None:
    h100 = get_gpu("H100-SXM-80GB")
    with pytest.raises(SettingsError, match="fp8_ds_mla is the layout of DeepSeek's sparse MLA"):
        settle("fp8_ds_mla", "0.26.0", h100.name)


def test_an_unsized_kv_dtype_is_refused_naming_it() -> None:
    (u,) = classify({"kv-cache-dtype": "turboquant_k8v4"}, {}, "0.26.0")
    assert u.why == "KV dtype 'turboquant_k8v4' is not one the ledger sizes"
    (u,) = classify({"kv-cache-dtype": "int8"}, {}, None)
    assert u.why.endswith("(int8 is not a vLLM KV dtype)")


def test_a_decode_step_reads_the_packed_kv_page() -> None:
    """The latency model's KV read per token is the page's bytes (ledger/kv.py token_bytes):
    Llama-3.1-8B, 32 layers: fp8 2,048 B a layer, int8_per_token_head 2,112, int4 1,088."""
    from inference_capacity.engines.vllm import predict_startup
    from inference_capacity.sizing.latency import build_latency_model

    shape = load_model(LLAMA)
    gpu = get_gpu("RTX-4090")

    def read(kv: str) -> int:
        s = EngineSettings(version="0.26.0", kv_cache_dtype=kv, max_model_len=8192)
        pred = predict_startup(shape, gpu.total_bytes, gpu.name, 1, 1, s)
        model = build_latency_model(shape, gpu, pred)
        assert model is not None
        return model.stages[0].full_bytes_per_token

    assert read("fp8") == 32 * 2048
    assert read("int8_per_token_head") == 32 * 2112
    assert read("int4_per_token_head") == 32 * 1088
