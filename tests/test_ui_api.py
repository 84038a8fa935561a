"""``inference-capacity ui``'s API against the CLI: ``GET /api/plan?<flags>`` is byte for byte
what ``plan <flags> -o json`` prints (each run as its own process), errors are the CLI's one-line
messages, and a posted manifest gets ``plan FILE -o json`` / ``-o patch``'s output."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from inference_capacity.api.bounded_yaml import MAX_MANIFEST_BYTES
from inference_capacity.ui.server import MAX_QUERY_BYTES, plan_flags, query_to_argv

from .uiserver import plan_cli, ui_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama-3.1-8b-h100.yaml"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with ui_server() as url:
        yield url


def no_time(text: str) -> str:
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z", "<time>", text)


def get(url: str) -> tuple[int, bytes, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def post(url: str, body: bytes) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


#: (query string, the same what-if as `plan` arguments): written out by hand on both sides
CASES = [
    (
        "model=meta-llama/Llama-3.1-8B-Instruct&gpu=H100-SXM-80GB&tp=2&max-model-len=8192",
        [
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--gpu",
            "H100-SXM-80GB",
            "--tp",
            "2",
            "--max-model-len",
            "8192",
        ],
    ),
    (
        # does not fit: 70B in BF16 on one 80 GB GPU (the ledger over-commits the device)
        "model=meta-llama/Llama-3.1-70B-Instruct&gpu=H100-SXM-80GB&max-model-len=8192",
        [
            "--model",
            "meta-llama/Llama-3.1-70B-Instruct",
            "--gpu",
            "H100-SXM-80GB",
            "--max-model-len",
            "8192",
        ],
    ),
    (
        "model=Qwen/Qwen3-8B&gpu=L40S&kv-cache-dtype=fp8&gpu-memory-utilization=0.85"
        "&prompt-tokens=500,2000,4000&output-tokens=200,800,1500&peak-concurrency=100"
        "&itl-target-ms=50&gpu-price=L40S%3D1.2&gpu-price=H100-SXM-80GB%3D3&sweep=1",
        [
            "--model",
            "Qwen/Qwen3-8B",
            "--gpu",
            "L40S",
            "--kv-cache-dtype",
            "fp8",
            "--gpu-memory-utilization",
            "0.85",
            "--prompt-tokens",
            "500,2000,4000",
            "--output-tokens",
            "200,800,1500",
            "--peak-concurrency",
            "100",
            "--itl-target-ms",
            "50",
            "--gpu-price",
            "L40S=1.2",
            "--gpu-price",
            "H100-SXM-80GB=3",
            "--sweep",
        ],
    ),
    (
        "model=meta-llama/Llama-3.1-8B-Instruct&gpu=A100-SXM-40GB&kv-cache-gib=20",
        [
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--gpu",
            "A100-SXM-40GB",
            "--kv-cache-gib",
            "20",
        ],
    ),
]


@pytest.mark.parametrize(
    ("query", "args"), CASES, ids=["8b-tp2", "70b-overcommit", "workload", "inverse"]
)
def test_api_plan_is_plan_o_json(base: str, query: str, args: list[str]) -> None:
    status, body, headers = get(f"{base}/api/plan?{query}")
    cli = plan_cli(*args, "-o", "json")
    assert cli.stdout.strip(), cli.stderr
    assert status == 200
    assert body.decode() == cli.stdout
    assert headers["X-Exit-Code"] == str(cli.returncode)
    assert headers["Content-Type"].startswith("application/json")


@pytest.mark.parametrize(
    ("query", "args"),
    [
        ("model=meta-llama/Llama-3.1-8B-Instruct&gpu=H100-SXM-80GB&tp=0", ["--tp", "0"]),
        (
            "model=meta-llama/Llama-3.1-8B-Instruct&gpu=H100-SXM-80GB&kv-cache-dtype=int3",
            ["--kv-cache-dtype", "int3"],
        ),
        ("model=meta-llama/Llama-3.1-8B-Instruct&gpu=NoSuchGPU", ["--gpu", "NoSuchGPU"]),
        (
            "model=meta-llama/Llama-3.1-8B-Instruct&gpu-memory-utilization=1.5&gpu=L4",
            ["--gpu-memory-utilization", "1.5", "--gpu", "L4"],
        ),
        ("gpu=L4", ["--gpu", "L4"]),
    ],
)
def test_api_errors_are_the_cli_one_line_message(base: str, query: str, args: list[str]) -> None:
    status, body, _ = get(f"{base}/api/plan?{query}")
    if "model=" in query:
        args = ["--model", "meta-llama/Llama-3.1-8B-Instruct", *args]
    cli = plan_cli(*args, "-o", "json")
    assert cli.returncode == 2 and not cli.stdout
    assert status == 400
    last = [x for x in cli.stderr.splitlines() if x.strip()][-1]
    assert json.loads(body)["error"] == last
    assert "Traceback" not in body.decode()


def test_api_refuses_what_the_cli_would_not_be_given(base: str) -> None:
    for query, word in [
        ("foo=1", "unknown parameter 'foo'"),
        ("output=table", "unknown parameter 'output'"),  # always -o json
        ("chart=/tmp/x.svg", "unknown parameter 'chart'"),  # no file is written
        ("gpu-prices=/etc/passwd", "unknown parameter 'gpu-prices'"),  # no file is read
        ("tp=1&tp=2", "tp given twice"),
        ("sweep=maybe", "sweep is a switch"),
    ]:
        status, body, _ = get(f"{base}/api/plan?{query}")
        assert status == 400, query
        assert word in json.loads(body)["error"], (query, body)


def test_api_bounds_the_query(base: str) -> None:
    status, body, _ = get(f"{base}/api/plan?model={'a' * (MAX_QUERY_BYTES + 10)}")
    assert status in (400, 413)
    assert b"Traceback" not in body


def test_query_to_argv_dash_values_stay_values() -> None:
    # --model=-h is a value, not argparse's --help
    assert query_to_argv([("model", "-h"), ("sweep", "1"), ("gpu", "")], plan_flags()) == [
        "--model=-h",
        "--sweep",
    ]


def test_api_flags_are_the_parsers(base: str) -> None:
    _, body, _ = get(f"{base}/api/meta")
    names = {f["name"] for f in json.loads(body)["flags"]}
    # the keys, and the aliases the CLI takes
    for n in [
        "model",
        "gpu",
        "tp",
        "tensor-parallel-size",
        "pp",
        "dp",
        "max-model-len",
        "gpu-memory-utilization",
        "kv-cache-gib",
        "kv-cache-dtype",
        "quantization",
        "engine-version",
        "prompt-tokens",
        "output-tokens",
        "cohort",
        "peak-concurrency",
        "itl-target-ms",
        "gpu-price",
        "sweep",
    ]:
        assert n in names
    assert not names & {"output", "chart", "gpu-prices", "deployment", "help"}


def test_manifest_is_plan_file(base: str) -> None:
    text = EXAMPLE.read_bytes()
    status, body = post(f"{base}/api/manifest", text)
    assert status == 200, body
    got = json.loads(body)
    patch = plan_cli(str(EXAMPLE), "-o", "patch")
    plan = plan_cli(str(EXAMPLE), "-o", "json")
    assert patch.stdout.strip() and plan.stdout.strip()
    # the patch stamps the time it was made (an annotation): the only difference allowed
    assert no_time(got["patch"]) == no_time(patch.stdout)
    assert got["patch_exit_code"] == patch.returncode
    assert no_time(json.dumps(got["plan"])) == no_time(json.dumps(json.loads(plan.stdout)))


def test_manifest_errors_and_bounds(base: str) -> None:
    for text in ["kind: [unclosed", "kind: ConfigMap\n"]:
        status, body = post(f"{base}/api/manifest", text.encode())
        cli = plan_cli("-", "-o", "json", stdin=text)
        assert status == 400 and cli.returncode == 2 and not cli.stdout
        assert json.loads(body)["error"] == cli.stderr.strip()
        assert "Traceback" not in cli.stderr
    status, body = post(f"{base}/api/manifest", b"#" * (MAX_MANIFEST_BYTES + 1))
    assert status == 413


def test_static_assets_are_the_packages_and_nothing_else(base: str) -> None:
    status, html, headers = get(base + "/")
    assert status == 200 and "default-src 'self'" in headers["Content-Security-Policy"]
    refs = re.findall(rb'(?:src|href)="([^"]+)"', html)
    for ref in refs:
        assert not ref.startswith((b"http:", b"https:", b"//")), ref
    for name in ["index.html", "app.js", "style.css"]:
        served = get(f"{base}/static/{name}")
        packaged = resources.files("inference_capacity.ui").joinpath("static", name).read_bytes()
        assert served[0] == 200 and served[1] == packaged
        # no URL of another host in any asset (the SVG namespace is a name, not a fetch)
        urls = set(re.findall(rb"https?://[^\s\"'`)]+", packaged)) - {b"http://www.w3.org/2000/svg"}
        assert not urls, (name, urls)
    for bad in ["../server.py", "..%2Fserver.py", "nope.js", "__init__.py"]:
        assert get(f"{base}/static/{bad}")[0] == 404


def test_query_keys_with_urlencoding_roundtrip(base: str) -> None:
    q = urllib.parse.urlencode(
        [
            ("model", "meta-llama/Llama-3.1-8B-Instruct"),
            ("gpu", "L40S"),
            ("cohort", "chat:0.7:300,1200,3000:150,600,1200"),
            ("cohort", "rag:0.3:3000,8000,12000:200,500,900"),
        ]
    )
    status, body, _ = get(f"{base}/api/plan?{q}")
    cli = plan_cli(
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--gpu",
        "L40S",
        "--cohort",
        "chat:0.7:300,1200,3000:150,600,1200",
        "--cohort",
        "rag:0.3:3000,8000,12000:200,500,900",
        "-o",
        "json",
    )
    assert status == 200 and body.decode() == cli.stdout
