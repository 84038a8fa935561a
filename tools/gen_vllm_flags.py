"""Regenerate ``operator/inference_capacity/engines/data/vllm_flags.json`` from vLLM's source.

One command (``.venv/bin/python tools/gen_vllm_flags.py``): every vLLM release from 0.11 on that
PyPI lists is fetched as a source distribution (:mod:`vllm_sdist`, cached outside the work tree)
and read statically — vLLM is never imported or installed. For each version the walk starts where
``vllm serve`` builds its parser (``entrypoints/cli/serve.py`` ``ServeSubcommand.subparser_init``)
and follows the calls that add arguments: ``make_arg_parser`` (``entrypoints/openai/cli_args.py``,
later ``entrypoints/common/cli_args.py``), ``FrontendArgs.add_cli_args`` (whose flags are the
dataclass's fields), ``AsyncEngineArgs.add_cli_args`` and ``EngineArgs.add_cli_args`` (whose
flags take their kwargs from ``get_kwargs(SomeConfig)["field"]``, i.e. the field's annotation
and default in ``vllm/config/*.py``). Each ``add_argument`` gives the option strings (aliases such
as ``-tp``, ``-O``), whether it takes a value (``bool`` fields are ``BooleanOptionalAction``:
``--x`` and ``--no-x``; ``EnableDisableAction`` pairs ``--enable-x`` with ``--disable-x``),
choices (``Literal`` annotations, ``choices=``), literal defaults and ``deprecated=True``.

The table keeps, per flag, its runs of versions with the same attributes, so "which versions
have --swap-space" and "when was it removed" are one look-up (engines/vllm_flags.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_sdist  # noqa: E402

OUT = (
    Path(__file__).resolve().parent.parent
    / "operator/inference_capacity/engines/data/vllm_flags.json"
)
#: the parts of the tree that define the serve parser and the config dataclasses
SOURCES = re.compile(r"vllm/(config|engine|entrypoints|utils)/.*\.py|vllm/config\.py")
SERVE = "vllm/entrypoints/cli/serve.py"


@dataclass
class Module:
    path: str
    tree: ast.Module
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)  # X = Literal[...]


@dataclass
class Index:
    modules: dict[str, Module]

    def classes(self, name: str, prefer: str | None = None) -> list[tuple[Module, ast.ClassDef]]:
        found = [(m, m.classes[name]) for m in self.modules.values() if name in m.classes]
        found.sort(key=lambda mc: (mc[0].path != prefer, mc[0].path))
        return found

    def cls(self, name: str, prefer: str | None = None) -> tuple[Module, ast.ClassDef] | None:
        found = self.classes(name, prefer)
        return found[0] if found else None

    def function(self, name: str, prefer: str | None) -> tuple[Module, ast.FunctionDef] | None:
        found = [(m, m.functions[name]) for m in self.modules.values() if name in m.functions]
        found.sort(key=lambda mf: (mf[0].path != prefer, mf[0].path))
        return found[0] if found else None

    def alias(self, name: str) -> ast.expr | None:
        for m in self.modules.values():
            if name in m.aliases:
                return m.aliases[name]
        return None


def build_index(sources: dict[str, str]) -> Index:
    modules: dict[str, Module] = {}
    for path, text in sources.items():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        m = Module(path, tree)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                m.classes[node.name] = node
            elif isinstance(node, ast.FunctionDef):
                m.functions[node.name] = node
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    m.aliases[target.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    m.aliases[node.target.id] = node.value
            elif type(node).__name__ == "TypeAlias":  # ``type X = ...`` (Python 3.12)
                name = getattr(node, "name", None)
                if isinstance(name, ast.Name):
                    m.aliases[name.id] = node.value  # type: ignore[attr-defined]
        modules[path] = m
    return Index(modules)


# --- dataclass fields ------------------------------------------------------------------------


@dataclass
class FieldInfo:
    annotation: ast.expr | None
    default: Any = None
    has_default: bool = False


def _literal(node: ast.expr | None) -> tuple[bool, Any]:
    if node is None:
        return False, None
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def class_fields(index: Index, name: str, prefer: str | None = None) -> dict[str, FieldInfo]:
    """The dataclass fields of class ``name`` and its bases (bases first), by field name."""
    found = index.cls(name, prefer)
    if found is None:
        return {}
    module, node = found
    out: dict[str, FieldInfo] = {}
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id != name:
            out.update(class_fields(index, base.id, module.path))
    for stmt in node.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        ann = ast.unparse(stmt.annotation)
        if "ClassVar" in ann or "InitVar" in ann:
            continue
        info = FieldInfo(stmt.annotation)
        value = stmt.value
        if isinstance(value, ast.Call) and getattr(value.func, "id", "") in ("field", "Field"):
            for kw in value.keywords:
                if kw.arg == "default":
                    info.has_default, info.default = _literal(kw.value)
        else:
            info.has_default, info.default = _literal(value)
            if not info.has_default and isinstance(value, ast.Attribute):
                # EngineArgs: ``x: int = ModelConfig.x``
                if isinstance(value.value, ast.Name):
                    other = class_fields(index, value.value.id, module.path).get(value.attr)
                    if other is not None:
                        info.has_default, info.default = other.has_default, other.default
        out[stmt.target.id] = info
    return out


def _type_atoms(index: Index, node: ast.expr | None, depth: int = 0) -> Iterator[ast.expr]:
    """The members of a type annotation's union, aliases expanded."""
    if node is None or depth > 8:
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        yield from _type_atoms(index, node.left, depth + 1)
        yield from _type_atoms(index, node.right, depth + 1)
        return
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value).rsplit(".", 1)[-1]
        inner = node.slice
        items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        if head in ("Optional", "Union"):
            for item in items:
                yield from _type_atoms(index, item, depth + 1)
            return
        if head in ("Annotated", "SkipValidation"):
            yield from _type_atoms(index, items[0], depth + 1)
            return
    if isinstance(node, ast.Name):
        alias = index.alias(node.id)
        if alias is not None and not (isinstance(alias, ast.Name) and alias.id == node.id):
            expanded = list(_type_atoms(index, alias, depth + 1))
            if expanded and all(_is_type_expr(x) for x in expanded):
                yield from expanded
                return
    yield node


def _is_type_expr(node: ast.expr) -> bool:
    return isinstance(node, ast.Name | ast.Subscript | ast.Attribute | ast.Constant)


def describe_type(index: Index, ann: ast.expr | None) -> dict[str, Any]:
    """``kind`` (bool / optional / value) and ``choices`` from a field's annotation, as vLLM's
    ``engine/arg_utils.py::_compute_kwargs`` turns it into argparse kwargs."""
    atoms = list(_type_atoms(index, ann))
    names = {ast.unparse(a).rsplit(".", 1)[-1] for a in atoms if not isinstance(a, ast.Subscript)}
    choices: list[Any] = []
    for a in atoms:
        if isinstance(a, ast.Subscript) and ast.unparse(a.value).endswith("Literal"):
            elts = a.slice.elts if isinstance(a.slice, ast.Tuple) else [a.slice]
            for e in elts:
                ok, value = _literal(e)
                if ok:
                    choices.append(value)
    out: dict[str, Any] = {}
    if "bool" in names:
        # get_kwargs: a bool field is a BooleanOptionalAction (--x / --no-x); bool | str | None
        # is a bare flag True, else a value (nargs="?")
        out["kind"] = "optional" if "str" in names else "bool_optional"
    else:
        out["kind"] = "value"
        if choices and len(atoms) == len(
            [a for a in atoms if isinstance(a, ast.Subscript)]
            + (["None"] if "None" in names else [])
        ):
            out["choices"] = choices
    return out


# --- the walk from ``vllm serve`` ------------------------------------------------------------


@dataclass
class Flag:
    names: list[str]
    kind: str  # bool | optional | value | enable_disable
    choices: list[Any] | None = None
    default: Any = None
    deprecated: bool = False


class Walker:
    def __init__(self, index: Index) -> None:
        self.index = index
        self.flags: list[Flag] = []
        self.seen: set[tuple[str, str, str]] = set()

    def walk(self, module: Module, fn: ast.FunctionDef, cls: str | None) -> None:
        key = (module.path, fn.name, cls or "")
        if key in self.seen:
            return
        self.seen.add(key)
        kwargs_of: dict[str, str] = {}  # VAR -> config class of get_kwargs(Class)
        removed: dict[str, set[str]] = {}
        overrides: dict[tuple[str, str], dict[str, ast.expr]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                call = node.value
                fname = ast.unparse(call.func)
                if fname.endswith("get_kwargs") and call.args:
                    arg = ast.unparse(call.args[0])
                    target = node.targets[0]
                    if isinstance(target, ast.Name):
                        kwargs_of[target.id] = cls if arg == "cls" and cls else arg
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
                t = node.targets[0]
                inner = t.value
                if isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name):
                    ok_f, fld = _literal(inner.slice)
                    ok_k, k = _literal(t.slice)
                    if ok_f and ok_k:
                        overrides.setdefault((inner.value.id, fld), {})[k] = node.value
            if isinstance(node, ast.Delete):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                        ok, fld = _literal(t.slice)
                        if ok:
                            removed.setdefault(t.value.id, set()).add(fld)
        for node in ast.walk(fn):
            if isinstance(node, ast.For):
                self._loop(node, kwargs_of, removed, overrides, module)
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "add_argument":
                if not self._in_loop(fn, node):
                    self._add(node, kwargs_of, overrides, module)
                continue
            self._follow(node, module, cls)

    def _in_loop(self, fn: ast.FunctionDef, call: ast.Call) -> bool:
        for node in ast.walk(fn):
            if isinstance(node, ast.For) and any(n is call for n in ast.walk(node)):
                names = call.args[0] if call.args else None
                return isinstance(names, ast.JoinedStr)
        return False

    def _follow(self, call: ast.Call, module: Module, cls: str | None) -> None:
        func = call.func
        if isinstance(func, ast.Name):
            found = self.index.function(func.id, module.path)
            if found is not None:
                self.walk(found[0], found[1], None)
            return
        if not isinstance(func, ast.Attribute):
            return
        owner = func.value
        name: str | None = None
        if isinstance(owner, ast.Name):
            name = cls if owner.id == "cls" else owner.id
        elif isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super" and cls:
            found_cls = self.index.cls(cls, module.path)
            if found_cls is not None:
                for base in found_cls[1].bases:
                    if isinstance(base, ast.Name):
                        self._method(base.id, func.attr, module, cls)
            return
        if name is not None:
            self._method(name, func.attr, module, name)

    def _method(self, cls_name: str, method: str, module: Module, bound: str) -> None:
        """``Class.method(...)``: the method found along the bases, walked with ``cls`` bound."""
        found = self.index.cls(cls_name, module.path)
        if found is None:
            return
        mod, node = found
        for stmt in node.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == method:
                self.walk(mod, stmt, bound)
                return
        for base in node.bases:
            if isinstance(base, ast.Name):
                self._method(base.id, method, mod, bound)

    def _loop(
        self,
        node: ast.For,
        kwargs_of: dict[str, str],
        removed: dict[str, set[str]],
        overrides: dict[tuple[str, str], dict[str, ast.expr]],
        module: Module,
    ) -> None:
        """``for key, value in VAR.items(): group.add_argument(f"--{key...}", **value)``."""
        it = node.iter
        if not (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Attribute)
            and it.func.attr == "items"
            and isinstance(it.func.value, ast.Name)
            and it.func.value.id in kwargs_of
        ):
            return
        if not any(
            isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "add_argument"
            for n in ast.walk(node)
        ):
            return
        var = it.func.value.id
        cls_name = kwargs_of[var]
        for name, info in class_fields(self.index, cls_name, module.path).items():
            if name.startswith("_") or name in removed.get(var, set()):
                continue
            flag = self._from_field(cls_name, name, info, module)
            flag.names = [f"--{name.replace('_', '-')}"]
            self._apply_overrides(flag, overrides.get((var, name), {}))
            self.flags.append(flag)

    def _from_field(self, cls_name: str, name: str, info: FieldInfo, module: Module) -> Flag:
        t = describe_type(self.index, info.annotation)
        return Flag(
            [],
            t["kind"],
            t.get("choices"),
            info.default if info.has_default and _jsonable(info.default) else None,
        )

    def _apply_overrides(self, flag: Flag, over: dict[str, ast.expr]) -> None:
        action = over.get("action")
        if action is not None:
            flag.kind = _action_kind(action) or flag.kind
        if "type" in over and flag.kind == "bool_optional":
            flag.kind = "value"
        if "choices" in over:
            ok, value = _literal(over["choices"])
            flag.choices = list(value) if ok and isinstance(value, list | tuple) else None

    def _add(
        self,
        call: ast.Call,
        kwargs_of: dict[str, str],
        overrides: dict[tuple[str, str], dict[str, ast.expr]],
        module: Module,
    ) -> None:
        names = []
        for a in call.args:
            ok, value = _literal(a)
            if ok and isinstance(value, str):
                names.append(value)
        if not names or not names[0].startswith("-"):
            return  # a positional (the model tag)
        flag = Flag(names, "value")
        explicit: dict[str, ast.expr] = {}
        for kw in call.keywords:
            if kw.arg is not None:
                explicit[kw.arg] = kw.value
                continue
            # **VAR["field"] or **{**VAR["field"], "deprecated": True}
            source = kw.value
            if isinstance(source, ast.Dict):
                for k, v in zip(source.keys, source.values, strict=True):
                    if k is None:
                        source = v
                    else:
                        ok, key = _literal(k)
                        if ok:
                            explicit[key] = v
            if isinstance(source, ast.Subscript) and isinstance(source.value, ast.Name):
                var = source.value.id
                ok, fld = _literal(source.slice)
                if ok and var in kwargs_of:
                    info = class_fields(self.index, kwargs_of[var], module.path).get(fld)
                    if info is not None:
                        base = self._from_field(kwargs_of[var], fld, info, module)
                        flag.kind, flag.choices, flag.default = (
                            base.kind,
                            base.choices,
                            base.default,
                        )
                    self._apply_overrides(flag, overrides.get((var, fld), {}))
        if "action" in explicit:
            flag.kind = _action_kind(explicit["action"]) or "value"
        if "nargs" in explicit:
            ok, nargs = _literal(explicit["nargs"])
            if ok and nargs == "?":
                flag.kind = "optional"
            elif ok and nargs == 0:
                flag.kind = "bool"
        if "choices" in explicit:
            ok, value = _literal(explicit["choices"])
            flag.choices = list(value) if ok and isinstance(value, list | tuple) else None
        if "default" in explicit:
            ok, value = _literal(explicit["default"])
            flag.default = value if ok and _jsonable(value) else None
        if "deprecated" in explicit:
            ok, value = _literal(explicit["deprecated"])
            flag.deprecated = bool(ok and value)
        self.flags.append(flag)


def _action_kind(node: ast.expr) -> str | None:
    text = ast.unparse(node)
    if text in ("'store_true'", "'store_false'", "'store_const'", "'count'"):
        return "bool" if text != "'count'" else "count"
    if text.endswith("BooleanOptionalAction"):
        return "bool_optional"
    if text.endswith("EnableDisableAction"):
        return "enable_disable"
    if text in ("'append'", "'extend'", "'store'"):
        return "value"
    return None  # a custom Action (LoRAParserAction): takes values


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def dash_o(sources: dict[str, str]) -> str | None:
    """What ``FlexibleArgumentParser.parse_args`` turns ``-O3`` into: ``optimization-level``
    (``--optimization-level 3``), ``compilation-config.level`` / ``.mode`` (``-O.level=3``, i.e.
    ``--compilation-config '{"level": 3}'``), or None when it does not rewrite ``-O<n>``."""
    for text in sources.values():
        if "class FlexibleArgumentParser" not in text:
            continue
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "FlexibleArgumentParser":
                for fn in node.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name == "parse_args":
                        body = ast.unparse(fn)
                        if "'--optimization-level'" in body:
                            return "optimization-level"
                        m = re.search(r"'-O\.(level|mode)", body)
                        if m:
                            return f"compilation-config.{m.group(1)}"
    return None


def serve_flags(sources: dict[str, str]) -> dict[str, dict[str, Any]]:
    """``{canonical: record}`` of one version's ``vllm serve`` flags."""
    index = build_index(sources)
    serve = index.modules.get(SERVE)
    if serve is None:
        raise SystemExit(f"{SERVE} is missing")
    walker = Walker(index)
    for cls in serve.classes.values():
        for stmt in cls.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "subparser_init":
                walker.walk(serve, stmt, cls.name)
    out: dict[str, dict[str, Any]] = {}
    for flag in walker.flags:
        long = [n for n in flag.names if n.startswith("--")]
        canonical = (long[0] if long else flag.names[0]).lstrip("-")
        kind = flag.kind
        names = list(flag.names)
        if kind in ("bool_optional", "enable_disable"):
            # BooleanOptionalAction adds --no-X for each long option (Python's argparse)
            names += [f"--no-{n[2:]}" for n in long]
            if kind == "enable_disable":
                for n in long:
                    for a, b in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                        if n.startswith(a):
                            names.append(b + n.removeprefix(a))
            kind = "bool"
        rec: dict[str, Any] = {
            "aliases": sorted(n for n in names if n.lstrip("-") != canonical),
            "kind": kind,
        }
        if flag.choices:
            rec["choices"] = [c for c in flag.choices if c is not None]
        if flag.default is not None:
            rec["default"] = flag.default
        if flag.deprecated:
            rec["deprecated"] = True
        out[canonical] = rec  # argparse would refuse a repeat; the last definition here
    return out


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def build_table(versions: list[str]) -> dict[str, Any]:
    per_version: dict[str, dict[str, dict[str, Any]]] = {}
    dash_o_of: dict[str, str | None] = {}
    no_sdist: list[str] = []
    for v in versions:
        try:
            sources = vllm_sdist.read_sources(v, SOURCES)
        except vllm_sdist.NoSdist:
            no_sdist.append(v)
            print(f"vLLM {v}: no sdist on PyPI (wheels only): left out", file=sys.stderr)
            continue
        per_version[v] = serve_flags(sources)
        dash_o_of[v] = dash_o(sources)
        print(
            f"vLLM {v}: {len(per_version[v])} serve flags, -O<n> -> {dash_o_of[v]}", file=sys.stderr
        )
    versions = [v for v in versions if v in per_version]
    names = sorted({n for flags in per_version.values() for n in flags})
    table: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        runs: list[dict[str, Any]] = []
        for v in versions:
            rec = per_version[v].get(name)
            last = runs[-1] if runs else None
            contiguous = last is not None and last["to"] == versions[versions.index(v) - 1]
            if rec is None:
                continue
            if last is not None and contiguous and last["attrs"] == rec:
                last["to"] = v
            else:
                runs.append({"from": v, "to": v, "attrs": rec})
        table[name] = [{"from": r["from"], "to": r["to"], **r["attrs"]} for r in runs]
    return {
        "about": (
            "vllm serve flags per vLLM release, read statically from the sdists on PyPI by "
            "tools/gen_vllm_flags.py (do not edit by hand); each flag lists its runs of "
            "consecutive releases with the same attributes"
        ),
        "versions": versions,
        "no_sdist": no_sdist,
        "dash_o": dash_o_of,
        "flags": table,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--versions", nargs="*", help="default: every release from 0.11 on PyPI")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args()
    versions = sorted(a.versions or vllm_sdist.released_versions(), key=_key)
    table = build_table(versions)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(
        f"wrote {a.out} ({len(table['flags'])} flags, {len(table['versions'])} versions)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
