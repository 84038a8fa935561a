"""The flag vocabulary generated from vLLM's source (engines/data/vllm_flags.json, written by
tools/gen_vllm_flags.py from the sdists on PyPI) and what the plan does with it: a flag the
Deployment's vLLM release does not have is refused with vLLM's words, ``-O`` is read as that
release reads it, a repeated flag's last value is used, and ``plan FILE`` refuses what-if
flags the operator cannot see.

The removal versions below are the table's (each read from the sdists: e.g. ``--swap-space`` is
in ``engine/arg_utils.py::EngineArgs.add_cli_args`` up to 0.17.1 and gone in 0.18.0).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from inference_capacity.api import InferenceCapacity
from inference_capacity.cli import main
from inference_capacity.cli.manifest import FILE_FLAGS, MANIFEST_FIELDS
from inference_capacity.cli.parser import build_parser
from inference_capacity.engines.vllm_args import read_flags, rewrite_flags
from inference_capacity.engines.vllm_flag_table import flag_table
from inference_capacity.engines.vllm_flags import (
    MODELLED_FLAGS,
    NEUTRAL_FLAGS,
    REFUSED_FLAGS,
    UNREVIEWED_FLAGS,
    classify,
    cuda_graphs_off,
)
from inference_capacity.resolve import resolve

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llama-3.1-8b-h100.yaml"


def example(args: list[str], image: str | None = None) -> tuple[Any, Any]:
    icap, dep = list(yaml.safe_load_all(EXAMPLE.read_text()))
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["args"] = ["--port", "8000", *args]
    if image is not None:
        c["image"] = f"vllm/vllm-openai:v{image}"
        icap["spec"]["engine"]["version"] = image
    return icap, dep


def resolved(icap: Any, dep: Any) -> Any:
    return resolve(InferenceCapacity.from_manifest(icap, ignore_status=True).spec, dep)


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def write(tmp_path: Path, icap: Any, dep: Any) -> str:
    f = tmp_path / "ic.yaml"
    f.write_text(yaml.safe_dump_all([icap, dep]))
    return str(f)


# --- the table --------------------------------------------------------------------------------


def test_every_flag_of_the_table_is_classified() -> None:
    """A new vLLM release's flag fails here until it is put in one of the hand-written lists."""
    known = MODELLED_FLAGS | NEUTRAL_FLAGS | set(REFUSED_FLAGS) | UNREVIEWED_FLAGS
    assert sorted(flag_table().names - known) == []


def test_the_table_covers_every_release_from_0_11() -> None:
    t = flag_table()
    assert t.versions[0] == "0.11.0"
    assert t.versions[-1] == "0.33.0"
    # 0.15.0 and 0.15.1 have wheels only on PyPI: they read 0.14.1
    assert t.release("0.15.1") == "0.14.1"
    assert t.release("0.19.1.post1") == "0.19.1"
    assert t.release("0.10.2") is None


@pytest.mark.parametrize(
    ("flag", "has", "lacks", "words"),
    [
        ("swap-space", "0.17.1", "0.19.0", "vLLM 0.19.0 has no --swap-space; removed in 0.18.0"),
        (
            "disable-log-requests",
            "0.16.0",
            "0.19.0",
            "vLLM 0.19.0 has no --disable-log-requests; removed in 0.17.0",
        ),
        ("optimization-level", "0.12.0", "0.11.2", "vLLM 0.11.2 has no --optimization-level"),
    ],
)
def test_a_flag_the_release_lacks_is_refused_in_vllms_words(
    flag: str, has: str, lacks: str, words: str
) -> None:
    value = {"swap-space": "4", "optimization-level": "3"}.get(flag, "true")
    assert classify({flag: value}, {}, has) == []
    refused = classify({flag: value}, {}, lacks)
    assert [u.name for u in refused] == [f"--{flag}"]
    assert refused[0].why.startswith(words)


def test_calculate_kv_scales_removal_is_the_sdists() -> None:
    # in config/cache.py CacheConfig (--calculate-kv-scales) up to 0.27.1, gone in 0.28.0
    assert flag_table().flags["calculate-kv-scales"][-1].last == "0.27.1"
    assert classify({"calculate-kv-scales": "true"}, {}, "0.27.1") == []
    refused = classify({"calculate-kv-scales": "true"}, {}, "0.28.0")
    assert refused[0].why == "vLLM 0.28.0 has no --calculate-kv-scales; removed in 0.28.0"
    # --no-x forms too (BooleanOptionalAction)
    assert classify({"no-calculate-kv-scales": "true"}, {}, "0.27.1") == []
    assert "removed in 0.28.0" in classify({"no-calculate-kv-scales": "true"}, {}, "0.29.0")[0].why


def test_max_waiting_queue_length_is_not_a_vllm_flag() -> None:
    """The issue listed it as a harmless vLLM flag; no release 0.11.0-0.33.0 defines it (the data
    decides), so vllm serve would refuse it and so does the plan."""
    (u,) = classify({"max-waiting-queue-length": "100"}, {}, "0.19.0")
    assert "no vLLM release 0.11.0–0.33.0 has it" in u.why


def test_swap_space_on_0_19_is_refused_naming_the_removal(tmp_path: Path) -> None:
    icap, dep = example(["--max-model-len", "32768", "--swap-space", "4"])
    r = resolved(icap, dep)
    assert not r.supported
    assert [u.name for u in r.unsupported] == ["--swap-space"]
    assert "removed in 0.18.0" in r.unsupported[0].why
    # plan FILE -o patch: not patched, and the condition's message on stderr
    code, out, err = cli("plan", write(tmp_path, icap, dep), "-o", "patch")
    assert code == 5 and out == ""
    assert "--swap-space" in err and "vLLM 0.19.0 has no --swap-space; removed in 0.18.0" in err


def test_swap_space_on_a_release_that_has_it_is_neutral() -> None:
    icap, dep = example(["--max-model-len", "32768", "--swap-space", "4"], "0.17.1")
    assert resolved(icap, dep).supported


# --- -O and repeated flags --------------------------------------------------------------------


@pytest.mark.parametrize(
    "spelling", [["-O3"], ["-O", "3"], ["-O=3"], ["--optimization-level", "3"]]
)
def test_optimization_level_spellings_are_accepted(spelling: list[str]) -> None:
    icap, dep = example(["--max-model-len", "32768", *spelling])
    r = resolved(icap, dep)
    assert r.supported, r.unsupported_message()
    base = resolved(*example(["--max-model-len", "32768"]))
    # O3 captures the same CUDA graphs as vLLM's default O2 (FULL_AND_PIECEWISE)
    assert r.plan_input.engine == base.plan_input.engine


def test_o0_turns_cuda_graphs_off_like_enforce_eager() -> None:
    o0 = resolved(*example(["--max-model-len", "32768", "-O0"]))
    eager = resolved(*example(["--max-model-len", "32768", "--enforce-eager"]))
    assert o0.supported and o0.plan_input.engine == eager.plan_input.engine


def test_dash_o_per_release() -> None:
    # 0.12+: -O N is --optimization-level N (O0: cudagraph_mode NONE); 0.11: compilation level,
    # and a level other than 3 leaves cudagraph_mode NONE
    assert cuda_graphs_off({"O": "0"}, "0.19.0") and not cuda_graphs_off({"O": "1"}, "0.19.0")
    assert cuda_graphs_off({"O": "1"}, "0.11.0") and not cuda_graphs_off({"O": "3"}, "0.11.0")
    assert classify({"O": "7"}, {}, "0.19.0")[0].name == "-O"
    assert read_flags({"name": "v", "args": ["vllm", "serve", "m", "-O3"]})["O"] == "3"


def test_repeated_max_model_len_uses_the_last() -> None:
    icap, dep = example(["--max-model-len", "8192", "--max-model-len", "16384"])
    del icap["spec"]["workload"]["maxModelLen"]  # the running flag fills what the spec leaves
    r = resolved(icap, dep)
    assert r.supported and r.conflicts == ()
    assert r.plan_input.engine.max_model_len == 16384
    c = dep["spec"]["template"]["spec"]["containers"][0]
    new = rewrite_flags(c, {"max-model-len": "4096"})
    # the last occurrence is the one vLLM reads, and the one changed
    assert new["args"][-4:] == ["--max-model-len", "8192", "--max-model-len", "4096"]


@pytest.mark.parametrize(
    ("flag", "value", "version"),
    [
        ("kv-events-config", '{"enable_kv_cache_events": true}', "0.19.0"),
        ("default-chat-template-kwargs", '{"enable_thinking": false}', "0.19.0"),
    ],
)
def test_common_harmless_flags_pass(flag: str, value: str, version: str) -> None:
    assert classify({flag: value}, {}, version) == []


# --- plan FILE and what-if flags --------------------------------------------------------------


def test_sizing_with_file_is_refused_naming_the_spec_field(tmp_path: Path) -> None:
    code, out, err = cli("plan", str(EXAMPLE), "-o", "patch", "--sizing", "conservative")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--sizing" in err and "spec.policy.sizing" in err


def test_every_plan_flag_is_either_for_file_or_refused_with_file() -> None:
    plan = next(
        a
        for a in build_parser()._subparsers._group_actions[0].choices.items()  # type: ignore[union-attr]
        if a[0] == "plan"
    )[1]
    dests = {a.dest for a in plan._actions if a.dest != "help"}
    assert sorted(dests - FILE_FLAGS - set(MANIFEST_FIELDS)) == []
    assert not FILE_FLAGS & set(MANIFEST_FIELDS)


@pytest.mark.parametrize(
    "flags",
    [["--preemption-target", "0.05"], ["--hbm-efficiency", "0.5"], ["--skip-mm-profiling"]],
)
def test_other_whatif_flags_with_file_are_refused(flags: list[str]) -> None:
    code, _, err = cli("plan", str(EXAMPLE), *flags)
    assert code == 2 and flags[0] in err and "edit FILE" in err


def test_cli_patch_for_flag_cases_matches_the_decision(tmp_path: Path) -> None:
    """-O3 and a repeated --max-model-len: plan -o patch writes the patch the decision holds."""
    icap, dep = example(["-O3", "--max-model-len", "8192", "--max-model-len", "16384"])
    f = write(tmp_path, icap, dep)
    code, out, err = cli("plan", f, "-o", "json")
    assert code == 0, err
    got = json.loads(out)
    assert got["supported"] is True
    pcode, pout, perr = cli("plan", f, "-o", "patch")
    assert got["patch"]["action"] == "patch"
    assert pcode == 0, perr
    patch = json.loads(pout)
    args = got["patch"]["container"]["args"]
    # the operator's rewrite changes the last --max-model-len (the one vLLM reads)
    assert args[:4] == ["--port", "8000", "-O3", "--max-model-len"] and args[4] == "8192"
    for p in (patch, got["patch"]["strategicMergePatch"]):
        p["metadata"]["annotations"].pop("capacity.inference.dev/template-changed-at", None)
    assert patch == got["patch"]["strategicMergePatch"]


def test_whatif_flags_are_read_as_the_vllm_flags_they_stand_for() -> None:
    """plan --model: the what-if flags become vLLM flags read and classified like a container's,
    so a what-if for a release lacking a flag says so as the Deployment's plan does."""
    from inference_capacity.cli.flags import whatif_vllm_args

    a = build_parser().parse_args(
        ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100"]
        + ["--tp", "2", "--max-model-len", "8192", "--enforce-eager", "--max-loras", "2"]
    )
    argv = whatif_vllm_args(a)
    flags = read_flags({"name": "w", "command": ["vllm", "serve", "m"], "args": argv})
    assert flags == {
        "model": "m",
        "tensor-parallel-size": "2",
        "max-model-len": "8192",
        "enforce-eager": "true",
        "enable-lora": "true",
        "max-loras": "2",
    }
    assert classify(flags, {}, "0.19.0") == []
    # and the CLI plans it (the refusals, if any, would be the container's)
    code, out, err = cli(
        "plan",
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "H100",
        "--engine-version",
        "0.19.0",
        "--max-model-len",
        "8192",
        "-o",
        "json",
    )
    assert code == 0, err
    assert json.loads(out).get("supported") is not False


def test_compilation_level_in_the_json_is_read_per_release() -> None:
    # 0.11.x: the JSON's level (0.11.0) or mode (0.11.1) is what -O N sets; other than 3 and
    # with cudagraph_mode unset, vLLM leaves cudagraph_mode NONE
    assert cuda_graphs_off({"compilation-config": '{"level": 0}'}, "0.11.0")
    assert not cuda_graphs_off({"compilation-config": '{"mode": 3}'}, "0.11.2")
    assert not cuda_graphs_off(
        {"compilation-config": '{"level": 0, "cudagraph_mode": "FULL"}'}, "0.11.0"
    )
    assert classify({"compilation-config": '{"mode": 0}'}, {}, "0.11.1") == []
    # 0.12+: what a mode other than 3 does to the graphs changes between releases: refused
    (u,) = classify({"compilation-config": '{"mode": 0}'}, {}, "0.19.0")
    assert u.name == "--compilation-config" and "cudagraph_mode" in u.why
    assert classify({"compilation-config": '{"mode": 3}'}, {}, "0.19.0") == []
    # before the table, what -O means is not modelled
    assert classify({"O": "3"}, {}, "0.10.2")[0].name == "-O"


def test_flag_rules_for_version() -> None:
    from inference_capacity.engines.vllm_flags import FlagRules

    assert FlagRules.for_version("0.11.0").dash_o == "compilation-config.level"
    assert FlagRules.for_version("0.11.2").dash_o == "compilation-config.mode"
    assert FlagRules.for_version("0.15.1") == FlagRules("0.15.1", "0.14.1", "optimization-level")
    before = FlagRules.for_version("0.10.2")
    assert before.release is None and before.absent("swap-space") is None
    assert FlagRules.for_version("0.18.0").absent("swap-space") == (
        "vLLM 0.18.0 has no --swap-space; removed in 0.18.0"
    )
