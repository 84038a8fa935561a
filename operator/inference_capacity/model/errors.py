"""Errors raised when a model config cannot be turned into shapes."""

from __future__ import annotations


class ModelConfigError(ValueError):
    """A config.json (or model flag) the ledger cannot use; names the offending field."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class UnknownModelError(ValueError):
    """A model name that is neither in the built-in catalog nor a readable config.json."""
