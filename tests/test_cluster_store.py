"""Fencing and heartbeats in the store (issue 21), on SQLite and PostgreSQL.

A task fenced to a lease epoch writes only while that epoch is current: after a
takeover its writes fail with ``FencedError`` and store nothing, while the new
holder's fenced writes go through.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from sqlalchemy import text

from proxy.errors import FencedError, StandbyError
from proxy.service._persist import ChrononRow, Writer
from proxy.service.metrics import ServiceMetrics
from proxy.store import Lease, Store, fence_writes
from proxy.store._cluster import lead_epoch

T0 = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)


async def _chronon_as(store: Store, lease: str, holder: str, epoch: int, chronon: int) -> None:
    """Write one chronon row from a task fenced to ``(holder, epoch)``."""

    async def write() -> None:
        fence_writes(lease, holder, epoch)
        await store.record_chronon_metrics(
            chronon, started_at=T0, budget=5, used=1, captured_ceis=0, missed_ceis=0,
            tick_jitter_seconds=0.0)

    await asyncio.create_task(write())


async def test_a_stale_epoch_is_refused_and_stores_nothing(store: Store) -> None:
    old = await store.acquire_lease("loop", "old", now=T0, ttl=5)
    assert old is not None
    await _chronon_as(store, "loop", "old", old.epoch, 1)  # current: accepted
    new = await store.acquire_lease("loop", "new", now=T0 + dt.timedelta(seconds=6), ttl=5)
    assert new is not None and new.epoch == old.epoch + 1

    with pytest.raises(FencedError, match=r"epoch 1 of old is no longer current \(held by new at epoch 2\)") as err:
        await _chronon_as(store, "loop", "old", old.epoch, 2)
    assert isinstance(err.value, StandbyError) and err.value.epoch == 1
    assert await store.last_chronon() == 1  # the late write left nothing

    await _chronon_as(store, "loop", "new", new.epoch, 2)
    assert await store.last_chronon() == 2


async def test_a_released_lease_fences_its_last_holder_too(store: Store) -> None:
    lease = await store.acquire_lease("loop", "a", now=T0, ttl=5)
    assert lease is not None
    assert await store.release_lease(lease, now=T0)
    with pytest.raises(FencedError, match="released at epoch 1"):
        await _chronon_as(store, "loop", "a", lease.epoch, 1)
    with pytest.raises(FencedError, match="lease not found"):
        await _chronon_as(store, "other-lease", "a", 1, 1)


async def test_the_fence_stays_in_the_task_that_set_it(store: Store) -> None:
    lease = await store.acquire_lease("loop", "a", now=T0, ttl=5)
    assert lease is not None
    with pytest.raises(FencedError):
        await _chronon_as(store, "loop", "a", lease.epoch + 7, 1)
    # This (unfenced) context still writes.
    await store.record_chronon_metrics(3, started_at=T0, budget=5, used=1, captured_ceis=0,
                                       missed_ceis=0, tick_jitter_seconds=0.0)
    assert await store.last_chronon() == 3


async def test_a_deposed_writer_counts_its_refused_round_and_writes_nothing(store: Store) -> None:
    lease = await store.acquire_lease("loop", "old", now=T0, ttl=5)
    assert lease is not None
    metrics = ServiceMetrics()
    writer = Writer(store, metrics, fence=lease)
    writer.start()
    try:
        writer.submit([ChrononRow(1, T0, 5, 2, 0, 0, 0.0)])
        await writer.flush()
        assert await store.last_chronon() == 1
        taken = await store.acquire_lease("loop", "new", now=T0 + dt.timedelta(seconds=9), ttl=5)
        assert taken is not None
        writer.submit([ChrononRow(2, T0, 5, 2, 0, 0, 0.0)])
        await writer.flush()
    finally:
        await writer.stop()
    assert await store.last_chronon() == 1
    assert metrics.registry.get_sample_value("proxy_writes_refused_total") == 1


async def test_heartbeats_list_live_processes_and_age_out(store: Store) -> None:
    await store.heartbeat("sched-1", role="scheduler", host="h1", port=8001, leads=True, epoch=3,
                          now=T0, started_at=T0)
    await store.heartbeat("worker-1", role="worker", host="h2", port=8002, leads=False,
                          epoch=None, now=T0, started_at=T0)
    later = T0 + dt.timedelta(seconds=30)
    await store.heartbeat("sched-1", role="scheduler", host="h1", port=8001, leads=False,
                          epoch=None, now=later, started_at=T0)

    every = await store.live_processes(T0, lease="loop", now=later)
    assert [(p.id, p.role, p.port, p.leads) for p in every] == [
        ("sched-1", "scheduler", 8001, False), ("worker-1", "worker", 8002, False)]
    assert every[0].heartbeat_at == later and every[0].started_at == T0
    recent = await store.live_processes(T0 + dt.timedelta(seconds=10), lease="loop", now=later)
    assert [p.id for p in recent] == ["sched-1"]

    assert await store.forget_process("", older_than=T0 + dt.timedelta(seconds=10)) == 1
    assert await store.forget_process("sched-1") == 1
    assert await store.live_processes(T0, lease="loop", now=later) == []


_LIVE = Lease("loop", "b", 7, T0, T0 + dt.timedelta(seconds=10))


@pytest.mark.parametrize(("holder", "claimed", "lease", "at", "leads"), [
    ("b", None, _LIVE, 0, 7),     # the lease's holder leads, before its heartbeat claims it
    ("b", 7, _LIVE, 0, 7),
    ("a", 6, _LIVE, 0, None),     # a killed leader's last claim: the lease moved on
    ("a", 7, _LIVE, 0, None),     # even claiming the current epoch: the holder decides
    ("b", 7, _LIVE, 10, None),    # expired: nobody leads until a standby takes it
    ("b", 7, Lease("loop", None, 7, T0, T0), 0, None),  # released
    ("b", 7, None, 0, None),      # never taken
    (None, 7, _LIVE, 0, 7),       # a row from before migration 0008: its epoch decides
    (None, 6, _LIVE, 0, None),
    (None, None, _LIVE, 0, None),  # a worker
])
def test_the_lease_row_says_who_leads(
    holder: str | None, claimed: int | None, lease: Lease | None, at: int, leads: int | None
) -> None:
    assert lead_epoch(holder, claimed, lease, T0 + dt.timedelta(seconds=at)) == leads


async def test_a_killed_leaders_last_claim_is_not_listed_beside_its_successor(store: Store) -> None:
    """The lease moves from a to b; a was killed and its row still claims epoch 1."""
    a = await store.acquire_lease("loop", "holder-a", now=T0, ttl=5)
    assert a is not None
    for pid, holder, epoch in (("a", "holder-a", 1), ("b", "holder-b", None)):
        await store.heartbeat(pid, role="scheduler", host=pid, port=8000, leads=epoch is not None,
                              epoch=epoch, now=T0, started_at=T0, holder=holder)

    async def leads(at: dt.datetime) -> dict[str, int | None]:
        return {p.id: p.epoch for p in await store.live_processes(T0, lease="loop", now=at)
                if p.leads}

    assert await leads(T0) == {"a": 1}
    assert await leads(T0 + dt.timedelta(seconds=6)) == {}  # expired, not yet taken
    b = await store.acquire_lease("loop", "holder-b", now=T0 + dt.timedelta(seconds=6), ttl=5)
    assert b is not None and b.epoch == 2
    assert await leads(T0 + dt.timedelta(seconds=6)) == {"b": 2}


@pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
async def test_a_fenced_round_delays_a_takeover_but_not_its_holders_renewals(store: Store) -> None:
    """PostgreSQL: the fence is an advisory lock, not a lock on the lease row, so a long round
    never costs its process the lease, while a takeover still waits for the round to end."""
    lease = await store.acquire_lease("loop", "old", now=T0, ttl=5)
    assert lease is not None
    inside, finish = asyncio.Event(), asyncio.Event()

    async def long_round() -> None:
        fence_writes("loop", "old", lease.epoch)
        async with store.unit():
            await store.record_chronon_metrics(1, started_at=T0, budget=5, used=1)
            inside.set()
            await finish.wait()

    round_task = asyncio.create_task(long_round())
    await inside.wait()
    # The bound only stops a hang; the renewal must not wait for the round at all.
    renewed = await asyncio.wait_for(
        store.renew_lease(lease, now=T0 + dt.timedelta(seconds=1), ttl=5), 30)
    assert renewed is not None and renewed.epoch == lease.epoch
    takeover = asyncio.create_task(
        store.acquire_lease("loop", "new", now=T0 + dt.timedelta(seconds=60), ttl=5))
    async with store.engine.connect() as conn:
        for _ in range(600):  # until the takeover waits for the fence lock (a hang guard, 30 s)
            waiting = (await conn.execute(text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ))).scalar()
            await conn.rollback()
            if waiting:
                break
            await asyncio.sleep(0.05)
    assert waiting == 1 and not takeover.done()
    finish.set()
    await round_task
    new = await takeover
    assert new is not None and new.epoch == lease.epoch + 1
    assert await store.last_chronon() == 1  # the round committed before the takeover
    with pytest.raises(FencedError):
        await _chronon_as(store, "loop", "old", lease.epoch, 2)
    assert await store.last_chronon() == 1
