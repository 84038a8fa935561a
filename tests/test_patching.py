"""The Deployment patch: minimal, container-scoped, idempotent, with a stable hash."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference_capacity.engines.vllm_args import read_flags
from inference_capacity.patching import (
    ANNOTATION_APPLIED,
    ANNOTATION_OWNER,
    applied_hash,
    apply_strategic,
    build_change,
)

IMAGE = "vllm/vllm-openai:v0.19.0"


def serve_container() -> dict[str, Any]:
    return {
        "name": "vllm",
        "image": IMAGE,
        "command": ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"],
        "args": ["--port", "8000"],
        "ports": [{"containerPort": 8000}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }


def entrypoint_container() -> dict[str, Any]:
    return {
        "name": "server",
        "image": IMAGE,
        "args": ["--model=meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size=4"],
        "resources": {"limits": {"nvidia.com/gpu": "4"}},
    }


def shell_container() -> dict[str, Any]:
    return {
        "name": "engine",
        "image": IMAGE,
        "command": ["/bin/sh", "-c"],
        "args": ["exec vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768"],
    }


def env_container() -> dict[str, Any]:
    return {
        "name": "vllm",
        "image": IMAGE,
        "command": [
            "vllm",
            "serve",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--max-num-seqs",
            "$(MAX_SEQS)",
        ],
        "env": [{"name": "HF_HOME", "value": "/cache"}, {"name": "MAX_SEQS", "value": "256"}],
    }


SIDECAR = {
    "name": "metrics-proxy",
    "image": "envoyproxy/envoy:v1.30",
    "args": ["--config", "/etc/envoy.yaml"],
}

CONTAINERS = {
    "serve": serve_container,
    "entrypoint": entrypoint_container,
    "shell": shell_container,
    "env": env_container,
}


def deployment(
    container: dict[str, Any], sidecar_first: bool = True, replicas: int = 3
) -> dict[str, Any]:
    containers = [copy.deepcopy(SIDECAR), container] if sidecar_first else [container]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "llama",
            "namespace": "serving",
            "generation": 4,
            "annotations": {"team": "inference"},
            "labels": {"app": "llama"},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "llama"}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "template": {
                "metadata": {"labels": {"app": "llama"}},
                "spec": {"containers": containers, "nodeSelector": {"pool": "gpu"}},
            },
        },
        "status": {"replicas": replicas},
    }


FLAGS = {"gpu-memory-utilization": "0.9285", "max-num-seqs": "151"}
STRATEGY = {"maxSurge": 1, "maxUnavailable": 1}


def index_of(dep: dict[str, Any], name: str) -> int:
    names = [c["name"] for c in dep["spec"]["template"]["spec"]["containers"]]
    return names.index(name)


def rebuild(
    dep: dict[str, Any],
    name: str,
    flags: dict[str, str],
    replicas: int | None,
    strategy: dict[str, Any] | None,
) -> Any:
    i = index_of(dep, name)
    current = read_flags(dep["spec"]["template"]["spec"]["containers"][i])
    return build_change(dep, i, flags, current, replicas, strategy)


@pytest.mark.parametrize("kind", sorted(CONTAINERS))
def test_patch_touches_only_the_named_container_flags(kind: str) -> None:
    c = CONTAINERS[kind]()
    dep = deployment(c)
    change = build_change(dep, 1, FLAGS, read_flags(c), 5, STRATEGY, owner="serving/llama")
    patch = change.patch
    assert set(patch) == {"spec", "metadata"}
    assert set(patch["spec"]) == {"template", "replicas", "strategy"}
    assert set(patch["spec"]["template"]) == {"spec"}
    assert set(patch["spec"]["template"]["spec"]) == {"containers"}
    [cpatch] = patch["spec"]["template"]["spec"]["containers"]
    assert cpatch["name"] == c["name"]
    assert set(cpatch) - {"name"} <= {"command", "args", "env"}
    assert len(cpatch) > 1
    assert patch["spec"]["replicas"] == 5
    assert patch["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": STRATEGY}
    assert set(patch["metadata"]) == {"annotations"}
    assert patch["metadata"]["annotations"][ANNOTATION_OWNER] == "serving/llama"
    assert change.changed_flags == {
        k: (None if kind != "env" or k != "max-num-seqs" else "256", v) for k, v in FLAGS.items()
    }
    assert change.replicas == (3, 5)
    assert change.strategy == ({"maxSurge": "25%", "maxUnavailable": "25%"}, STRATEGY)


def test_serve_form_appends_to_args_and_leaves_command() -> None:
    dep = deployment(serve_container())
    change = build_change(dep, 1, FLAGS, {}, None, None)
    [cpatch] = change.patch["spec"]["template"]["spec"]["containers"]
    assert "command" not in cpatch
    assert cpatch["args"] == [
        "--port",
        "8000",
        "--gpu-memory-utilization",
        "0.9285",
        "--max-num-seqs",
        "151",
    ]


def test_entrypoint_form_keeps_inline_spellings() -> None:
    c = entrypoint_container()
    c["args"].append("--max-num-seqs=256")
    dep = deployment(c)
    change = build_change(dep, 1, {"max-num-seqs": "151"}, read_flags(c), None, None)
    [cpatch] = change.patch["spec"]["template"]["spec"]["containers"]
    assert cpatch["args"] == [
        "--model=meta-llama/Llama-3.1-70B-Instruct",
        "--tensor-parallel-size=4",
        "--max-num-seqs=151",
    ]
    assert change.changed_flags == {"max-num-seqs": ("256", "151")}


def test_shell_form_splices_the_script() -> None:
    dep = deployment(shell_container())
    change = build_change(
        dep,
        1,
        {"max-model-len": "16384", "max-num-seqs": "151"},
        read_flags(shell_container()),
        None,
        None,
    )
    [cpatch] = change.patch["spec"]["template"]["spec"]["containers"]
    assert "command" not in cpatch
    assert cpatch["args"] == [
        "exec vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 16384 --max-num-seqs 151"
    ]


def test_env_reference_changes_only_that_env_entry() -> None:
    dep = deployment(env_container())
    change = build_change(dep, 1, {"max-num-seqs": "151"}, read_flags(env_container()), None, None)
    [cpatch] = change.patch["spec"]["template"]["spec"]["containers"]
    assert cpatch == {"name": "vllm", "env": [{"name": "MAX_SEQS", "value": "151"}]}
    applied = apply_strategic(dep, change.patch)
    env = applied["spec"]["template"]["spec"]["containers"][1]["env"]
    assert env == [{"name": "HF_HOME", "value": "/cache"}, {"name": "MAX_SEQS", "value": "151"}]


@pytest.mark.parametrize("kind", sorted(CONTAINERS))
@pytest.mark.parametrize("manage", [True, False])
def test_apply_then_rebuild_is_empty(kind: str, manage: bool) -> None:
    c = CONTAINERS[kind]()
    dep = deployment(c)
    replicas, strategy = (5, STRATEGY) if manage else (None, None)
    change = build_change(dep, 1, FLAGS, read_flags(c), replicas, strategy)
    assert not change.empty
    applied = apply_strategic(dep, change.patch)
    containers = applied["spec"]["template"]["spec"]["containers"]
    assert containers[0] == SIDECAR  # the other container is untouched
    flags = read_flags(containers[1])
    assert {k: flags[k] for k in FLAGS} == FLAGS
    # everything but the managed fields is as before
    untouched = copy.deepcopy(applied)
    untouched["spec"]["template"]["spec"]["containers"][1] = c
    untouched["metadata"]["annotations"] = dep["metadata"]["annotations"]
    if manage:
        assert applied["spec"]["replicas"] == 5
        assert applied["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": STRATEGY}
        untouched["spec"]["replicas"] = 3
        untouched["spec"]["strategy"] = dep["spec"]["strategy"]
    assert untouched == dep
    # what was recorded reproduces the hash
    ann = json.loads(applied["metadata"]["annotations"][ANNOTATION_APPLIED])
    assert ann["hash"] == change.applied_hash
    assert ann["flags"] == FLAGS and ann["replicas"] == replicas
    assert applied_hash(ann["flags"], ann["replicas"], ann["strategy"]) == ann["hash"]
    assert applied["metadata"]["annotations"]["team"] == "inference"
    # idempotent: the same plan on the result changes nothing
    again = rebuild(applied, c["name"], FLAGS, replicas, strategy)
    assert again.empty and again.patch == {}
    assert again.changed_flags == {} and again.replicas is None and again.strategy is None
    assert again.applied_hash == change.applied_hash


def test_no_change_no_patch_even_without_annotation() -> None:
    c = serve_container()
    c["args"] += ["--max-num-seqs", "151"]
    dep = deployment(c)
    dep["spec"]["strategy"] = {"rollingUpdate": STRATEGY}  # type defaults to RollingUpdate
    change = build_change(dep, 1, {"max-num-seqs": "151"}, read_flags(c), 3, STRATEGY)
    assert change.empty


def test_recreate_strategy_is_switched_to_rolling_update() -> None:
    dep = deployment(serve_container())
    dep["spec"]["strategy"] = {"type": "Recreate"}
    change = build_change(dep, 1, {}, {}, None, STRATEGY)
    assert change.patch["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": STRATEGY}
    assert change.strategy == (None, STRATEGY)
    # replicas-only change: no container in the patch
    change = build_change(deployment(serve_container()), 1, {}, {}, 7, None)
    assert set(change.patch["spec"]) == {"replicas"}
    assert ANNOTATION_OWNER not in change.patch["metadata"]["annotations"]


def test_apply_strategic_does_not_mutate_and_adds_new_env() -> None:
    dep = deployment(serve_container())
    before = copy.deepcopy(dep)
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "vllm", "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]}
                    ]
                }
            }
        }
    }
    out = apply_strategic(dep, patch)
    assert dep == before
    assert out["spec"]["template"]["spec"]["containers"][1]["env"] == [
        {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}
    ]
    assert out["spec"]["template"]["spec"]["containers"][1]["args"] == ["--port", "8000"]


def test_hash_is_stable_and_input_sensitive() -> None:
    h = applied_hash(FLAGS, 5, STRATEGY)
    assert len(h) == 16 and int(h, 16) >= 0
    reordered = dict(reversed(list(FLAGS.items())))
    assert applied_hash(reordered, 5, {"maxUnavailable": 1, "maxSurge": 1}) == h
    assert applied_hash(FLAGS, 5, STRATEGY) == h
    different = [
        applied_hash({**FLAGS, "max-num-seqs": "152"}, 5, STRATEGY),
        applied_hash({**FLAGS, "max-model-len": "8192"}, 5, STRATEGY),
        applied_hash(FLAGS, 6, STRATEGY),
        applied_hash(FLAGS, None, STRATEGY),
        applied_hash(FLAGS, 5, {"maxSurge": 0, "maxUnavailable": 1}),
        applied_hash(FLAGS, 5, None),
    ]
    assert h not in different and len(set(different)) == len(different)
    # build_change reports the same hash whether or not anything changes
    dep = deployment(serve_container())
    assert build_change(dep, 1, FLAGS, {}, 5, STRATEGY).applied_hash == h


flag_values = st.fixed_dictionaries(
    {
        "gpu-memory-utilization": st.integers(5000, 9999).map(lambda u: f"0.{u}"),
        "max-num-seqs": st.integers(1, 4096).map(str),
    },
    optional={
        "max-model-len": st.sampled_from(["4096", "8192", "16384", "32768"]),
        "max-num-batched-tokens": st.integers(1024, 16384).map(str),
        "kv-cache-dtype": st.sampled_from(["auto", "fp8"]),
    },
)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(sorted(CONTAINERS)),
    flag_values,
    flag_values,
    st.one_of(st.none(), st.integers(1, 16)),
    st.one_of(
        st.none(),
        st.fixed_dictionaries({"maxSurge": st.integers(0, 4), "maxUnavailable": st.integers(0, 4)}),
    ),
)
def test_idempotence_property(
    kind: str,
    first: dict[str, str],
    second: dict[str, str],
    replicas: int | None,
    strategy: dict[str, Any] | None,
) -> None:
    """Two successive plans: each converges in one patch, and the hash follows the inputs."""
    dep = deployment(CONTAINERS[kind]())
    name = CONTAINERS[kind]()["name"]
    for flags in (first, second):
        change = rebuild(dep, name, flags, replicas, strategy)
        assert change.applied_hash == applied_hash(flags, replicas, strategy)
        dep = apply_strategic(dep, change.patch)
        container = dep["spec"]["template"]["spec"]["containers"][index_of(dep, name)]
        got = read_flags(container)
        assert {k: got[k] for k in flags} == flags
        assert dep["spec"]["template"]["spec"]["containers"][0] == SIDECAR
        assert rebuild(dep, name, flags, replicas, strategy).empty
    if (first, replicas, strategy) != (second, replicas, strategy):
        assert applied_hash(first, replicas, strategy) != applied_hash(second, replicas, strategy)
