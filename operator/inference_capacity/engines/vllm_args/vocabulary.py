"""The flag vocabulary: which flags the sizing sets, their aliases, which take no value.

vLLM's argparse accepts several spellings of one flag (``--max_model_len``, ``-tp``); every
name that leaves this package is canonical (:func:`normalise_flag`). The boolean table lets the
parser tell ``--trust-remote-code MODEL`` (a flag, then the positional model) from
``--flag value``. Values are compared and read as vLLM reads them (``0.90`` is ``0.9``,
``--max-model-len 32k`` is 32000).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Final

from ..vllm_flag_table import flag_table
from ..vllm_flags import DASH_O, human_readable_int

__all__ = [
    "HUMAN_READABLE_INT_FLAGS",
    "SIZING_FLAGS",
    "find_conflicts",
    "flag_int",
    "normalise_flag",
]


#: Flags the sizing policy sets on the Deployment.
SIZING_FLAGS: Final = (
    "gpu-memory-utilization",
    "max-num-seqs",
    "max-model-len",
    "max-num-batched-tokens",
    "kv-cache-dtype",
)

# Short spellings vLLM's argparse defines (``-tp``, ``-cc``; every release's, from the table
# generated from vLLM's source) plus the ``--tp``/``--pp`` spellings people write in manifests.
# ``-O`` is not an alias here: what it means depends on the release (vllm_flags.DASH_O).
_ALIASES: Final[Mapping[str, str]] = {
    **{k: v for k, v in flag_table().aliases().items() if k != DASH_O},
    "tp": "tensor-parallel-size",
    "pp": "pipeline-parallel-size",
    "dp": "data-parallel-size",
    "dcp": "decode-context-parallel-size",
    "q": "quantization",
}

# Flags that never take a separate value (argparse store_true/BooleanOptionalAction): those of
# the generated table (any release from 0.11) and the V0-era ones before it. Needed to tell
# ``--trust-remote-code MODEL`` (flag + positional) from ``--flag value``.
_BOOLEAN_FLAGS: Final = flag_table().boolean() | frozenset(
    {
        "allow-credentials",
        "async-scheduling",
        "disable-async-output-proc",
        "disable-cascade-attn",
        "disable-custom-all-reduce",
        "disable-fastapi-docs",
        "disable-frontend-multiprocessing",
        "disable-log-requests",
        "disable-log-stats",
        "disable-mm-preprocessor-cache",
        "disable-sliding-window",
        "disable-uvicorn-access-log",
        "enable-auto-tool-choice",
        "enable-chunked-prefill",
        "enable-dbo",
        "enable-eplb",
        "enable-expert-parallel",
        "enable-force-include-usage",
        "enable-log-outputs",
        "enable-log-requests",
        "enable-lora",
        "enable-lora-bias",
        "enable-prefix-caching",
        "enable-prompt-tokens-details",
        "enable-reasoning",
        "enable-request-id-headers",
        "enable-server-load-tracking",
        "enable-sleep-mode",
        "enable-ssl-refresh",
        "enable-tokenizer-info-endpoint",
        "enforce-eager",
        "engine-use-ray",
        "fully-sharded-loras",
        "headless",
        "return-tokens-as-token-ids",
        "skip-tokenizer-init",
        "trust-remote-code",
        "use-v2-block-manager",
        "worker-use-ray",
    }
)
_BOOL_WORDS: Final = frozenset({"true", "false", "True", "False"})


def normalise_flag(name: str) -> str:
    """Canonical vLLM flag name: no leading dashes, kebab-case, aliases resolved.

    ``-tp`` -> ``tensor-parallel-size``; ``--max_model_len`` -> ``max-model-len``.
    """
    bare = name.lstrip("-").replace("_", "-")
    return _ALIASES.get(bare, bare)


#: flags vLLM parses with ``human_readable_int`` (vllm/engine/arg_utils.py): ``32k``, ``1K``
HUMAN_READABLE_INT_FLAGS: Final = frozenset(
    {"max-model-len", "max-num-batched-tokens", "kv-cache-memory-bytes"}
)


def flag_int(name: str, text: str) -> int:
    """A running flag's integer value as vLLM reads it: ``human_readable_int`` for the flags
    vLLM parses with it (``--max-model-len 32k`` is 32000), ``int`` otherwise. ValueError when
    vLLM would refuse it."""
    if normalise_flag(name) in HUMAN_READABLE_INT_FLAGS:
        return human_readable_int(text)
    return int(text)


def find_conflicts(
    spec: Mapping[str, str | None],
    running: Mapping[str, str],
    unresolved: Collection[str] = (),
) -> dict[str, tuple[str, str]]:
    """Flags where the spec and the running flags disagree: ``{flag: (spec, running)}``.

    Numbers compare by value (``0.90`` == ``0.9``); flags in ``unresolved`` and flags
    that the spec leaves out (None) are not compared.
    """
    conflicts: dict[str, tuple[str, str]] = {}
    for key, wanted in spec.items():
        flag = normalise_flag(key)
        if wanted is None or flag in unresolved or flag not in running:
            continue
        if not _same_value(wanted, running[flag]):
            conflicts[flag] = (wanted, running[flag])
    return conflicts


def _same_value(left: str, right: str) -> bool:
    if left == right:
        return True
    try:
        a, b = float(left), float(right)
    except ValueError:
        return False
    return math.isfinite(a) and a == b
