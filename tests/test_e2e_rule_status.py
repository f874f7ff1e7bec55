"""Rule status end to end: a watch rule over two feeds that never ping, read through the API
while the service probes them (``GET /api/v1/profiles/{id}/status``, docs/api.md "Rule status")."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from proxy.farm import FeedFarm
from tests.test_e2e_support import e2e_settings, eventually, running

pytestmark = pytest.mark.slow


async def test_the_status_names_the_feed_a_watch_rule_still_waits_for(database_url: str) -> None:
    settings = e2e_settings(database_url, budget=2, policy="adm-edf")
    async with FeedFarm(["a", "b"], prefill=2) as farm, running(settings) as px:
        ids = {}
        for name in ("a", "b"):
            r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
        body = {"name": "pair", "rules": [
            {"name": "both", "watch": {"feeds": [str(ids["a"]), str(ids["b"])], "within": "3s"}}]}
        r = await px.post("/api/v1/profiles", body)
        assert r.status_code == 201, r.text
        pid, rule_id = r.json()["id"], r.json()["rules"][0]["id"]

        async def status() -> dict[str, Any]:
            got = await px.get(f"/api/v1/profiles/{pid}/status")
            assert got.status_code == 200, got.text
            return dict(got.json())

        async def probed() -> dict[str, Any]:  # both feeds' first probes: their baselines
            s = await status()
            return s if all(f["last_probe_at"] is not None for f in s["feeds"]) else {}

        first = await eventually(probed, what="both feeds probed")
        assert first["source"] == "live" and first["profile_id"] == pid
        assert [f["id"] for f in first["feeds"]] == sorted(ids.values())
        assert {f["url"] for f in first["feeds"]} == {farm.url("a"), farm.url("b")}
        rule = first["rules"][0]
        assert (rule["id"], rule["kind"], rule["state"]) == (rule_id, "watch", "waiting")
        assert rule["waiting_for"] == [ids["a"], ids["b"]] and rule["seen"] == []

        farm.publish("a", title="bid 1")

        async def building() -> dict[str, Any]:
            r = (await status())["rules"][0]
            return r if r["state"] == "building" else {}

        rule = await eventually(building, what="a probe finding feed a's update")
        assert rule["waiting_for"] == [ids["b"]]  # what holds the CEI back
        assert [s["feed"] for s in rule["seen"]] == [ids["a"]]
        assert rule["building_cei"] == f"r{rule_id}:0" and rule["building_missed"] is False
        assert rule["explanation"] == f"r{rule_id}:0 has 1 of 2 feeds; waiting for feed {ids['b']}"

        farm.publish("b", title="bid 2")

        async def done() -> dict[str, Any]:
            r = (await status())["rules"][0]
            return r if r["state"] == "waiting" and r["updates_from"] is not None else {}

        rule = await eventually(done, what="a probe finding feed b's update, completing the CEI")
        assert rule["building_cei"] is None and rule["waiting_for"] == [ids["a"], ids["b"]]
        async def written() -> list[dict[str, Any]]:  # the live status runs ahead of the writer
            return list((await px.get(f"/api/v1/profiles/{pid}/ceis")).json()["items"])

        ceis = await eventually(written, what="the completed CEI written")
        assert [c["id"] for c in ceis] == [f"r{rule_id}:0"]
        # The next CEI counts only updates after the last one of this CEI.
        last = max(dt.datetime.fromisoformat(ei["window_start"]) for ei in ceis[0]["eis"])
        assert dt.datetime.fromisoformat(rule["updates_from"]) > last

        # Another user's profile is as unknown as a missing one.
        _, bob = await px.service.store.create_user("bob")
        other = await px.client.get(f"/api/v1/profiles/{pid}/status", headers={"Authorization": f"Bearer {bob}"})
        assert other.status_code == 404
        assert (await px.get("/api/v1/profiles/999999/status")).status_code == 404
