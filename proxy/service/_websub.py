"""WebSub subscriber (issue 44; W3C WebSub Recommendation 2018, §5–§8): the subscriptions'
lifecycle and the callbacks' handling.

Discovery happens at every successful probe (:func:`proxy.feeds.websub.discover`; the loop
calls :meth:`WebSub.links_seen` on its thread). The leader's reconciliation task, on the
API's event loop, then makes the ``websub_subscriptions`` table agree with what the feeds
advertise: it subscribes a feed that names a hub (§5.1: ``hub.mode=subscribe``, the topic
is the feed's ``self`` URL, else its URL; a random callback id and secret per
subscription), resubscribes when the hub or the topic changes, renews at 85% of the lease,
marks a lease that ran out ``expired`` (and asks again), and unsubscribes once the feed's
last registration is gone. A request the hub refuses (4xx/5xx, no answer) is asked again
after an exponential back-off. Hub URLs pass the SSRF guard like feed URLs.

The callbacks (``/websub/{callback_id}``, no API key): a verification of intent (§5.3)
is echoed only for a request this process made and has not seen verified, of that exact
topic; a denial (§5.2) is recorded. A content distribution (§7) whose ``X-Hub-Signature``
is valid (§8) is an update of the feed heard exactly as a ping is
(:meth:`~proxy.service._arrivals.Arrivals.apply_push`), for the rules of everyone who
registered the feed; any other is answered 2xx, ignored and counted (§8 says so: a
forger learns nothing).

A valid notification's body is parsed with the proxy's parser and settled as a probe's
document is (:meth:`~proxy.service.loop.ChrononLoop.hear_push`): its new entries are new
entries, and it captures the feed's open EIs without spending a probe (docs/websub.md says
why). Content distributions are rate-limited per subscription (the pings' limits; a 429
with ``Retry-After`` over them, which a hub retries). The feeds a live subscription pushes
are handed to the loop (``ChrononLoop.pushed``): they get one health probe per lease rather
than background probes, unless a poll finds entries the hub never sent.

What it does not do: settle a push on an API replica (it is forwarded to the leader as a
ping; the leader's probe reads the document).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import secrets
from dataclasses import dataclass
from urllib.parse import urljoin

import aiohttp
import httpx
import structlog

from proxy.errors import FeedNotFoundError
from proxy.feeds import Entry, FeedUrlRefusedError, HostResolver, SystemResolver
from proxy.feeds.fetch import check_feed_url, find_in_chain, guarded_client
from proxy.feeds.parse import FeedParseError, parse_document
from proxy.feeds.ssrf import AddressRefusedError
from proxy.feeds.websub import signature_valid
from proxy.service._arrivals import Arrivals
from proxy.service._ratelimit import TokenBuckets
from proxy.service._replication import forward
from proxy.service._shared import Shared, fetcher_settings
from proxy.service.changes import Change
from proxy.store import WebSubSubscription

log = structlog.get_logger("proxy.service")

#: §5.1.2 / §6: renew before the lease lapses; 85% leaves room for a slow hub.
RENEW_AT = 0.85
#: A request the hub accepted but never verified is asked again after this long.
VERIFY_WITHIN = dt.timedelta(minutes=5)
#: A denial (§5.2) is final for this long, then the feed is asked again.
DENIED_FOR = dt.timedelta(days=1)
#: Back-off of refused requests: BASE * 2**failures, at most MAX.
BACKOFF_BASE = dt.timedelta(seconds=30)
BACKOFF_MAX = dt.timedelta(hours=6)
#: An unsubscription never verified is forgotten after this many attempts (the lease lapses).
UNSUBSCRIBE_ATTEMPTS = 5
MAX_REDIRECTS = 3
#: Seconds a hub has to answer one subscription request.
HUB_TIMEOUT = 10.0
RECONCILE_EVERY = 5.0


@dataclass(frozen=True, slots=True)
class PushStatus:
    """A feed's push subscription as the feed detail shows it."""

    hub: str
    state: str
    lease_expires_at: dt.datetime | None
    last_notification_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class CallbackAnswer:
    """What a callback route answers: status and plain-text body."""

    status: int
    body: str = ""
    retry_after: float | None = None
    """Seconds, for a 429 (RFC 9110 §10.2.3): when the hub may deliver again."""


class _ResolveVia:
    """Resolves through ``websub.resolver`` as it is at each request (tests replace it)."""

    def __init__(self, websub: WebSub) -> None:
        self._websub = websub

    async def resolve(self, host: str, port: int) -> list[str]:
        return await self._websub.resolver.resolve(host, port)


def _refusal(exc: BaseException) -> str | None:
    """The SSRF guard's reason, when it is what failed a hub request (a rebound address)."""
    refused = find_in_chain(exc, AddressRefusedError)
    return refused.reason if isinstance(refused, AddressRefusedError) else None


def _backoff(failures: int) -> dt.timedelta:
    step: dt.timedelta = BACKOFF_BASE * (2 ** min(failures, 20))
    return min(step, BACKOFF_MAX)


class WebSub:
    """Subscriptions' lifecycle and callbacks (module docstring). Off without PROXY_PUBLIC_URL."""

    def __init__(self, shared: Shared, arrivals: Arrivals) -> None:
        self._s = shared
        self._arrivals = arrivals
        self.public_url = shared.settings.public_url
        #: feed id -> (hub, topic), written on the loop's thread at each successful probe.
        self._links: dict[int, tuple[str, str]] = {}
        #: Feeds that stopped naming a hub (loop's thread adds, reconciliation takes), and the
        #: feeds with a subscription as of the last reconciliation (replaced whole, read there).
        self._dropped: set[int] = set()
        self._with_sub: frozenset[int] = frozenset()
        self._wake: asyncio.Event | None = None
        self._api_loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        #: How hub hosts are resolved (checked by the SSRF guard); tests give their own.
        self.resolver: HostResolver = SystemResolver()
        self.reconcile_every = RECONCILE_EVERY
        #: One reconciliation at a time (the task's, and a caller's: tests, operators).
        self._round = asyncio.Lock()
        # Content distributions per subscription (issue 44, security): the pings' limits. A
        # valid push costs a parse and a settled document; a hub gone wild (or a flood on a
        # leaked callback URL) must not take the loop's time from the other feeds.
        settings = shared.settings
        self._buckets = TokenBuckets(settings.ping_rate_per_minute / 60.0, settings.ping_burst)

    @property
    def enabled(self) -> bool:
        return self.public_url is not None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the reconciliation task (or say once that WebSub is off)."""
        if not self.enabled:
            log.info("websub_off", reason="PROXY_PUBLIC_URL is not set: every feed is polled")
            return
        log.info("websub_on", callback_base=f"{self.public_url}/websub/")
        self._api_loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        # Hub requests resolve through the SSRF guard, as probes do: the connection goes to
        # the addresses checked, so a hub's host cannot rebind to a private one (issue 44).
        self._client = guarded_client(
            fetcher_settings(self._s.settings).address_policy, _ResolveVia(self),
            user_agent=self._s.settings.user_agent, timeout=HUB_TIMEOUT)
        if self._s.loop is not None:
            self._s.loop.on_push_links = self.links_seen
        self._task = asyncio.create_task(self._run(), name="websub")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def poke(self) -> None:
        """Reconcile soon (a feed was deleted, a link changed); callable from any thread."""
        loop, wake = self._api_loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    def links_seen(self, feed_id: int, feed_url: str, hub: str | None, self_url: str | None) -> None:
        """On the loop's thread, after a successful probe: what the feed advertises now."""
        if hub is None:
            # A feed that stops naming its hub is unsubscribed (else its lease would be
            # renewed for ever); one that never named one costs a set lookup.
            if self._links.pop(feed_id, None) is not None or feed_id in self._with_sub:
                self._dropped.add(feed_id)
                self.poke()
            return
        self._dropped.discard(feed_id)
        links = (hub, self_url or feed_url)
        if self._links.get(feed_id) != links:
            self._links[feed_id] = links
            self.poke()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.reconcile_every)
            self._wake.clear()
            loop = self._s.loop
            if loop is not None:
                loop.on_push_links = self.links_seen
            if self._s.runtime is None:
                continue  # a standby or a replica: the leader keeps the subscriptions
            try:
                await self.reconcile()
            except Exception:  # a round failed (database away); the next one retries
                log.exception("websub_reconcile_failed")

    # ------------------------------------------------------------------ reconciliation

    async def reconcile(self) -> None:
        """Make the subscriptions agree with the feeds and the clock (module docstring)."""
        async with self._round:
            await self._reconcile()

    async def _reconcile(self) -> None:
        store = self._s.store
        now = self._s.clock.now()
        dropped = set(self._dropped)  # the loop's thread may add more meanwhile: next round
        feeds = await store.feed_ids()
        subs = await store.websub_list()
        current: dict[int, WebSubSubscription] = {}
        for sub in subs:
            due = sub.next_attempt_at is None or sub.next_attempt_at <= now
            if sub.state == "unsubscribing":
                if due:
                    await self._unsubscribe(sub, now)
                continue
            if sub.feed_id not in feeds:
                await self._unsubscribe(sub, now)
                continue
            if sub.feed_id in dropped:
                log.info("websub_hub_dropped", feed=sub.feed_id, hub=sub.hub)
                await self._unsubscribe(sub, now)
                continue
            links = self._links.get(sub.feed_id)
            if links is not None and links != (sub.hub, sub.topic):
                log.info("websub_links_changed", feed=sub.feed_id, hub=links[0], topic=links[1])
                await self._unsubscribe(sub, now)
                continue
            current[sub.feed_id] = sub
            if sub.state == "subscribed":
                expires = sub.lease_expires_at
                if expires is not None and expires <= now:
                    log.info("websub_expired", feed=sub.feed_id, hub=sub.hub)
                    await store.websub_update(sub.id, state="expired", requested_at=None,
                                              next_attempt_at=None)
                    await self._ask(sub, "subscribe", "pending", now)  # a new subscription
                elif expires is not None and sub.lease_seconds and due and (
                        now >= expires - dt.timedelta(seconds=sub.lease_seconds * (1 - RENEW_AT))):
                    await self._subscribe(sub, now)  # renewal: the row stays subscribed
            elif due:  # pending unverified, expired, denied: ask again
                await self._subscribe(sub, now)
        for feed_id, (hub, topic) in list(self._links.items()):
            if feed_id not in feeds:
                self._links.pop(feed_id, None)
            elif feed_id not in current:
                sub = await store.websub_create(
                    feed_id, hub=hub, topic=topic, callback_id=secrets.token_urlsafe(24),
                    secret=secrets.token_urlsafe(32), now=now)
                await self._subscribe(sub, now)
                # Known as subscribed-to from now on: should the feed stop naming its hub before
                # the next round, it is unsubscribed (links_seen reads _with_sub).
                current[feed_id] = sub
        self._dropped -= dropped
        self._with_sub = frozenset(current)
        live = {sub.feed_id: float(sub.lease_seconds) for sub in current.values()
                if sub.state == "subscribed" and sub.lease_seconds
                and sub.lease_expires_at is not None and sub.lease_expires_at > now}
        self._s.host.post(self._hand_pushed, live)
        counts = await store.websub_counts()
        for state, n in counts.items():
            self._s.metrics.websub_subscriptions.labels(state=state).set(n)

    def _hand_pushed(self, live: dict[int, float]) -> None:
        """On the loop's thread: the feeds live subscriptions push, by resource, with their
        lease (one health probe per lease; :meth:`ChrononLoop._quiet`)."""
        loop, rt = self._s.loop, self._s.runtime
        if loop is None or rt is None:
            return
        by_id = rt.feeds.by_id
        loop.pushed = {by_id[f].resource: lease for f, lease in live.items() if f in by_id}

    async def _subscribe(self, sub: WebSubSubscription, now: dt.datetime) -> None:
        state = "subscribed" if sub.state == "subscribed" else "pending"
        await self._ask(sub, "subscribe", state, now)

    async def _unsubscribe(self, sub: WebSubSubscription, now: dt.datetime) -> None:
        if sub.state not in ("subscribed", "pending", "unsubscribing") or (
                sub.state == "unsubscribing" and sub.failures >= UNSUBSCRIBE_ATTEMPTS):
            # Never verified (or the hub will not answer): nothing to undo; its lease lapses.
            await self._s.store.websub_delete(sub.id)
            return
        await self._ask(sub, "unsubscribe", "unsubscribing", now)

    async def _ask(self, sub: WebSubSubscription, mode: str, state: str, now: dt.datetime) -> None:
        """POST the hub a (un)subscription request (§5.1); the row records the attempt first,
        because the hub may verify before it answers us."""
        store = self._s.store
        await store.websub_update(sub.id, state=state, requested_at=now,
                                  next_attempt_at=now + VERIFY_WITHIN)
        form = {
            "hub.mode": mode,
            "hub.topic": sub.topic,
            "hub.callback": f"{self.public_url}/websub/{sub.callback_id}",
        }
        if mode == "subscribe":
            form["hub.secret"] = sub.secret
            form["hub.lease_seconds"] = str(self._s.settings.websub_lease_seconds)
        problem = await self._post(sub.hub, form)
        if problem is None:
            # An unsubscription counts its attempts, verified or not: a hub that accepts and
            # never verifies does not keep the row for ever (UNSUBSCRIBE_ATTEMPTS).
            tries = sub.failures + 1 if mode == "unsubscribe" else 0
            await store.websub_update(sub.id, failures=tries, reason=None)
            log.info("websub_requested", feed=sub.feed_id, mode=mode, hub=sub.hub)
            return
        failures = sub.failures + 1
        await store.websub_update(
            sub.id, failures=failures, reason=problem, requested_at=None,
            next_attempt_at=now + _backoff(failures))
        log.warning("websub_request_failed", feed=sub.feed_id, mode=mode, hub=sub.hub,
                    problem=problem, failures=failures)

    async def _post(self, hub: str, form: dict[str, str]) -> str | None:
        """POST ``form`` to the hub, following 307/308 (they keep the method and body);
        ``None`` on a 2xx, else what went wrong."""
        assert self._client is not None
        policy = fetcher_settings(self._s.settings).address_policy
        url = hub
        for _ in range(MAX_REDIRECTS + 1):
            try:
                await check_feed_url(url, policy, self.resolver)
            except FeedUrlRefusedError as exc:
                return f"hub refused by the SSRF guard: {exc}"
            try:
                async with asyncio.timeout(HUB_TIMEOUT):
                    resp = await self._client.post(url, data=form)
                    await resp.aread()
            except (httpx.HTTPError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                refused = _refusal(exc)
                if refused is not None:
                    return f"hub refused by the SSRF guard: {refused}"
                return f"{type(exc).__name__}: {exc}"[:500]
            if resp.status_code in (307, 308) and "location" in resp.headers:
                url = urljoin(url, resp.headers["location"])
                continue
            if 200 <= resp.status_code < 300:
                return None
            return f"hub answered {resp.status_code}: {resp.text[:200]}"
        return f"more than {MAX_REDIRECTS} redirects"

    # ------------------------------------------------------------------ callbacks

    async def verify(self, callback_id: str, params: dict[str, str]) -> CallbackAnswer:
        """§5.3 verification of intent, or §5.2 denial: the GET on a callback."""
        store = self._s.store
        sub = await store.websub_by_callback(callback_id)
        mode = params.get("hub.mode", "")
        topic = params.get("hub.topic", "")
        if sub is None or topic != sub.topic:
            return CallbackAnswer(404, "no such subscription\n")
        now = self._s.clock.now()
        if mode == "denied":
            reason = params.get("hub.reason", "")[:500] or "denied by the hub"
            await store.websub_update(sub.id, state="denied", reason=reason, requested_at=None,
                                      next_attempt_at=now + DENIED_FOR)
            log.warning("websub_denied", feed=sub.feed_id, hub=sub.hub, reason=reason)
            return CallbackAnswer(200)
        challenge = params.get("hub.challenge")
        if not challenge or sub.requested_at is None:
            return CallbackAnswer(404, "no request of ours awaits verification\n")
        if mode == "subscribe" and sub.state in ("pending", "subscribed"):
            try:
                lease = int(params.get("hub.lease_seconds", ""))
            except ValueError:
                lease = self._s.settings.websub_lease_seconds
            lease = max(lease, 1)
            await store.websub_update(
                sub.id, state="subscribed", lease_seconds=lease, requested_at=None,
                lease_expires_at=now + dt.timedelta(seconds=lease), failures=0, reason=None,
                next_attempt_at=None)
            log.info("websub_subscribed", feed=sub.feed_id, hub=sub.hub, lease_seconds=lease)
            self.poke()  # the gauge
            return CallbackAnswer(200, challenge)
        if mode == "unsubscribe" and sub.state == "unsubscribing":
            await store.websub_delete(sub.id)
            log.info("websub_unsubscribed", feed=sub.feed_id, hub=sub.hub)
            self.poke()
            return CallbackAnswer(200, challenge)
        return CallbackAnswer(404, "no such request awaits verification\n")

    async def notify(self, callback_id: str, body: bytes, signature: str | None) -> CallbackAnswer:
        """§7 content distribution: a valid one is an update of the feed (module docstring)."""
        s = self._s
        store = s.store
        count = s.metrics.websub_notifications
        sub = await store.websub_by_callback(callback_id)
        if sub is None:
            count.labels(outcome="unknown").inc()
            # §7: 410 Gone tells the hub to stop delivering to a callback we do not know.
            return CallbackAnswer(410, "no such subscription\n")
        wait = self._buckets.take(sub.id)
        if wait:
            count.labels(outcome="rate_limited").inc()
            log.warning("websub_notification_rate_limited", feed=sub.feed_id, retry_after=wait)
            # §7 lets a hub retry a delivery that was not acknowledged: it comes back later.
            return CallbackAnswer(429, "too many notifications for this subscription\n", wait)
        now = s.clock.now()
        outcome = "accepted"
        if len(body) > s.settings.max_body_bytes:
            outcome = "too_large"
        elif sub.state not in ("subscribed", "unsubscribing") and sub.requested_at is None:
            outcome = "not_subscribed"
        elif not signature_valid(signature, sub.secret, body):
            outcome = "bad_signature"
        count.labels(outcome=outcome).inc()
        await store.websub_notified(sub.id, accepted=outcome == "accepted", at=now)
        if outcome != "accepted":
            # §8: answer 2xx all the same, so a forger learns nothing.
            log.warning("websub_notification_ignored", feed=sub.feed_id, outcome=outcome)
            return CallbackAnswer(202)
        users = await store.feed_registrants(sub.feed_id)
        new: int | None = None
        if users:
            if s.replica:
                # The leader hears it as a ping; its probe reads the document (docs/websub.md).
                await forward(store, Change("ping", sub.feed_id, users=tuple(users)))
            elif s.runtime is not None:
                try:
                    document = await self._document(sub.feed_id, body)
                    new = await self._arrivals.apply_push(sub.feed_id, users, document)
                except FeedNotFoundError:  # deleted meanwhile: nothing to hear it
                    log.info("websub_notification_for_gone_feed", feed=sub.feed_id)
        log.info("websub_notification", feed=sub.feed_id, new_entries=new, users=len(users))
        return CallbackAnswer(202)

    async def _document(self, feed_id: int, body: bytes) -> tuple[Entry, ...] | None:
        """The pushed body's entries, parsed as a probe's document is (the feed's URL as the
        base, so entries' identities agree with its probes'). ``None``: not a feed (a hub that
        sends a thin notification), heard as a ping only."""
        feed = await self._s.store.get_feed(feed_id)
        try:
            parsed = await asyncio.get_running_loop().run_in_executor(
                None, lambda: parse_document(body, url=feed.url))
        except FeedParseError:
            return None
        return parsed.entries

    async def status(self, feed_id: int) -> PushStatus | None:
        """The feed's push subscription for its detail (``None``: none)."""
        sub = await self._s.store.websub_of_feed(feed_id)
        if sub is None:
            return None
        return PushStatus(sub.hub, sub.state, sub.lease_expires_at, sub.last_notification_at)
