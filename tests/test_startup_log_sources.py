"""The public startup logs of tests/data/vllm-startup-logs.jsonl as evidence (issue 21): every
entry names its public source by URL, the logs of vLLM >= 0.20 are counted by the version the log
itself shows (printed, or matched by the ``[file.py:N]`` line numbers of a release's sdist), and
the numbers transcribed into ``logged`` agree with the verbatim ``raw_lines`` as vLLM's own
parser (observe/startup_log.py) reads them."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from benchmarks.helpers import (
    POINT_SETUP,
    load_points,
    logged_version,
    predict_point,
    version_band,
)

from inference_capacity.observe.startup_log import parse

DATA = Path(__file__).resolve().parent / "data" / "vllm-startup-logs.jsonl"
ENTRIES: list[dict[str, Any]] = [
    json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()
]
BY_ID = {e["id"]: e for e in ENTRIES}
POINTS = {p.id: p for p in load_points(DATA)}
NEW = sorted(k for k, p in POINTS.items() if version_band(logged_version(p)) == ">=0.20")

#: the >= 0.20 logs the data held before issue 21's evidence pass (they carry no retrieval date)
BEFORE_ISSUE_21 = {
    "vllm-startup-047",
    "vllm-startup-049",
    "vllm-startup-051",
    "vllm-startup-057",
}
#: the >= 0.20 logs added by that pass: 16 (059-089 odd ids, vllm-startup-059 ... -089)
ADDED_BY_ISSUE_21 = {f"vllm-startup-{n:03d}" for n in range(59, 90, 2)}


def test_every_entry_names_its_public_source_by_url() -> None:
    for e in ENTRIES:
        url = e.get("source_url")
        assert isinstance(url, str) and re.fullmatch(r"https://\S+", url), e["id"]
        assert e["source"].strip(), e["id"]


def test_a_compile_cache_state_says_what_shows_it() -> None:
    """A log marked cold or warm (torch.compile's cache) says how that is known: its own lines
    (a graph compiled, or the saved AOT compile loaded, quoted in raw_lines) or its launch (a
    new container whose vLLM cache starts empty); nothing is marked by how its replay came
    out."""
    marked = [e for e in ENTRIES if "compile_cache" in e]
    assert marked
    for e in marked:
        assert e["compile_cache"] in ("cold", "warm"), e["id"]
        how = e["compile_cache_shown_by"]
        if how.startswith("the log"):
            said = "Compiling a graph" if e["compile_cache"] == "cold" else "Directly load AOT"
            assert any(said in line for line in e["raw_lines"]), e["id"]
        else:
            assert "new container" in how and "/root/.cache/vllm" in how, e["id"]
            run = [line for line in e["raw_lines"] if "docker run" in line]
            assert run and "-v /root/.cache/huggingface:" in run[0], e["id"]
            assert "/root/.cache/vllm" not in run[0] and "VLLM_CACHE_ROOT" not in run[0], e["id"]


def test_the_vllm_0_20_or_newer_logs_are_counted_by_their_own_version() -> None:
    # 4 before issue 21 + 16 added: the evidence may grow, never shrink below what was added
    assert len(ADDED_BY_ISSUE_21) == 16
    assert set(NEW) >= BEFORE_ISSUE_21 | ADDED_BY_ISSUE_21
    assert len(NEW) >= 20
    for pid in NEW:
        assert BY_ID[pid]["source_url"].startswith("https://"), pid
        if pid in ADDED_BY_ISSUE_21:
            assert BY_ID[pid].get("retrieved") == "2026-12-02", pid
        elif pid not in BEFORE_ISSUE_21:  # added later: a retrieval date of that pass or after
            assert re.fullmatch(r"2026-12-\d\d", BY_ID[pid].get("retrieved", "")), pid
            assert BY_ID[pid]["retrieved"] >= "2026-12-02", pid


def test_a_version_taken_from_line_numbers_is_backed_by_such_lines() -> None:
    matched = [e for e in ENTRIES if e.get("vllm_version_from_lines")]
    assert len(matched) >= 8
    for e in matched:
        assert e.get("vllm_version") is None, e["id"]  # a printed version wins
        lines = " ".join(e["raw_lines"])
        assert re.search(r"\[(gpu_worker|kv_cache_utils)\.py:\d+\]", lines), e["id"]


def test_the_version_bands() -> None:
    assert version_band("0.20.1rc1.dev16+g7a1eb8ac2") == ">=0.20"
    assert version_band("0.19.0") == "<0.20"
    assert version_band("0.6.4.post1") == "<0.20"
    assert version_band(None) == "unknown"
    assert version_band("nightly") == "unknown"


def _has_v1_lines(e: dict[str, Any]) -> bool:
    text = " ".join(e["raw_lines"])
    return "Available KV cache memory:" in text or "GPU KV cache size:" in text


RAW_NEW = [pid for pid in NEW if _has_v1_lines(BY_ID[pid])]


@pytest.mark.parametrize("pid", RAW_NEW)
def test_the_logged_numbers_are_the_ones_the_raw_lines_print(pid: str) -> None:
    e = BY_ID[pid]
    got = parse("\n".join(e["raw_lines"]) + "\n")
    lg = e["logged"]
    assert got.available_kv_cache_gib == lg["kv_cache_gib"]
    assert got.kv_cache_tokens == lg["kv_cache_tokens"]
    assert got.max_concurrency == lg["max_concurrency"]
    assert got.max_concurrency_len == lg["max_concurrency_len"]


def test_most_added_logs_carry_vllms_own_lines() -> None:
    # 085/087 are a PR's table of startup figures; every other added log has vLLM's lines
    assert ADDED_BY_ISSUE_21 - set(RAW_NEW) == {"vllm-startup-085", "vllm-startup-087"}


def test_a_predictor_refusal_is_a_reason_naming_its_term() -> None:
    # vllm-startup-089's setup (Qwen3-8B from the catalog) on a card the catalog cannot know:
    # the replay is refused as "device", with the predictor's own error, instead of crashing
    point = replace(POINTS["vllm-startup-089"], gpu="NO-SUCH-GPU 24GB", total_gpu_memory_gib=None)
    setup = replace(POINT_SETUP["vllm-startup-089"], gpu=None)
    pred, reason = predict_point(point, setup)
    assert pred is None and reason is not None
    assert reason.startswith("device: refused by the predictor (UnknownGpuError: ")
    assert "NO-SUCH-GPU" in reason
