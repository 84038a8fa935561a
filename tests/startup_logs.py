"""The real vLLM startup logs of ``tests/data/vllm-startup-logs.jsonl``, by id, for the tests that
check a rule against one of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "vllm-startup-logs.jsonl"


def startup_log(pid: str) -> dict[str, Any]:
    """The data's entry of log ``pid`` (KeyError if there is none)."""
    for line in DATA.read_text().splitlines():
        d = json.loads(line)
        if d["id"] == pid:
            return d  # type: ignore[no-any-return]
    raise KeyError(pid)
