"""inference-capacity: size vLLM fleets from a byte-exact GPU memory ledger.

The package is layered, bottom to top; a module imports its own layer and those below it only
(tests/test_layers.py enforces it):

0. ``units``, ``vocab``: byte units and the value sets; ``catalog`` holds the data files
1. ``model``: config.json → shapes, quantization, checkpoints, model sources
2. ``hardware``: the GPU catalog (``catalog/gpus.json``)
3. ``ledger``: the exact ledger terms, weights and KV cache
4. ``engines``: vLLM's rules: versions, flags, the startup prediction
5. ``budget``: the per-rank ledger of every byte, from a startup prediction
6. ``sizing``: workload, length distributions, latency, rollout headroom, GPUs per pod
7. ``observe``: Prometheus observations folded into the workload
8. ``api``: the InferenceCapacity spec and status, the CRD
9. ``planner``, ``whatif``, ``report``, ``resolve``: a plan from a spec, and its rendering
10. ``decide``, ``patching``: what to change on the target
11. ``cli``, ``controller``: the command line and the Kopf operator

Import from the layer modules; the root re-exports nothing.
"""

__all__: list[str] = []
