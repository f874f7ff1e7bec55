"""End to end (issue 43): a single-feed alert, "this feed, these words, not those, in the title".

The real service (loop, fetcher, store, API) polls the feed farm with 50 ms chronons. One
rule with no ``query`` watches "mish" for "oil" in titles, excluding opinion pieces. The farm
publishes an opinion piece, an entry with oil only in its summary, and a news entry with
oil in its title: only the last fires the alert. Its CEI is the trigger's EI alone (rank 1),
stored as fired, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.farm import FeedFarm
from tests.test_e2e_support import Running, e2e_settings, eventually, running

pytestmark = pytest.mark.slow

WITHIN = 60.0  # generous: the machine is shared


async def _ceis(px: Running, profile: int) -> list[dict[str, Any]]:
    r = await px.get(f"/api/v1/profiles/{profile}/ceis", params={"limit": 1000})
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


async def _run(database_url: str) -> None:
    settings = e2e_settings(database_url)
    async with FeedFarm(["mish"]) as farm, running(settings) as px:
        r = await px.post("/api/v1/feeds", {"url": farm.url("mish")})
        assert r.status_code == 201, r.text
        mish = r.json()["id"]
        # Not refused any more: a trigger without query is an alert.
        r = await px.post("/api/v1/profiles", {"name": "analyst", "rules": [{
            "name": "oil in titles",
            "trigger": {"feed": mish, "on": "update", "slack": "2s",
                        "when": {"contains": ["oil"], "exclude": ["opinion"], "fields": ["title"]}}}]})
        assert r.status_code == 201, r.text
        pid = r.json()["id"]
        assert r.json()["rules"][0]["spec"]["trigger"]["when"]["fields"] == ["title"]

        # Bad 'fields' are refused naming the field.
        r = await px.post("/api/v1/profiles", {"name": "bad", "rules": [{
            "name": "x", "trigger": {"feed": mish, "on": "update",
                                     "when": {"contains": ["oil"], "fields": ["title", "body"]}}}]})
        assert r.status_code == 422, r.text
        assert "rules.0.trigger.when.fields.1" in r.text

        async def baselined() -> bool | None:
            r = await px.get(f"/api/v1/feeds/{mish}")
            return True if r.json().get("last_probe_at") or r.json().get("probes") else None
        await eventually(baselined, within=WITHIN, what="a first probe of mish (the baseline)")

        farm.publish("mish", title="Opinion: oil is over", summary="a column")
        farm.publish("mish", title="Markets", summary="crude oil steady")

        async def decided() -> list[dict[str, Any]] | None:
            ceis = await _ceis(px, pid)
            return ceis if ceis and all(c["state"] != "pending" for c in ceis) else None

        # Their update opened the rule's CEI and the probe decided it: not fired (an
        # excluded word; oil outside the selected field).
        first = await eventually(decided, within=WITHIN, what="the first update decided")
        assert not any(c["fired"] for c in first), first

        farm.publish("mish", title="Oil jumps to $90", summary="news")

        async def fired() -> list[dict[str, Any]] | None:
            return [c for c in await _ceis(px, pid) if c["fired"]] or None

        found = await eventually(fired, within=WITHIN, what="the alert firing")
        assert len(found) == 1, found
        (cei,) = found
        assert [ei["feed"] for ei in cei["eis"]] == [mish]  # rank 1: the trigger's EI alone
        # Every CEI of the rule has one EI; the ones that did not fire are not fired.
        ceis = await _ceis(px, pid)
        assert all(len(c["eis"]) == 1 for c in ceis)
        assert sum(1 for c in ceis if c["fired"]) == 1


async def test_alert_sqlite(sqlite_url: str) -> None:
    await _run(sqlite_url)


@pytest.mark.postgres
async def test_alert_postgres(fresh_postgres_url: str) -> None:
    await _run(fresh_postgres_url)
