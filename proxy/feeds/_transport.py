"""A lean httpx transport over one aiohttp session, and an httpx client without a cookie jar.

Why not ``httpx_aiohttp.AiohttpTransport``: it maps *every* aiohttp
connection error to ``ConnectTimeout``, which would misreport "connection
refused" as a timeout, and it builds more per request (timeout objects, an
exception-mapping context manager on every chunk): 285 vs 468 µs of client
CPU per 304 in ``docs/bench-probe.md`` (equal within noise in a busier run).  This transport
passes aiohttp's exceptions through unchanged (the fetcher classifies them)
and builds nothing per request that can be built once.

Why no cookies: a cookie one feed sets must never travel with another
user's probe, and a jar would grow with the number of hosts polled.
Dropping cookie extraction also removes httpx's per-response
``http.cookiejar`` round trip.

Neither class does redirects, retries or decompression: httpx decodes
``Content-Encoding`` and the fetcher follows redirects itself.

Why :meth:`CookielessAsyncClient.open_get`: a probe's GET through
``build_request`` + ``send`` pays for what a probe never uses (base-URL
merging, cookie and auth flows, redirect bookkeeping, event hooks, a
second stream wrapper, a log record): 370 vs 222 µs of client CPU per
304 measured side by side (``docs/bench-probe.md``).  ``open_get`` sends
the same request (the client's headers and timeouts, the URL parsed once
and cached) straight to the client's transport.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import httpx
import yarl

__all__ = ["YARL_URL", "CookielessAsyncClient", "LeanAiohttpTransport"]

#: Request extension holding the request's URL as a ``yarl.URL`` (parsed once per feed URL).
YARL_URL = "proxy.yarl_url"


class _Body(httpx.AsyncByteStream):
    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.content.iter_chunked(65536):
            yield chunk

    async def aclose(self) -> None:
        self._response.release()


class LeanAiohttpTransport(httpx.AsyncBaseTransport):
    """httpx transport sending requests through ``session`` (which it owns and closes).

    The per-request timeouts of httpx (``connect``, ``read``, ``pool``) map to
    aiohttp's ``sock_connect``, ``sock_read`` and ``connect``; the total
    timeout is the caller's (``asyncio.timeout``).
    """

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session
        self._timeouts: dict[tuple[Any, Any, Any], aiohttp.ClientTimeout] = {}

    def _timeout(self, ext: dict[str, Any]) -> aiohttp.ClientTimeout:
        key = (ext.get("connect"), ext.get("read"), ext.get("pool"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            timeout = self._timeouts[key] = aiohttp.ClientTimeout(
                total=None, sock_connect=key[0], sock_read=key[1], connect=key[2]
            )
        return timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = request.content or None  # GET probes carry no body
        url = request.extensions.get(YARL_URL)
        response = await self._session.request(
            request.method,
            url if url is not None else str(request.url),
            headers=request.headers.multi_items(),
            data=body,
            allow_redirects=False,
            auto_decompress=False,
            compress=None,
            timeout=self._timeout(request.extensions.get("timeout", {})),
        )
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_Body(response),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        await self._session.close()


class _NoCookies(httpx.Cookies):
    """A cookie container that never stores anything."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None

    def set_cookie_header(self, request: httpx.Request) -> None:
        return None


class CookielessAsyncClient(httpx.AsyncClient):
    """``httpx.AsyncClient`` that neither stores nor sends cookies, with a lean streamed GET.

    ``url_cache``: how many parsed URLs :meth:`open_get` keeps (a probe
    re-requests the same feed URLs; the cache is emptied when full).
    """

    _no_cookies = _NoCookies()

    def __init__(self, *, transport: httpx.AsyncBaseTransport, url_cache: int = 65536,
                 **kwargs: Any) -> None:
        super().__init__(transport=transport, **kwargs)
        self._lean_transport = transport
        self._url_cache = url_cache
        self._urls: dict[str, tuple[httpx.URL, yarl.URL]] = {}

    async def open_get(self, url: str, headers: Mapping[str, str]) -> httpx.Response:
        """``send(build_request("GET", url, headers=headers), stream=True)`` without the rest.

        The request carries the client's headers updated with ``headers``
        and the client's timeouts, as ``build_request`` would; it goes to the
        client's transport without auth, cookies, redirects or event hooks
        (the client has none of them: see the module's docstring).  The
        caller reads the body with ``aiter_bytes`` (decoded) and must
        ``aclose`` the response.  An invalid URL raises ``httpx.InvalidURL``.
        """
        urls = self._urls.get(url)
        if urls is None:
            parsed = httpx.URL(url)
            # aiohttp would parse the URL string again on every request; an already
            # encoded yarl.URL is taken as it is.
            urls = (parsed, yarl.URL(str(parsed), encoded=True))
            if len(self._urls) >= self._url_cache:
                self._urls.clear()
            self._urls[url] = urls
        merged = self.headers.copy()
        merged.update(headers)
        request = httpx.Request(
            "GET", urls[0], headers=merged,
            extensions={"timeout": self.timeout.as_dict(), YARL_URL: urls[1]},
        )
        response = await self._lean_transport.handle_async_request(request)
        response.request = request
        return response

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        if cookies:
            raise ValueError("CookielessAsyncClient does not take cookies")
