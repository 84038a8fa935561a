"""An in-memory Kubernetes API server for tests (kubectl, Kopf and the kubernetes client).

Specification: ``/work/shared/research/apiserver-emulator.md``.

In tests (the plugin is registered by ``tests/conftest.py``)::

    def test_something(kubeapi):            # a fresh server per test
        kubeapi.apply(manifest_dict_or_yaml)  # kubectl apply -f - (the wheel's kubectl)
        kubeapi.kubectl("get", "pods")        # CompletedProcess; raises on failure
        api = kubeapi.api_client()            # kubernetes.client.ApiClient
        kubeapi.faults.fail(503, "PATCH", r"/widgets/", times=2)
        kubeapi.faults.expire(); kubeapi.faults.drop_watches()
        kubeapi.requests.not_allowed_by(role["rules"])
        subprocess.run([...], env=kubeapi.env)  # KUBECONFIG and KUBECACHEDIR set

Standalone: ``python -m tests.kubeapi --port 8080 --kubeconfig /tmp/kubeconfig -v``; the admin
API is under ``/_kubeapi/`` (``faults``, ``requests``, ``drop-watches``, ``expire``).
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
