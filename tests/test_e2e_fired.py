"""End to end (issue 23): "fired or not" and "a baseline, not a backlog" over the real loop.

The real service (loop, fetcher, store, API) polls the feed farm with 50 ms
chronons. Before anyone registers it, "mish" already holds an "oil" post from
eleven months ago. Three rules read it: "oil news" (no backfill) must not fire
on that post; "oil backfill" (``backfill: 1``) fires on it; "never" (a keyword
that never appears) yields captured CEIs that never fire. A fresh "oil" post
then fires "oil news". The CEIs say ``fired`` and the summaries count both.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from proxy.farm import FeedFarm
from tests.test_e2e_support import Running, e2e_settings, eventually, running

pytestmark = pytest.mark.slow

WITHIN = 60.0  # generous: the machine is shared


def _rule(name: str, mish: int, cnn: int, words: list[str], **trigger: Any) -> dict[str, Any]:
    return {
        "name": name,
        "trigger": {"feed": str(mish), "every": "1s", "slack": "1s", "when": {"contains": words}, **trigger},
        "query": [{"feed": str(cnn), "within": "1s"}],
    }


async def _ceis(px: Running, profile: int) -> list[dict[str, Any]]:
    r = await px.get(f"/api/v1/profiles/{profile}/ceis", params={"limit": 1000})
    assert r.status_code == 200, r.text
    body = r.json()
    items: list[dict[str, Any]] = body if isinstance(body, list) else body["items"]
    return items


async def _run(database_url: str) -> None:
    settings = e2e_settings(database_url)
    async with FeedFarm(["mish", "cnn"]) as farm, running(settings) as px:
        now = dt.datetime.now(dt.UTC)
        farm.publish("mish", title="Markets", summary="stocks", published=now - dt.timedelta(days=340))
        farm.publish("mish", title="Oil glut", summary="crude oil", published=now - dt.timedelta(days=330))
        ids = {}
        for name in ("mish", "cnn"):
            r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
        mish, cnn = ids["mish"], ids["cnn"]
        body = {"name": "analyst", "rules": [
            _rule("oil news", mish, cnn, ["oil"]),
            _rule("oil backfill", mish, cnn, ["oil"], backfill=1),
            _rule("never", mish, cnn, ["zzzneverzzz"]),
        ]}
        r = await px.post("/api/v1/profiles", body)
        assert r.status_code == 201, r.text
        profile = r.json()
        pid = profile["id"]
        rule = {x["name"]: x["id"] for x in profile["rules"]}
        assert profile["rules"][1]["spec"]["trigger"]["backfill"] == 1

        def of(ceis: list[dict[str, Any]], name: str, state: str) -> list[dict[str, Any]]:
            return [c for c in ceis if c["rule_id"] == rule[name] and c["state"] == state]

        # The first probe of mish served every rule: the backfill rule fired on the old post.
        async def backfilled() -> list[dict[str, Any]] | None:
            ceis = await _ceis(px, pid)
            fired = [c for c in of(ceis, "oil backfill", "captured") if c["fired"]]
            checked = of(ceis, "oil news", "captured")
            never = of(ceis, "never", "captured")
            return ceis if fired and checked and never else None

        ceis = await eventually(backfilled, within=WITHIN, what="the first CEIs of every rule")
        first_backfill = min(of(ceis, "oil backfill", "captured"), key=lambda c: c["release"])
        assert first_backfill["fired"] is True and len(first_backfill["eis"]) == 2
        # The rule without backfill never fired on the eleven-month-old post.
        assert all(not c["fired"] and len(c["eis"]) == 1 for c in of(ceis, "oil news", "captured"))
        assert all(not c["fired"] for c in of(ceis, "never", "captured"))

        farm.publish("mish", title="Oil jumps", summary="crude oil at $90")

        async def news_fired() -> list[dict[str, Any]] | None:
            ceis = await _ceis(px, pid)
            return [c for c in of(ceis, "oil news", "captured") if c["fired"]] or None

        fresh = (await eventually(news_fired, within=WITHIN, what="'oil news' firing on the new post"))[0]
        assert [ei["feed"] for ei in fresh["eis"]] == [mish, cnn]

        ceis = await _ceis(px, pid)
        assert not [c for c in ceis if c["rule_id"] == rule["never"] and c["fired"]]
        summary = (await px.get("/api/v1/metrics/summary")).json()
        assert summary["fired"] >= 2 and summary["not_fired"] >= 2
        assert summary["fired"] + summary["not_fired"] == (
            summary["captured"] + summary["missed"] + summary["pending"])
        assert 2 <= summary["captured_fired"] <= summary["fired"]
        (mine,) = summary["profiles"]
        assert (mine["fired"], mine["not_fired"], mine["captured_fired"]) == (
            summary["fired"], summary["not_fired"], summary["captured_fired"])


async def test_fired_and_baseline_sqlite(sqlite_url: str) -> None:
    await _run(sqlite_url)


@pytest.mark.postgres
async def test_fired_and_baseline_postgres(fresh_postgres_url: str) -> None:
    await _run(fresh_postgres_url)
