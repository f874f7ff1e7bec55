"""End to end (issue 43, "what matched is told", and ``when`` on watch rules).

The real service (loop, fetcher, store, dispatcher, API) polls the feed farm with 50 ms
chronons and notifies a real local webhook receiver and an Apprise JSON target. One profile
holds an alert ("oil" in titles, not opinion pieces) and a watch rule on the same feed whose
update counts only if an entry mentions "gold". The farm publishes an opinion piece, then a
news entry with oil in its title, then one with gold in its summary:

- the alert fires once, and the webhook body (notification version 2), the Apprise text,
  ``/events/recent`` and the CEI's API view all tell the entry that matched, its link and
  date, the field (``title``) and the keyword as the rule wrote it (``Oil``);
- the watch rule opens no CEI for the oil entries, and one for the gold entry, which tells
  ``gold`` in ``summary``;
- a watch rule's ``when`` with ``every_nth`` (a trigger's counter) is refused with a 422
  that names the field.

On SQLite and PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from proxy.farm import FeedFarm
from tests.receiver import Receiver
from tests.test_e2e_support import Running, e2e_settings, eventually, running

pytestmark = pytest.mark.slow

WITHIN = 60.0  # generous: the machine is shared
FAST = {"delivery_retry_base_seconds": 0.05, "delivery_retry_max_seconds": 0.2,
        "delivery_timeout_seconds": 2.0, "delivery_poll_seconds": 0.1}


async def _ceis(px: Running, profile: int) -> list[dict[str, Any]]:
    r = await px.get(f"/api/v1/profiles/{profile}/ceis", params={"limit": 1000})
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


async def _run(database_url: str) -> None:
    settings = e2e_settings(database_url, **FAST)
    async with FeedFarm(["mish"]) as farm, Receiver(mode="ok") as rx, running(settings) as px:
        r = await px.post("/api/v1/feeds", {"url": farm.url("mish")})
        assert r.status_code == 201, r.text
        mish = r.json()["id"]

        # A watch rule's `when` takes no every_nth: refused, naming the field.
        r = await px.post("/api/v1/profiles", {"name": "bad", "rules": [{
            "name": "x", "watch": {"feeds": [mish], "within": "5s",
                                   "when": {"contains": ["gold"], "every_nth": 2}}}]})
        assert r.status_code == 422, r.text
        assert "rules.0.watch.when.every_nth" in r.text

        r = await px.post("/api/v1/profiles", {
            "name": "analyst",
            "notify": [{"webhook": rx.url},
                       {"apprise": f"json://127.0.0.1:{rx.port}/apprise", "events": ["captured"]}],
            "rules": [
                {"name": "oil in titles",
                 "trigger": {"feed": mish, "on": "update", "slack": "5s",
                             "when": {"contains": ["Oil"], "exclude": ["opinion"], "fields": ["title"]}}},
                {"name": "gold watch",
                 "watch": {"feeds": [mish], "within": "5s", "when": {"contains": ["gold"]}}},
            ]})
        assert r.status_code == 201, r.text
        pid = r.json()["id"]
        alert_rule, watch_rule = (rule["id"] for rule in r.json()["rules"])
        assert r.json()["rules"][1]["spec"]["watch"]["when"] == {"contains": ["gold"]}

        # The rules' baseline is the first probe after they were made: wait for two more
        # fetches (the second started after the profile was stored), else the entries below
        # could land in the baseline, which never fires.
        seen = farm.stats("mish").requests

        async def baselined() -> bool | None:
            return True if farm.stats("mish").requests >= seen + 2 else None
        await eventually(baselined, within=WITHIN, what="a probe of mish after the rules (the baseline)")

        farm.publish("mish", title="Opinion: oil is over", summary="a column")

        async def decided() -> list[dict[str, Any]] | None:
            ceis = [c for c in await _ceis(px, pid) if c["rule_id"] == alert_rule]
            return ceis if ceis and all(c["state"] != "pending" for c in ceis) else None

        first = await eventually(decided, within=WITHIN, what="the opinion piece decided")
        assert not any(c["fired"] for c in first) and all(c["matched"] == [] for c in first), first

        published = dt.datetime.now(dt.UTC).replace(microsecond=0)
        farm.publish("mish", title="OIL jumps to $90", summary="news", published=published)

        async def fired() -> list[dict[str, Any]] | None:
            return [c for c in await _ceis(px, pid)
                    if c["rule_id"] == alert_rule and c["fired"] and c["state"] != "pending"] or None

        (cei,) = await eventually(fired, within=WITHIN, what="the alert firing")
        (told,) = cei["matched"]
        assert told["feed_id"] == mish and told["title"] == "OIL jumps to $90"
        assert told["link"] and told["link"].startswith("http://127.0.0.1")
        assert dt.datetime.fromisoformat(told["published"]) == published
        assert (told["match"], told["field"], told["keyword"], told["pattern"]) == ("contains", "title", "Oil", None)

        async def hooked() -> dict[str, Any] | None:
            docs = [q.json() for q in rx.requests if q.path == "/hook"]
            return next((d for d in docs if d["cei"]["id"] == cei["id"]), None)

        doc = await eventually(hooked, within=WITHIN, what="the alert's webhook")
        assert doc["version"] == 2 and doc["type"] == cei["state"] and doc["cei"]["fired"]
        assert doc["matched"] == [told]  # the same entry, told the same way
        # Version 1's fields are all still there, unchanged in meaning.
        assert {"event_id", "created_at", "profile", "rule", "cei", "eis"} <= set(doc)
        assert doc["rule"] == {"id": alert_rule, "name": "oil in titles"}

        if cei["state"] == "captured":  # the Apprise target asked for captured events only
            async def texted() -> dict[str, Any] | None:
                docs = [q.json() for q in rx.requests if q.path == "/apprise"]
                return next((d for d in docs if cei["id"] in d["title"]), None)

            text = await eventually(texted, within=WITHIN, what="the alert's Apprise text")
            assert "OIL jumps to $90" in text["message"] and "'Oil' in title" in text["message"]

        r = await px.get("/api/v1/events/recent", params={"limit": 100})
        assert r.status_code == 200, r.text
        (event,) = [e for e in r.json()["items"] if e["cei"]["id"] == cei["id"]]
        assert event["matched"] == [told]

        # None of that opened a CEI of the gold watch: no entry mentioned gold.
        assert [c for c in await _ceis(px, pid) if c["rule_id"] == watch_rule] == []
        farm.publish("mish", title="Markets", summary="Gold at a record")

        async def watched() -> list[dict[str, Any]] | None:
            return [c for c in await _ceis(px, pid) if c["rule_id"] == watch_rule] or None

        (wcei,) = await eventually(watched, within=WITHIN, what="the gold watch's CEI")
        assert wcei["fired"]
        assert [(m["title"], m["field"], m["keyword"]) for m in wcei["matched"]] == [
            ("Markets", "summary", "gold")]


async def test_matched_sqlite(sqlite_url: str) -> None:
    await _run(sqlite_url)


@pytest.mark.postgres
async def test_matched_postgres(fresh_postgres_url: str) -> None:
    await _run(fresh_postgres_url)
