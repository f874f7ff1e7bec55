"""WebSub subscriptions' lifecycle (issue 44): subscribe, renew at 85% of the lease, expire,
resubscribe on a new hub, back off after refusals, follow 307/308, refuse private hubs.

A stand-in hub on 127.0.0.1 records the requests and answers as told; the service does not
tick and its wall clock is a variable, so each reconciliation sees an exact time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import httpx
import pytest
from aiohttp import web

from proxy.api import make_app
from proxy.service import ProxyService
from tests.test_e2e_support import e2e_settings

T0 = 1_800_000_000.0
FEED_URL = "http://127.0.0.1:9/feeds/f.xml"
SELF_URL = "http://127.0.0.1:9/topic"


@dataclass
class StandIn:
    """A hub that records (path, form) and answers the queued statuses (then 202)."""

    base: str = ""
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        form = {k: v[0] for k, v in parse_qs((await request.read()).decode()).items()}
        self.requests.append((request.path, form))
        status = self.answers.pop(0) if self.answers else 202
        if status in (307, 308):
            return web.Response(status=status, headers={"Location": "/moved"})
        return web.Response(status=status, text="as told")


@pytest.fixture
async def hub() -> AsyncIterator[StandIn]:
    stand_in = StandIn()
    app = web.Application()
    app.router.add_post("/hub", stand_in.handle)
    app.router.add_post("/moved", stand_in.handle)
    app.router.add_post("/other", stand_in.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    stand_in.base = f"http://127.0.0.1:{port}"
    yield stand_in
    await runner.cleanup()


@dataclass
class World:
    service: ProxyService
    client: httpx.AsyncClient
    feed: int
    now: list[float]

    def at(self, seconds: float) -> dt.datetime:
        self.now[0] = T0 + seconds
        return dt.datetime.fromtimestamp(self.now[0], dt.UTC)

    async def verify(self, mode: str, lease: int = 1000) -> httpx.Response:
        sub = (await self.service.store.websub_list())[-1]
        return await self.client.get(f"/websub/{sub.callback_id}", params={
            "hub.mode": mode, "hub.topic": sub.topic, "hub.challenge": "c",
            "hub.lease_seconds": str(lease)})


async def world(database_url: str, **overrides: object) -> AsyncIterator[World]:
    now = [T0]
    values: dict[str, object] = {"public_url": "http://127.0.0.1:1/base", "websub_lease_seconds": 1000}
    settings = e2e_settings(database_url, **{**values, **overrides})
    service = ProxyService(settings, run_loop=False, housekeeping=False, wall=lambda: now[0])
    await service.start()
    service.websub.reconcile_every = 3600.0  # the test reconciles by hand
    try:
        feed, _ = await service.store.register_feed(FEED_URL)
        app = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy.test") as client:
            yield World(service, client, feed.id, now)
    finally:
        await service.stop()


@pytest.fixture
async def w(database_url: str) -> AsyncIterator[World]:
    async for x in world(database_url):
        yield x


async def test_subscribe_renew_at_85_percent_and_expire(w: World, hub: StandIn) -> None:
    websub = w.service.websub
    websub.links_seen(w.feed, FEED_URL, hub.base + "/hub", SELF_URL)
    await websub.reconcile()
    [(path, form)] = hub.requests
    sub = (await w.service.store.websub_list())[0]
    assert path == "/hub" and form == {
        "hub.mode": "subscribe", "hub.topic": SELF_URL,
        "hub.callback": f"http://127.0.0.1:1/base/websub/{sub.callback_id}",
        "hub.secret": sub.secret, "hub.lease_seconds": "1000"}
    assert sub.state == "pending" and sub.callback_id != str(w.feed)
    assert (await w.verify("subscribe", lease=1000)).text == "c"
    await websub.reconcile()
    assert len(hub.requests) == 1  # nothing to do while the lease is young

    w.at(840)  # 84% of the lease: not yet
    await websub.reconcile()
    assert len(hub.requests) == 1
    w.at(860)  # past 85%: renewed, still subscribed meanwhile
    await websub.reconcile()
    assert [f["hub.mode"] for _, f in hub.requests] == ["subscribe", "subscribe"]
    assert (await w.service.store.websub_of_feed(w.feed)).state == "subscribed"  # type: ignore[union-attr]
    await websub.reconcile()
    assert len(hub.requests) == 2  # one renewal until it is verified or times out

    w.at(1001)  # the hub never verified the renewal: expired, and asked again
    await websub.reconcile()
    sub = await w.service.store.websub_of_feed(w.feed)
    assert sub is not None and sub.state == "pending" and len(hub.requests) == 3
    text = (await w.client.get("/metrics")).text
    assert 'proxy_websub_subscriptions{state="pending"} 1.0' in text


async def test_a_new_hub_unsubscribes_the_old_and_subscribes_the_new(w: World, hub: StandIn) -> None:
    websub = w.service.websub
    websub.links_seen(w.feed, FEED_URL, hub.base + "/hub", None)
    await websub.reconcile()
    await w.verify("subscribe")
    websub.links_seen(w.feed, FEED_URL, hub.base + "/other", None)
    await websub.reconcile()
    assert [(p, f["hub.mode"], f["hub.topic"]) for p, f in hub.requests] == [
        ("/hub", "subscribe", FEED_URL), ("/hub", "unsubscribe", FEED_URL),
        ("/other", "subscribe", FEED_URL)]
    states = {s.hub.rsplit("/", 1)[1]: s.state for s in await w.service.store.websub_list()}
    assert states == {"hub": "unsubscribing", "other": "pending"}
    # The old hub verifies the unsubscription: its row goes.
    old = next(s for s in await w.service.store.websub_list() if s.hub.endswith("/hub"))
    r = await w.client.get(f"/websub/{old.callback_id}", params={
        "hub.mode": "unsubscribe", "hub.topic": FEED_URL, "hub.challenge": "bye"})
    assert r.text == "bye"
    assert [s.hub for s in await w.service.store.websub_list()] == [hub.base + "/other"]


async def test_refusals_back_off_and_redirects_are_followed(w: World, hub: StandIn) -> None:
    websub = w.service.websub
    hub.answers = [503, 400, 307]
    websub.links_seen(w.feed, FEED_URL, hub.base + "/hub", None)
    await websub.reconcile()
    sub = await w.service.store.websub_of_feed(w.feed)
    assert sub is not None and sub.failures == 1 and "503" in (sub.reason or "")
    assert sub.next_attempt_at == w.at(0) + dt.timedelta(seconds=60)
    await websub.reconcile()
    assert len(hub.requests) == 1  # backing off
    w.at(61)
    await websub.reconcile()
    sub = await w.service.store.websub_of_feed(w.feed)
    assert sub is not None and sub.failures == 2 and len(hub.requests) == 2
    w.at(61 + 119)
    await websub.reconcile()
    assert len(hub.requests) == 2
    w.at(61 + 121)
    await websub.reconcile()  # 307: the same POST again at /moved, which accepts it
    assert [p for p, _ in hub.requests] == ["/hub", "/hub", "/hub", "/moved"]
    assert hub.requests[3][1]["hub.mode"] == "subscribe"
    sub = await w.service.store.websub_of_feed(w.feed)
    assert sub is not None and sub.failures == 0 and sub.state == "pending"


async def test_a_private_hub_is_refused_by_the_ssrf_guard(database_url: str, hub: StandIn) -> None:
    async for w in world(database_url, allow_private_networks=False):
        w.service.websub.links_seen(w.feed, FEED_URL, hub.base + "/hub", None)
        await w.service.websub.reconcile()
        assert hub.requests == []
        sub = await w.service.store.websub_of_feed(w.feed)
        assert sub is not None and "SSRF" in (sub.reason or "") and sub.failures == 1


class _Rebinding:
    """DNS that answers a public address first, then loopback: a rebinding attack on the guard."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        return ["93.184.216.34"] if len(self.calls) == 1 else ["127.0.0.1"]


async def test_a_hub_whose_host_rebinds_to_a_private_address_is_never_reached(
    database_url: str, hub: StandIn,
) -> None:
    """The check passes on the public answer; the connection resolves again, through the
    guard, gets loopback and is refused: the hub (really on loopback) hears nothing."""
    async for w in world(database_url, allow_private_networks=False):
        dns = _Rebinding()
        w.service.websub.resolver = dns
        port = hub.base.rsplit(":", 1)[1]
        w.service.websub.links_seen(w.feed, FEED_URL, f"http://hub.example:{port}/hub", None)
        await w.service.websub.reconcile()
        assert hub.requests == []
        assert dns.calls == ["hub.example", "hub.example"]  # the check, then the connection
        sub = await w.service.store.websub_of_feed(w.feed)
        assert sub is not None and sub.failures == 1
        assert "SSRF" in (sub.reason or "") and "127.0.0.1" in (sub.reason or "")


async def test_a_hub_resolved_through_the_guard_is_reached_when_private_networks_are_allowed(
    database_url: str, hub: StandIn,
) -> None:
    """The same resolver with private networks allowed: the request goes to the address the
    guard returned (the name itself is never resolved by the system)."""
    async for w in world(database_url, allow_private_networks=True):
        dns = _Rebinding()
        dns.calls.append("warm")  # every answer is loopback
        w.service.websub.resolver = dns
        port = hub.base.rsplit(":", 1)[1]
        w.service.websub.links_seen(w.feed, FEED_URL, f"http://hub.example:{port}/hub", None)
        await w.service.websub.reconcile()
        assert [path for path, _ in hub.requests] == ["/hub"]
        sub = await w.service.store.websub_of_feed(w.feed)
        assert sub is not None and sub.failures == 0 and sub.state == "pending"


async def test_without_a_public_url_websub_is_off(database_url: str, hub: StandIn) -> None:
    async for w in world(database_url, public_url=None):
        assert not w.service.websub.enabled
        r = await w.client.get("/websub/anything", params={"hub.mode": "subscribe"})
        assert r.status_code == 404


async def test_a_deleted_feed_is_unsubscribed_and_forgotten_if_never_verified(
    w: World, hub: StandIn,
) -> None:
    websub = w.service.websub
    websub.links_seen(w.feed, FEED_URL, hub.base + "/hub", None)
    await websub.reconcile()
    await w.verify("subscribe")
    await w.service.store.delete_feed(w.feed)
    for attempt in range(5):  # the hub accepts each request and never verifies it
        w.at(attempt * 301)
        await websub.reconcile()
    assert [f["hub.mode"] for _, f in hub.requests] == ["subscribe"] + ["unsubscribe"] * 5
    [sub] = await w.service.store.websub_list()
    assert sub.state == "unsubscribing"
    w.at(5 * 301)
    await websub.reconcile()
    assert await w.service.store.websub_list() == []  # its lease lapses at the hub by itself
    assert len(hub.requests) == 6


async def test_a_feed_that_stops_naming_its_hub_is_unsubscribed(w: World, hub: StandIn) -> None:
    websub = w.service.websub
    websub.links_seen(w.feed, FEED_URL, hub.base + "/hub", None)
    await websub.reconcile()
    await w.verify("subscribe")
    websub.links_seen(w.feed, FEED_URL, None, None)  # the next document names no hub
    await websub.reconcile()
    assert [f["hub.mode"] for _, f in hub.requests] == ["subscribe", "unsubscribe"]
    [sub] = await w.service.store.websub_list()
    assert sub.state == "unsubscribing"
    await websub.reconcile()
    assert len(hub.requests) == 2  # no new subscription for it


async def test_after_a_restart_a_feed_without_its_hub_is_still_unsubscribed(
    w: World, hub: StandIn,
) -> None:
    websub = w.service.websub
    websub.links_seen(w.feed, FEED_URL, hub.base + "/hub", None)
    await websub.reconcile()
    await w.verify("subscribe")
    websub._links.clear()  # what a restart forgets: only the table remembers the subscription
    websub.links_seen(w.feed, FEED_URL, None, None)
    await websub.reconcile()
    assert [f["hub.mode"] for _, f in hub.requests] == ["subscribe", "unsubscribe"]
