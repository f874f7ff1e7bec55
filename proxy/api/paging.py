"""Every list the API answers is one page of the same shape (issue 23: clients that poll).

``{"items": [...], "total": n, "cursor": "…", "next": "/api/v1/…?cursor=…"}`` with
``Link: <next>; rel="next"`` (RFC 8288) when there is a next page. ``limit`` picks the
page size (with a maximum); ``cursor`` is opaque: the position after the page's last
item, on indexed columns (keyset pagination: page N costs what page 1 does, and rows
added meanwhile neither repeat nor shift the next page). ``total`` counts the whole
list where that is one indexed count, ``null`` where it is not.

Lists that a client polls for what is new (a profile's CEIs and captured entries) also
take ``since`` (RFC 3339) and ``after``; with either, the items come oldest first in the
order they were resolved or first seen, and ``cursor`` is never null: store it and pass
it as ``after`` next time to read each item exactly once.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Generic, TypeVar
from urllib.parse import urlencode

from fastapi import Query, Request, Response
from pydantic import BaseModel, Field

from proxy.errors import ValidationError

__all__ = ["Cursor", "Limit", "Page", "Since", "decode_cursor", "encode_cursor", "next_url", "page",
           "page_params", "parse_since"]

T = TypeVar("T")
R = TypeVar("R")

MAX_LIMIT = 1000


Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"Items per page (at most {MAX_LIMIT}).")]


Cursor = Annotated[
    str | None,
    Query(max_length=200, description="Opaque: the `cursor` of the previous page, to get the next."),
]


Since = Annotated[
    str | None,
    Query(max_length=64, description="RFC 3339 date-time with an offset, e.g. "
                                     "`2026-11-25T14:00:00Z`: only items from then on, oldest first."),
]

_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


class SinceError(ValidationError):
    def __init__(self, text: str) -> None:
        self.loc = ["query", "since"]
        super().__init__(f"since: {text!r} is not an RFC 3339 date-time with an offset, "
                         "such as '2026-11-25T14:00:00Z'")


def parse_since(text: str | None) -> dt.datetime | None:
    """``since`` as an aware UTC datetime; :class:`SinceError` (422) unless RFC 3339."""
    if text is None:
        return None
    if not _RFC3339.fullmatch(text):
        raise SinceError(text)
    value = re.sub(r"[Zz]$", "+00:00", text)
    fraction = re.search(r"\.(\d+)", value)
    if fraction and len(fraction[1]) > 6:  # RFC 3339 allows nanoseconds; Python keeps micro
        value = value.replace(fraction[0], "." + fraction[1][:6])
    try:
        return dt.datetime.fromisoformat(value).astimezone(dt.UTC)
    except (ValueError, OverflowError):
        raise SinceError(text) from None


class Page(BaseModel, Generic[T]):
    """One page of a list."""

    items: list[T]
    total: int | None = Field(
        None, description="Items in the whole list (with this request's filters), where cheap; "
                          "null otherwise.")
    cursor: str | None = Field(
        None, description="Opaque position after this page's last item: pass it as `cursor` "
                          "(or `after`, where the list takes one) for what follows; null at the end.")
    next: str | None = Field(
        None, description="The URL of the next page (also in the `Link` header); null at the end.")


def encode_cursor(key: list[Any]) -> str:
    """The opaque text of a keyset position (base64url of compact JSON)."""
    raw = json.dumps(key, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class CursorError(ValidationError):
    """A cursor this API did not hand out (or for another list)."""

    def __init__(self, name: str) -> None:
        self.loc = ["query", name]
        super().__init__(f"{name}: not a cursor this list handed out; start again without it")


def decode_cursor(text: str | None, name: str, types: tuple[type, ...]) -> list[Any] | None:
    """A keyset position from ``text``, checked against ``types``; :class:`CursorError`
    (422 naming the parameter) if it is not one."""
    if text is None:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise CursorError(name) from None
    if (
        not isinstance(key, list)
        or len(key) != len(types)
        or not all(isinstance(v, t) and not isinstance(v, bool) for v, t in zip(key, types, strict=True))
        or any(isinstance(v, int) and not 0 <= v < 2**63 for v in key)
    ):
        raise CursorError(name)
    return key


def page_params(request: Request) -> list[tuple[str, str]]:
    """The request's query parameters but its position (``cursor``, ``after``)."""
    return [(k, v) for k, v in request.query_params.multi_items() if k not in ("cursor", "after")]


def next_url(path: str, params: Sequence[tuple[str, str]], param: str, cursor: str) -> str:
    """The URL of the page after ``cursor``: the same path and parameters, and the cursor."""
    return f"{path}?{urlencode([*params, (param, cursor)])}"


def page(
    rows: Sequence[R],
    out: Callable[[R], T],
    key_of: Callable[[R], list[Any]],
    *,
    request: Request,
    response: Response,
    limit: int,
    total: int | None = None,
    param: str = "cursor",
    start: list[Any] | None = None,
) -> Page[T]:
    """The page of ``rows`` (``limit + 1`` were fetched: one more says there is a next
    page), each turned into its output by ``out``. ``key_of`` gives a row's keyset
    position. With ``param="after"`` (lists read for what is new) the cursor is handed out
    even at the end (``start`` when the page is empty), so a client can store it."""
    more = len(rows) > limit
    rows = rows[:limit]
    key = key_of(rows[-1]) if rows else start
    always = param == "after"
    cursor = encode_cursor(key) if key is not None and (more or always) else None
    nxt = None
    if cursor is not None:
        nxt = next_url(request.url.path, page_params(request), param, cursor)
        if more:
            response.headers["Link"] = f'<{nxt}>; rel="next"'
    return Page[T](items=[out(r) for r in rows], total=total, cursor=cursor, next=nxt)
