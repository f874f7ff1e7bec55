"""One error shape: RFC 9457 problem details (``application/problem+json``) on every 4xx and 5xx.

Every error body is ``{"type", "title", "status", "detail"}``; a 422 adds ``errors``, one
item per offending field (``loc`` the path to it as FastAPI names it, ``msg`` the reason,
``type`` a machine-readable kind). The handlers here translate, at the edge (style.md §4):

* the project's :class:`~proxy.errors.ProxyError` hierarchy (404, 409, 422, 401, 503),
* FastAPI's own request validation (422) and Starlette's HTTP errors (404 for an unknown
  path, 405, 413 from :mod:`proxy.api.limits`),
* anything unexpected (500: the body names no internals; the traceback goes to the log).

A 503 says what is unavailable, never the driver's text (issue 24: that goes to the log).
``problem_responses(...)`` declares the same shape for a route's error statuses in the
OpenAPI, and :func:`install_problem_schema` adds the schema the declarations refer to.
"""

from __future__ import annotations

import logging
import math
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from proxy.errors import (
    AuthError,
    ConflictError,
    NotFoundError,
    ProxyError,
    RateLimitedError,
    StandbyError,
    StorageError,
    ValidationError,
)

__all__ = [
    "PROBLEM_JSON",
    "FieldError",
    "Problem",
    "install_problem_handlers",
    "install_problem_schema",
    "problem",
    "problem_responses",
]

PROBLEM_JSON = "application/problem+json"

# RFC 9457 §3.1.1: ``type`` is a URI that need not resolve; a tag URI (RFC 4151) names
# our kinds of problem without promising a page. docs/api.md lists them.
TYPE_PREFIX = "tag:feed-monitoring-proxy,2026:problem:"

_log = logging.getLogger("proxy.api")

#: The type slug of each status we answer; any other status gets ``http-<status>``.
_SLUGS = {
    400: "bad-request",
    401: "unauthorized",
    404: "not-found",
    405: "method-not-allowed",
    409: "conflict",
    413: "content-too-large",
    429: "too-many-requests",
    422: "validation",
    500: "internal",
    503: "unavailable",
}


class FieldError(BaseModel):
    """One offending field of a 422: where it is and what is wrong with it."""

    loc: list[str | int] = Field(description="Path to the field: `body`, `query`, `path` or "
                                             "`header`, then names and list indexes.")
    msg: str = Field(description="What is wrong and, where possible, how to fix it.")
    type: str = Field(description="A machine-readable kind, e.g. `value_error`, `missing`.")


class Problem(BaseModel):
    """RFC 9457 problem details: every error the API answers (4xx and 5xx) has this shape."""

    type: str = Field(description=f"A URI naming the kind of problem (`{TYPE_PREFIX}<kind>`).")
    title: str = Field(description="A short summary of the kind (the status' reason phrase).")
    status: int = Field(description="The HTTP status code, repeated.")
    detail: str = Field(description="What went wrong in this request, in words.")
    errors: list[FieldError] | None = Field(
        None, description="422 only: one item per offending field.")


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem(
    status: int,
    detail: str,
    *,
    kind: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """An ``application/problem+json`` response."""
    body: dict[str, Any] = {
        "type": TYPE_PREFIX + (kind or _SLUGS.get(status, f"http-{status}")),
        "title": _phrase(status),
        "status": status,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_JSON)


_DESCRIPTIONS = {
    400: "The request is malformed.",
    401: "Missing, unknown or revoked API key (`WWW-Authenticate: Bearer`).",
    404: "No such object, or it is another user's.",
    409: "The request contradicts the stored state.",
    413: "The request body is larger than `PROXY_MAX_REQUEST_BYTES`.",
    429: "Too many requests for this object; `Retry-After` says when to retry.",
    422: "Invalid input: `errors` names each offending field.",
    503: "The database is unavailable, or this process is a standby.",
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` declaring ``statuses`` with the problem-details body."""
    return {
        status: {
            "description": _DESCRIPTIONS.get(status, _phrase(status)),
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


def install_problem_schema(app: FastAPI) -> None:
    """Complete the OpenAPI with the problem-details errors every operation can answer.

    Declared once here rather than on each route, so no route can forget one: 401 where the
    operation needs the API key, 404 where its path names an object, 413 where it takes a
    body, 422 everywhere (FastAPI's own 422 schema is replaced), 503 under ``/api/`` (the
    database). Routes declare their other statuses (409, a ping's 401) themselves. Adds the
    ``Problem`` schema the declarations refer to.
    """
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = generate()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        problem_schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(problem_schema.pop("$defs", {}))
        components["Problem"] = problem_schema
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                statuses = [422]
                if operation.get("security"):
                    statuses.append(401)
                if "{" in path:
                    statuses.append(404)
                if "requestBody" in operation or method in ("post", "put", "patch"):
                    statuses.append(413)
                if path.startswith("/api/"):
                    statuses.append(503)
                responses = operation.setdefault("responses", {})
                for status, declared in problem_responses(*statuses).items():
                    responses[str(status)] = declared
                operation["responses"] = dict(sorted(responses.items()))
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _status_of(exc: ProxyError) -> int:
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, ValidationError):
        return 422
    if isinstance(exc, AuthError):
        return 401
    if isinstance(exc, RateLimitedError):
        return 429
    if isinstance(exc, StorageError | StandbyError):
        return 503
    return 500


def _loc_of(exc: ProxyError) -> list[str | int]:
    from proxy.feeds import FeedUrlRefusedError  # the feed layer is optional to this module

    loc = getattr(exc, "loc", None)
    if loc is None and isinstance(exc, FeedUrlRefusedError):
        loc = "url"
    if not loc:
        return ["body"]
    if isinstance(loc, list | tuple):
        return list(loc)
    return ["body", *(int(p) if p.isdigit() else p for p in str(loc).split("."))]


async def _proxy_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProxyError)
    status = _status_of(exc)
    detail = str(exc)
    if status == 401:
        return problem(401, detail, headers={"WWW-Authenticate": "Bearer"})
    if status == 422:
        loc = _loc_of(exc)
        return problem(422, detail, errors=[{"loc": loc, "msg": detail, "type": "value_error"}])
    if isinstance(exc, RateLimitedError):
        # RFC 9110 §10.2.3: delay-seconds is a whole number; round up so a retry at once succeeds.
        return problem(429, detail, headers={"Retry-After": str(max(1, math.ceil(exc.retry_after)))})
    if isinstance(exc, StorageError):
        request.app.state.service.metrics.db_errors.inc()
        # The driver's text names tables and SQL: log it, answer what is unavailable.
        _log.warning("storage error answering %s %s: %s", request.method, request.url.path, exc)
        from proxy.service.health import DATABASE_UNAVAILABLE  # the 503 words live there

        return problem(503, DATABASE_UNAVAILABLE)
    if isinstance(exc, StandbyError):
        return problem(503, detail, kind="standby")
    if status == 500:
        _log.error("unmapped error answering %s %s", request.method, request.url.path,
                    exc_info=exc)
        return problem(500, "internal error; the server log has the details")
    return problem(status, detail)


def _field_errors(errors: Any) -> list[dict[str, Any]]:
    return [
        {
            "loc": [p if isinstance(p, int) else str(p) for p in err.get("loc", ())],
            "msg": str(err.get("msg", "")),
            "type": str(err.get("type", "value_error")),
        }
        for err in errors
    ]


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = _field_errors(exc.errors())
    lines = [".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in errors]
    return problem(422, "; ".join(lines) or "invalid request", errors=errors)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    detail = exc.detail if isinstance(exc.detail, str) else _phrase(status)
    if status == 400:
        # FastAPI answers 400 when a body cannot be read as its content type says (bytes that
        # are not UTF-8 under application/json): invalid input like any other, so a 422.
        return problem(422, f"the request body cannot be parsed: {detail}",
                       errors=[{"loc": ["body"], "msg": detail, "type": "body_unreadable"}])
    if status == 404 and detail == "Not Found":
        detail = f"no route {request.url.path}"
    return problem(status, detail, headers=dict(exc.headers) if exc.headers else None)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    _log.error("unexpected error answering %s %s", request.method, request.url.path, exc_info=exc)
    return problem(500, "internal error; the server log has the details")


def install_problem_handlers(app: FastAPI) -> None:
    """Every error the app answers, as problem details."""
    app.add_exception_handler(ProxyError, _proxy_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
