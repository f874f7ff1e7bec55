"""The ordered writer on both backends: steps land in order, batched, and vanished profiles are skipped."""

from __future__ import annotations

import contextlib
import datetime as dt
import tracemalloc
from collections.abc import AsyncIterator, Callable
from typing import cast

import pytest
from sqlalchemy import func, select

from proxy.errors import StorageError
from proxy.service._persist import (
    AddCei,
    AddEi,
    Captured,
    ChrononRow,
    ProbeWrite,
    Resolved,
    RuleStates,
    Seal,
    Step,
    Writer,
    batch_bytes,
)
from proxy.service.metrics import ServiceMetrics
from proxy.store import FeedUpdate, NewEi, NewEntry, ProbeInput, ProbeRecord, RuleInput, Store
from proxy.store._models import CaptureRow, CeiRow, EiRow, EntryRow, NotificationEventRow

NOW = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


async def _setup(store: Store) -> tuple[int, list[int], int, int]:
    user, _ = await store.create_user("u")
    feeds = [(await store.register_feed_for(user, f"http://127.0.0.1:9/{i}.xml"))[0].feed.id
             for i in range(2)]
    profile = await store.create_profile(user, "p", [RuleInput("r", {"x": 1}, tuple(feeds))])
    return user, feeds, profile.id, profile.rules[0].id


async def test_steps_are_written_in_order_with_one_probe_transaction(store: Store) -> None:
    user, (a, b), pid, rid = await _setup(store)
    writer = Writer(store, ServiceMetrics())
    writer.start()
    records: list[ProbeRecord | None] = []
    writer.submit([
        AddCei("r:0", pid, rid, 3, (NewEi(0, a, 3, 5),), sealed=False),
        AddCei("r:1", pid, rid, 3, (NewEi(0, a, 3, 5), NewEi(1, b, 3, 9)), sealed=True),
        RuleStates(((rid, {"seq": 1}),)),
    ])
    writer.submit([
        AddEi("r:0", NewEi(1, b, 4, 8, reveal=4), seal=True),
        Captured("r:1", 1, 4),  # by a probe of b recorded before the restart, say
        ProbeWrite(
            probe=ProbeInput(feed_id=a, started_at=NOW, outcome="ok", finished_at=NOW, chronon=4),
            entries=(NewEntry("e1", title="Oil"),),
            captures=(Captured("r:0", 0, 4), Captured("r:1", 0, 4)),
            resolved=(Resolved("r:1", "captured", 4),),
            feed_update=FeedUpdate(probed_at=NOW, outcome="ok", update_validators=True, etag='"v1"'),
            done=records.append,
        ),
        RuleStates(((rid, {"seq": 2}),)),
        ChrononRow(4, NOW, budget=2, used=1, captured=1, missed=0, jitter=0.001),
    ])
    await writer.stop()
    ceis = {c.id: c for c in await store.list_ceis(user, pid)}
    assert ceis["r:1"].state == "captured"
    assert [(e.state, e.captured_chronon) for e in ceis["r:1"].eis] == [("captured", 4), ("captured", 4)]
    assert ceis["r:0"].sealed and ceis["r:0"].state == "pending"
    assert [(e.ordinal, e.feed_id, e.state, e.reveal) for e in ceis["r:0"].eis] == [
        (0, a, "captured", None), (1, b, "pending", 4)]
    (record,) = records
    assert record is not None and record.new_identities == ("e1",)
    assert len(record.captured_ei_ids) == 2
    assert (await store.get_feed(a)).etag == '"v1"'
    assert (await store.load_rule_states())[rid] == {"seq": 2}  # the latest state wins
    summary = await store.metrics_summary(user)
    assert (summary.budget_used, summary.budget_total) == (1, 2)


async def test_a_deleted_profile_skips_its_steps_and_the_writer_goes_on(store: Store) -> None:
    user, (a, _), pid, rid = await _setup(store)
    other = await store.create_profile(user, "q", [RuleInput("r", {"y": 2}, (a,))])
    await store.delete_profile(user, pid)
    writer = Writer(store, ServiceMetrics())
    writer.start()
    done: list[ProbeRecord | None] = []
    writer.submit([
        AddCei("gone:0", pid, rid, 1, (NewEi(0, a, 1, 2),), sealed=True),
        AddCei("kept:0", other.id, other.rules[0].id, 1, (NewEi(0, a, 1, 2),), sealed=True),
        Seal("gone:0"),
        Resolved("gone:0", "missed", 2),
        RuleStates(((rid, {"s": 1}), (other.rules[0].id, {"s": 2}))),
        ProbeWrite(
            probe=ProbeInput(feed_id=a, started_at=NOW, outcome="not_modified", chronon=2),
            entries=(), captures=(Captured("kept:0", 0, 2),), resolved=(),
            feed_update=FeedUpdate(probed_at=NOW, outcome="not_modified"), done=done.append,
        ),
        ProbeWrite(
            probe=ProbeInput(feed_id=9999, started_at=NOW, outcome="ok"),  # feed deleted meanwhile
            entries=(), captures=(), resolved=(),
            feed_update=FeedUpdate(probed_at=NOW, outcome="ok"), done=done.append,
        ),
        Resolved("kept:0", "missed", 2),
    ])
    await writer.stop()
    (kept,) = await store.list_ceis(user, other.id)
    assert kept.id == "kept:0" and kept.state == "missed"
    assert (await store.load_rule_states())[other.rules[0].id] == {"s": 2}
    # Grouped in one transaction, the bad probe made the group fall back to one by one: the
    # good probe is stored with its capture, the other feed is released all the same.
    assert len(done) == 2 and done[0] is not None and done[1] is None
    (probe,) = await store.list_probes(a)
    assert probe.outcome == "not_modified" and probe.chronon == 2
    assert kept.eis[0].state == "captured" and kept.eis[0].captured_probe_id == probe.id


async def test_add_ceis_skips_vanished_profiles_and_returns_ei_ids(store: Store) -> None:
    user, (a, b), pid, rid = await _setup(store)
    ids = await store.add_ceis([
        ("c:0", pid, rid, 0, True, [NewEi(0, a, 0, 1), NewEi(1, b, 0, 2)]),
        ("c:1", 424242, None, 0, True, [NewEi(0, a, 0, 1)]),
    ])
    assert set(ids) == {"c:0"} and set(ids["c:0"]) == {0, 1}
    (cei,) = await store.list_ceis(user, pid)
    assert {e.ordinal: e.id for e in cei.eis} == ids["c:0"]
    assert await store.save_rule_states([(rid, {"k": 1}), (777, {"k": 2})]) == 1


async def test_rule_states_round_trip_whatever_their_number(store: Store) -> None:
    # SQLite stores them in one statement from a JSON document: what comes back must be what
    # went in (nested lists, null, floats, text beyond ASCII), for thousands of rules at once.
    *_, rid = await _setup(store)
    state = {"version": 3, "kind": "watch", "cei_id": None, "alive": True, "seq": 7,
             "covered": [[1, 2], [3, -4]], "since": 12.5, "note": "café \u2603 \"q\""}
    assert await store.save_rule_states([(rid, state)]) == 1
    assert (await store.load_rule_states())[rid] == state
    many = [(rid, {**state, "seq": 1}), *((10_000_000 + n, state) for n in range(5_000))]
    assert await store.save_rule_states(many) == 1  # the others are not rules (deleted)
    assert (await store.load_rule_states())[rid]["seq"] == 1


async def test_add_eis_and_seals_in_one_transaction(store: Store) -> None:
    user, (a, b), pid, rid = await _setup(store)
    await store.add_ceis([("c:0", pid, rid, 0, False, [NewEi(0, a, 0, 1)])])
    ids = await store.add_eis([("c:0", NewEi(1, b, 1, 4, reveal=1)), ("gone:0", NewEi(0, a, 0, 1))],
                              seal=["c:0", "gone:0"])
    assert set(ids) == {"c:0"} and set(ids["c:0"]) == {0, 1}
    (cei,) = await store.list_ceis(user, pid)
    assert cei.sealed and [(e.ordinal, e.feed_id, e.reveal) for e in cei.eis] == [(0, a, None), (1, b, 1)]


async def test_a_duplicate_cei_id_loses_only_itself(store: Store) -> None:
    user, (a, _), pid, rid = await _setup(store)
    await store.add_ceis([("dup:0", pid, rid, 0, True, [NewEi(0, a, 0, 1)])])
    writer = Writer(store, ServiceMetrics())
    writer.start()
    writer.submit([AddCei("dup:0", pid, rid, 5, (NewEi(0, a, 5, 6),), sealed=True),
                   AddCei("new:0", pid, rid, 5, (NewEi(0, a, 5, 6),), sealed=True)])
    await writer.stop()
    ceis = {c.id: c for c in await store.list_ceis(user, pid)}
    assert set(ceis) == {"dup:0", "new:0"} and ceis["dup:0"].release == 0


async def test_a_refused_write_is_counted_not_silent(store: Store) -> None:
    """Issue 22: two loops on one database wrote 'CEI already exists' and no metric moved."""
    _user, (a, _b), pid, rid = await _setup(store)
    metrics = ServiceMetrics()
    writer = Writer(store, metrics)
    writer.start()
    writer.submit([AddCei("r:0", pid, rid, 3, (NewEi(0, a, 3, 5),), sealed=True)])
    writer.submit([AddCei("r:0", pid, rid, 4, (NewEi(0, a, 4, 6),), sealed=True)])  # the same id again
    await writer.stop()
    assert metrics.registry.get_sample_value("proxy_writes_refused_total") == 1


class _LostCommitAnswer(Store):
    """A store whose first committed unit loses its answer, as when the connection drops
    between PostgreSQL's commit and its reply to it (the commit happened)."""

    lost = False

    @contextlib.asynccontextmanager
    async def unit(self) -> AsyncIterator[None]:
        async with super().unit():
            yield
        if not self.lost:
            self.lost = True
            raise StorageError("connection was closed in the middle of operation",
                               unavailable=True)


async def test_a_round_whose_commit_answer_was_lost_is_not_written_twice(database_url: str) -> None:
    async with _LostCommitAnswer.from_url(database_url) as store:
        user, (a, _), pid, rid = await _setup(store)
        metrics = ServiceMetrics()
        writer = Writer(store, metrics)
        writer.start()
        done: list[ProbeRecord | None] = []
        writer.submit([
            AddCei("r:0", pid, rid, 3, (NewEi(0, a, 3, 5),), sealed=True),
            ProbeWrite(
                probe=ProbeInput(feed_id=a, started_at=NOW, outcome="ok", chronon=4),
                entries=(NewEntry("e1"),), captures=(Captured("r:0", 0, 4),),
                resolved=(Resolved("r:0", "captured", 4),),
                feed_update=FeedUpdate(probed_at=NOW, outcome="ok"), done=done.append),
        ])
        await writer.stop()
        assert store.lost
        # The round was found committed (its token): not written again, nothing refused.
        assert metrics.registry.get_sample_value("proxy_writes_refused_total") == 0
        assert len(await store.list_probes(a)) == 1
        (cei,) = await store.list_ceis(user, pid)
        assert cei.state == "captured" and cei.eis[0].captured_probe_id is not None
        assert len(done) == 1 and done[0] is not None


def _probe_with(entries: int, captures: int) -> ProbeWrite:
    return ProbeWrite(
        probe=ProbeInput(feed_id=1, started_at=NOW, outcome="ok", finished_at=NOW, chronon=4),
        entries=tuple(NewEntry(f"https://example.org/{i}", title=f"Title {i} " * 4,
                               link=f"https://example.org/{i}", summary="word " * 80)
                      for i in range(entries)),
        captures=tuple(Captured(f"r1:{i}", 0, 4) for i in range(captures)),
        resolved=tuple(Resolved(f"r1:{i}", "captured", 4) for i in range(captures)),
        feed_update=FeedUpdate(probed_at=NOW, outcome="ok", etag='"v"'),
    )


@pytest.mark.parametrize(("make", "what"), [
    (lambda i: [AddCei(f"r{i}:0", i, i, 3, (NewEi(0, 1, 3, 5), NewEi(1, 2, 3, 9)), sealed=False)],
     "a CEI opened"),
    (lambda i: [Resolved(f"r{i}:0", "missed", 9), ChrononRow(i, NOW, 10, 10, 0, 1, 0.0)],
     "a resolution and a chronon"),
    (lambda i: [RuleStates(((i, {"seq": i, "due": i + 10}),))], "a rule's state"),
    (lambda i: [_probe_with(0, 0)], "a 304"),
    (lambda i: [_probe_with(3, 10)], "a probe with entries and captures"),
])
def test_a_batch_size_estimate_is_within_a_factor_two_of_the_memory_it_holds(
    make: Callable[[int], list[Step]], what: str
) -> None:
    tracemalloc.start()
    try:
        batches = [make(i + 10_000) for i in range(500)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    estimated = sum(batch_bytes(b) for b in batches)
    assert 0.5 <= estimated / held <= 2.0, (what, estimated, held)


async def test_the_byte_bound_fills_the_writer_before_the_batch_bound(store: Store) -> None:
    writer = Writer(store, ServiceMetrics(), max_batches=10_000, max_bytes=4_000)
    for t in range(100):  # not started: nothing is written, as while the database is away
        writer.submit([ChrononRow(t, NOW, budget=2, used=1, captured=0, missed=0, jitter=0.0)])
        if writer.full:
            break
    assert writer.full and writer.backlog < 100
    assert writer.backlog_bytes == sum(batch_bytes([ChrononRow(t, NOW, 2, 1, 0, 0, 0.0)])
                                       for t in range(writer.backlog))
    writer.start()
    await writer.stop()
    assert (writer.backlog, writer.backlog_bytes, writer.full) == (0, 0, False)
    assert await store.last_chronon() == t


async def test_a_round_of_many_rows_writes_exactly_them_in_order_and_replays_change_nothing(
    store: Store,
) -> None:
    """One round above the 500-row chunks: 600 CEIs opened, grown, captured, resolved, each
    kind of row written by a handful of statements; then the same captures and resolutions
    again (a replay after a restart) change nothing and add no notification."""
    _, (a, b), pid, rid = await _setup(store)
    n = 600
    records: list[ProbeRecord | None] = []
    opened = [AddCei(f"r{rid}:{i}", pid, rid, 3, (NewEi(0, a, 3, 9),), sealed=False)
              for i in range(n)]
    grown = [AddEi(f"r{rid}:{i}", NewEi(1, b, 3, 9), seal=True) for i in range(0, n, 2)]
    sealed = [Seal(f"r{rid}:{i}") for i in range(1, n, 2)]
    # Captured by one probe of feed a: every CEI's EI 0; the odd CEIs (one EI) are then complete.
    captured_ids = [f"r{rid}:{i}" for i in range(1, n, 2)]
    probe = ProbeWrite(
        probe=ProbeInput(feed_id=a, started_at=NOW, outcome="ok", finished_at=NOW, chronon=4),
        entries=tuple(NewEntry(f"e{i}", title=f"t{i}") for i in range(n)),
        captures=tuple(Captured(f"r{rid}:{i}", 0, 4) for i in range(n)),
        resolved=tuple(Resolved(c, "captured", 4) for c in captured_ids),
        feed_update=FeedUpdate(probed_at=NOW, outcome="ok"),
        done=records.append,
    )
    # Later, the even CEIs (EI 1 on feed b never captured) are missed, newest first.
    missed_ids = [f"r{rid}:{i}" for i in reversed(range(0, n, 2))]
    missed = [Resolved(c, "missed", 10) for c in missed_ids]
    writer = Writer(store, ServiceMetrics())
    for batch in ([*opened, RuleStates(((rid, {"seq": n}),))], grown, sealed, [probe],
                  missed, [ChrononRow(10, NOW, budget=2, used=1, captured=300, missed=300,
                                      jitter=0.0)]):
        writer.submit(batch)
    writer.start()  # everything queued before: one round
    await writer.stop()
    assert writer.written > 0 and writer.metrics.writes_refused._value.get() == 0

    async def rows() -> tuple[dict[str, tuple[str, bool, bool]], list[tuple[str, int, str]], int,
                              list[str], int]:
        async with store.engine.connect() as conn:
            ceis = {r.id: (r.state, r.sealed, r.fired) for r in await conn.execute(
                select(CeiRow.id, CeiRow.state, CeiRow.sealed, CeiRow.fired))}
            eis = sorted((r.cei_id, r.ordinal, r.state) for r in await conn.execute(
                select(EiRow.cei_id, EiRow.ordinal, EiRow.state)))
            captures = (await conn.execute(select(func.count()).select_from(CaptureRow))).scalar_one()
            events = list((await conn.execute(
                select(NotificationEventRow.cei_id).order_by(NotificationEventRow.id))).scalars())
            entries = (await conn.execute(select(func.count()).select_from(EntryRow))).scalar_one()
        return ceis, eis, captures, events, entries

    ceis, eis, captures, events, entries = await rows()
    assert len(ceis) == n and entries == n and captures == n
    assert all(ceis[c] == ("captured", True, False) for c in captured_ids)
    assert all(ceis[c] == ("missed", True, True) for c in missed_ids)
    assert len(eis) == n + n // 2
    assert {(c, o): s for c, o, s in eis} == {
        **{(f"r{rid}:{i}", 0): "captured" for i in range(n)},
        **{(f"r{rid}:{i}", 1): "missed" for i in range(0, n, 2)},
    }
    # One notification per resolution, in the order the resolutions were decided.
    assert events == captured_ids + missed_ids
    (record,) = records
    assert record is not None and len(record.captured_ei_ids) == n and len(record.new_identities) == n

    # The replaying writer knows every EI's id (so its captures are really written again).
    known: dict[str, dict[int, int]] = {}
    async with store.engine.connect() as conn:
        for row in await conn.execute(select(EiRow.id, EiRow.cei_id, EiRow.ordinal)):
            known.setdefault(row.cei_id, {})[row.ordinal] = row.id
    replay = Writer(store, ServiceMetrics(), ei_ids=known)
    replay.submit([*(Captured(f"r{rid}:{i}", 0, 4) for i in range(n)),
                   *(Resolved(c, "captured", 4) for c in captured_ids), *missed])
    replay.start()
    await replay.stop()
    assert replay.metrics.writes_refused._value.get() == 0
    assert await rows() == (ceis, eis, captures, events, entries)


@pytest.mark.parametrize(
    ("rounds", "limit"),
    [
        ([], 2000),  # nothing learnt yet: the step limit alone
        ([(1000, 2.0)], 500),  # 500 steps a second, 1 s rounds
        ([(1000, 2.0), (1000, 1.0)], 750),  # the rate is averaged over the last rounds
        ([(1000, 100.0)], 50),  # never fewer than MIN_ROUND_STEPS
        ([(100_000, 1.0)], 2000),  # never more than the step limit
        ([(10, 10.0)], 2000),  # a round below MIN_ROUND_STEPS teaches nothing
    ],
)
def test_rounds_sized_to_hold_sqlites_lock_about_round_seconds(
    rounds: list[tuple[int, float]], limit: int,
) -> None:
    writer = Writer(cast(Store, None), ServiceMetrics(), round_seconds=1.0)
    for steps, seconds in rounds:
        writer._learn_rate(steps, seconds)
    assert writer._round_steps() == limit
    unsized = Writer(cast(Store, None), ServiceMetrics())  # PostgreSQL: no time bound
    for steps, seconds in rounds:
        unsized._learn_rate(steps, seconds)
    assert unsized._round_steps() == 2000
