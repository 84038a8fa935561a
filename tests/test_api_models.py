"""The InferenceCapacity pydantic models: realistic manifests round-trip, defaults are filled in,
and every constraint is rejected with the full field path of the bad value."""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from inference_capacity.api import (
    API_VERSION,
    KIND,
    Cohort,
    HardwareSpec,
    InferenceCapacity,
    InferenceCapacitySpec,
    InferenceCapacityStatus,
    ManifestError,
    ModelSpec,
    PromptTokens,
    TargetRef,
    load_manifests,
)

DELETE = object()

LLAMA_8B = """
apiVersion: capacity.inference.dev/v1alpha1
kind: InferenceCapacity
metadata:
  name: llama-8b
  namespace: ml
spec:
  mode: Enforce
  targetRef: {kind: Deployment, name: llama-8b, container: vllm}
  model:
    name: meta-llama/Llama-3.1-8B-Instruct
    dtype: bfloat16
    kvCacheDtype: auto
    maxLoras: 2
    maxLoraRank: 64
  hardware: {gpu: H100-SXM-80GB, tensorParallel: 1, pipelineParallel: 1}
  engine: {name: vllm, version: "0.10.1.dev101+gbda9d0535", blockSize: 16,
           maxNumBatchedTokens: 8192, maxNumSeqsCap: 512}
  workload:
    maxModelLen: 32768
    quantile: p95
    cohorts:
      - name: chat
        weight: 0.7
        promptTokens: {p50: 1000, p95: 2000, p99: 4000}
        outputTokens: {p50: 80, p95: 200, p99: 500}
        sharedPrefixTokens: 3000
      - name: rag
        weight: 0.3
        promptTokens: {p50: 6000, p95: 12000, p99: 16000}
        outputTokens: {p50: 150, p95: 400, p99: 800}
    peakConcurrency: 300
    itlTargetMs: 40
  headroom: {operationalFraction: 0.05, kvSafetyFraction: 0.1, recoveryReplicas: 1}
  rollout:
    minReplicas: 2
    maxReplicas: 8
    spareGpuNodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  policy: {setMaxModelLen: true, hysteresisPercent: 10}
"""

QWEN_235B_FP8 = """
apiVersion: capacity.inference.dev/v1alpha1
kind: InferenceCapacity
metadata: {name: qwen3-235b, namespace: serving}
spec:
  mode: Recommend
  targetRef: {name: qwen3-235b-a22b-fp8}
  model:
    configMapRef: {name: qwen3-235b-config}
    quantization: fp8
    kvCacheDtype: fp8_e4m3
  hardware: {gpu: H200-SXM-141GB, tensorParallel: 8}
  engine: {version: "0.19.0", enforceEager: true}
  workload:
    fromPrometheus:
      url: https://prometheus.monitoring.svc:9090
      window: 6h
      bearerTokenSecretRef: {name: prom-token}
      caConfigMapRef: {name: kube-root-ca.crt}
      selector: 'namespace="serving",model_name="qwen3"'
      mode: replace
      refreshSeconds: 600
  policy: {useKvCacheMemoryBytes: true, setKvCacheDtype: true}
"""

INLINE_CONFIG: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": KIND,
    "metadata": {"name": "tiny"},
    "spec": {
        "targetRef": {"name": "tiny"},
        "model": {
            "config": {
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 2048,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "num_hidden_layers": 16,
                "torch_dtype": "bfloat16",
                "rope_scaling": {"factor": 32.0, "rope_type": "llama3"},
                "vocab_size": 128256,
            }
        },
        "hardware": {"gpuMemoryGiB": 23.55},
    },
}

WITH_STATUS: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": KIND,
    "metadata": {"name": "llama-8b", "namespace": "ml", "generation": 3, "uid": "abc"},
    "spec": {
        "targetRef": {"name": "llama-8b"},
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "hardware": {"gpu": "H100-SXM-80GB"},
    },
    "status": {
        "observedGeneration": 3,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Applied",
                "message": "flags applied",
                "lastTransitionTime": "2026-01-02T03:04:05Z",
                "observedGeneration": 3,
            },
            {
                "type": "RolloutSafe",
                "status": "False",
                "reason": "NoSpareGpus",
                "message": "maxSurge 0 and maxUnavailable 0",
                "lastTransitionTime": "2026-01-02T03:04:05Z",
            },
        ],
        "engineVersion": "0.19.0",
        "engineVersionSource": "image",
        "summary": {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "gpu": "H100-SXM-80GB",
            "tensorParallel": 1,
            "pipelineParallel": 1,
        },
        "ledger": {
            "ranks": [
                {
                    "rank": 0,
                    "stage": 0,
                    "items": [
                        {
                            "name": "weights",
                            "lifetime": "worker",
                            "owner": "torch",
                            "bytes": 16060522496,
                            "gib": 14.96,
                            "provenance": "exact",
                        },
                        {
                            "name": "kv-cache",
                            "lifetime": "worker",
                            "owner": "vllm",
                            "bytes": 60000000000,
                            "gib": 55.88,
                            "provenance": "calibrated",
                        },
                    ],
                    "totalBytes": 85028569088,
                }
            ],
            "deviceBytes": 85028569088,
            "kvBytesPerToken": 131072,
            "kvTokenCapacity": 457760,
            "numGpuBlocks": 28610,
            "blockSize": 16,
        },
        "vllmStartup": {
            "weightsGib": 14.99,
            "activationPeakGib": 1.19,
            "nonTorchGib": 0.54,
            "cudaGraphGib": 0.62,
            "availableKvCacheGib": 55.88,
            "numGpuBlocks": 28610,
            "kvCacheTokens": 457760,
            "maxConcurrency": 13.97,
            "starts": True,
            "error": None,
        },
        "recommendation": {
            "gpuMemoryUtilization": 0.92,
            "kvCacheMemoryBytes": None,
            "maxNumSeqs": 96,
            "maxModelLen": 32768,
            "maxNumBatchedTokens": 8192,
            "kvCacheDtype": "auto",
            "perReplicaConcurrency": 96,
            "replicas": 5,
            "minReplicasForPeak": 4,
            "maxSurge": 0,
            "maxUnavailable": 1,
            "pdbMinAvailable": 4,
            "provenance": {"gpuMemoryUtilization": "exact", "maxNumSeqs": "assumed"},
        },
        "applied": {
            "flags": {"gpu-memory-utilization": "0.92", "max-num-seqs": "96"},
            "replicas": 5,
            "at": "2026-01-02T03:04:05Z",
            "hash": "sha256:0123abcd",
        },
        "observed": {
            "numGpuBlocks": 28500,
            "blockSize": 16,
            "gpuMemoryUtilization": 0.92,
            "kvUsageP95": 0.81,
            "promptTokens": {"p50": 980.5, "p95": 2100, "p99": 3900},
            "outputTokens": {"p50": 75, "p95": 210, "p99": 480},
            "peakConcurrency": 280,
            "preemptionsPerHour": 0.5,
            "prefixCacheHitRate": 0.42,
            "predictedNumGpuBlocks": 28610,
            "predictionErrorPercent": 0.39,
            "samples": 5,
            "window": "7d",
            "at": "2026-01-02T03:04:05Z",
        },
    },
}


def _manifest(text: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    return doc


def minimal() -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": {
            "targetRef": {"name": "llama"},
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "hardware": {"gpu": "H100-SXM-80GB"},
            "workload": {
                "cohorts": [
                    {
                        "name": "chat",
                        "weight": 1,
                        "promptTokens": {"p50": 100, "p95": 200, "p99": 300},
                        "outputTokens": {"p50": 10, "p95": 20, "p99": 30},
                    }
                ]
            },
        },
    }


def mutate(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of obj with the value at a dotted path (``a.b[0].c``) set, or deleted (DELETE)."""
    out = copy.deepcopy(obj)
    parts: list[str | int] = []
    for token in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        parts.append(int(token[1:-1]) if token.startswith("[") else token)
    node: Any = out
    for part in parts[:-1]:
        if isinstance(part, str) and part not in node:
            node[part] = {}
        node = node[part]
    if value is DELETE:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value
    return out


def cohort(name: str, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": name,
        "weight": 0.5,
        "promptTokens": {"p50": 100, "p95": 200, "p99": 300},
        "outputTokens": {"p50": 10, "p95": 20, "p99": 30},
    }
    base.update(over)
    return base


# (mutated path, value, reported path, message fragment)
INVALID: list[tuple[str, Any, str, str]] = [
    ("spec.mode", "enforce", "spec.mode", "'Enforce' or 'Recommend'"),
    ("spec.targetRef.kind", "StatefulSet", "spec.targetRef.kind", "'Deployment'"),
    ("spec.targetRef.name", DELETE, "spec.targetRef.name", "required field is missing"),
    ("spec.targetRef.name", "Llama_8B", "spec.targetRef.name", "DNS-1123 subdomain"),
    ("spec.targetRef.container", "VLLM", "spec.targetRef.container", "DNS-1123 label"),
    ("spec.model.config", {"hidden_size": 1}, "spec.model", "exactly one of name, configMapRef"),
    ("spec.model.name", DELETE, "spec.model", "(got none)"),
    ("spec.model.name", None, "spec.model", "(got none)"),
    ("spec.model.dtype", "int4", "spec.model.dtype", "'auto', 'bfloat16'"),
    ("spec.model.quantization", "int4", "spec.model.quantization", "'fp8'"),
    ("spec.model.kvCacheDtype", "fp16", "spec.model.kvCacheDtype", "'fp8_e4m3'"),
    ("spec.model.maxLoras", -1, "spec.model.maxLoras", "greater than or equal to 0"),
    ("spec.model.maxLoraRank", 0, "spec.model.maxLoraRank", "greater than or equal to 1"),
    ("spec.model.maxLoraRank", 513, "spec.model.maxLoraRank", "less than or equal to 512"),
    ("spec.hardware", {}, "spec.hardware", "at least one of gpu and gpuMemoryGiB"),
    ("spec.hardware.gpuMemoryGiB", 0, "spec.hardware.gpuMemoryGiB", "greater than 0"),
    (
        "spec.hardware.tensorParallel",
        0,
        "spec.hardware.tensorParallel",
        "Input should be greater than or equal to 1",
    ),
    (
        "spec.hardware.tensorParallel",
        65,
        "spec.hardware.tensorParallel",
        "less than or equal to 64",
    ),
    ("spec.hardware.tensorParallel", "2", "spec.hardware.tensorParallel", "valid integer"),
    ("spec.hardware.tensorParallel", True, "spec.hardware.tensorParallel", "valid integer"),
    ("spec.hardware.tensorParallel", 1.5, "spec.hardware.tensorParallel", "valid integer"),
    ("spec.hardware.pipelineParallel", 0, "spec.hardware.pipelineParallel", "greater than or"),
    (
        "spec.hardware.gpuResourceName",
        "nvidia gpu",
        "spec.hardware.gpuResourceName",
        "resource name",
    ),
    ("spec.engine.name", "sglang", "spec.engine.name", "'vllm'"),
    ("spec.engine.version", 0.19, "spec.engine.version", "valid string"),
    ("spec.engine.version", "latest", "spec.engine.version", "must be a version such as"),
    ("spec.engine.blockSize", 24, "spec.engine.blockSize", "8, 16, 32, 64 or 128"),
    ("spec.engine.maxNumBatchedTokens", 0, "spec.engine.maxNumBatchedTokens", "greater than"),
    ("spec.engine.maxNumSeqsCap", 0, "spec.engine.maxNumSeqsCap", "greater than or equal to 1"),
    ("spec.engine.enforceEager", "yes", "spec.engine.enforceEager", "valid boolean"),
    ("spec.workload.maxModelLen", 0, "spec.workload.maxModelLen", "greater than or equal to 1"),
    ("spec.workload.maxModelLen", 10_000_001, "spec.workload.maxModelLen", "less than or equal"),
    (
        "spec.workload.cohorts",
        [cohort(f"c{i}") for i in range(17)],
        "spec.workload.cohorts",
        "at most 16 items",
    ),
    (
        "spec.workload.cohorts",
        [cohort("chat"), cohort("chat")],
        "spec.workload.cohorts",
        "duplicate cohort name 'chat'",
    ),
    ("spec.workload.cohorts[0].name", "Chat", "spec.workload.cohorts[0].name", "DNS-1123 label"),
    ("spec.workload.cohorts[0].weight", 0, "spec.workload.cohorts[0].weight", "greater than 0"),
    (
        "spec.workload.cohorts[0].weight",
        1.5,
        "spec.workload.cohorts[0].weight",
        "less than or equal to 1",
    ),
    (
        "spec.workload.cohorts[0].promptTokens.p95",
        50,
        "spec.workload.cohorts[0].promptTokens.p95",
        "p95 (50) must be greater than or equal to p50",
    ),
    (
        "spec.workload.cohorts[0].promptTokens.p99",
        150,
        "spec.workload.cohorts[0].promptTokens.p99",
        "p99 (150) must be greater than or equal to p95",
    ),
    (
        "spec.workload.cohorts[0].promptTokens.p50",
        -1,
        "spec.workload.cohorts[0].promptTokens.p50",
        "greater than or equal to 0",
    ),
    (
        "spec.workload.cohorts[0].promptTokens.p99",
        DELETE,
        "spec.workload.cohorts[0].promptTokens.p99",
        "required field is missing",
    ),
    (
        "spec.workload.cohorts[0].outputTokens.p50",
        0,
        "spec.workload.cohorts[0].outputTokens.p50",
        "greater than or equal to 1",
    ),
    (
        "spec.workload.cohorts[0].outputTokens.p99",
        5,
        "spec.workload.cohorts[0].outputTokens.p99",
        "must be greater than or equal to p95",
    ),
    (
        "spec.workload.cohorts[0].sharedPrefixTokens",
        -1,
        "spec.workload.cohorts[0].sharedPrefixTokens",
        "greater than or equal to 0",
    ),
    ("spec.workload.quantile", "p90", "spec.workload.quantile", "'p50', 'p95' or 'p99'"),
    ("spec.workload.peakConcurrency", -1, "spec.workload.peakConcurrency", "greater than or"),
    ("spec.workload.itlTargetMs", 0, "spec.workload.itlTargetMs", "greater than 0"),
    (
        "spec.workload.fromPrometheus",
        {"url": "prometheus:9090"},
        "spec.workload.fromPrometheus.url",
        "must be an http:// or https:// URL (got 'prometheus:9090')",
    ),
    (
        "spec.workload.fromPrometheus",
        {"url": "http://p:9090", "window": "7 days"},
        "spec.workload.fromPrometheus.window",
        "must be a Prometheus duration",
    ),
    (
        "spec.workload.fromPrometheus",
        {"url": "http://p:9090", "mode": "min"},
        "spec.workload.fromPrometheus.mode",
        "'replace', 'max' or 'spec-only'",
    ),
    (
        "spec.workload.fromPrometheus",
        {"url": "http://p:9090", "refreshSeconds": 10},
        "spec.workload.fromPrometheus.refreshSeconds",
        "greater than or equal to 30",
    ),
    (
        "spec.workload.fromPrometheus",
        {"url": "http://p:9090", "bearerTokenSecretRef": {}},
        "spec.workload.fromPrometheus.bearerTokenSecretRef.name",
        "required field is missing",
    ),
    (
        "spec.headroom.operationalFraction",
        0.6,
        "spec.headroom.operationalFraction",
        "less than or equal to 0.5",
    ),
    (
        "spec.headroom.operationalFraction",
        -0.1,
        "spec.headroom.operationalFraction",
        "greater than or equal to 0",
    ),
    (
        "spec.headroom.kvSafetyFraction",
        0.95,
        "spec.headroom.kvSafetyFraction",
        "less than or equal to 0.9",
    ),
    ("spec.headroom.recoveryReplicas", -1, "spec.headroom.recoveryReplicas", "greater than or"),
    (
        "spec.rollout",
        {"minReplicas": 5, "maxReplicas": 2},
        "spec.rollout.maxReplicas",
        "maxReplicas (2) must be greater than or equal to minReplicas (5)",
    ),
    ("spec.rollout.minReplicas", 17, "spec.rollout.maxReplicas", "minReplicas (17)"),
    ("spec.rollout.maxReplicas", 0, "spec.rollout.maxReplicas", "greater than or equal to 1"),
    ("spec.rollout.manageReplicas", "true", "spec.rollout.manageReplicas", "valid boolean"),
    (
        "spec.rollout.spareGpuNodeSelector",
        {"pool": 1},
        "spec.rollout.spareGpuNodeSelector.pool",
        "valid string",
    ),
    ("spec.policy.hysteresisPercent", 51, "spec.policy.hysteresisPercent", "less than or equal"),
    (
        "spec.hardware.tensorParalel",
        2,
        "spec.hardware.tensorParalel",
        "unknown field (did you mean 'tensorParallel'?)",
    ),
    (
        "spec.workload.cohorts[0].promptToken",
        {},
        "spec.workload.cohorts[0].promptToken",
        "did you mean 'promptTokens'?",
    ),
    ("spec.extra", 1, "spec.extra", "unknown field"),
    ("spec", DELETE, "spec", "required field is missing"),
    ("metadata.name", DELETE, "metadata.name", "required field is missing"),
]


def test_realistic_manifests_round_trip() -> None:
    for raw in (_manifest(LLAMA_8B), _manifest(QWEN_235B_FP8), INLINE_CONFIG, WITH_STATUS):
        icap = InferenceCapacity.from_manifest(raw)
        dumped = icap.to_dict()
        assert InferenceCapacity.from_manifest(dumped) == icap
        # Everything the user wrote survives, with the same JSON names and values.
        assert _contains(dumped, _drop_none(raw)), raw["metadata"]["name"]


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def _contains(big: Any, small: Any) -> bool:
    if isinstance(small, dict):
        return isinstance(big, dict) and all(
            k in big and _contains(big[k], v) for k, v in small.items()
        )
    if isinstance(small, list):
        return (
            isinstance(big, list)
            and len(big) == len(small)
            and all(_contains(b, s) for b, s in zip(big, small, strict=True))
        )
    if isinstance(small, datetime) or isinstance(big, str) and isinstance(small, str):
        return bool(big == small) or _same_instant(big, small)
    return bool(big == small)


def _same_instant(a: Any, b: Any) -> bool:
    try:
        return datetime.fromisoformat(str(a)) == datetime.fromisoformat(str(b))
    except ValueError:
        return False


def test_parsed_values_are_typed() -> None:
    icap = InferenceCapacity.from_manifest(_manifest(LLAMA_8B))
    spec = icap.spec
    assert icap.namespaced_name == "ml/llama-8b"
    assert spec.mode == "Enforce"
    assert spec.model.max_lora_rank == 64
    assert spec.hardware.gpu == "H100-SXM-80GB"
    assert spec.engine.version == "0.10.1.dev101+gbda9d0535"
    assert [c.name for c in spec.workload.cohorts] == ["chat", "rag"]
    assert spec.workload.cohorts[0].prompt_tokens.p99 == 4000
    assert spec.workload.cohorts[0].shared_prefix_tokens == 3000
    assert spec.workload.cohorts[1].shared_prefix_tokens == 0
    assert spec.workload.itl_target_ms == 40.0 and isinstance(spec.workload.itl_target_ms, float)
    assert spec.rollout.spare_gpu_node_selector == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }
    assert spec.policy.hysteresis_percent == 10.0

    qwen = InferenceCapacity.from_manifest(_manifest(QWEN_235B_FP8)).spec
    assert qwen.mode == "Recommend"
    assert qwen.model.config_map_ref is not None
    assert qwen.model.config_map_ref.key == "config.json"
    prom = qwen.workload.from_prometheus
    assert prom is not None and prom.mode == "replace" and prom.refresh_seconds == 600
    assert prom.bearer_token_secret_ref is not None
    assert prom.bearer_token_secret_ref.key == "token"
    assert prom.ca_config_map_ref is not None and prom.ca_config_map_ref.key == "ca.crt"

    tiny = InferenceCapacity.from_manifest(INLINE_CONFIG).spec
    assert tiny.model.config is not None and tiny.model.config["rope_scaling"]["factor"] == 32.0
    assert tiny.hardware.gpu is None and tiny.hardware.gpu_memory_gib == 23.55


def test_defaults() -> None:
    spec = InferenceCapacity.from_manifest(minimal()).spec
    assert spec.mode == "Enforce"
    assert spec.target_ref.kind == "Deployment" and spec.target_ref.container is None
    assert spec.model.dtype == "auto"
    assert spec.model.quantization is None and spec.model.kv_cache_dtype is None
    assert (spec.model.max_loras, spec.model.max_lora_rank) == (0, 16)
    assert spec.hardware.tensor_parallel is None and spec.hardware.pipeline_parallel is None
    assert spec.hardware.gpu_resource_name == "nvidia.com/gpu"
    assert spec.engine.name == "vllm" and spec.engine.version is None
    assert spec.engine.block_size is None and spec.engine.enforce_eager is False
    assert spec.workload.quantile == "p95" and spec.workload.from_prometheus is None
    assert spec.workload.max_model_len is None and spec.workload.peak_concurrency is None
    assert spec.headroom.operational_fraction == 0.05
    assert spec.headroom.kv_safety_fraction == 0.10
    assert spec.headroom.recovery_replicas == 1
    assert (spec.rollout.min_replicas, spec.rollout.max_replicas) == (1, 16)
    assert spec.rollout.manage_replicas and spec.rollout.manage_strategy
    assert spec.rollout.manage_pod_disruption_budget
    assert spec.rollout.spare_gpu_node_selector is None
    assert not spec.policy.set_max_model_len and not spec.policy.set_max_num_batched_tokens
    assert not spec.policy.set_kv_cache_dtype and not spec.policy.use_kv_cache_memory_bytes
    assert spec.policy.hysteresis_percent == 5.0


def test_python_names_are_accepted_and_models_are_frozen() -> None:
    hardware = HardwareSpec(gpu="A100-SXM-80GB", tensor_parallel=2)
    assert hardware.tensor_parallel == 2
    assert (
        HardwareSpec.model_validate({"gpuMemoryGiB": 80, "tensorParallel": 4}).tensor_parallel == 4
    )
    with pytest.raises(ValidationError):
        hardware.tensor_parallel = 4  # type: ignore[misc]
    spec = InferenceCapacitySpec(
        target_ref=TargetRef(name="x"),
        model=ModelSpec(name="meta-llama/Llama-3.2-1B"),
        hardware=hardware,
    )
    dumped = spec.model_dump(by_alias=True, exclude_none=True)
    assert dumped["hardware"] == {
        "gpu": "A100-SXM-80GB",
        "tensorParallel": 2,
        "gpuResourceName": "nvidia.com/gpu",
    }
    assert "gpuMemoryGiB" in HardwareSpec.model_json_schema(by_alias=True)["properties"]


def test_null_means_absent() -> None:
    doc = mutate(minimal(), "spec.hardware.tensorParallel", None)
    doc = mutate(doc, "spec.model.quantization", None)
    doc = mutate(doc, "spec.workload.fromPrometheus", None)
    spec = InferenceCapacity.from_manifest(doc).spec
    assert spec.hardware.tensor_parallel is None and spec.model.quantization is None


@pytest.mark.parametrize(
    ("path", "value", "where", "fragment"),
    INVALID,
    ids=[f"{p}={v if v is not DELETE else 'DELETE'}"[:60] for p, v, _, _ in INVALID],
)
def test_each_constraint_is_rejected_with_its_field_path(
    path: str, value: Any, where: str, fragment: str
) -> None:
    doc = mutate(minimal(), path, value)
    with pytest.raises(ManifestError) as info:
        InferenceCapacity.from_manifest(doc)
    err = info.value
    paths = [e.path for e in err.errors]
    assert where in paths, str(err)
    line = next(f"{e.path}: {e.message}" for e in err.errors if e.path == where)
    assert fragment in line, str(err)
    assert f"  {line}" in str(err).splitlines()
    if path != "metadata.name":
        assert str(err).startswith(f"{KIND} ns/m: ")


def test_error_message_format() -> None:
    doc = mutate(minimal(), "spec.hardware.tensorParallel", 0)
    doc = mutate(doc, "spec.workload.cohorts[0].promptTokens.p95", 50)
    with pytest.raises(ManifestError) as info:
        InferenceCapacity.from_manifest(doc)
    assert str(info.value).splitlines() == [
        "InferenceCapacity ns/m: 2 invalid fields:",
        "  spec.hardware.tensorParallel: Input should be greater than or equal to 1 (got 0)",
        "  spec.workload.cohorts[0].promptTokens.p95: p95 (50) must be greater than or equal to "
        "p50 (100)",
    ]
    assert isinstance(info.value, ValueError)


def test_api_version_and_kind_are_checked() -> None:
    with pytest.raises(
        ManifestError, match=r"apiVersion: must be 'capacity.inference.dev/v1alpha1'"
    ):
        InferenceCapacity.from_manifest(
            mutate(minimal(), "apiVersion", "capacity.inference.dev/v1")
        )
    with pytest.raises(
        ManifestError, match=r"kind: must be 'InferenceCapacity' \(got 'Deployment'\)"
    ):
        InferenceCapacity.from_manifest(mutate(minimal(), "kind", "Deployment"))
    with pytest.raises(ManifestError, match="must be a mapping"):
        InferenceCapacity.from_manifest(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_status_is_parsed_and_can_be_ignored() -> None:
    icap = InferenceCapacity.from_manifest(WITH_STATUS)
    status = icap.status
    assert status is not None
    ready = status.condition("Ready")
    assert ready is not None and ready.status == "True"
    assert ready.last_transition_time == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert status.condition("Calibrated") is None
    assert status.ledger is not None and status.ledger.ranks[0].items[0].bytes == 16060522496
    assert status.recommendation is not None
    assert status.recommendation.provenance["maxNumSeqs"] == "assumed"
    assert status.observed is not None and status.observed.prompt_tokens is not None
    assert status.observed.prompt_tokens.p50 == 980.5

    broken = mutate(WITH_STATUS, "status.recommendation.gpuMemoryUtilization", 1.5)
    with pytest.raises(ManifestError, match=r"status\.recommendation\.gpuMemoryUtilization"):
        InferenceCapacity.from_manifest(broken)
    assert InferenceCapacity.from_manifest(broken, ignore_status=True).status is None

    # A newer operator's extra status fields do not break an older reader.
    newer = mutate(WITH_STATUS, "status.futureField", {"x": 1})
    assert InferenceCapacity.from_manifest(newer).status == status


def test_status_serialises_for_a_patch() -> None:
    status = InferenceCapacityStatus.model_validate(WITH_STATUS["status"])
    body = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert body["conditions"][0]["lastTransitionTime"] == "2026-01-02T03:04:05Z"
    assert body["ledger"]["ranks"][0]["totalBytes"] == 85028569088
    assert "kvCacheMemoryBytes" not in body["recommendation"]
    assert InferenceCapacityStatus.model_validate(body) == status


def test_quantile_models_directly() -> None:
    assert PromptTokens(p50=0, p95=0, p99=0).p99 == 0
    with pytest.raises(ValidationError, match="p99 \\(1\\) must be greater than or equal to p95"):
        PromptTokens(p50=1, p95=2, p99=1)
    with pytest.raises(ValidationError):
        Cohort.model_validate(cohort("x", outputTokens={"p50": 0, "p95": 1, "p99": 1}))


MULTI_DOC = f"""
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: llama-8b, namespace: ml}}
spec:
  replicas: 2
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.10.1
          args: ["--model", "meta-llama/Llama-3.1-8B-Instruct"]
---
# an empty document
---
{LLAMA_8B.strip()}
---
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {{name: qwen3-235b-config}}
    data: {{config.json: "{{}}"}}
  - {yaml.safe_dump(INLINE_CONFIG, default_flow_style=True, width=10_000).strip()}
"""


def test_load_manifests_splits_capacities_from_other_documents() -> None:
    capacities, others = load_manifests(MULTI_DOC)
    assert [c["metadata"]["name"] for c in capacities] == ["llama-8b", "tiny"]
    assert [o["kind"] for o in others] == ["Deployment", "ConfigMap"]
    parsed = [InferenceCapacity.from_manifest(c) for c in capacities]
    assert parsed[0].spec.target_ref.name == others[0]["metadata"]["name"]
    assert load_manifests("") == ([], [])


def test_load_manifests_rejects_non_objects_and_bad_yaml() -> None:
    with pytest.raises(ManifestError, match="document 2 is a list"):
        load_manifests("kind: A\n---\n- 1\n- 2\n")
    with pytest.raises(ManifestError, match="invalid YAML"):
        load_manifests("a: [1, 2\n")


def test_unquoted_version_in_yaml_is_caught() -> None:
    # YAML reads 0.19 as a float; the API server would reject it as well.
    text = LLAMA_8B.replace('version: "0.10.1.dev101+gbda9d0535"', "version: 0.19")
    capacities, _ = load_manifests(text)
    with pytest.raises(
        ManifestError, match=r"spec\.engine\.version: Input should be a valid string"
    ):
        InferenceCapacity.from_manifest(capacities[0])


def test_quantization_enum_matches_the_formats_the_ledger_sizes() -> None:
    """The CRD's quantization enum and the ledger's known formats must not drift apart."""
    from typing import get_args

    from inference_capacity.api import Quantization
    from inference_capacity.model.quant import KNOWN_METHODS

    assert set(get_args(Quantization)) <= set(KNOWN_METHODS)


def test_status_vllm_startup_is_the_prediction_json_by_the_status_model() -> None:
    """One serializer: status.vllmStartup is StartupPrediction.to_json (plan -o json's
    vllm_startup) cut to VllmStartup's fields under its camelCase aliases, and it validates."""
    from inference_capacity.api import VllmStartup
    from inference_capacity.engines.vllm import EngineSettings
    from inference_capacity.hardware import get_gpu
    from inference_capacity.model import load_model
    from inference_capacity.planner import PlanInput, make_plan
    from inference_capacity.report.data import plan_json, startup_json

    plan = make_plan(
        PlanInput(
            model=load_model("meta-llama/Llama-3.1-8B-Instruct"),
            gpu=get_gpu("H100-SXM-80GB"),
            engine=EngineSettings(version="0.19.0", max_model_len=8192),
        )
    )
    status = startup_json(plan)
    snake = plan_json(plan)["vllm_startup"]
    fields = VllmStartup.model_fields
    assert list(status) == [f.alias for f in fields.values()]
    assert status["availableKvCacheGib"] == snake["available_kv_cache_gib"]
    assert {fields[k].alias: snake[k] for k in fields} == status
    assert VllmStartup.model_validate(status).model_dump(by_alias=True) == status
