"""End to end, feeds that never ping: the service finds their updates itself, with its spare budget.

The real service (loop, fetcher, store, API) against the feed farm, 50 ms
chronons, no ping anywhere. Rules that wait for updates (a watch rule over two
feeds, an ``on: update`` trigger with a keyword) get no EI until a probe finds
something, so only background probes can move them.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.farm import FeedFarm
from tests.test_e2e_support import Running, e2e_settings, eventually, parse_metrics, running

pytestmark = pytest.mark.slow


async def _ceis(px: Running, profile: int, state: str | None = None) -> list[dict[str, Any]]:
    r = await px.get(f"/api/v1/profiles/{profile}/ceis", params={"state": state} if state else {})
    assert r.status_code == 200, r.text
    ceis: list[dict[str, Any]] = r.json()
    return ceis


async def test_rules_on_feeds_that_never_ping_fire_from_probes(database_url: str) -> None:
    settings = e2e_settings(database_url, budget=2, policy="adm-edf")
    async with FeedFarm(["a", "b", "blog", "news"], prefill=3) as farm, running(settings) as px:
        ids = {}
        for name in ("a", "b", "blog", "news"):
            r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
        body = {
            "name": "no pings",
            "rules": [
                # within 3 s = 60 chronons: two spare probes a chronon over three feeds find
                # each update in time.
                {"name": "both", "watch": {"feeds": [str(ids["a"]), str(ids["b"])], "within": "3s"}},
                {"name": "oil", "trigger": {"feed": str(ids["blog"]), "on": "update", "slack": "3s",
                                            "when": {"contains": ["oil"]}},
                 "query": [{"feed": str(ids["news"]), "within": "3s"}]},
            ],
        }
        r = await px.post("/api/v1/profiles", body)
        assert r.status_code == 201, r.text
        pid, watch_rule = r.json()["id"], r.json()["rules"][0]["id"]

        # Before any update the spare budget already probes the watched feeds (their first
        # probe is the baseline): the budget is not idle.
        async def baseline() -> dict[str, float]:
            m = parse_metrics((await px.client.get("/metrics")).text)
            return m if m.get("proxy_background_probes_total", 0) >= 6 else {}

        await eventually(baseline, what="background probes of the watched feeds")
        assert await _ceis(px, pid) == []  # the documents' backlog is no update

        farm.publish("a", title="bid 1")
        farm.publish("b", title="bid 2")
        farm.publish("blog", title="Oil prices jump", summary="crude oil at $90")

        async def watch_captured() -> list[dict[str, Any]]:
            return [c for c in await _ceis(px, pid, "captured") if c["rule_id"] == watch_rule]

        cei = (await eventually(watch_captured, what="the watch rule's CEI captured"))[0]
        assert sorted(ei["feed"] for ei in cei["eis"]) == sorted([ids["a"], ids["b"]])
        assert all(ei["state"] == "captured" for ei in cei["eis"])

        async def fired() -> list[dict[str, Any]]:
            return [c for c in await _ceis(px, pid, "captured") if len(c["eis"]) == 2
                    and c["eis"][0]["feed"] == ids["blog"]]

        oil = (await eventually(fired, what="the on: update rule fired and captured"))[0]
        assert [ei["feed"] for ei in oil["eis"]] == [ids["blog"], ids["news"]]
        # The trigger EI starts at the estimated update, before the probe that found it.
        trigger = oil["eis"][0]
        assert trigger["start"] <= trigger["captured_chronon"] <= trigger["finish"]
