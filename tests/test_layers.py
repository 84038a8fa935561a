"""The package is layered without a loop (issue 10): a module may import its own layer and the
layers below it, never one above. Every import of ``inference_capacity.*`` counts: absolute and
relative, at module level, inside functions and under ``TYPE_CHECKING`` (a lazy import hides a
loop from the interpreter, not from the design).

Bottom to top:

0. ``units``, ``vocab``, ``catalog`` (data): byte units and value sets
1. ``model``: config.json → shapes, quantization, checkpoints, model sources
2. ``hardware``: the GPU catalog
3. ``ledger``: the exact ledger terms (``ledger.kv``, ``ledger.weights``)
4. ``engines``: vLLM's rules (versions, flags, startup prediction)
5. ``budget``: the per-rank ledger assembled from a startup prediction
6. ``sizing``: workload, distributions, latency, rollout, GPUs per pod
7. ``observe``: Prometheus observations folded into the workload
8. ``api``: the InferenceCapacity spec and status, the CRD
9. planner: ``planner``, ``whatif``, ``report``, ``resolve``
10. decision: ``decide``, ``patching``
11. adapters: ``cli``, ``controller``
"""

from __future__ import annotations

import ast
from pathlib import Path

import inference_capacity

PACKAGE = "inference_capacity"
ROOT = Path(inference_capacity.__file__).resolve().parent

LAYERS: tuple[tuple[str, ...], ...] = (
    ("units", "vocab", "catalog", "settings", "memo"),
    ("model",),
    ("hardware",),
    ("ledger",),
    ("engines",),
    ("budget",),
    ("sizing",),
    ("observe",),
    ("api",),
    ("planner", "whatif", "report", "resolve", "risks"),
    ("decide", "patching", "decision", "evaluate"),
    # ui: the what-if page, the CLI's plan behind an HTTP API (``inference-capacity ui``)
    ("cli", "controller", "ui"),
)
_LAYER_OF = {top: n for n, tops in enumerate(LAYERS) for top in tops}
_NAMES = {n: "/".join(tops) for n, tops in enumerate(LAYERS)}


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    out: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([PACKAGE, *parts])] = path
    return out


MODULES = _modules()


def _layer(module: str) -> int | None:
    """The layer of a module; None for the package root (it imports nothing)."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    return _LAYER_OF.get(parts[1], -1)


def _imports(module: str, path: Path) -> set[str]:
    """The ``inference_capacity`` modules ``module`` imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                base = here[: len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                # `from . import k8s` imports the module k8s; `from .x import y` imports x
                found.add(sub if sub in MODULES else target)
    return found


def _edges() -> list[tuple[str, str]]:
    return [(m, t) for m, path in MODULES.items() for t in sorted(_imports(m, path))]


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in MODULES if _layer(m) == -1)
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"


def test_no_module_imports_a_higher_layer() -> None:
    bad = []
    for module, target in _edges():
        lm, lt = _layer(module), _layer(target)
        if lt is None:
            bad.append(f"{module} -> {target} (the package root)")
        elif lm is not None and lt > lm:
            bad.append(f"{module} [{lm} {_NAMES.get(lm)}] -> {target} [{lt} {_NAMES.get(lt)}]")
    for edge in bad:
        print(edge)
    assert not bad, "imports of a higher layer:\n" + "\n".join(bad)


def test_the_walk_sees_relative_and_function_level_imports() -> None:
    edges = set(_edges())
    # relative, module level
    assert ("inference_capacity.planner", "inference_capacity.budget") in edges
    # relative with a module name: `from . import k8s` in controller/handlers.py
    assert ("inference_capacity.controller.handlers", "inference_capacity.controller.k8s") in edges
    # function level: cli.py imports the controller inside its `operator` command
    assert ("inference_capacity.cli", "inference_capacity.controller.main") in edges
    # the vLLM rules use the exact ledger terms below them
    assert ("inference_capacity.engines.vllm", "inference_capacity.ledger.kv") in edges


def test_a_higher_import_is_reported(tmp_path: Path) -> None:
    # a self-check of the walk on a synthetic module: model importing engines must show up
    path = tmp_path / "fake.py"
    path.write_text("def f():\n    from ..engines.vllm import predict_startup\n")
    found = _imports("inference_capacity.model.fake", path)
    assert found == {"inference_capacity.engines.vllm"}
    assert _layer("inference_capacity.engines.vllm") == 4
    assert _layer("inference_capacity.model.fake") == 1
