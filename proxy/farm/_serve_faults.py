"""Serving the fault modes of the feed farm (one function per family of modes).

Streaming faults (``slow_drip``, ``huge``) write as the client reads and stop
quietly when it goes away; waiting faults (``timeout``, ``slow_drip``) wake up
when the farm closes so shutdown is never held up by a client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from proxy.farm._docs import (
    HUGE_SUFFIX,
    FeedFormat,
    html_page,
    http_date,
    huge_prefix,
    malformed_document,
    xml_bomb,
)
from proxy.farm._faults import Fault, FaultMode
from proxy.farm._http import Response, Result, Stream, text_response


class FaultHost(Protocol):
    """What serving a fault needs of the farm (``FeedFarm`` is one; this module never imports it)."""

    @property
    def base_url(self) -> str: ...

    @property
    def closing(self) -> bool: ...

    def url(self, feed_id: str, fmt: FeedFormat | str | None = None) -> str: ...

    def count_response(self, feed_id: str, status: int) -> None: ...

    def document(self, feed_id: str, fmt: FeedFormat) -> bytes: ...

    async def sleep_unless_closing(self, seconds: float) -> bool: ...

_STATUS_ONLY = {FaultMode.GONE: 410}

_BODIES: dict[FaultMode, Callable[[bytes, str], bytes]] = {
    FaultMode.MALFORMED: lambda body, _feed_id: malformed_document(body),
    FaultMode.XML_BOMB: lambda _body, _feed_id: xml_bomb(),
    FaultMode.HTML: lambda _body, feed_id: html_page(feed_id),
}


def retry_after(seconds: float, as_date: bool) -> str:
    """A Retry-After value: delay-seconds, or an HTTP-date that many seconds from now."""
    if as_date:
        # RFC 9110 §10.2.3: Retry-After may be an HTTP-date.  Real (not trace)
        # time, because the client compares it with its own clock.
        return http_date(datetime.now(UTC) + timedelta(seconds=seconds))
    return str(round(seconds))


def serve_fault(farm: FaultHost, feed_id: str, fmt: FeedFormat, fault: Fault) -> Result | Awaitable[Result]:
    """The response of a faulty feed; counts its status on the feed (0 if never answered)."""
    mode, p = fault.mode, fault.params
    if mode is FaultMode.ERROR500:
        farm.count_response(feed_id, int(p["status"]))
        return text_response(int(p["status"]), "internal server error\n")
    if mode in _STATUS_ONLY:
        status = _STATUS_ONLY[mode]
        farm.count_response(feed_id, status)
        return text_response(status, f"{status}\n")
    if mode in (FaultMode.RATE_LIMITED, FaultMode.UNAVAILABLE):
        status = 429 if mode is FaultMode.RATE_LIMITED else 503
        farm.count_response(feed_id, status)
        retry = retry_after(float(p["retry_after"]), bool(p["http_date"]))
        return text_response(status, f"{status}\n", (("Retry-After", retry),))
    if mode is FaultMode.REDIRECT:
        status = int(p["status"])
        farm.count_response(feed_id, status)
        if p["to"] is not None:
            location = farm.url(str(p["to"]), fmt)
        else:
            loc = str(p["location"])
            location = farm.base_url + loc if loc.startswith("/") else loc
        return Response(status, (("Location", location),))
    if mode is FaultMode.REDIRECT_LOOP:
        status = int(p["status"])
        farm.count_response(feed_id, status)
        return Response(status, (("Location", f"{farm.base_url}/loop/{feed_id}/1"),))
    if mode is FaultMode.TIMEOUT:
        return _timeout(farm, feed_id, float(p["seconds"]))
    if mode is FaultMode.SLOW_DRIP:
        return _drip(farm, feed_id, fmt, int(p["chunk_size"]), float(p["delay"]))
    if mode is FaultMode.HUGE:
        return _huge(farm, feed_id, int(p["size"]), bool(p["content_length"]), int(p["chunk_size"]))
    body_of = _BODIES[mode]
    farm.count_response(feed_id, 200)
    content_type = "text/html; charset=utf-8" if mode is FaultMode.HTML else fmt.content_type
    body = body_of(farm.document(feed_id, fmt), feed_id)
    return Response(200, (("Content-Type", content_type),), body)


async def _timeout(farm: FaultHost, feed_id: str, seconds: float) -> Result:
    if await farm.sleep_unless_closing(seconds):
        # Shutting down: drop the connection rather than answer, so a
        # client never mistakes the shutdown for a response.
        farm.count_response(feed_id, 0)
        return None
    farm.count_response(feed_id, 504)
    return text_response(504, "the farm's timeout fault elapsed\n")


def _drip(farm: FaultHost, feed_id: str, fmt: FeedFormat, chunk: int, delay: float) -> Stream:
    body = farm.document(feed_id, fmt)
    farm.count_response(feed_id, 200)

    async def chunks(gone: asyncio.Event) -> AsyncIterator[bytes]:
        for start in range(0, len(body), chunk):
            if gone.is_set() or (start and await farm.sleep_unless_closing(delay)):
                return  # the client left, or the farm is closing: the body stays incomplete
            yield body[start : start + chunk]

    return Stream(200, (("Content-Type", fmt.content_type),), len(body), chunks)


def _huge(farm: FaultHost, feed_id: str, size: int, content_length: bool, chunk: int) -> Stream:
    prefix, suffix = huge_prefix(feed_id), HUGE_SUFFIX
    padding = b"A" * chunk
    farm.count_response(feed_id, 200)

    async def chunks(gone: asyncio.Event) -> AsyncIterator[bytes]:
        if size <= len(prefix) + len(suffix):
            yield (prefix + suffix)[:size]
            return
        yield prefix
        left = size - len(prefix) - len(suffix)
        while left > 0:
            if farm.closing or gone.is_set():
                return  # the client stopped reading at its body limit, as it should
            n = min(left, chunk)
            yield padding if n == chunk else padding[:n]
            left -= n
        yield suffix

    return Stream(
        200, (("Content-Type", FeedFormat.RSS.content_type),), size if content_length else None, chunks
    )
