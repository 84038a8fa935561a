"""Every vLLM flag and VLLM_* variable of the container is modelled, known-neutral or refused;
the flags that move memory change the plan as vLLM's code says."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from inference_capacity.api import InferenceCapacity
from inference_capacity.engines.vllm import predict_startup
from inference_capacity.engines.vllm_args import read_flags, rewrite_flags
from inference_capacity.engines.vllm_flags import (
    MODELLED_ENV,
    MODELLED_FLAGS,
    NEUTRAL_ENV,
    NEUTRAL_FLAGS,
    REFUSED_FLAGS,
    classify,
    human_readable_int,
    parse_speculative_config,
)
from inference_capacity.patching import REMOVED, apply_strategic, build_change
from inference_capacity.planner import make_plan
from inference_capacity.resolve import resolve

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"
GiB = 2**30
#: Llama-3.1-8B KV block at B = 16: 32 layers × 16 × 2 × 8 × 128 × 2 B = 2 MiB
LLAMA8B_BLOCK = 32 * 16 * 2 * 8 * 128 * 2
#: the acceptance case: --kv-cache-memory-bytes 20000000000
POOL = 20_000_000_000
NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'


def example(args: list[str], env: list[dict[str, Any]] | None = None) -> tuple[Any, Any]:
    icap, dep = list(yaml.safe_load_all(EXAMPLE.read_text()))
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["args"] = ["--port", "8000", "--max-model-len", "32768", *args]
    if env is not None:
        c["env"] = env
    return icap, dep


def resolved(icap: Any, dep: Any) -> Any:
    return resolve(InferenceCapacity.from_manifest(icap, ignore_status=True).spec, dep)


# --- the lists --------------------------------------------------------------------------------


def test_lists_are_disjoint() -> None:
    assert not MODELLED_FLAGS & NEUTRAL_FLAGS
    assert not set(REFUSED_FLAGS) & (MODELLED_FLAGS | NEUTRAL_FLAGS)
    from inference_capacity.engines.vllm_flags import UNREVIEWED_FLAGS

    assert not UNREVIEWED_FLAGS & (MODELLED_FLAGS | NEUTRAL_FLAGS | set(REFUSED_FLAGS))
    assert not MODELLED_ENV & NEUTRAL_ENV


def test_a_made_up_flag_is_refused_by_name() -> None:
    bad = classify({"model": "m", "hypothetical-cache-size": "5"}, {})
    assert [u.name for u in bad] == ["--hypothetical-cache-size"]
    assert "until it is classified" in bad[0].why


@pytest.mark.parametrize("flag", sorted(NEUTRAL_FLAGS))
def test_every_neutral_flag_passes(flag: str) -> None:
    assert classify({flag: "x"}, {}) == []


@pytest.mark.parametrize("flag", sorted(REFUSED_FLAGS))
def test_every_known_memory_flag_is_refused_with_its_reason(flag: str) -> None:
    (u,) = classify({flag: "1"}, {})
    assert u.name == f"--{flag}" and u.why == REFUSED_FLAGS[flag]


def test_negated_neutral_flag_passes() -> None:
    assert classify({"no-enable-log-requests": "true"}, {}) == []


@pytest.mark.parametrize(
    ("flag", "value", "problem"),
    [
        ("load-format", "bitsandbytes", "changes the weights"),
        ("compilation-config", '{"pass_config": {}}', "pass_config"),
        ("speculative-config", '{"method": "lookahead", "num_speculative_tokens": 2}', "method"),
        ("speculative-config", '{"method": "ngram"}', "num_speculative_tokens"),
        ("kv-transfer-config", '{"kv_connector": "P2pNcclConnector"}', "P2pNcclConnector"),
        ("performance-mode", "turbo", "turbo"),
        ("limit-mm-per-prompt", "[1]", "JSON object"),
    ],
)
def test_modelled_flag_with_an_unmodelled_value_is_refused(
    flag: str, value: str, problem: str
) -> None:
    (u,) = classify({flag: value}, {})
    assert u.name == f"--{flag}" and problem in u.why


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("compilation-config", '{"cudagraph_capture_sizes": [1, 2, 4], "level": 3}'),
        ("compilation-config", "3"),
        ("speculative-config", NGRAM),
        ("kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'),
        ("load-format", "safetensors"),
        ("performance-mode", "throughput"),
    ],
)
def test_modelled_values_pass(flag: str, value: str) -> None:
    assert classify({flag: value}, {}) == []


def test_env_vars() -> None:
    env = {
        "VLLM_LOGGING_LEVEL": "DEBUG",  # neutral
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0",  # modelled
        "VLLM_ATTENTION_BACKEND": "FLASHINFER",  # moves the block size: refused
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN": None,  # modelled, but from valueFrom: unreadable
        "HF_TOKEN": None,  # not vLLM's
    }
    bad = {u.name: u.why for u in classify({}, env)}
    assert set(bad) == {"VLLM_ATTENTION_BACKEND", "VLLM_ALLOW_LONG_MAX_MODEL_LEN"}
    assert "valueFrom" in bad["VLLM_ALLOW_LONG_MAX_MODEL_LEN"]


def test_the_model_runner_variable_is_read_as_vllm_reads_it() -> None:
    # envs.py parses VLLM_USE_V2_MODEL_RUNNER with int(): 0 and 1 are a choice of runner, any
    # other text fails vLLM's start, so the plan refuses it by name
    assert classify({}, {"VLLM_USE_V2_MODEL_RUNNER": "0"}) == []
    assert classify({}, {"VLLM_USE_V2_MODEL_RUNNER": "1"}) == []
    (u,) = classify({}, {"VLLM_USE_V2_MODEL_RUNNER": "false"})
    assert u.name == "VLLM_USE_V2_MODEL_RUNNER" and "int()" in u.why
    (u,) = classify({}, {"VLLM_USE_V2_MODEL_RUNNER": None})
    assert "valueFrom" in u.why
    from inference_capacity.engines.vllm_config import read_engine

    for value, choice in (("0", False), ("1", True)):
        cfg = read_engine(["m"], {"VLLM_USE_V2_MODEL_RUNNER": value}, "0.26.0")
        assert cfg.env.v2_model_runner is choice
        assert cfg.settings().use_v2_model_runner is choice
    assert read_engine(["m"], {}, "0.26.0").env.v2_model_runner is None
    # a value vLLM cannot read is refused by name, and the rest of the launch still reads
    bad = read_engine(["m"], {"VLLM_USE_V2_MODEL_RUNNER": "yes"}, "0.26.0")
    assert bad.env.v2_model_runner is None
    assert [u.name for u in bad.refused] == ["VLLM_USE_V2_MODEL_RUNNER"]


@pytest.mark.parametrize(
    ("text", "value"),
    # engine/arg_utils.py::human_readable_int: lowercase decimal, uppercase binary
    [("32k", 32_000), ("32K", 32 * 1024), ("25.6k", 25_600), ("1m", 10**6), ("2G", 2 * 2**30)],
)
def test_human_readable_int(text: str, value: int) -> None:
    assert human_readable_int(text) == value


def test_human_readable_int_refuses_binary_decimals() -> None:
    with pytest.raises(ValueError, match="binary"):
        human_readable_int("1.5K")


def test_speculative_config_method_inferred() -> None:
    assert parse_speculative_config('{"model": "[ngram]", "num_speculative_tokens": 3}').method == (
        "ngram"
    )
    s = parse_speculative_config('{"model": "x/draft", "num_speculative_tokens": 3}')
    assert (s.method, s.model, s.num_speculative_tokens) == ("draft_model", "x/draft", 3)


# --- removal ------------------------------------------------------------------------------


def test_rewrite_removes_a_flag_and_its_value() -> None:
    c = {"name": "v", "command": ["vllm", "serve", "m"], "args": ["--kv-cache-memory-bytes", "5"]}
    new = rewrite_flags(c, {"gpu-memory-utilization": "0.9"}, remove=["kv-cache-memory-bytes"])
    assert new["args"] == ["--gpu-memory-utilization", "0.9"]
    sh = {"name": "v", "command": ["sh", "-c", "vllm serve m --kv-cache-memory-bytes=5 --port 1"]}
    new = rewrite_flags(sh, {}, remove=["kv-cache-memory-bytes"])
    assert new["command"][2] == "vllm serve m --port 1"


# --- end to end: the acceptance Deployment ---------------------------------------------------

ACCEPTANCE = [
    "--kv-cache-memory-bytes",
    str(POOL),
    "--enable-lora",
    "--max-loras",
    "4",
    "--max-lora-rank",
    "64",
    "--speculative-config",
    NGRAM,
]


def test_kv_cache_memory_bytes_is_the_pool_vllm_has() -> None:
    icap, dep = example(ACCEPTANCE)
    r = resolved(icap, dep)
    assert r.supported, r.unsupported_message()
    assert r.plan_input.kv_pool_bytes == POOL
    assert (r.plan_input.engine.max_loras, r.plan_input.engine.max_lora_rank) == (4, 64)
    plan = make_plan(r.plan_input)
    pool = plan.prediction.num_gpu_blocks * LLAMA8B_BLOCK
    # gpu_worker.py::determine_available_memory returns kv_cache_memory_bytes as is: 20e9 B
    # is 9,536 blocks of 2 MiB = 152,576 tokens (n-gram drafting adds no KV layer)
    assert plan.prediction.num_gpu_blocks == POOL // LLAMA8B_BLOCK == 9536
    assert plan.prediction.kv_cache_tokens == 9536 * 16 == 152_576
    assert abs(pool - POOL) / POOL < 0.02
    # LoRA slots: 4 × 64 × Σ(in + out) over the 7 linears of 32 layers, bf16
    h, kv, inter = 4096, 1024, 14336
    per_layer = (h + h) + 2 * (h + kv) + (h + h) + 2 * (h + inter) + (inter + h)
    assert plan.prediction.ranks[0].weights.lora == 4 * 64 * 32 * per_layer * 2
    # the patch leaves exactly one of utilization / kv-cache-memory-bytes
    rec = plan.recommendation
    flags = rec.flags()
    change = build_change(dep, 0, flags, r.running_flags, None, None, remove=rec.removed_flags())
    c = apply_strategic(dep, change.patch)["spec"]["template"]["spec"]["containers"][0]
    after = read_flags(c)
    assert "kv-cache-memory-bytes" not in after
    assert after["gpu-memory-utilization"] == flags["gpu-memory-utilization"]
    assert change.changed_flags["kv-cache-memory-bytes"] == (str(POOL), REMOVED)
    # and with the bytes policy, the bytes stay and no utilization is written
    change = build_change(
        dep,
        0,
        rec.flags(kv_cache_memory=True),
        r.running_flags,
        None,
        None,
        remove=rec.removed_flags(kv_cache_memory=True),
    )
    c = apply_strategic(dep, change.patch)["spec"]["template"]["spec"]["containers"][0]
    after = read_flags(c)
    assert after["kv-cache-memory-bytes"] == str(POOL)
    assert "gpu-memory-utilization" not in after


def test_a_draft_model_the_hub_cannot_give_is_refused() -> None:
    # outside the catalog the drafter is a Hub id (tests/test_spec_decode.py resolves one);
    # here HF_ENDPOINT is a closed port (conftest.py): refused, naming the drafter and why
    spec = '{"method": "eagle", "model": "someone/eagle-head", "num_speculative_tokens": 3}'
    r = resolved(*example(["--speculative-config", spec]))
    assert [u.name for u in r.unsupported] == ["--speculative-config"]
    assert "someone/eagle-head" in r.unsupported[0].why
    assert "cannot reach the Hub" in r.unsupported[0].why


def test_a_catalog_draft_model_adds_weights_and_kv_layers() -> None:
    spec = json.dumps(
        {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 3}
    )
    plain = resolved(*example([])).plan_input
    with_draft = resolved(*example(["--speculative-config", spec])).plan_input
    a = make_plan(plain).prediction
    b = make_plan(with_draft).prediction
    # Llama-3.2-1B: 16 layers × 2 × 8 × 64 × 2 B = 32 KiB per token joins the 128 KiB of the
    # target in every block (same block size): 2 MiB + 512 KiB per block
    assert b.ranks[0].layout.bytes_per_block == LLAMA8B_BLOCK + 16 * 16 * 2 * 8 * 64 * 2
    assert b.ranks[0].weights.by_group["drafter"] > 2 * GiB
    assert b.kv_cache_tokens < a.kv_cache_tokens


def test_mtp_without_mtp_layers_is_an_error() -> None:
    spec = '{"method": "mtp", "num_speculative_tokens": 1}'
    r = resolved(*example(["--speculative-config", spec]))
    with pytest.raises(ValueError, match="MTP layers"):
        make_plan(r.plan_input)


def test_unresolved_modelled_value_is_refused() -> None:
    env = [{"name": "POOL", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}]
    r = resolved(*example(["--kv-cache-memory-bytes", "$(POOL)"], env))
    assert [u.name for u in r.unsupported] == ["--kv-cache-memory-bytes"]


def test_spec_and_container_lora_disagree() -> None:
    icap, dep = example(["--enable-lora", "--max-loras", "2"])
    icap["spec"]["model"]["maxLoras"] = 4
    assert any("maxLoras" in c for c in resolved(icap, dep).conflicts)
    icap, dep = example([])
    icap["spec"]["model"]["maxLoras"] = 4
    assert any("--enable-lora" in c for c in resolved(icap, dep).conflicts)


def test_container_dtype_and_quantization() -> None:
    r = resolved(*example(["--dtype", "half"]))
    assert r.plan_input.engine.dtype == "float16"
    r = resolved(*example(["--quantization", "fp8"]))
    assert [u.name for u in r.unsupported] == ["--quantization"]


def test_flags_reach_the_engine_settings() -> None:
    env = [{"name": "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "value": "0"}]
    args = [
        "--no-enable-prefix-caching",
        "--kv-transfer-config",
        '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}',
        "--performance-mode",
        "throughput",
        "--compilation-config",
        '{"cudagraph_capture_sizes": [1, 2, 4, 8]}',
        "--data-parallel-size",
        "2",
        "--max-num-batched-tokens",
        "16k",
    ]
    e = resolved(*example(args, env)).plan_input.engine
    assert e.enable_prefix_caching is False
    assert e.kv_transfer is True
    assert e.performance_mode == "throughput"
    assert e.cudagraph_capture_sizes == (1, 2, 4, 8)
    assert e.data_parallel == 2
    assert e.estimate_cuda_graphs is False
    assert e.max_num_batched_tokens == 16_000  # "16k": decimal (human_readable_int)


def test_max_model_len_minus_one_fits_the_pool() -> None:
    icap, dep = example(["--kv-cache-memory-bytes", str(4 * GiB)])
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["args"][3] = "-1"
    del icap["spec"]["workload"]["maxModelLen"]
    r = resolved(icap, dep)
    assert r.plan_input.engine.auto_max_model_len
    inp = r.plan_input
    settings = replace(inp.engine, kv_cache_memory_bytes=4 * GiB)
    p = predict_startup(inp.model, inp.gpu.total_bytes, inp.gpu.name, 1, 1, settings)
    # 4 GiB / 128 KiB per token = 32,768 tokens: the fitted length
    assert p.starts and p.settings.max_model_len == 4 * GiB // (128 * 1024)


# --- the CLI ------------------------------------------------------------------------------


def run(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("inference-capacity", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "inference_capacity.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_cli_refuses_an_unknown_flag(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text(yaml.safe_dump_all(example(["--hypothetical-cache-size", "5"])))
    r = run("plan", str(f), "--fail-if-not-fits", "-o", "json")
    assert r.returncode == 1
    assert "--hypothetical-cache-size" in r.stderr and "Supported=False" in r.stderr
    assert "Traceback" not in r.stderr
    out = json.loads(r.stdout)
    assert out["supported"] is False
    assert out["unsupported"][0]["name"] == "--hypothetical-cache-size"
    assert "strategicMergePatch" not in out["patch"]
    r = run("plan", str(f))
    assert r.returncode == 0 and "Supported=False" in r.stdout


def test_spec_and_container_engine_settings_disagree() -> None:
    icap, dep = example(["--max-num-batched-tokens", "4096", "--block-size", "32"])
    icap["spec"]["engine"]["maxNumBatchedTokens"] = 8192
    icap["spec"]["engine"]["blockSize"] = 16
    icap["spec"]["engine"]["enforceEager"] = True
    conflicts = resolved(icap, dep).conflicts
    assert any(c.startswith("spec.engine.maxNumBatchedTokens") for c in conflicts)
    assert any(c.startswith("spec.engine.blockSize") for c in conflicts)
    assert any(c.startswith("spec.engine.enforceEager") for c in conflicts)
    # the same values in both: no conflict
    icap, dep = example(["--max-num-batched-tokens", "8k"])
    icap["spec"]["engine"]["maxNumBatchedTokens"] = 8000
    assert resolved(icap, dep).conflicts == ()


def test_flags_hidden_in_a_shell_expansion_are_refused() -> None:
    icap, dep = example([])
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["command"] = ["sh", "-c", "vllm serve meta-llama/Llama-3.1-8B-Instruct $EXTRA_ARGS"]
    del c["args"]
    r = resolved(icap, dep)
    assert [u.name for u in r.unsupported] == ["(command line)"]
    assert "$EXTRA_ARGS" in r.unsupported[0].why


def test_every_boolean_flag_the_parser_knows_is_classified() -> None:
    from inference_capacity.engines.vllm_args.vocabulary import _BOOLEAN_FLAGS, normalise_flag
    from inference_capacity.engines.vllm_flags import UNREVIEWED_FLAGS

    known = MODELLED_FLAGS | NEUTRAL_FLAGS | set(REFUSED_FLAGS) | UNREVIEWED_FLAGS
    # aliases (-dpe) by their canonical name, --no-x forms by x
    names = {normalise_flag(f) for f in _BOOLEAN_FLAGS}
    assert sorted(n for n in names if n not in known and n.removeprefix("no-") not in known) == []


def test_lora_defaults_and_cpu_cache_as_host_memory() -> None:
    # --enable-lora alone: LoRAConfig defaults max_loras 1, max_lora_rank 16
    r = resolved(*example(["--enable-lora", "--max-cpu-loras", "8"]))
    assert (r.plan_input.engine.max_loras, r.plan_input.engine.max_lora_rank) == (1, 16)
    plan = make_plan(r.plan_input)
    assert any("--max-cpu-loras 8" in n and "host memory" in n for n in plan.notes)
    h, kv, inter = 4096, 1024, 14336
    per_layer = (h + h) + 2 * (h + kv) + (h + h) + 2 * (h + inter) + (inter + h)
    assert plan.prediction.ranks[0].weights.lora == 16 * 32 * per_layer * 2


def test_no_prefix_caching_drops_the_shared_prefix_credit() -> None:
    with_cache = make_plan(resolved(*example([])).plan_input)
    without = make_plan(resolved(*example(["--no-enable-prefix-caching"])).plan_input)
    assert with_cache.seqs is not None and without.seqs is not None
    # the example's chat cohort shares a 500-token prefix; without prefix caching every
    # sequence holds its own copy, so fewer sequences fit
    assert "shared-prefix" in with_cache.seqs.message
    assert "shared-prefix" not in without.seqs.message
    assert without.seqs.max_num_seqs < with_cache.seqs.max_num_seqs


def test_spec_engine_pool_dp_and_prefix_caching() -> None:
    icap, dep = example([])
    icap["spec"]["engine"]["kvCacheMemoryBytes"] = POOL
    r = resolved(icap, dep)
    assert r.plan_input.kv_pool_bytes == POOL and r.conflicts == ()
    icap, dep = example(["--kv-cache-memory-bytes", "1000"])
    icap["spec"]["engine"]["kvCacheMemoryBytes"] = POOL
    r = resolved(icap, dep)
    assert r.plan_input.kv_pool_bytes == POOL
    assert any(c.startswith("spec.engine.kvCacheMemoryBytes") for c in r.conflicts)
    icap, dep = example([])
    icap["spec"]["engine"]["dataParallel"] = 2
    assert any(c.startswith("spec.engine.dataParallel") for c in resolved(icap, dep).conflicts)
    icap, dep = example([])
    icap["spec"]["engine"]["enablePrefixCaching"] = False
    r = resolved(icap, dep)
    assert any(c.startswith("spec.engine.enablePrefixCaching") for c in r.conflicts)
    assert r.plan_input.engine.enable_prefix_caching is False
    icap, dep = example(["--no-enable-prefix-caching"])
    icap["spec"]["engine"]["enablePrefixCaching"] = False
    assert resolved(icap, dep).conflicts == ()


def test_quantization_kernel_variant_of_the_checkpoint_is_modelled() -> None:
    icap, dep = example(["--quantization", "awq_marlin"])
    icap["spec"]["model"]["name"] = "LDCC/Qwen2.5-72B-Instruct-ko-AWQ"
    assert resolved(icap, dep).unsupported == ()
