"""One reader for a vLLM launch (issue 20 item 1): ``engines/vllm_config.py::read_engine``.

A what-if of ``plan --model`` and a container carrying the same flags are read into the same
EngineConfig and give the same plan; bad values are refused naming the flag; every setting is
documented where it is declared."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
from dataclasses import replace
from typing import Any

import pytest

from inference_capacity.api import InferenceCapacity
from inference_capacity.cli.flags import whatif_engine, whatif_vllm_args
from inference_capacity.cli.parser import build_parser
from inference_capacity.engines import vllm_config
from inference_capacity.engines.vllm_args import read_env, read_flags
from inference_capacity.engines.vllm_config import (
    EngineConfig,
    EngineConfigError,
    read_engine,
)
from inference_capacity.planner import make_plan
from inference_capacity.report import plan_json
from inference_capacity.resolve import ResolveError, resolve
from tests.test_vllm_flag_table import cli

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
VERSION = "0.19.0"
#: what-if flags of ``plan --model`` (besides --model/--gpu) and the vLLM flags they stand for
WHATIF = [
    "--tp",
    "2",
    "--max-model-len",
    "8192",
    "--kv-cache-dtype",
    "fp8",
    "--block-size",
    "16",
    "--max-num-batched-tokens",
    "4096",
    "--max-loras",
    "2",
    "--max-lora-rank",
    "32",
    "--dtype",
    "half",
    "--enforce-eager",
    "--gpu-memory-utilization",
    "0.85",
    "--max-num-seqs",
    "64",
]
VLLM_ARGS = [
    "--tensor-parallel-size",
    "2",
    "--gpu-memory-utilization",
    "0.85",
    "--max-model-len",
    "8192",
    "--max-num-seqs",
    "64",
    "--max-num-batched-tokens",
    "4096",
    "--block-size",
    "16",
    "--kv-cache-dtype",
    "fp8",
    "--dtype",
    "half",
    "--enforce-eager",
    "--enable-lora",
    "--max-loras",
    "2",
    "--max-lora-rank",
    "32",
]


def _whatif(extra: list[str]) -> Any:
    return build_parser().parse_args(
        ["plan", "--model", MODEL, "--gpu", "H100-SXM-80GB", "--engine-version", VERSION, *extra]
    )


def _container(args: list[str], env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "name": "vllm",
        "image": f"vllm/vllm-openai:v{VERSION}",
        "command": ["vllm", "serve", MODEL],
        "args": args,
        "env": env or [],
    }


def _deployment(container: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llama", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "llama"}},
            "template": {
                "metadata": {"labels": {"app": "llama"}},
                "spec": {"containers": [container]},
            },
        },
    }


def _spec() -> Any:
    """A spec that says nothing the flags say: the Deployment's flags are the plan's."""
    return InferenceCapacity.from_manifest(
        {
            "apiVersion": "capacity.inference.dev/v1alpha1",
            "kind": "InferenceCapacity",
            "metadata": {"name": "llama", "namespace": "default"},
            "spec": {
                "targetRef": {"kind": "Deployment", "name": "llama", "container": "vllm"},
                "model": {"name": MODEL},
                "hardware": {"gpu": "H100-SXM-80GB"},
            },
        }
    ).spec


def test_whatif_flags_are_the_vllm_flags_of_a_container() -> None:
    a = _whatif(WHATIF)
    assert whatif_vllm_args(a) == VLLM_ARGS
    c = _container(VLLM_ARGS)
    from_container = read_engine(read_flags(c), read_env(c), VERSION)
    from_whatif = whatif_engine(a, VERSION)
    assert from_whatif == from_container
    assert from_whatif.refused == ()
    # what the flags say, by area (each value as vLLM reads it; --dtype half is float16)
    assert from_whatif.parallel.tensor_parallel_size == 2
    assert from_whatif.model.dtype == "float16"
    assert from_whatif.model.max_model_len == 8192
    assert from_whatif.cache.kv_cache_dtype == "fp8"
    assert from_whatif.cache.gpu_memory_utilization == 0.85
    assert from_whatif.scheduler.max_num_seqs == 64
    assert from_whatif.lora.slots == (2, 32)
    assert from_whatif.compilation.eager


def test_whatif_and_container_give_the_same_plan() -> None:
    """The what-if at these flags is the plan of the Deployment's input run at the same two
    flags the operator would otherwise choose (--gpu-memory-utilization, --max-num-seqs)."""
    code, out, err = cli(
        "plan",
        "--model",
        MODEL,
        "--gpu",
        "H100-SXM-80GB",
        "--engine-version",
        VERSION,
        *WHATIF,
        "-o",
        "json",
    )
    assert code == 0, err
    whatif = json.loads(out)
    resolved = resolve(_spec(), _deployment(_container(VLLM_ARGS)), {})
    assert resolved.supported, resolved.unsupported_message()
    cfg = resolved.engine_config
    assert isinstance(cfg, EngineConfig)
    assert cfg == whatif_engine(_whatif(WHATIF), VERSION)
    inp = resolved.plan_input
    # the operator chooses the two flags it writes; everything else is the flags'
    assert inp.engine == replace(cfg.settings(), gpu_memory_utilization=None, max_num_seqs=None)
    run = make_plan(
        replace(
            inp,
            engine=cfg.settings(),
            workload=None,
            choose_utilization=False,
            choose_max_num_seqs=False,
        )
    )
    ours = plan_json(run)
    for key in ("vllm_startup", "kv", "parallelism", "ledger"):
        assert ours[key] == whatif[key], key


def test_repeated_flags_last_wins_and_boolean_forms() -> None:
    cfg = read_engine(
        ["m", "--max-model-len", "8k", "--max-model-len", "16384", "--no-enable-prefix-caching"],
        {},
        VERSION,
    )
    assert cfg.model.model == "m"
    assert cfg.model.max_model_len == 16384  # argparse keeps the last value
    assert cfg.cache.enable_prefix_caching is False
    auto = read_engine(["m", "--max-model-len", "-1"], {}, VERSION)
    assert (auto.model.max_model_len, auto.model.auto_max_model_len) == (None, True)
    human = read_engine(["m", "--max-model-len", "32k"], {}, VERSION)
    assert human.model.max_model_len == 32_000  # human_readable_int: lowercase is decimal


def test_vllm_use_v1_chooses_the_engine() -> None:
    """envs.py VLLM_USE_V1: "0" the V0 engine (≤ 0.10), "1" V1 (opt-in before 0.8)."""
    assert read_engine([], {"VLLM_USE_V1": "0"}, "0.6.4").env.engine == "v0"
    assert read_engine([], {"VLLM_USE_V1": "1"}, "0.7.3").env.engine == "v1"
    assert read_engine([], {}, "0.7.3").env.engine is None
    a = _whatif(["--engine", "v1"])
    assert whatif_engine(a, "0.7.3") == read_engine([MODEL], {"VLLM_USE_V1": "1"}, "0.7.3")


@pytest.mark.parametrize(
    ("args", "flag", "words"),
    [
        (["--max-model-len", "lots"], "--max-model-len", "'lots' is not an integer"),
        (["--tensor-parallel-size", "two"], "--tensor-parallel-size", "not an integer"),
        (["--gpu-memory-utilization", "most"], "--gpu-memory-utilization", "not a number"),
        (["--dtype", "int8"], "--dtype", "'int8' is not modelled"),
    ],
)
def test_a_value_vllm_cannot_read_is_refused_naming_the_flag(
    args: list[str], flag: str, words: str
) -> None:
    cfg = read_engine(["m", *args], {}, VERSION)
    refused = {u.name: u.why for u in cfg.refused}
    assert flag in refused and words in refused[flag]


@pytest.mark.parametrize(
    ("args", "flag", "bound"),
    [
        (["--tensor-parallel-size", "128"], "--tensor-parallel-size", "(0, 64]"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization", "(0, 1]"),
        (["--block-size", "0"], "--block-size", "(0, 1024]"),
        (["--data-parallel-size", "2048"], "--data-parallel-size", "(0, 1024]"),
        (["--max-num-seqs", "0"], "--max-num-seqs", "(0, 1048576]"),
    ],
)
def test_a_number_out_of_bounds_is_an_error_naming_the_flag(
    args: list[str], flag: str, bound: str
) -> None:
    with pytest.raises(EngineConfigError) as got:
        read_engine(["m", *args], {}, VERSION)
    assert got.value.flag == flag and bound in str(got.value)


def test_out_of_bounds_on_a_deployment_and_in_a_whatif() -> None:
    with pytest.raises(ResolveError) as got:
        resolve(_spec(), _deployment(_container(["--tensor-parallel-size", "128"])), {})
    assert got.value.field == "--tensor-parallel-size on the Deployment"
    assert got.value.reason == "InvalidTarget"
    code, _, err = cli("plan", "--model", MODEL, "--gpu", "H100-SXM-80GB", "--tp", "128")
    assert code != 0 and "--tensor-parallel-size" in err and "(0, 64]" in err


def _settings_records() -> list[type]:
    return [
        obj
        for _, obj in inspect.getmembers(vllm_config, inspect.isclass)
        if dataclasses.is_dataclass(obj) and obj.__module__ == vllm_config.__name__
    ]


def test_every_setting_is_documented_where_it_is_declared() -> None:
    """Each field of each settings record has a ``#:`` comment on the line above it."""
    source = inspect.getsource(vllm_config).splitlines()
    tree = ast.parse("\n".join(source))
    undocumented = []
    records = {c.__name__ for c in _settings_records()}
    assert {"ModelSettings", "CacheSettings", "ParallelSettings", "SchedulerSettings"} <= records
    assert {"LoraSettings", "SpeculativeSettings", "MultimodalSettings"} <= records
    assert {"CompilationSettings", "KvTransferSettings", "EnvSettings"} <= records
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name not in records - {"EngineConfig"}:
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                above = source[stmt.lineno - 2].strip()
                if not above.startswith("#:"):
                    undocumented.append(f"{node.name}.{stmt.target.id}")
    assert not undocumented, undocumented


def test_every_numeric_flag_setting_is_bounded() -> None:
    """An int or float setting read from a flag carries its bounds (``_bounded``)."""
    unbounded = []
    for record in _settings_records():
        if record is EngineConfig:
            continue
        for f in dataclasses.fields(record):
            if f.type in ("int | None", "float | None") and "high" not in f.metadata:
                unbounded.append(f"{record.__name__}.{f.name}")
    assert not unbounded, unbounded


def test_a_pods_running_flags_are_read_by_the_same_reader() -> None:
    """controller/startup.py and observing.py predict a pod at the values it runs of the flags
    the operator writes, read by read_engine (``32k`` is 32000 as in vLLM; a value vLLM cannot
    read gives no prediction)."""
    from inference_capacity.engines import EngineSettings
    from inference_capacity.engines.vllm_config import at_running_flags

    base = EngineSettings(VERSION, max_model_len=8192)
    got = at_running_flags(
        base, {"gpu-memory-utilization": "0.8", "max-num-seqs": "64", "max-model-len": "32k"}
    )
    assert got == replace(base, gpu_memory_utilization=0.8, max_num_seqs=64, max_model_len=32_000)
    assert at_running_flags(base, {}) == base
    assert at_running_flags(base, {"gpu-memory-utilization": "most"}) is None
    assert at_running_flags(base, {"gpu-memory-utilization": "1.5"}) is None
