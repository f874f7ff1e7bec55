"""End to end, issue 45's age hazards: every probe's dated document teaches ``PROXY_DISCOVERY_HAZARD``'s model.

The real service against the feed farm, 50 ms chronons, no ping: with the
setting on, the loop tells ``proxy.core.hazard.AgeHazard`` the dates of each
rated feed's document, so each feed's newest publication is known to the
allocation, and a deleted feed is forgotten. Off by default
(docs/discovery.md, "Age hazards").
"""

from __future__ import annotations

import pytest

from proxy.farm import FeedFarm
from proxy.settings import load_settings
from tests.test_e2e_support import e2e_settings, eventually, running

pytestmark = pytest.mark.slow


def test_age_hazards_are_off_by_default() -> None:
    assert load_settings().discovery_hazard == 0.0


async def test_every_rated_feeds_document_dates_its_age_and_deletion_forgets_it(database_url: str) -> None:
    settings = e2e_settings(database_url, budget=2, policy="adm-edf", discovery_hazard=5.0,
                            unwatched_probe_interval_seconds=0)
    async with FeedFarm(["a", "b"], prefill=3) as farm, running(settings) as px:
        ids, profile = await px.watch_feeds([farm.url("a"), farm.url("b")])
        loop = px.service.loop
        assert loop is not None and loop.ages is not None
        ages = loop.ages
        feeds = px.service.runtime.feeds
        a, b = (feeds.by_id[i] for i in ids)

        async def dated() -> bool:
            return len(ages) == 2

        await eventually(dated, what="both feeds' documents dated by the age model")
        # The farm dates its backlog years back: the newest publication is long before the probes.
        newest = ages.age(a.resource)
        assert newest is not None and a.last_success is not None and newest < a.last_success
        # Past the horizon (64 chronons of age) a feed is read at its mean: no shape.
        assert ages.shape(a.resource, a.last_success) is None

        # A publication the next probe dates: the feed's age restarts there.
        farm.publish("a", title="fresh")

        async def restarted() -> bool:
            at = ages.age(a.resource)
            return at is not None and at > newest

        await eventually(restarted, what="the fresh entry dated by the age model")
        latest = ages.age(a.resource)
        assert latest is not None and a.last_success is not None and latest <= a.last_success
        assert ages.shape(a.resource, latest + 1) is not None

        r = await px.client.delete(f"/api/v1/profiles/{profile}", headers=px.auth)
        assert r.status_code == 204, r.text
        r = await px.client.delete(f"/api/v1/feeds/{ids[1]}", headers=px.auth)
        assert r.status_code == 204, r.text

        async def forgotten() -> bool:
            return ages.age(b.resource) is None

        await eventually(forgotten, what="the deleted feed's age dropped")
        assert ages.age(a.resource) is not None and len(ages) == 1
