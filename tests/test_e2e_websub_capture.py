"""End to end (issue 44): a pushed document's entries are entries, and the push captures.

Against flask-websub's hub (tests/websub_hub.py), the feed farm publishing to it, the service
under uvicorn so that the hub reaches its callbacks:

- a push captures a single-feed alert's EI with no probe of the feed, and stores its entry;
- a short lease (the hub grants less than the proxy asks) is renewed at 85% of it, before it
  ends; the health probe after the push (one per lease) finds the pushed entry known, so it
  fires the rule once (issue 43's dedupe across push and probe), and the same document
  delivered again fires nothing;
- the hub stops: the health probe finds what the hub never sent (or the lease lapses
  unrenewed), the proxy polls the feed again, and the update published meanwhile is not lost.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.farm import FeedFarm
from proxy.feeds.websub import sign
from proxy.ports import free_port
from proxy.service.loop import PUSH_OUTCOME
from tests.test_e2e_support import Running, e2e_settings, eventually, running
from tests.test_e2e_websub import served
from tests.websub_hub import RunningHub, websub_hub

pytestmark = pytest.mark.slow


def now() -> dt.datetime:
    """The farm's trace time 0: its entries are dated from now on, as a live feed's are (the
    alert's baseline fires on what is dated after the rule was made)."""
    return dt.datetime.now(dt.UTC)


def alert(feed: int) -> dict[str, Any]:
    """A single-feed alert on the feed's updates that mention oil."""
    return {"name": "oil", "rules": [{"name": "oil", "trigger": {
        "feed": str(feed), "on": "update", "slack": "30s", "when": {"contains": ["oil"]}}}]}


async def subscribe(px: Running, farm: FeedFarm, hub: RunningHub, name: str) -> int:
    """Register the farm's feed ``name``; return its id once the hub holds its subscription
    and the loop counts it as pushed (no background probe)."""
    r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
    assert r.status_code == 201, r.text
    feed: int = r.json()["id"]

    async def live() -> bool:
        push = (await px.get(f"/api/v1/feeds/{feed}")).json()["push"]
        return bool(push and push["state"] == "subscribed" and hub.callbacks(farm.url(name)))

    await eventually(live, within=30.0, what="a verified subscription at the hub")
    loop = px.service.loop
    resource = px.service.runtime.feeds.by_id[feed].resource

    async def handed() -> bool:
        return resource in loop.pushed

    await eventually(handed, what="the loop told the feed pushes")
    return feed


async def polls(px: Running, feed: int) -> list[Any]:
    """The feed's probes that fetched it (a push's row is not one)."""
    return [p for p in await px.service.store.list_probes(feed, limit=1000) if p.outcome != PUSH_OUTCOME]


async def ceis(px: Running, profile: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await px.get(f"/api/v1/profiles/{profile}/ceis")).json()["items"]
    return items


async def test_a_push_captures_an_alert_with_no_probe_of_its_feed(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    settings = e2e_settings(database_url, chronon_seconds=0.2, budget=2,
                            public_url=f"http://127.0.0.1:{port}")
    with websub_hub(tmp_path) as hub:
        async with FeedFarm(["pushed"], prefill=2, hub=hub.url, epoch=now()) as farm, \
                running(settings) as px, served(px, port):
            feed = await subscribe(px, farm, hub, "pushed")
            r = await px.post("/api/v1/profiles", alert(feed))
            assert r.status_code == 201, r.text
            profile = r.json()["id"]
            await px.service.flush()
            before = await polls(px, feed)

            farm.publish("pushed", title="Oil spills into the bay")
            await farm.drain_hub()
            assert [p.status for p in farm.hub_publishes] == [202]

            async def captured() -> list[dict[str, Any]] | None:
                items = await ceis(px, profile)
                return items if items and items[0]["state"] == "captured" else None

            [cei] = await eventually(captured, within=30.0, what="the alert captured by the push")
            assert cei["fired"] is True
            await px.service.flush()
            # No probe fetched the feed meanwhile: the pushed document captured the EI.
            assert await polls(px, feed) == before
            pushes = [p for p in await px.service.store.list_probes(feed) if p.outcome == PUSH_OUTCOME]
            assert [p.chronon for p in pushes] == [cei["eis"][0]["captured_chronon"]]
            # Its entry is stored, as a probe's would be.
            titles = [e.title for e in await px.service.store.list_entries(feed)]
            assert titles.count("Oil spills into the bay") == 1


async def test_a_short_lease_is_renewed_and_a_probe_after_the_push_fires_nothing_twice(
    database_url: str, tmp_path: Path,
) -> None:
    port = free_port()
    lease = 10
    settings = e2e_settings(database_url, chronon_seconds=0.2, budget=2,
                            public_url=f"http://127.0.0.1:{port}")
    with websub_hub(tmp_path, HUB_MIN_LEASE_SECONDS=1, HUB_DEFAULT_LEASE_SECONDS=lease,
                    HUB_MAX_LEASE_SECONDS=lease) as hub:
        async with FeedFarm(["pushed"], prefill=2, hub=hub.url, epoch=now()) as farm, \
                running(settings) as px, served(px, port) as base:
            px.service.websub.reconcile_every = 0.2
            feed = await subscribe(px, farm, hub, "pushed")
            first = await px.service.store.websub_of_feed(feed)
            assert first is not None and first.lease_seconds == lease
            assert first.lease_expires_at is not None
            r = await px.post("/api/v1/profiles", alert(feed))
            assert r.status_code == 201, r.text
            profile = r.json()["id"]
            await px.service.flush()

            farm.publish("pushed", title="Oil prices jump")
            await farm.drain_hub()

            async def pushed() -> list[Any] | None:
                rows = [p for p in await px.service.store.list_probes(feed) if p.outcome == PUSH_OUTCOME]
                return rows or None

            [push] = await eventually(pushed, within=30.0, what="the push settled")

            # The lease is renewed at 85% of it (the hub verifies the renewal), before it ends.
            async def renewed() -> dt.datetime | None:
                sub = await px.service.store.websub_of_feed(feed)
                assert sub is not None and sub.state == "subscribed"
                later = sub.lease_expires_at
                return later if later is not None and later > first.lease_expires_at else None

            second = await eventually(renewed, within=3.0 * lease, what="the lease renewed")
            moved = (second - first.lease_expires_at).total_seconds()
            assert 0.85 * lease <= moved < lease, moved

            # The health probe after the push (one per lease) finds the pushed entry known.
            async def health_probe() -> list[Any] | None:
                later = [p for p in await polls(px, feed) if p.chronon > push.chronon]
                return later or None

            [probe, *_] = await eventually(health_probe, within=3.0 * lease, what="a health probe")
            assert probe.outcome == "ok"
            await px.service.flush()
            [cei] = await ceis(px, profile)  # fired once: by the push, not again by the probe
            assert cei["fired"] is True and cei["state"] == "captured"
            titles = [e.title for e in await px.service.store.list_entries(feed)]
            assert titles.count("Oil prices jump") == 1
            # The probe found nothing the hub had not pushed: the feed stays quiet.
            assert px.service.runtime.feeds.by_id[feed].resource not in px.service.loop._silent

            # The same document delivered again (hubs retry, §7), after the probe: nothing new.
            sub = await px.service.store.websub_of_feed(feed)
            assert sub is not None
            async with httpx.AsyncClient() as client:
                body = (await client.get(farm.url("pushed"))).content
                r = await client.post(f"{base}/websub/{sub.callback_id}", content=body,
                                      headers={"X-Hub-Signature": sign("sha256", sub.secret, body)})
            assert r.status_code == 202

            async def settled_again() -> bool:
                rows = await px.service.store.list_probes(feed)
                return sum(p.outcome == PUSH_OUTCOME for p in rows) == 2

            await eventually(settled_again, what="the second delivery settled")
            await px.service.flush()
            [cei] = await ceis(px, profile)
            titles = [e.title for e in await px.service.store.list_entries(feed)]
            assert titles.count("Oil prices jump") == 1


async def test_with_the_hub_stopped_the_feed_is_polled_and_no_update_is_lost(
    database_url: str, tmp_path: Path,
) -> None:
    port = free_port()
    lease = 4
    settings = e2e_settings(database_url, chronon_seconds=0.2, budget=2,
                            public_url=f"http://127.0.0.1:{port}")
    with contextlib.ExitStack() as stack:
        hub = stack.enter_context(websub_hub(
            tmp_path, HUB_MIN_LEASE_SECONDS=1, HUB_DEFAULT_LEASE_SECONDS=lease, HUB_MAX_LEASE_SECONDS=lease))
        async with FeedFarm(["pushed"], prefill=2, hub=hub.url, epoch=now()) as farm, \
                running(settings) as px, served(px, port):
            px.service.websub.reconcile_every = 0.2
            feed = await subscribe(px, farm, hub, "pushed")
            r = await px.post("/api/v1/profiles", alert(feed))
            assert r.status_code == 201, r.text
            profile = r.json()["id"]
            await px.service.flush()

            stack.close()  # the hub stops: no push, no renewal
            farm.publish("pushed", title="Oil while the hub is down")
            await farm.drain_hub()
            assert [p.status for p in farm.hub_publishes] != [202]

            # The proxy polls the feed again and finds the update: stored, and the rule fired.
            async def found() -> list[dict[str, Any]] | None:
                titles = [e.title for e in await px.service.store.list_entries(feed)]
                items = await ceis(px, profile)
                return items if "Oil while the hub is down" in titles and items else None

            [cei] = await eventually(found, within=60.0, what="the update found by polling")
            assert cei["fired"] is True
            # Polled again: the health probe found what the hub never sent (silent), or the lease
            # ran out unrenewed (expired); either way the feed is no longer left to the hub.
            sub = await px.service.store.websub_of_feed(feed)
            resource = px.service.runtime.feeds.by_id[feed].resource
            assert sub is not None
            assert resource in px.service.loop._silent or sub.state != "subscribed"
            polled = [p for p in await polls(px, feed) if p.outcome == "ok"]
            assert polled, "a poll found it, not a push"
            assert not [p for p in await px.service.store.list_probes(feed) if p.outcome == PUSH_OUTCOME]
