"""The README's two set-up commands are the contract: the main job runs and prints a plan of
the expected shape, and .ci/run runs exactly the README's test command."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _commands() -> list[str]:
    section = README.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, flags=re.S)


def test_readme_has_the_two_commands() -> None:
    main, tests = _commands()[:2]
    assert "inference-capacity plan examples/" in main
    assert "pytest" in tests


def test_ci_runs_exactly_the_readme_test_command() -> None:
    tests = _commands()[1].strip()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in [line.strip() for line in ci], "the README's test command is not in .ci/run"


def test_main_command_prints_a_plan() -> None:
    main = _commands()[0]
    plan = main.split("&&")[-1].strip()  # the part after the venv set-up
    argv = shlex.split(plan)
    assert argv[0].endswith("inference-capacity") and argv[1] == "plan"
    exe = Path(sys.executable).parent / "inference-capacity"
    r = subprocess.run(
        [str(exe), *argv[1:]], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for part in (
        "Rank 0 (stage 0) ledger",
        "weights.mlp",
        "kv_cache_pool",
        "total",
        "Available KV cache memory:",
        "GPU KV cache size:",
        "KV bytes per token:",
        "Recommendation",
        "vLLM flags: --gpu-memory-utilization",
        "Would patch deployment/",
    ):
        assert part in out, part


def _tour_commands() -> list[list[str]]:
    """The `inference-capacity plan` commands of the README's tour (continuation lines joined),
    without those that need the network or a folder of the reader's (a Hub id outside the
    catalog, /mnt/...)."""
    from inference_capacity.model import catalog_names

    tour = README.split("## A tour", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)\n```", tour, flags=re.S)
    text = "\n".join(blocks).replace("\\\n", " ")
    out = []
    catalog = set(catalog_names())
    for line in text.splitlines():
        argv = shlex.split(line, comments=True)
        if argv[:2] != ["inference-capacity", "plan"]:
            continue
        model = argv[argv.index("--model") + 1] if "--model" in argv else None
        if model is not None and model not in catalog:
            continue
        out.append(argv)
    return out


def test_the_tour_runs_as_written_after_the_set_up(tmp_path: Path) -> None:
    """After the set-up commands and `. .venv/bin/activate`, every plan command of the tour runs
    (from the repository root, as the tour says)."""
    assert ". .venv/bin/activate" in README.split("## A tour", 1)[1]
    commands = _tour_commands()
    assert len(commands) >= 5, commands
    exe = Path(sys.executable).parent / "inference-capacity"
    for argv in commands:
        argv = [str(tmp_path / a) if a.endswith((".svg", ".png")) else a for a in argv]
        r = subprocess.run(
            [str(exe), *argv[1:]], capture_output=True, text=True, cwd=ROOT, timeout=120
        )
        assert r.returncode == 0, (argv, r.stderr[-500:])
        assert "Traceback" not in r.stderr


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` dropped, spaces ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_contents_list_every_section_with_a_working_link() -> None:
    """The table of contents names each ``##``/``###`` heading in order, each link its anchor."""
    body = re.sub(r"```.*?```", "", README, flags=re.S)
    headings = re.findall(r"^(##|###) (.+)$", body, flags=re.M)
    contents = README.split("## Contents\n", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"^( *)- \[(.+)\]\(#(.+)\)$", contents, flags=re.M)
    want = [(h, _anchor(h), level) for level, h in headings if h != "Contents"]
    got = [(text, anchor, "##" if not indent else "###") for indent, text, anchor in links]
    assert got == want
