"""Updates that arrive: a feed's publisher (or a user for it) says the feed changed.

A ping (``POST /api/v1/feeds/{id}/ping`` with a registration's token), or a WebSub
content distribution (issue 44; :mod:`~proxy.service._websub` checks its signature and
calls :meth:`Arrivals.apply_push`): whatever the channel, an arrival is
authenticated, rate-limited per feed, and then heard by the evaluator for the rules of
the users it speaks for (``on: ping`` rules and watch rules open or grow CEIs) and
taught to the feed's update model. shared/design.md: a push is one more way to learn
that a feed changed, never a second pipeline; the loop still schedules the probes.

On an API replica (issue 21) an arrival is checked and counted here, then forwarded to
the leader (:mod:`~proxy.service._replication`), which hears it with
:meth:`Arrivals.apply_ping`.

What it does not do: fetch the feed (the loop's probes do; a pushed document's entries are
stored by the loop as a probe's are, :meth:`ChrononLoop.hear_push`).
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from proxy.errors import AuthError, FeedNotFoundError, RateLimitedError
from proxy.feeds import Entry
from proxy.service._ratelimit import TokenBuckets
from proxy.service._replication import forward
from proxy.service._shared import Shared
from proxy.service.changes import Change

log = structlog.get_logger("proxy.service")


class Arrivals:
    """Pings (and, next, push notifications): checked, limited, heard (module docstring)."""

    def __init__(self, shared: Shared) -> None:
        self._s = shared
        settings = shared.settings
        # Pings per feed (issue 24.6): every user who registered a feed knows a token for it, and
        # each accepted ping may open CEIs that spend the shared budget.
        self._ping_buckets = TokenBuckets(settings.ping_rate_per_minute / 60.0, settings.ping_burst)

    def forget(self, feed_id: int) -> None:
        """The feed is gone: drop what was counted of its pings."""
        self._ping_buckets.forget(feed_id)

    async def ping(self, feed_id: int, token: str) -> int:
        """An update notification for the feed, authenticated by a registration's ping token;
        returns CEIs touched.

        The token says whose registration is pinging, and only that user's rules hear
        it (issue 22: one user's token must not open CEIs for another user's rules).
        The proxy still has to fetch: a ping only opens or grows CEIs (rules with
        ``on: ping`` and watch rules); the loop schedules the probes. Authenticated
        pings of one feed are rate-limited by a token bucket (:class:`RateLimitedError`
        with the seconds to wait), whoever sends them: a flood on one feed cannot open
        CEIs that spend the budget other feeds' rules need.
        """
        sh = self._s
        if not sh.replica:
            sh.require_leader()
        s = sh.settings
        users = await sh.store.ping_users(feed_id, token) if token else []
        if not users:
            if sh.replica:
                await sh.store.get_feed(feed_id)  # FeedNotFoundError
            elif feed_id not in sh.running.feeds.by_id:
                raise FeedNotFoundError(feed_id)
            raise AuthError("wrong or missing ping token for this feed")
        wait = self._ping_buckets.take(feed_id)
        if wait:
            sh.metrics.pings.labels(outcome="rate_limited").inc()
            raise RateLimitedError(
                f"too many pings for feed {feed_id}: at most {s.ping_burst} at once and "
                f"{s.ping_rate_per_minute:g} per minute (PROXY_PING_BURST, "
                f"PROXY_PING_RATE_PER_MINUTE); retry in {wait:.1f} s", wait)
        sh.metrics.pings.labels(outcome="accepted").inc()
        if sh.replica:
            # The leader applies it when the notification arrives: how many CEIs it touches is
            # not known here (0).
            await forward(sh.store, Change("ping", feed_id, users=tuple(users)))
            return 0
        return await self.apply_ping(feed_id, users)

    async def apply_ping(self, feed_id: int, users: list[int]) -> int:
        """A ping authenticated as ``users``: the evaluator hears it for their profiles."""
        profiles = {str(pid) for pid in await self._s.store.profile_ids_of(users)}
        return await self._s.host.call(self._hear_ping, feed_id, profiles, users)

    async def apply_push(self, feed_id: int, users: list[int],
                         document: Sequence[Entry] | None = None) -> int:
        """A WebSub content distribution (signature checked by :mod:`~proxy.service._websub`),
        heard for every user who registered the feed (issue 44); returns its new entries.

        Its ``document`` (the pushed body parsed; ``None``: not a feed, a "thin" ping) goes the
        way of a probe's (:meth:`ChrononLoop.hear_push`): its new entries are new entries, and
        it captures the feed's open EIs at the current chronon, spending no probe. When it holds
        new entries, or is no document, it is also an update at its arrival chronon, heard
        exactly as a ping is."""
        profiles = {str(pid) for pid in await self._s.store.profile_ids_of(users)}
        sh = self._s
        loop = sh.loop
        if document is None or loop is None:
            await sh.host.call(self._hear_ping, feed_id, profiles, users, "push")
            return 0

        def heard(slot: object) -> int:
            return self._hear_ping(feed_id, profiles, users, "push")

        return await sh.host.run(loop.hear_push(feed_id, document, heard))

    def _hear_ping(self, feed_id: int, profiles: set[str], users: list[int],
                   kind: str = "ping") -> int:
        """On the loop's thread: the evaluator hears the ping; returns the ops it caused."""
        rt = self._s.require_leader()
        slot = rt.feeds.by_id.get(feed_id)
        if slot is None:
            raise FeedNotFoundError(feed_id)
        ops = rt.evaluator.on_notification(slot.resource, rt.engine.now, profiles)
        clock = self._s.clock
        at = clock.now().timestamp()
        if rt.models.observe_ping(slot.resource, at) and rt.models.trusts_pings(slot.resource):
            slot.learn_rate(rt.models, at, clock)  # the ping taught the model (a feed that pings every update)
        steps = rt.apply(ops)
        steps += rt.drain_all()
        steps += rt.rule_states()
        self._s.submit(steps)
        log.info(kind, feed=feed_id, users=users, chronon=rt.engine.now, ops=len(ops))
        return len(ops)
