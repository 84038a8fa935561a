"""Read vLLM's own startup lines: what it measured at startup, and why a start failed.

A pure parser (no Kubernetes, no I/O): the controller reads the bounded head of a pod's log
through ``pods/log`` and hands the bytes here. The formats are vLLM's, per version:

* ``Model loading took X GiB memory and T seconds`` (V1, 0.11-0.33:
  ``v1/worker/gpu_model_runner.py::load_model``; "Model loading took X GiB and T seconds"
  before 0.12) and ``Loading model weights took X GB`` (V0 ``worker/model_runner.py``);
* ``Memory profiling takes T seconds. Total non KV cache memory: XGiB; torch peak memory
  increase: XGiB; non-torch forward increase memory: XGiB; weights memory: XGiB.``
  (``utils/mem_utils.py::MemoryProfilingResult.__repr__``, DEBUG, 0.11-0.33);
* ``Estimated CUDA graph memory: X GiB total`` (``gpu_model_runner.py``, 0.18+) and
  ``CUDA graph pool memory: X GiB (actual), Y GiB (estimated), ...`` (``v1/worker/gpu_worker.py
  ::compile_or_warm_up_model``, 0.18+); ``Graph capturing finished in T secs, took X GiB``
  (``gpu_model_runner.py::capture_model`` and V0);
* ``Available KV cache memory: X GiB`` (``gpu_worker.py::determine_available_memory``);
* the worker's summary ``Free memory on device (F/T GiB) on startup. Desired GPU memory
  utilization is (U, R GiB). Actual usage is W GiB for weight, A GiB for peak activation, N GiB
  for non-torch memory, and C GiB for CUDAGraph memory. ... Current kv cache memory in use is K
  GiB.`` (``gpu_worker.py::compile_or_warm_up_model``: DEBUG 0.19-0.22, INFO in 0.26.0; from
  0.27 ``X GiB for consumed memory (weights + non-torch)`` replaces the first and third terms);
* ``GPU KV cache size: N tokens`` and ``Maximum concurrency for L tokens per request: Cx``
  (``v1/core/kv_cache_utils.py::_report_kv_cache_config``; thousands separated by commas from
  0.10), one line ``GPU KV cache size: N tokens, Maximum concurrency for L tokens per request:
  Cx`` from 0.28 (``update_kv_cache_capacity``); V0: ``# GPU blocks: N, # CPU blocks: M``;
* the version: the banner ``version X`` (``entrypoints/utils.py``, 0.11+), ``vLLM API server
  version X`` and ``Initializing a V1 LLM engine (vX) with config``;
* failures: ``No available memory for the cache blocks`` and ``To serve at least one request
  with the model's max seq len (L), (X GiB KV cache is needed, ...)`` (both
  ``kv_cache_utils.py::check_enough_kv_cache_memory``), ``The model's max seq len (L) is larger
  than the maximum number of tokens that can be stored in KV cache (N)`` (V0), ``Free memory on
  device (X/Y GiB) on startup is less than desired GPU memory utilization (U, Z GiB)``
  (``v1/worker/utils.py::request_memory``, the startup free-memory check) and ``CUDA out of memory``
  (PyTorch's ``OutOfMemoryError``).

Hostile-safe: only the first :data:`LIMIT_BYTES` are read; a line longer than
:data:`MAX_LINE_BYTES`, or with control bytes (binary), is skipped unread; a number is matched
by a bounded pattern and must lie within physical bounds (:data:`BOUNDS`). A line that has
vLLM's format but a number outside them rejects the whole log: nothing is reported from it but
the reason (a log that lies about one number is not believed about the others).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final, Literal

#: bytes of a log read at most (the controller asks the API server for no more: ``limitBytes``)
LIMIT_BYTES: Final = 256 * 1024
#: a longer line is skipped (vLLM's longest startup lines, the engine config, are ~4 KiB)
MAX_LINE_BYTES: Final = 16 * 1024

FailureKind = Literal[
    "NoKvCacheMemory", "MaxSeqLenTooLong", "FreeMemoryCheck", "CudaOutOfMemory", "OOMKilled"
]

#: physical bounds of what vLLM can print: a GPU of at most 4 TiB, a pool of at most 10^10
#: tokens, a max-model-len of at most 10^8 tokens. A number outside them is not from vLLM.
BOUNDS: Final[dict[str, tuple[float, float]]] = {
    "weights_gib": (0.0, 4096.0),
    "activation_peak_gib": (0.0, 4096.0),
    "consumed_gib": (0.0, 4096.0),
    "non_torch_gib": (-4096.0, 4096.0),  # an increase: vLLM prints negative ones
    "non_kv_gib": (-4096.0, 4096.0),
    "cuda_graph_gib": (0.0, 4096.0),
    "cuda_graph_estimated_gib": (0.0, 4096.0),
    "available_kv_cache_gib": (-4096.0, 4096.0),  # negative: the start fails (vLLM prints it)
    "kv_cache_tokens": (0.0, 1e10),
    "num_gpu_blocks": (0.0, 1e10),
    "max_concurrency": (0.0, 1e8),
    "max_concurrency_len": (1.0, 1e8),
    "max_model_len": (1.0, 1e8),
    "needed_gib": (0.0, 1e6),
    "free_gib": (0.0, 4096.0),
    "total_gib": (0.0, 4096.0),
    "utilization": (0.0, 1.0),
}

_NUM = r"-?\d{1,15}(?:\.\d{1,12})?"  # a GiB figure as vLLM formats it (bounded: no ReDoS)
_INT = r"(?:\d{1,3}(?:,\d{3}){1,5}|\d{1,15})"  # "1,044,688" (0.10+) or "1044688"
_ANSI = re.compile(r"\x1b\[[0-9;]{0,16}m")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
#: vLLM's log prefix: ``(EngineCore pid=243) INFO 04-22 00:26:42 [v1/worker/x.py:436] `` (0.11+,
#: the file in brackets) or ``INFO 12-06 14:08:00 worker.py:232] `` (V0), the date and time
#: optional (a logging config or a transcript without them: ``INFO [gpu_worker.py:563] ``);
#: optional for a line that starts with the message itself (a traceback's last line)
_PREFIX = re.compile(
    r"^(?:\d{4}-\d\d-\d\dT[\d:.]{8,20}Z? )?"  # kubectl --timestamps
    r"(?:\([\w .=-]{1,64}\) )?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?:\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})? )?"
    r"(?:\[[\w./-]{1,200}:\d{1,6}\]|[\w./-]{1,200}:\d{1,6}\]) )?"
)


@dataclass(frozen=True)
class Failure:
    """Why vLLM did not start, as its own error line says."""

    kind: FailureKind
    line: str
    #: GiB vLLM said it needed and had (MaxSeqLenTooLong), or free and requested (FreeMemory)
    needed_gib: float | None = None
    available_gib: float | None = None
    max_model_len: int | None = None
    #: vLLM's "estimated maximum model length" (MaxSeqLenTooLong, 0.8+)
    estimated_max_model_len: int | None = None


@dataclass(frozen=True)
class StartupLog:
    """What one vLLM startup log says. Per term the limiting rank: the smallest pool, tokens and
    concurrency, the largest weights, activation, non-torch and graphs (each rank prints its
    own; vLLM sizes every rank to the smallest pool)."""

    vllm_version: str | None = None
    weights_gib: float | None = None
    activation_peak_gib: float | None = None
    #: vLLM 0.27+'s "consumed memory (weights + non-torch)": what stays allocated after the
    #: profile (engines/vllm.py::summary_line_split)
    consumed_gib: float | None = None
    non_torch_gib: float | None = None
    cuda_graph_gib: float | None = None  # actual (the pool captured)
    cuda_graph_estimated_gib: float | None = None
    available_kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    max_concurrency: float | None = None
    max_concurrency_len: int | None = None
    failure: Failure | None = None
    #: non-empty: the log is not believed; every number above is None
    rejected: str | None = None
    bytes_read: int = 0
    truncated: bool = False
    lines_skipped: int = 0
    matched: int = 0
    #: the raw values per term, every rank's (for the tests and the parser's own min/max)
    seen: dict[str, tuple[float, ...]] = field(default_factory=dict, repr=False)

    @property
    def has_numbers(self) -> bool:
        return self.rejected is None and self.matched > 0

    @property
    def started(self) -> bool:
        """vLLM printed its pool and no startup error."""
        return self.failure is None and self.kv_cache_tokens is not None


class _Absurd(ValueError):
    pass


def _num(text: str, key: str) -> float:
    value = float(text.replace(",", ""))
    lo, hi = BOUNDS[key]
    if not lo <= value <= hi:
        raise _Absurd(f"{key}={text} outside [{lo:g}, {hi:g}]")
    return value


#: the worker's startup summary (both forms): free/total and utilization/requested, then the
#: terms; after them the KV pool it holds ("Current kv cache memory in use", the available KV)
_SUMMARY_HEAD = (
    rf"^Free memory on device \({_NUM}/{_NUM} GiB\) on startup\. Desired GPU memory "
    rf"utilization is \({_NUM}, {_NUM} GiB\)\. Actual usage is "
)
_SUMMARY_TAIL = rf"[^\n]{{0,600}}?Current kv cache memory in use is ({_NUM}) GiB"

#: (pattern, the terms its groups fill, in order)
_Rule = tuple[re.Pattern[str], tuple[str, ...]]
_RULES: tuple[_Rule, ...] = tuple(
    (re.compile(p), keys)
    for p, keys in (
        (rf"^Model loading took ({_NUM}) GiB(?: memory)? and [\d.]{{1,20}} s", ("weights_gib",)),
        (rf"^Loading model weights took ({_NUM}) GB", ("weights_gib",)),
        (
            rf"^Memory profiling takes [\d.]{{1,20}} seconds\. Total non KV cache memory: "
            rf"({_NUM}) ?GiB; torch peak memory increase: ({_NUM}) ?GiB; non-torch forward "
            rf"increase memory: ({_NUM}) ?GiB; weights memory: ({_NUM}) ?GiB",
            ("non_kv_gib", "activation_peak_gib", "non_torch_gib", "weights_gib"),
        ),
        (rf"^Estimated CUDA graph memory: ({_NUM}) GiB total", ("cuda_graph_estimated_gib",)),
        (
            rf"^CUDA graph pool memory: ({_NUM}) GiB \(actual\), ({_NUM}) GiB \(estimated\)",
            ("cuda_graph_gib", "cuda_graph_estimated_gib"),
        ),
        (
            rf"^Graph capturing finished in [\d.]{{1,20}} secs?, took ({_NUM}) GiB",
            ("cuda_graph_gib",),
        ),
        (rf"^Available KV cache memory: ({_NUM}) GiB", ("available_kv_cache_gib",)),
        # the worker's summary after capturing its graphs (gpu_worker.py::
        # compile_or_warm_up_model, DEBUG through 0.22, INFO by 0.26): every term at once
        (
            _SUMMARY_HEAD + rf"({_NUM}) GiB for weight, ({_NUM}) GiB for peak activation, "
            rf"({_NUM}) GiB for non-torch memory, and ({_NUM}) GiB for CUDAGraph memory\."
            + _SUMMARY_TAIL,
            (
                "weights_gib",
                "activation_peak_gib",
                "non_torch_gib",
                "cuda_graph_gib",
                "available_kv_cache_gib",
            ),
        ),
        # its 0.27+ form: weights and non-torch as one "consumed" figure, and a peak that holds
        # the CUDA-graph estimate the budget subtracts (compared as the prediction's printed
        # terms: engines/vllm.py::summary_line_split)
        (
            _SUMMARY_HEAD + rf"({_NUM}) GiB for consumed memory \(weights \+ non-torch\), "
            rf"({_NUM}) GiB for peak activation, and ({_NUM}) GiB for CUDAGraph memory\."
            + _SUMMARY_TAIL,
            ("consumed_gib", "activation_peak_gib", "cuda_graph_gib", "available_kv_cache_gib"),
        ),
        # 0.28+ prints the two capacity lines as one (v1/core/kv_cache_utils.py::
        # update_kv_cache_capacity, 0.28.0–0.33.0): "GPU KV cache size: %s tokens, Maximum
        # concurrency for %s tokens per request: %.2fx"
        (
            rf"^GPU KV cache size: ({_INT}) tokens, Maximum concurrency for ({_INT}) tokens per "
            rf"request: ({_NUM})x",
            ("kv_cache_tokens", "max_concurrency_len", "max_concurrency"),
        ),
        (rf"^GPU KV cache size: ({_INT}) tokens", ("kv_cache_tokens",)),
        (
            rf"^Maximum concurrency for ({_INT}) tokens per request: ({_NUM})x",
            ("max_concurrency_len", "max_concurrency"),
        ),
        (rf"^#? ?GPU blocks: ({_INT}), # CPU blocks: {_INT}", ("num_gpu_blocks",)),
        (
            rf"^Engine \d{{1,4}}: vllm cache_config_info with initialization after "
            rf"num_gpu_blocks is: ({_INT})",
            ("num_gpu_blocks",),
        ),
        # V0 (0.6.4-0.10) profiling summaries
        (
            rf"^Memory profiling results: [\w=.]{{0,40}}(?: [\w=.]{{1,60}}){{0,8}} "
            rf"non_torch_memory=({_NUM})GiB kv_cache_size=({_NUM})GiB",
            ("non_torch_gib", "available_kv_cache_gib"),
        ),
        (rf"^model weights take\s{{1,40}}({_NUM}) ?GiB", ("weights_gib",)),
        (rf"^non_torch_memory\s{{1,40}}({_NUM}) ?GiB", ("non_torch_gib",)),
        (rf"^PyTorch activation peak memory\s{{1,40}}({_NUM}) ?GiB", ("activation_peak_gib",)),
        (rf"^available_kv_cache_memory\s{{1,40}}({_NUM}) ?GiB", ("available_kv_cache_gib",)),
    )
)

_MIN_TERMS = frozenset(
    {"available_kv_cache_gib", "kv_cache_tokens", "num_gpu_blocks", "max_concurrency"}
)

_VERSION = re.compile(
    r"(?:^vLLM API server version |^Initializing an? (?:V1 )?LLM engine \(v|"
    r"[\u2580-\u259f ]{3,80}version )(\d{1,2}\.\d{1,3}(?:\.\d{1,4})?(?:[.+\w-]{0,40}))"
)

_ERR = r"^(?:[\w.]{1,80}Error: )?"
_FAILURES: tuple[tuple[re.Pattern[str], FailureKind, tuple[str, ...]], ...] = (
    (re.compile(_ERR + r"No available memory for the cache blocks"), "NoKvCacheMemory", ()),
    (
        re.compile(
            _ERR + rf"To serve at least one request with the models?'s max seq len \(({_INT})\), "
            rf"\(({_NUM}) GiB KV cache is needed, which is larger than the available KV cache "
            rf"memory \(({_NUM}) GiB\)\.(?: Based on the available memory, the estimated maximum "
            rf"model length is ({_INT})\.)?"
        ),
        "MaxSeqLenTooLong",
        ("max_model_len", "needed_gib", "available_gib", "estimated_max_model_len"),
    ),
    (
        re.compile(
            _ERR + rf"The model's max seq len \(({_INT})\) is larger than the maximum number of "
            rf"tokens that can be stored in KV cache \(({_INT})\)"
        ),
        "MaxSeqLenTooLong",
        ("max_model_len", "kv_cache_tokens"),
    ),
    (
        re.compile(
            _ERR + rf"Free memory on device (?:\S{{1,40}} )?\(({_NUM})/({_NUM}) GiB\) on startup "
            rf"is less than desired GPU memory utilization \(({_NUM}), ({_NUM}) GiB\)"
        ),
        "FreeMemoryCheck",
        ("available_gib", "total_gib", "utilization", "needed_gib"),
    ),
    (
        re.compile(_ERR + rf".{{0,200}}CUDA out of memory\.(?: Tried to allocate ({_NUM}) GiB)?"),
        "CudaOutOfMemory",
        ("needed_gib",),
    ),
)

_FAILURE_BOUND = {
    "max_model_len": "max_model_len",
    "needed_gib": "needed_gib",
    "available_gib": "free_gib",
    "estimated_max_model_len": "max_model_len",
    "kv_cache_tokens": "kv_cache_tokens",
    "total_gib": "total_gib",
    "utilization": "utilization",
}


def _message(line: str) -> str:
    """The line without vLLM's prefix (and ANSI colours)."""
    line = _ANSI.sub("", line).strip()
    m = _PREFIX.match(line)
    return line[m.end() :] if m else line


def _failure(msg: str) -> Failure | None:
    for pattern, kind, keys in _FAILURES:
        m = pattern.search(msg)
        if m is None:
            continue
        vals: dict[str, float] = {}
        for key, text in zip(keys, m.groups(), strict=True):
            if text is not None:
                vals[key] = _num(text, _FAILURE_BOUND[key])
        mml = vals.get("max_model_len")
        est = vals.get("estimated_max_model_len")
        return Failure(
            kind=kind,
            line=msg[:300],
            needed_gib=vals.get("needed_gib"),
            available_gib=vals.get("available_gib"),
            max_model_len=None if mml is None else int(mml),
            estimated_max_model_len=None if est is None else int(est),
        )
    return None


def _lines(data: bytes) -> tuple[list[str], int]:
    """The decodable lines of ``data`` (split on newlines; a line too long or with control
    bytes is skipped) and how many were skipped."""
    out: list[str] = []
    skipped = 0
    for raw in data.split(b"\n"):
        if len(raw) > MAX_LINE_BYTES:
            skipped += 1
            continue
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if "\ufffd" in line or _CONTROL.search(_ANSI.sub("", line)):
            skipped += 1
            continue
        out.append(line)
    return out, skipped


def parse(data: bytes | str, limit: int = LIMIT_BYTES) -> StartupLog:
    """Parse the first ``limit`` bytes of a vLLM log."""
    raw = data.encode() if isinstance(data, str) else data
    truncated = len(raw) > limit
    head = raw[:limit]
    if truncated and b"\n" in head:
        head = head[: head.rfind(b"\n")]  # the last, cut line is not read
    lines, skipped = _lines(head)
    seen: dict[str, list[float]] = {}
    version: str | None = None
    failure: Failure | None = None
    matched = 0
    try:
        for line in lines:
            msg = _message(line)
            if not msg:
                continue
            if version is None and (v := _VERSION.search(msg)) is not None:
                version = v.group(1)
            f = _failure(msg)
            if f is not None:
                matched += 1
                failure = failure or f
                continue
            for pattern, keys in _RULES:
                m = pattern.match(msg)
                if m is None:
                    continue
                matched += 1
                for key, text in zip(keys, m.groups(), strict=True):
                    seen.setdefault(key, []).append(_num(text, key))
                break
    except _Absurd as exc:
        return StartupLog(
            rejected=f"a line in vLLM's format has a number no vLLM prints ({exc})",
            bytes_read=len(head),
            truncated=truncated,
            lines_skipped=skipped,
        )
    out = StartupLog(
        vllm_version=version,
        failure=failure,
        bytes_read=len(head),
        truncated=truncated,
        lines_skipped=skipped,
        matched=matched,
        seen={k: tuple(v) for k, v in seen.items()},
    )
    return _fold(out, seen)


def _fold(out: StartupLog, seen: dict[str, list[float]]) -> StartupLog:
    def pick(key: str) -> float | None:
        vals = seen.get(key)
        if not vals:
            return None
        return min(vals) if key in _MIN_TERMS else max(vals)

    def as_int(x: float | None) -> int | None:
        return None if x is None else int(x)

    length = pick("max_concurrency_len")
    failure = out.failure
    if failure is None and (pool := pick("available_kv_cache_gib")) is not None and pool <= 0:
        # vLLM 0.11+ raises right after printing a non-positive pool (check_enough_kv_cache_memory)
        failure = Failure("NoKvCacheMemory", f"Available KV cache memory: {pool:g} GiB")
    return replace(
        out,
        weights_gib=pick("weights_gib"),
        activation_peak_gib=pick("activation_peak_gib"),
        consumed_gib=pick("consumed_gib"),
        non_torch_gib=pick("non_torch_gib"),
        cuda_graph_gib=pick("cuda_graph_gib"),
        cuda_graph_estimated_gib=pick("cuda_graph_estimated_gib"),
        available_kv_cache_gib=pick("available_kv_cache_gib"),
        kv_cache_tokens=as_int(pick("kv_cache_tokens")),
        num_gpu_blocks=as_int(pick("num_gpu_blocks")),
        max_concurrency=pick("max_concurrency"),
        max_concurrency_len=as_int(length),
        failure=failure,
    )


#: the terms compared with the prediction: (name in status, parsed attribute, predicted keys of
#: ``StartupPrediction.to_json``, the first the prediction has: a vLLM 0.27+ prediction carries
#: the peak as that release prints it, ``peak_activation_printed_gib``)
TERMS: Final = (
    ("weights", "weights_gib", ("weights_gib",)),
    (
        "activationPeak",
        "activation_peak_gib",
        ("peak_activation_printed_gib", "activation_peak_gib"),
    ),
    ("consumedMemory", "consumed_gib", ("consumed_gib",)),
    ("nonTorch", "non_torch_gib", ("non_torch_gib",)),
    ("cudaGraph", "cuda_graph_estimated_gib", ("cuda_graph_gib",)),
    ("availableKvCache", "available_kv_cache_gib", ("available_kv_cache_gib",)),
    ("kvCacheTokens", "kv_cache_tokens", ("kv_cache_tokens",)),
    ("maxConcurrency", "max_concurrency", ("max_concurrency",)),
)


def prediction_errors(log: StartupLog, predicted: dict[str, object]) -> dict[str, float]:
    """(predicted - observed) / observed x 100 per term both have (a zero observation skipped)."""
    out: dict[str, float] = {}
    for name, attr, keys in TERMS:
        obs = getattr(log, attr)
        pred = next((predicted[k] for k in keys if k in predicted), None)
        if obs is None or not isinstance(pred, int | float) or obs == 0:
            continue
        out[name] = round((float(pred) - float(obs)) / abs(float(obs)) * 100.0, 3)
    return out


Parser = Callable[[bytes], StartupLog]
