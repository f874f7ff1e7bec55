"""The fetcher: one probe = one conditional HTTP GET (following redirects), parse, new entries.

:class:`Fetcher` owns the one shared ``httpx.AsyncClient`` (without a cookie
jar).  Its transport is a lean httpx transport over an ``aiohttp`` connector
whose DNS resolver is the SSRF guard (:class:`GuardedResolver`): every
address a socket connects to was checked first, including after redirects.
httpx's own pool collapses under concurrency on this machine, and the
``httpx-aiohttp`` transport misreports refused connections as timeouts and
costs more CPU; see ``docs/bench-probe.md`` and :mod:`proxy.feeds._transport`.

What a probe does, in order (each step may end it with a typed result):

1. the URL's scheme and literal address are checked (``Refused``);
2. a slot for the host is taken (per-host concurrency and minimum delay);
3. a GET with ``If-None-Match`` / ``If-Modified-Since`` is sent, with connect,
   read and total timeouts (``Timeout``, ``NetworkError``);
4. redirects are followed by hand, at most ``max_redirects`` (``Redirected``);
   an unbroken run of 301/308 from the start becomes ``moved_to`` (and the
   new ``state.url``) if the probe then succeeds (``Ok``/``NotModified``);
5. 304 -> ``NotModified``; 410 -> ``Gone``; 429, and 503 with Retry-After ->
   ``RateLimited``; other non-2xx -> ``HttpError``;
6. the body is streamed (decompressed) up to ``max_body_bytes`` (``TooLarge``);
7. it is parsed in an executor, off the event loop (``ParseError``), and
   split into known and new entries with one ``KnownEntries.known`` call.

The fetcher deliberately does not schedule, persist or retry within a probe:
the returned result says when the next probe makes sense (``not_before``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urljoin

import aiohttp
import httpx
from aiohttp.abc import AbstractResolver, ResolveResult

from proxy import DEFAULT_USER_AGENT
from proxy.feeds._transport import CookielessAsyncClient, LeanAiohttpTransport
from proxy.feeds.identity import split_new
from proxy.feeds.parse import FeedParseError, ParsedFeed, parse_document
from proxy.feeds.politeness import (
    HostLimiter,
    backoff_not_before,
    cache_not_before,
    parse_retry_after,
)
from proxy.feeds.results import (
    FeedState,
    Gone,
    HttpError,
    KnownEntries,
    NetworkError,
    NotModified,
    Ok,
    ParseError,
    ProbeResult,
    RateLimited,
    Redirected,
    Refused,
    Timeout,
    TooLarge,
)
from proxy.feeds.ssrf import (
    AddressPolicy,
    AddressRefusedError,
    FeedUrlRefusedError,
    HostResolver,
    SystemResolver,
    check_url_syntax,
    literal_address,
    redact_url,
)
from proxy.feeds.websub import discover

__all__ = [
    "DEFAULT_USER_AGENT",
    "Fetcher",
    "FetcherSettings",
    "GuardedResolver",
    "Prober",
    "check_feed_url",
    "find_in_chain",
    "guarded_client",
]

log = logging.getLogger(__name__)

# feedparser's Accept header plus JSON Feed: feed types first, anything as a last resort.
ACCEPT = (
    "application/atom+xml,application/rss+xml,application/feed+json,"
    "application/rdf+xml;q=0.9,application/xml;q=0.8,text/xml;q=0.8,*/*;q=0.1"
)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHECKED_CACHE = 65536
_PERMANENT = frozenset({301, 308})


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    """Everything configurable about probing; the defaults are polite for the public internet.

    Times are seconds.  ``total_timeout`` bounds one HTTP exchange (connect,
    headers and body), not the time spent waiting for the host's turn.
    """

    allow_private_networks: bool = False
    allowed_networks: tuple[str, ...] = ()
    user_agent: str = DEFAULT_USER_AGENT
    connect_timeout: float = 10.0
    read_timeout: float = 20.0
    total_timeout: float = 30.0
    max_body_bytes: int = 10 * 1024 * 1024
    max_redirects: int = 5
    per_host_concurrency: int = 2
    per_host_min_delay: float = 1.0
    max_connections: int = 200
    backoff_base: float = 60.0
    backoff_cap: float = 6 * 3600.0
    retry_after_cap: float = 24 * 3600.0
    respect_cache_hints: bool = True
    cache_hint_min: float = 0.0
    cache_hint_max: float = 3600.0
    fast_parser: bool = True
    parse_threads: int = 1
    parse_processes: int = 0
    """If > 0, parse in this many worker processes instead of threads (uses more cores)."""

    def __post_init__(self) -> None:
        positive = {
            "connect_timeout": self.connect_timeout,
            "read_timeout": self.read_timeout,
            "total_timeout": self.total_timeout,
            "max_body_bytes": self.max_body_bytes,
            "per_host_concurrency": self.per_host_concurrency,
            "max_connections": self.max_connections,
            "backoff_base": self.backoff_base,
            "parse_threads": self.parse_threads,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"FetcherSettings.{name} must be > 0, got {value!r}")
        non_negative = {
            "max_redirects": self.max_redirects,
            "per_host_min_delay": self.per_host_min_delay,
            "retry_after_cap": self.retry_after_cap,
            "cache_hint_min": self.cache_hint_min,
            "parse_processes": self.parse_processes,
        }
        for name, value in non_negative.items():
            if value < 0:
                raise ValueError(f"FetcherSettings.{name} must be >= 0, got {value!r}")
        if self.backoff_cap < self.backoff_base:
            raise ValueError(
                f"FetcherSettings.backoff_cap ({self.backoff_cap}) must be >= backoff_base "
                f"({self.backoff_base})"
            )
        if self.cache_hint_max < self.cache_hint_min:
            raise ValueError(
                f"FetcherSettings.cache_hint_max ({self.cache_hint_max}) must be >= "
                f"cache_hint_min ({self.cache_hint_min})"
            )
        if not self.user_agent.strip():
            raise ValueError("FetcherSettings.user_agent must not be empty")
        AddressPolicy(self.allow_private_networks, self.allowed_networks)  # validates CIDRs

    @property
    def address_policy(self) -> AddressPolicy:
        return AddressPolicy(self.allow_private_networks, self.allowed_networks)


class Prober(Protocol):
    """What the service needs of a fetcher: :class:`Fetcher`, or :class:`~proxy.feeds.pool.ProbePool`."""

    async def probe(self, state: FeedState, known: KnownEntries, *, now: datetime) -> ProbeResult:
        """Probe one feed once; every outcome is a result (see :meth:`Fetcher.probe`)."""
        ...

    async def check_url(self, url: str) -> None:
        """Raise :class:`FeedUrlRefusedError` for a URL the SSRF guard refuses."""
        ...

    async def aclose(self) -> None: ...


class GuardedResolver(AbstractResolver):
    """aiohttp resolver that refuses hosts resolving to any refused address.

    The addresses returned are exactly the checked ones, so the connector
    connects to what was checked (no DNS-rebinding window).  aiohttp does not
    call resolvers for IP literals; the fetcher checks those itself.
    """

    def __init__(self, policy: AddressPolicy, resolver: HostResolver) -> None:
        self._policy = policy
        self._resolver = resolver

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await self._resolver.resolve(host, port)
        self._policy.check_addresses(host, addresses)
        results: list[ResolveResult] = []
        for addr in addresses:
            ip = literal_address(addr)
            fam = socket.AF_INET6 if ip is not None and ip.version == 6 else socket.AF_INET
            results.append(
                ResolveResult(
                    hostname=host,
                    host=addr,
                    port=port,
                    family=fam,
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
            )
        return results

    async def close(self) -> None:
        return None


async def check_feed_url(url: str, policy: AddressPolicy, resolver: HostResolver) -> None:
    """:meth:`Fetcher.check_url` without a fetcher: syntax, literal address, resolved addresses.

    A host that does not resolve (offline, a brief DNS failure) is *not* refused
    (issue 23): the feed is registered and its probes fail with the resolver's
    reason until it resolves; every fetch checks every resolved address anyway.
    """
    host, port = check_url_syntax(url, policy)
    try:
        httpx.URL(url)  # what the client will parse (IDNA 2008 host encoding included)
    except (httpx.InvalidURL, UnicodeError) as exc:
        raise FeedUrlRefusedError(url, f"not a valid URL ({exc})") from exc
    if literal_address(host) is not None:
        return
    try:
        addresses = await resolver.resolve(host, port)
    except OSError:
        return  # not resolvable now: the fetch-time check decides (and the probe says why)
    try:
        policy.check_addresses(host, addresses)
    except AddressRefusedError as exc:
        raise FeedUrlRefusedError(url, exc.reason) from exc


def guarded_client(
    policy: AddressPolicy,
    resolver: HostResolver,
    *,
    user_agent: str,
    timeout: float,
) -> httpx.AsyncClient:
    """An httpx client for the proxy's requests other than probes (a WebSub hub's
    subscription requests) that connects only where the SSRF guard allows.

    It resolves through :class:`GuardedResolver`, as probes do: the connection goes
    to exactly the addresses checked, so a host that resolved to a public address
    for :func:`check_feed_url` cannot rebind to a private one for the request. A
    refused address fails the request with ``aiohttp.ClientConnectorError`` (an
    ``OSError``) whose cause is :class:`AddressRefusedError`. No redirects are
    followed, no cookies kept, no environment proxy used.
    """
    connector = aiohttp.TCPConnector(resolver=GuardedResolver(policy, resolver), ttl_dns_cache=60)
    session = aiohttp.ClientSession(connector=connector, trust_env=False)
    return CookielessAsyncClient(
        transport=LeanAiohttpTransport(session),
        headers={"User-Agent": user_agent},
        timeout=httpx.Timeout(timeout),
    )


class _TooLargeError(Exception):
    def __init__(self, declared: int | None) -> None:
        self.declared = declared


def find_in_chain(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of ``kind`` in ``exc``'s cause/context chain, or ``None``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class Fetcher:
    """Probes feeds; an async context manager owning the shared HTTP client and parse executor.

    ``resolver`` replaces the system DNS resolver (custom DNS, tests).  One
    instance serves any number of concurrent probes on one event loop.
    """

    def __init__(
        self,
        settings: FetcherSettings | None = None,
        *,
        resolver: HostResolver | None = None,
    ) -> None:
        self.settings = settings or FetcherSettings()
        self._policy = self.settings.address_policy
        self._resolver: HostResolver = resolver or SystemResolver()
        self._limiter = HostLimiter(
            self.settings.per_host_concurrency, self.settings.per_host_min_delay
        )
        self._client: CookielessAsyncClient | None = None
        self._executor: Executor | None = None
        # url -> host of URLs that passed check_url_syntax: the check depends only on the
        # URL and the (fixed) policy, and parsing a literal address costs ~10 µs a probe.
        self._checked: dict[str, str] = {}
        self._parse: Callable[..., ParsedFeed] = parse_document

    async def __aenter__(self) -> Fetcher:
        s = self.settings
        connector = aiohttp.TCPConnector(
            limit=s.max_connections,
            limit_per_host=0,  # our HostLimiter is the per-host policy
            resolver=GuardedResolver(self._policy, self._resolver),
            ttl_dns_cache=60,
        )
        session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,  # an environment proxy would bypass the SSRF guard
            auto_decompress=False,
        )
        transport = LeanAiohttpTransport(session)
        self._client = CookielessAsyncClient(
            transport=transport,
            headers={"User-Agent": s.user_agent, "Accept": ACCEPT},
            timeout=httpx.Timeout(
                connect=s.connect_timeout,
                read=s.read_timeout,
                write=s.read_timeout,
                pool=s.total_timeout,
            ),
            follow_redirects=False,
            trust_env=False,
        )
        if s.parse_processes > 0:
            self._executor = ProcessPoolExecutor(max_workers=s.parse_processes)
        else:
            self._executor = ThreadPoolExecutor(
                max_workers=s.parse_threads, thread_name_prefix="feed-parse"
            )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client and the parse executor (idempotent)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # ------------------------------------------------------------------ registration

    async def check_url(self, url: str) -> None:
        """Check a URL for registration: scheme, literal address, and every resolved address.

        Raises :class:`FeedUrlRefusedError`; does not send any request.  A host
        that does not resolve now passes.  The check is repeated at every
        fetch, so a later DNS change is caught too.
        """
        await check_feed_url(url, self._policy, self._resolver)

    # ------------------------------------------------------------------ probing

    async def probe(self, state: FeedState, known: KnownEntries, *, now: datetime) -> ProbeResult:
        """Probe one feed once.  Every outcome is a result; nothing about the feed raises.

        Only misuse raises: calling outside ``async with`` (``RuntimeError``) or
        a naive ``now`` (``ValueError``).  Cancellation propagates.
        """
        if self._client is None:
            raise RuntimeError("Fetcher.probe() called outside 'async with Fetcher(...)'")
        if now.tzinfo is None:
            raise ValueError(f"Fetcher.probe(now=...) must be timezone-aware (UTC), got {now!r}")
        started = time.perf_counter()
        try:
            return await self._probe(state, known, now, started)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # a bug must not take the scheduler loop down with it
            log.exception("unexpected error probing %s", redact_url(state.url))
            return self._error(NetworkError, state, now, started, reason=f"internal error: {exc!r}")

    def _error(
        self,
        cls: Any,
        state: FeedState,
        now: datetime,
        started: float,
        **fields: Any,
    ) -> ProbeResult:
        """An error outcome: one more consecutive error, back-off ``not_before``.

        A permanent move seen on the way is *not* adopted: the stored URL only
        changes when the new URL actually served the feed (as reader does), so
        a broken or hostile redirect cannot rewrite it.
        """
        errors = state.consecutive_errors + 1
        new_state = replace(state, consecutive_errors=errors)
        not_before = backoff_not_before(
            errors, now, base=self.settings.backoff_base, cap=self.settings.backoff_cap
        )
        result: ProbeResult = cls(
            state=new_state,
            elapsed=time.perf_counter() - started,
            not_before=not_before,
            **fields,
        )
        return result

    async def _probe(
        self, state: FeedState, known: KnownEntries, now: datetime, started: float
    ) -> ProbeResult:
        assert self._client is not None
        s = self.settings
        url = state.url
        moved_to: str | None = None
        permanent_run = True
        headers: dict[str, str] = {}
        if state.etag:
            headers["If-None-Match"] = state.etag
        if state.last_modified:
            headers["If-Modified-Since"] = state.last_modified
        visited: set[str] = set()
        for hop in range(s.max_redirects + 1):
            host = self._checked.get(url)
            if host is None:
                try:
                    host, _port = check_url_syntax(url, self._policy)
                except FeedUrlRefusedError as exc:
                    return self._error(Refused, state, now, started, reason=exc.reason)
                if len(self._checked) >= _CHECKED_CACHE:
                    self._checked.clear()
                self._checked[url] = host
            visited.add(url)
            try:
                async with self._limiter.slot(host):
                    async with asyncio.timeout(s.total_timeout):
                        outcome = await self._exchange(url, headers)
            except _TooLargeError as exc:
                return self._error(
                    TooLarge,
                    state,
                    now,
                    started,
                    limit=s.max_body_bytes,
                    declared=exc.declared,
                )
            except aiohttp.ClientError as exc:
                # Before TimeoutError: aiohttp's socket timeouts subclass it too.
                return self._transport_error(exc, state, now, started)
            except TimeoutError:
                return self._error(Timeout, state, now, started, phase="total")
            except (httpx.InvalidURL, UnicodeError) as exc:
                # e.g. an empty or over-long IDNA label: nothing was sent.
                return self._error(Refused, state, now, started, reason=f"invalid URL ({exc})")
            except (httpx.HTTPError, OSError) as exc:
                return self._transport_error(exc, state, now, started)
            status, resp_headers, body, final = outcome
            if status in _REDIRECTS:
                location = resp_headers.get("location")
                if not location:
                    return self._error(
                        Redirected,
                        state,
                        now,
                        started,
                        location=None,
                        hops=hop + 1,
                        reason=f"{status} without Location",
                    )
                target = urljoin(url, location.strip())
                if status in _PERMANENT and permanent_run:
                    moved_to = target
                else:
                    permanent_run = False
                if target in visited:
                    return self._error(
                        Redirected,
                        state,
                        now,
                        started,
                        location=target,
                        hops=hop + 1,
                        reason="redirect loop",
                    )
                url = target
                continue
            return await self._final(
                status, resp_headers, body, final, state, known, now, started, moved_to
            )
        return self._error(
            Redirected,
            state,
            now,
            started,
            location=url,
            hops=s.max_redirects + 1,
            reason=f"more than {s.max_redirects} redirects",
        )

    async def _exchange(
        self, url: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes | None, str]:
        """One request; returns status, headers and (for 2xx) the body read under the size limit."""
        assert self._client is not None
        limit = self.settings.max_body_bytes
        response = await self._client.open_get(url, headers)
        try:
            status = response.status_code
            # One pass over the headers (lower-cased keys); httpx.Headers.get re-decodes
            # every header on every lookup, and a probe looks up to ten of them.
            received = dict(response.headers.items())
            if not 200 <= status < 300 or status == 204:
                return status, received, None, url
            declared = received.get("content-length")
            if declared and declared.isdigit() and int(declared) > limit:
                raise _TooLargeError(int(declared))
            chunks: list[bytes] = []
            size = 0
            # aiter_bytes yields *decoded* bytes: the limit also stops decompression bombs.
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    raise _TooLargeError(None)
                chunks.append(chunk)
            return status, received, b"".join(chunks), url
        finally:
            await response.aclose()

    def _transport_error(
        self, exc: BaseException, state: FeedState, now: datetime, started: float
    ) -> ProbeResult:
        refused = find_in_chain(exc, AddressRefusedError)
        if isinstance(refused, AddressRefusedError):
            return self._error(Refused, state, now, started, reason=refused.reason)
        # Classify by the aiohttp exception where there is one (the transport passes them on).
        original = find_in_chain(exc, aiohttp.ClientError)
        if isinstance(original, aiohttp.ConnectionTimeoutError):
            return self._error(Timeout, state, now, started, phase="connect")
        if isinstance(original, aiohttp.SocketTimeoutError):
            return self._error(Timeout, state, now, started, phase="read")
        if isinstance(original, aiohttp.ServerTimeoutError):
            return self._error(Timeout, state, now, started, phase="read")
        if original is None and isinstance(exc, httpx.TimeoutException):
            phase = {
                httpx.ConnectTimeout: "connect",
                httpx.ReadTimeout: "read",
                httpx.PoolTimeout: "pool",
            }.get(type(exc), "read")
            return self._error(Timeout, state, now, started, phase=phase)
        cause = original or exc
        return self._error(
            NetworkError,
            state,
            now,
            started,
            reason=f"{type(cause).__name__}: {cause}",
        )

    async def _final(
        self,
        status: int,
        headers: dict[str, str],
        body: bytes | None,
        final_url: str,
        state: FeedState,
        known: KnownEntries,
        now: datetime,
        started: float,
        moved_to: str | None,
    ) -> ProbeResult:
        s = self.settings
        if status == 304:
            new_state = FeedState(
                url=moved_to or state.url,
                etag=headers.get("etag") or state.etag,
                last_modified=headers.get("last-modified") or state.last_modified,
            )
            return NotModified(
                state=new_state,
                elapsed=time.perf_counter() - started,
                not_before=self._cache_hint(headers, None, now),
                moved_to=moved_to,
            )
        if status == 410:
            return Gone(state=state, elapsed=time.perf_counter() - started)
        if status == 429 or (status == 503 and "retry-after" in headers):
            retry_after = parse_retry_after(headers.get("retry-after"), now)
            if retry_after is None:
                return self._error(
                    RateLimited, state, now, started, status=status, retry_after=None
                )
            cap = now + timedelta(seconds=s.retry_after_cap)
            return RateLimited(
                # Honouring the server's wish is not a failure of the feed: the count stays.
                state=state,
                elapsed=time.perf_counter() - started,
                not_before=min(retry_after, cap),
                status=status,
                retry_after=retry_after,
            )
        if body is None:
            return self._error(HttpError, state, now, started, status=status)
        assert self._executor is not None
        content_type = headers.get("content-type")
        loop = asyncio.get_running_loop()
        try:
            parsed = await loop.run_in_executor(
                self._executor,
                functools.partial(
                    self._parse,
                    body,
                    url=final_url,
                    content_type=content_type,
                    fast=s.fast_parser,
                ),
            )
        except FeedParseError as exc:
            return self._error(
                ParseError, state, now, started, reason=exc.reason, detail=exc.detail
            )
        except Exception as exc:  # a parser bug, or a broken worker process
            return self._error(
                ParseError,
                state,
                now,
                started,
                reason="parser-crash",
                detail=f"{type(exc).__name__}: {exc}",
            )
        entries, new = split_new(parsed.entries, known)
        push = discover(body, headers.get("link"), final_url)
        return Ok(
            state=FeedState(
                url=moved_to or state.url,
                etag=headers.get("etag"),
                last_modified=headers.get("last-modified"),
            ),
            elapsed=time.perf_counter() - started,
            not_before=self._cache_hint(headers, parsed.ttl_minutes, now),
            moved_to=moved_to,
            entries=entries,
            new=new,
            feed_title=parsed.title,
            parser=parsed.parser,
            warning=parsed.warning,
            final_url=final_url,
            hub=push.hub if push else None,
            self_url=push.self_url if push else None,
            update_every=parsed.hints.interval() if parsed.hints is not None else None,
        )

    def _cache_hint(
        self, headers: dict[str, str], ttl_minutes: int | None, now: datetime
    ) -> datetime | None:
        s = self.settings
        if not s.respect_cache_hints:
            return None
        return cache_not_before(
            headers, ttl_minutes, now, minimum=s.cache_hint_min, maximum=s.cache_hint_max
        )
