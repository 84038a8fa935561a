"""Tests for inference_capacity.engines.vllm_args: reading and rewriting vLLM flags."""

from __future__ import annotations

import copy
import shlex
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inference_capacity.engines.vllm_args import (
    SIZING_FLAGS,
    VllmArgsError,
    find_conflicts,
    find_vllm_container,
    normalise_flag,
    parse_image_version,
    read_flags,
    rewrite_flags,
    runs_vllm,
    unresolved_flags,
)

Container = dict[str, Any]

# --------------------------------------------------------------- realistic containers

# The Kubernetes example of the vLLM docs (deployment/k8s).
DOCS_SHELL: Container = {
    "name": "mistral-7b",
    "image": "vllm/vllm-openai:latest",
    "command": ["/bin/sh", "-c"],
    "args": [
        "vllm serve meta-llama/Llama-3.2-1B-Instruct --trust-remote-code "
        "--enable-chunked-prefill --max_num_batched_tokens 1024"
    ],
    "env": [
        {
            "name": "HUGGING_FACE_HUB_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hf-token-secret", "key": "token"}},
        }
    ],
    "ports": [{"containerPort": 8000}],
    "resources": {"limits": {"nvidia.com/gpu": "1"}},
}

# KServe / llm-d style: the image entrypoint is the server, args are flags only.
KSERVE_ARGS: Container = {
    "name": "kserve-container",
    "image": "vllm/vllm-openai:v0.11.0",
    "args": [
        "--model",
        "/mnt/models",
        "--served-model-name",
        "llama-3-8b",
        "--tensor-parallel-size=4",
        "--port",
        "8080",
    ],
}

PYTHON_MODULE: Container = {
    "name": "server",
    "image": "registry.example.com/ml/vllm:0.6.4.post1",
    "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
    "args": ["--model", "mistralai/Mistral-7B-Instruct-v0.3", "--gpu-memory-utilization", "0.85"],
}

SERVE_COMMAND: Container = {
    "name": "vllm",
    "image": "vllm/vllm-openai:v0.10.1.1",
    "command": ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs", "128"],
}

SPANNING: Container = {
    "name": "vllm",
    "image": "ghcr.io/llm-d/llm-d:v0.2.0",
    "command": ["vllm", "serve", "--max-model-len", "8192"],
    "args": [
        "Qwen/Qwen3-32B",
        "--tp",
        "2",
        "--enforce-eager",
        "--kv-transfer-config",
        '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
    ],
}

MULTILINE_SHELL: Container = {
    "name": "vllm",
    "image": "vllm/vllm-openai:v0.9.2",
    "command": ["/bin/bash", "-ec"],
    "args": [
        "pip install --no-cache-dir flashinfer-python && \\\n"
        "  export HOST=$(hostname -i);\n"
        "VLLM_LOGGING_LEVEL=DEBUG exec vllm serve meta-llama/Llama-3.1-70B-Instruct \\\n"
        "  --tensor-parallel-size 8 \\\n"
        '  --max-model-len "32768" \\\n'
        "  --port 8000 2>&1 | tee /var/log/vllm.log\n"
    ],
}

ENV_REFS: Container = {
    "name": "vllm",
    "image": "vllm/vllm-openai:v0.8.5",
    "args": [
        "$(MODEL_ID)",
        "--max-model-len",
        "$(MAX_MODEL_LEN)",
        "--kv-cache-dtype=$(KV_DTYPE)",
        "--gpu-memory-utilization",
        "$(GPU_UTIL)",
    ],
    "env": [
        {"name": "MODEL_ID", "value": "meta-llama/Llama-3.1-8B-Instruct"},
        {"name": "MAX_MODEL_LEN", "value": "16384"},
        {"name": "KV_DTYPE", "value": "auto"},
        {"name": "GPU_UTIL", "valueFrom": {"configMapKeyRef": {"name": "sizing", "key": "u"}}},
    ],
}

SIDECAR: Container = {
    "name": "metrics-exporter",
    "image": "prom/statsd-exporter:v0.26.0",
    "args": ["--statsd.listen-udp=:9125"],
}


def shell(script: str, **extra: Any) -> Container:
    return {
        "name": "vllm",
        "image": "vllm/vllm-openai:latest",
        "command": ["sh", "-c", script],
    } | extra


def reason_of(container: Container, desired: dict[str, str]) -> str:
    with pytest.raises(VllmArgsError) as info:
        rewrite_flags(container, desired)
    return info.value.reason


# -------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("spelled", "canonical"),
    [
        ("-tp", "tensor-parallel-size"),
        ("--tp", "tensor-parallel-size"),
        ("-pp", "pipeline-parallel-size"),
        ("--tensor_parallel_size", "tensor-parallel-size"),
        ("--max_num_batched_tokens", "max-num-batched-tokens"),
        ("max-model-len", "max-model-len"),
        ("--kv-cache-dtype", "kv-cache-dtype"),
    ],
)
def test_normalise_flag(spelled: str, canonical: str) -> None:
    assert normalise_flag(spelled) == canonical


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("vllm/vllm-openai:v0.19.0", "0.19.0"),
        ("vllm/vllm-openai:v0.10.1.1", "0.10.1.1"),
        ("vllm/vllm-openai:0.6.4.post1", "0.6.4.post1"),
        ("docker.io/vllm/vllm-openai:v0.9.0rc1", "0.9.0rc1"),
        ("registry.example.com/vllm/vllm-openai:v0.11.0@sha256:" + "a" * 64, "0.11.0"),
        ("registry.example.com:5000/vllm/vllm-openai:v0.8.5", "0.8.5"),
        ("vllm/vllm-openai:latest", None),
        ("vllm/vllm-openai:nightly", None),
        ("vllm/vllm-openai@sha256:" + "b" * 64, None),
        ("registry.example.com:5000/vllm/vllm-openai", None),
        ("vllm/vllm-openai:gptoss", None),
        ("vllm/vllm-openai", None),
    ],
)
def test_parse_image_version(image: str, version: str | None) -> None:
    assert parse_image_version(image) == version


# ------------------------------------------------------------------ finding vLLM


def test_find_by_name() -> None:
    assert find_vllm_container([SIDECAR, KSERVE_ARGS], "kserve-container") == 1


def test_find_by_name_missing() -> None:
    with pytest.raises(VllmArgsError) as info:
        find_vllm_container([SIDECAR, KSERVE_ARGS], "vllm")
    assert info.value.reason == "ContainerNotFound"
    assert "'vllm'" in str(info.value)


def test_find_by_name_not_vllm() -> None:
    with pytest.raises(VllmArgsError) as info:
        find_vllm_container([SIDECAR, KSERVE_ARGS], "metrics-exporter")
    assert info.value.reason == "NoVllmContainer"


@pytest.mark.parametrize(
    "container",
    [DOCS_SHELL, KSERVE_ARGS, PYTHON_MODULE, SERVE_COMMAND, SPANNING, MULTILINE_SHELL, ENV_REFS],
    ids=["docs-shell", "kserve", "python", "serve", "spanning", "multiline", "env"],
)
def test_find_unique_among_sidecars(container: Container) -> None:
    assert find_vllm_container([SIDECAR, container, {"name": "istio-proxy"}], None) == 1


@pytest.mark.parametrize(
    "command",
    [
        ["/usr/local/bin/python3.12", "-u", "-m", "vllm.entrypoints.api_server"],
        ["python", "-m", "vllm.entrypoints.cli.main", "serve", "m"],
        ["/usr/bin/tini", "--", "/opt/venv/bin/vllm", "serve", "m"],
        ["bash", "-o", "pipefail", "-lc", "exec vllm serve m"],
    ],
)
def test_detects_invocation_forms(command: list[str]) -> None:
    assert runs_vllm({"name": "c", "image": "custom:1", "command": command})


def test_not_vllm() -> None:
    assert not runs_vllm({"name": "c", "image": "custom:1", "args": ["--model", "m"]})
    assert not runs_vllm({"name": "c", "command": ["sh", "-c", "echo ready"]})
    assert not runs_vllm({"name": "c", "command": ["sh", "/start-vllm.sh"]})


def test_find_none() -> None:
    with pytest.raises(VllmArgsError) as info:
        find_vllm_container([SIDECAR], None)
    assert info.value.reason == "NoVllmContainer"


def test_find_ambiguous() -> None:
    with pytest.raises(VllmArgsError) as info:
        find_vllm_container([DOCS_SHELL, KSERVE_ARGS], None)
    assert info.value.reason == "AmbiguousVllmContainer"
    assert "mistral-7b" in str(info.value) and "kserve-container" in str(info.value)


# ---------------------------------------------------------------------- reading


def test_read_docs_shell() -> None:
    assert read_flags(DOCS_SHELL) == {
        "model": "meta-llama/Llama-3.2-1B-Instruct",
        "trust-remote-code": "true",
        "enable-chunked-prefill": "true",
        "max-num-batched-tokens": "1024",
    }


def test_read_kserve() -> None:
    flags = read_flags(KSERVE_ARGS)
    assert flags["model"] == "/mnt/models"
    assert flags["tensor-parallel-size"] == "4"
    assert flags["port"] == "8080"


def test_read_python_module_has_no_positional_model() -> None:
    container = PYTHON_MODULE | {"args": ["--gpu-memory-utilization", "0.85", "stray"]}
    assert read_flags(container) == {"gpu-memory-utilization": "0.85"}


def test_read_spanning() -> None:
    assert read_flags(SPANNING) == {
        "max-model-len": "8192",
        "model": "Qwen/Qwen3-32B",
        "tensor-parallel-size": "2",
        "enforce-eager": "true",
        "kv-transfer-config": '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
    }


def test_read_multiline_shell() -> None:
    flags = read_flags(MULTILINE_SHELL)
    assert flags == {
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "tensor-parallel-size": "8",
        "max-model-len": "32768",
        "port": "8000",
    }


def test_read_env_refs() -> None:
    assert read_flags(ENV_REFS) == {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "max-model-len": "16384",
        "kv-cache-dtype": "auto",
        "gpu-memory-utilization": "$(GPU_UTIL)",
    }
    assert unresolved_flags(ENV_REFS) == {"gpu-memory-utilization"}


def test_read_escaped_reference_is_literal() -> None:
    container = KSERVE_ARGS | {
        "args": ["--served-model-name", "$$(NAME)"],
        "env": [{"name": "NAME", "value": "x"}],
    }
    assert read_flags(container)["served-model-name"] == "$(NAME)"
    assert unresolved_flags(container) == set()


def test_read_env_chain_and_env_from() -> None:
    chained = KSERVE_ARGS | {
        "args": ["--max-model-len", "$(LEN)", "--max-num-seqs", "$(SEQS)"],
        "env": [{"name": "BASE", "value": "4096"}, {"name": "LEN", "value": "$(BASE)"}],
        "envFrom": [{"configMapRef": {"name": "vllm"}}],
    }
    assert read_flags(chained) == {"max-model-len": "4096", "max-num-seqs": "$(SEQS)"}
    assert unresolved_flags(chained) == {"max-num-seqs"}


def test_read_shell_expansion_is_unresolved() -> None:
    container = shell('vllm serve "$MODEL" --max-model-len ${MAX_LEN:-4096}')
    assert read_flags(container) == {"model": "$MODEL", "max-model-len": "${MAX_LEN:-4096}"}
    assert unresolved_flags(container) == {"model", "max-model-len"}


def test_read_duplicate_reads_last_like_argparse() -> None:
    container = KSERVE_ARGS | {"args": ["-tp", "2", "--tensor-parallel-size=4"]}
    assert read_flags(container)["tensor-parallel-size"] == "4"


def test_read_boolean_with_explicit_value() -> None:
    container = KSERVE_ARGS | {"args": ["--enable-chunked-prefill", "False", "--max-num-seqs", "8"]}
    assert read_flags(container) == {"enable-chunked-prefill": "False", "max-num-seqs": "8"}


def test_read_best_effort_despite_hazards() -> None:
    assert read_flags(shell("vllm serve m -tp 2 $EXTRA_ARGS")) == {
        "model": "m",
        "tensor-parallel-size": "2",
    }


def _form(form: str, tokens: list[str]) -> Container:
    if form == "image-args":
        return {"name": "c", "image": "vllm/vllm-openai:v0.11.0", "args": ["m", *tokens]}
    if form == "serve-command":
        return {"name": "c", "image": "x", "command": ["vllm", "serve", "m", *tokens]}
    if form == "python-module":
        module = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
        return {"name": "c", "image": "x", "command": module, "args": ["--model", "m", *tokens]}
    assert form == "shell"
    return shell(" ".join(["vllm serve m", *map(shlex.quote, tokens)]))


SPELLINGS = {
    "tensor-parallel-size": ["--tensor-parallel-size", "--tensor_parallel_size", "-tp"],
    "pipeline-parallel-size": ["--pipeline-parallel-size", "--pipeline_parallel_size", "-pp"],
    "max-model-len": ["--max-model-len", "--max_model_len"],
    "kv-cache-dtype": ["--kv-cache-dtype", "--kv_cache_dtype"],
}
FORMS = ["image-args", "serve-command", "python-module", "shell"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("joined", [False, True], ids=["separate", "equals"])
@pytest.mark.parametrize(
    ("flag", "spelled"), [(f, s) for f, spellings in SPELLINGS.items() for s in spellings]
)
def test_read_sizing_inputs_every_spelling(
    form: str, joined: bool, flag: str, spelled: str
) -> None:
    value = "fp8_e4m3" if flag == "kv-cache-dtype" else "4"
    tokens = [f"{spelled}={value}"] if joined else [spelled, value]
    container = _form(form, ["--trust-remote-code", *tokens, "--port", "8000"])
    flags = read_flags(container)
    assert flags[flag] == value
    assert flags["model"] == "m" and flags["port"] == "8000"


def test_find_conflicts() -> None:
    running = read_flags(SPANNING) | {"gpu-memory-utilization": "0.90"}
    spec = {"-tp": "4", "max-model-len": "8192", "gpu-memory-utilization": "0.9", "pp": None}
    assert find_conflicts(spec, running) == {"tensor-parallel-size": ("4", "2")}
    assert find_conflicts(spec, running, unresolved={"tensor-parallel-size"}) == {}


# -------------------------------------------------------------------- rewriting


def test_rewrite_separate_value_in_place() -> None:
    new = rewrite_flags(PYTHON_MODULE, {"gpu-memory-utilization": "0.92"})
    assert new["args"] == [
        "--model",
        "mistralai/Mistral-7B-Instruct-v0.3",
        "--gpu-memory-utilization",
        "0.92",
    ]
    assert new["command"] == PYTHON_MODULE["command"]


def test_rewrite_equals_form_stays_one_element() -> None:
    new = rewrite_flags(KSERVE_ARGS, {"tensor-parallel-size": "8"})
    assert new["args"] == [*KSERVE_ARGS["args"][:4], "--tensor-parallel-size=8", "--port", "8080"]


def test_rewrite_keeps_underscore_and_alias_spelling() -> None:
    container = KSERVE_ARGS | {"args": ["m", "--max_num_seqs", "16", "-tp=2", "-pp", "1"]}
    new = rewrite_flags(
        container, {"max-num-seqs": "64", "tp": "4", "--pipeline_parallel_size": "2"}
    )
    assert new["args"] == ["m", "--max_num_seqs", "64", "-tp=4", "-pp", "2"]


def test_rewrite_appends_absent_flags_in_order() -> None:
    desired = {"gpu-memory-utilization": "0.9", "max-num-seqs": "256", "kv-cache-dtype": "fp8"}
    new = rewrite_flags(KSERVE_ARGS, desired)
    assert new["args"] == [
        *KSERVE_ARGS["args"],
        "--gpu-memory-utilization",
        "0.9",
        "--max-num-seqs",
        "256",
        "--kv-cache-dtype",
        "fp8",
    ]


def test_rewrite_serve_command_without_args_appends_to_command() -> None:
    new = rewrite_flags(SERVE_COMMAND, {"max-num-seqs": "64", "max-model-len": "4096"})
    assert new["command"] == [
        "vllm",
        "serve",
        "Qwen/Qwen2.5-7B-Instruct",
        "--max-num-seqs",
        "64",
        "--max-model-len",
        "4096",
    ]
    assert "args" not in new


def test_rewrite_spanning_command_and_args() -> None:
    new = rewrite_flags(SPANNING, {"max-model-len": "16384", "tp": "4", "max-num-seqs": "32"})
    assert new["command"] == ["vllm", "serve", "--max-model-len", "16384"]
    assert new["args"] == [
        "Qwen/Qwen3-32B",
        "--tp",
        "4",
        *SPANNING["args"][3:],
        "--max-num-seqs",
        "32",
    ]


def test_rewrite_image_entrypoint_without_args_creates_args() -> None:
    container = {"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}
    assert rewrite_flags(container, {"max-num-seqs": "8"})["args"] == ["--max-num-seqs", "8"]


def test_rewrite_docs_shell_string() -> None:
    desired = {
        "max-num-batched-tokens": "2048",
        "gpu-memory-utilization": "0.9",
        "max-model-len": "8192",
    }
    new = rewrite_flags(DOCS_SHELL, desired)
    assert new["args"] == [
        "vllm serve meta-llama/Llama-3.2-1B-Instruct --trust-remote-code "
        "--enable-chunked-prefill --max_num_batched_tokens 2048 "
        "--gpu-memory-utilization 0.9 --max-model-len 8192"
    ]
    assert new["command"] == DOCS_SHELL["command"] and new["env"] == DOCS_SHELL["env"]


def test_rewrite_multiline_shell_keeps_layout() -> None:
    new = rewrite_flags(MULTILINE_SHELL, {"max-model-len": "65536", "max-num-seqs": "64"})
    assert new["args"][0] == MULTILINE_SHELL["args"][0].replace('"32768"', '"65536"').replace(
        "--port 8000", "--port 8000 --max-num-seqs 64"
    )
    assert read_flags(new)["max-model-len"] == "65536"


def test_rewrite_shell_equals_and_quoting() -> None:
    container = shell(
        "cd /srv; exec vllm serve m --max-model-len=4096 --served-model-name 'my model'"
    )
    new = rewrite_flags(container, {"max-model-len": "8192", "served-model-name": "your model"})
    assert new["command"][2] == (
        "cd /srv; exec vllm serve m --max-model-len=8192 --served-model-name 'your model'"
    )
    appended = rewrite_flags(container, {"kv-cache-dtype": "fp8 e4m3"})
    assert appended["command"][2].endswith("'my model' --kv-cache-dtype 'fp8 e4m3'")


def test_rewrite_shell_keeps_quote_style() -> None:
    container = shell("""vllm serve m --max-model-len="4096" --max-num-seqs '8'""")
    new = rewrite_flags(container, {"max-model-len": "8192", "max-num-seqs": "16"})
    assert new["command"][2] == """vllm serve m --max-model-len="8192" --max-num-seqs '16'"""


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("vllm serve m --tp 2 # keep me", "vllm serve m --tp 2 --max-num-seqs 4 # keep me"),
        ("vllm serve m --tp 2;", "vllm serve m --tp 2 --max-num-seqs 4;"),
        ("if true; then vllm serve m; fi", "if true; then vllm serve m --max-num-seqs 4; fi"),
        (
            "HF_HOME=/c VLLM_USE_V1=1 vllm serve m",
            "HF_HOME=/c VLLM_USE_V1=1 vllm serve m --max-num-seqs 4",
        ),
        ("exec vllm serve m\n", "exec vllm serve m --max-num-seqs 4\n"),
    ],
)
def test_rewrite_shell_appends_at_end_of_the_vllm_command(script: str, expected: str) -> None:
    assert rewrite_flags(shell(script), {"max-num-seqs": "4"})["command"][2] == expected


def test_rewrite_shell_reference_spread_over_words() -> None:
    env = [{"name": "EXTRA", "value": "--max-model-len 4096"}]
    container = shell("vllm serve m $(EXTRA)", env=env)
    assert read_flags(container)["max-model-len"] == "4096"
    assert reason_of(container, {"max-model-len": "1"}) == "UnsupportedReference"
    appended = rewrite_flags(container, {"max-num-seqs": "2"})
    assert appended["command"][2] == "vllm serve m $(EXTRA) --max-num-seqs 2"


def test_rewrite_shell_before_redirection_and_pipe() -> None:
    container = shell("vllm serve m --port 8000 > /tmp/log 2>&1 && echo done")
    new = rewrite_flags(container, {"max-num-seqs": "4"})
    assert (
        new["command"][2]
        == "vllm serve m --port 8000 --max-num-seqs 4 > /tmp/log 2>&1 && echo done"
    )


def test_rewrite_shell_allows_expansions_outside_the_vllm_flags() -> None:
    container = shell(
        'export PORT=$(cat /etc/port) && vllm serve "$MODEL_PATH" --port "$PORT" --max-num-seqs 8'
    )
    new = rewrite_flags(container, {"max-num-seqs": "16"})
    assert new["command"][2].endswith('--port "$PORT" --max-num-seqs 16')


def test_rewrite_literal_env_reference_updates_env() -> None:
    new = rewrite_flags(ENV_REFS, {"max-model-len": "32768", "kv-cache-dtype": "fp8"})
    assert new["args"] == ENV_REFS["args"]
    assert new["env"][1] == {"name": "MAX_MODEL_LEN", "value": "32768"}
    assert new["env"][2] == {"name": "KV_DTYPE", "value": "fp8"}
    assert new["env"][3] == ENV_REFS["env"][3]
    assert read_flags(new)["max-model-len"] == "32768"


def test_rewrite_env_reference_inside_shell_string() -> None:
    container = shell(
        'vllm serve m --max-model-len "$(MAX_LEN)"', env=[{"name": "MAX_LEN", "value": "4096"}]
    )
    new = rewrite_flags(container, {"max-model-len": "8192"})
    assert new["command"] == container["command"]
    assert new["env"] == [{"name": "MAX_LEN", "value": "8192"}]


def test_rewrite_escapes_dollar_for_kubernetes() -> None:
    new = rewrite_flags(KSERVE_ARGS, {"served-model-name": "a$(b)"})
    assert new["args"][3] == "a$$(b)"
    assert read_flags(new)["served-model-name"] == "a$(b)"


def test_rewrite_noop_is_identity_and_input_untouched() -> None:
    for container in (DOCS_SHELL, KSERVE_ARGS, SPANNING, MULTILINE_SHELL, ENV_REFS):
        before = copy.deepcopy(container)
        current = {k: v for k, v in read_flags(container).items() if k in SIZING_FLAGS}
        current.pop("gpu-memory-utilization", None)  # valueFrom in ENV_REFS
        assert rewrite_flags(container, current) == container
        rewrite_flags(container, {"max-num-seqs": "7", "max-model-len": "1000"})
        assert container == before


def test_rewrite_result_is_a_deep_copy() -> None:
    new = rewrite_flags(ENV_REFS, {"max-model-len": "1"})
    new["env"][0]["value"] = "changed"
    new["args"].append("x")
    assert ENV_REFS["env"][0]["value"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert ENV_REFS["args"][-1] == "$(GPU_UTIL)"


# --------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "script",
    [
        "vllm serve m --max-model-len 4096 $EXTRA_ARGS",
        "vllm serve m ${VLLM_ARGS} --max-model-len 4096",
        'exec vllm serve "$@"',
        "vllm serve m --max-model-len `cat /len`",
        "vllm serve m --served-model-name $(cat /name) --max-model-len 4096",
        "cat > /tmp/c.json <<EOF\n{}\nEOF\nvllm serve m --max-model-len 4096",
        "vllm serve m --max-model-len 4096 --port '8000",
        "vllm serve m --max-model-len 40\\\n96",
        "vllm serve a --max-model-len 1 & vllm serve b --max-model-len 2",
        "bash -c 'vllm serve m --max-model-len 4096'",
        "vllm serve m --max-model-len $MAX_LEN",
        "vllm serve $FLAGS m --max-model-len 4096",
        "vllm serve m --max-model-len 4096 $(cat /extra-args)",
    ],
    ids=[
        "var-after",
        "braced-var",
        "all-args",
        "backticks",
        "command-substitution",
        "heredoc",
        "unterminated-quote",
        "continuation-in-word",
        "two-invocations",
        "nested-shell",
        "shell-var-value",
        "var-before-model",
        "undefined-lowercase-ref",
    ],
)
def test_refuses_unsafe_shell(script: str) -> None:
    container = shell(script)
    with pytest.raises(VllmArgsError) as info:
        rewrite_flags(container, {"max-model-len": "8192"})
    assert info.value.reason == "UnsafeShellForm"
    assert "'vllm'" in str(info.value)


def test_value_from_reference() -> None:
    with pytest.raises(VllmArgsError) as info:
        rewrite_flags(ENV_REFS, {"gpu-memory-utilization": "0.9"})
    assert info.value.reason == "ValueFromReference"
    assert info.value.flag == "gpu-memory-utilization"
    assert "--gpu-memory-utilization" in str(info.value) and "GPU_UTIL" in str(info.value)


def test_value_from_reference_in_shell() -> None:
    env = [{"name": "LEN", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "len"}}}]
    assert reason_of(
        shell("vllm serve m --max-model-len $(LEN)", env=env), {"max-model-len": "1"}
    ) == ("ValueFromReference")


def test_unresolved_reference() -> None:
    container = KSERVE_ARGS | {
        "args": ["--max-model-len", "$(LEN)"],
        "envFrom": [{"configMapRef": {"name": "vllm-config"}}],
    }
    assert reason_of(container, {"max-model-len": "1"}) == "UnresolvedReference"
    opaque_flags = KSERVE_ARGS | {"args": ["m", "$(EXTRA_ARGS)"]}
    assert reason_of(opaque_flags, {"max-model-len": "1"}) == "UnresolvedReference"


def test_unsupported_reference_mixed_with_text() -> None:
    container = KSERVE_ARGS | {
        "args": ["--max-model-len", "$(K)000"],
        "env": [{"name": "K", "value": "4"}],
    }
    assert read_flags(container)["max-model-len"] == "4000"
    assert reason_of(container, {"max-model-len": "8000"}) == "UnsupportedReference"


def test_shared_reference() -> None:
    container = KSERVE_ARGS | {
        "args": ["--max-model-len", "$(LEN)", "--max-num-batched-tokens", "$(LEN)"],
        "env": [{"name": "LEN", "value": "4096"}],
    }
    assert reason_of(container, {"max-model-len": "8192"}) == "SharedReference"
    assert reason_of(container, {"max-model-len": "1", "max-num-batched-tokens": "2"}) == (
        "SharedReference"
    )
    both = rewrite_flags(container, {"max-model-len": "8192", "max-num-batched-tokens": "8192"})
    assert both["env"] == [{"name": "LEN", "value": "8192"}]


def test_duplicate_flag() -> None:
    # vLLM's argparse keeps the last of a repeated flag (Helm-built args often repeat one): it
    # is read as the last and changed where it is given last, in its own spelling
    container = KSERVE_ARGS | {"args": ["m", "-tp", "2", "--tensor_parallel_size=4"]}
    assert read_flags(container)["tensor-parallel-size"] == "4"
    new = rewrite_flags(container, {"tensor-parallel-size": "8"})
    assert new["args"] == ["m", "-tp", "2", "--tensor_parallel_size=8"]
    assert rewrite_flags(container, {"max-num-seqs": "8"})["args"][-2:] == ["--max-num-seqs", "8"]


def test_duplicate_desired_spellings() -> None:
    assert reason_of(KSERVE_ARGS, {"tp": "2", "tensor-parallel-size": "4"}) == "DuplicateFlag"


def test_missing_flag_value() -> None:
    container = KSERVE_ARGS | {"args": ["m", "--max-model-len", "--enforce-eager"]}
    assert reason_of(container, {"max-model-len": "1"}) == "MissingFlagValue"


def test_no_vllm_container() -> None:
    for func in (read_flags, unresolved_flags):
        with pytest.raises(VllmArgsError) as info:
            func(SIDECAR)
        assert info.value.reason == "NoVllmContainer"
    assert reason_of(SIDECAR, {"max-num-seqs": "1"}) == "NoVllmContainer"


# ------------------------------------------------------------------- properties

VALUE = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=126) | st.sampled_from("\n\t"),
    max_size=12,
).filter(lambda v: not v.startswith("-"))
TARGETS = [*SIZING_FLAGS, "tensor-parallel-size", "pipeline-parallel-size"]
ALIASES = {"tensor-parallel-size": "-tp", "pipeline-parallel-size": "-pp"}
EXTRA = [["--trust-remote-code"], ["--port", "8000"], ["--enforce-eager"], ["--dtype=bfloat16"]]


@st.composite
def containers(draw: st.DrawFn) -> Container:
    """A vLLM container in a random form with random flags in random spellings."""
    present = draw(st.lists(st.sampled_from(TARGETS), unique=True))
    tokens: list[str] = []
    for flag in present:
        spelled = draw(
            st.sampled_from(
                [f"--{flag}", "--" + flag.replace("-", "_"), ALIASES.get(flag, f"--{flag}")]
            )
        )
        value = draw(VALUE)
        tokens += [f"{spelled}={value}"] if draw(st.booleans()) else [spelled, value]
        tokens += draw(st.sampled_from(EXTRA))
    tokens = [t.replace("$", "$$") for t in tokens]  # literal values, as a manifest writes them
    form = draw(st.sampled_from([*FORMS, "spanning"]))
    if form == "spanning":
        cut = draw(st.integers(0, len(tokens)))
        return {"name": "v", "command": ["vllm", "serve", "m", *tokens[:cut]], "args": tokens[cut:]}
    return _form(form, tokens)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(containers(), st.dictionaries(st.sampled_from(TARGETS), VALUE))
def test_property_rewrite_then_read(container: Container, desired: dict[str, str]) -> None:
    before = read_flags(container)
    new = rewrite_flags(container, desired)
    after = read_flags(new)
    assert {k: after[k] for k in desired} == desired
    assert {k: v for k, v in after.items() if k not in desired} == {
        k: v for k, v in before.items() if k not in desired
    }
    for key in ("command", "args"):
        old_list, new_list = container.get(key) or [], new.get(key) or []
        changed = [i for i, v in enumerate(old_list) if new_list[i] != v]
        assert len(changed) <= (1 if form_is_shell(container) else len(desired))


def form_is_shell(container: Container) -> bool:
    command: list[str] = container.get("command") or [""]
    return command[0] == "sh"


@settings(max_examples=200)
@given(containers(), st.lists(st.sampled_from(TARGETS)))
def test_property_rewrite_with_current_values_is_identity(
    container: Container, chosen: list[str]
) -> None:
    current = read_flags(container)
    desired = {flag: current[flag] for flag in chosen if flag in current}
    assert rewrite_flags(container, desired) == container
