"""A small evaluator for the common forms of CEL ``x-kubernetes-validations`` rules.

Supported: literals, ``self``/``oldSelf``, field selection and indexing, ``has()``, ``! && || ?:``,
comparisons, ``in``, arithmetic, ``size()``, string functions (``startsWith``, ``endsWith``,
``contains``, ``matches``, ``lowerAscii``, ``upperAscii``, ``trim``), type conversions, and the
``all``/``exists``/``exists_one``/``map``/``filter`` macros. Anything else raises ``Unsupported``
so that the caller can accept the object (and log the rule) rather than reject it wrongly.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Unsupported(Exception):
    """The rule uses syntax or functions this evaluator does not implement."""


class EvalError(Exception):
    """A runtime error of a supported rule (as the real CEL runtime would report it)."""


def mentions_old_self(text: str) -> bool:
    return re.search(r"\boldSelf\b", text) is not None


# ------------------------------------------------------------------------------------ lexing

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<float>(\d+\.\d+([eE][+-]?\d+)?|\d+[eE][+-]?\d+))
  | (?P<hex>0[xX][0-9a-fA-F]+u?)
  | (?P<int>\d+u?)
  | (?P<string>[rR]?("\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|"(\\.|[^"\\])*"|'(\\.|[^'\\])*'))
  | (?P<bytes>[bB]("(\\.|[^"\\])*"|'(\\.|[^'\\])*'))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|[-+*/%<>!?:.,()\[\]{}])
    """,
    re.VERBOSE,
)

_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "`": "`",
    "?": "?",
}


@dataclass
class Token:
    kind: str
    text: str
    value: Any = None


def _unquote(text: str) -> str:
    raw = text[0] in "rR"
    if raw:
        text = text[1:]
    body = text[3:-3] if text[:3] in ('"""', "'''") else text[1:-1]
    if raw:
        return body
    out = ""
    i = 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in _ESCAPES:
                out += _ESCAPES[nxt]
                i += 2
                continue
            if nxt in "uU":
                width = 4 if nxt == "u" else 8
                out += chr(int(body[i + 2 : i + 2 + width], 16))
                i += 2 + width
                continue
            raise Unsupported(f"escape sequence \\{nxt}")
        out += char
        i += 1
    return out


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            raise Unsupported(f"unexpected character {text[pos]!r}")
        kind = match.lastgroup or ""
        value = match.group(kind)
        pos = match.end()
        if kind == "ws":
            continue
        if kind == "float":
            tokens.append(Token("lit", value, float(value)))
        elif kind == "hex":
            tokens.append(Token("lit", value, int(value.rstrip("u"), 16)))
        elif kind == "int":
            tokens.append(Token("lit", value, int(value.rstrip("u"))))
        elif kind == "string":
            tokens.append(Token("lit", value, _unquote(value)))
        elif kind == "bytes":
            raise Unsupported("bytes literals")
        elif kind == "ident":
            if value in ("true", "false"):
                tokens.append(Token("lit", value, value == "true"))
            elif value == "null":
                tokens.append(Token("lit", value, None))
            elif value == "in":
                tokens.append(Token("op", value))
            else:
                tokens.append(Token("ident", value))
        else:
            tokens.append(Token("op", value))
    tokens.append(Token("eof", ""))
    return tokens


# ------------------------------------------------------------------------------------ parsing

Node = tuple[Any, ...]


class Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.pos = 0

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def take(self, text: str | None = None) -> Token:
        token = self.tokens[self.pos]
        if text is not None and token.text != text:
            raise Unsupported(f"expected {text!r}, found {token.text!r}")
        self.pos += 1
        return token

    def accept(self, text: str) -> bool:
        if self.peek().kind == "op" and self.peek().text == text:
            self.pos += 1
            return True
        return False

    def parse(self) -> Node:
        node = self.expr()
        if self.peek().kind != "eof":
            raise Unsupported(f"unexpected {self.peek().text!r}")
        return node

    def expr(self) -> Node:
        cond = self.or_()
        if self.accept("?"):
            then = self.or_()
            self.take(":")
            other = self.expr()
            return ("cond", cond, then, other)
        return cond

    def or_(self) -> Node:
        node = self.and_()
        while self.accept("||"):
            node = ("or", node, self.and_())
        return node

    def and_(self) -> Node:
        node = self.rel()
        while self.accept("&&"):
            node = ("and", node, self.rel())
        return node

    def rel(self) -> Node:
        node = self.add()
        while self.peek().kind == "op" and self.peek().text in (
            "<",
            "<=",
            ">",
            ">=",
            "==",
            "!=",
            "in",
        ):
            op = self.take().text
            node = ("bin", op, node, self.add())
        return node

    def add(self) -> Node:
        node = self.mul()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            op = self.take().text
            node = ("bin", op, node, self.mul())
        return node

    def mul(self) -> Node:
        node = self.unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "/", "%"):
            op = self.take().text
            node = ("bin", op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.accept("!"):
            return ("not", self.unary())
        if self.accept("-"):
            return ("neg", self.unary())
        return self.member()

    def args(self) -> list[Node]:
        items: list[Node] = []
        if self.accept(")"):
            return items
        while True:
            items.append(self.expr())
            if self.accept(")"):
                return items
            self.take(",")

    def member(self) -> Node:
        node = self.primary()
        while True:
            if self.accept("."):
                name = self.take()
                if name.kind != "ident":
                    raise Unsupported(f"bad field {name.text!r}")
                if self.accept("("):
                    node = ("call", name.text, node, self.args())
                else:
                    node = ("field", node, name.text)
            elif self.accept("["):
                index = self.expr()
                self.take("]")
                node = ("index", node, index)
            else:
                return node

    def primary(self) -> Node:
        token = self.take()
        if token.kind == "lit":
            return ("lit", token.value)
        if token.kind == "ident":
            if self.accept("("):
                return ("call", token.text, None, self.args())
            return ("ident", token.text)
        if token.text == "(":
            node = self.expr()
            self.take(")")
            return node
        if token.text == "[":
            items: list[Node] = []
            while not self.accept("]"):
                items.append(self.expr())
                if not self.accept(","):
                    self.take("]")
                    break
            return ("list", items)
        if token.text == "{":
            entries: list[tuple[Node, Node]] = []
            while not self.accept("}"):
                key = self.expr()
                self.take(":")
                entries.append((key, self.expr()))
                if not self.accept(","):
                    self.take("}")
                    break
            return ("map", entries)
        raise Unsupported(f"unexpected {token.text!r}")


_CACHE: dict[str, Node] = {}


def compile_rule(text: str) -> Node:
    if text not in _CACHE:
        _CACHE[text] = Parser(text).parse()
    return _CACHE[text]


# ---------------------------------------------------------------------------------- evaluation


def _type(value: Any) -> str:
    if value is None:
        return "null_type"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def _num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(a: Any, b: Any) -> bool:
    if _num(a) and _num(b):
        return bool(a == b)
    if _type(a) != _type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _compare(op: str, a: Any, b: Any) -> bool:
    comparable = (_num(a) and _num(b)) or (_type(a) == _type(b) and isinstance(a, str | bool))
    if not comparable:
        raise EvalError(f"no such overload: {_type(a)} {op} {_type(b)}")
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    return bool(a >= b)


def _arith(op: str, a: Any, b: Any) -> Any:
    if op == "+":
        if (_num(a) and _num(b)) or (_type(a) == _type(b) and _type(a) in ("string", "list")):
            return a + b
    elif _num(a) and _num(b):
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op in ("/", "%"):
            if b == 0:
                raise EvalError("division by zero" if op == "/" else "modulus by zero")
            if isinstance(a, int) and isinstance(b, int):
                quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
                return quotient if op == "/" else a - quotient * b
            if op == "/":
                return a / b
    raise EvalError(f"no such overload: {_type(a)} {op} {_type(b)}")


class Evaluator:
    def __init__(self, variables: dict[str, Any]) -> None:
        self.vars = variables

    def eval(self, node: Node) -> Any:
        kind = node[0]
        method: Callable[[Node], Any] = getattr(self, f"_e_{kind}")
        return method(node)

    def _e_lit(self, node: Node) -> Any:
        return node[1]

    def _e_ident(self, node: Node) -> Any:
        name = node[1]
        if name in self.vars:
            value = self.vars[name]
            if value is MISSING:
                raise EvalError(f"undeclared reference to '{name}'")
            return value
        raise Unsupported(f"identifier {name!r}")

    def _e_list(self, node: Node) -> Any:
        return [self.eval(item) for item in node[1]]

    def _e_map(self, node: Node) -> Any:
        return {self.eval(k): self.eval(v) for k, v in node[1]}

    def _e_cond(self, node: Node) -> Any:
        cond = self.eval(node[1])
        if not isinstance(cond, bool):
            raise EvalError(f"no such overload: {_type(cond)} ? _ : _")
        return self.eval(node[2] if cond else node[3])

    def _logic(self, node: Node, short: bool) -> Any:
        error: EvalError | None = None
        for side in (node[1], node[2]):
            try:
                value = self.eval(side)
            except EvalError as exc:
                error = exc
                continue
            if not isinstance(value, bool):
                error = EvalError(f"no such overload: {_type(value)}")
                continue
            if value is short:
                return short
        if error is not None:
            raise error
        return not short

    def _e_or(self, node: Node) -> Any:
        return self._logic(node, True)

    def _e_and(self, node: Node) -> Any:
        return self._logic(node, False)

    def _e_not(self, node: Node) -> Any:
        value = self.eval(node[1])
        if not isinstance(value, bool):
            raise EvalError(f"no such overload: !{_type(value)}")
        return not value

    def _e_neg(self, node: Node) -> Any:
        value = self.eval(node[1])
        if not _num(value):
            raise EvalError(f"no such overload: -{_type(value)}")
        return -value

    def _e_bin(self, node: Node) -> Any:
        op = node[1]
        left = self.eval(node[2])
        right = self.eval(node[3])
        if op == "==":
            return _equal(left, right)
        if op == "!=":
            return not _equal(left, right)
        if op == "in":
            if isinstance(right, list):
                return any(_equal(left, item) for item in right)
            if isinstance(right, dict):
                return left in right
            raise EvalError(f"no such overload: {_type(left)} in {_type(right)}")
        if op in ("<", "<=", ">", ">="):
            return _compare(op, left, right)
        return _arith(op, left, right)

    def _e_field(self, node: Node) -> Any:
        target = self.eval(node[1])
        name = node[2]
        if isinstance(target, dict):
            if name not in target:
                raise EvalError(f"no such key: {name}")
            return target[name]
        raise EvalError(f"no such overload: {_type(target)}.{name}")

    def _e_index(self, node: Node) -> Any:
        target = self.eval(node[1])
        index = self.eval(node[2])
        if isinstance(target, list):
            if not _num(index) or isinstance(index, float) and not index.is_integer():
                raise EvalError(f"no such overload: list[{_type(index)}]")
            if not 0 <= int(index) < len(target):
                raise EvalError(f"index out of bounds: {index}")
            return target[int(index)]
        if isinstance(target, dict):
            if index not in target:
                raise EvalError(f"no such key: {index}")
            return target[index]
        raise EvalError(f"no such overload: {_type(target)}[{_type(index)}]")

    # -- calls and macros

    def _e_call(self, node: Node) -> Any:
        name, target_node, arg_nodes = node[1], node[2], node[3]
        if target_node is None and name == "has":
            return self._has(arg_nodes)
        if target_node is not None and name in ("all", "exists", "exists_one", "map", "filter"):
            return self._macro(name, target_node, arg_nodes)
        if target_node is None:
            args = [self.eval(a) for a in arg_nodes]
            return self._global(name, args)
        target = self.eval(target_node)
        args = [self.eval(a) for a in arg_nodes]
        return self._method(name, target, args)

    def _has(self, arg_nodes: list[Node]) -> Any:
        if len(arg_nodes) != 1 or arg_nodes[0][0] != "field":
            raise Unsupported("has() needs a field selection")
        target = self.eval(arg_nodes[0][1])
        if isinstance(target, dict):
            return arg_nodes[0][2] in target
        raise EvalError(f"no such overload: has({_type(target)})")

    def _macro(self, name: str, target_node: Node, arg_nodes: list[Node]) -> Any:
        target = self.eval(target_node)
        if len(arg_nodes) != 2 or arg_nodes[0][0] != "ident":
            raise Unsupported(f"{name}() form")
        var = arg_nodes[0][1]
        body = arg_nodes[1]
        items = list(target) if isinstance(target, list | dict) else None
        if items is None:
            raise EvalError(f"no such overload: {_type(target)}.{name}")
        results: list[Any] = []
        saved = self.vars.get(var, MISSING)
        try:
            for item in items:
                self.vars[var] = item
                results.append(self.eval(body))
        finally:
            if saved is MISSING:
                self.vars.pop(var, None)
            else:
                self.vars[var] = saved
        if name == "map":
            return results
        if name == "filter":
            return [item for item, keep in zip(items, results, strict=True) if keep is True]
        if any(not isinstance(r, bool) for r in results):
            raise EvalError(f"no such overload in {name}()")
        if name == "all":
            return all(results)
        if name == "exists":
            return any(results)
        return sum(1 for r in results if r) == 1

    def _global(self, name: str, args: list[Any]) -> Any:
        if name == "size" and len(args) == 1:
            return self._method("size", args[0], [])
        if name == "int" and len(args) == 1:
            value = args[0]
            try:
                if isinstance(value, str):
                    return int(value)
                if _num(value):
                    return int(value)
            except ValueError as exc:
                raise EvalError(f"cannot convert {value!r} to int") from exc
            raise EvalError(f"no such overload: int({_type(value)})")
        if name == "double" and len(args) == 1:
            try:
                return float(args[0])
            except (TypeError, ValueError) as exc:
                raise EvalError(f"no such overload: double({_type(args[0])})") from exc
        if name == "string" and len(args) == 1:
            value = args[0]
            if isinstance(value, bool):
                return "true" if value else "false"
            if isinstance(value, str | int | float):
                return str(value)
            raise EvalError(f"no such overload: string({_type(value)})")
        if name == "bool" and len(args) == 1 and isinstance(args[0], str):
            if args[0] in ("true", "True", "TRUE", "t", "1"):
                return True
            if args[0] in ("false", "False", "FALSE", "f", "0"):
                return False
            raise EvalError(f"cannot convert {args[0]!r} to bool")
        if name == "matches" and len(args) == 2:
            return self._method("matches", args[0], [args[1]])
        raise Unsupported(f"function {name}()")

    def _method(self, name: str, target: Any, args: list[Any]) -> Any:
        if name == "size" and not args:
            if isinstance(target, str | list | dict):
                return len(target)
            raise EvalError(f"no such overload: size({_type(target)})")
        if isinstance(target, str):
            if name in ("startsWith", "endsWith", "contains", "matches") and len(args) == 1:
                arg = args[0]
                if not isinstance(arg, str):
                    raise EvalError(f"no such overload: string.{name}({_type(arg)})")
                if name == "startsWith":
                    return target.startswith(arg)
                if name == "endsWith":
                    return target.endswith(arg)
                if name == "contains":
                    return arg in target
                try:
                    return re.search(arg, target) is not None
                except re.error as exc:
                    raise Unsupported(f"regular expression {arg!r}") from exc
            if name == "lowerAscii" and not args:
                return target.lower()
            if name == "upperAscii" and not args:
                return target.upper()
            if name == "trim" and not args:
                return target.strip()
        raise Unsupported(f"method {name}() on {_type(target)}")


def evaluate(text: str, value: Any, old: Any = MISSING) -> Any:
    """Evaluate a rule with ``self`` = value (and ``oldSelf`` = old when given)."""
    node = compile_rule(text)
    variables: dict[str, Any] = {"self": value}
    if old is not MISSING:
        variables["oldSelf"] = old
    else:
        variables["oldSelf"] = MISSING
    return Evaluator(variables).eval(node)
