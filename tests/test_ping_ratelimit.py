"""Pings cannot spend the budget for others (issue 24.6): a token bucket per feed, 429 + Retry-After.

Everyone who registered a feed knows a ping token for it, and each accepted
ping may open CEIs. The bucket is exercised with a hand-driven clock; the API
test floods one feed's pings; the end-to-end test floods one feed while
another feed's rule keeps being captured by the running loop.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import httpx
import pytest

from proxy.farm import FeedFarm
from proxy.service._ratelimit import TokenBuckets
from tests.test_e2e_support import e2e_settings, eventually, parse_metrics, running


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# (seconds since start, expected wait in seconds) for a bucket of burst 3 refilling 2 per second
STEPS = [
    (0.0, 0.0), (0.0, 0.0), (0.0, 0.0),  # the burst
    (0.0, 0.5),  # empty: half a second to the next token
    (0.25, 0.25),  # a refused take spends nothing: still a quarter second short
    (0.5, 0.0),  # one token refilled, taken
    (0.5, 0.5),
    (10.0, 0.0), (10.0, 0.0), (10.0, 0.0),  # refilled to the burst, not beyond
    (10.0, 0.5),
]


def test_token_bucket_table() -> None:
    clock = FakeClock()
    buckets = TokenBuckets(rate=2.0, burst=3, clock=clock)
    for at, wait in STEPS:
        clock.now = at
        assert buckets.take("a") == pytest.approx(wait), at
    assert buckets.take("b") == 0.0  # one bucket per key


def test_token_bucket_forgets_and_refuses_bad_parameters() -> None:
    clock = FakeClock()
    buckets = TokenBuckets(rate=1.0, burst=1, clock=clock)
    assert buckets.take(7) == 0.0
    assert buckets.take(7) == pytest.approx(1.0)
    buckets.forget(7)
    assert buckets.take(7) == 0.0
    with pytest.raises(ValueError, match="rate > 0 and burst >= 1"):
        TokenBuckets(rate=0.0, burst=1)
    with pytest.raises(ValueError, match="rate > 0 and burst >= 1"):
        TokenBuckets(rate=1.0, burst=0)


def test_token_bucket_memory_stays_bounded() -> None:
    clock = FakeClock()
    buckets = TokenBuckets(rate=1.0, burst=1, clock=clock)
    for key in range(25_000):
        clock.now += 1.0  # every earlier bucket is full again: droppable
        assert buckets.take(key) == 0.0
    assert len(buckets._buckets) <= 10_001


async def _ping(client: httpx.AsyncClient, feed: dict[str, Any]) -> httpx.Response:
    return await client.post(f"/api/v1/feeds/{feed['id']}/ping",
                             headers={"X-Ping-Token": feed["ping_token"]})


@pytest.mark.slow
async def test_a_ping_flood_on_one_feed_leaves_other_feeds_captures_untouched(
    database_url: str,
) -> None:
    burst, per_minute = 5, 60.0
    # 200 ms chronons and 2 s windows: generous for a loaded machine (the captures below must
    # not depend on how busy the CPU is, only on whether pings spent the budget).
    settings = e2e_settings(database_url, chronon_seconds=0.2, budget=2, ping_burst=burst,
                            ping_rate_per_minute=per_minute)
    async with FeedFarm(["flooded", "quiet"], prefill=2) as farm, running(settings) as px:
        feeds = {}
        for name in ("flooded", "quiet"):
            r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
            assert r.status_code == 201, r.text
            feeds[name] = r.json()
        flooded, quiet = (str(feeds[n]["id"]) for n in ("flooded", "quiet"))
        r = await px.post("/api/v1/profiles", {"name": "pinged", "rules": [
            {"name": "on ping", "trigger": {"feed": flooded, "on": "ping"},
             "query": [{"feed": flooded, "within": "2s"}]}]})
        assert r.status_code == 201, r.text
        pinged = r.json()["id"]
        r = await px.post("/api/v1/profiles", {"name": "steady", "rules": [
            {"name": "every 2 s", "trigger": {"feed": quiet, "every": "2s", "slack": "2s"},
             "query": [{"feed": quiet, "within": "2s"}]}]})
        assert r.status_code == 201, r.text
        steady = r.json()["id"]

        # The flood: 10 clients pinging the one feed as fast as they can, 300 pings in all.
        began = time.monotonic()
        responses: list[httpx.Response] = []

        async def client() -> None:
            for _ in range(30):
                responses.append(await _ping(px.client, feeds["flooded"]))

        await asyncio.gather(*(client() for _ in range(10)))
        elapsed = time.monotonic() - began
        statuses = [r.status_code for r in responses]
        accepted = statuses.count(202)
        assert set(statuses) == {202, 429}
        # The burst, plus what the bucket refilled while the flood lasted (and one for rounding).
        assert burst <= accepted <= burst + math.ceil(elapsed * per_minute / 60) + 1
        for r in responses:
            if r.status_code == 429:
                assert int(r.headers["Retry-After"]) >= 1
                assert "too many pings for feed" in r.json()["detail"]
        metrics = parse_metrics((await px.client.get("/metrics")).text)
        assert metrics['proxy_pings_total{outcome="rate_limited"}'] == statuses.count(429)
        assert metrics['proxy_pings_total{outcome="accepted"}'] == accepted
        # The other feed's pings have their own bucket.
        assert (await _ping(px.client, feeds["quiet"])).status_code == 202

        # Only accepted pings opened CEIs (one each, or fewer: pings in one chronon coalesce).
        await px.service.flush()
        opened = (await px.get(f"/api/v1/profiles/{pinged}/ceis")).json()["items"]
        assert 1 <= len(opened) <= accepted

        # Meanwhile and after, the other feed's rule is captured every time by the running loop.
        async def resolved() -> list[dict[str, Any]] | None:
            ceis = [c for c in (await px.get(f"/api/v1/profiles/{steady}/ceis")).json()["items"]
                    if c["state"] != "pending"]
            return ceis if len(ceis) >= 3 else None

        done = await eventually(resolved, within=60.0, what="three resolved CEIs of the steady rule")
        assert [c["state"] for c in done] == ["captured"] * len(done)


async def test_wrong_tokens_take_nothing_from_the_feeds_bucket(sqlite_url: str) -> None:
    """Strangers cannot drain a publisher's pings: the token is checked before the bucket."""
    from proxy.api import make_app
    from proxy.service import ProxyService

    # One ping per 100 minutes after the burst: nothing refills during the test.
    settings = e2e_settings(sqlite_url, ping_burst=3, ping_rate_per_minute=0.01)
    service = ProxyService(settings, run_loop=False, housekeeping=False)
    async with service:
        _, key = await service.store.create_user("alice")
        app = make_app(settings, service=service, manage_service=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://proxy.test") as client:
            r = await client.post("/api/v1/feeds", json={"url": "http://127.0.0.1:9/feeds/flood.xml"},
                                  headers={"Authorization": f"Bearer {key}"})
            feed = r.json()
            for _ in range(10):
                r = await client.post(f"/api/v1/feeds/{feed['id']}/ping", headers={"X-Ping-Token": "wrong"})
                assert r.status_code == 401
            statuses = [(await _ping(client, feed)).status_code for _ in range(4)]
            assert statuses == [202, 202, 202, 429]
