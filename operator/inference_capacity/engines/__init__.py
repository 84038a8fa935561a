"""vLLM's rules: versions and budget eras, the flags the ledger models, and what vLLM allocates at
startup (``predict_startup``).

``engines.vllm_args`` (reading and rewriting a container's command line) is imported from its
module.
"""

from .versions import NEWEST_SUPPORTED, Era, Version, VersionError, era_of, parse_version
from .vllm import (
    EngineSettings,
    RankPrediction,
    ResolvedSettings,
    SettingsError,
    StartupPrediction,
    batch_defaults,
    predict_startup,
)
from .vllm_flags import SpeculativeConfig, Unsupported, classify, parse_speculative_config

__all__ = [
    "NEWEST_SUPPORTED",
    "EngineSettings",
    "Era",
    "RankPrediction",
    "ResolvedSettings",
    "SettingsError",
    "SpeculativeConfig",
    "StartupPrediction",
    "Unsupported",
    "Version",
    "VersionError",
    "batch_defaults",
    "classify",
    "era_of",
    "parse_speculative_config",
    "parse_version",
    "predict_startup",
]
