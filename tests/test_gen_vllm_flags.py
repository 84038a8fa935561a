"""tools/gen_vllm_flags.py reads a serve parser the way vLLM builds it: a small source tree in
vLLM's shape (serve.py → make_arg_parser → FrontendArgs fields and EngineArgs.add_cli_args with
get_kwargs(Config)["field"]) gives the flags, aliases, --no- forms, choices and defaults argparse
would. When the sdists are in the cache, the committed table is checked to be the generator's."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import gen_vllm_flags  # noqa: E402
import vllm_sdist  # noqa: E402

SERVE = """
from vllm.entrypoints.openai.cli_args import make_arg_parser

class ServeSubcommand:
    def subparser_init(self, subparsers):
        serve_parser = subparsers.add_parser("serve")
        serve_parser = make_arg_parser(serve_parser)
        return serve_parser
"""
CLI_ARGS = """
from dataclasses import dataclass
from typing import Literal, Optional

@dataclass
class FrontendArgs:
    host: Optional[str] = None
    port: int = 8000
    uvicorn_log_level: Literal["debug", "info"] = "info"
    disable_fastapi_docs: bool = False
    _private: int = 0

    @staticmethod
    def add_cli_args(parser):
        frontend_kwargs = get_kwargs(FrontendArgs)
        del frontend_kwargs["port"]
        group = parser.add_argument_group("Frontend")
        for key, value in frontend_kwargs.items():
            group.add_argument(f"--{key.replace('_', '-')}", **value)
        return parser

def make_arg_parser(parser):
    parser.add_argument("model_tag", nargs="?")
    parser.add_argument("--api-server-count", "-asc", type=int, default=1)
    parser = FrontendArgs.add_cli_args(parser)
    parser = AsyncEngineArgs.add_cli_args(parser)
    return parser
"""
ARG_UTILS = """
import argparse
from vllm.config import CacheConfig, ModelConfig

class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        model_kwargs = get_kwargs(ModelConfig)
        g = parser.add_argument_group("ModelConfig")
        g.add_argument("--dtype", **model_kwargs["dtype"])
        g.add_argument("--enforce-eager", **model_kwargs["enforce_eager"])
        g.add_argument("--quantization", "-q", **model_kwargs["quantization"])
        cache_kwargs = get_kwargs(CacheConfig)
        c = parser.add_argument_group("CacheConfig")
        c.add_argument("--swap-space", **{**cache_kwargs["swap_space"], "deprecated": True})
        c.add_argument("--enable-prefix-caching", **cache_kwargs["enable_prefix_caching"])
        parser.add_argument("--disable-log-stats", action="store_true")
        return parser

class AsyncEngineArgs(EngineArgs):
    @staticmethod
    def add_cli_args(parser):
        parser = EngineArgs.add_cli_args(parser)
        parser.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction)
        return parser
"""
CONFIG = """
from dataclasses import dataclass, field
from typing import Literal, Optional

ModelDType = Literal["auto", "half", "bfloat16"]

@dataclass
class ModelConfig:
    dtype: ModelDType = "auto"
    enforce_eager: bool = False
    quantization: Optional[str] = None

@dataclass
class CacheConfig:
    swap_space: float = 4
    enable_prefix_caching: Optional[bool] = field(default=None)
"""
PARSER = """
class FlexibleArgumentParser:
    def parse_args(self, args):
        for arg in args:
            if arg.startswith("-O") and arg != "-O":
                processed_args += ["--optimization-level", arg[2:]]
"""


def _sources() -> dict[str, str]:
    return {
        "vllm/entrypoints/cli/serve.py": SERVE,
        "vllm/entrypoints/openai/cli_args.py": CLI_ARGS,
        "vllm/engine/arg_utils.py": ARG_UTILS,
        "vllm/config/__init__.py": CONFIG,
        "vllm/utils/argparse_utils.py": PARSER,
    }


def test_the_walk_reads_the_serve_parser_as_argparse_would() -> None:
    flags = gen_vllm_flags.serve_flags({k: textwrap.dedent(v) for k, v in _sources().items()})
    assert sorted(flags) == [
        "api-server-count",
        "disable-fastapi-docs",
        "disable-log-stats",
        "dtype",
        "enable-log-requests",
        "enable-prefix-caching",
        "enforce-eager",
        "host",
        "quantization",
        "swap-space",
        "uvicorn-log-level",
    ]  # not "port" (deleted), "_private", or the positional model tag
    assert flags["api-server-count"] == {"aliases": ["-asc"], "kind": "value", "default": 1}
    assert flags["quantization"]["aliases"] == ["-q"]
    # a bool field is a BooleanOptionalAction (get_kwargs): --x and --no-x
    assert flags["enforce-eager"] == {
        "aliases": ["--no-enforce-eager"],
        "kind": "bool",
        "default": False,
    }
    assert flags["enable-prefix-caching"]["aliases"] == ["--no-enable-prefix-caching"]
    # store_true has no --no- form
    assert flags["disable-log-stats"] == {"aliases": [], "kind": "bool"}
    assert flags["dtype"]["choices"] == ["auto", "half", "bfloat16"]
    assert flags["uvicorn-log-level"]["choices"] == ["debug", "info"]
    assert flags["swap-space"] == {"aliases": [], "kind": "value", "default": 4, "deprecated": True}
    assert gen_vllm_flags.dash_o(_sources()) == "optimization-level"


def test_the_committed_table_is_the_generators() -> None:
    """Run only where every release of the table is in the sdist cache (no network here)."""
    table = json.loads(
        (ROOT / "operator/inference_capacity/engines/data/vllm_flags.json").read_text()
    )
    versions = table["versions"]
    if not all((vllm_sdist.CACHE / f"vllm-{v}.tar.gz").exists() for v in versions):
        pytest.skip(f"the vLLM sdists are not in {vllm_sdist.CACHE} (tools/vllm_sdist.py)")
    # two releases across the range, against the table's runs for them
    for v in (versions[0], versions[-1]):
        got = gen_vllm_flags.serve_flags(vllm_sdist.read_sources(v, gen_vllm_flags.SOURCES))
        key = gen_vllm_flags._key(v)
        want = {
            name: {k: x for k, x in run.items() if k not in ("from", "to")}
            for name, runs in table["flags"].items()
            for run in runs
            if gen_vllm_flags._key(run["from"]) <= key <= gen_vllm_flags._key(run["to"])
        }
        assert got == want, v
