"""An in-memory Kubernetes API server (kubectl, Kopf and the kubernetes client speak to it).

Kept for one job only: the in-memory column of ``benchmarks/reconcile.py``, which measures the
operator's own cost against a server that costs almost nothing (a real kube-apiserver on the same
cores cannot show that). Every test runs on the real control plane of ``tests/realk8s``; the
emulator's own tests were removed with the move, since the real server now covers what they
checked (kubectl, Kopf, the client, faults through ``tests/realk8s/proxy.py``).

Standalone: ``python -m tests.kubeapi --port 8080 --kubeconfig /tmp/kubeconfig -v``.
"""

from tests.realk8s.faults import FaultRule, Faults, RequestLog, RequestRecord

from .errors import ApiError
from .server import KubeAPIServer, write_kubeconfig

__all__ = [
    "ApiError",
    "FaultRule",
    "Faults",
    "KubeAPIServer",
    "RequestLog",
    "RequestRecord",
    "write_kubeconfig",
]
