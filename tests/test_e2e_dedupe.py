"""End to end (issue 43, dedupe): one entry fires a rule at most once.

An entry is known by its guid (else its link, else a hash of its text: proxy/feeds/identity.py),
and what a feed's probe calls new is what it did not know. So an entry that already fired an
alert does not fire it again when the publisher edits its text or date, when the feed serves
its entries in another order, or when the service restarts on the same database. Each case
waits for fresh probes of the changed document before it counts, and a genuinely new entry at
the end must fire, so the "nothing more fired" checks cannot pass by the probes never coming.

(The same entry arriving by push and by probe is tested with WebSub, which brings entries by
push; a ping carries none.)
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from proxy.farm import FeedFarm
from tests.test_e2e_support import Running, e2e_settings, eventually, running

pytestmark = pytest.mark.slow

WITHIN = 60.0


async def _fired(px: Running, profile: int) -> list[dict[str, Any]]:
    r = await px.get(f"/api/v1/profiles/{profile}/ceis", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return [c for c in r.json()["items"] if c["fired"]]


async def _probed_again(farm: FeedFarm, times: int = 3) -> None:
    """Wait until the proxy has fetched mish ``times`` more times (each sees the new version)."""
    seen = farm.stats("mish").requests

    async def fetched() -> bool | None:
        return True if farm.stats("mish").requests >= seen + times else None

    await eventually(fetched, within=WITHIN, what=f"{times} more probes of mish")


async def _run(database_url: str) -> None:
    settings = e2e_settings(database_url)
    async with FeedFarm(["mish"]) as farm:
        async with running(settings) as px:
            r = await px.post("/api/v1/feeds", {"url": farm.url("mish")})
            assert r.status_code == 201, r.text
            mish = r.json()["id"]
            r = await px.post("/api/v1/profiles", {"name": "p", "rules": [{
                "name": "oil", "trigger": {"feed": mish, "on": "update", "slack": "2s",
                                           "when": {"contains": ["oil"]}}}]})
            assert r.status_code == 201, r.text
            pid = r.json()["id"]
            await _probed_again(farm, 2)  # the baseline

            oil = farm.publish("mish", title="Oil jumps", summary="crude at $90")

            async def one() -> list[dict[str, Any]] | None:
                return await _fired(px, pid) or None

            assert len(await eventually(one, within=WITHIN, what="the alert firing")) == 1

            # The publisher fixes the title and corrects the date: same guid, not new.
            farm.edit("mish", oil, title="Oil jumps (updated)", summary="crude oil at $91",
                      published=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5))
            await _probed_again(farm)
            assert len(await _fired(px, pid)) == 1, "an edited entry fired the rule again"

            # The feed serves its entries oldest first: nothing is new.
            farm.reverse("mish")
            await _probed_again(farm)
            assert len(await _fired(px, pid)) == 1, "a re-ordered feed fired the rule again"

        # A restart on the same database: the known entries are stored, not re-learnt.
        async with running(settings) as px:
            await _probed_again(farm)
            assert len(await _fired(px, pid)) == 1, "the restart fired the rule again"

            # A new entry still fires: the probes above were able to.
            farm.publish("mish", title="Oil falls", summary="crude at $70")

            async def two() -> list[dict[str, Any]] | None:
                fired = await _fired(px, pid)
                return fired if len(fired) >= 2 else None

            assert len(await eventually(two, within=WITHIN, what="the second entry firing")) == 2


async def test_dedupe_sqlite(sqlite_url: str) -> None:
    await _run(sqlite_url)


@pytest.mark.postgres
async def test_dedupe_postgres(fresh_postgres_url: str) -> None:
    await _run(fresh_postgres_url)
