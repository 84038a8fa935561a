"""A POSIX shell lexer for the ``sh -c`` launch form: the second layer.

For a ``sh -c SCRIPT`` container the shell, not Kubernetes, splits the script into words.
:class:`_Lexer` splits it the same way (quotes, escapes, ``$VAR`` expansions, operators,
redirections) without expanding anything, and gives each word its offsets in the script.
:func:`_simple_commands` then groups the words into simple commands. Nothing here knows vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

__all__: list[str] = []


_SHELL_OPERATORS: Final = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")")
_REDIRECTIONS: Final = ("&>>", "<<<", "<<-", "<<", ">>", "<&", ">&", "<>", ">|", "&>", "<", ">")


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
