"""The WebSub callbacks as tables (issue 44): verification of intent (§5.3), denial (§5.2),
content distribution's signatures (§7.1, §8). A service that does not tick, no hub: the
subscription rows are made as the reconciliation would make them."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from proxy.api import make_app
from proxy.feeds.websub import sign
from proxy.service import ProxyService
from proxy.store import WebSubSubscription
from tests.test_e2e_support import e2e_settings, parse_metrics

TOPIC = "http://127.0.0.1:9/feeds/t.xml"
HUB = "http://127.0.0.1:9/hub"
BODY = b'<rss version="2.0"><channel><title>t</title><item><guid>n1</guid><title>new</title></item></channel></rss>'


@dataclass
class Harness:
    service: ProxyService
    client: httpx.AsyncClient
    feed: int

    async def sub(self, state: str, *, requested: bool) -> WebSubSubscription:
        store = self.service.store
        sub = await store.websub_create(self.feed, hub=HUB, topic=TOPIC, callback_id=f"cb-{state}-{requested}",
                                        secret="s3cret")
        now = dt.datetime.now(dt.UTC)
        await store.websub_update(sub.id, state=state, requested_at=now if requested else None)
        got = await store.websub_by_callback(sub.callback_id)
        assert got is not None
        return got

    async def metric(self, outcome: str) -> float:
        text = (await self.client.get("/metrics")).text
        return parse_metrics(text)[f'proxy_websub_notifications_total{{outcome="{outcome}"}}']


@pytest.fixture
async def harness(database_url: str) -> AsyncIterator[Harness]:
    async with make_harness(database_url) as made:
        yield made


@asynccontextmanager
async def make_harness(database_url: str, **settings_: Any) -> AsyncIterator[Harness]:
    settings = e2e_settings(database_url, public_url="http://127.0.0.1:1", **settings_)
    service = ProxyService(settings, run_loop=False, housekeeping=False)
    await service.start()
    try:
        _, key = await service.store.create_user("alice")
        app = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy.test") as client:
            r = await client.post("/api/v1/feeds", json={"url": TOPIC},
                                  headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 201, r.text
            yield Harness(service, client, r.json()["id"])
    finally:
        await service.stop()


@pytest.mark.parametrize(("state", "requested", "mode", "topic", "status", "after"), [
    ("pending", True, "subscribe", TOPIC, 200, "subscribed"),       # our request, verified
    ("subscribed", True, "subscribe", TOPIC, 200, "subscribed"),    # a renewal, verified
    ("pending", True, "subscribe", TOPIC + "?other", 404, "pending"),  # not that topic
    ("pending", False, "subscribe", TOPIC, 404, "pending"),         # we asked nothing
    ("subscribed", False, "subscribe", TOPIC, 404, "subscribed"),   # a forged renewal
    ("pending", True, "unsubscribe", TOPIC, 404, "pending"),        # we did not ask that
    ("unsubscribing", True, "unsubscribe", TOPIC, 200, None),       # verified: the row goes
    ("pending", True, "denied", TOPIC, 200, "denied"),              # §5.2: recorded
])
async def test_verification_of_intent(
    harness: Harness, state: str, requested: bool, mode: str, topic: str, status: int,
    after: str | None,
) -> None:
    sub = await harness.sub(state, requested=requested)
    r = await harness.client.get(f"/websub/{sub.callback_id}", params={
        "hub.mode": mode, "hub.topic": topic, "hub.challenge": "chal-123",
        "hub.lease_seconds": "3600", "hub.reason": "not on my hub"})
    assert r.status_code == status
    if status == 200 and mode != "denied":
        assert r.text == "chal-123" and r.headers["content-type"].startswith("text/plain")
    stored = await harness.service.store.websub_by_callback(sub.callback_id)
    assert (stored.state if stored else None) == after
    if after == "subscribed" and status == 200:
        assert stored is not None and stored.lease_seconds == 3600 and stored.requested_at is None
        assert stored.lease_expires_at is not None
    if after == "denied":
        assert stored is not None and stored.reason == "not on my hub"


async def test_a_challenge_for_an_unknown_callback_id_is_404(harness: Harness) -> None:
    await harness.sub("pending", requested=True)
    r = await harness.client.get("/websub/no-such-id", params={
        "hub.mode": "subscribe", "hub.topic": TOPIC, "hub.challenge": "c"})
    assert r.status_code == 404 and "c" not in r.text.split()


@pytest.mark.parametrize("method", ["sha1", "sha256", "sha384", "sha512"])
async def test_each_signature_method_is_an_update(harness: Harness, method: str) -> None:
    sub = await harness.sub("subscribed", requested=False)
    r = await harness.client.post(f"/websub/{sub.callback_id}", content=BODY,
                                  headers={"X-Hub-Signature": sign(method, "s3cret", BODY)})
    assert r.status_code == 202
    assert await harness.metric("accepted") == 1
    stored = await harness.service.store.websub_by_callback(sub.callback_id)
    assert stored is not None and stored.notifications == 1 and stored.last_notification_at


@pytest.mark.parametrize(("state", "signature", "outcome"), [
    ("subscribed", None, "bad_signature"),
    ("subscribed", sign("sha256", "wrong", BODY), "bad_signature"),
    ("subscribed", sign("sha256", "s3cret", BODY + b" "), "bad_signature"),
    ("subscribed", "md5=" + "0" * 32, "bad_signature"),
    ("denied", sign("sha256", "s3cret", BODY), "not_subscribed"),
    ("expired", sign("sha256", "s3cret", BODY), "not_subscribed"),
])
async def test_a_failing_distribution_is_answered_2xx_ignored_and_counted(
    harness: Harness, state: str, signature: str | None, outcome: str,
) -> None:
    sub = await harness.sub(state, requested=False)
    headers = {"X-Hub-Signature": signature} if signature else {}
    r = await harness.client.post(f"/websub/{sub.callback_id}", content=BODY, headers=headers)
    assert r.status_code == 202
    assert await harness.metric(outcome) == 1
    assert await harness.metric("accepted") == 0
    stored = await harness.service.store.websub_by_callback(sub.callback_id)
    assert stored is not None and (stored.notifications, stored.rejected) == (0, 1)


async def test_a_distribution_to_an_unknown_callback_is_gone(harness: Harness) -> None:
    r = await harness.client.post("/websub/no-such-id", content=BODY,
                                  headers={"X-Hub-Signature": sign("sha256", "s3cret", BODY)})
    assert r.status_code == 410  # §7: the hub stops delivering there
    assert await harness.metric("unknown") == 1


async def test_the_feed_detail_shows_its_subscription(harness: Harness, database_url: str) -> None:
    keyed = await harness.service.store.create_user("bob")
    headers = {"Authorization": f"Bearer {keyed[1]}"}
    r = await harness.client.post("/api/v1/feeds", json={"url": TOPIC}, headers=headers)
    assert r.json()["id"] == harness.feed
    assert (await harness.client.get(f"/api/v1/feeds/{harness.feed}", headers=headers)).json()["push"] is None
    await harness.sub("subscribed", requested=False)
    push = (await harness.client.get(f"/api/v1/feeds/{harness.feed}", headers=headers)).json()["push"]
    assert push == {"hub": HUB, "state": "subscribed", "lease_expires_at": None,
                    "last_notification_at": None}


async def test_distributions_are_rate_limited_per_subscription(database_url: str) -> None:
    """Security (issue 44): a hub gone wild, or a flood on a leaked callback URL, is held to the
    pings' limits per subscription: 429 with Retry-After (a hub retries later), counted."""
    async with make_harness(database_url, ping_burst=2, ping_rate_per_minute=0.01) as h:
        sub = await h.sub("subscribed", requested=False)
        headers = {"X-Hub-Signature": sign("sha256", "s3cret", BODY)}
        answers = [await h.client.post(f"/websub/{sub.callback_id}", content=BODY, headers=headers)
                   for _ in range(3)]
        assert [r.status_code for r in answers] == [202, 202, 429]
        assert int(answers[2].headers["Retry-After"]) >= 1
        assert await h.metric("accepted") == 2
        assert await h.metric("rate_limited") == 1
        # Another subscription has a bucket of its own.
        other = await h.sub("pending", requested=True)
        r = await h.client.post(f"/websub/{other.callback_id}", content=BODY, headers=headers)
        assert r.status_code == 202
