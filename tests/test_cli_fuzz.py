"""Issue 13: the CLI never crashes. A bounded hypothesis fuzz over manifests and flags asserts
no unhandled exception (a traceback) and no exit 0 with a nonsensical plan; the named cases the
review's fuzzer found (36 tracebacks in 628 runs) run as users run them, in a subprocess."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inference_capacity.cli import EXIT_NO_DEPLOYMENT, EXIT_NOTHING_TO_PATCH, EXIT_REFUSED, main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"
DOCS = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
#: examples per fuzz test (bounded for the suite; raise it to hunt)
EXAMPLES = int(os.environ.get("INFERENCE_CAPACITY_FUZZ_EXAMPLES", "120"))


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("inference-capacity", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "inference_capacity.cli"]
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
    )


def in_process(argv: list[str], stdin: str | None = None) -> tuple[int, str, str]:
    """main(argv) with stdout/stderr captured; an exception escaping it fails the test."""
    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors: exit 2 with a message
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.stdin = old_stdin
    return code, out.getvalue(), err.getvalue()


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def assert_sane(payload: Any) -> None:
    """An exit-0 plan that says it fits must be a plan vLLM could run."""
    for plan in payload if isinstance(payload, list) else [payload]:
        assert _finite(plan), "non-finite number in a plan"
        if not plan.get("fits"):
            continue
        rec = plan["recommendation"]
        assert 0 < rec["gpuMemoryUtilization"] <= 1, rec
        assert rec["maxNumSeqs"] >= 1 and rec["maxModelLen"] >= 1, rec
        vs = plan["vllm_startup"]
        assert vs["starts"] and vs["num_gpu_blocks"] > 0 and vs["kv_cache_tokens"] > 0, vs
        assert plan.get("inverse", {}).get("fits", True)


def check(argv: list[str], stdin: str | None = None) -> None:
    code, out, err = in_process(argv, stdin)
    assert "Traceback" not in err and "Traceback" not in out
    patch = "-o" in argv and argv[argv.index("-o") + 1] == "patch"
    # -o patch has its own documented codes (README "Exit codes of plan"): 3 nothing to change,
    # 4 no Deployment in the input, 5 the operator would refuse; each says why on stderr
    allowed = (
        (0, 1, 2, EXIT_NOTHING_TO_PATCH, EXIT_NO_DEPLOYMENT, EXIT_REFUSED) if patch else (0, 1, 2)
    )
    assert code in allowed, (code, err)
    if code >= 2:
        assert err.strip(), f"exit {code} without a message"
    if code == 0 and patch:
        assert json.loads(out), "exit 0 with an empty patch"
    if code == 0 and "-o" in argv and argv[argv.index("-o") + 1] == "json":
        assert_sane(json.loads(out))


# --- manifests ---------------------------------------------------------------------------------

WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**15), max_value=10**15),
    st.sampled_from([0, -1, 2**63, 10**12, 300_000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["32k", "1K", "1m", "Recreate", "0.0.1", "auto", "", "-1"]),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "name", "type"]), st.integers(), max_size=2),
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


ALL_PATHS = [(0, *p) for p in _paths(DOCS[0])] + [(1, *p) for p in _paths(DOCS[1])]


def _set(docs: list[Any], path: tuple[Any, ...], value: Any, delete: bool) -> None:
    node = docs
    for key in path[:-1]:
        node = node[key]
    if delete and isinstance(node, dict):
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


@st.composite
def manifests(draw: st.DrawFn) -> str:
    docs = copy.deepcopy(DOCS)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(ALL_PATHS))
        try:
            _set(docs, path, draw(WEIRD), draw(st.booleans()))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed the way there
    return yaml.safe_dump_all(docs)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(text=manifests(), output=st.sampled_from(["json", "table", "patch"]))
def test_fuzzed_manifests_never_crash_nor_claim_a_nonsensical_fit(text: str, output: str) -> None:
    check(["plan", "-", "-o", output, "--fail-if-not-fits"], stdin=text)


# --- flags -------------------------------------------------------------------------------------

FLAG_VALUES = st.one_of(
    st.sampled_from(
        ["0", "-1", "1", "0.5", "1.5", "nan", "inf", "1e12", "32k", "abc", "", "99999"]
    ),
    st.integers(min_value=-5, max_value=10**7).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
)
FLAGS = [
    "--tp",
    "--pp",
    "--dp",
    "--gpu-memory-utilization",
    "--max-model-len",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--block-size",
    "--engine-version",
    "--max-loras",
    "--max-lora-rank",
    "--kv-cache-gib",
    "--operational-headroom",
    "--gpu-memory-gib",
    "--quantization",
]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(
        ["meta-llama/Llama-3.1-8B-Instruct", "deepseek-ai/DeepSeek-V2-Lite", "Qwen/Qwen3-8B"]
    ),
    gpu=st.sampled_from(["H100-SXM-80GB", "L4", "A100-SXM-40GB"]),
    flags=st.lists(st.tuples(st.sampled_from(FLAGS), FLAG_VALUES), max_size=4),
)
def test_fuzzed_flags_never_crash_nor_claim_a_nonsensical_fit(
    model: str, gpu: str, flags: list[tuple[str, str]]
) -> None:
    argv = ["plan", "--model", model, "--gpu", gpu, "-o", "json", "--fail-if-not-fits"]
    for flag, value in flags:
        argv += [f"{flag}={value}"]
    check(argv)


# --- the review's named cases, as users run them ----------------------------------------------


def _write(tmp_path: Path, docs: list[Any]) -> str:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda i, d: i.update(spec=None), "spec"),
        (lambda i, d: d.update(spec=None), "deployment/llama-8b: spec"),
        (lambda i, d: d["spec"].update(template=None), "spec.template"),
        (lambda i, d: d["spec"]["template"].update(spec=None), "spec.template.spec"),
        (
            lambda i, d: d["spec"]["template"]["spec"].update(containers={"vllm": {}}),
            "spec.template.spec.containers",
        ),
        (lambda i, d: d["spec"].update(strategy="Recreate"), "spec.strategy"),
    ],
)
def test_named_manifest_cases_are_one_line_errors(tmp_path: Path, edit: Any, field: str) -> None:
    docs = copy.deepcopy(DOCS)
    edit(docs[0], docs[1])
    r = run("plan", _write(tmp_path, docs))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and field in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3


def test_ints_in_configmap_data(tmp_path: Path) -> None:
    docs = copy.deepcopy(DOCS)
    docs[0]["spec"]["model"] = {"configMapRef": {"name": "cfg"}}
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cfg"},
            "data": {"config.json": 5},
        }
    )
    r = run("plan", _write(tmp_path, docs))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "spec.model.configMapRef" in r.stderr


def test_deep_yaml_and_dev_zero_and_alias_bomb_fail_fast(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    bomb = tmp_path / "bomb.yaml"
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [
        f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    bomb.write_text("kind: InferenceCapacity\n" + "\n".join(lines) + "\n")
    assert bomb.stat().st_size < 720  # the review's bomb: 656 bytes, over 90 s
    for path, words in (
        (deep, "nested deeper"),
        (bomb, "expands to more"),
        ("/dev/zero", "larger than"),
    ):
        t = time.perf_counter()
        r = run("plan", str(path), timeout=30)
        assert time.perf_counter() - t < 15
        assert r.returncode == 2 and "Traceback" not in r.stderr and words in r.stderr, r.stderr


def test_unreachable_kv_cache_gib_fails_fail_if_not_fits() -> None:
    r = run(
        "plan",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "H100-SXM-80GB",
        "--kv-cache-gib",
        "99999",
        "--fail-if-not-fits",
        "-o",
        "json",
    )
    assert r.returncode == 1, r.stdout[-500:] + r.stderr
    assert json.loads(r.stdout)["inverse"]["fits"] is False
    ok = run(
        "plan",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "H100-SXM-80GB",
        "--kv-cache-gib",
        "40",
        "--fail-if-not-fits",
        "-o",
        "json",
    )
    assert ok.returncode == 0 and json.loads(ok.stdout)["inverse"]["fits"] is True
