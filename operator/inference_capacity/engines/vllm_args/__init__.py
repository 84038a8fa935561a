"""Read and rewrite vLLM command-line flags inside a Kubernetes container spec.

Why this package exists
-----------------------
The operator sizes a vLLM fleet and must then *apply* the result
(``--gpu-memory-utilization``, ``--max-num-seqs`` and, where the policy asks,
``--max-model-len``, ``--max-num-batched-tokens``, ``--kv-cache-dtype``) to a
Deployment that a human wrote. Real Deployments spell a vLLM launch in many ways:
``args: [--flag, value]``, ``--flag=value``, ``command: [vllm, serve, MODEL]``,
``python -m vllm.entrypoints.openai.api_server``, the image entrypoint with flags only
in ``args``, a ``sh -c`` script, ``$(VAR)`` references to the container's ``env``...

Two rules drive the design:

* **Minimal diff.** The rewrite touches only the list element (or the characters of
  the shell word) holding the value it changes, or appends at the end of the vLLM
  invocation; every other element stays byte-identical, so a GitOps diff shows
  exactly what the operator did and a no-op rewrite is the identity.
* **Refuse rather than guess.** When the value cannot be changed safely (a shell
  expansion after ``vllm serve`` that might set the same flag, a ``valueFrom``
  reference, ...; a flag given twice is read, and rewritten, where it is given last,
  as vLLM's argparse keeps the last value) a :class:`VllmArgsError` carries a CamelCase
  ``reason`` that the controller turns into a status condition.

The package is pure: containers are plain mappings as in
``spec.template.spec.containers[i]``; nothing here talks to Kubernetes.

Layers, in the order Kubernetes and the shell apply them:

1. Kubernetes expands ``$(VAR)`` in ``command``/``args`` (``$$`` escapes ``$``) from the
   container's environment; unknown names are left as written.
2. For a ``sh -c`` form, the shell splits the script into words (quotes, escapes,
   ``$VAR`` expansions, operators, redirections).
3. vLLM's argparse reads the words after the entry point (``vllm serve`` or
   ``python -m vllm.entrypoints...``).

Each token remembers where its raw text lives (list element, or span inside the
script) so that a rewrite can splice exactly those characters.

Modules, each importing only those above it:

* :mod:`.errors` -- :class:`VllmArgsError`, the one exception.
* :mod:`.vocabulary` -- flag names, aliases and arity (the boolean flags), value comparison.
* :mod:`.environment` -- layer 1, Kubernetes ``$(VAR)`` expansion from the container's ``env``.
* :mod:`.shell` -- layer 2, the shell lexer for ``sh -c`` scripts.
* :mod:`.entrypoints` -- which container runs vLLM and where its entry point is.
* :mod:`.parse` -- layer 3, reading the flags argparse-like into occurrences and hazards.
* :mod:`.rewrite` -- :func:`rewrite_flags`, the minimal-diff splice.

Callers import from the package; the modules are its parts.
"""

from .entrypoints import find_vllm_container, parse_image_version, runs_vllm
from .environment import read_env
from .errors import VllmArgsError
from .parse import hidden_flags, read_flags, unresolved_flags
from .rewrite import rewrite_flags
from .vocabulary import (
    HUMAN_READABLE_INT_FLAGS,
    SIZING_FLAGS,
    find_conflicts,
    flag_int,
    normalise_flag,
)

__all__ = [
    "HUMAN_READABLE_INT_FLAGS",
    "SIZING_FLAGS",
    "VllmArgsError",
    "find_conflicts",
    "find_vllm_container",
    "flag_int",
    "hidden_flags",
    "normalise_flag",
    "parse_image_version",
    "read_env",
    "read_flags",
    "rewrite_flags",
    "runs_vllm",
    "unresolved_flags",
]
