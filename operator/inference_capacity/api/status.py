"""The status models: what the operator writes under ``status`` (conditions, the ledger, the
recommendation, what was applied and what was measured).

Status models ignore unknown fields, so an older operator can read a newer status.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError

from .common import (
    CONDITION_REASON,
    ConditionStatus,
    ConditionType,
    DateTime,
    EngineVersionSource,
    Int64,
    Lifetime,
    ModelSourceKind,
    Provenance,
    SInt64,
    _Status,
)

__all__ = [
    "Applied",
    "Condition",
    "HandlerState",
    "InferenceCapacityStatus",
    "Latency",
    "LatencyPoint",
    "Ledger",
    "LedgerItem",
    "LedgerRank",
    "ModelStatus",
    "Observed",
    "ObservedQuantiles",
    "ObservedStartup",
    "Recommendation",
    "Risk",
    "Sizing",
    "StatusContractError",
    "Summary",
    "VllmStartup",
    "status_document",
]


class Condition(_Status):
    """An observation of one aspect of the resource, per Kubernetes API conventions."""

    type: ConditionType = Field(
        description=(
            "Ready, Fits, RolloutSafe, Applied, Observed, Calibrated, ModelResolved or Supported."
        )
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=CONDITION_REASON,
        description="Machine-readable CamelCase reason for the last transition.",
    )
    message: str = Field("", max_length=32768, description="Human-readable details.")
    last_transition_time: DateTime = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation the condition was computed from."
    )


class Summary(_Status):
    """What was sized, resolved from the spec and the target."""

    model: str = Field(description="Model name (catalog key, or the config's architecture).")
    gpu: str = Field(description="GPU name (catalog name, or the memory size given).")
    tensor_parallel: int = Field(ge=1, description="Tensor-parallel size in effect.")
    pipeline_parallel: int = Field(ge=1, description="Pipeline-parallel size in effect.")


class ModelStatus(_Status):
    """Where the model's architecture and weights were read from."""

    source: ModelSourceKind = Field(
        description="catalog (built in), hub (Hugging Face Hub), configMap or inline."
    )
    id: str = Field(description="Catalog key or Hub repository id.")
    revision: str | None = Field(
        None, description="The Hub commit the model resolved to. null: not from the Hub."
    )
    requested_revision: str | None = Field(
        None, description="spec.model.revision as given (a branch, tag or commit)."
    )
    checkpoint_bytes: Int64 | None = Field(
        None,
        ge=0,
        description=(
            "Sum of the tensors' bytes in the checkpoint's safetensors headers. null: no headers."
        ),
    )
    disk_bytes: Int64 | None = Field(
        None, ge=0, description="Sum of the repository's file sizes. null: not known."
    )


class LedgerItem(_Status):
    """One line of a rank's memory ledger."""

    name: str = Field(description="What the memory holds (e.g. weights, kv-cache, cuda-graphs).")
    lifetime: Lifetime = Field(
        description=(
            "How long it lives: worker (process lifetime), request, iteration (one scheduler "
            "step) or startup (profiling only)."
        )
    )
    owner: str = Field(description="Who allocates it (e.g. torch, vllm, cuda, nccl, operator).")
    bytes: Int64 = Field(description="Size in bytes (negative only for a deficit).")
    gib: float = Field(description="Size in GiB (2^30 bytes), for reading.")
    provenance: Provenance = Field(
        description="exact (from config/headers), calibrated (from metrics) or assumed."
    )


class LedgerRank(_Status):
    """The memory ledger of one GPU (rank)."""

    rank: int = Field(ge=0, description="Global rank (GPU index within a replica).")
    stage: int = Field(ge=0, description="Pipeline stage of this rank.")
    items: tuple[LedgerItem, ...] = Field((), description="Line items; they sum to totalBytes.")
    total_bytes: Int64 = Field(description="Sum of the items (bytes); equals the device total.")


class Ledger(_Status):
    """Per-rank GPU memory ledger and the KV-cache capacity it leaves."""

    ranks: tuple[LedgerRank, ...] = Field((), description="One ledger per rank.")
    device_bytes: Int64 = Field(ge=0, description="Total memory of one GPU (bytes).")
    kv_bytes_per_token: Int64 = Field(
        ge=0, description="KV-cache bytes per token on the limiting rank."
    )
    kv_token_capacity: Int64 = Field(
        ge=0, description="Tokens the KV pool holds (numGpuBlocks x blockSize, minimum over ranks)."
    )
    num_gpu_blocks: int = Field(ge=0, description="KV-cache blocks per rank (minimum over ranks).")
    block_size: int = Field(ge=1, description="KV-cache block size (tokens).")


class VllmStartup(_Status):
    """What vLLM is predicted to log at startup with the recommended flags."""

    weights_gib: float = Field(description="Model weights loaded per rank (GiB).")
    activation_peak_gib: float = Field(description="Peak activation memory while profiling (GiB).")
    non_torch_gib: float = Field(description="Non-torch memory: CUDA context, NCCL (GiB).")
    cuda_graph_gib: float = Field(description="CUDA-graph memory pool (GiB).")
    available_kv_cache_gib: float = Field(description='"Available KV cache memory" (GiB).')
    num_gpu_blocks: int = Field(ge=0, description="KV-cache blocks vLLM allocates.")
    kv_cache_tokens: int = Field(ge=0, description='"GPU KV cache size" (tokens).')
    max_concurrency: float = Field(
        ge=0, description='"Maximum concurrency" at max-model-len tokens per request.'
    )
    starts: bool = Field(description="vLLM is expected to start with these flags.")
    error: str | None = Field(None, description="The startup error predicted, if it won't start.")


class Recommendation(_Status):
    """The vLLM flags, replicas and rollout settings the operator recommends (and, in Enforce
    mode, applies)."""

    gpu_memory_utilization: float = Field(
        gt=0, le=1, description="--gpu-memory-utilization (fraction of GPU memory vLLM may use)."
    )
    kv_cache_memory_bytes: SInt64 | None = Field(
        None, ge=0, description="--kv-cache-memory-bytes (bytes), when policy asks for it."
    )
    max_num_seqs: int = Field(ge=0, description="--max-num-seqs (sequences per replica).")
    max_model_len: int = Field(ge=1, description="--max-model-len (tokens).")
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="--max-num-batched-tokens (tokens per step)."
    )
    kv_cache_dtype: str | None = Field(None, description="--kv-cache-dtype.")
    per_replica_concurrency: int = Field(
        ge=0, description="Concurrent requests one replica holds at the sizing quantile."
    )
    replicas: int = Field(ge=0, description="Replicas: minReplicasForPeak + recoveryReplicas.")
    min_replicas_for_peak: int = Field(
        ge=0, description="Fewest replicas that hold peakConcurrency."
    )
    max_surge: int = Field(ge=0, description="Rolling-update maxSurge (pods).")
    max_unavailable: int = Field(ge=0, description="Rolling-update maxUnavailable (pods).")
    pdb_min_available: int = Field(ge=0, description="PodDisruptionBudget minAvailable (pods).")
    provenance: dict[str, Provenance] = Field(
        {}, description="Per field above: exact, calibrated or assumed."
    )


class Sizing(_Status):
    """How max-num-seqs was chosen and the preemption risk it runs."""

    rule: Literal["distribution", "conservative"] = Field(description="The sizing rule used.")
    max_num_seqs: int = Field(ge=0, description="--max-num-seqs chosen (sequences per replica).")
    preemption_probability: float = Field(
        ge=0,
        le=1,
        description=(
            "Probability that a batch of maxNumSeqs sequences at full length outgrows the usable "
            "KV blocks (Monte Carlo; the worse of the steady and burst mixes)."
        ),
    )
    preemption_probability_at_default: float = Field(
        ge=0, le=1, description="The same probability at vLLM's default --max-num-seqs."
    )
    default_max_num_seqs: int = Field(ge=0, description="vLLM's default --max-num-seqs here.")
    preemption_target: float = Field(ge=0, le=1, description="spec.policy.preemptionTarget.")
    limited_by: str = Field(description="What bound maxNumSeqs: kv, itl, ttft or cap.")
    binding_mix: str = Field(description="The cohort mix that bound it: steady or burst.")


class LatencyPoint(_Status):
    """Decode-step latency and throughput of one replica at one batch size."""

    max_num_seqs: int = Field(ge=0, description="Running sequences.")
    itl_ms_p50: float = Field(ge=0, description="Inter-token latency, median (ms).")
    itl_ms_p95: float = Field(ge=0, description="Inter-token latency, 95th percentile (ms).")
    output_tokens_per_s: float = Field(ge=0, description="Output tokens per second per replica.")
    preemption_probability: float = Field(ge=0, le=1, description="Preemption probability.")


class Latency(_Status):
    """The decode-step latency model at the recommended max-num-seqs."""

    itl_ms_p50: float | None = Field(None, ge=0, description="ITL median (ms).")
    itl_ms_p95: float | None = Field(None, ge=0, description="ITL 95th percentile (ms).")
    itl_ms_p99: float | None = Field(None, ge=0, description="ITL 99th percentile (ms).")
    ttft_ms_p50: float | None = Field(
        None, ge=0, description="Predicted time to first token, median (ms)."
    )
    ttft_ms_p95: float | None = Field(
        None, ge=0, description="Predicted time to first token, 95th percentile (ms)."
    )
    saturated: bool | None = Field(
        None,
        description="Prefill demand exceeds the step budget (--max-num-batched-tokens): "
        "throughput is flat and TTFT grows with more requests in flight.",
    )
    output_tokens_per_s: float | None = Field(
        None, ge=0, description="Output tokens per second per replica."
    )
    itl_limit: int | None = Field(
        None,
        ge=0,
        description="Largest batch meeting workload.itlTargetMs and ttftTargetMs. null: no target.",
    )
    arrivals: Literal["lockstep", "spread"] | None = Field(
        None,
        description="The arrivals the TTFT assumes: lockstep where every request has the same "
        "prompt and output (a group of prompts shares one prefill step), else spread.",
    )
    hbm_efficiency: float = Field(gt=0, le=1, description="HBM bandwidth fraction assumed.")


class Applied(_Status):
    """What the operator last wrote to the target."""

    flags: dict[str, str] = Field({}, description="vLLM flags set, without the leading --.")
    replicas: int | None = Field(None, ge=0, description="Replicas set. null: not managed.")
    at: DateTime = Field(description="When it was applied (RFC 3339).")
    hash: str = Field(description="Hash of what was applied; re-applying the same is a no-op.")


class ObservedQuantiles(_Status):
    """Observed length quantiles (tokens)."""

    p50: float = Field(ge=0, description="Median (tokens).")
    p95: float = Field(ge=0, description="95th percentile (tokens).")
    p99: float = Field(ge=0, description="99th percentile (tokens).")


class ObservedStartup(_Status):
    """What vLLM printed at startup in one pod of one pod-template hash (read through
    pods/log), and how the prediction for that pod's flags compares."""

    template_hash: str = Field(description="The pods' pod-template-hash label.")
    pod: str = Field(description="The pod whose log was read.")
    reason: Literal[
        "Observed", "Failed", "NoStartupLines", "Rejected", "LogUnavailable", "NotReady"
    ] = Field(
        description=(
            "Observed: the numbers below are vLLM's; Failed: vLLM did not start (failure says "
            "why); NoStartupLines: the log has none of vLLM's startup lines (yet); Rejected: a "
            "line in vLLM's format has a number no vLLM prints, nothing is taken from the log; "
            "LogUnavailable: the log could not be read (message says why); NotReady: no pod of "
            "this hash is Ready and none failed."
        )
    )
    message: str = Field("", max_length=1024, description="Details, one line.")
    vllm_version: str | None = Field(None, description="The version vLLM printed.")
    weights_gib: float | None = Field(None, description='"Model loading took X GiB".')
    activation_peak_gib: float | None = Field(
        None, description='"torch peak memory increase" (GiB).'
    )
    non_torch_gib: float | None = Field(
        None, description='"non-torch forward increase memory" (GiB).'
    )
    cuda_graph_gib: float | None = Field(
        None, description='"CUDA graph pool memory: X GiB (actual)" (or V0 graph capture).'
    )
    cuda_graph_estimated_gib: float | None = Field(
        None, description='"Estimated CUDA graph memory" (GiB).'
    )
    available_kv_cache_gib: float | None = Field(
        None, description='"Available KV cache memory" (GiB).'
    )
    kv_cache_tokens: int | None = Field(None, ge=0, description='"GPU KV cache size" (tokens).')
    num_gpu_blocks: int | None = Field(None, ge=0, description="KV-cache blocks, where printed.")
    max_concurrency: float | None = Field(
        None, ge=0, description='"Maximum concurrency for L tokens per request: Cx".'
    )
    max_concurrency_len: int | None = Field(None, ge=1, description="L of that line (tokens).")
    failure: str | None = Field(
        None,
        description=(
            "Why vLLM did not start: NoKvCacheMemory, MaxSeqLenTooLong, FreeMemoryCheck, "
            "CudaOutOfMemory or OOMKilled. null: no failure seen."
        ),
    )
    shortfall_gib: float | None = Field(
        None, description="GiB the failed start was short of, as vLLM's error line measured it."
    )
    restart_count: int | None = Field(None, ge=0, description="The vLLM container's restarts.")
    predicted_kv_cache_tokens: int | None = Field(
        None, ge=0, description="KV-cache tokens the ledger predicts for this pod's flags."
    )
    prediction_error_percent: dict[str, float] = Field(
        {},
        description=(
            "(predicted - observed) / observed x 100 per term: weights, activationPeak (from "
            "vLLM 0.27 the peak as it prints it), consumedMemory (0.27+), nonTorch, cudaGraph "
            "(the estimate), availableKvCache, kvCacheTokens, maxConcurrency."
        ),
    )
    bytes_read: int = Field(0, ge=0, description="Log bytes read (at most 256 KiB).")
    at: DateTime = Field(description="When the log was read (RFC 3339).")


class StartupAdjustment(_Status):
    """How the plan was changed after what the pods printed at startup."""

    kind: Literal["StepBack", "Calibrated", "StepBackAndCalibrated", "MemoryStepUp"] = Field(
        description=(
            "StepBack: a failed start lowered --gpu-memory-utilization by its measured shortfall; "
            "Calibrated: spec.policy.calibrateFromObserved sized from the observed KV tokens; "
            "MemoryStepUp: an OOMKilled container raised the memory request "
            "(spec.policy.setMemoryRequest; alongside another kind, memoryStepFactor is set)."
        )
    )
    reason: str = Field(max_length=2048, description="Why, with the numbers.")
    operational_fraction_added: float | None = Field(
        None, ge=0, le=1, description="Operational headroom added by steps back (GPU fraction)."
    )
    kv_tokens_ratio: float | None = Field(
        None, gt=0, le=1, description="Observed / predicted KV tokens the sizing used."
    )
    kv_safety_fraction: float | None = Field(
        None, ge=0, le=1, description="The KV safety fraction that ratio gives."
    )
    memory_step_factor: float | None = Field(
        None,
        ge=1,
        le=4,
        description="OOMKilled steps up: the memory request is at least this x memoryBaseBytes.",
    )
    memory_base_bytes: Int64 | None = Field(
        None,
        ge=0,
        description="The container's memory limit (else request) when first OOMKilled, or the "
        "load-time host estimate when it set none.",
    )


class Observed(_Status):
    """What Prometheus shows the fleet doing, what vLLM printed at startup, and how the
    prediction compares."""

    num_gpu_blocks: int | None = Field(None, ge=0, description="KV-cache blocks vLLM reports.")
    block_size: int | None = Field(None, ge=1, description="KV-cache block size vLLM reports.")
    gpu_memory_utilization: float | None = Field(
        None, ge=0, le=1, description="--gpu-memory-utilization vLLM reports."
    )
    kv_usage_p95: float | None = Field(
        None, ge=0, le=1, description="95th percentile of KV-cache usage (fraction of the pool)."
    )
    prompt_tokens: ObservedQuantiles | None = Field(None, description="Prompt lengths (tokens).")
    output_tokens: ObservedQuantiles | None = Field(None, description="Output lengths (tokens).")
    peak_concurrency: float | None = Field(
        None, ge=0, description="Peak concurrent requests (running + waiting), fleet-wide."
    )
    preemptions_per_hour: float | None = Field(
        None, ge=0, description="Preemptions per hour, fleet-wide."
    )
    prefix_cache_hit_rate: float | None = Field(
        None, ge=0, le=1, description="Prefix-cache hit rate (fraction)."
    )
    predicted_num_gpu_blocks: int | None = Field(
        None, ge=0, description="KV-cache blocks the ledger predicted for the observed flags."
    )
    prediction_error_percent: float | None = Field(
        None, description="(predicted - observed) / observed x 100 for numGpuBlocks."
    )
    samples: int = Field(
        0, ge=0, description="Finished requests in the window the quantiles are drawn from."
    )
    window: str | None = Field(
        None, description="Look-back window queried (Prometheus duration). null: no Prometheus."
    )
    at: DateTime | None = Field(
        None, description="When Prometheus was queried (RFC 3339). null: no Prometheus."
    )
    adjustment: StartupAdjustment | None = Field(
        None, description="How the plan changed after the startup lines. null: it did not."
    )
    startup: tuple[ObservedStartup, ...] = Field(
        (),
        description=(
            "Per pod-template hash: what one of its pods' vLLM printed at startup (pods/log)."
        ),
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["templateHash"],
        },
    )


class Risk(_Status):
    """One of the seven ways a replica runs out of memory, with its margin."""

    kind: Literal[
        "load", "startup", "kvExhaustion", "activation", "cudaGraph", "compileCache", "host"
    ] = Field(
        description=(
            "load (weights + a layer in flight vs free memory), startup (vLLM's free-memory "
            "check), kvExhaustion (one request at max-model-len; preemption of the batch), "
            "activation (spikes beyond the profiled batch), cudaGraph (the graph pool's capture), "
            "compileCache (vLLM's compile cache on no volume that outlives the pod: every pod "
            "compiles cold, a smaller KV pool), host (the pod's memory vs the load-time host peak)."
        )
    )
    resource: Literal["gpu", "host"] = Field(description="gpu (per rank) or host (per pod).")
    margin_bytes: SInt64 | None = Field(
        None, description="Bytes to spare (negative: it runs out). null: unknown."
    )
    at_risk: bool = Field(
        description=(
            "The margin is negative (or preemption above target; compileCache: the cache goes "
            "with the pod)."
        )
    )
    flag: str = Field(description="The flag or field that moves the margin.")
    detail: str = Field("", max_length=1024, description="The numbers behind the margin.")


class HandlerProgress(_Status):
    """Kopf's record of one handler being retried (``kopf._cogs.configs.progress.ProgressRecord``:
    timestamps in ISO 8601, UTC)."""

    started: str | None = Field(None, description="When the handler was first called.")
    stopped: str | None = Field(None, description="When it finished or failed for good.")
    delayed: str | None = Field(None, description="When it is to be called again.")
    purpose: str | None = Field(None, description="The cause it handles (create, update, ...).")
    retries: int | None = Field(None, ge=0, description="Retries so far.")
    success: bool | None = Field(None, description="Finished with success.")
    failure: bool | None = Field(None, description="Failed for good (no more retries).")
    message: str | None = Field(None, description="The last error's message.")
    subrefs: tuple[str, ...] | None = Field(None, description="Sub-handlers' ids.")


class HandlerState(_Status):
    """Kopf's own bookkeeping, kept in the status (one status write per handling, no metadata
    patch): the last-handled spec it diffs against, and the progress of a handler being
    retried. Written by the framework, not by the operator's reconcile."""

    last_handled: str | None = Field(
        None,
        description=(
            "The last handled spec, labels and annotations as JSON (large values as digests)."
        ),
    )
    progress: dict[str, HandlerProgress] | None = Field(
        None, description="Per-handler retry state while a handler is being retried."
    )
    dummy: str | None = Field(
        None, description="A timestamp the framework writes to be woken after a long delay."
    )


class InferenceCapacityStatus(_Status):
    """Observed state, written by the operator: the ledger, the recommendation, what was applied
    and what was measured."""

    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation this status was computed from."
    )
    conditions: tuple[Condition, ...] = Field(
        (),
        description=(
            "Ready, Fits, RolloutSafe, Applied, Observed, Calibrated, ModelResolved, Supported."
        ),
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    engine_version: str | None = Field(None, description="Engine version the sizing assumed.")
    engine_version_source: EngineVersionSource | None = Field(
        None, description="Where engineVersion came from: spec, image (tag) or default."
    )
    summary: Summary | None = Field(
        None, description="What was sized: model, GPU and parallelism, resolved."
    )
    model: ModelStatus | None = Field(
        None,
        description=(
            "Where the model came from: catalog or Hub id, the Hub commit, checkpoint bytes."
        ),
    )
    ledger: Ledger | None = Field(
        None, description="Per-rank GPU memory ledger and the KV-cache capacity it leaves."
    )
    vllm_startup: VllmStartup | None = Field(
        None,
        description="What vLLM is predicted to log at startup with the recommended flags.",
    )
    recommendation: Recommendation | None = Field(
        None,
        description=(
            "The vLLM flags, replicas and rollout settings recommended (and, in Enforce mode, "
            "applied), each with its provenance."
        ),
    )
    sizing: Sizing | None = Field(
        None, description="How max-num-seqs was sized and its preemption risk. null: no workload."
    )
    latency: Latency | None = Field(
        None,
        description="Decode-step latency and throughput at the recommendation. null: unknown.",
    )
    applied: Applied | None = Field(
        None, description="What the operator last wrote to the target. null: nothing yet."
    )
    risks: tuple[Risk, ...] = Field(
        (), description="The seven OOM kinds per resource, each with its margin and its flag."
    )
    observed: Observed | None = Field(
        None,
        description=(
            "What Prometheus shows the fleet doing, and how the prediction compares. null: not "
            "observed."
        ),
    )
    kopf: HandlerState | None = Field(
        None, description="The framework's handling state (Kopf): not for users."
    )

    def condition(self, type_: ConditionType) -> Condition | None:
        """The condition of that type, or None."""
        return next((c for c in self.conditions if c.type == type_), None)


class StatusContractError(ValueError):
    """What the operator was about to write is not what the status models describe (a bug)."""


def _shaped(raw: Any, out: Any, path: str, drift: list[str], in_list: bool = False) -> Any:
    """``out`` (the models' dump) with exactly the keys ``raw`` has (a null in ``raw`` deletes
    that key in the merge patch, so it stays); what ``raw`` has and the models do not, or a value
    they would change, goes to ``drift``. Inside a list (replaced whole by a merge patch) a null
    deletes nothing and the API server prunes it (a non-nullable field), so it is left out: the
    object written is then the object the server keeps."""
    if isinstance(raw, Mapping) and isinstance(out, Mapping):
        shaped = {}
        for k, v in raw.items():
            if k not in out:
                drift.append(f"{path}.{k}: not in the status models")
            elif not (in_list and v is None):
                shaped[k] = _shaped(v, out[k], f"{path}.{k}", drift, in_list)
        return shaped
    if isinstance(raw, list) and isinstance(out, list) and len(raw) == len(out):
        return [
            _shaped(a, b, f"{path}[{i}]", drift, True)
            for i, (a, b) in enumerate(zip(raw, out, strict=True))
        ]
    if raw != out:
        drift.append(f"{path}: {raw!r} is written as {out!r}")
    return out


def status_document(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The status to write, through :class:`InferenceCapacityStatus`: validated against the
    models the CRD is generated from and dumped by them, with the keys the caller set (a null
    deletes a stale key in the merge patch). A key the models do not have, or a value they would
    change, raises :class:`StatusContractError` naming it, so the CRD and what the operator
    writes cannot drift apart."""
    try:
        model = InferenceCapacityStatus.model_validate(dict(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise StatusContractError(f"status.{where}: {first['msg']}") from None
    out = model.model_dump(mode="json", by_alias=True)
    drift: list[str] = []
    shaped = _shaped(json.loads(json.dumps(dict(raw), default=str)), out, "status", drift)
    if drift:
        raise StatusContractError("; ".join(drift[:5]))
    result: dict[str, Any] = shaped
    return result
