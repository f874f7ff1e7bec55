"""Serving the fault modes of the feed farm (one function per family of modes).

Streaming faults (``slow_drip``, ``huge``) write as the client reads and stop
quietly when it goes away; waiting faults (``timeout``, ``slow_drip``) wake up
when the farm closes so shutdown is never held up by a client.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from aiohttp import web

from proxy.sim._farm_docs import (
    HUGE_SUFFIX,
    FeedFormat,
    html_page,
    http_date,
    huge_prefix,
    malformed_document,
    xml_bomb,
)
from proxy.sim._farm_faults import Fault, FaultMode

if TYPE_CHECKING:
    from proxy.sim.feedfarm import FeedFarm

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


async def serve_fault(
    farm: FeedFarm, request: web.Request, feed_id: str, fmt: FeedFormat, fault: Fault
) -> web.StreamResponse:
    """The response of a faulty feed; counts its status on the feed (0 if never answered)."""
    mode, p = fault.mode, fault.params
    if mode is FaultMode.ERROR500:
        farm._count(feed_id, int(p["status"]))
        return web.Response(status=int(p["status"]), text="internal server error\n")
    if mode in _STATUS_ONLY:
        status = _STATUS_ONLY[mode]
        farm._count(feed_id, status)
        return web.Response(status=status, text=f"{status}\n")
    if mode in (FaultMode.RATE_LIMITED, FaultMode.UNAVAILABLE):
        status = 429 if mode is FaultMode.RATE_LIMITED else 503
        farm._count(feed_id, status)
        retry = retry_after(float(p["retry_after"]), bool(p["http_date"]))
        return web.Response(status=status, text=f"{status}\n", headers={"Retry-After": retry})
    if mode is FaultMode.REDIRECT:
        status = int(p["status"])
        farm._count(feed_id, status)
        if p["to"] is not None:
            location = farm.url(str(p["to"]), fmt)
        else:
            loc = str(p["location"])
            location = farm.base_url + loc if loc.startswith("/") else loc
        return web.Response(status=status, headers={"Location": location})
    if mode is FaultMode.REDIRECT_LOOP:
        status = int(p["status"])
        farm._count(feed_id, status)
        return web.Response(
            status=status, headers={"Location": f"{farm.base_url}/loop/{feed_id}/1"}
        )
    if mode is FaultMode.TIMEOUT:
        if await farm._sleep(float(p["seconds"])):
            # Shutting down: drop the connection rather than answer, so a
            # client never mistakes the shutdown for a response.
            farm._count(feed_id, 0)
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=504)
        farm._count(feed_id, 504)
        return web.Response(status=504, text="the farm's timeout fault elapsed\n")
    if mode is FaultMode.SLOW_DRIP:
        return await _drip(farm, request, feed_id, fmt, int(p["chunk_size"]), float(p["delay"]))
    if mode is FaultMode.HUGE:
        return await _huge(
            farm, request, feed_id, int(p["size"]), bool(p["content_length"]), int(p["chunk_size"])
        )
    body_of = _BODIES[mode]
    farm._count(feed_id, 200)
    content_type = "text/html; charset=utf-8" if mode is FaultMode.HTML else fmt.content_type
    body = body_of(farm._document(feed_id, fmt), feed_id)
    return web.Response(body=body, headers={"Content-Type": content_type})


async def _drip(
    farm: FeedFarm, request: web.Request, feed_id: str, fmt: FeedFormat, chunk: int, delay: float
) -> web.StreamResponse:
    body = farm._document(feed_id, fmt)
    resp = web.StreamResponse(headers={"Content-Type": fmt.content_type})
    resp.content_length = len(body)
    farm._count(feed_id, 200)
    await resp.prepare(request)
    try:
        for start in range(0, len(body), chunk):
            if start and await farm._sleep(delay):
                break  # the farm is closing
            await resp.write(body[start : start + chunk])
        else:
            await resp.write_eof()
    except ConnectionError:
        pass  # the client gave up, which is what this fault provokes
    return resp


async def _huge(
    farm: FeedFarm, request: web.Request, feed_id: str, size: int, content_length: bool, chunk: int
) -> web.StreamResponse:
    prefix, suffix = huge_prefix(feed_id), HUGE_SUFFIX
    padding = b"A" * chunk
    resp = web.StreamResponse(headers={"Content-Type": FeedFormat.RSS.content_type})
    if content_length:
        resp.content_length = size
    farm._count(feed_id, 200)
    await resp.prepare(request)
    try:
        if size <= len(prefix) + len(suffix):
            await resp.write((prefix + suffix)[:size])
        else:
            await resp.write(prefix)
            left = size - len(prefix) - len(suffix)
            while left > 0 and not farm._closing.is_set():
                n = min(left, chunk)
                await resp.write(padding if n == chunk else padding[:n])
                left -= n
            await resp.write(suffix)
        await resp.write_eof()
    except ConnectionError:
        pass  # the client stopped reading at its body limit, as it should
    return resp
