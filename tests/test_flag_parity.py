"""`plan FILE -o patch` and the operator on the flag cases of issue 20: the same refusal (a flag the
Deployment's vLLM release lacks, named with vLLM's words) or the same patch (``-O3`` and a
repeated ``--max-model-len``), against the real control plane. The helpers are the decision
parity test's (tests/test_decision_parity.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from inference_capacity.patching import ANNOTATION_APPLIED, apply_strategic
from tests.operator_harness import Cluster, cluster, load_example
from tests.realk8s.fixtures import wait_for
from tests.test_decision_parity import NAME, _applied_condition, _cli, _compared, _settled

__all__ = ["cluster"]

CASES = {
    # (extra args, the words the refusal carries; None: the operator patches)
    "swap-space": (["--swap-space", "4"], "vLLM 0.19.0 has no --swap-space; removed in 0.18.0"),
    "disable-log-requests": (
        ["--disable-log-requests"],
        "vLLM 0.19.0 has no --disable-log-requests; removed in 0.17.0",
    ),
    "O3-repeated-max-model-len": (
        ["-O3", "--max-model-len", "8192", "--max-model-len", "16384"],
        None,
    ),
}


def _supported(c: Cluster, ns: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        icap = c.icap(ns, NAME)
        st_ = icap.get("status") or {}
        if st_.get("observedGeneration") != icap["metadata"]["generation"]:
            return None
        return next((x for x in st_.get("conditions", []) if x["type"] == "Supported"), None)

    out: dict[str, Any] = wait_for(check, timeout=30, interval=0.2, message="Supported condition")
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_flag_cases_cli_patch_is_the_operators(cluster: Cluster, tmp_path: Path, case: str) -> None:
    c = cluster
    extra, refused = CASES[case]
    ns = c.namespace("flags")
    try:
        icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
        container = dep["spec"]["template"]["spec"]["containers"][0]
        container["args"] = ["--port", "8000", *extra]
        if "--max-model-len" in extra:
            del icap["spec"]["workload"]["maxModelLen"]  # the container's last value is used
        c.api.apply(dep)
        live = _settled(c, ns)
        world = c.api.get_json("nodes,pods", "-A")
        f = tmp_path / f"{ns}.yaml"
        f.write_text(yaml.safe_dump_all([icap, live, world]))
        code, out, err = _cli("plan", str(f), "-o", "patch")
        c.api.apply(icap)
        if refused is not None:
            assert code == 5 and out == "", err
            assert refused in err  # the condition's message, not only "Supported=False"
            cond = _supported(c, ns)
            assert cond["status"] == "False" and refused in cond["message"]
            assert _applied_condition(c, ns)["status"] != "True"
            assert _compared(c.deployment(ns, NAME)) == _compared(live)
            return
        assert code == 0, err
        patch = json.loads(out)
        # the rewrite changes the last --max-model-len, the one vLLM reads
        args = apply_strategic(live, patch)["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args.count("--max-model-len") == 2 and args[args.index("-O3") + 2] == "8192"

        def written() -> dict[str, Any] | None:
            d = c.deployment(ns, NAME)
            ann = d["metadata"].get("annotations") or {}
            return d if ANNOTATION_APPLIED in ann else None

        after = wait_for(written, timeout=30, interval=0.2, message="operator patch")
        assert _compared(after) == _compared(apply_strategic(live, patch)), err
        assert _supported(c, ns)["status"] == "True"
    finally:
        c.api.delete_namespaces([ns], wait=True)
        c.namespaces.remove(ns)
