"""Users' feeds: register (one URL, or many from an OPML import), delete, rotate a ping token.

A registration is stored first (the database is the truth), then the feed goes into
the loop's feed table on the loop's thread; users who register the same normalised
URL share one feed, probed once. A deleted registration leaves the engine with the
feed's last one. On an API replica the change is stored, then forwarded to the leader
(:mod:`~proxy.service._replication`).

A new operation on a user's feeds goes here; updates that arrive for a feed (pings,
push) go to :mod:`~proxy.service._arrivals`.

What it does not do: probe (the loop does), or parse OPML (:mod:`proxy.service.opml`).
"""

from __future__ import annotations

import asyncio

import structlog

from proxy.feeds import FeedUrlRefusedError, redact_url
from proxy.service._arrivals import Arrivals
from proxy.service._replication import forward
from proxy.service._shared import Shared
from proxy.service.changes import Change
from proxy.store import RegisteredFeed, Registration

log = structlog.get_logger("proxy.service")


class Registrations:
    """The users' registrations of feeds, and the feed table they fill (module docstring)."""

    def __init__(self, shared: Shared, arrivals: Arrivals) -> None:
        self._s = shared
        self._arrivals = arrivals

    async def register_feed(self, user_id: int, url: str) -> tuple[RegisteredFeed, bool]:
        """Register a feed URL for a user (SSRF-checked unless private networks are allowed).

        Returns ``(feed, created)``; ``created`` is whether the *user's* registration is new.
        Users who register the same (normalised) URL share one feed, fetched once per probe.
        """
        s = self._s
        if s.replica:
            url = url.strip()
            await s.fetcher.check_url(url)
            registered, created = await s.store.register_feed_for(user_id, url)
            await forward(s.store, Change("feed", registered.feed.id))
            return registered, created
        s.require_leader()
        url = url.strip()
        await s.fetcher.check_url(url)
        registered, created = await s.store.register_feed_for(user_id, url)
        feed = registered.feed
        if feed.id not in s.running.feeds.by_id:
            log.info("feed_added", feed=feed.id, url=redact_url(feed.url), resource=feed.resource)
        await s.host.call(s.put_feeds, [feed])
        if created:
            log.info("feed_registered", feed=feed.id, user=user_id)
        return registered, created

    async def register_feeds(
        self, user_id: int, urls: list[str]
    ) -> list[tuple[RegisteredFeed, bool] | FeedUrlRefusedError]:
        """:meth:`register_feed` of many URLs (an OPML import), in order: each URL's
        ``(feed, created)``, or the :class:`FeedUrlRefusedError` that refused it. The SSRF
        checks run concurrently (bounded: they may resolve host names), the accepted URLs
        are stored in one transaction."""
        s = self._s
        s.require_leader()
        gate = asyncio.Semaphore(32)

        async def check(url: str) -> FeedUrlRefusedError | None:
            async with gate:
                try:
                    await s.fetcher.check_url(url)
                except FeedUrlRefusedError as exc:
                    return exc
                return None

        refusals = await asyncio.gather(*(check(url.strip()) for url in urls))
        accepted = [url.strip() for url, refused in zip(urls, refusals, strict=True) if refused is None]
        stored = await s.store.register_feeds_for(user_id, accepted) if accepted else []
        await s.host.call(s.put_feeds, [registered.feed for registered, _ in stored])
        rows = iter(stored)
        out: list[tuple[RegisteredFeed, bool] | FeedUrlRefusedError] = []
        added = 0
        for refused in refusals:
            if refused is not None:
                out.append(refused)
                continue
            registered, created = next(rows)
            added += created
            out.append((registered, created))
        log.info("feeds_registered", user=user_id, added=added, given=len(urls))
        return out

    async def delete_feed(self, user_id: int, feed_id: int) -> None:
        """Delete the user's registration (:class:`ConflictError` while their rules read it);
        the shared feed leaves the engine with its last registration."""
        s = self._s
        if s.replica:
            if await s.store.delete_registration(user_id, feed_id):
                await forward(s.store, Change("feed_deleted", feed_id))
            return
        s.require_leader()

        async def delete() -> bool:  # on the loop's thread: not while a write round runs,
            async with s.lock:  # their row locks would deadlock
                gone = await s.loop_store.delete_registration(user_id, feed_id)
            if gone:
                s.running.feeds.remove(feed_id)
            return gone

        gone = await s.host.run(delete())
        if gone:
            self._arrivals.forget(feed_id)
        log.info("feed_unregistered", feed=feed_id, user=user_id, feed_deleted=gone)

    async def rotate_ping_token(self, user_id: int, feed_id: int) -> Registration:
        """A new ping token for the user's registration; the old one stops working."""
        s = self._s
        if not s.replica:  # a token lives in the database only: any replica rotates it
            s.require_leader()
        registration = await s.store.rotate_ping_token(user_id, feed_id)
        log.info("ping_token_rotated", feed=feed_id, user=user_id)
        return registration
