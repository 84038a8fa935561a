"""Read and rewrite vLLM command-line flags inside a Kubernetes container spec.

Why this module exists
----------------------
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
  reference, a flag given twice, ...) a :class:`VllmArgsError` carries a CamelCase
  ``reason`` that the controller turns into a status condition.

The module is pure: containers are plain mappings as in
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
"""

from __future__ import annotations

import copy
import math
import re
import shlex
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ..vllm_flags import human_readable_int

__all__ = [
    "SIZING_FLAGS",
    "VllmArgsError",
    "find_conflicts",
    "find_vllm_container",
    "hidden_flags",
    "normalise_flag",
    "parse_image_version",
    "read_env",
    "read_flags",
    "rewrite_flags",
    "runs_vllm",
    "unresolved_flags",
]

#: Flags the sizing policy sets on the Deployment.
SIZING_FLAGS: Final = (
    "gpu-memory-utilization",
    "max-num-seqs",
    "max-model-len",
    "max-num-batched-tokens",
    "kv-cache-dtype",
)

# Short spellings vLLM's argparse defines (``-tp``) plus the ``--tp``/``--pp``
# spellings people write in manifests.
_ALIASES: Final[Mapping[str, str]] = {
    "tp": "tensor-parallel-size",
    "pp": "pipeline-parallel-size",
    "dp": "data-parallel-size",
    "dcp": "decode-context-parallel-size",
    "q": "quantization",
}

# Flags that never take a separate value (argparse store_true/BooleanOptionalAction).
# Needed to tell ``--trust-remote-code MODEL`` (flag + positional) from ``--flag value``.
_BOOLEAN_FLAGS: Final = frozenset(
    {
        "allow-credentials",
        "async-scheduling",
        "disable-async-output-proc",
        "disable-cascade-attn",
        "disable-custom-all-reduce",
        "disable-fastapi-docs",
        "disable-frontend-multiprocessing",
        "disable-log-requests",
        "disable-log-stats",
        "disable-mm-preprocessor-cache",
        "disable-sliding-window",
        "disable-uvicorn-access-log",
        "enable-auto-tool-choice",
        "enable-chunked-prefill",
        "enable-dbo",
        "enable-eplb",
        "enable-expert-parallel",
        "enable-force-include-usage",
        "enable-log-outputs",
        "enable-log-requests",
        "enable-lora",
        "enable-lora-bias",
        "enable-prefix-caching",
        "enable-prompt-tokens-details",
        "enable-reasoning",
        "enable-request-id-headers",
        "enable-server-load-tracking",
        "enable-sleep-mode",
        "enable-ssl-refresh",
        "enable-tokenizer-info-endpoint",
        "enforce-eager",
        "engine-use-ray",
        "fully-sharded-loras",
        "headless",
        "return-tokens-as-token-ids",
        "skip-tokenizer-init",
        "trust-remote-code",
        "use-v2-block-manager",
        "worker-use-ray",
    }
)
_BOOL_WORDS: Final = frozenset({"true", "false", "True", "False"})

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
_NEGATIVE_NUMBER: Final = re.compile(r"-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_ENV_NAME: Final = re.compile(r"[A-Z_][A-Z0-9_]*")
_SOLE_REF: Final = re.compile(r"\$\(([^)]*)\)")
_INLINE_REF: Final = re.compile(r"(-[^$=\s'\"\\]*)=\$\(([^)]*)\)")
_VERSION_TAG: Final = re.compile(
    r"v?(?P<version>\d+\.\d+(?:\.\d+)*(?:(?:\.?post|\.?dev|rc|a|b)\d+)?)(?:-[A-Za-z0-9_.]+)?"
)
_SHELL_OPERATORS: Final = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")")
_REDIRECTIONS: Final = ("&>>", "<<<", "<<-", "<<", ">>", "<&", ">&", "<>", ">|", "&>", "<", ">")


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


# --------------------------------------------------------------------------- names


def normalise_flag(name: str) -> str:
    """Canonical vLLM flag name: no leading dashes, kebab-case, aliases resolved.

    ``-tp`` -> ``tensor-parallel-size``; ``--max_model_len`` -> ``max-model-len``.
    """
    bare = name.lstrip("-").replace("_", "-")
    return _ALIASES.get(bare, bare)


#: flags vLLM parses with ``human_readable_int`` (vllm/engine/arg_utils.py): ``32k``, ``1K``
HUMAN_READABLE_INT_FLAGS: Final = frozenset(
    {"max-model-len", "max-num-batched-tokens", "kv-cache-memory-bytes"}
)


def flag_int(name: str, text: str) -> int:
    """A running flag's integer value as vLLM reads it: ``human_readable_int`` for the flags
    vLLM parses with it (``--max-model-len 32k`` is 32000), ``int`` otherwise. ValueError when
    vLLM would refuse it."""
    if normalise_flag(name) in HUMAN_READABLE_INT_FLAGS:
        return human_readable_int(text)
    return int(text)


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


def find_conflicts(
    spec: Mapping[str, str | None],
    running: Mapping[str, str],
    unresolved: Collection[str] = (),
) -> dict[str, tuple[str, str]]:
    """Flags where the spec and the running flags disagree: ``{flag: (spec, running)}``.

    Numbers compare by value (``0.90`` == ``0.9``); flags in ``unresolved`` and flags
    that the spec leaves out (None) are not compared.
    """
    conflicts: dict[str, tuple[str, str]] = {}
    for key, wanted in spec.items():
        flag = normalise_flag(key)
        if wanted is None or flag in unresolved or flag not in running:
            continue
        if not _same_value(wanted, running[flag]):
            conflicts[flag] = (wanted, running[flag])
    return conflicts


def _same_value(left: str, right: str) -> bool:
    if left == right:
        return True
    try:
        a, b = float(left), float(right)
    except ValueError:
        return False
    return math.isfinite(a) and a == b


# ------------------------------------------------------------------ Kubernetes $(VAR)


@dataclass(frozen=True)
class _EnvVar:
    index: int
    value_from: bool
    known: bool
    value: str


@dataclass(frozen=True)
class _Env:
    """The names Kubernetes can expand in a container: its ``env``, maybe more.

    A name missing from ``env`` may still come from ``envFrom`` or, when it has the
    shape of one, from a service-link variable (``REDIS_SERVICE_HOST``); otherwise
    Kubernetes leaves ``$(name)`` as written.
    """

    vars: Mapping[str, _EnvVar]
    env_from: bool

    def left_as_written(self, name: str) -> bool:
        return name not in self.vars and not self.env_from and not _ENV_NAME.fullmatch(name)


@dataclass(frozen=True)
class _Ref:
    """A ``$(NAME)`` reference: its raw span and the span of its expansion."""

    name: str
    raw_start: int
    raw_end: int
    out_start: int
    out_end: int
    known: bool


@dataclass(frozen=True)
class _Expanded:
    """Text after Kubernetes expansion, with a map from each character to its raw span."""

    text: str
    raw_lo: tuple[int, ...]
    raw_hi: tuple[int, ...]
    opaque: tuple[bool, ...]
    refs: tuple[_Ref, ...]

    @property
    def unknown_at(self) -> int | None:
        return next((r.out_start for r in self.refs if not r.known), None)


def _expand(raw: str, env: _Env) -> _Expanded:
    """Kubernetes ``$(VAR)`` expansion (k8s.io/kubernetes third_party expansion.Expand).

    ``$$`` is one literal ``$``; ``$(NAME)`` becomes the value of a known literal env
    var; a reference whose value we cannot know stays as written with its characters
    marked opaque; a name Kubernetes cannot expand is plain text.
    """
    out: list[str] = []
    lo: list[int] = []
    hi: list[int] = []
    opaque: list[bool] = []
    refs: list[_Ref] = []

    def emit(text: str, start: int, end: int, is_opaque: bool = False) -> None:
        for ch in text:
            out.append(ch)
            lo.append(start)
            hi.append(end)
            opaque.append(is_opaque)

    i = 0
    while i < len(raw):
        if raw[i] != "$" or i + 1 >= len(raw):
            emit(raw[i], i, i + 1)
            i += 1
            continue
        nxt = raw[i + 1]
        close = raw.find(")", i + 2) if nxt == "(" else -1
        name = raw[i + 2 : close]
        if nxt == "$":
            emit("$", i, i + 2)
        elif close >= 0 and not env.left_as_written(name):
            var = env.vars.get(name)
            value = var.value if var is not None and var.known else None
            start = len(out)
            emit(raw[i : close + 1] if value is None else value, i, close + 1, value is None)
            refs.append(_Ref(name, i, close + 1, start, len(out), value is not None))
            i = close + 1
            continue
        else:
            emit("$", i, i + 1)
            emit(nxt, i + 1, i + 2)
        i += 2
    return _Expanded("".join(out), tuple(lo), tuple(hi), tuple(opaque), tuple(refs))


def _env_table(container: Mapping[str, Any]) -> _Env:
    """The container's ``env`` as Kubernetes resolves it (later entries see earlier ones)."""
    env_from = bool(container.get("envFrom"))
    table: dict[str, _EnvVar] = {}
    entries = container.get("env")
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        name: str = entry["name"]
        if entry.get("valueFrom") is not None:
            table[name] = _EnvVar(index, True, False, "")
            continue
        raw = entry.get("value")
        expanded = _expand(raw if isinstance(raw, str) else "", _Env(dict(table), env_from))
        table[name] = _EnvVar(index, False, expanded.unknown_at is None, expanded.text)
    return _Env(table, env_from)


def _k8s_escape(text: str) -> str:
    """Escape ``$`` so Kubernetes passes ``text`` through unexpanded."""
    return text.replace("$", "$$")


# ------------------------------------------------------------------ shell tokeniser


class _ShellError(Exception):
    pass


@dataclass(frozen=True)
class _Word:
    kind: Literal["word", "op", "redir"]
    start: int
    end: int
    text: str
    unknown_at: int | None = None
    dynamic: bool = False
    cmdsub: bool = False
    continuation: bool = False


@dataclass
class _WordBuilder:
    start: int
    end: int
    chars: list[str] = field(default_factory=list)
    unknown_at: int | None = None
    dynamic: bool = False
    cmdsub: bool = False
    continuation: bool = False
    quoted: bool = False

    def build(self) -> _Word:
        return _Word(
            "word",
            self.start,
            self.end,
            "".join(self.chars),
            self.unknown_at,
            self.dynamic,
            self.cmdsub,
            self.continuation,
        )


class _Lexer:
    """Splits a POSIX shell script into words, operators and redirections with offsets.

    It does not expand anything: a ``$VAR``, ``${...}``, ``$(...)`` or backtick keeps
    its text in the word and marks it dynamic (its value is unknown, and unquoted it
    may become several words). Characters from unresolved Kubernetes references are
    opaque word characters.
    """

    def __init__(self, text: str, opaque: Sequence[bool]) -> None:
        self.text = text
        self.opaque = opaque
        self.pos = 0
        self.tokens: list[_Word] = []
        self.word: _WordBuilder | None = None
        self.heredoc = False

    def run(self) -> list[_Word]:
        while self.pos < len(self.text):
            self._step()
        self._finish_word()
        return self.tokens

    def _step(self) -> None:
        i, c = self.pos, self.text[self.pos]
        if self.opaque[i]:
            j = i
            while j < len(self.text) and self.opaque[j]:
                j += 1
            self._add(self.text[i:j], i, j, unknown=True)
        elif c in " \t":
            self._finish_word()
            self.pos += 1
        elif c == "\n":
            self._finish_word()
            self.tokens.append(_Word("op", i, i + 1, "\n"))
            self.pos += 1
        elif c == "#" and self.word is None:
            end = self.text.find("\n", i)
            self.pos = len(self.text) if end < 0 else end
        elif c == "\\":
            self._backslash()
        elif c == "'":
            self._single_quote()
        elif c == '"':
            self._double_quote()
        elif c == "$":
            self._dollar(in_double_quotes=False)
        elif c == "`":
            self._backtick()
        elif c in "<>" or self.text.startswith("&>", i):
            self._redirection()
        elif c in "&|;()":
            self._operator()
        else:
            self._add(c, i, i + 1)

    def _add(
        self,
        text: str,
        start: int,
        end: int,
        *,
        unknown: bool = False,
        dynamic: bool = False,
        cmdsub: bool = False,
    ) -> None:
        if self.word is None:
            self.word = _WordBuilder(start, end)
        word = self.word
        if (unknown or dynamic) and word.unknown_at is None:
            word.unknown_at = len("".join(word.chars))
        word.chars.append(text)
        word.end = end
        word.dynamic |= dynamic
        word.cmdsub |= cmdsub
        self.pos = end

    def _finish_word(self) -> None:
        if self.word is not None:
            self.tokens.append(self.word.build())
            self.word = None

    def _backslash(self) -> None:
        i = self.pos
        if i + 1 >= len(self.text):
            self._add("\\", i, i + 1)
        elif self.text[i + 1] == "\n":
            if self.word is not None:
                self.word.continuation = True
            self.pos = i + 2
        else:
            self._add(self.text[i + 1], i, i + 2)
            assert self.word is not None
            self.word.quoted = True

    def _single_quote(self) -> None:
        i = self.pos
        close = self.text.find("'", i + 1)
        if close < 0:
            raise _ShellError("unterminated single quote")
        self._add(self.text[i + 1 : close], i, close + 1, unknown=any(self.opaque[i:close]))
        assert self.word is not None
        self.word.quoted = True

    def _double_quote(self) -> None:
        i = self.pos
        self._add("", i, i + 1)
        assert self.word is not None
        word = self.word
        word.quoted = True
        j = i + 1
        while True:
            if j >= len(self.text):
                raise _ShellError("unterminated double quote")
            ch = self.text[j]
            if self.opaque[j]:
                self._add(ch, j, j + 1, unknown=True)
            elif ch == '"':
                break
            elif ch == "\\" and j + 1 < len(self.text) and self.text[j + 1] in '$`"\\\n':
                if self.text[j + 1] == "\n":
                    word.continuation = True
                    self.pos = j + 2
                else:
                    self._add(self.text[j + 1], j, j + 2)
            elif ch == "$":
                self.pos = j
                self._dollar(in_double_quotes=True)
            elif ch == "`":
                self.pos = j
                self._backtick()
            else:
                self._add(ch, j, j + 1)
            j = self.pos
        word.end = j + 1
        self.pos = j + 1

    def _dollar(self, *, in_double_quotes: bool) -> None:
        i, text = self.pos, self.text
        nxt = text[i + 1] if i + 1 < len(text) and not self.opaque[i + 1] else ""
        if nxt == "(":
            end = self._matching(i + 2, "(", ")")
            self._add(text[i:end], i, end, dynamic=True, cmdsub=True)
        elif nxt == "{":
            end = self._matching(i + 2, "{", "}")
            self._add(text[i:end], i, end, dynamic=True)
        elif nxt and (nxt.isalpha() or nxt == "_"):
            end = i + 2
            while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                end += 1
            self._add(text[i:end], i, end, dynamic=True)
        elif nxt and nxt in "@*#?-$!0123456789":
            self._add(text[i : i + 2], i, i + 2, dynamic=True)
        elif nxt == "'" and not in_double_quotes:
            end = self._closing_quote(i + 2, "'")
            self._add(text[i:end], i, end, dynamic=True)
        else:
            self._add("$", i, i + 1)

    def _matching(self, start: int, opener: str, closer: str) -> int:
        depth, j = 1, start
        while j < len(self.text):
            ch = self.text[j]
            if ch == "\\":
                j += 2
                continue
            if ch in "'\"":
                j = self._closing_quote(j + 1, ch)
                continue
            depth += (ch == opener) - (ch == closer)
            j += 1
            if depth == 0:
                return j
        raise _ShellError(f"unterminated {opener}...{closer}")

    def _closing_quote(self, start: int, quote: str) -> int:
        j = start
        while j < len(self.text):
            if self.text[j] == "\\" and quote != "'":
                j += 2
                continue
            if self.text[j] == quote:
                return j + 1
            j += 1
        raise _ShellError(f"unterminated {quote}")

    def _backtick(self) -> None:
        i = self.pos
        end = self._closing_quote(i + 1, "`")
        self._add(self.text[i:end], i, end, dynamic=True, cmdsub=True)

    def _redirection(self) -> None:
        i, word = self.pos, self.word
        start = i
        if word is not None and "".join(word.chars).isdigit() and not word.quoted:
            start, self.word = word.start, None  # an IO number such as the 2 of 2>&1
        else:
            self._finish_word()
        op = next(op for op in _REDIRECTIONS if self.text.startswith(op, i))
        self.heredoc |= op in ("<<", "<<-")
        self.tokens.append(_Word("redir", start, i + len(op), op))
        self.pos = i + len(op)

    def _operator(self) -> None:
        self._finish_word()
        i = self.pos
        op = next(op for op in _SHELL_OPERATORS if self.text.startswith(op, i))
        self.tokens.append(_Word("op", i, i + len(op), op))
        self.pos = i + len(op)


def _simple_commands(tokens: Sequence[_Word]) -> list[list[_Word]]:
    """Words of each simple command; redirections and their targets are dropped."""
    commands: list[list[_Word]] = []
    current: list[_Word] = []
    skip_target = False
    for token in tokens:
        if token.kind == "op":
            if current:
                commands.append(current)
            current, skip_target = [], False
        elif token.kind == "redir":
            skip_target = True
        elif skip_target:
            skip_target = False
        else:
            current.append(token)
    if current:
        commands.append(current)
    return commands


# ---------------------------------------------------------- finding the invocation


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


# ------------------------------------------------------------------------ tokens


@dataclass(frozen=True)
class _Token:
    """One argument as vLLM sees it, and where its raw text lives."""

    text: str
    raw: str
    site: _Site
    unknown_at: int | None  # index in ``text`` of the first character whose value is unknown
    refs: tuple[_Ref, ...]  # Kubernetes references in ``raw`` (offsets relative to raw)
    dynamic: bool = False  # shell expansion: unknown value, may split into words
    cmdsub: bool = False
    continuation: bool = False
    split_ref: bool = False  # a known reference's value spreads over several shell words

    @property
    def shell(self) -> bool:
        return self.site.span is not None

    @property
    def known(self) -> bool:
        return self.unknown_at is None

    @property
    def opaque(self) -> bool:
        """The token starts with an unknown value: it might be anything, flags included."""
        return self.unknown_at == 0

    def looks_like_flag(self) -> bool:
        return (
            len(self.text) > 1
            and self.text.startswith("-")
            and not self.opaque
            and not _NEGATIVE_NUMBER.fullmatch(self.text)
        )


def _list_token(site: _Site, raw: str, env: _Env) -> _Token:
    expanded = _expand(raw, env)
    return _Token(expanded.text, raw, site, expanded.unknown_at, expanded.refs)


def _shell_token(word: _Word, script: str, expanded: _Expanded, site: _Site) -> _Token:
    lo, hi = expanded.raw_lo[word.start], expanded.raw_hi[word.end - 1]
    inside = tuple(
        _Ref(r.name, r.raw_start - lo, r.raw_end - lo, r.out_start, r.out_end, r.known)
        for r in expanded.refs
        if lo <= r.raw_start and r.raw_end <= hi
    )
    split = any(
        r.out_start < word.end
        and r.out_end > word.start
        and not (word.start <= r.out_start and r.out_end <= word.end)
        for r in expanded.refs
    )
    return _Token(
        word.text,
        script[lo:hi],
        _Site(site.field, site.index, (lo, hi)),
        word.unknown_at,
        inside,
        word.dynamic,
        word.cmdsub,
        word.continuation,
        split,
    )


# ------------------------------------------------------------------------ parsing


@dataclass(frozen=True)
class _Occurrence:
    name: str
    flag: _Token | None  # None for the positional model
    value: _Token | None  # separate value token; None for inline and boolean flags
    inline: bool
    text: str
    known: bool


@dataclass(frozen=True)
class _Parsed:
    container: str
    occurrences: tuple[_Occurrence, ...]
    hazards: tuple[VllmArgsError, ...]
    append_at: _Site  # span (offset, offset) for a shell script; span None: end of list
    env: _Env
    ref_counts: Counter[str]

    def find(self, name: str) -> list[_Occurrence]:
        return [o for o in self.occurrences if o.name == name]


def _parse_flags(
    tokens: Sequence[_Token], positional_model: bool, container: str
) -> tuple[list[_Occurrence], list[VllmArgsError]]:
    """argparse-like reading of the tokens after the entry point.

    Returns the occurrences and the hazards: things that make a rewrite unsafe
    (a token that may expand to flags, a command substitution).
    """
    occurrences: list[_Occurrence] = []
    hazards = [
        _unsafe(container, f"command substitution {t.raw!r} in the vLLM command")
        for t in tokens
        if t.cmdsub
    ]
    model_seen, options_done, i = not positional_model, False, 0
    dynamic_model: _Token | None = None  # ``vllm serve $X m``: $X was flags, not the model
    while i < len(tokens):
        token, used = tokens[i], 1
        if options_done or not token.looks_like_flag():
            if dynamic_model is not None:
                hazards.append(_may_hide_flags(container, dynamic_model))
                dynamic_model = None
            if (token.dynamic or token.opaque) and (model_seen or _all_positionals(token)):
                hazards.append(_may_hide_flags(container, token))
            elif not model_seen:
                occurrences.append(
                    _Occurrence("model", None, token, False, token.text, token.known)
                )
                model_seen = True
                dynamic_model = token if token.dynamic or token.opaque else None
        elif token.text == "--":
            options_done = True
        else:
            occurrence, used = _option_at(tokens, i)
            if occurrence is None:
                hazards.append(_may_hide_flags(container, token))
            else:
                occurrences.append(occurrence)
        i += used
    return occurrences, hazards


def _option_at(tokens: Sequence[_Token], i: int) -> tuple[_Occurrence | None, int]:
    """The option starting at ``tokens[i]`` and how many tokens it spans.

    None when the option's name itself is unknown (``--$NAME``).
    """
    token = tokens[i]
    known_upto = len(token.text) if token.unknown_at is None else token.unknown_at
    equals = token.text.find("=")
    if 0 <= equals < known_upto:
        name, value = normalise_flag(token.text[:equals]), token.text[equals + 1 :]
        return _Occurrence(name, token, None, True, value, token.known), 1
    if not token.known:
        return None, 1
    name = normalise_flag(token.text)
    nxt = tokens[i + 1] if i + 1 < len(tokens) else None
    if nxt is None or nxt.looks_like_flag():
        return _Occurrence(name, token, None, False, "true", True), 1
    if (name in _BOOLEAN_FLAGS or name.startswith("no-")) and nxt.text not in _BOOL_WORDS:
        return _Occurrence(name, token, None, False, "true", True), 1
    return _Occurrence(name, token, nxt, False, nxt.text, nxt.known), 2


def _all_positionals(token: _Token) -> bool:
    """``"$@"``/``$*``: the script's own arguments, which may be any flags."""
    return token.dynamic and any(s in token.text for s in ("$@", "$*", "${@", "${*"))


def _unsafe(container: str, detail: str, flag: str | None = None) -> VllmArgsError:
    return VllmArgsError("UnsafeShellForm", container, detail, flag)


def _may_hide_flags(container: str, token: _Token) -> VllmArgsError:
    reason = "UnsafeShellForm" if token.shell else "UnresolvedReference"
    return VllmArgsError(
        reason, container, f"{token.raw!r} after the vLLM entry point may expand to flags"
    )


def _count_refs(container: Mapping[str, Any], env: _Env) -> Counter[str]:
    """How many times each env var is referenced from command, args and other env values."""
    counts: Counter[str] = Counter(
        r.name for _, raw in _argv(container) for r in _expand(raw, env).refs
    )
    entries = container.get("env")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping) and isinstance(entry.get("value"), str):
            counts.update(r.name for r in _expand(entry["value"], env).refs)
    return counts


def _parse(container: Mapping[str, Any]) -> _Parsed:
    name = _container_name(container)
    entry = _find_entry(container)
    if entry is None:
        raise VllmArgsError(
            "NoVllmContainer", name, "no vLLM invocation found in its command, args or image"
        )
    env = _env_table(container)
    if entry.kind == "shell":
        tokens, positional, append_at, hazards = _shell_tokens(container, entry, env, name)
    else:
        tokens, positional, append_at = _list_tokens(container, entry, env)
        hazards = []
    occurrences, flag_hazards = _parse_flags(tokens, positional, name)
    return _Parsed(
        name,
        tuple(occurrences),
        tuple(hazards + flag_hazards),
        append_at,
        env,
        _count_refs(container, env),
    )


def _list_tokens(
    container: Mapping[str, Any], entry: _Entry, env: _Env
) -> tuple[list[_Token], bool, _Site]:
    argv = _argv(container)
    start = entry.position + entry.length if entry.kind == "argv" else 0
    tokens = [_list_token(site, raw, env) for site, raw in argv[start:]]
    has_args = _str_list(container.get("args")) is not None
    target = "args" if has_args or container.get("command") is None else "command"
    return tokens, entry.positional_model, _Site(target, -1)


def _shell_tokens(
    container: Mapping[str, Any], entry: _Entry, env: _Env, name: str
) -> tuple[list[_Token], bool, _Site, list[VllmArgsError]]:
    site, script = _argv(container)[entry.position]
    try:
        shlex.split(script)
    except ValueError as exc:
        raise _unsafe(name, f"shell script cannot be tokenised: {exc}") from exc
    expanded = _expand(script, env)
    lexer = _Lexer(expanded.text, expanded.opaque)
    try:
        words = lexer.run()
    except _ShellError as exc:
        raise _unsafe(name, f"shell script cannot be tokenised: {exc}") from exc
    found = [
        (command, k, hit) for command in _simple_commands(words) for k, hit in _first_entry(command)
    ]
    if len(found) != 1:
        detail = "several vLLM invocations" if found else "vLLM is not run as a simple command"
        raise _unsafe(name, f"shell script: {detail}")
    command, k, (length, positional) = found[0]
    tokens = [_shell_token(w, script, expanded, site) for w in command[k + length :]]
    end = expanded.raw_hi[command[-1].end - 1]
    hazards = [_unsafe(name, "here-document in the shell script")] if lexer.heredoc else []
    return tokens, positional, _Site(site.field, site.index, (end, end)), hazards


def _first_entry(command: Sequence[_Word]) -> list[tuple[int, tuple[int, bool]]]:
    texts = [w.text for w in command]
    for k, word in enumerate(command):
        hit = _entry_at(texts, k) if word.unknown_at is None else None
        if hit is not None:
            return [(k, hit)]
    return []


# ------------------------------------------------------------------------ reading


def read_flags(container: Mapping[str, Any]) -> dict[str, str]:
    """The vLLM flags the container sets, ``{canonical-name: value}``.

    Boolean flags read ``"true"``; the served model is ``"model"``; ``$(VAR)`` values
    are resolved from literal ``env`` entries. An unresolvable value (``valueFrom``,
    an undefined name, a shell expansion) is returned as written and listed by
    :func:`unresolved_flags`. A flag given twice reads as the last one (argparse).
    Best effort: hazards that make a rewrite unsafe do not stop a read.
    """
    return {o.name: o.text for o in _parse(container).occurrences}


def hidden_flags(container: Mapping[str, Any]) -> list[str]:
    """Why flags may hide in the command line where :func:`read_flags` cannot see them (a shell
    expansion or unresolved reference after the entry point, a command substitution): empty
    when every flag vLLM will parse was read."""
    return [str(h) for h in _parse(container).hazards]


def unresolved_flags(container: Mapping[str, Any]) -> set[str]:
    """Flags whose value :func:`read_flags` could not resolve."""
    last = {o.name: o for o in _parse(container).occurrences}
    return {name for name, o in last.items() if not o.known}


# ---------------------------------------------------------------------- rewriting


@dataclass(frozen=True)
class _Edit:
    site: _Site
    new: str
    delete: bool = False  # a list element to drop (a removed flag)


@dataclass(frozen=True)
class _EnvEdit:
    name: str
    index: int
    value: str


def rewrite_flags(
    container: Mapping[str, Any], desired: Mapping[str, str], remove: Collection[str] = ()
) -> dict[str, Any]:
    """A new container with each desired flag set; the input is never mutated.

    A present flag is changed in place in its own spelling (``--flag value``,
    ``--flag=value``, ``--flag_name``, ``-tp``); an absent one is appended at the end of
    the vLLM invocation; a value held in a literal ``env`` var through ``$(VAR)`` is
    changed in the env var. Everything else stays byte-identical; when every value
    already matches, the result equals the input. Raises :class:`VllmArgsError` when
    the change cannot be made safely. Values are written as given (``--flag value``);
    switching boolean flags on or off is not supported. Each flag of ``remove`` that is present
    is deleted with its value (``--kv-cache-memory-bytes`` when the plan sets the utilization).
    """
    parsed = _parse(container)
    if parsed.hazards and (desired or any(parsed.find(normalise_flag(r)) for r in remove)):
        raise parsed.hazards[0]
    edits: list[_Edit] = []
    env_edits: list[tuple[_EnvEdit, _Occurrence]] = []
    appends: list[tuple[str, str]] = []
    for name, value in _canonical(desired, parsed.container).items():
        found = parsed.find(name)
        if len(found) > 1:
            raise VllmArgsError("DuplicateFlag", parsed.container, "set more than once", name)
        if not found:
            appends.append((name, value))
            continue
        plan = _plan(parsed, found[0], value)
        if isinstance(plan, _Edit):
            edits.append(plan)
        elif isinstance(plan, _EnvEdit):
            env_edits.append((plan, found[0]))
    _check_env_edits(parsed, env_edits)
    edits.extend(_appends(parsed.append_at, appends))
    for name in sorted({normalise_flag(r) for r in remove}):
        if name in desired or any(normalise_flag(k) == name for k in desired):
            raise VllmArgsError("DuplicateFlag", parsed.container, "asked to set and remove", name)
        edits.extend(e for occ in parsed.find(name) for e in _removal(parsed.container, occ))
    return _apply(container, edits, [e for e, _ in env_edits])


def _removal(container: str, occ: _Occurrence) -> list[_Edit]:
    """Edits that delete a flag and its separate value token."""
    tokens = [t for t in (occ.flag, occ.value) if t is not None]
    for token in tokens:
        if token.dynamic or token.continuation or not token.known and token is occ.flag:
            raise _unsafe(container, f"cannot remove {token.raw!r} safely", occ.name)
    first, last = tokens[0], tokens[-1]
    if first.site.span is None:
        return [_Edit(t.site, "", delete=True) for t in tokens]
    assert last.site.span is not None
    start, end = first.site.span[0], last.site.span[1]
    return [_Edit(_Site(first.site.field, first.site.index, (start, end)), "", delete=True)]


def _canonical(desired: Mapping[str, str], container: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in desired.items():
        name = normalise_flag(key)
        if out.get(name, value) != value:
            raise VllmArgsError("DuplicateFlag", container, "asked for two different values", name)
        out[name] = value
    return out


def _plan(parsed: _Parsed, occ: _Occurrence, value: str) -> _Edit | _EnvEdit | None:
    """How to give a present flag ``value``: splice its token, change its env var, or nothing."""
    if occ.flag is not None and occ.value is None and not occ.inline:
        raise VllmArgsError("MissingFlagValue", parsed.container, "given without a value", occ.name)
    if occ.known and occ.text == value:
        return None
    if occ.inline:
        assert occ.flag is not None
        token = occ.flag
        match = _INLINE_REF.fullmatch(_unquoted(token))
        ref = match.group(2) if match and len(token.refs) == 1 else None
    else:
        assert occ.value is not None
        token = occ.value
        match = _SOLE_REF.fullmatch(_unquoted(token))
        ref = match.group(1) if match and len(token.refs) == 1 else None
    if ref is not None and not token.split_ref:
        return _plan_env(parsed, occ, token, ref, value)
    _check_plain(parsed.container, occ, token)
    if occ.inline:
        return _Edit(token.site, _inline_replacement(token, value))
    return _Edit(token.site, _value_replacement(token, value))


def _unquoted(token: _Token) -> str:
    raw = token.raw
    if token.shell and len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    return raw


def _plan_env(
    parsed: _Parsed, occ: _Occurrence, token: _Token, ref: str, value: str
) -> _EnvEdit | None:
    var = parsed.env.vars.get(ref)
    if var is None:
        raise VllmArgsError(
            "UnresolvedReference",
            parsed.container,
            f"value $({ref}) names no env var of the container (envFrom?)",
            occ.name,
        )
    if var.value_from:
        raise VllmArgsError(
            "ValueFromReference",
            parsed.container,
            f"value comes from env var {ref} set with valueFrom",
            occ.name,
        )
    if var.known and var.value == value:
        return None
    if token.shell and shlex.quote(value) != value:
        raise _unsafe(parsed.container, f"value {value!r} would need quoting in $({ref})", occ.name)
    return _EnvEdit(ref, var.index, value)


def _check_plain(container: str, occ: _Occurrence, token: _Token) -> None:
    """Refuse to splice a token whose raw text is not plain text."""
    if token.dynamic:
        raise _unsafe(container, f"value {token.raw!r} is a shell expansion", occ.name)
    if token.refs:
        var = token.refs[0].name
        reason = "UnsupportedReference" if token.known else "UnresolvedReference"
        raise VllmArgsError(reason, container, f"{token.raw!r} mixes $({var}) with text", occ.name)
    if token.continuation:
        raise _unsafe(container, f"line continuation inside {token.raw!r}", occ.name)


def _check_env_edits(parsed: _Parsed, env_edits: Sequence[tuple[_EnvEdit, _Occurrence]]) -> None:
    planned: Counter[str] = Counter(edit.name for edit, _ in env_edits)
    values: dict[str, str] = {}
    for edit, occ in env_edits:
        if values.setdefault(edit.name, edit.value) != edit.value:
            raise VllmArgsError(
                "SharedReference",
                parsed.container,
                f"env var {edit.name} feeds flags asked for different values",
                occ.name,
            )
        if parsed.ref_counts[edit.name] > planned[edit.name]:
            raise VllmArgsError(
                "SharedReference",
                parsed.container,
                f"env var {edit.name} is also used elsewhere; changing it would change that too",
                occ.name,
            )


def _shell_word(old_raw: str, value: str) -> str:
    """``value`` as a shell word, in the quote style of the word it replaces when possible."""
    quoted = shlex.quote(value)
    if quoted == value and len(old_raw) >= 2 and old_raw[0] == old_raw[-1] and old_raw[0] in "'\"":
        quoted = f"{old_raw[0]}{value}{old_raw[0]}"
    return quoted


def _value_replacement(token: _Token, value: str) -> str:
    return _k8s_escape(_shell_word(token.raw, value) if token.shell else value)


def _inline_replacement(token: _Token, value: str) -> str:
    prefix, _, old_value = token.raw.partition("=")
    if not token.shell:
        return f"{prefix}={_k8s_escape(value)}"
    spelled = token.text.split("=", 1)[0]
    if prefix == spelled:
        return f"{prefix}={_k8s_escape(_shell_word(old_value, value))}"
    return _k8s_escape(shlex.quote(f"{spelled}={value}"))


def _appends(at: _Site, flags: Sequence[tuple[str, str]]) -> list[_Edit]:
    if not flags:
        return []
    if at.span is not None:
        text = "".join(f" --{name} {shlex.quote(value)}" for name, value in flags)
        return [_Edit(at, _k8s_escape(text))]
    return [_Edit(at, item) for name, value in flags for item in (f"--{name}", _k8s_escape(value))]


def _apply(
    container: Mapping[str, Any], edits: Sequence[_Edit], env_edits: Sequence[_EnvEdit]
) -> dict[str, Any]:
    new: dict[str, Any] = copy.deepcopy(dict(container))
    if not edits and not env_edits:
        return new
    for list_name in {e.site.field for e in edits}:
        new[list_name] = list(new.get(list_name) or [])
    spans: dict[tuple[str, int], list[_Edit]] = {}
    dropped: dict[str, set[int]] = {}
    for edit in edits:
        if edit.delete and edit.site.span is None:
            dropped.setdefault(edit.site.field, set()).add(edit.site.index)
        elif edit.site.span is not None:
            spans.setdefault((edit.site.field, edit.site.index), []).append(edit)
        elif edit.site.index < 0:
            new[edit.site.field].append(edit.new)
        else:
            new[edit.site.field][edit.site.index] = edit.new
    for (list_name, index), group in spans.items():
        new[list_name][index] = _splice(new[list_name][index], group)
    for list_name, indices in dropped.items():
        new[list_name] = [v for i, v in enumerate(new[list_name]) if i not in indices]
    if env_edits:
        new["env"] = [dict(e) for e in new["env"]]
        for env_edit in env_edits:
            new["env"][env_edit.index]["value"] = _k8s_escape(env_edit.value)
    return new


def _splice(text: str, edits: Sequence[_Edit]) -> str:
    for edit in sorted(edits, key=lambda e: e.site.span or (0, 0), reverse=True):
        assert edit.site.span is not None
        start, end = edit.site.span
        if edit.delete:
            while start > 0 and text[start - 1] in " \t":
                start -= 1  # the blank before a removed flag goes with it
        text = text[:start] + edit.new + text[end:]
    return text


def read_env(container: Mapping[str, Any]) -> dict[str, str | None]:
    """The container's ``env`` as Kubernetes resolves it: ``{name: value}``, None where the
    value is set at run time (``valueFrom``) or refers to what the operator cannot read."""
    return {
        name: (v.value if v.known and not v.value_from else None)
        for name, v in _env_table(container).vars.items()
    }
