"""Pure-function checks of the patch, schema and CEL engines (the HTTP tests cover the rest)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import cel
from .patches import PatchError, json_patch, merge_patch, strategic_merge_patch
from .schema import apply_defaults, prune, validate_object

keys = st.text("abc", min_size=1, max_size=2)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=8,
)


FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.dictionaries(keys, json_values), st.dictionaries(keys, json_values))
def test_merge_patch_laws(target: dict[str, Any], patch: dict[str, Any]) -> None:
    result = merge_patch(target, patch)
    for key, value in patch.items():
        if value is None:
            assert key not in result
        elif not isinstance(value, dict):
            assert result[key] == value
    assert merge_patch(result, patch) == result  # idempotent


@FAST
@given(st.dictionaries(keys, json_values, min_size=1))
def test_json_patch_add_remove_roundtrip(doc: dict[str, Any]) -> None:
    added = json_patch(doc, [{"op": "add", "path": "/new~1key", "value": 1}])
    assert added["new/key"] == 1
    assert json_patch(added, [{"op": "remove", "path": "/new~1key"}]) == doc


def test_json_patch_failures_raise() -> None:
    with pytest.raises(PatchError):
        json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])
    with pytest.raises(PatchError):
        json_patch({"a": [1]}, [{"op": "replace", "path": "/a/5", "value": 2}])
    with pytest.raises(PatchError):
        json_patch({"a": True}, [{"op": "test", "path": "/a", "value": 1}])


def test_strategic_merge_directives() -> None:
    doc = {"finalizers": ["a"], "ports": [{"port": 80, "name": "x"}], "m": {"k": 1}}
    patch = {
        "finalizers": ["b"],
        "ports": [{"port": 80, "name": "y"}, {"port": 81}],
        "m": {"$patch": "replace", "z": 2},
        "$retainKeys": ["finalizers", "ports", "m"],
    }
    assert strategic_merge_patch(doc, patch) == {
        "finalizers": ["a", "b"],
        "ports": [{"port": 80, "name": "y"}, {"port": 81}],
        "m": {"z": 2},
    }


SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["a"],
            "properties": {
                "a": {"type": "integer", "minimum": 0, "exclusiveMaximum": True, "maximum": 5},
                "b": {"type": "string", "default": "x", "enum": ["x", "y"]},
                "list": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "v": {"type": "integer", "default": 7},
                        },
                    },
                },
                "free": {"type": "object", "additionalProperties": {"type": "string"}},
                "ios": {"x-kubernetes-int-or-string": True},
            },
            "x-kubernetes-validations": [
                {"rule": "has(self.list) || self.a > 0", "message": "need a list or a > 0"},
                {"rule": "quantity(self.ios).isGreaterThan(quantity('1'))"},
            ],
        },
    },
}


def test_prune_default_validate_pipeline() -> None:
    obj = {
        "apiVersion": "v",
        "kind": "K",
        "metadata": {"name": "n", "junk": 1},
        "spec": {
            "a": 5,
            "unknown": 1,
            "list": [{"name": "p", "zz": 1}, {"name": "p"}],
            "free": {"k": "3"},
            "ios": "10%",
        },
        "top": 1,
    }
    pruned = apply_defaults(prune(obj, SCHEMA, root=True), SCHEMA)
    assert "top" not in pruned and "junk" not in pruned["metadata"]
    assert pruned["spec"]["b"] == "x" and "unknown" not in pruned["spec"]
    assert pruned["spec"]["list"] == [{"name": "p", "v": 7}, {"name": "p", "v": 7}]
    logged: list[str] = []
    errors = [e.message() for e in validate_object(pruned, SCHEMA, cel_log=logged.append)]
    assert "spec.a: Invalid value: 5: spec.a in body should be less than 5" in errors
    assert any(e.startswith("spec.list[1]: Duplicate value") for e in errors)
    assert len(logged) == 1 and "quantity" in logged[0]  # unsupported rule: accepted, logged
    pruned["spec"]["free"]["k"] = 3
    errors = [e.message() for e in validate_object(pruned, SCHEMA)]
    assert (
        'spec.free.k: Invalid value: "integer": spec.free.k in body must be of type '
        'string: "integer"' in errors
    )
    assert errors[-1].startswith(
        '<nil>: Invalid value: "null": some validation rules were not checked'
    )  # type errors block CEL rules, as upstream


def test_ratcheting_keeps_unchanged_invalid_values() -> None:
    old = {"spec": {"a": 9}}
    assert validate_object({"spec": {"a": 9}}, SCHEMA, old) == []
    assert validate_object({"spec": {"a": 8}}, SCHEMA, old) != []


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        ("self.a <= self.b", {"a": 1, "b": 2}, True),
        ("self.a <= self.b", {"a": 3, "b": 2}, False),
        ("has(self.x) || has(self.y)", {"y": 1}, True),
        ("has(self.x) || has(self.y)", {}, False),
        ("self.x in ['a', 'b']", {"x": "b"}, True),
        ("self.x in ['a', 'b']", {"x": "c"}, False),
        ("self.items.all(i, i.size() <= 3) && size(self.items) == 2", {"items": ["ab", "c"]}, True),
        ("self.items.exists(i, i.startsWith('z'))", {"items": ["ab", "c"]}, False),
        ("self.n % 2 == 0 ? self.s.matches('^[a-z]+$') : false", {"n": 4, "s": "abc"}, True),
        ("!(self.n > 1.5) || self.m == 'x'", {"n": 2, "m": "x"}, True),
        ("self.map.k == 'v' && 'k' in self.map", {"map": {"k": "v"}}, True),
        ("self.l.filter(x, x > 1).map(x, x * 2) == [4, 6]", {"l": [1, 2, 3]}, True),
    ],
)
def test_cel_rules(rule: str, value: Any, expected: bool) -> None:
    assert cel.evaluate(rule, value) is expected


def test_cel_errors_and_unsupported() -> None:
    with pytest.raises(cel.EvalError):
        cel.evaluate("self.a <= self.b", {"a": 1})
    assert cel.evaluate("has(self.b) && self.a <= self.b || true", {"a": 1}) is True
    with pytest.raises(cel.Unsupported):
        cel.evaluate("self.x.isSorted()", {"x": [1]})
    with pytest.raises(cel.Unsupported):
        cel.evaluate("self.a ===", {"a": 1})
    assert cel.evaluate("self == oldSelf", 1, 1) is True
