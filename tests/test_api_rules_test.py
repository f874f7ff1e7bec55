"""``POST /api/v1/rules/test`` end to end: a rule tried on its feeds' documents as they are now.

The real service (loop, fetcher, store, API) and the feed farm. Each dry run fetches the
document through the service's fetcher; the answer lists every entry with whether the
rule would match it and why. Another user's feed is refused naming the field, a farm
fault is reported in words.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.farm import FeedFarm
from tests.test_e2e_support import Running, e2e_settings, running

pytestmark = pytest.mark.slow


def _by_title(feed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["title"]: e for e in feed["entries"]}


async def _try(px: Running, rule: dict[str, Any], **kw: Any) -> dict[str, Any]:
    r = await px.post("/api/v1/rules/test", rule, **kw)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def _run(database_url: str) -> None:
    settings = e2e_settings(database_url)
    async with FeedFarm(["mish", "cnn", "broken", "bobs"]) as farm, running(settings) as px:
        ids = {}
        for name in ("mish", "cnn", "broken"):
            r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
        mish, cnn, broken = ids["mish"], ids["cnn"], ids["broken"]
        farm.publish("mish", title="Opinion: oil is over", summary="a column")
        farm.publish("mish", title="Markets", summary="crude oil steady")
        farm.publish("mish", title="Oil jumps to $90", summary="news")
        farm.publish("mish", title="Soil and water", summary="gardening")
        requests_before = farm.stats("mish").requests

        alert = {"name": "oil in titles",
                 "trigger": {"feed": mish, "on": "update",
                             "when": {"contains": ["oil"], "exclude": ["opinion"],
                                      "fields": ["title"]}}}
        body = await _try(px, alert)
        assert body["kind"] == "alert"
        (feed,) = body["feeds"]
        assert feed["feed"] == mish and feed["status"] == 200 and feed["error"] is None
        entries = _by_title(feed)
        assert set(entries) == {"Opinion: oil is over", "Markets", "Oil jumps to $90",
                                "Soil and water"}
        hit = entries["Oil jumps to $90"]
        assert hit["matches"] is True
        assert hit["match"] == {"kind": "contains", "field": "title", "text": "oil"}
        assert hit["link"] and hit["published"]
        for title in ("Opinion: oil is over",  # excluded
                      "Markets",  # oil only in the summary, not a selected field
                      "Soil and water"):  # not a whole word
            assert entries[title]["matches"] is False, title
            assert entries[title]["match"] is None, title
        # One real fetch of the document (not a 304: no validators were sent).
        assert farm.stats("mish").requests > requests_before

        # The summary selected: "Markets" matches there; the opinion piece is still excluded.
        alert["trigger"]["when"]["fields"] = ["title", "summary"]  # type: ignore[index]
        entries = _by_title((await _try(px, alert))["feeds"][0])
        assert entries["Markets"]["match"] == {"kind": "contains", "field": "summary", "text": "oil"}
        assert entries["Opinion: oil is over"]["matches"] is False

        # 'all': each keyword somewhere in the selected fields.
        both = {"name": "both", "trigger": {"feed": str(mish), "every": "1m",
                                            "when": {"all": ["oil", "news"]}},
                "query": [{"feed": cnn, "within": "5m"}]}
        body = await _try(px, both)
        assert body["kind"] == "trigger"
        assert [f["feed"] for f in body["feeds"]] == [mish]  # the trigger feed only
        entries = _by_title(body["feeds"][0])
        assert [t for t, e in entries.items() if e["matches"]] == ["Oil jumps to $90"]
        assert entries["Oil jumps to $90"]["match"]["kind"] == "all"

        # A watch rule reads each watched feed; every entry counts (kind "any").
        farm.publish("cnn", title="Weather", summary="rain")
        body = await _try(px, {"name": "w", "watch": {"feeds": [mish, cnn], "within": "5m"}})
        assert [f["feed"] for f in body["feeds"]] == [mish, cnn]
        assert all(e["matches"] and e["match"]["kind"] == "any"
                   for f in body["feeds"] for e in f["entries"])

        # A fetch failure is reported for that feed, in words; the others still answer.
        farm.set_fault("broken", "error500")
        body = await _try(px, {"name": "w", "watch": {"feeds": [mish, broken], "within": "5m"}})
        ok, failed = body["feeds"]
        assert ok["status"] == 200 and ok["entries"]
        assert failed["feed"] == broken and failed["status"] == 500 and failed["entries"] == []
        assert "HTTP error 500" in failed["error"]

        # Another user's feed is as unknown as a missing one: 422 naming the field.
        _, bob_key = await px.service.store.create_user("bob")
        r = await px.client.post("/api/v1/feeds", json={"url": farm.url("bobs")},
                                 headers={"Authorization": f"Bearer {bob_key}"})
        assert r.status_code == 201, r.text
        bobs = r.json()["id"]
        r = await px.post("/api/v1/rules/test", {"name": "x", "trigger": {"feed": bobs, "on": "update"}})
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["loc"] == ["body", "trigger", "feed"]
        assert f"trigger.feed: unknown feed '{bobs}'" in r.json()["detail"]
        r = await px.post("/api/v1/rules/test", {"name": "x", "trigger": {"feed": mish, "on": "update"},
                                                 "query": [{"feed": bobs, "within": "5m"}]})
        assert r.status_code == 422 and "query.0.feed" in r.text, r.text

        # An invalid rule: the usual 422 naming the field; no key: 401.
        r = await px.post("/api/v1/rules/test", {"name": "x", "trigger": {
            "feed": mish, "on": "update", "when": {"contains": ["oil"], "fields": ["titel"]}}})
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["loc"] == ["body", "trigger", "when", "fields", 0]
        r = await px.client.post("/api/v1/rules/test", json=alert)
        assert r.status_code == 401

        # A client looping on it is stopped (a token bucket per user): 429 with Retry-After.
        # The buckets' clock stands still from here, so no token comes back meanwhile.
        px.service._dry_runs._buckets.clock = lambda: 0.0
        statuses = [(await px.post("/api/v1/rules/test", alert)).status_code for _ in range(11)]
        first = statuses.index(429)  # at most 10 tokens were left
        assert set(statuses[:first]) <= {200} and set(statuses[first:]) == {429}, statuses
        r = await px.post("/api/v1/rules/test", alert)
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1, r.text
        assert "too many rule tests" in r.json()["detail"]
        # Another user's bucket is their own.
        r = await px.client.post("/api/v1/rules/test", json={"name": "x", "watch": {
            "feeds": [bobs], "within": "5m"}}, headers={"Authorization": f"Bearer {bob_key}"})
        assert r.status_code == 200, r.text


async def test_rule_dry_run_sqlite(sqlite_url: str) -> None:
    await _run(sqlite_url)


@pytest.mark.postgres
async def test_rule_dry_run_postgres(fresh_postgres_url: str) -> None:
    await _run(fresh_postgres_url)
