"""Pod logs on the real control plane: kwok serves a file as a container's log through its kubelet
API, so ``kubectl logs`` and the apiserver's ``pods/log`` return it as they would a kubelet's.

``write_cri_log`` writes lines in the CRI log format kwok reads (``<RFC 3339 time> stdout F
<line>``, k8s.io/cri-client/pkg/logs); ``cluster_logs`` is the kwok ``ClusterLogs`` object that
points every pod of a namespace (one container, or all) at a file (and at a previous log, for a
container that restarted)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

KWOK_API = "kwok.x-k8s.io/v1alpha1"


def write_cri_log(path: Path, lines: Iterable[str | bytes]) -> Path:
    """Each line as one CRI log entry (a full line, tag F), timestamps one microsecond apart."""
    out = bytearray()
    for i, line in enumerate(lines):
        raw = line.encode() if isinstance(line, str) else line
        ts = f"2026-12-01T00:00:00.{i:06d}000Z"
        out += ts.encode() + b" stdout F " + raw.replace(b"\n", b" ") + b"\n"
    path.write_bytes(bytes(out))
    return path


def cluster_logs(
    name: str,
    namespace: str,
    logs_file: Path,
    containers: tuple[str, ...] = (),
    previous_logs_file: Path | None = None,
) -> dict[str, Any]:
    """A ``ClusterLogs``: the pods of ``namespace`` log ``logs_file`` (``containers``: those only;
    empty: every container)."""
    entry: dict[str, Any] = {"logsFile": str(logs_file)}
    if containers:
        entry["containers"] = list(containers)
    if previous_logs_file is not None:
        entry["previousLogsFile"] = str(previous_logs_file)
    return {
        "apiVersion": KWOK_API,
        "kind": "ClusterLogs",
        "metadata": {"name": name},
        "spec": {"selector": {"matchNamespaces": [namespace]}, "logs": [entry]},
    }
