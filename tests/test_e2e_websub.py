"""End to end (issue 44): the proxy follows by push the feeds that advertise a WebSub hub.

The hub is flask-websub's (tests/websub_hub.py), a hub nobody here wrote; the feed farm
publishes to it (``FeedFarm(hub=…)``); the service runs under a real uvicorn server on
127.0.0.1 so that the hub can call its callbacks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from proxy.api import make_app
from proxy.farm import FeedFarm
from proxy.feeds.websub import sign
from proxy.ports import free_port
from tests.test_e2e_support import Running, e2e_settings, eventually, parse_metrics, running
from tests.websub_hub import websub_hub

pytestmark = pytest.mark.slow


@asynccontextmanager
async def served(px: Running, port: int) -> AsyncIterator[str]:
    """The running service's app under uvicorn on ``port`` (its PROXY_PUBLIC_URL)."""
    app = make_app(px.service.settings, service=px.service, manage_service=False)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 (uvicorn offers no event for it)
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def metric(px: Running, name: str) -> float:
    return parse_metrics((await px.client.get("/metrics")).text).get(name, 0.0)


async def test_a_hub_verifies_pushes_and_forgets_the_proxy(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    settings = e2e_settings(database_url, chronon_seconds=0.2, budget=2,
                            public_url=f"http://127.0.0.1:{port}")
    with websub_hub(tmp_path) as hub:
        # push_seed=1 draws "pushed" and not "pulled" (asserted below): a mixed farm.
        async with FeedFarm(["pushed", "pulled"], prefill=2, hub=hub.url, push_share=0.5,
                            push_seed=1) as farm, \
                running(settings) as px, served(px, port) as base:
            assert farm.push_feeds == ["pushed"]
            r = await px.post("/api/v1/feeds", {"url": farm.url("pushed")})
            assert r.status_code == 201, r.text
            feed = r.json()["id"]
            r = await px.post("/api/v1/feeds", {"url": farm.url("pulled")})
            assert r.status_code == 201, r.text
            pulled = r.json()["id"]
            topic = farm.url("pushed")

            # Discovery at the first probe, then subscription, verified by the hub (§5.3).
            async def subscribed() -> dict[str, Any] | None:
                push = (await px.get(f"/api/v1/feeds/{feed}")).json()["push"]
                return push if push and push["state"] == "subscribed" else None

            push = await eventually(subscribed, within=30.0, what="a verified subscription")
            assert push["hub"] == hub.url and push["last_notification_at"] is None
            assert push["lease_expires_at"] is not None
            # The hub stores it once our answer to its verification is in: wait for that too.
            async def at_hub() -> list[tuple[str, str]]:
                return hub.callbacks(topic)

            [(callback, secret)] = await eventually(at_hub, what="the hub's subscription")
            sub = await px.service.store.websub_of_feed(feed)
            assert sub is not None and sub.topic == topic and sub.secret == secret
            assert callback == f"{base}/websub/{sub.callback_id}"
            assert len(sub.callback_id) >= 32  # random (secrets.token_urlsafe), not the feed id
            # The pull-only feed was probed too, and names no hub: no subscription, polled as ever.
            async def probed() -> dict[str, Any] | None:
                detail: dict[str, Any] = (await px.get(f"/api/v1/feeds/{pulled}")).json()
                return detail if detail["last_outcome"] == "ok" else None

            assert (await eventually(probed, what="the pull-only feed probed"))["push"] is None

            async def counted() -> bool:  # the gauge: counted at the reconciliation the verification wakes
                return await metric(px, 'proxy_websub_subscriptions{state="subscribed"}') == 1

            await eventually(counted, what="the subscription counted")

            # A rule that opens a CEI at each update notification of the feed.
            r = await px.post("/api/v1/profiles", {"name": "pushed", "rules": [
                {"name": "on update", "trigger": {"feed": str(feed), "on": "update"},
                 "query": [{"feed": str(feed), "within": "5s"}]}]})
            assert r.status_code == 201, r.text
            profile = r.json()["id"]
            await px.service.flush()
            assert (await px.get(f"/api/v1/profiles/{profile}/ceis")).json()["items"] == []

            # The farm publishes; the hub fetches the topic and pushes it, signed (§7, §8).
            farm.publish("pushed", title="pushed entry")
            await farm.drain_hub()
            assert [p.status for p in farm.hub_publishes] == [202]

            async def notified() -> dict[str, Any] | None:
                push = (await px.get(f"/api/v1/feeds/{feed}")).json()["push"]
                return push if push["last_notification_at"] else None

            await eventually(notified, within=20.0, what="the push recorded")
            assert await metric(px, 'proxy_websub_notifications_total{outcome="accepted"}') == 1

            # The push is an update of the feed: the rule's CEI opens at the push, and the probe
            # it leads to captures it. (That probe finds the new entry, an update too: `on:
            # update` opens a second CEI then, as after a ping; docs/websub.md.)
            async def captured() -> list[dict[str, Any]] | None:
                items = (await px.get(f"/api/v1/profiles/{profile}/ceis")).json()["items"]
                done = items and all(c["state"] == "captured" for c in items)
                return sorted(items, key=lambda c: c["release"]) if done else None

            ceis = await eventually(captured, within=30.0, what="the pushed update's CEI captured")
            cei = ceis[0]

            # A forged distribution: answered 2xx, ignored, counted (§8).
            forged = b"<rss><channel><item><guid>forged</guid></item></channel></rss>"
            async with httpx.AsyncClient(base_url=base) as client:
                r = await client.post(f"/websub/{sub.callback_id}", content=forged,
                                      headers={"X-Hub-Signature": sign("sha512", "not-it", forged)})
                assert r.status_code == 202
                r = await client.post(f"/websub/{sub.callback_id}", content=forged)
                assert r.status_code == 202
            assert await metric(px, 'proxy_websub_notifications_total{outcome="bad_signature"}') == 2
            await px.service.flush()
            assert len((await px.get(f"/api/v1/profiles/{profile}/ceis")).json()["items"]) == len(ceis)
            stored = await px.service.store.websub_of_feed(feed)
            assert stored is not None and (stored.notifications, stored.rejected) == (1, 2)

            # The feed's last registration goes: the proxy unsubscribes, the hub verifies.
            assert (await px.client.delete(f"/api/v1/profiles/{profile}",
                                           headers=px.auth)).status_code == 204
            assert (await px.client.delete(f"/api/v1/feeds/{feed}",
                                           headers=px.auth)).status_code == 204

            async def unsubscribed() -> bool:
                return not hub.callbacks(topic) and not await px.service.store.websub_list()

            await eventually(unsubscribed, within=30.0, what="the unsubscription verified")
            assert cei["state"] == "captured"
