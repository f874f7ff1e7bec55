"""Input the API refuses before it reaches the service: oversized bodies, unprintable text,
ids no table can hold (issue 24: no 500 from any input).

* :class:`BodyLimitMiddleware`: a request body over ``PROXY_MAX_REQUEST_BYTES`` answers 413
  before it is read whole: at once when ``Content-Length`` says so, else as soon as the
  bytes received pass the limit (chunked bodies).
* :func:`refuse_unprintable`: a dependency of every route; a control character (NUL
  included; tab, newline and carriage return are allowed) or a lone surrogate in any JSON
  string or query value answers 422 naming the field. PostgreSQL's text refuses NUL and
  no encoder takes a lone surrogate: they must not get as far as the database.
* :data:`FeedId`, :data:`ProfileId`, … path parameters: an id outside the column's range
  (beyond PostgreSQL's 32-bit ``integer``, SQLite's 64 bits, or not positive) names no
  object, so it answers 404 like any missing id.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from fastapi import Depends, Path, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.api.problems import problem
from proxy.errors import NotFoundError, ValidationError

__all__ = [
    "MAX_BIG_ID",
    "MAX_ID",
    "BodyLimitMiddleware",
    "DeliveryId",
    "FeedId",
    "ProfileId",
    "TargetId",
    "find_unprintable",
    "refuse_unprintable",
]

#: Ids in ``integer`` columns (PostgreSQL's 32 bits) and ``BigId`` ones (64 bits).
MAX_ID = 2**31 - 1
MAX_BIG_ID = 2**63 - 1


class _TooLarge(StarletteHTTPException):
    """The body passed the limit while being read (raised from ``receive``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes "
                              "(PROXY_MAX_REQUEST_BYTES)")


class BodyLimitMiddleware:
    """413 for request bodies over ``max_bytes``, never reading more than that.

    Not FastAPI's own ``max_body_size``: when a route does not read the body, that one
    swaps the route's answer for a ``text/plain`` 413, outside our one error shape.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = None
                if declared is not None and declared > limit:
                    await problem(413, _TooLarge(limit).detail)(scope, receive, send)
                    return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge as exc:
            # Raised where no handler saw it (a route reading the body itself).
            if started:
                raise
            await problem(413, exc.detail)(scope, receive, send)


# C0 controls but tab, newline and carriage return; DEL; C1 controls; UTF-16 surrogates
# (a lone one survives json.loads and breaks every encoder after it).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def _describe(char: str) -> str:
    code = ord(char)
    kind = "a lone surrogate" if 0xD800 <= code <= 0xDFFF else "a control character"
    return f"{kind} (U+{code:04X})"


def find_unprintable(value: Any, loc: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], str] | None:
    """The first string in ``value`` (JSON: dicts, lists, strings) with a refused
    character: its location and what the character is; keys are checked too."""
    if isinstance(value, str):
        found = _UNPRINTABLE.search(value)
        return (loc, _describe(found.group())) if found else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and (found := _UNPRINTABLE.search(key)):
                return (*loc, key), f"{_describe(found.group())} in a key"
            if (hit := find_unprintable(item, (*loc, key))) is not None:
                return hit
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if (hit := find_unprintable(item, (*loc, i))) is not None:
                return hit
    return None


class UnprintableError(ValidationError):
    """A text field holds a control character or a lone surrogate."""

    def __init__(self, loc: tuple[str | int, ...], what: str) -> None:
        self.loc = list(loc)
        super().__init__(f"{'.'.join(str(p) for p in loc)}: {what} is not allowed in text")


async def refuse_unprintable(request: Request) -> None:
    """422 for a control character or a lone surrogate in the query or the JSON body."""
    for name, value in request.query_params.multi_items():
        if (hit := find_unprintable(value, ("query", name))) is not None:
            raise UnprintableError(*hit)
    if request.method in ("GET", "HEAD", "DELETE", "OPTIONS"):
        return
    content_type = request.headers.get("content-type", "")
    if "json" not in content_type:
        return
    body = await request.body()  # cached by Starlette: FastAPI reads the same bytes
    if not body:
        return
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return  # FastAPI answers the syntax error itself, with its position
    if (hit := find_unprintable(data, ("body",))) is not None:
        raise UnprintableError(*hit)


def _in_range(kind: str, value: int, maximum: int) -> int:
    if not 1 <= value <= maximum:
        raise NotFoundError(kind, value)
    return value


def _feed_id(feed_id: Annotated[int, Path(description="A feed's id.")]) -> int:
    return _in_range("feed", feed_id, MAX_ID)


def _profile_id(profile_id: Annotated[int, Path(description="A profile's id.")]) -> int:
    return _in_range("profile", profile_id, MAX_ID)


def _target_id(target_id: Annotated[int, Path(description="A notify target's id.")]) -> int:
    return _in_range("target", target_id, MAX_ID)


def _delivery_id(delivery_id: Annotated[int, Path(description="A delivery's id.")]) -> int:
    return _in_range("delivery", delivery_id, MAX_BIG_ID)


FeedId = Annotated[int, Depends(_feed_id)]
ProfileId = Annotated[int, Depends(_profile_id)]
TargetId = Annotated[int, Depends(_target_id)]
DeliveryId = Annotated[int, Depends(_delivery_id)]
