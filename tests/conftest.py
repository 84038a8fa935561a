import os

pytest_plugins = ["tests.realk8s.fixtures", "tests.promfixtures"]

# No test reaches the Hugging Face Hub: a Hub lookup that a test does not point at its own test
# Hub (tests/hubserver.py) fails at once on a closed local port, in this process and in every
# operator or CLI subprocess (they inherit the environment).
os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# The operator refuses every fromPrometheus URL unless the cluster admin allows its prefix
# (--prometheus-allowed-url-prefix); the tests' Prometheus servers and stubs listen on
# 127.0.0.1, so the operators the tests start allow exactly that.
os.environ.setdefault(
    "INFERENCE_CAPACITY_PROMETHEUS_ALLOWED_URL_PREFIXES", "http://127.0.0.1:,https://127.0.0.1:"
)
# The stabilization windows default to 300 s when spec.policy leaves them null; the tests edit a
# resource many times a minute, so their operators default to none. Tests of the windows set
# spec.policy.stabilizationWindowSeconds / replicaStabilizationWindowSeconds themselves.
os.environ.setdefault("INFERENCE_CAPACITY_STABILIZATION_SECONDS", "0")
os.environ.setdefault("INFERENCE_CAPACITY_REPLICA_STABILIZATION_SECONDS", "0")
