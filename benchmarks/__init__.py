"""Benchmarks, run from the repository root as modules so that ``tests`` (the in-memory
Kubernetes API, the Hub server, the checkpoint writer) imports without path tricks::

    python -m benchmarks.accuracy
    python -m benchmarks.sizing
    python -m benchmarks.plan_speed
    python -m benchmarks.model_resolution
    python -m benchmarks.reconcile --quick

``benchmarks.helpers`` replays public vLLM startup logs through the predictor (for
``benchmarks.accuracy`` and tests/test_vllm_predictor.py); it is not part of the package.
"""
