"""End to end, issue 45's signals beyond rates: a feed's stated update interval and the regime-shift detector.

The real service against the feed farm, 50 ms chronons, no ping: with
``PROXY_DISCOVERY_PUBLISHER_HINTS`` a feed whose document states its pace
(the syndication module) gets that pace as its rate's prior, and with
``PROXY_DISCOVERY_CHANGEPOINT`` every rated feed's probes feed the detector.
Both are off by default (docs/discovery.md, "Publisher hints and regime shifts").
"""

from __future__ import annotations

import pytest

from proxy.farm import FeedFarm
from proxy.settings import load_settings
from tests.test_e2e_support import e2e_settings, eventually, running

pytestmark = pytest.mark.slow


def test_both_signals_are_off_by_default() -> None:
    s = load_settings()
    assert s.discovery_publisher_hints is False
    assert s.discovery_changepoint is False


async def test_a_stated_interval_is_a_prior_and_probes_feed_the_detector(database_url: str) -> None:
    settings = e2e_settings(database_url, budget=2, policy="adm-edf", discovery_publisher_hints=True,
                            discovery_changepoint=True, unwatched_probe_interval_seconds=0)
    # "a" states 7,200 updates an hour: one per 0.5 s, 0.1 a 50 ms chronon; "b" states nothing.
    async with FeedFarm(["a", "b"], prefill=3, hints={"a": 0.5}) as farm, running(settings) as px:
        ids, profile = await px.watch_feeds([farm.url("a"), farm.url("b")])
        loop = px.service.loop
        assert loop is not None and loop.publisher_hints and loop.shifts is not None
        feeds = px.service.runtime.feeds
        a, b = (feeds.by_id[i] for i in ids)

        # Each feed probed a few times after the allocation rated it: the detector holds both.
        async def watched() -> int:
            return len(loop.shifts) if loop.shifts is not None and len(loop.shifts) == 2 else 0

        await eventually(watched, what="both feeds' probes seen by the shift detector")
        assert a.update_every == pytest.approx(0.5)
        assert b.update_every is None
        # The two feeds' records are alike (the same backlog, dated by the farm years back, and no
        # update since): without the hint their rates would be equal. a's prior is its stated 0.1 a
        # chronon, b's the pool's; the years of silence outweigh both, but a's stays above.
        believed = loop._believed
        assert believed[a.resource] > 2 * believed[b.resource]

        # Memory follows the registered feeds: once b is deleted, its rate and detector go.
        r = await px.client.delete(f"/api/v1/profiles/{profile}", headers=px.auth)
        assert r.status_code == 204, r.text
        r = await px.client.delete(f"/api/v1/feeds/{ids[1]}", headers=px.auth)
        assert r.status_code == 204, r.text

        async def forgotten() -> bool:
            return b.resource not in loop._believed

        await eventually(forgotten, what="the deleted feed's detector state dropped")
        assert a.resource in loop._believed and len(loop.shifts) == 1
        assert loop.shifts.record(b.resource) is None
