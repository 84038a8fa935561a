"""The what-if page in a real browser: Debian's ``chromium``, driven by Playwright (from PyPI),
against the real ``inference-capacity ui`` process. The page's numbers are checked against
``inference-capacity plan ... -o json`` run as its own process for the same inputs; a screenshot
of each main state is written under ``tmp/artifacts/ui/`` (``UI_ARTIFACTS`` overrides), with the
page's load times in ``timings.json``.

Needs ``/usr/bin/chromium`` (``apt-get install -y chromium``; ``.ci/run`` installs it). Playwright's
own browser downloads are not used.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .uiserver import plan_cli, ui_server

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("UI_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("UI_ARTIFACTS", ROOT / "tmp" / "artifacts" / "ui"))
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if not Path(CHROMIUM).exists():
    pytest.skip(
        f"no Chromium at {CHROMIUM}: apt-get install -y chromium (CI's .ci/run installs it)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]'")

ISSUE_QUERY = "model=meta-llama/Llama-3.1-8B-Instruct&gpu=H100-SXM-80GB&tp=2&max-model-len=8192"
ISSUE_ARGS = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100-SXM-80GB",
              "--tp", "2", "--max-model-len", "8192"]  # fmt: skip


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with ui_server() as url:
        yield url


@pytest.fixture(scope="module")
def browser_context() -> Iterator[Any]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="ui-chromium-")
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            # Playwright's wait_for_function evaluates strings; the page's own CSP forbids that
            bypass_csp=True,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            yield ctx
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(browser_context: Any) -> Iterator[Any]:
    pg = browser_context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    # a 400 from /api/plan is the CLI's error, shown on the page: the browser logs it too
    pg.on(
        "console",
        lambda m: m.type == "error" and "status of 400" not in m.text and errors.append(m.text),
    )
    yield pg
    pg.close()
    assert not errors, errors


def timing(name: str, seconds: float) -> None:
    path = ARTIFACTS / "timings.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = round(seconds, 3)
    path.write_text(json.dumps(data, indent=2))


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def wait_ready(page: Any, query_has: str | None = None) -> None:
    cond = "document.body.dataset.status === 'ready' || document.body.dataset.status === 'error'"
    if query_has is not None:
        cond = f"({cond}) && (document.body.dataset.query || '').includes({json.dumps(query_has)})"
    page.wait_for_function(cond, timeout=120_000)


def cli_json(*args: str) -> dict[str, Any]:
    r = plan_cli(*args, "-o", "json")
    assert r.stdout.strip(), r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def page_numbers(page: Any) -> dict[str, Any]:
    pairs = page.eval_on_selector_all(
        "#summary dd[data-path]",
        "ds => ds.map(d => [d.dataset.path, d.dataset.value, d.textContent])",
    )
    return {path: (json.loads(value), text) for path, value, text in pairs}


def get(obj: dict[str, Any], path: str) -> Any:
    for k in path.split("."):
        obj = obj[k]
    return obj


def assert_page_is(page: Any, plan: dict[str, Any]) -> None:
    """The numbers on the page are the JSON's: summary, ledger segments, startup lines, fits."""
    nums = page_numbers(page)
    assert {"kv.token_capacity", "recommendation.maxNumSeqs", "recommendation.replicas"} <= set(
        nums
    )
    for path, (value, text) in nums.items():
        assert value == get(plan, path), path
        if isinstance(value, int):
            assert int(text.replace(",", "")) == value, path
    for rank in plan["ledger"]["ranks"]:
        segs = page.eval_on_selector_all(
            f'svg.ledger[data-rank="{rank["rank"]}"] rect.seg',
            "rs => rs.map(r => [r.dataset.name, Number(r.dataset.bytes)])",
        )
        assert segs == [[i["name"], i["bytes"]] for i in rank["items"] if i["bytes"] > 0]
    vs = plan["vllm_startup"]
    startup = page.text_content("#startup")
    assert f"GPU KV cache size: {vs['kv_cache_tokens']:,} tokens" in startup
    assert f"Available KV cache memory: {vs['available_kv_cache_gib']:.2f} GiB" in startup
    fits = page.text_content("#fits")
    assert fits.startswith("Fits" if plan["fits"] else "Does not fit") and plan["reason"] in fits


def test_page_opens_a_query_string_as_plan_o_json(page: Any, base: str) -> None:
    t0 = time.monotonic()
    page.goto(f"{base}/?{ISSUE_QUERY}")
    wait_ready(page)
    timing("load_issue_query_s", time.monotonic() - t0)
    plan = cli_json(*ISSUE_ARGS)
    assert_page_is(page, plan)
    # the form shows the state, the link reproduces it, the command is the CLI's
    assert page.input_value("#f-model") == "meta-llama/Llama-3.1-8B-Instruct"
    assert page.input_value("#f-gpu") == "H100-SXM-80GB"
    assert page.input_value("#f-tp") == "2"
    assert page.get_attribute("#permalink", "href") == "/?" + urllib.parse.urlencode(
        urllib.parse.parse_qsl(ISSUE_QUERY)
    )
    assert (
        page.text_content("#cli") == "inference-capacity plan " + " ".join(ISSUE_ARGS) + " -o json"
    )
    shot(page, "01-issue-query")


def test_changing_the_gpu_updates_ledger_and_numbers(page: Any, base: str) -> None:
    page.goto(f"{base}/?{ISSUE_QUERY}")
    wait_ready(page)
    before = page.eval_on_selector_all("svg.ledger", "s => s.map(x => x.dataset.device)")
    page.select_option("#f-gpu", "A100-SXM-40GB")
    wait_ready(page, "gpu=A100-SXM-40GB")
    args = [a if a != "H100-SXM-80GB" else "A100-SXM-40GB" for a in ISSUE_ARGS]
    plan = cli_json(*args)
    assert_page_is(page, plan)
    after = page.eval_on_selector_all("svg.ledger", "s => s.map(x => x.dataset.device)")
    assert after != before and after[0] == str(plan["ledger"]["deviceBytes"])
    assert "gpu=A100-SXM-40GB" in page.url  # the address is the state
    shot(page, "02-gpu-changed")


def test_overcommit_is_visible(page: Any, base: str) -> None:
    q = "model=meta-llama/Llama-3.1-70B-Instruct&gpu=H100-SXM-80GB&max-model-len=8192"
    page.goto(f"{base}/?{q}")
    wait_ready(page)
    plan = cli_json("--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "H100-SXM-80GB",
                    "--max-model-len", "8192")  # fmt: skip
    assert not plan["fits"]
    assert_page_is(page, plan)
    unalloc = next(
        i["bytes"] for i in plan["ledger"]["ranks"][0]["items"] if i["name"] == "unallocated"
    )
    assert unalloc < 0
    # over-commit = what the items ask beyond the device = -unallocated
    assert int(page.get_attribute("svg.ledger", "data-over")) == -unalloc
    assert page.is_visible("svg.ledger rect.over")
    assert f"over-committed by {-unalloc:,} bytes" in page.text_content("#ledger")
    assert "vLLM will not start" in page.text_content("#starts")
    shot(page, "03-overcommit")


def test_workload_curve_and_a_lever_click(page: Any, base: str) -> None:
    page.goto(f"{base}/?{ISSUE_QUERY}")
    wait_ready(page)
    # typed as a user types them, field by field
    for field, value in [("#f-prompt-tokens-0", "500"), ("#f-prompt-tokens-1", "2000"),
                         ("#f-prompt-tokens-2", "4000"), ("#f-output-tokens-0", "200"),
                         ("#f-output-tokens-1", "800"), ("#f-output-tokens-2", "1500"),
                         ("#f-peak-concurrency", "300"), ("#f-itl-target-ms", "45")]:  # fmt: skip
        page.fill(field, value)
    page.fill("#f-gpu-price", "H100-SXM-80GB=3\nA100-SXM-80GB=1.8")
    wait_ready(page, "gpu-price=A100-SXM-80GB")
    args = [*ISSUE_ARGS, "--prompt-tokens", "500,2000,4000", "--output-tokens", "200,800,1500",
            "--peak-concurrency", "300", "--itl-target-ms", "45",
            "--gpu-price", "H100-SXM-80GB=3", "--gpu-price", "A100-SXM-80GB=1.8"]  # fmt: skip
    plan = cli_json(*args)
    assert_page_is(page, plan)
    curve = plan["latency"]["curve"]
    for key in ["itl_ms_p50", "itl_ms_p95", "output_tokens_per_s", "preemption_probability"]:
        pts = page.eval_on_selector_all(
            f'#curve circle[data-key="{key}"]',
            "cs => cs.map(c => [Number(c.dataset.n), Number(c.dataset.value)])",
        )
        assert pts == [[p["max_num_seqs"], p[key]] for p in curve if p.get(key) is not None], key
    chosen = page.eval_on_selector_all(
        "#curve line.chosen", "ls => ls.map(l => Number(l.dataset.n))"
    )
    assert chosen and set(chosen) == {plan["sizing"]["max_num_seqs"]}
    rows = page.eval_on_selector_all("#options-table tbody tr", "rs => rs.length")
    assert rows == len(plan["options"]) > 0
    shot(page, "04-workload")
    # a lever is a one-click what-if: fp8 KV cache
    lever = next(lv for lv in plan["levers"] if lv["name"] == "fp8-kv-cache")
    page.click('button[data-lever="fp8-kv-cache"]')
    wait_ready(page, "kv-cache-dtype=fp8")
    after = cli_json(*args, "--kv-cache-dtype", "fp8")
    assert_page_is(page, after)
    assert lever["change"] == "--kv-cache-dtype fp8"
    assert page.input_value("#f-kv-cache-dtype") == "fp8"
    shot(page, "05-lever-fp8")


def test_error_is_the_cli_line(page: Any, base: str) -> None:
    page.goto(f"{base}/?{ISSUE_QUERY}")
    wait_ready(page)
    page.fill("#f-tp", "0")
    wait_ready(page, "tp=0")
    r = plan_cli(*[a if a != "2" else "0" for a in ISSUE_ARGS], "-o", "json")
    assert r.returncode == 2
    assert page.text_content("#error") == r.stderr.strip().splitlines()[-1]
    assert page.is_visible("#error")
    shot(page, "06-error")


def no_time(text: str) -> str:
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z", "<time>", text)


def test_pasted_manifest_gives_plan_file_patch(page: Any, base: str) -> None:
    page.goto(base + "/")
    wait_ready(page)
    page.click("#mode-manifest")
    page.fill("#manifest", EXAMPLE.read_text())
    page.click("#manifest-plan")
    wait_ready(page, "manifest")
    r = plan_cli(str(EXAMPLE), "-o", "patch")
    assert r.stdout.strip()
    assert no_time(page.text_content("#patch")) == no_time(r.stdout)
    plan = cli_json(str(EXAMPLE))
    assert (
        page_numbers(page)["recommendation.maxNumSeqs"][0] == plan["recommendation"]["maxNumSeqs"]
    )
    shot(page, "07-manifest")


def test_uploaded_manifest(page: Any, base: str, tmp_path: Path) -> None:
    page.goto(base + "/")
    wait_ready(page)
    page.click("#mode-manifest")
    page.set_input_files("#manifest-file", str(EXAMPLE))
    wait_ready(page, "manifest")
    r = plan_cli(str(EXAMPLE), "-o", "patch")
    assert no_time(page.text_content("#patch")) == no_time(r.stdout)


def test_labels_and_keyboard(page: Any, base: str) -> None:
    page.goto(f"{base}/?{ISSUE_QUERY}")
    wait_ready(page)
    # every visible control has an accessible name: a <label for>, a wrapping label or aria-label
    unlabelled = page.eval_on_selector_all(
        "input, select, textarea, button",
        """els => els.filter(e => e.offsetParent !== null).filter(e =>
             !(e.labels && e.labels.length) && !e.getAttribute('aria-label') &&
             !(e.tagName === 'BUTTON' && e.textContent.trim())).map(e => e.id || e.outerHTML)""",
    )
    assert unlabelled == []
    # Tab walks the form in reading order: the first fields, by keyboard alone
    page.focus("#mode-manifest")
    order = []
    for _ in range(8):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.id"))
    assert order[:3] == ["f-model", "f-revision", "f-quantization"], order
    assert "f-gpu" in order
    # typing a GPU by keyboard on the focused select changes the plan
    page.focus("#f-gpu")
    page.keyboard.press("ArrowDown")
    gpu = page.input_value("#f-gpu")
    assert gpu != "H100-SXM-80GB"
    wait_ready(page, "gpu=" + urllib.parse.quote(gpu, safe=""))
    # a ledger segment is focusable and says its bytes
    page.focus("svg.ledger rect.seg")
    tip = page.text_content("#tooltip")
    first = page.eval_on_selector(
        "svg.ledger rect.seg", "r => [r.dataset.name, Number(r.dataset.bytes)]"
    )
    assert page.is_visible("#tooltip") and f"{first[0]}: {first[1]:,} bytes" in tip
    assert page.get_attribute("svg.ledger rect.seg", "aria-label").startswith(f"{first[0]}: ")
    shot(page, "08-keyboard")
