"""The safety review's CLI cases (issue 13), re-run: what each gives now, in how long, at what
peak RSS. The review's own result for each is printed beside it ("before").

Each case runs ``inference-capacity plan`` in a child process of its own (the real entry point),
so its RSS is its own (``os.wait4``); "s" is the whole process, Python start and imports
included (about 1 s on an idle core). The cases that need a cluster (PDBs, ownership, Secrets,
storms, the 200-resource load) are tests on the real control plane: see
``tests/test_operator_safety.py``.

    python -m benchmarks.safety_review
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from inference_capacity.model import load_config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"
Docs = list[dict[str, Any]]


@dataclass(frozen=True)
class Case:
    name: str
    before: str  # the review's result
    make: Callable[[Path], list[str]]  # writes what it needs under the folder, returns the args
    grep: str = ""  # the line of stdout to show (default: stderr's first line, or the verdict)
    plans: bool = False  # the case is valid input: exit 0 is right


def _docs() -> Docs:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def _manifest(
    edit: Callable[[dict[str, Any], dict[str, Any]], None],
) -> Callable[[Path], list[str]]:
    def make(folder: Path) -> list[str]:
        icap, dep = copy.deepcopy(_docs())
        edit(icap, dep)
        path = folder / "m.yaml"
        path.write_text(yaml.safe_dump_all([icap, dep]))
        return ["plan", str(path), "--fail-if-not-fits"]

    return make


def _config(**changes: Any) -> Callable[[Path], list[str]]:
    _, cfg = load_config("meta-llama/Llama-3.1-8B-Instruct")
    cfg = {**cfg, **changes}
    return _manifest(lambda i, d: i["spec"].update(model={"config": cfg}))


def _text(text: str) -> Callable[[Path], list[str]]:
    def make(folder: Path) -> list[str]:
        path = folder / "m.yaml"
        path.write_text(text)
        return ["plan", str(path)]

    return make


def _alias_bomb() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [
        f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    return "kind: InferenceCapacity\n" + "\n".join(lines) + "\n"


def _deep_json(depth: int) -> Callable[[Path], list[str]]:
    def make(folder: Path) -> list[str]:
        icap, dep = copy.deepcopy(_docs())
        icap["spec"]["model"] = {"configMapRef": {"name": "cfg", "key": "config.json"}}
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cfg"},
            "data": {"config.json": "[" * depth + "]" * depth},
        }
        path = folder / "m.yaml"
        path.write_text(yaml.safe_dump_all([icap, dep, cm]))
        return ["plan", str(path)]

    return make


def _ints_in_configmap(folder: Path) -> list[str]:
    icap, dep = copy.deepcopy(_docs())
    icap["spec"]["model"] = {"configMapRef": {"name": "cfg", "key": "config.json"}}
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cfg"},
        "data": {"config.json": 5},
    }
    path = folder / "m.yaml"
    path.write_text(yaml.safe_dump_all([icap, dep, cm]))
    return ["plan", str(path)]


def _set(path: list[str], value: Any) -> Callable[[dict[str, Any], dict[str, Any]], None]:
    def edit(icap: dict[str, Any], dep: dict[str, Any]) -> None:
        obj: Any = icap
        for k in path[:-1]:
            obj = obj.setdefault(k, {})
        obj[path[-1]] = value

    return edit


def _flag(flag: str, value: str) -> Callable[[dict[str, Any]], None]:
    def edit(c: dict[str, Any]) -> None:
        args = [a for a in c.get("args", []) if not a.startswith(flag + "=")]
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
        c["args"] = args

    return edit


def _max_model_len_32k(icap: dict[str, Any], dep: dict[str, Any]) -> None:
    # the review's case: no maxModelLen in the spec, 32k on the container
    icap["spec"]["workload"].pop("maxModelLen", None)
    _flag("--max-model-len", "32k")(dep["spec"]["template"]["spec"]["containers"][0])


CASES = [
    Case(
        "num_hidden_layers: 300000", "689 MB RSS, OOM-kill loop", _config(num_hidden_layers=300_000)
    ),
    Case("num_hidden_layers: 100000", "13.9 s", _config(num_hidden_layers=100_000)),
    Case("config value Infinity", "unhandled exception", _config(hidden_size=float("inf"))),
    Case(
        "weight_block_size [0, 0]",
        "unhandled exception",
        _config(
            quantization_config={"quant_method": "fp8", "weight_block_size": [0, 0]},
        ),
    ),
    Case("100k-deep config JSON", "unhandled exception", _deep_json(100_000)),
    Case(
        "--max-model-len 32k",
        "read as unset, rewritten to 131072",
        _manifest(_max_model_len_32k),
        grep='"max-model-len"',
        plans=True,
    ),
    Case(
        "gptq bits: 0",
        "written to the Deployment",
        _config(quantization_config={"quant_method": "gptq", "bits": 0, "group_size": 128}),
    ),
    Case(
        "gpuMemoryGiB: 1e12",
        "written to the Deployment",
        _manifest(_set(["spec", "hardware", "gpuMemoryGiB"], 1e12)),
    ),
    Case(
        "engine.version: 0.0.1",
        "written to the Deployment",
        _manifest(_set(["spec", "engine", "version"], "0.0.1")),
    ),
    Case(
        "maxNumBatchedTokens: 1e12",
        "names gpu_memory_utilization (-14219)",
        _manifest(_set(["spec", "engine", "maxNumBatchedTokens"], 10**12)),
    ),
    Case("spec: null", "traceback", _manifest(lambda i, d: i.__setitem__("spec", None))),
    Case(
        "template: null",
        "traceback",
        _manifest(lambda i, d: d["spec"].__setitem__("template", None)),
    ),
    Case(
        "containers as a map",
        "traceback",
        _manifest(
            lambda i, d: d["spec"]["template"]["spec"].__setitem__("containers", {"vllm": {}})
        ),
    ),
    Case(
        'strategy: "Recreate"',
        "traceback",
        _manifest(lambda i, d: d["spec"].__setitem__("strategy", "Recreate")),
    ),
    Case("ints in ConfigMap data", "traceback", _ints_in_configmap),
    Case("100k-deep YAML", "traceback", _text("[" * 100_000 + "]" * 100_000)),
    Case("/dev/zero", "traceback", lambda folder: ["plan", "/dev/zero"]),
    Case("656-byte alias bomb", "over 90 s", _text(_alias_bomb())),
    Case(
        "--kv-cache-gib 99999 --fail-if-not-fits",
        "exit 0, fits: true",
        lambda folder: [
            "plan",
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--gpu",
            "H100-SXM-80GB",
            "--kv-cache-gib",
            "99999",
            "--fail-if-not-fits",
        ],
    ),
]


def run_case(case: Case, folder: Path, timeout: float = 120) -> tuple[int, str, float, float]:
    """(exit code, first line of stderr or the verdict line of stdout, seconds, peak RSS MB)."""
    args = case.make(folder)
    cmd = [sys.executable, "-m", "inference_capacity.cli", *args]
    t = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        took = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if case.grep:
        what = next((ln.strip() for ln in stdout.splitlines() if case.grep in ln), "(not shown)")
    elif "Traceback" in stderr:
        what = "TRACEBACK: " + stderr.strip().splitlines()[-1]
    elif stderr.strip():
        what = stderr.strip().splitlines()[0]
    else:
        lines = [ln for ln in stdout.splitlines() if "fits" in ln.lower() or "usable" in ln.lower()]
        what = (lines or stdout.splitlines() or [""])[0].strip()
    return proc.returncode, what, took, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, case in enumerate(CASES):
            folder = Path(tmp) / str(k)
            folder.mkdir()
            rows.append((case, *run_case(case, folder)))
    print("| case | before (the review) | exit | now | s | RSS MB |")
    print("|---|---|---|---|---|---|")
    for case, rc, what, took, rss in rows:
        what = what.replace("|", "/")
        if len(what) > 110:
            what = what[:107] + "..."
        print(f"| {case.name} | {case.before} | {rc} | {what} | {took:.2f} | {rss:.0f} |")
    bad = [
        c.name for c, rc, what, *_ in rows if what.startswith("TRACEBACK") or (rc == 0) != c.plans
    ]
    if bad:
        print("cases that crashed or passed:", json.dumps(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
