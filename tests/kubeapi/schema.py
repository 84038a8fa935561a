"""Structural OpenAPI v3 schemas of CRDs: pruning, defaulting and validation.

Follows the order of the real API server: prune unknown fields, drop non-nullable nulls, apply
``default``s, then validate (types, required, enum, bounds, lengths, pattern, list types, CEL
``x-kubernetes-validations``). Messages and field paths follow kube-openapi / apiextensions.
"""

from __future__ import annotations

import copy
import datetime
import re
from collections.abc import Callable
from typing import Any

from . import cel
from .errors import (
    FieldError,
    duplicate,
    invalid_value,
    required,
    too_long,
    too_many,
    type_invalid,
    unsupported,
)

Schema = dict[str, Any]

#: ObjectMeta fields kept on custom resources (everything else in metadata is dropped)
OBJECT_META_FIELDS = {
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
    "selfLink",
}


def _path_str(path: list[str | int]) -> str:
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        else:
            out += ("." if out else "") + seg
    return out


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# ------------------------------------------------------------------------------------- pruning


def prune(value: Any, schema: Schema | None, root: bool = False) -> Any:
    """Drop fields not specified by the schema, as the API server does before storing."""
    if schema is None:
        return value
    if isinstance(value, dict):
        if root or schema.get("x-kubernetes-embedded-resource"):
            result: dict[str, Any] = {}
            props = schema.get("properties") or {}
            preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
            for key, item in value.items():
                if key in ("apiVersion", "kind"):
                    result[key] = item
                elif key == "metadata" and isinstance(item, dict):
                    result[key] = {k: v for k, v in item.items() if k in OBJECT_META_FIELDS}
                    if "metadata" in props and not root:
                        result[key] = prune(item, props["metadata"])
                elif key in props:
                    result[key] = prune(item, props[key])
                elif preserve:
                    result[key] = item
            return result
        if schema.get("x-kubernetes-int-or-string"):
            return value
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        result = {}
        for key, item in value.items():
            if props is not None and key in props:
                result[key] = prune(item, props[key])
            elif isinstance(additional, dict):
                result[key] = prune(item, additional)
            elif additional is True or preserve:
                result[key] = item
        return result
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            return [prune(item, items) for item in value]
        return value
    return value


# ------------------------------------------------------------------------------------ defaulting


def apply_defaults(value: Any, schema: Schema | None) -> Any:
    """Apply ``default`` of absent properties (and of non-nullable nulls), recursively."""
    if schema is None:
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key in value and value[key] is None and not sub.get("nullable"):
                del value[key]
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(value[key], sub)
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key in list(value):
                if key not in props:
                    value[key] = apply_defaults(value[key], additional)
        return value
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            return [apply_defaults(item, items) for item in value]
    return value


# ------------------------------------------------------------------------------------ validation

_FORMATS: dict[str, Callable[[str], bool]] = {}


def _is_datetime(text: str) -> bool:
    try:
        datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in text or " " in text


def _is_date(text: str) -> bool:
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


_FORMATS.update(
    {
        "date-time": _is_datetime,
        "date": _is_date,
        "uuid": lambda t: (
            re.fullmatch(
                r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", t
            )
            is not None
        ),
        "ipv4": lambda t: (
            re.fullmatch(r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)", t)
            is not None
        ),
    }
)


class Validator:
    """Validates one object against a structural schema; collects FieldErrors."""

    def __init__(self, cel_log: Callable[[str], None] | None = None, rules: bool = True) -> None:
        self.errors: list[FieldError] = []
        self.cel_log = cel_log
        self.rules = rules

    def validate(
        self,
        value: Any,
        schema: Schema,
        path: list[str | int],
        old: Any = cel.MISSING,
        root: bool = False,
    ) -> None:
        if old is not cel.MISSING and old == value and not root:
            return  # validation ratcheting: unchanged values are not re-validated
        if self._validate_node(value, schema, path, old, root) and self.rules:
            self._validate_rules(value, schema, path, old)

    def _type_ok(self, value: Any, schema: Schema, path: list[str | int]) -> bool:
        field = _path_str(path)
        if value is None:
            if schema.get("nullable"):
                return False  # null is fine; nothing below to check
            expected = schema.get("type")
            if expected:
                self.errors.append(
                    type_invalid(
                        field, "null", f'{field} in body must be of type {expected}: "null"'
                    )
                )
            return False
        if schema.get("x-kubernetes-int-or-string"):
            if isinstance(value, bool) or not isinstance(value, int | str):
                actual = _json_type(value)
                self.errors.append(
                    type_invalid(
                        field, actual, f'{field} in body must be of type integer,string: "{actual}"'
                    )
                )
                return False
            return True
        expected = schema.get("type")
        actual = _json_type(value)
        if expected and not (expected == actual or (expected == "number" and actual == "integer")):
            self.errors.append(
                type_invalid(
                    field, actual, f'{field} in body must be of type {expected}: "{actual}"'
                )
            )
            return False
        return True

    def _validate_node(
        self, value: Any, schema: Schema, path: list[str | int], old: Any, root: bool
    ) -> bool:
        """Validate one node; False when its type is wrong (its CEL rules are skipped then)."""
        if not self._type_ok(value, schema, path):
            return False
        field = _path_str(path)
        if "enum" in schema and value not in schema["enum"]:
            self.errors.append(unsupported(field, value, list(schema["enum"])))
        if isinstance(value, int | float) and not isinstance(value, bool):
            self._numbers(value, schema, field)
        elif isinstance(value, str):
            self._strings(value, schema, field)
        elif isinstance(value, list):
            self._arrays(value, schema, path, old)
        elif isinstance(value, dict):
            self._objects(value, schema, path, old, root)
        for sub in schema.get("allOf") or []:
            self._validate_node(value, sub, path, old, False)
        any_of = schema.get("anyOf")
        if any_of:
            if not any(self._quiet(value, sub, path) for sub in any_of):
                self.errors.append(
                    invalid_value(
                        field, value, f"{field} in body must match at least one schema in anyOf"
                    )
                )
        one_of = schema.get("oneOf")
        if one_of:
            count = sum(1 for sub in one_of if self._quiet(value, sub, path))
            if count != 1:
                self.errors.append(
                    invalid_value(
                        field,
                        value,
                        f"{field} in body must validate one and only one schema (oneOf)",
                    )
                )
        if "not" in schema and self._quiet(value, schema["not"], path):
            self.errors.append(
                invalid_value(
                    field, value, f"{field} in body should not be valid against schema (not)"
                )
            )
        return True

    def _quiet(self, value: Any, schema: Schema, path: list[str | int]) -> bool:
        probe = Validator()
        probe._validate_node(value, schema, path, cel.MISSING, False)
        return not probe.errors

    def _numbers(self, value: float, schema: Schema, field: str) -> None:
        if "maximum" in schema:
            limit = schema["maximum"]
            if schema.get("exclusiveMaximum") and value >= limit:
                self.errors.append(
                    invalid_value(field, value, f"{field} in body should be less than {limit}")
                )
            elif value > limit:
                self.errors.append(
                    invalid_value(
                        field, value, f"{field} in body should be less than or equal to {limit}"
                    )
                )
        if "minimum" in schema:
            limit = schema["minimum"]
            if schema.get("exclusiveMinimum") and value <= limit:
                self.errors.append(
                    invalid_value(field, value, f"{field} in body should be greater than {limit}")
                )
            elif value < limit:
                self.errors.append(
                    invalid_value(
                        field, value, f"{field} in body should be greater than or equal to {limit}"
                    )
                )
        multiple = schema.get("multipleOf")
        if multiple and (value / multiple) != int(value / multiple):
            self.errors.append(
                invalid_value(field, value, f"{field} in body should be a multiple of {multiple}")
            )

    def _strings(self, value: str, schema: Schema, field: str) -> None:
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            self.errors.append(too_long(field, schema["maxLength"]))
        if "minLength" in schema and len(value) < schema["minLength"]:
            self.errors.append(
                invalid_value(
                    field,
                    value,
                    f"{field} in body should be at least {schema['minLength']} chars long",
                )
            )
        pattern = schema.get("pattern")
        if pattern:
            try:
                matched = re.search(pattern, value) is not None
            except re.error:
                matched = True
            if not matched:
                self.errors.append(
                    invalid_value(field, value, f"{field} in body should match '{pattern}'")
                )
        fmt = schema.get("format")
        check = _FORMATS.get(fmt or "")
        if check is not None and not check(value):
            self.errors.append(
                invalid_value(
                    field,
                    value,
                    f"{field} in body must be of type {fmt}: {value!r}".replace("'", '"'),
                )
            )

    def _arrays(self, value: list[Any], schema: Schema, path: list[str | int], old: Any) -> None:
        field = _path_str(path)
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            self.errors.append(too_many(field, len(value), schema["maxItems"]))
        if "minItems" in schema and len(value) < schema["minItems"]:
            self.errors.append(
                invalid_value(
                    field,
                    len(value),
                    f"{field} in body should have at least {schema['minItems']} items",
                )
            )
        list_type = schema.get("x-kubernetes-list-type")
        if schema.get("uniqueItems") or list_type == "set":
            seen: list[Any] = []
            for index, item in enumerate(value):
                if item in seen:
                    self.errors.append(duplicate(_path_str([*path, index]), item))
                seen.append(item)
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen_keys: list[tuple[Any, ...]] = []
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    key = tuple(item.get(k) for k in keys)
                    if key in seen_keys:
                        shown = {k: item.get(k) for k in keys}
                        self.errors.append(duplicate(_path_str([*path, index]), shown))
                    seen_keys.append(key)
        items = schema.get("items")
        if isinstance(items, dict):
            old_items = self._old_list_items(value, old, schema)
            for index, item in enumerate(value):
                self.validate(item, items, [*path, index], old_items[index])

    @staticmethod
    def _old_list_items(value: list[Any], old: Any, schema: Schema) -> list[Any]:
        if not isinstance(old, list):
            return [cel.MISSING] * len(value)
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            by_key = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}
            return [
                by_key.get(tuple(v.get(k) for k in keys), cel.MISSING)
                if isinstance(v, dict)
                else cel.MISSING
                for v in value
            ]
        return [cel.MISSING] * len(value)

    def _objects(
        self, value: dict[str, Any], schema: Schema, path: list[str | int], old: Any, root: bool
    ) -> None:
        field = _path_str(path)
        for name in schema.get("required") or []:
            if name not in value:
                self.errors.append(required(_path_str([*path, name])))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            self.errors.append(too_many(field, len(value), schema["maxProperties"]))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            self.errors.append(
                invalid_value(
                    field,
                    len(value),
                    f"{field} in body should have at least {schema['minProperties']} properties",
                )
            )
        props = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        old_map = old if isinstance(old, dict) else {}
        for key, item in value.items():
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            sub = props.get(key)
            if sub is None and isinstance(additional, dict):
                sub = additional
            if sub is not None:
                self.validate(item, sub, [*path, key], old_map.get(key, cel.MISSING))

    def _validate_rules(self, value: Any, schema: Schema, path: list[str | int], old: Any) -> None:
        rules = schema.get("x-kubernetes-validations")
        if not rules or value is None:
            return
        field = _path_str(path)
        for rule in rules:
            if not isinstance(rule, dict) or not isinstance(rule.get("rule"), str):
                continue
            text = rule["rule"]
            if (
                old is cel.MISSING
                and cel.mentions_old_self(text)
                and not rule.get("optionalOldSelf")
            ):
                continue  # transition rules only run on updates
            try:
                ok = cel.evaluate(text, value, old)
            except cel.Unsupported as exc:
                if self.cel_log is not None:
                    self.cel_log(f"CEL rule not supported, accepted: {text!r} ({exc})")
                continue
            except cel.EvalError as exc:
                self.errors.append(
                    invalid_value(
                        _rule_field(field, rule),
                        _type_name(value),
                        f"{exc} evaluating rule: {text}",
                    )
                )
                continue
            if ok is not True:
                message = rule.get("message")
                expr = rule.get("messageExpression")
                if isinstance(expr, str):
                    try:
                        rendered = cel.evaluate(expr, value, old)
                        if isinstance(rendered, str) and rendered.strip():
                            message = rendered
                    except (cel.Unsupported, cel.EvalError):
                        pass
                if not message:
                    message = f"failed rule: {text}"
                reason = rule.get("reason") or "FieldValueInvalid"
                target = _rule_field(field, rule)
                if reason == "FieldValueRequired":
                    self.errors.append(FieldError(target, reason, f"Required value: {message}"))
                elif reason == "FieldValueForbidden":
                    self.errors.append(FieldError(target, reason, f"Forbidden: {message}"))
                elif reason == "FieldValueDuplicate":
                    self.errors.append(
                        FieldError(
                            target, reason, f"Duplicate value: {_type_name(value)}: {message}"
                        )
                    )
                else:
                    self.errors.append(invalid_value(target, _type_name(value), message))


def _rule_field(field: str, rule: dict[str, Any]) -> str:
    extra = rule.get("fieldPath")
    if isinstance(extra, str) and extra:
        return field + extra if extra.startswith((".", "[")) else f"{field}.{extra}"
    return field


def _type_name(value: Any) -> str:
    return _json_type(value)


BLOCKING = ("FieldValueTypeInvalid", "FieldValueNotSupported")


def validate_object(
    obj: dict[str, Any],
    schema: Schema,
    old: dict[str, Any] | None = None,
    cel_log: Callable[[str], None] | None = None,
) -> list[FieldError]:
    """Schema validation, then CEL rules unless a type/enum error blocks them (as upstream)."""
    previous = cel.MISSING if old is None else old
    plain = Validator(rules=False)
    plain.validate(obj, schema, [], previous, root=True)
    if any(e.kind in BLOCKING for e in plain.errors):
        return [
            *plain.errors,
            FieldError(
                "<nil>",
                "FieldValueInvalid",
                'Invalid value: "null": some validation rules were '
                "not checked because the object was invalid; correct the existing errors to "
                "complete validation",
            ),
        ]
    validator = Validator(cel_log)
    validator.validate(obj, schema, [], previous, root=True)
    return validator.errors


def collect_rules(schema: Any) -> list[str]:
    """All CEL rule texts declared anywhere in a schema (for load-time checks)."""
    found: list[str] = []
    if isinstance(schema, dict):
        for rule in schema.get("x-kubernetes-validations") or []:
            if isinstance(rule, dict) and isinstance(rule.get("rule"), str):
                found.append(rule["rule"])
        for key, value in schema.items():
            if key in ("properties",) and isinstance(value, dict):
                for sub in value.values():
                    found.extend(collect_rules(sub))
            elif key in ("items", "additionalProperties", "not"):
                found.extend(collect_rules(value))
            elif key in ("allOf", "anyOf", "oneOf") and isinstance(value, list):
                for sub in value:
                    found.extend(collect_rules(sub))
    return found
