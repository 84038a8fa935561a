"""Kopf handlers and Kubernetes I/O (thin: no arithmetic here; the core computes)."""
