import os

pytest_plugins = ["tests.kubeapi.fixtures", "tests.realk8s.fixtures", "tests.promfixtures"]

# No test reaches the Hugging Face Hub: a Hub lookup that a test does not point at its own test
# Hub (tests/hubserver.py) fails at once on a closed local port, in this process and in every
# operator or CLI subprocess (they inherit the environment).
os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
