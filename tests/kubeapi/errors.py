"""Kubernetes ``Status`` errors, as the real API server sends them."""

from __future__ import annotations

from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(
    code: int,
    message: str,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else REASONS.get(code, ""),
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


class ApiError(Exception):
    """An error answered to the client as a ``Status`` object with ``code`` as HTTP status."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else REASONS.get(code, "")
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return status_body(self.code, self.message, self.reason, self.details)


def qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        f'{qualified(plural, group)} "{name}" not found',
        "NotFound",
        {"name": name, "group": group, "kind": plural} if group else {"name": name, "kind": plural},
    )


def resource_not_found() -> ApiError:
    return ApiError(404, "the server could not find the requested resource", "NotFound", {})


def already_exists(plural: str, group: str, name: str) -> ApiError:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return ApiError(
        409, f'{qualified(plural, group)} "{name}" already exists', "AlreadyExists", details
    )


def conflict(plural: str, group: str, name: str) -> ApiError:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": the object has '
        "been modified; please apply your changes to the latest version and try again",
        "Conflict",
        details,
    )


def method_not_allowed() -> ApiError:
    return ApiError(
        405,
        "the server does not allow this method on the requested resource",
        "MethodNotAllowed",
        {},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(
        415,
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)}",
        "UnsupportedMediaType",
    )


class FieldError:
    """One ``StatusCause`` of an Invalid error (a field path plus a rendered detail)."""

    def __init__(self, field: str, kind: str, detail: str, value: Any = None) -> None:
        self.field = field
        self.kind = kind  # FieldValueInvalid, FieldValueRequired, ...
        self.detail = detail
        self.value = value

    def message(self) -> str:
        return f"{self.field}: {self.detail}" if self.field else self.detail

    def cause(self) -> dict[str, Any]:
        return {"reason": self.kind, "message": self.detail, "field": self.field}


def render_value(value: Any) -> str:
    """Render a value as Go's field errors do (``%#v``-like for scalars, type names else)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        import json

        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    if value is None:
        return "null"
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return str(value)


def invalid_value(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(field, "FieldValueInvalid", f"Invalid value: {render_value(value)}: {detail}")


def type_invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(
        field, "FieldValueTypeInvalid", f"Invalid value: {render_value(value)}: {detail}"
    )


def required(field: str, detail: str = "") -> FieldError:
    text = "Required value" + (f": {detail}" if detail else "")
    return FieldError(field, "FieldValueRequired", text)


def unsupported(field: str, value: Any, supported: list[Any]) -> FieldError:
    values = ", ".join(render_value(v) for v in supported)
    return FieldError(
        field,
        "FieldValueNotSupported",
        f"Unsupported value: {render_value(value)}: supported values: {values}",
    )


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(field, "FieldValueForbidden", f"Forbidden: {detail}")


def too_long(field: str, limit: int) -> FieldError:
    return FieldError(field, "FieldValueTooLong", f"Too long: may not be more than {limit} bytes")


def too_many(field: str, count: int, limit: int) -> FieldError:
    return FieldError(
        field, "FieldValueTooMany", f"Too many: {count}: must have at most {limit} items"
    )


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError(field, "FieldValueDuplicate", f"Duplicate value: {render_value(value)}")


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """The 422 ``Invalid`` error: ``<Kind>[.<group>] "<name>" is invalid: <errors>``."""
    gk = f"{kind}.{group}" if group else kind
    if len(errors) == 1:
        text = errors[0].message()
    else:
        text = "[" + ", ".join(e.message() for e in errors) + "]"
    details: dict[str, Any] = {"name": name, "kind": kind, "causes": [e.cause() for e in errors]}
    if group:
        details["group"] = group
    return ApiError(422, f'{gk} "{name}" is invalid: {text}', "Invalid", details)
