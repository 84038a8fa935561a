"""Finding the vLLM invocation: which container runs vLLM, and where its arguments start.

vLLM's argparse reads the words after the entry point: ``vllm serve``, ``python -m
vllm.entrypoints.openai.api_server`` (or ``...cli.main serve``), a ``sh -c`` script that runs
one of them, or the entrypoint of a ``vllm-openai`` image with the flags in ``args`` alone. The
image tag also tells the vLLM version (:func:`parse_image_version`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from .errors import VllmArgsError

__all__ = ["find_vllm_container", "parse_image_version", "runs_vllm"]


_API_MODULES: Final = frozenset(
    {"vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"}
)
_CLI_MODULE: Final = "vllm.entrypoints.cli.main"
_PYTHON_NOARG_OPTS: Final = frozenset({"-u", "-B", "-O", "-OO", "-s", "-S", "-E", "-I", "-b"})
_PYTHON_RE: Final = re.compile(r"python(\d+(\.\d+)?)?")
_SHELLS: Final = frozenset({"sh", "bash", "dash", "ash", "ksh", "zsh"})
# Images whose entrypoint is the OpenAI server, so ``args`` alone are its arguments.
_ENTRYPOINT_IMAGES: Final = frozenset({"vllm-openai"})
_SCRIPT_MENTIONS_VLLM: Final = re.compile(
    r"\bvllm\s+serve\b|\bvllm\.entrypoints\.(?:openai\.api_server|api_server|cli\.main)\b"
)


_VERSION_TAG: Final = re.compile(
    r"v?(?P<version>\d+\.\d+(?:\.\d+)*(?:(?:\.?post|\.?dev|rc|a|b)\d+)?)(?:-[A-Za-z0-9_.]+)?"
)


def parse_image_version(image: str) -> str | None:
    """vLLM version from an image reference's tag, or None when the tag is not a version.

    ``vllm/vllm-openai:v0.19.0`` -> ``0.19.0``; ``...:0.6.4.post1`` -> ``0.6.4.post1``;
    a digest is ignored; ``latest``, ``nightly`` or no tag -> None.
    """
    name = image.split("@", 1)[0]
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon <= last_slash:
        return None
    match = _VERSION_TAG.fullmatch(name[colon + 1 :])
    return match.group("version") if match else None


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _entry_at(words: Sequence[str], k: int) -> tuple[int, bool] | None:
    """If a vLLM entry point starts at ``words[k]``: (its length, positional model allowed)."""
    head = _basename(words[k])
    if head == "vllm":
        return (2, True) if k + 1 < len(words) and words[k + 1] == "serve" else None
    if not _PYTHON_RE.fullmatch(head):
        return None
    j = k + 1
    while j < len(words) and words[j] in _PYTHON_NOARG_OPTS:
        j += 1
    if j + 1 >= len(words) or words[j] != "-m":
        return None
    if words[j + 1] in _API_MODULES:
        return j + 2 - k, False
    if words[j + 1] == _CLI_MODULE and j + 2 < len(words) and words[j + 2] == "serve":
        return j + 3 - k, True
    return None


def _shell_script_at(words: Sequence[str], k: int) -> int | None:
    """If ``words[k]`` is a shell run with ``-c``: the index of its script."""
    if _basename(words[k]) not in _SHELLS:
        return None
    j, command_mode = k + 1, False
    while j < len(words):
        arg = words[j]
        if arg in ("-o", "+o"):
            j += 2
        elif arg.startswith("--"):
            j += 1
        elif len(arg) > 1 and arg[0] in "-+":
            command_mode |= arg[0] == "-" and "c" in arg[1:]
            j += 1
        else:
            break
    return j if command_mode and j < len(words) else None


@dataclass(frozen=True)
class _Site:
    """Where a token's raw text lives: a list element, or a span of one (a shell script)."""

    field: str
    index: int
    span: tuple[int, int] | None = None


@dataclass(frozen=True)
class _Entry:
    kind: Literal["argv", "shell", "image"]
    position: int = 0  # index in the combined command+args list
    length: int = 0
    positional_model: bool = True


def _str_list(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def _argv(container: Mapping[str, Any]) -> list[tuple[_Site, str]]:
    """``command`` then ``args`` as Kubernetes concatenates them, with their sites."""
    out: list[tuple[_Site, str]] = []
    for name in ("command", "args"):
        values = _str_list(container.get(name)) or []
        out.extend((_Site(name, i), v) for i, v in enumerate(values))
    return out


def _is_entrypoint_image(image: Any) -> bool:
    if not isinstance(image, str):
        return False
    repository = image.split("@", 1)[0]
    if repository.rfind(":") > repository.rfind("/"):
        repository = repository[: repository.rfind(":")]
    return _basename(repository) in _ENTRYPOINT_IMAGES


def _find_entry(container: Mapping[str, Any]) -> _Entry | None:
    words = [text for _, text in _argv(container)]
    for k in range(len(words)):
        script = _shell_script_at(words, k)
        if script is not None and _SCRIPT_MENTIONS_VLLM.search(words[script]):
            return _Entry("shell", script)
        found = _entry_at(words, k)
        if found is not None:
            return _Entry("argv", k, found[0], found[1])
    if container.get("command") is None and _is_entrypoint_image(container.get("image")):
        return _Entry("image")
    return None


def runs_vllm(container: Mapping[str, Any]) -> bool:
    """Whether the container's command, args or image run a vLLM server."""
    return _find_entry(container) is not None


def _container_name(container: Mapping[str, Any]) -> str:
    name = container.get("name")
    return name if isinstance(name, str) else "<unnamed>"


def find_vllm_container(containers: Sequence[Mapping[str, Any]], name: str | None) -> int:
    """Index of the vLLM container: the one called ``name``, else the unique one running vLLM."""
    if name is not None:
        for index, container in enumerate(containers):
            if container.get("name") == name:
                if not runs_vllm(container):
                    raise VllmArgsError(
                        "NoVllmContainer",
                        name,
                        "no vLLM invocation found in its command, args or image entrypoint",
                    )
                return index
        raise VllmArgsError("ContainerNotFound", name, "no container with this name in the pod")
    matches = [i for i, c in enumerate(containers) if runs_vllm(c)]
    if not matches:
        raise VllmArgsError("NoVllmContainer", None, "no container runs vLLM")
    if len(matches) > 1:
        names = ", ".join(_container_name(containers[i]) for i in matches)
        raise VllmArgsError(
            "AmbiguousVllmContainer",
            None,
            f"several containers run vLLM ({names}); set targetRef.container",
        )
    return matches[0]
