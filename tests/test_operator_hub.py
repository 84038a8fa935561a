"""The operator resolves ``spec.model.name`` on the Hub end to end: the real operator process
(tests/operator_harness.py) against the test API server, with ``HF_ENDPOINT`` pointing at the
test Hub (tests/hubserver.py). Uses only the harness's public fixture ``cluster``."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import checkpoints as ck
from tests.hubserver import HubServer
from tests.operator_harness import Cluster, cluster, load_example
from tests.realk8s.fixtures import wait_for
from tests.test_model_source import LLAMA_1B

__all__ = ["cluster"]

REPO = "acme/llama-3.2-1b-support"
GATED = "gated/llama-3.2-1b-private"


@pytest.fixture(scope="module", autouse=True)
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The test Hub, set in the environment before ``cluster`` starts the operator (the operator
    process inherits os.environ)."""
    root = tmp_path_factory.mktemp("hub")
    server = HubServer().start()
    spec = ck.dense(LLAMA_1B)
    files = ck.write_checkpoint(root / "llama", spec, LLAMA_1B, max_shard_bytes=10**9)
    published = {
        REPO: (spec, server.add(REPO, dict(files)), files),
        GATED: (spec, server.add(GATED, dict(files), gated=True, tokens={"hf_team"}), files),
    }
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_ENDPOINT", server.url)
    mp.setenv("HF_HOME", str(root / "hf-home"))
    mp.setenv("HF_TOKEN", "hf_team")  # the operator's own: must never be used for a resource
    mp.delenv("HF_HUB_OFFLINE", raising=False)
    try:
        yield {"server": server, "published": published}
    finally:
        mp.undo()
        server.stop()


def _apply(c: Cluster, ns: str, name: str, extra: dict[str, Any] | None = None) -> None:
    icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
    icap["spec"]["model"]["name"] = name
    icap["spec"]["model"].update(extra or {})
    c.api.apply(icap, dep)


def test_operator_plans_a_hub_model_with_its_commit(cluster: Cluster, hub: dict[str, Any]) -> None:
    c = cluster
    spec, commit, files = hub["published"][REPO]
    ns = c.namespace("hub")
    _apply(c, ns, REPO)
    cond = c.wait_condition(ns, "llama-8b", "ModelResolved", "True", "Resolved", timeout=40)
    assert commit in cond["message"]
    c.wait_condition(ns, "llama-8b", "Ready", "True", timeout=40)
    st = c.icap(ns, "llama-8b")["status"]
    assert st["model"] == {
        "source": "hub",
        "id": REPO,
        "revision": commit,
        "checkpointBytes": ck.expected_bytes(spec),
        "diskBytes": sum(p.stat().st_size for p in files.values() if isinstance(p, Path)),
    }
    items = {i["name"]: i["bytes"] for i in st["ledger"]["ranks"][0]["items"]}
    weights = sum(b for k, b in items.items() if k.startswith("weights."))
    assert weights - items["weights.rope_cache"] == ck.expected_bytes(spec)
    # the shards' headers were read by range requests, once
    server: HubServer = hub["server"]
    assert server.count("GET", r"_blobs/acme/llama") == sum(
        1 for f in files if f.endswith(".safetensors")
    )


def test_gated_model_needs_the_resources_own_token(cluster: Cluster, hub: dict[str, Any]) -> None:
    c = cluster
    _, commit, _ = hub["published"][GATED]
    ns = c.namespace("gated")
    # the operator has HF_TOKEN=hf_team in its environment; a resource without a secret
    # must not get access through it
    _apply(c, ns, GATED)
    cond = c.wait_condition(ns, "llama-8b", "ModelResolved", "False", "Gated", timeout=40)
    assert "gated" in cond["message"]
    c.wait_condition(ns, "llama-8b", "Ready", "False", "Gated")
    # a Secret in another namespace does not count
    other = c.namespace("elsewhere")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hf", "namespace": other},
        "data": {"token": base64.b64encode(b"hf_team\n").decode()},
    }
    c.api.apply(secret)
    _apply(c, ns, GATED, {"tokenSecretRef": {"name": "hf"}})
    c.wait_condition(ns, "llama-8b", "ModelResolved", "False", "TokenSecretNotFound", timeout=40)
    # its own namespace's Secret does
    c.api.apply({**secret, "metadata": {"name": "hf", "namespace": ns}})
    _apply(c, ns, GATED, {"tokenSecretRef": {"name": "hf"}, "revision": "main"})
    c.wait_condition(ns, "llama-8b", "ModelResolved", "True", "Resolved", timeout=40)

    # a refresh of the previous spec (no revision) may resolve first, now that the Secret
    # exists: wait for the status of this one
    def resolved_at_main() -> dict[str, Any] | None:
        model = (c.icap(ns, "llama-8b").get("status") or {}).get("model") or {}
        return model if model.get("requestedRevision") == "main" else None

    model = wait_for(resolved_at_main, timeout=40, interval=0.5, message="status of revision main")
    assert model["revision"] == commit


def test_unknown_hub_model_is_a_condition(cluster: Cluster) -> None:
    c = cluster
    ns = c.namespace("nohub")
    _apply(c, ns, "acme/no-such-model", {"revision": "v2"})
    cond = c.wait_condition(ns, "llama-8b", "ModelResolved", "False", "NotFound", timeout=40)
    assert "acme/no-such-model" in cond["message"]
    c.wait_condition(ns, "llama-8b", "Applied", "False", "NotFound")


def _apply_with_drafter(c: Cluster, ns: str, drafter: str, extra: dict[str, Any]) -> None:
    icap, dep = load_example("llama-3.1-8b-h100.yaml", ns)
    icap["spec"]["model"].update(extra)
    draft = {"method": "draft_model", "model": drafter, "num_speculative_tokens": 3}
    dep["spec"]["template"]["spec"]["containers"][0]["args"] += [
        "--speculative-config",
        json.dumps(draft),
    ]
    c.api.apply(icap, dep)


def test_operator_sizes_a_hub_drafter_with_the_resources_token(
    cluster: Cluster, hub: dict[str, Any]
) -> None:
    c = cluster
    ns = c.namespace("draft")
    # a gated drafter: the operator's own HF_TOKEN is never lent to it
    _apply_with_drafter(c, ns, GATED, {})
    cond = c.wait_condition(ns, "llama-8b", "ModelResolved", "False", "Gated", timeout=40)
    assert GATED in cond["message"] and "--speculative-config" in cond["message"]
    # spec.model.tokenSecretRef (its own namespace) opens it; the drafter's weights are its
    # safetensors header bytes plus its rotary cache (max_position_embeddings × head_dim × 2 B)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hf", "namespace": ns},
        "data": {"token": base64.b64encode(b"hf_team").decode()},
    }
    c.api.apply(secret)
    _apply_with_drafter(c, ns, GATED, {"tokenSecretRef": {"name": "hf"}})
    c.wait_condition(ns, "llama-8b", "Ready", "True", timeout=60)
    spec, _, _ = hub["published"][GATED]
    st = c.icap(ns, "llama-8b")["status"]
    items = {i["name"]: i["bytes"] for i in st["ledger"]["ranks"][0]["items"]}
    rope = LLAMA_1B["max_position_embeddings"] * LLAMA_1B["head_dim"] * 2
    assert items["weights.drafter"] == ck.expected_bytes(spec) + rope
