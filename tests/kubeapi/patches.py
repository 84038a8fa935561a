"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and a strategic merge patch subset."""

from __future__ import annotations

import copy
from typing import Any


class PatchError(Exception):
    """A patch that cannot be applied (answered as 422, or 400 for malformed documents)."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ------------------------------------------------------------------------------ JSON patch


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f'invalid JSON pointer: "{path}"')
    return [_unescape(t) for t in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f'unable to parse index "{token}" in path "{path}"')
    index = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if index > limit:
        raise PatchError(f'add operation does not apply: doc is missing path: "{path}"')
    return index


def _walk(doc: Any, tokens: list[str], path: str) -> Any:
    current = doc
    for token in tokens:
        if isinstance(current, dict):
            if token not in current:
                raise PatchError(f'doc is missing path: "{path}": missing value')
            current = current[token]
        elif isinstance(current, list):
            idx = _index(current, token, path, allow_end=False)
            current = current[idx]
        else:
            raise PatchError(f'doc is missing path: "{path}": missing value')
    return current


def _get(doc: Any, path: str) -> Any:
    return _walk(doc, _pointer(path), path)


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("unable to remove the whole document")
    parent = _walk(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f'remove operation does not apply: doc is missing path: "{path}"')
        return doc, parent.pop(last)
    if isinstance(parent, list):
        try:
            idx = _index(parent, last, path, allow_end=False)
        except PatchError as exc:
            raise PatchError(
                f'remove operation does not apply: doc is missing path: "{path}"'
            ) from exc
        return doc, parent.pop(idx)
    raise PatchError(f'remove operation does not apply: doc is missing path: "{path}"')


def _add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return copy.deepcopy(value)
    try:
        parent = _walk(doc, tokens[:-1], path)
    except PatchError as exc:
        op = "replace" if replace else "add"
        raise PatchError(f'{op} operation does not apply: doc is missing path: "{path}"') from exc
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f'replace operation does not apply: doc is missing key: "{path}"')
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if replace:
            idx = _index(parent, last, path, allow_end=False)
            parent[idx] = copy.deepcopy(value)
        else:
            idx = _index(parent, last, path, allow_end=True)
            parent.insert(idx, copy.deepcopy(value))
    else:
        raise PatchError(f'add operation does not apply: doc is missing path: "{path}"')
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 with ``test``; raises PatchError (422) on any failure."""
    if not isinstance(operations, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch", 400)
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op:
            raise PatchError("Unexpected kind: <nil>", 400)
        kind = op["op"]
        path = op.get("path")
        if not isinstance(path, str):
            raise PatchError(f'operation "{kind}" is missing "path"', 400)
        if kind == "add":
            if "value" not in op:
                raise PatchError('add operation does not apply: missing "value"')
            doc = _add(doc, path, op["value"])
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            if "value" not in op:
                raise PatchError('replace operation does not apply: missing "value"')
            if path == "":
                doc = copy.deepcopy(op["value"])
            else:
                doc = _add(doc, path, op["value"], replace=True)
        elif kind == "move":
            source = op.get("from")
            if not isinstance(source, str):
                raise PatchError('move operation does not apply: missing "from"')
            doc, value = _remove(doc, source)
            doc = _add(doc, path, value)
        elif kind == "copy":
            source = op.get("from")
            if not isinstance(source, str):
                raise PatchError('copy operation does not apply: missing "from"')
            doc = _add(doc, path, _get(doc, source))
        elif kind == "test":
            try:
                actual = _get(doc, path)
            except PatchError as exc:
                raise PatchError(f"testing value {path} failed: {exc.message}") from exc
            if not _json_equal(actual, op.get("value")):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


# --------------------------------------------------------------------- strategic merge patch

#: list fields merged by key in strategic merge patches (field name -> merge key)
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
#: merge keys that depend on the enclosing object ("ports" of a container vs. of a Service)
PORT_MERGE_KEYS = {"container": "containerPort", "service": "port"}
#: primitive lists merged as sets
SET_LISTS = {"finalizers"}


def _merge_key(field: str, parent_kind: str) -> str | None:
    if field == "ports":
        return PORT_MERGE_KEYS["container" if parent_kind == "container" else "service"]
    return MERGE_KEYS.get(field)


def strategic_merge_patch(target: Any, patch: Any, parent_kind: str = "") -> Any:
    """Merge like RFC 7386, plus merge-key lists and ``$patch``/``$retainKeys``/... directives."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    if directive == "delete":
        return None
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key.startswith("$deleteFromPrimitiveList/"):
            continue
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        child_kind = (
            "container" if key in ("containers", "initContainers", "ephemeralContainers") else ""
        )
        if isinstance(value, list):
            merge_key = _merge_key(key, parent_kind)
            current = result.get(key)
            if merge_key and isinstance(current, list):
                result[key] = _merge_list_by_key(current, value, merge_key, child_kind)
            elif key in SET_LISTS and isinstance(current, list):
                merged = list(current)
                for item in value:
                    if item not in merged:
                        merged.append(item)
                result[key] = merged
            else:
                result[key] = [_strip(v, child_kind) for v in value]
        elif isinstance(value, dict):
            merged_child = strategic_merge_patch(result.get(key), value, parent_kind="")
            if merged_child is None:
                result.pop(key, None)
            else:
                result[key] = merged_child
        else:
            result[key] = copy.deepcopy(value)
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _strip(value: Any, parent_kind: str = "") -> Any:
    if isinstance(value, dict):
        return strategic_merge_patch({}, value, parent_kind)
    return copy.deepcopy(value)


def _merge_list_by_key(
    current: list[Any], patch: list[Any], key: str, child_kind: str
) -> list[Any]:
    result = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            if isinstance(item, dict) and item.get("$patch") == "replace":
                continue
            result.append(_strip(item, child_kind))
            continue
        position = next(
            (
                i
                for i, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(key) == item[key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                result.pop(position)
            continue
        if position is None:
            result.append(_strip(item, child_kind))
        else:
            result[position] = strategic_merge_patch(result[position], item, child_kind)
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [
            _strip(i, child_kind)
            for i in patch
            if not (isinstance(i, dict) and i.get("$patch") == "replace")
        ]
    return result
