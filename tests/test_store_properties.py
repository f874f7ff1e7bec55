"""Invariants of the store under random probe sequences (Hypothesis), on both backends."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.store import NewEntry, ProbeInput, Store

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
_feed_numbers = itertools.count()

# A probe sees a window of identities; identities may repeat inside one probe,
# across probes, and some are longer than the indexed column (stored hashed).
identity = st.one_of(
    st.text(alphabet="abcdef", min_size=1, max_size=3),
    st.builds(lambda s: "L" * 1100 + s, st.text(alphabet="xy", max_size=2)),
)
probes = st.lists(st.lists(identity, max_size=8), min_size=1, max_size=5)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=probes)
def test_every_identity_is_new_exactly_once(database_url: str, batches: list[list[str]]) -> None:
    async def scenario() -> None:
        async with Store.from_url(database_url) as store:
            # A fresh feed per example: examples share the database.
            feed, _ = await store.register_feed(f"http://example.com/{next(_feed_numbers)}")
            seen: set[str] = set()
            for i, batch in enumerate(batches):
                record = await store.record_probe(
                    ProbeInput(feed.id, T0 + dt.timedelta(minutes=i), "ok"),
                    [NewEntry(identity) for identity in batch],
                )
                expected_new = list(dict.fromkeys(x for x in batch if x not in seen))
                assert list(record.new_identities) == expected_new
                seen.update(batch)
                everything = {x for b in batches for x in b} | {"never-seen"}
                assert await store.known_identities(feed.id, everything) == seen
            probes_stored = await store.list_probes(feed.id, limit=100)
            assert sum(p.new_entries for p in probes_stored) == len(seen)
            assert store.engine.pool.checkedout() == 0

    asyncio.run(scenario())
