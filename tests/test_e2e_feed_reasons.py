"""End to end (issue 23): a feed says why it fails, and a host that does not resolve registers.

The real service polls the feed farm: "ok" serves its feed, "broken" answers
500, "limited" answers 429 with a Retry-After of an hour, and a feed on a host
that does not resolve (``.invalid``, RFC 6761) is registered anyway and fails
with the resolver's reason. ``GET /api/v1/feeds/{id}`` gives each one's last
HTTP status, error in words, last success, why it waits and its recent probes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from proxy.farm import FeedFarm
from tests.test_e2e_support import Running, e2e_settings, eventually, running

pytestmark = pytest.mark.slow

WITHIN = 60.0  # generous: the machine is shared
UNRESOLVABLE = "http://feeds.newcomer-walkthrough.invalid/feed.xml"


async def _feed(px: Running, feed_id: int) -> dict[str, Any]:
    r = await px.get(f"/api/v1/feeds/{feed_id}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_a_feed_says_why(sqlite_url: str) -> None:
    # Back-off and Retry-After are what this test reads: the loop must respect them.
    settings = e2e_settings(sqlite_url, respect_cache_hints=True)
    async with FeedFarm(["ok", "broken", "limited"]) as farm, running(settings) as px:
        farm.set_fault("broken", "error500")
        farm.set_fault("limited", "rate_limited", retry_after=3600)
        ids: dict[str, int] = {}
        for name in ("ok", "broken", "limited"):
            r = await px.post("/api/v1/feeds", {"url": farm.url(name)})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
        r = await px.post("/api/v1/feeds", {"url": UNRESOLVABLE})
        assert r.status_code == 201, r.text  # DNS is not asked at registration any more
        ids["nowhere"] = r.json()["id"]
        body = {"name": "watcher", "rules": [{"name": "all", "watch": {
            "feeds": [str(i) for i in ids.values()], "within": "1s"}}]}
        assert (await px.post("/api/v1/profiles", body)).status_code == 201, "profile"

        async def probed() -> dict[str, dict[str, Any]] | None:
            feeds = {name: await _feed(px, i) for name, i in ids.items()}
            return feeds if all(f["recent_probes"] for f in feeds.values()) else None

        feeds = await eventually(probed, within=WITHIN, what="a probe of every feed")
        now = dt.datetime.now(dt.UTC)

        ok = feeds["ok"]
        assert ok["last_status"] in (200, 304) and ok["last_error"] is None
        assert ok["last_success_at"] is not None
        assert dt.datetime.fromisoformat(ok["last_success_at"]) <= now
        # Probes go on while the detail is read: the counts are never behind the list.
        assert 1 <= len(ok["recent_probes"]) <= min(ok["probes"], 20)
        starts = [p["started_at"] for p in ok["recent_probes"]]
        assert starts == sorted(starts, reverse=True)  # newest first
        assert ok["recent_probes"][0]["outcome"] in ("ok", "not_modified")

        broken = feeds["broken"]
        assert broken["last_outcome"] == "http_error" and broken["last_status"] == 500
        assert broken["last_error"] == "HTTP 500 Internal Server Error"
        assert broken["last_success_at"] is None
        assert broken["next_probe_reason"] == "backoff"
        assert dt.datetime.fromisoformat(broken["next_allowed_at"]) > dt.datetime.fromisoformat(
            broken["recent_probes"][0]["started_at"])
        assert broken["recent_probes"][0]["error"] == "HTTP 500 Internal Server Error"

        limited = feeds["limited"]
        assert limited["last_outcome"] == "rate_limited" and limited["last_status"] == 429
        assert "Too Many Requests" in limited["last_error"] and "Retry-After" in limited["last_error"]
        assert limited["next_probe_reason"] == "retry_after"
        # The farm asked for an hour: the next probe is allowed about an hour on.
        assert dt.datetime.fromisoformat(limited["next_allowed_at"]) > now + dt.timedelta(minutes=50)

        nowhere = feeds["nowhere"]
        assert nowhere["last_outcome"] == "network_error" and nowhere["last_status"] is None
        assert "newcomer-walkthrough.invalid" in nowhere["last_error"], nowhere["last_error"]
        assert nowhere["next_probe_reason"] == "backoff" and nowhere["consecutive_errors"] >= 1

        # Lists keep their shape: no per-feed probe history there.
        items = (await px.get("/api/v1/feeds")).json()["items"]
        assert all(f.get("recent_probes") is None for f in items)
