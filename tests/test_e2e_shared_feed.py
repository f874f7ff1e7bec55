"""End to end (issue 22): two users register the same feed-farm URL, secret and all.

They share one feed: one engine resource, and at most one fetch of it per chronon
however many of their EIs want it, while each keeps their own registration. The
loop runs for real (50 ms chronons), so probes hit the farm and are logged.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import structlog

from proxy.farm import FeedFarm
from proxy.store import Store
from tests.test_e2e_support import Running, e2e_settings, eventually, running

pytestmark = pytest.mark.slow

SECRET = "farm-secret-of-both"


def _profile(trigger: int, query: int) -> dict[str, Any]:
    return {"name": "p", "rules": [{
        "name": "r", "trigger": {"feed": str(trigger), "every": "1s", "slack": "1s"},
        "query": [{"feed": str(query), "within": "1s"}]}]}


async def test_two_users_one_farm_feed_one_fetch_per_chronon(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    settings = e2e_settings(sqlite_url)
    with structlog.testing.capture_logs() as logs:
        async with FeedFarm(["shared", "q"], prefill=2) as farm, running(settings) as alice:
            _, bob_key = await alice.service.store.create_user("bob")
            bob = Running(alice.service, alice.client, bob_key)
            url = farm.url("shared") + f"?secret={SECRET}"
            a = (await alice.post("/api/v1/feeds", {"url": url})).json()
            r = await bob.post("/api/v1/feeds", {"url": url})
            assert r.status_code == 201
            b = r.json()
            assert a["id"] == b["id"] and a["ping_token"] != b["ping_token"]
            qa = (await alice.post("/api/v1/feeds", {"url": farm.url("q")})).json()["id"]
            qb = (await bob.post("/api/v1/feeds", {"url": farm.url("q")})).json()["id"]
            assert qa == qb
            for user in (alice, bob):
                r = await user.post("/api/v1/profiles", _profile(a["id"], qa))
                assert r.status_code == 201, r.text

            store = alice.service.store

            async def enough_probes() -> list[Any]:
                probes = await store.list_probes(a["id"], limit=1000)
                return probes if len(probes) >= 4 else []

            await eventually(enough_probes, what="four probes of the shared feed")
            runtime = alice.service.runtime
            assert len(runtime.feeds.by_resource) == 2, "one resource per URL, not per user"
    # The service is stopped and every finished probe written; read what it stored.
    async with Store.from_url(sqlite_url) as store:
        assert [f.id for f in await store.list_feeds()] == [a["id"], qa]
        shared = await store.list_probes(a["id"], limit=10_000)
    chronons = [p.chronon for p in shared]
    assert len(chronons) == len(set(chronons)), "two fetches of one feed in one chronon"
    # Every fetch is a recorded probe (one more at most: a probe in flight at stop is cancelled).
    assert len(shared) <= farm.stats("shared").requests <= len(shared) + 1
    for entry in logs:
        assert SECRET not in repr(entry), entry
    assert SECRET not in caplog.text
