"""Why a container's vLLM flags cannot be read or rewritten safely.

Every refusal of the package is a :class:`VllmArgsError`: the parser and the rewriter refuse
rather than guess, and the controller turns the error's CamelCase ``reason`` into a status
condition. Nothing here depends on the rest of the package.
"""

from __future__ import annotations

__all__ = ["VllmArgsError"]


class VllmArgsError(ValueError):
    """A container whose vLLM flags cannot be read or rewritten safely.

    ``reason`` is a CamelCase machine reason for a status condition:
    ``NoVllmContainer``, ``ContainerNotFound``, ``AmbiguousVllmContainer``,
    ``UnsafeShellForm``, ``ValueFromReference``, ``UnresolvedReference``,
    ``UnsupportedReference``, ``SharedReference``, ``DuplicateFlag``,
    ``MissingFlagValue``.
    """

    def __init__(
        self, reason: str, container: str | None, detail: str, flag: str | None = None
    ) -> None:
        where = f"container {container!r}" if container is not None else "pod spec"
        what = f", flag --{flag}" if flag is not None else ""
        super().__init__(f"{where}{what}: {detail}")
        self.reason = reason
        self.container = container
        self.flag = flag


def _unsafe(container: str, detail: str, flag: str | None = None) -> VllmArgsError:
    return VllmArgsError("UnsafeShellForm", container, detail, flag)
