"""Models by Hub id, local folder and catalog key; exact weights from safetensors headers.

No test reaches the internet: ``HF_ENDPOINT`` points at :class:`tests.hubserver.HubServer`,
which serves real config.json files and sparse safetensors shards with the real tensor names,
dtypes and shapes of real models (:mod:`tests.checkpoints`). Every expected byte count is the
header formula Σ elements × dtype bits / 8 over the tensors the test wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inference_capacity.ledger.weights import weight_breakdown
from inference_capacity.model import shape_from_config
from inference_capacity.model.checkpoint import (
    CheckpointError,
    local_inventory,
    parse_header,
    read_local_header,
)
from inference_capacity.model.quant import config_checkpoint_bytes
from inference_capacity.model.source import (
    ModelSourceError,
    clear_cache,
    resolve_model_ref,
)
from tests import checkpoints as ck
from tests.hubserver import HubServer
from tests.realk8s.fixtures import wait_for

ROOT = Path(__file__).resolve().parent.parent
_SHARED = ROOT.parent / "shared" / "data" / "model-configs"
CONFIGS = _SHARED if _SHARED.is_dir() else ROOT / "operator/inference_capacity/catalog/models"


def config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / f"{name.replace('/', '__')}.json").read_text())
    return data


LLAMA_1B = config("meta-llama/Llama-3.2-1B")
GPTQ_CFG = {
    **LLAMA_1B,
    "torch_dtype": "float16",
    "quantization_config": {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 128,
        "desc_act": False,
        "sym": True,
    },
}


@pytest.fixture(scope="module")
def hub() -> Iterator[HubServer]:
    server = HubServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def published(hub: HubServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Repositories on the test Hub: id -> (tensor spec, commit)."""
    root = tmp_path_factory.mktemp("repos")
    out: dict[str, Any] = {}

    def publish(repo: str, spec: ck.Spec, cfg: dict[str, Any], **kw: Any) -> None:
        shard = kw.pop("max_shard_bytes", None)
        folder = root / f"{repo.replace('/', '__')}@{kw.get('ref', 'main')}"
        files = ck.write_checkpoint(folder, spec, cfg, shard)
        out[repo] = (spec, hub.add(repo, dict(files), **kw), files)

    # a fine-tune outside the catalog: Llama-3.2-1B's tensors, one file
    publish("acme/llama-3.2-1b-support", ck.dense(LLAMA_1B), LLAMA_1B)
    # sharded AWQ of a 72B model (sparse, ~41 GB)
    publish(
        "acme/Qwen2.5-72B-Instruct-AWQ",
        ck.awq(config("LDCC/Qwen2.5-72B-Instruct-ko-AWQ")),
        config("LDCC/Qwen2.5-72B-Instruct-ko-AWQ"),
        max_shard_bytes=4 * 10**9,
    )
    publish("acme/llama-3.2-1b-gptq", ck.gptq(GPTQ_CFG), GPTQ_CFG)
    bnb_cfg = config("asif00/bangla-llama-4bit")
    publish("acme/llama-3-8b-bnb-4bit", ck.bnb_nf4(bnb_cfg), bnb_cfg, max_shard_bytes=4 * 10**9)
    fp8_cfg = config("Qwen/Qwen3-32B-FP8")
    publish("acme/Qwen3-32B-FP8", ck.fp8_block(fp8_cfg), fp8_cfg, max_shard_bytes=5 * 10**9)
    # gated
    publish("gated/llama-3.2-1b", ck.dense(LLAMA_1B), LLAMA_1B, gated=True, tokens={"hf_granted"})
    # revisions: v1 (16 layers) is a tag; main moved on to a 2-layer variant
    small = {**LLAMA_1B, "num_hidden_layers": 2}
    publish("acme/moving", ck.dense(LLAMA_1B), LLAMA_1B, ref="v1")
    publish("acme/moving", ck.dense(small), small, ref="main")
    # not sizeable repositories
    hub.add("acme/just-a-readme", {"README.md": b"# nothing here\n"})
    hub.add("acme/tiny-GGUF", {"tiny.Q4_K_M.gguf": b"GGUF" + b"\0" * 60, "README.md": b"x"})
    hub.add("acme/no-weights", {"config.json": json.dumps(LLAMA_1B).encode()})
    # a header with a dtype nobody knows
    head = json.dumps(
        {"w": {"dtype": "F12", "shape": [4], "data_offsets": [0, 6]}}, separators=(",", ":")
    ).encode()
    bad = len(head).to_bytes(8, "little") + head + b"\0" * 6
    hub.add(
        "acme/odd-dtype", {"config.json": json.dumps(LLAMA_1B).encode(), "model.safetensors": bad}
    )
    return out


@pytest.fixture(autouse=True)
def hub_env(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(home))
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    clear_cache()
    hub.fail_with = None
    yield home
    clear_cache()
    hub.fail_with = None


# --------------------------------------------------------------------------------------------
# headers


def test_header_reader_agrees_with_the_safetensors_package(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    arrays = {
        "model.layers.0.self_attn.q_proj.qweight": np.zeros((64, 8), dtype=np.int32),
        "model.layers.0.self_attn.q_proj.scales": np.zeros((1, 64), dtype=np.float16),
        "model.norm.weight": np.zeros((64,), dtype=np.float32),
        "scalar": np.zeros((), dtype=np.float32),
        "model.embed_tokens.weight": np.zeros((10, 64), dtype=np.uint8),
    }
    path = tmp_path / "model.safetensors"
    safetensors_numpy.save_file(arrays, str(path))
    entries = {t.name: t for t in read_local_header(path)}
    assert set(entries) == set(arrays)
    for name, arr in arrays.items():
        assert entries[name].shape == arr.shape
        assert entries[name].nbytes == arr.nbytes
    # the file is header + data and nothing else: the sum is exact
    head_len = int.from_bytes(path.read_bytes()[:8], "little")
    assert sum(t.nbytes for t in entries.values()) == path.stat().st_size - 8 - head_len


def test_sparse_files_are_real_safetensors(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors")
    spec = ck.dense(LLAMA_1B)
    path = tmp_path / "model.safetensors"
    size = ck.write_sparse(path, spec)
    assert path.stat().st_size == size
    assert os.stat(path).st_blocks * 512 < 1 << 20  # sparse: no data on disk
    with safetensors.safe_open(str(path), framework="np") as f:
        assert set(f.keys()) == set(spec)
        sl = f.get_slice("model.layers.3.mlp.down_proj.weight")
        assert tuple(sl.get_shape()) == spec["model.layers.3.mlp.down_proj.weight"][1]
        assert sl.get_dtype() == "BF16"


def test_unknown_dtype_fails_closed() -> None:
    header = {"w": {"dtype": "F12", "shape": [4], "data_offsets": [0, 6]}}
    with pytest.raises(CheckpointError, match="unknown safetensors dtype 'F12'"):
        parse_header(header, "model.safetensors")


def test_inconsistent_offsets_are_an_error() -> None:
    header = {"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}
    with pytest.raises(CheckpointError, match="span 6 bytes but BF16"):
        parse_header(header, "model.safetensors")


def test_sub_byte_and_scalar_dtypes() -> None:
    header = {
        "a": {"dtype": "F4", "shape": [3, 4], "data_offsets": [0, 6]},
        "b": {"dtype": "F32", "shape": [], "data_offsets": [6, 10]},
        "c": {"dtype": "F8_E8M0", "shape": [2, 3], "data_offsets": [10, 16]},
    }
    assert [t.nbytes for t in parse_header(header, "x")] == [6, 4, 6]


# --------------------------------------------------------------------------------------------
# local folders


def test_local_folder_sharded(tmp_path: Path) -> None:
    spec = ck.dense(LLAMA_1B)
    files = ck.write_checkpoint(tmp_path / "m", spec, LLAMA_1B, max_shard_bytes=10**9)
    assert sum(1 for f in files if f.endswith(".safetensors")) >= 2
    (tmp_path / "m" / "README.md").write_text("readme")
    m = resolve_model_ref(str(tmp_path / "m"))
    assert m.source == "local" and m.revision is None
    assert m.checkpoint_bytes == ck.expected_bytes(spec)
    assert m.disk_bytes == sum(p.stat().st_size for p in (tmp_path / "m").iterdir())
    inv = local_inventory(tmp_path / "m")
    assert inv is not None and len(inv.tensors) == len(spec)


def test_local_config_file_has_no_headers(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_1B))
    m = resolve_model_ref(str(tmp_path / "config.json"))
    assert m.source == "local" and m.checkpoint_bytes is None
    assert m.json() == {
        "source": "local",
        "id": m.id,
        "revision": None,
        "checkpoint_bytes": None,
        "disk_bytes": None,
    }


def test_local_gguf_folder_says_so(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelSourceError, match="only GGUF") as err:
        resolve_model_ref(str(tmp_path))
    assert err.value.reason == "GgufOnly"


def test_catalog_needs_no_network(hub: HubServer) -> None:
    before = len(hub.requests)
    m = resolve_model_ref("meta-llama/Llama-3.1-8B-Instruct")
    assert (m.source, m.revision, m.checkpoint_bytes) == ("catalog", None, None)
    assert len(hub.requests) == before


# --------------------------------------------------------------------------------------------
# the Hub


@pytest.mark.parametrize(
    "repo",
    [
        "acme/llama-3.2-1b-support",
        "acme/Qwen2.5-72B-Instruct-AWQ",
        "acme/llama-3.2-1b-gptq",
        "acme/llama-3-8b-bnb-4bit",
        "acme/Qwen3-32B-FP8",
    ],
)
def test_hub_checkpoint_bytes_are_the_header_sum(
    repo: str, published: dict[str, Any], hub: HubServer
) -> None:
    spec, commit, files = published[repo]
    m = resolve_model_ref(repo)
    assert (m.source, m.id, m.revision) == ("hub", repo, commit)
    assert m.checkpoint_bytes == ck.expected_bytes(spec)
    assert m.disk_bytes == sum(
        (f.stat().st_size if isinstance(f, Path) else len(f)) for f in files.values()
    )
    assert m.inventory is not None and len(m.inventory.tensors) == len(spec)
    # scales, zero points and index tensors are in the inventory, by role
    roles = m.inventory.by_role()
    if "awq" in repo or "gptq" in repo:
        assert roles["zero_point"] > 0 and roles["scale"] > 0
    if "gptq" in repo:
        assert roles["index"] == sum(ck.nbytes(*spec[n]) for n in spec if n.endswith(".g_idx"))
    if "bnb" in repo or "FP8" in repo:
        assert roles["scale"] > 0
    # only headers were read: every blob request was a range of at most 100 kB + header
    ranges = [h.get("range") or h.get("Range") for mth, p, h in hub.requests if "_blobs" in p]
    assert ranges and all(r and r.startswith("bytes=") for r in ranges)


def test_header_wins_over_the_config_in_the_ledger(published: dict[str, Any]) -> None:
    spec, _, _ = published["acme/llama-3-8b-bnb-4bit"]
    m = resolve_model_ref("acme/llama-3-8b-bnb-4bit")
    shape = m.shape()
    h = shape.header
    assert h is not None
    assert h.loaded_bytes == ck.expected_bytes(spec)  # nothing skipped
    plain = shape_from_config(m.config, name="x")
    assert h.config_bytes == config_checkpoint_bytes(plain)
    assert h.delta != 0  # bnb's quant state and code books are not in the config formula
    w = weight_breakdown(shape, 1, 1, 0, h.dtype_bytes, shape.quantization)
    base = weight_breakdown(plain, 1, 1, 0, h.dtype_bytes, plain.quantization)
    assert w.header_correction == h.delta
    assert w.total == base.total + h.delta
    # TP 2: each rank carries a share in proportion to its tensor bytes (replicated norms make
    # a rank hold a little more than half), rounded up; the shares cover the difference
    w2 = weight_breakdown(shape, 2, 1, 0, h.dtype_bytes, shape.quantization)
    rank, full = sum(w2.by_group.values()), sum(base.by_group.values())
    assert w2.header_correction == -(-h.delta * rank // full)
    assert h.delta <= 2 * w2.header_correction < h.delta + h.delta // 100 + 2
    # a runtime dtype other than the checkpoint's: the config-derived figure stands
    w32 = weight_breakdown(shape, 1, 1, 0, 4, shape.quantization)
    assert w32.header_correction == 0


def test_dense_checkpoint_matches_the_config_exactly(published: dict[str, Any]) -> None:
    """Llama-3.2-1B: the config-derived tensors are the header's, byte for byte."""
    spec, _, _ = published["acme/llama-3.2-1b-support"]
    shape = resolve_model_ref("acme/llama-3.2-1b-support").shape()
    assert shape.header is not None
    assert shape.header.config_bytes == ck.expected_bytes(spec) == shape.header.loaded_bytes


def test_revision_tag_commit_and_missing(published: dict[str, Any]) -> None:
    _, main_sha, _ = published["acme/moving"]
    spec_v1 = ck.dense(LLAMA_1B)
    v1 = resolve_model_ref("acme/moving", revision="v1")
    assert v1.revision != main_sha and v1.requested_revision == "v1"
    assert v1.config["num_hidden_layers"] == 16
    assert v1.checkpoint_bytes == ck.expected_bytes(spec_v1)
    head = resolve_model_ref("acme/moving")
    assert head.revision == main_sha and head.config["num_hidden_layers"] == 2
    pinned = resolve_model_ref("acme/moving", revision=v1.revision)
    assert pinned.revision == v1.revision and pinned.checkpoint_bytes == v1.checkpoint_bytes
    with pytest.raises(ModelSourceError, match="no revision 'v9'") as err:
        resolve_model_ref("acme/moving", revision="v9")
    assert err.value.reason == "RevisionNotFound"


def test_gated_without_and_with_token(published: dict[str, Any]) -> None:
    with pytest.raises(ModelSourceError, match="gated") as err:
        resolve_model_ref("gated/llama-3.2-1b", token=False)
    assert err.value.reason == "Gated"
    with pytest.raises(ModelSourceError, match="not been granted") as err:
        resolve_model_ref("gated/llama-3.2-1b", token="hf_someone_else")
    assert err.value.reason == "Gated"
    m = resolve_model_ref("gated/llama-3.2-1b", token="hf_granted")
    assert m.checkpoint_bytes == ck.expected_bytes(published["gated/llama-3.2-1b"][0])


def test_gated_with_hf_token_env(
    published: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_granted")
    m = resolve_model_ref("gated/llama-3.2-1b")
    assert m.revision == published["gated/llama-3.2-1b"][1]


@pytest.mark.parametrize(
    "ref,reason,text",
    [
        ("acme/does-not-exist", "NotFound", "not found"),
        ("meta-llama/Llama-3.1-8B-Instruc", "NotFound", "meta-llama/Llama-3.1-8B-Instruct"),
        ("acme/just-a-readme", "NoModelConfig", "no config.json"),
        ("acme/tiny-GGUF", "GgufOnly", "tiny.Q4_K_M.gguf"),
        ("acme/odd-dtype", "InvalidCheckpoint", "unknown safetensors dtype 'F12'"),
        ("Llama-3.1-8B-Instruc", "UnknownModel", "Did you mean: meta-llama/Llama-3.1-8B"),
    ],
)
def test_errors_say_what_to_do(published: dict[str, Any], ref: str, reason: str, text: str) -> None:
    with pytest.raises(ModelSourceError) as err:
        resolve_model_ref(ref, token=False)
    assert err.value.reason == reason, str(err.value)
    assert text in str(err.value)


def test_repo_without_safetensors_uses_the_config(published: dict[str, Any]) -> None:
    m = resolve_model_ref("acme/no-weights")
    assert m.checkpoint_bytes is None and m.shape().header is None
    assert any("no *.safetensors" in n for n in m.notes)


def test_network_failure_hints_offline_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(ModelSourceError, match="HF_HUB_OFFLINE=1") as err:
        resolve_model_ref("acme/llama-3.2-1b-support", timeout=2)
    assert err.value.reason == "Network"
    assert "local model folder" in str(err.value)


def test_offline_with_a_warm_cache(
    published: dict[str, Any], hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, commit, _ = published["acme/Qwen2.5-72B-Instruct-AWQ"]
    online = resolve_model_ref("acme/Qwen2.5-72B-Instruct-AWQ")
    clear_cache()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.fail_with = 503  # any request would fail
    before = len(hub.requests)
    m = resolve_model_ref("acme/Qwen2.5-72B-Instruct-AWQ")
    assert len(hub.requests) == before
    assert (m.revision, m.checkpoint_bytes) == (commit, ck.expected_bytes(spec))
    assert m.disk_bytes == online.disk_bytes
    with pytest.raises(ModelSourceError) as err:
        resolve_model_ref("acme/llama-3.2-1b-gptq")
    assert err.value.reason == "Offline"


def test_cache_by_commit_and_single_flight(published: dict[str, Any], hub: HubServer) -> None:
    t0 = time.monotonic()
    cold = resolve_model_ref("acme/Qwen2.5-72B-Instruct-AWQ")
    cold_s = time.monotonic() - t0
    n = hub.count("GET", "_blobs")
    warm = resolve_model_ref("acme/Qwen2.5-72B-Instruct-AWQ")
    assert warm.cached and not cold.cached
    assert hub.count("GET", "_blobs") == n  # no header read again
    assert warm.seconds < cold_s
    print(
        f"\nresolution of a 10-shard Hub model: cold {cold_s * 1e3:.1f} ms, "
        f"cached {warm.seconds * 1e3:.3f} ms"
    )


def test_preprocessor_config_kept_with_the_headers(
    published: dict[str, Any], hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a repository with a preprocessor_config.json (the image processor's settings, which size
    # a Qwen2-VL dummy image): read once with the config, kept in the header cache with the
    # headers, so neither a later resolution of the commit nor HF_HUB_OFFLINE reads it again
    pre = {"image_processor_type": "Qwen2VLImageProcessor", "max_pixels": 1003520}
    files = ck.write_checkpoint(tmp_path / "repo", ck.dense(LLAMA_1B), LLAMA_1B, None)
    commit = hub.add(
        "acme/with-processor", {**dict(files), "preprocessor_config.json": json.dumps(pre).encode()}
    )
    m = resolve_model_ref("acme/with-processor")
    assert (m.revision, m.preprocessor) == (commit, pre)
    assert hub.count("GET", "preprocessor_config.json") == 1
    clear_cache()  # the in-memory cache; the header cache on disk stays
    blobs = hub.count("GET", "_blobs")
    again = resolve_model_ref("acme/with-processor")
    assert again.preprocessor == pre and not again.cached
    assert hub.count("GET", "preprocessor_config.json") == 1
    assert hub.count("GET", "_blobs") == blobs  # headers from the cache too
    clear_cache()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.fail_with = 503
    assert resolve_model_ref("acme/with-processor").preprocessor == pre
    # a repository without one has none
    hub.fail_with = None
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert resolve_model_ref("acme/llama-3.2-1b-support").preprocessor is None


# --------------------------------------------------------------------------------------------
# the CLI


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inference_capacity.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_cli_plans_a_hub_model_with_header_weights(
    published: dict[str, Any], hub_env: Path
) -> None:
    spec, commit, files = published["acme/llama-3.2-1b-support"]
    env = {**os.environ}
    r = _cli(
        "plan",
        "--model",
        "acme/llama-3.2-1b-support",
        "--gpu",
        "H100-SXM-80GB",
        "-o",
        "json",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["model"] == {
        "source": "hub",
        "id": "acme/llama-3.2-1b-support",
        "revision": commit,
        "checkpoint_bytes": ck.expected_bytes(spec),
        "disk_bytes": sum(f.stat().st_size for f in files.values()),
    }
    # the rank's weight lines: the header's tensors exactly, plus vLLM's rotary cache
    items = {i["name"]: i["bytes"] for i in out["ledger"]["ranks"][0]["items"]}
    weights = sum(b for k, b in items.items() if k.startswith("weights."))
    cfg = LLAMA_1B
    hd = cfg["head_dim"]
    rope = items["weights.rope_cache"]
    assert rope == cfg["max_position_embeddings"] * hd * 2
    assert weights - rope == ck.expected_bytes(spec)
    assert out["checkpoint"]["header_bytes"] == ck.expected_bytes(spec)
    # a revision on the command line, and the table names the commit
    r = _cli("plan", "--model", "acme/moving", "--revision", "v1", "--gpu", "L4", env=env)
    assert r.returncode == 0, r.stderr
    assert "commit " in r.stdout and "from 'v1'" in r.stdout


def test_cli_header_bytes_for_an_awq_model(published: dict[str, Any]) -> None:
    spec, _, _ = published["acme/Qwen2.5-72B-Instruct-AWQ"]
    r = _cli(
        "plan",
        "--model",
        "acme/Qwen2.5-72B-Instruct-AWQ",
        "--gpu",
        "H100-SXM-80GB",
        "--tp",
        "2",
        "-o",
        "json",
        env={**os.environ},
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["model"]["checkpoint_bytes"] == ck.expected_bytes(spec)
    assert set(out["model"]) == {"source", "id", "revision", "checkpoint_bytes", "disk_bytes"}
    c = out["checkpoint"]
    assert c["difference_bytes"] == c["loaded_bytes"] - c["config_derived_bytes"]


@pytest.mark.parametrize(
    "ref,text",
    [
        ("gated/llama-3.2-1b", "gated model"),
        ("acme/tiny-GGUF", "only GGUF"),
        ("acme/does-not-exist", "not found"),
    ],
)
def test_cli_errors_are_one_line(published: dict[str, Any], ref: str, text: str) -> None:
    r = _cli("plan", "--model", ref, "--gpu", "L4", env={**os.environ})
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and text in r.stderr
    assert r.stderr.startswith("inference-capacity: error:")


def test_cache_never_opens_a_gated_model_to_a_caller_without_access(
    published: dict[str, Any],
) -> None:
    _, commit, _ = published["gated/llama-3.2-1b"]
    assert resolve_model_ref("gated/llama-3.2-1b", token="hf_granted").revision == commit
    for rev in (None, commit):
        with pytest.raises(ModelSourceError) as err:
            resolve_model_ref("gated/llama-3.2-1b", revision=rev, token=False)
        assert err.value.reason == "Gated"
    again = resolve_model_ref("gated/llama-3.2-1b", revision=commit, token="hf_granted")
    assert again.cached


def test_operator_mode_never_reads_a_path(tmp_path: Path) -> None:
    ck.write_checkpoint(tmp_path / "m", ck.dense(LLAMA_1B), LLAMA_1B)
    with pytest.raises(ModelSourceError, match="is a path") as err:
        resolve_model_ref(str(tmp_path / "m"), allow_local=False)
    assert err.value.reason == "UnknownModel"


def test_cli_local_folder_and_manifest_with_a_hub_id(
    published: dict[str, Any], tmp_path: Path
) -> None:
    spec = ck.gptq(GPTQ_CFG)
    ck.write_checkpoint(tmp_path / "gptq", spec, GPTQ_CFG, max_shard_bytes=3 * 10**8)
    r = _cli(
        "plan", "--model", str(tmp_path / "gptq"), "--gpu", "L4", "-o", "json", env={**os.environ}
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["model"]["source"] == "local" and out["model"]["revision"] is None
    assert out["model"]["checkpoint_bytes"] == ck.expected_bytes(spec)
    # a manifest naming a Hub id at a tag
    _, _, _ = published["acme/moving"]
    manifest = (ROOT / "examples" / "llama-3.1-8b-h100.yaml").read_text()
    manifest = manifest.replace(
        "name: meta-llama/Llama-3.1-8B-Instruct", "name: acme/moving\n    revision: v1", 1
    )
    assert "revision: v1" in manifest
    path = tmp_path / "icap.yaml"
    path.write_text(manifest)
    r = _cli("plan", str(path), "-o", "json", env={**os.environ})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    v1 = resolve_model_ref("acme/moving", revision="v1")
    assert out["model"]["source"] == "hub" and out["model"]["revision"] == v1.revision
    assert out["model"]["checkpoint_bytes"] == ck.expected_bytes(ck.dense(LLAMA_1B))


# --------------------------------------------------------------------------------------------
# the operator's side (in process): deadline, retry from the cache, the resource's own token


def _spec(name: str, **model: Any) -> Any:
    from inference_capacity.api import InferenceCapacitySpec

    return InferenceCapacitySpec.model_validate(
        {
            "targetRef": {"name": "x"},
            "model": {"name": name, **model},
            "hardware": {"gpu": "H100-SXM-80GB"},
        }
    )


def test_operator_waits_a_bounded_time_then_retries_from_the_cache(
    published: dict[str, Any], hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inference_capacity.controller import models

    spec, commit, _ = published["acme/llama-3.2-1b-gptq"]
    monkeypatch.setattr(models, "MODEL_RESOLVE_DEADLINE_SECONDS", 0.3)
    monkeypatch.setitem(hub.delays, "acme/llama-3.2-1b-gptq", 1.5)
    t0 = time.monotonic()
    first = models.resolve_spec_model("ns", _spec("acme/llama-3.2-1b-gptq"))
    assert time.monotonic() - t0 < 1.2  # did not wait for the Hub
    assert (first.ok, first.reason, first.retry) == (False, "Resolving", True)
    time.sleep(2.0)  # the fetch finished in the background
    n = len(hub.requests)
    again = models.resolve_spec_model("ns", _spec("acme/llama-3.2-1b-gptq"))
    assert again.ok and again.source is not None and again.source.revision == commit
    assert again.source.checkpoint_bytes == ck.expected_bytes(spec)
    assert len(hub.requests) == n  # a cache hit


def test_operator_retries_join_the_resolution_in_flight(
    published: dict[str, Any], hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13: a reconcile retried while its model is still being fetched must not queue a
    second fetch (before: every retry submitted another, each waiting on the first, until one
    resource's retries filled the pool)."""
    from inference_capacity.controller import models

    monkeypatch.setattr(models, "MODEL_RESOLVE_DEADLINE_SECONDS", 0.05)
    monkeypatch.setitem(hub.delays, "acme/llama-3.2-1b-gptq", 1.0)
    before = hub.count("GET", r"^/api/models/acme/llama-3.2-1b-gptq")
    outs = [models.resolve_spec_model("ns", _spec("acme/llama-3.2-1b-gptq")) for _ in range(5)]
    assert {o.reason for o in outs} == {"Resolving"}
    assert models.in_flight() == {"ns": (1, 0)}
    wait_for(lambda: not models.in_flight(), timeout=10, interval=0.05, message="the fetch")
    assert hub.count("GET", r"^/api/models/acme/llama-3.2-1b-gptq") - before == 1
    assert models.resolve_spec_model("ns", _spec("acme/llama-3.2-1b-gptq")).ok


def test_one_namespace_cannot_take_the_resolution_pool() -> None:
    """Issue 13: at most models.PER_NAMESPACE resolutions of a namespace run at once; its
    other ones wait their turn in order, and another namespace still gets one."""
    import asyncio
    import threading

    from inference_capacity.controller import models

    release = threading.Event()
    started: list[str] = []

    def slow(name: str) -> Any:
        async def work(client: Any) -> None:
            started.append(name)
            while not release.is_set():
                await asyncio.sleep(0.01)

        return work

    n = models.PER_NAMESPACE
    futures = [models._submit(("greedy", f"m{i}", None, ""), slow(f"g{i}")) for i in range(8)]
    other = models._submit(("polite", "m", None, ""), slow("p"))
    try:
        wait_for(lambda: "p" in started, timeout=5, interval=0.01, message="the other namespace")
        wait_for(
            lambda: models.in_flight().get("greedy") == (n, 8 - n),
            timeout=5,
            interval=0.01,
            message="the greedy namespace at its bound",
        )
        assert models.in_flight()["polite"] == (1, 0)
        assert [x for x in started if x.startswith("g")] == [f"g{i}" for i in range(n)]
    finally:
        release.set()
    for f in [*futures, other]:
        f.result(timeout=10)
    # the greedy namespace's queue ran in order
    assert [x for x in started if x.startswith("g")] == [f"g{i}" for i in range(8)]
    assert models.in_flight() == {}


# every model the test Hub publishes, and the credentials / revisions that change the answer
_BOTH_PATHS = [
    ("acme/llama-3.2-1b-support", None, False),
    ("acme/Qwen2.5-72B-Instruct-AWQ", None, False),  # 10 shards and an index
    ("acme/llama-3.2-1b-gptq", None, False),
    ("acme/llama-3-8b-bnb-4bit", None, False),
    ("acme/Qwen3-32B-FP8", None, False),
    ("gated/llama-3.2-1b", None, False),
    ("gated/llama-3.2-1b", None, "hf_someone_else"),
    ("gated/llama-3.2-1b", None, "hf_granted"),
    ("acme/moving", None, False),
    ("acme/moving", "v1", False),
    ("acme/moving", "v9", False),
    ("acme/does-not-exist", None, False),
    ("acme/does-not-exist", None, "hf_granted"),
    ("acme/just-a-readme", None, False),
    ("acme/tiny-GGUF", None, False),
    ("acme/no-weights", None, False),
    ("acme/odd-dtype", None, False),
    ("meta-llama/Llama-3.1-8B-Instruct", None, False),  # the catalog: no request at all
]


def _async_resolve(ref: str, revision: str | None, token: Any, timeout: float | None = None) -> Any:
    import asyncio

    from inference_capacity.model.hub_async import HubClient, resolve_model_ref_async

    async def go() -> Any:
        client = HubClient(connections=8, shard_parallel=4)
        try:
            return await resolve_model_ref_async(ref, revision, token, timeout, client)
        finally:
            await client.close()

    return asyncio.run(go())


def _outcome(call: Any) -> Any:
    from dataclasses import replace

    try:
        got = call()
    except ModelSourceError as exc:
        return ("error", exc.reason, str(exc))
    return replace(got, seconds=0.0, cached=False)


@pytest.mark.parametrize("ref,revision,token", _BOTH_PATHS)
def test_the_async_hub_path_gives_the_sync_result(
    published: dict[str, Any],
    hub: HubServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ref: str,
    revision: str | None,
    token: Any,
) -> None:
    """Issue 13: the operator's async fetch (model/hub_async.py) and the CLI's huggingface_hub
    path resolve every published model to the same ResolvedModel (commit, config, inventory,
    disk bytes, notes), or fail with the same reason and message; each with its own empty
    HF_HOME, so the async one reads every header itself."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "sync"))
    want = _outcome(lambda: resolve_model_ref(ref, revision=revision, token=token))
    clear_cache()
    monkeypatch.setenv("HF_HOME", str(tmp_path / "async"))
    before = len(hub.requests)
    got = _outcome(lambda: _async_resolve(ref, revision, token))
    assert got == want
    if ref.startswith("meta-llama/"):
        assert len(hub.requests) == before
    if isinstance(want, tuple):
        assert want[1] in {"Gated", "NotFound", "RevisionNotFound", "NoModelConfig"} | {
            "GgufOnly",
            "InvalidCheckpoint",
        }
        return
    if want.inventory is not None:  # the async path wrote the same on-disk header cache
        assert (tmp_path / "async" / "inference-capacity").is_dir()
        # a second resolution, cold in memory, takes the headers from that disk cache
        clear_cache()
        n = hub.count("GET", "_blobs")
        assert _outcome(lambda: _async_resolve(ref, revision, token)) == want
        assert hub.count("GET", "_blobs") == n


def test_the_async_path_reads_the_preprocessor_config_as_the_sync_one(
    published: dict[str, Any], hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's async fetch also reads a repository's preprocessor_config.json (it sizes
    a Qwen2-VL dummy image), keeps it with the headers, and gives the sync path's result."""
    pre = {"image_processor_type": "Qwen2VLImageProcessor", "max_pixels": 1003520}
    files = ck.write_checkpoint(tmp_path / "repo", ck.dense(LLAMA_1B), LLAMA_1B, None)
    hub.add(
        "acme/with-processor-async",
        {**dict(files), "preprocessor_config.json": json.dumps(pre).encode()},
    )
    monkeypatch.setenv("HF_HOME", str(tmp_path / "sync"))
    want = _outcome(lambda: resolve_model_ref("acme/with-processor-async"))
    clear_cache()
    monkeypatch.setenv("HF_HOME", str(tmp_path / "async"))
    got = _outcome(lambda: _async_resolve("acme/with-processor-async", None, False))
    assert got == want and got.preprocessor == pre
    # from the async path's own header cache the second time: no request for it
    clear_cache()
    n = hub.count("GET", "preprocessor_config.json")
    assert _async_resolve("acme/with-processor-async", None, False).preprocessor == pre
    assert hub.count("GET", "preprocessor_config.json") == n


def test_the_async_path_offline_reads_the_same_warm_cache(
    published: dict[str, Any], hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HF_HUB_OFFLINE=1 in the operator: the async path reads the cache the CLI filled (no
    request; the Hub would answer 503) and gives the sync path's offline result."""
    resolve_model_ref("acme/Qwen2.5-72B-Instruct-AWQ")  # fills HF_HOME
    clear_cache()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.fail_with = 503
    before = len(hub.requests)
    want = _outcome(lambda: resolve_model_ref("acme/Qwen2.5-72B-Instruct-AWQ"))
    clear_cache()
    got = _outcome(lambda: _async_resolve("acme/Qwen2.5-72B-Instruct-AWQ", None, False))
    assert got == want and got.checkpoint_bytes is not None
    assert len(hub.requests) == before


def test_a_hub_request_past_its_timeout_is_a_network_error(
    published: dict[str, Any], hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model info answers after 3 s; the async fetch gives up at its 0.4 s per-request
    timeout with the Network reason (the same mapping, source.hub_error, as the sync path)."""
    monkeypatch.setitem(hub.delays, "acme/llama-3.2-1b-gptq", 3.0)
    t0 = time.monotonic()
    with pytest.raises(ModelSourceError) as err:
        _async_resolve("acme/llama-3.2-1b-gptq", None, False, timeout=0.4)
    assert time.monotonic() - t0 < 2.5
    assert err.value.reason == "Network"
    assert "cannot reach the Hub" in str(err.value)


def test_the_hub_client_bounds_open_requests_over_all_resolutions(
    hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six resolutions of six slow repositories (model info after 1.5 s) through a client of
    2 connections: while the first two wait on the Hub, it has seen only those two; never more
    than 2 are open, and all six resolve."""
    import asyncio

    from inference_capacity.model.hub_async import HubClient, resolve_model_ref_async

    names = [f"bounded/m{i}" for i in range(6)]
    for name in names:
        hub.add(name, {"config.json": json.dumps(LLAMA_1B).encode()})
        monkeypatch.setitem(hub.delays, name, 1.5)
    seen: list[int] = []

    async def go() -> list[Any]:
        client = HubClient(connections=2, shard_parallel=8)
        tasks = [
            asyncio.ensure_future(resolve_model_ref_async(n, None, False, 5.0, client))
            for n in names
        ]
        for _ in range(100):  # the first two reach the Hub (and wait there 1.5 s)
            if hub.count("GET", r"^/api/models/bounded/") >= 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # room for more, were they not bounded
        seen.append(hub.count("GET", r"^/api/models/bounded/"))
        out = await asyncio.gather(*tasks)
        seen.append(client.peak_open)
        await client.close()
        return out

    results = asyncio.run(go())
    assert seen == [2, 2]
    assert [r.id for r in results] == names
    assert hub.count("GET", r"^/api/models/bounded/") == 6


def test_an_answer_over_the_cap_is_refused_unparsed(hub: HubServer) -> None:
    """A config.json of 17 MiB: the async path stops reading at hub_async.MAX_JSON_BYTES
    (16 MiB) and fails closed with HubError instead of holding it all."""
    from inference_capacity.model.hub_async import MAX_JSON_BYTES

    assert MAX_JSON_BYTES == 16 << 20
    hub.add("acme/huge-config", {"config.json": b"{" + b" " * (17 << 20) + b"}"})
    with pytest.raises(ModelSourceError) as err:
        _async_resolve("acme/huge-config", None, False)
    assert err.value.reason == "HubError"
    assert f"answered with more than {MAX_JSON_BYTES} B" in str(err.value)


def test_slow_resolutions_are_in_flight_at_once_without_a_thread_each(
    hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13: twelve resolutions of twelve namespaces, their Hub answering after 2 s: all
    twelve model-info requests are open at the Hub at once, and the operator holds no thread
    more than before (the old pool held one per resolution, four at most)."""
    import threading

    from inference_capacity.controller import ioloop, models

    def threads() -> set[str]:  # less the test Hub's request threads
        return {t.name for t in threading.enumerate() if "process_request" not in t.name}

    names = [f"slow/m{i}" for i in range(12)]
    for name in names:
        hub.add(name, {"config.json": json.dumps(LLAMA_1B).encode()})
        monkeypatch.setitem(hub.delays, name, 2.0)
    monkeypatch.setattr(models, "MODEL_RESOLVE_DEADLINE_SECONDS", 0.01)
    ioloop.get()
    before = threads()
    outs = [models.resolve_spec_model(f"ns{i}", _spec(n)) for i, n in enumerate(names)]
    assert {o.reason for o in outs} == {"Resolving"}
    wait_for(
        lambda: hub.count("GET", r"^/api/models/slow/") == 12,
        timeout=1.5,
        interval=0.01,
        message="all twelve at the Hub at once",
    )
    during = threads()
    assert during == before
    assert sum(r for r, _ in models.in_flight().values()) == 12
    wait_for(lambda: not models.in_flight(), timeout=10, interval=0.05, message="the fetches")
    again = [models.resolve_spec_model(f"ns{i}", _spec(n)) for i, n in enumerate(names)]
    assert all(o.ok for o in again)
    assert hub.count("GET", r"^/api/models/slow/") == 12  # cache hits


def test_operator_token_only_from_the_resources_secret(
    published: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from inference_capacity.controller import k8s, models

    monkeypatch.setenv("HF_TOKEN", "hf_granted")  # the operator's own: never used
    out = models.resolve_spec_model("team-a", _spec("gated/llama-3.2-1b"))
    assert (out.ok, out.reason) == (False, "Gated")
    asked: list[tuple[str, str, str]] = []

    def secret(ns: str, name: str, key: str) -> str | None:
        asked.append((ns, name, key))
        return "hf_granted\n" if (ns, name, key) == ("team-a", "hf", "token") else None

    monkeypatch.setattr(k8s, "read_secret_key", secret)
    out = models.resolve_spec_model(
        "team-a", _spec("gated/llama-3.2-1b", tokenSecretRef={"name": "hf"})
    )
    assert out.ok and asked == [("team-a", "hf", "token")]
    out = models.resolve_spec_model(
        "team-b", _spec("gated/llama-3.2-1b", tokenSecretRef={"name": "hf"})
    )
    assert (out.ok, out.reason) == (False, "TokenSecretNotFound")
    st = models.model_status(
        _spec("gated/llama-3.2-1b"), resolve_model_ref("gated/llama-3.2-1b", token="hf_granted")
    )
    assert set(st) == {
        "source",
        "id",
        "revision",
        "requestedRevision",
        "checkpointBytes",
        "diskBytes",
    }


def test_tensors_vllm_skips_are_not_weights(tmp_path: Path) -> None:
    """A tied model that also stores lm_head.weight, cached rotary frequencies and an extra
    (multi-token-prediction) layer: the checkpoint counts them, the GPU weights do not."""
    spec = ck.dense(LLAMA_1B)
    h, v = LLAMA_1B["hidden_size"], LLAMA_1B["vocab_size"]
    n = LLAMA_1B["num_hidden_layers"]
    extra: ck.Spec = {
        "lm_head.weight": ("BF16", (v, h)),
        "model.layers.0.self_attn.rotary_emb.inv_freq": ("F32", (32,)),
        f"model.layers.{n}.mlp.down_proj.weight": ("BF16", (h, 64)),
    }
    ck.write_checkpoint(tmp_path / "m", {**spec, **extra}, LLAMA_1B)
    m = resolve_model_ref(str(tmp_path / "m"))
    shape = m.shape()
    assert shape.header is not None
    assert m.checkpoint_bytes == ck.expected_bytes({**spec, **extra})
    assert shape.header.skipped_bytes == ck.expected_bytes(extra)
    assert shape.header.loaded_bytes == ck.expected_bytes(spec) == shape.header.config_bytes


def test_fp8_checkpoint_whose_config_has_no_quantization(tmp_path: Path) -> None:
    """nvidia/Llama-3.1-70B-Instruct-FP8: config.json has no quantization_config; the headers
    give the FP8 bytes, and the output says why the two disagree."""
    cfg = config("nvidia/Llama-3.1-70B-Instruct-FP8")
    assert "quantization_config" not in cfg
    spec = ck.fp8_tensor(cfg)
    ck.write_checkpoint(tmp_path / "m", spec, cfg, max_shard_bytes=5 * 10**9)
    r = _cli(
        "plan",
        "--model",
        str(tmp_path / "m"),
        "--gpu",
        "H100-SXM-80GB",
        "--tp",
        "2",
        "-o",
        "json",
        env={**os.environ},
    )
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)["checkpoint"]
    assert c["loaded_bytes"] == ck.expected_bytes(spec)
    assert c["config_derived_bytes"] == config_checkpoint_bytes(shape_from_config(cfg))
    assert c["difference_bytes"] < -60 * 10**9
    assert any("no quantization_config" in n for n in c["notes"])


def test_cli_unreadable_or_truncated_shard_is_one_line(tmp_path: Path) -> None:
    ck.write_checkpoint(tmp_path / "m", ck.dense(LLAMA_1B), LLAMA_1B)
    (tmp_path / "m" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    r = _cli("plan", "--model", str(tmp_path / "m"), "--gpu", "L4", env={**os.environ})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "truncated header" in r.stderr


def test_hub_reads_hf_quant_config_on_both_paths(hub: HubServer, tmp_path: Path) -> None:
    """Issue 21: a ModelOpt checkpoint whose quantization lives in hf_quant_config.json
    (vLLM transformers_utils/config.py::get_config reads it when config.json has no
    quantization_config): the sync (huggingface_hub) and async Hub paths, and offline, merge it."""
    hq = {
        "producer": {"name": "modelopt", "version": "0.23.0"},
        "quantization": {
            "quant_algo": "FP8",
            "kv_cache_quant_algo": "FP8",
            "exclude_modules": ["lm_head"],
        },
    }
    hub.add(
        "acme/llama-3.2-1b-modelopt-fp8",
        {
            "config.json": json.dumps(LLAMA_1B).encode(),
            "hf_quant_config.json": json.dumps(hq).encode(),
        },
    )
    sync = resolve_model_ref("acme/llama-3.2-1b-modelopt-fp8")
    assert sync.config["quantization_config"]["quant_method"] == "modelopt"
    q = sync.shape().quantization
    assert q is not None and q.method == "fp8" and q.kv_cache_algo == "fp8"
    clear_cache()
    got = _async_resolve("acme/llama-3.2-1b-modelopt-fp8", None, None)
    assert got.config == sync.config
