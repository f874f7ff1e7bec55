"""Sending one notification to one target: a signed webhook POST, or an Apprise notification.

Each send returns a :class:`SendResult`; nothing about the target raises (a
refused address, a timeout, a 500 are results). Retrying is the dispatcher's
business, not this module's.

The webhook client is aiohttp with the feed layer's :class:`GuardedResolver`,
so the SSRF guard runs at every send, on the addresses the socket connects to
(no DNS rebinding between check and connect), and IP literals are checked by
:func:`check_url_syntax` before the request. No environment proxies, no
cookies, no redirects (a webhook that redirects is not delivered: 3xx is a
failure, as Standard Webhooks receivers answer 2xx).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from proxy.feeds.fetch import DEFAULT_USER_AGENT, GuardedResolver
from proxy.feeds.politeness import parse_retry_after
from proxy.feeds.ssrf import (
    AddressPolicy,
    AddressRefusedError,
    FeedUrlRefusedError,
    HostResolver,
    SystemResolver,
    check_url_syntax,
)

__all__ = ["SendResult", "Sender", "WebhookSender"]


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of one attempt: ``ok`` (2xx), or why not; ``gone``: 410, disable the target."""

    ok: bool
    status: int | None = None
    error: str | None = None
    retry_after: float | None = None  # seconds the receiver asked us to wait
    gone: bool = False


class Sender(Protocol):
    """Delivers one rendered notification (the dispatcher's port to the outside)."""

    async def webhook(self, url: str, headers: dict[str, str], body: bytes) -> SendResult: ...

    async def apprise(self, url: str, title: str, body: str) -> SendResult: ...

    async def aclose(self) -> None: ...


class WebhookSender:
    """POSTs webhooks through one aiohttp session guarded by the SSRF policy; also sends Apprise."""

    def __init__(
        self,
        policy: AddressPolicy,
        *,
        timeout: float = 10.0,
        resolver: HostResolver | None = None,
        max_connections: int = 200,
        user_agent: str = DEFAULT_USER_AGENT,
    ) -> None:
        self._policy = policy
        self._user_agent = user_agent  # PROXY_USER_AGENT: receivers see who calls, as feed hosts do
        self._timeout = timeout
        self._resolver: HostResolver = resolver or SystemResolver()
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                resolver=GuardedResolver(self._policy, self._resolver),
                ttl_dns_cache=60,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,  # an environment proxy would bypass the SSRF guard
                cookie_jar=aiohttp.DummyCookieJar(),
                headers={"User-Agent": self._user_agent},
            )
        return self._session

    async def webhook(self, url: str, headers: dict[str, str], body: bytes) -> SendResult:
        try:
            check_url_syntax(url, self._policy)
        except FeedUrlRefusedError as exc:
            return SendResult(False, error=f"refused: {exc.reason}")
        session = self._client()
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        try:
            async with session.post(
                url,
                data=body,
                headers={**headers, "Content-Type": "application/json"},
                allow_redirects=False,
                timeout=timeout,
            ) as response:
                await response.read()  # let the connection be reused
                status = response.status
                if 200 <= status < 300:
                    return SendResult(True, status=status)
                retry = _retry_after_seconds(response.headers.get("Retry-After"))
                return SendResult(
                    False, status=status, error=f"HTTP {status}", retry_after=retry,
                    gone=status == 410,
                )
        except TimeoutError:
            return SendResult(False, error=f"timeout after {self._timeout:g}s")
        except aiohttp.ClientError as exc:
            refused = _refusal(exc)
            if refused is not None:
                return SendResult(False, error=f"refused: {refused.reason}")
            return SendResult(False, error=f"{type(exc).__name__}: {exc}"[:500])
        except OSError as exc:
            return SendResult(False, error=f"{type(exc).__name__}: {exc}"[:500])

    async def apprise(self, url: str, title: str, body: str) -> SendResult:
        """One Apprise notification. Apprise reports success or failure only (no status,
        no Retry-After); its log lines of the attempt become the error."""
        import apprise  # heavy; loaded on the first Apprise delivery

        messages: list[str] = []

        def keep(entry: object) -> None:
            messages.append(str(getattr(entry, "message", entry)))

        # Apprise's HTTP plugins send its asset's app_id as their User-Agent.
        client = apprise.Apprise(asset=apprise.AppriseAsset(app_id=self._user_agent))
        if not client.add(url):
            return SendResult(False, error="Apprise no longer accepts this URL")
        try:
            result = await asyncio.wait_for(
                client.async_notify(body=body, title=title, log_callback=keep),
                self._timeout,
            )
        except TimeoutError:
            return SendResult(False, error=f"timeout after {self._timeout:g}s")
        ok = bool(result)
        if ok:
            return SendResult(True)
        detail = "; ".join(m for m in messages if m)[-500:] or "Apprise reported a failure"
        return SendResult(False, error=detail)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _retry_after_seconds(value: str | None) -> float | None:
    """RFC 9110 §10.2.3: delay-seconds or an HTTP-date; ``None`` when absent or invalid."""
    now = dt.datetime.now(dt.UTC)
    when = parse_retry_after(value, now)
    return None if when is None else max(0.0, (when - now).total_seconds())


def _refusal(exc: BaseException) -> AddressRefusedError | None:
    """The SSRF guard's refusal in ``exc``'s chain (aiohttp wraps resolver errors)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, AddressRefusedError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
