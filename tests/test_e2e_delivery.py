"""End to end (issue 19): the service against the feed farm notifies a real local receiver.

A rank-1 trigger rule (every second, no condition: main paper §2.1 without
"oil") captures a CEI each second; each captured CEI is one delivery to the
profile's webhook. The receiver fails in every way a receiver fails (500, a
timeout, connection refused, 503 with Retry-After) and then recovers: every
notification arrives, signed (checked with the ``standardwebhooks`` package),
with the same ``webhook-id`` on every retry.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from proxy.farm import FeedFarm
from tests.receiver import Receiver
from tests.test_e2e_support import Running, e2e_settings, eventually, running

pytestmark = pytest.mark.slow

# PROXY_USER_AGENT names the operator to webhook and Apprise receivers too (issue 23).
AGENT = "acme-proxy/1.0 (+mailto:ops@acme.example)"

FAST_RETRIES = {
    "delivery_retry_base_seconds": 0.05,
    "delivery_retry_max_seconds": 0.2,
    "delivery_timeout_seconds": 0.5,
    "delivery_poll_seconds": 0.1,
}


def rank_one(feed: int, targets: list[dict[str, Any]] | None = None, **rule: Any) -> dict[str, Any]:
    """A profile whose one rule probes ``feed`` every second: one captured CEI a second."""
    body: dict[str, Any] = {
        "name": "every second",
        "rules": [{"name": "tick", "trigger": {"feed": str(feed), "every": "1s", "slack": "1s"},
                   "query": [{"feed": str(feed), "within": "1s"}], **rule}],
    }
    if targets is not None:
        body["notify"] = targets
    return body


async def deliveries(px: Running, state: str | None = None) -> list[dict[str, Any]]:
    r = await px.get("/api/v1/deliveries", params={"state": state} if state else {})
    assert r.status_code == 200, r.text
    rows: list[dict[str, Any]] = r.json()["items"]
    return rows


async def setup_profile(px: Running, farm: FeedFarm, notify: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    r = await px.post("/api/v1/feeds", {"url": farm.url("blog")})
    assert r.status_code == 201, r.text
    r = await px.post("/api/v1/profiles", rank_one(r.json()["id"], notify))
    assert r.status_code == 201, r.text
    return r.json()["id"], r.json()


async def test_a_failing_receiver_that_recovers_gets_every_notification_signed_once_per_id(
    database_url: str,
) -> None:
    settings = e2e_settings(database_url, user_agent=AGENT, **FAST_RETRIES)
    async with FeedFarm(["blog"], prefill=2) as farm, Receiver(mode="error") as rx, running(settings) as px:
        pid, profile = await setup_profile(px, farm, [{"webhook": rx.url}])
        (target,) = profile["new_targets"]
        secret = target["secret"]
        assert target["kind"] == "webhook" and secret.startswith("whsec_")

        # 500s: the same message is retried, with the same id.
        async def retried() -> str | None:
            ids = [r.msg_id for r in rx.requests]
            return next((i for i in ids if ids.count(i) >= 3), None)

        first = await eventually(retried, within=10, what="a message retried twice")
        # A receiver that does not answer in time: the attempt times out and is retried.
        rx.mode = "hang"
        seen = len(rx.requests)
        await eventually(lambda: _gt(len(rx.requests), seen), within=10, what="a request while hanging")
        await asyncio.sleep(0.6)  # past delivery_timeout_seconds
        await eventually(lambda: _any_error(px, "timeout"), within=10, what="a timeout recorded")
        # Down: connection refused.
        await rx.stop()
        await eventually(lambda: _any_error(px, "Connect"), within=10, what="a refused connection recorded")
        # Back, asking each message to wait a second once (503 + Retry-After: 1).
        rx.mode = "retry_after"
        await rx.start()
        snapshot = {d["msg_id"]: d for d in await deliveries(px)}
        assert first in snapshot

        async def all_acknowledged() -> bool:
            return set(snapshot) <= rx.acknowledged()

        await eventually(all_acknowledged, within=15, what="every notification acknowledged")

        # Every captured CEI up to the snapshot has exactly one delivery, now delivered (the
        # receiver's 200 comes before the dispatcher stores it: wait for the rows, not the answers).
        async def all_delivered() -> dict[str, dict[str, Any]]:
            rows = {d["msg_id"]: d for d in await deliveries(px)}
            return rows if all(rows[m]["state"] == "delivered" for m in snapshot) else {}

        rows = await eventually(all_delivered, within=10, what="every acknowledged delivery stored as delivered")
        fired = {c["id"]: c["fired"] for c in (await px.get(
            f"/api/v1/profiles/{pid}/ceis", params={"state": "captured", "limit": 1000})).json()["items"]}
        captured = set(fired)
        delivered_ceis = [d["cei_id"] for d in rows.values()]
        assert len(delivered_ceis) == len(set(delivered_ceis))  # one row per (CEI, target)
        assert {snapshot[m]["cei_id"] for m in snapshot} <= captured

        # Every request verifies with the standardwebhooks package and carries its row's id.
        hook = Webhook(secret)
        for req in rx.requests:
            if req.path != "/hook":
                continue
            doc = hook.verify(req.body, req.headers)
            assert doc["type"] == "captured" and doc["version"] == 2
            assert doc["cei"]["id"] == rows[req.msg_id]["cei_id"]
            assert doc["profile"] == {"id": pid, "name": "every second"}
            assert doc["cei"]["fired"] is fired[doc["cei"]["id"]]  # as the API says it
            assert req.headers["user-agent"] == AGENT
        # Retries kept their id: the first message was sent several times, always the same body.
        bodies = {r.body for r in rx.by_id(first)}
        assert len(rx.by_id(first)) >= 4 and len(bodies) == 1

        # Retry-After honoured: after the 503, the same message came back no sooner than 1 s.
        for msg in snapshot:
            attempts = rx.by_id(msg)
            told = [i for i, r in enumerate(attempts) if r.status == 503]
            if told and told[0] + 1 < len(attempts):
                gap = attempts[told[0] + 1].at - attempts[told[0]].at
                assert gap >= 0.95, (msg, gap)
        assert any(r.status == 503 for r in rx.requests)

        m = (await px.client.get("/metrics")).text
        assert 'proxy_deliveries_total{outcome="delivered"}' in m
        assert 'proxy_deliveries_total{outcome="retry"}' in m
        assert "proxy_delivery_latency_seconds_bucket" in m and "proxy_outbox_backlog" in m


async def _gt(a: int, b: int) -> bool:
    return a > b


async def _any_error(px: Running, text: str) -> bool:
    return any(text in (d["last_error"] or "") for d in await deliveries(px))


async def test_a_410_disables_the_target_and_its_dead_letters_can_be_retried(database_url: str) -> None:
    settings = e2e_settings(database_url, **FAST_RETRIES)
    async with FeedFarm(["blog"], prefill=2) as farm, Receiver(mode="gone") as rx, running(settings) as px:
        await setup_profile(px, farm, [{"webhook": rx.url}])

        async def failed() -> list[dict[str, Any]]:
            return await deliveries(px, "failed")

        dead = (await eventually(failed, within=10, what="a dead letter"))
        assert any("410" in (d["last_error"] or "") for d in dead)
        (target,) = (await px.get("/api/v1/targets")).json()["items"]
        assert target["disabled"] and "410 Gone" in target["disabled_reason"]
        assert target["secret"] is None  # never listed
        # Later resolutions are dead letters at once, saying why; nothing more is sent.
        sent = len(rx.requests)
        later = await eventually(
            lambda: _dead_saying(px, "target disabled"), within=10, what="a dead letter for a disabled target")
        assert len(rx.requests) == sent
        r = await px.post(f"/api/v1/deliveries/{later['id']}/retry", {})
        assert r.status_code == 409 and "enable" in r.json()["detail"]
        rx.mode = "ok"
        assert (await px.post(f"/api/v1/targets/{target['id']}/enable", {})).status_code == 200
        r = await px.post(f"/api/v1/deliveries/{later['id']}/retry", {})
        assert r.status_code == 200 and r.json()["state"] == "pending"

        async def delivered() -> bool:
            d = (await px.get(f"/api/v1/deliveries/{later['id']}")).json()
            return bool(d["state"] == "delivered" and d["msg_id"] in rx.acknowledged())

        await eventually(delivered, within=10, what="the retried dead letter delivered")
        detail = (await px.get(f"/api/v1/deliveries/{later['id']}")).json()
        assert detail["notification"]["cei"]["id"] == later["cei_id"]
        r = await px.post(f"/api/v1/deliveries/{later['id']}/retry", {})
        assert r.status_code == 409  # delivered already


async def _dead_saying(px: Running, text: str) -> dict[str, Any] | None:
    return next((d for d in await deliveries(px, "failed") if text in (d["last_error"] or "")), None)


async def test_an_apprise_json_target_gets_the_text_rendering(database_url: str) -> None:
    settings = e2e_settings(database_url, user_agent=AGENT, **FAST_RETRIES)
    async with FeedFarm(["blog"], prefill=2) as farm, Receiver(mode="ok") as rx, running(settings) as px:
        url = f"json://127.0.0.1:{rx.port}/apprise"
        _, profile = await setup_profile(px, farm, [{"apprise": url, "events": ["captured"]}])
        assert profile["new_targets"][0]["kind"] == "apprise"
        assert profile["new_targets"][0]["secret"] is None

        async def got() -> list[Any]:
            return [r for r in rx.requests if r.path == "/apprise"]

        (first, *_) = await eventually(got, within=15, what="an Apprise JSON post")
        doc = first.json()
        assert doc["title"].startswith("[every second / tick] captured: CEI r")
        assert "was captured; the rule " in doc["message"] and "/blog" in doc["message"]
        assert first.headers["user-agent"] == AGENT

        async def delivered() -> bool:
            return any(d["state"] == "delivered" for d in await deliveries(px))

        await eventually(delivered, within=10, what="an Apprise delivery marked delivered")


async def test_the_loop_keeps_its_pace_while_a_receiver_hangs(database_url: str) -> None:
    """Delivery never blocks the chronon loop: with every attempt hanging until its timeout,
    chronons still tick on time and CEIs keep being captured."""
    settings = e2e_settings(database_url, **FAST_RETRIES)
    async with FeedFarm(["blog"], prefill=2) as farm, Receiver(mode="hang") as rx, running(settings) as px:
        pid, _ = await setup_profile(px, farm, [{"webhook": rx.url}])
        loop = px.service.loop
        before = loop.ticks
        started = time.monotonic()
        await asyncio.sleep(2.0)
        elapsed = time.monotonic() - started
        assert loop.ticks - before >= 0.8 * elapsed / settings.chronon_seconds
        assert rx.requests  # it was being tried meanwhile
        captured = (await px.get(f"/api/v1/profiles/{pid}/ceis", params={"state": "captured"})).json()["items"]
        assert captured
