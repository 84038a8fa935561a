"""Read and rewrite vLLM command-line flags inside a Kubernetes container spec."""

from .parse import (
    HUMAN_READABLE_INT_FLAGS,
    SIZING_FLAGS,
    VllmArgsError,
    find_conflicts,
    find_vllm_container,
    flag_int,
    hidden_flags,
    normalise_flag,
    parse_image_version,
    read_env,
    read_flags,
    rewrite_flags,
    runs_vllm,
    unresolved_flags,
)

__all__ = [
    "HUMAN_READABLE_INT_FLAGS",
    "SIZING_FLAGS",
    "VllmArgsError",
    "find_conflicts",
    "find_vllm_container",
    "flag_int",
    "hidden_flags",
    "normalise_flag",
    "parse_image_version",
    "read_env",
    "read_flags",
    "rewrite_flags",
    "runs_vllm",
    "unresolved_flags",
]
