"""Packaging: the Helm chart, the kustomize tree and the Dockerfile.

This module holds the helpers the other ``test_packaging_*`` modules share (rendering the chart
with the real Helm engine from ``helm-python-sdk``, rendering kustomize with the real
``kubectl kustomize``, applying to the real control plane of ``tests/realk8s``), plus the checks
of the copied files (CRDs, dashboard, examples) and static checks of the Dockerfile (no engine
builds it here).
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realk8s.fixtures import RealKubeAPI as KubeAPI
from tests.realk8s.fixtures import kubectl_path, wait_for

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "inference-capacity"
MANIFESTS = REPO / "manifests"
OVERLAYS = ("cluster-wide", "cluster-wide-ha", "namespace-scoped")
RELEASE = "inference-capacity"  # the release name the kustomize tree corresponds to
NAMESPACE = "inference-capacity-system"
ICAP_CRD = "inferencecapacities.capacity.inference.dev"
ICAP_CRD_FILE = f"{ICAP_CRD}.yaml"

Doc = dict[str, Any]
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the CRD is 46 kB
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load_all(text: str) -> list[Doc]:
    return [d for d in yaml.load_all(text, Loader=_Loader) if d]


def dump_all(docs: Sequence[Doc]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False)


# --- rendering ------------------------------------------------------------------------------


@functools.cache
def _render_cached(values_json: str, release: str, namespace: str) -> tuple[tuple[str, str], ...]:
    helm = pytest.importorskip("helm_python")
    values = json.loads(values_json)
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(
            values=values or None, name=release, namespace=namespace, is_install=True
        )
    return tuple(sorted(rendered.items()))


def render_chart(
    values: dict[str, Any] | None = None, *, release: str = RELEASE, namespace: str = NAMESPACE
) -> dict[str, str]:
    """``helm template`` with the real Helm engine: template path -> rendered text."""
    return dict(_render_cached(json.dumps(values or {}, sort_keys=True), release, namespace))


def chart_docs(values: dict[str, Any] | None = None, **kwargs: Any) -> list[Doc]:
    """The rendered objects (NOTES.txt left out), in template order."""
    docs: list[Doc] = []
    for path, text in render_chart(values, **kwargs).items():
        if not path.endswith("NOTES.txt"):
            docs.extend(load_all(text))
    return docs


@functools.cache
def _chart_crd_docs() -> tuple[Doc, ...]:
    helm = pytest.importorskip("helm_python")
    with helm.Chart.load(CHART) as chart:
        crds = chart.crds
    return tuple(d for crd in crds for d in load_all(crd["data"]))


def chart_crd_docs() -> list[Doc]:
    """The chart's crds/ (what ``helm install`` creates first), loaded by Helm (read-only)."""
    return list(_chart_crd_docs())


@functools.cache
def kustomize_text(path: str) -> str:
    """``kubectl kustomize manifests/<path>`` with the real kubectl."""
    result = subprocess.run(
        [kubectl_path(), "kustomize", str(MANIFESTS / path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize {path} failed:\n{result.stderr}"
    return result.stdout


@functools.cache
def _kustomize_docs(path: str) -> tuple[Doc, ...]:
    return tuple(load_all(kustomize_text(path)))


def kustomize_docs(path: str) -> list[Doc]:
    """The objects ``kubectl kustomize`` renders (cached: treat them as read-only)."""
    return list(_kustomize_docs(path))


def find(
    docs: Iterable[Doc], kind: str, name: str | None = None, namespace: str | None = None
) -> list[Doc]:
    return [
        d
        for d in docs
        if d["kind"] == kind
        and (name is None or d["metadata"]["name"] == name)
        and (namespace is None or d["metadata"].get("namespace") == namespace)
    ]


def one(
    docs: Iterable[Doc], kind: str, name: str | None = None, namespace: str | None = None
) -> Doc:
    found = find(docs, kind, name, namespace)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(docs: Iterable[Doc]) -> Doc:
    deployment = one(docs, "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    return dict(containers[0])


# --- applying to the real cluster --------------------------------------------------------------

CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "ClusterKopfPeering",
    "FlowSchema",
    "PriorityLevelConfiguration",
}


def apply_crds_and_wait(api: KubeAPI, crds: Sequence[Doc]) -> None:
    api.apply(dump_all(crds))
    names = [f"crd/{c['metadata']['name']}" for c in crds]
    api.kubectl("wait", "--for=condition=Established", *names, "--timeout=60s")


def ensure_namespaces(api: KubeAPI, names: Iterable[str]) -> None:
    existing = {ns["metadata"]["name"] for ns in api.get_json("namespaces")["items"]}
    missing = sorted(set(names) - existing)
    if missing:
        # `kubectl apply`: the `kube` fixture deletes what was applied when the test ends
        api.apply(
            *(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
                for name in missing
            )
        )


# prometheus-operator's ServiceMonitor CRD reduced to what the API server needs to serve the kind
# (the real one is ~1000 lines of schema; here only the kind matters).
SERVICEMONITOR_CRD: Doc = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {
            "kind": "ServiceMonitor",
            "listKind": "ServiceMonitorList",
            "plural": "servicemonitors",
            "singular": "servicemonitor",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}


def install(api: KubeAPI, docs: Sequence[Doc], crds: Sequence[Doc] = ()) -> str:
    """What an install does: CRDs first (established), then everything else with one
    ``kubectl apply -f -``. Namespaces the objects live in are created when the manifests do not
    create them (like ``helm install --create-namespace``)."""
    crds = [*crds, *find(docs, "CustomResourceDefinition")]
    if find(docs, "ServiceMonitor"):
        crds.append(SERVICEMONITOR_CRD)
    if crds:
        apply_crds_and_wait(api, crds)
    rest = [d for d in docs if d["kind"] != "CustomResourceDefinition"]
    declared = {d["metadata"]["name"] for d in find(rest, "Namespace")}
    ensure_namespaces(
        api, {d["metadata"]["namespace"] for d in rest if d["metadata"].get("namespace")} - declared
    )
    return api.apply(dump_all(rest)).stdout


def assert_installed(api: KubeAPI, docs: Sequence[Doc], apply_output: str) -> None:
    """Every object was accepted and reads back; the CRD is served; RBAC is stored as sent."""
    created = [line for line in apply_output.splitlines() if line.strip()]
    assert len(created) == len([d for d in docs if d["kind"] != "CustomResourceDefinition"]), (
        apply_output
    )
    assert all(line.endswith(" created") for line in created), apply_output
    # Read everything back: one `kubectl get` per namespace (cluster-scoped objects with "").
    by_namespace: dict[str, list[Doc]] = {}
    for doc in docs:
        namespace = "" if doc["kind"] in CLUSTER_SCOPED else doc["metadata"]["namespace"]
        by_namespace.setdefault(namespace, []).append(doc)
    for namespace, group in by_namespace.items():
        refs = [f"{_qualified(d)}/{d['metadata']['name']}" for d in group]
        stored = api.get_json(*refs, *(["-n", namespace] if namespace else []))
        items = stored["items"] if stored.get("kind") == "List" else [stored]
        assert [(i["kind"], i["metadata"]["name"]) for i in items] == [
            (d["kind"], d["metadata"]["name"]) for d in group
        ]
        for sent, back in zip(group, items, strict=True):
            if sent["kind"] in ("ClusterRole", "Role"):
                assert back["rules"] == sent["rules"], f"{sent['kind']} rules changed"
            if sent["kind"] in ("ClusterRoleBinding", "RoleBinding"):
                assert back["roleRef"] == sent["roleRef"]
                assert back["subjects"] == sent["subjects"]
            if sent["kind"] in ("FlowSchema", "PriorityLevelConfiguration"):
                assert back["spec"] == sent["spec"], f"{sent['kind']} spec changed"
    # The CRD is served: its short name resolves through discovery and lists (the shared cluster
    # may hold other tests' objects, so not necessarily none).
    listing = api.kubectl("get", "icap", "-A")
    assert listing.returncode == 0
    # `explain` reads the OpenAPI document, which the apiserver publishes a CRD's schema in some
    # seconds after the CRD is established: on a fresh cluster (this module run alone) the first
    # try can miss it
    wait_for(
        lambda: (
            api.kubectl("explain", "inferencecapacity.spec.targetRef", check=False).returncode == 0
        ),
        timeout=120,
        interval=1.0,
        message="kubectl explain inferencecapacity.spec.targetRef (the CRD's OpenAPI schema)",
    )


def _qualified(doc: Doc) -> str:
    """kind.group, unambiguous for `kubectl get` (e.g. events vs events.k8s.io)."""
    group = doc["apiVersion"].rpartition("/")[0]
    return f"{doc['kind'].lower()}.{group}" if group else doc["kind"].lower()


# --- copies of generated files --------------------------------------------------------------


def test_crd_copies_are_identical_to_the_generated_crd() -> None:
    generated = (REPO / "crds" / ICAP_CRD_FILE).read_text()
    for copy in (CHART / "crds" / ICAP_CRD_FILE, MANIFESTS / "base" / "crds" / ICAP_CRD_FILE):
        assert copy.read_text() == generated, (
            f"{copy.relative_to(REPO)} is stale: run "
            f"python -m inference_capacity.api.crd --write {copy.parent.relative_to(REPO)}/"
        )


def test_peering_crds_are_kopfs_and_identical_in_chart_and_base() -> None:
    chart = (CHART / "crds" / "kopf-peerings.kopf.dev.yaml").read_text()
    assert (MANIFESTS / "base" / "crds" / "kopf-peerings.kopf.dev.yaml").read_text() == chart
    docs = [d for d in yaml.safe_load_all(chart) if d]
    assert {(d["metadata"]["name"], d["spec"]["scope"]) for d in docs} == {
        ("kopfpeerings.kopf.dev", "Namespaced"),
        ("clusterkopfpeerings.kopf.dev", "Cluster"),
    }
    assert "MIT License" in chart  # attribution travels with the copy
    # Kopf >= 1.29 looks these up as kopf.dev/v1 (kopf._cogs.structs.references).
    from kopf._cogs.structs import references

    wanted = {
        (s.group, s.version, s.any_name)
        for s in (references.CLUSTER_PEERINGS_K, references.NAMESPACED_PEERINGS_K)
    }
    assert wanted == {
        (d["spec"]["group"], d["spec"]["versions"][0]["name"], d["spec"]["names"]["plural"])
        for d in docs
    }


def test_dashboard_is_valid_json_identical_in_chart_and_kustomize() -> None:
    chart = (CHART / "dashboards" / "inference-capacity.json").read_text()
    assert (MANIFESTS / "components" / "dashboard" / "inference-capacity.json").read_text() == chart
    dashboard = json.loads(chart)
    titles = [p["title"] for p in dashboard["panels"]]
    assert "KV cache blocks: predicted vs observed" in titles
    assert "Ledger of $name, rank $rank" in titles
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "namespace", "name", "rank"}


def test_dashboard_queries_only_metrics_the_operator_exports() -> None:
    """Every series and label the dashboard queries is registered by the operator's metrics
    module (a renamed metric would leave an empty panel otherwise)."""
    from prometheus_client.metrics import MetricWrapperBase

    from inference_capacity.controller import metrics

    suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"]}
    exported: dict[str, set[str]] = {}
    for collector in vars(metrics).values():
        if isinstance(collector, MetricWrapperBase):
            for family in collector.describe():
                for suffix in suffixes[family.type]:
                    exported[family.name + suffix] = set(collector._labelnames)
    # the per-resource series (one row per resource, written at each scrape)
    for family_name, labelnames in metrics.per_resource_labels().items():
        exported[family_name] = set(labelnames)
    dashboard = json.loads((CHART / "dashboards" / "inference-capacity.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = set()
    for query in queries:
        for metric, selector in re.findall(r"(inference_capacity_\w+)(\{[^}]*\})?", query):
            assert metric in exported, f"{metric} is not exported by controller/metrics.py"
            used.add(metric)
            labels = set(re.findall(r"(\w+)\s*=~?", selector))
            assert labels <= exported[metric], f"{metric}: labels {labels - exported[metric]}"
        for label in re.findall(r"by \(([^)]*)\)", query):
            names = {n.strip() for n in label.split(",")} - {"le"}
            assert any(names <= exported[m] for m in re.findall(r"inference_capacity_\w+", query))
    for core in (
        "inference_capacity_predicted_num_gpu_blocks",
        "inference_capacity_observed_num_gpu_blocks",
        "inference_capacity_ledger_bytes",
    ):
        assert core in used  # predicted vs observed KV, the ledger per resource


def test_manifest_examples_are_the_repository_examples() -> None:
    originals = sorted(p.name for p in (REPO / "examples").glob("*.yaml"))
    kustomization = yaml.safe_load((MANIFESTS / "examples" / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == originals
    for name in originals:
        assert (MANIFESTS / "examples" / name).read_text() == (
            REPO / "examples" / name
        ).read_text(), f"manifests/examples/{name} is stale"


def test_every_yaml_and_json_file_parses() -> None:
    files = [*CHART.rglob("*.json"), *MANIFESTS.rglob("*.json")]
    for path in files:
        json.loads(path.read_text())
    yamls = [
        p
        for p in [*CHART.rglob("*.yaml"), *MANIFESTS.rglob("*.yaml")]
        if "templates" not in p.parts
    ]
    assert len(yamls) > 15
    for path in yamls:
        list(yaml.safe_load_all(path.read_text()))


# --- Dockerfile (static: no container engine here) -------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuations joined and comments dropped."""
    text = (REPO / "Dockerfile").read_text()
    text = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    out = []
    for line in text.splitlines():
        if line.strip():
            instruction, _, rest = line.strip().partition(" ")
            out.append((instruction.upper(), rest.strip()))
    return out


def test_dockerfile_base_images_are_pinned_slim_python() -> None:
    instructions = _dockerfile()
    args: dict[str, str] = dict(
        rest.split("=", 1) for ins, rest in instructions if ins == "ARG" and "=" in rest
    )
    froms = [rest.split()[0] for ins, rest in instructions if ins == "FROM"]
    assert len(froms) >= 1
    for image in froms:
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        name, _, digest = image.partition("@")
        repo, _, tag = name.partition(":")
        assert repo in ("python", "docker.io/library/python"), image
        assert digest.startswith("sha256:") or (tag and tag != "latest"), (
            f"{image}: pin a tag (not latest) or a digest"
        )
        assert tag.startswith("3.11") and "slim" in tag, f"{image}: expected python:3.11-slim*"


def test_dockerfile_runs_the_operator_as_non_root() -> None:
    instructions = _dockerfile()
    final = instructions[max(i for i, (ins, _) in enumerate(instructions) if ins == "FROM") :]
    users = [rest for ins, rest in final if ins == "USER"]
    assert users, "the final stage must set USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0") and user.isdigit(), (
        "use a numeric non-root uid so runAsNonRoot can verify it"
    )
    assert user == "65532"
    entrypoints = [rest for ins, rest in final if ins == "ENTRYPOINT"]
    assert entrypoints and json.loads(entrypoints[-1]) == ["inference-capacity", "run"], (
        "exec-form ENTRYPOINT [inference-capacity, run]"
    )
    assert not [rest for ins, rest in final if ins == "CMD"]
    exposed = {p for ins, rest in final if ins == "EXPOSE" for p in rest.split()}
    assert exposed == {"8080", "9090"}


def test_dockerfile_installs_the_package_from_the_repo_and_ignores_the_rest() -> None:
    instructions = _dockerfile()
    runs = " ".join(rest for ins, rest in instructions if ins == "RUN")
    assert "pip install ." in runs
    copied = [
        shlex.split(rest)[:-1]
        for ins, rest in instructions
        if ins == "COPY" and "--from" not in rest
    ]
    sources = {s.rstrip("/") for c in copied for s in c}
    assert sources == {"pyproject.toml", "README.md", "operator"}
    # .dockerignore: everything out, then exactly what the COPY lines need back in.
    ignore = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "**"
    assert {line[1:].rstrip("/") for line in ignore if line.startswith("!")} == sources
    for secret_ish in (".venv", ".git", "tests"):
        assert not any(line.startswith(f"!{secret_ish}") for line in ignore)
    # The console script the ENTRYPOINT names exists in the package metadata.
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^inference-capacity = "inference_capacity\.cli:main"', pyproject, re.M)


def test_operator_cli_accepts_the_flags_the_manifests_pass() -> None:
    """The Deployment's args parse with the real CLI parser (chart and kustomize, all modes)."""
    from inference_capacity.cli import build_parser

    parser = build_parser()
    chart_values: list[dict[str, Any]] = [
        {},
        {"replicaCount": 2},
        {"watchNamespaces": ["a", "b"], "operator": {"verbose": True}},
    ]
    variants = [container(chart_docs(v)) for v in chart_values]
    variants += [container(kustomize_docs(f"overlays/{o}")) for o in OVERLAYS]
    for c in variants:
        parsed = parser.parse_args(["run", *c["args"]])
        assert parsed.metrics_port == 9090
        assert parsed.liveness == "http://0.0.0.0:8080/healthz"
        assert parsed.standalone != bool(parsed.peering), c["args"]
