"""Kopf handlers and Kubernetes I/O (thin: no arithmetic here; the core computes).

``run_operator`` (``inference-capacity run``) is the entry point; the handlers register when it
starts."""

from .main import run_operator

__all__ = ["run_operator"]
