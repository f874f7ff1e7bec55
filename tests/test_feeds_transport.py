"""The probe's lean GET sends what httpx's own build_request + send would send."""

from __future__ import annotations

import httpx
import pytest

from proxy.feeds._transport import CookielessAsyncClient


def _client(seen: list[httpx.Request], *, url_cache: int = 65536) -> CookielessAsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(304, headers={"ETag": '"v2"'})

    return CookielessAsyncClient(
        transport=httpx.MockTransport(handler),
        headers={"User-Agent": "proxy-test/1", "Accept": "application/rss+xml"},
        timeout=httpx.Timeout(connect=1.0, read=2.0, write=3.0, pool=4.0),
        url_cache=url_cache,
    )


async def test_open_get_sends_the_request_build_request_would() -> None:
    seen: list[httpx.Request] = []
    url = "http://feeds.example/a%20b/feed.xml?x=1&y=%C3%A9"
    extra = {"If-None-Match": '"v1"', "If-Modified-Since": "Mon, 01 Jun 2026 10:00:00 GMT"}
    async with _client(seen) as client:
        lean = await client.open_get(url, extra)
        await lean.aread()
        await lean.aclose()
        full = await client.send(client.build_request("GET", url, headers=extra), stream=True)
        await full.aread()
        await full.aclose()
    a, b = seen
    assert a.method == b.method == "GET"
    assert str(a.url) == str(b.url) == url
    assert a.headers.multi_items() == b.headers.multi_items()
    assert a.headers["user-agent"] == "proxy-test/1"
    assert a.headers["if-none-match"] == '"v1"'
    assert a.extensions["timeout"] == b.extensions["timeout"] == {
        "connect": 1.0, "read": 2.0, "write": 3.0, "pool": 4.0,
    }
    assert lean.status_code == full.status_code == 304
    assert lean.request is a
    assert lean.headers["etag"] == '"v2"'


async def test_per_request_headers_override_the_clients() -> None:
    seen: list[httpx.Request] = []
    async with _client(seen) as client:
        r = await client.open_get("http://feeds.example/", {"Accept": "text/xml"})
        await r.aclose()
    assert seen[0].headers.get_list("accept") == ["text/xml"]


async def test_url_cache_is_bounded_and_keeps_answering() -> None:
    seen: list[httpx.Request] = []
    async with _client(seen, url_cache=2) as client:
        for i in (1, 2, 3, 1, 2, 3):
            r = await client.open_get(f"http://feeds.example/{i}.xml", {})
            await r.aclose()
        assert len(client._urls) <= 2
    assert [r.url.path for r in seen] == ["/1.xml", "/2.xml", "/3.xml", "/1.xml", "/2.xml", "/3.xml"]


async def test_invalid_url_raises_httpx_invalid_url() -> None:
    async with _client([]) as client:
        with pytest.raises(httpx.InvalidURL):
            await client.open_get("http://[::1/", {})
