"""The chronon loop's lease: the store's SQL on both backends, and the :class:`Leader` keeping it.

Store tests pass ``now`` explicitly (the lease's clock is the caller's), so
expiry needs no sleeping. Leader tests run for real with TTLs of a few tenths
of a second.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest

from proxy.aio import cancel_and_wait
from proxy.errors import StorageError
from proxy.service.leader import LOOP_LEASE, Leader, LeaseTiming
from proxy.store import Lease, Store

T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)
TTL = 30.0


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


# ---------------------------------------------------------------------------- store


async def test_first_acquisition_gets_epoch_one_and_is_stored(store: Store) -> None:
    assert await store.current_lease(LOOP_LEASE) is None
    lease = await store.acquire_lease(LOOP_LEASE, "a", now=T0, ttl=TTL)
    assert lease == Lease(LOOP_LEASE, "a", 1, T0, at(TTL))
    assert await store.current_lease(LOOP_LEASE) == lease
    assert lease.live(at(TTL - 1)) and not lease.live(at(TTL))


async def test_a_live_lease_refuses_everyone_else_and_its_holder_renews_it(store: Store) -> None:
    a = await store.acquire_lease(LOOP_LEASE, "a", now=T0, ttl=TTL)
    assert a is not None
    assert await store.acquire_lease(LOOP_LEASE, "b", now=at(1), ttl=TTL) is None
    assert await store.acquire_lease(LOOP_LEASE, "b", now=at(TTL - 0.001), ttl=TTL) is None
    # Acquiring is not renewing: the holder itself is refused while its lease is live.
    assert await store.acquire_lease(LOOP_LEASE, "a", now=at(2), ttl=TTL) is None
    renewed = await store.renew_lease(a, now=at(20), ttl=TTL)
    assert renewed == Lease(LOOP_LEASE, "a", 1, T0, at(20 + TTL))
    # Live again thanks to the renewal, past the first expiry.
    assert await store.acquire_lease(LOOP_LEASE, "b", now=at(TTL + 1), ttl=TTL) is None
    current = await store.current_lease(LOOP_LEASE)
    assert current is not None and (current.holder, current.epoch) == ("a", 1)


async def test_takeover_after_expiry_bumps_the_epoch_and_fences_the_old_holder(store: Store) -> None:
    a = await store.acquire_lease(LOOP_LEASE, "a", now=T0, ttl=TTL)
    assert a is not None
    b = await store.acquire_lease(LOOP_LEASE, "b", now=at(TTL), ttl=TTL)
    assert b == Lease(LOOP_LEASE, "b", 2, at(TTL), at(2 * TTL))
    # The old holder's renewal and release change nothing and say so.
    assert await store.renew_lease(a, now=at(TTL + 1), ttl=TTL) is None
    assert await store.release_lease(a, now=at(TTL + 1)) is False
    assert await store.current_lease(LOOP_LEASE) == b
    c = await store.acquire_lease(LOOP_LEASE, "a", now=at(3 * TTL), ttl=TTL)
    assert c is not None and c.epoch == 3  # the same name again: a new epoch all the same


async def test_release_lets_another_acquire_at_once(store: Store) -> None:
    a = await store.acquire_lease(LOOP_LEASE, "a", now=T0, ttl=TTL)
    assert a is not None
    assert await store.release_lease(a, now=at(1)) is True
    released = await store.current_lease(LOOP_LEASE)
    assert released is not None and released.holder is None and released.epoch == 1
    assert not released.live(at(1))
    b = await store.acquire_lease(LOOP_LEASE, "b", now=at(1), ttl=TTL)
    assert b is not None and b.epoch == 2
    assert await store.renew_lease(a, now=at(2), ttl=TTL) is None


async def test_an_expired_lease_nobody_took_can_still_be_renewed(store: Store) -> None:
    # No other epoch came between: the holder decides whether it still trusts it (Leader does not).
    a = await store.acquire_lease(LOOP_LEASE, "a", now=T0, ttl=TTL)
    assert a is not None
    renewed = await store.renew_lease(a, now=at(TTL + 5), ttl=TTL)
    assert renewed is not None and renewed.epoch == 1 and renewed.expires_at == at(2 * TTL + 5)


async def test_leases_are_independent_by_name(store: Store) -> None:
    assert await store.acquire_lease("one", "a", now=T0, ttl=TTL) is not None
    two = await store.acquire_lease("two", "b", now=T0, ttl=TTL)
    assert two is not None and two.epoch == 1


async def test_of_many_racing_for_a_free_lease_exactly_one_wins(store: Store) -> None:
    async def race(now: dt.datetime) -> list[Lease]:
        got = await asyncio.gather(*(store.acquire_lease(LOOP_LEASE, f"h{i}", now=now, ttl=TTL)
                                     for i in range(8)))
        return [lease for lease in got if lease is not None]

    first = await race(T0)  # no row yet: INSERT … ON CONFLICT DO NOTHING
    assert len(first) == 1 and first[0].epoch == 1
    second = await race(at(TTL))  # an expired row: the conditional UPDATE
    assert len(second) == 1 and second[0].epoch == 2
    assert await store.current_lease(LOOP_LEASE) == second[0]


async def test_a_non_positive_ttl_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="TTL"):
        await store.acquire_lease(LOOP_LEASE, "a", now=T0, ttl=0)


# ---------------------------------------------------------------------------- timing


@pytest.mark.parametrize(
    ("chronon", "setting", "ttl"),
    [
        (60.0, 0.0, 120.0),  # two chronons
        (5.0, 0.0, 10.0),
        (1.0, 0.0, 10.0),  # at least 10 s
        (0.05, 0.0, 10.0),
        (60.0, 7.5, 7.5),  # the setting wins
        (0.2, 1.2, 1.2),
    ],
)
def test_lease_timing(chronon: float, setting: float, ttl: float) -> None:
    timing = LeaseTiming.of(chronon, setting)
    assert timing == LeaseTiming(ttl=ttl, renew_every=ttl / 3)


# ---------------------------------------------------------------------------- leader


class Events:
    """What a Leader reported, with monotonic times."""

    def __init__(self) -> None:
        self.elected: list[tuple[float, int]] = []
        self.deposed: list[tuple[float, str]] = []

    async def on_elected(self, lease: Lease) -> None:
        self.elected.append((time.monotonic(), lease.epoch))

    async def on_deposed(self, reason: str) -> None:
        self.deposed.append((time.monotonic(), reason))


def _leader(store: object, name: str, events: Events, ttl: float, *, patient: bool = False) -> Leader:
    return Leader(store, name, LeaseTiming.of(1.0, ttl),  # type: ignore[arg-type]
                  on_elected=events.on_elected, on_deposed=events.on_deposed, patient=patient)


async def _cancel(task: asyncio.Task[None]) -> None:
    """As the service stops its keeper: cancelled until it ends, within a deadline."""
    await asyncio.wait_for(cancel_and_wait(task), 30)


async def test_a_standby_takes_over_when_the_holder_dies_and_the_old_holder_steps_down(
    store: Store,
) -> None:
    ttl = 0.6
    ev_a, ev_b = Events(), Events()
    a, b = _leader(store, "a", ev_a, ttl), _leader(store, "b", ev_b, ttl)
    assert (await a.acquire()) is not None and a.holds()
    assert await b.acquire() is None
    assert b.seen is not None and b.seen.holder == "a" and not b.holds()
    run_a, run_b = asyncio.create_task(a.run()), asyncio.create_task(b.run())
    await asyncio.sleep(3 * ttl)  # a renews; b stays a standby well past the first TTL
    assert a.holds() and b.lease is None and ev_b.elected == [] and ev_a.deposed == []
    await _cancel(run_a)  # a "dies": it stops renewing and never releases
    died = time.monotonic()
    for _ in range(100):
        if ev_b.elected:
            break
        await asyncio.sleep(0.02)
    assert [epoch for _, epoch in ev_b.elected] == [2]
    took = ev_b.elected[0][0] - died
    assert took <= ttl + 0.5, took  # expiry + the standby's wake-up slack + scheduling
    assert b.holds()
    # a wakes up (a long GC pause, a frozen VM): its next renewal finds the lease taken.
    assert a.holds() is False  # its own deadline passed: no tick would have run meanwhile
    run_a = asyncio.create_task(a.run())
    for _ in range(100):
        if ev_a.deposed:
            break
        await asyncio.sleep(0.02)
    assert len(ev_a.deposed) == 1 and a.lease is None
    await asyncio.sleep(ttl)
    assert ev_a.elected == [] and b.holds()  # a campaigns again, as a standby
    await _cancel(run_a)
    await _cancel(run_b)
    await b.release()
    assert (await store.current_lease(LOOP_LEASE)) is not None


async def test_a_release_hands_over_at_once(store: Store) -> None:
    ttl = 30.0  # long: only the release can explain a quick takeover
    ev_a, ev_b = Events(), Events()
    a, b = _leader(store, "a", ev_a, ttl), _leader(store, "b", ev_b, ttl)
    assert await a.acquire() is not None
    assert await b.acquire() is None
    await a.release()
    assert not a.holds()
    lease = await b.acquire()
    assert lease is not None and lease.epoch == 2


class FlakyStore:
    """The store, until ``down`` is set: then every lease call fails as a lost database would."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.down = False

    def __getattr__(self, name: str) -> object:
        method = getattr(self.store, name)

        async def call(*args: object, **kwargs: object) -> object:
            if self.down:
                raise StorageError("database error (OSError): connection refused")
            return await method(*args, **kwargs)

        return call


async def test_a_holder_that_cannot_renew_steps_down_within_its_ttl(store: Store) -> None:
    ttl = 0.6
    flaky = FlakyStore(store)
    events = Events()
    a = _leader(flaky, "a", events, ttl)
    assert await a.acquire() is not None
    acquired = time.monotonic()
    task = asyncio.create_task(a.run())
    await asyncio.sleep(ttl / 2)
    flaky.down = True
    for _ in range(100):
        if events.deposed:
            break
        await asyncio.sleep(0.02)
    assert len(events.deposed) == 1 and "TTL" in events.deposed[0][1]
    # Not before its last successful renewal's TTL ran out, and not much after.
    assert acquired + ttl <= events.deposed[0][0] <= acquired + 2 * ttl
    assert not a.holds()
    flaky.down = False  # the database is back and nobody took the lease: a takes it again
    for _ in range(100):
        if events.elected:
            break
        await asyncio.sleep(0.02)
    assert [epoch for _, epoch in events.elected] == [2]
    await _cancel(task)
    await a.release()


class SlowTurnStore:
    """The store, but a renewal first waits for ``turn`` (as behind this process's own write
    round on SQLite, which holds the database's one write lock)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.turn = asyncio.Event()
        self.turn.set()

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def renew_lease(self, lease: Lease, *, now: dt.datetime, ttl: float) -> Lease | None:
        await self.turn.wait()
        return await self.store.renew_lease(lease, now=now, ttl=ttl)


@pytest.mark.parametrize("patient", [True, False])
async def test_a_patient_holder_waits_for_its_own_turn_past_the_deadline(
    store: Store, patient: bool,
) -> None:
    ttl = 0.6
    slow = SlowTurnStore(store)
    events = Events()
    a = _leader(slow, "a", events, ttl, patient=patient)
    assert await a.acquire() is not None
    task = asyncio.create_task(a.run())
    await asyncio.sleep(ttl / 3)
    slow.turn.clear()  # a write round of 3 TTLs begins
    await asyncio.sleep(3 * ttl)
    if not patient:  # it gave its loop up at the deadline (again after each re-election)
        assert events.deposed and all("TTL" in reason for _, reason in events.deposed)
        slow.turn.set()
        await _cancel(task)
        return
    assert not a.holds() and events.deposed == []  # past its deadline: no tick meanwhile
    slow.turn.set()
    for _ in range(100):
        if a.holds():
            break
        await asyncio.sleep(0.02)
    # Nobody could take it: the holder keeps it, at the same epoch, renewed anew.
    assert events.deposed == [] and a.holds() and a.lease is not None and a.lease.epoch == 1
    stored = await store.current_lease(LOOP_LEASE)
    assert stored is not None and stored.expires_at > dt.datetime.now(dt.UTC)
    await _cancel(task)
    await a.release()


class EnteredStore(SlowTurnStore):
    """A :class:`SlowTurnStore` whose renewals first say they began: the test can stall the
    event loop while a renewal is on the wire."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.entered = asyncio.Event()

    async def renew_lease(self, lease: Lease, *, now: dt.datetime, ttl: float) -> Lease | None:
        self.entered.set()
        return await super().renew_lease(lease, now=now, ttl=ttl)


async def test_stopping_the_keeper_stops_its_renewal_on_the_wire(store: Store) -> None:
    """A cancelled keeper leaves no renewal running alone (issue 48, run 29: one held a
    connection past the test's end)."""
    ttl = 0.6
    slow = EnteredStore(store)
    a = _leader(slow, "a", Events(), ttl)
    assert await a.acquire() is not None
    slow.turn.clear()  # the next renewal is on the wire and waits
    task = asyncio.create_task(a.run())
    await asyncio.wait_for(slow.entered.wait(), 10)
    renewals = [t for t in asyncio.all_tasks() if t is not task and "renew_lease" in repr(t.get_coro())]
    assert len(renewals) == 1
    await _cancel(task)
    assert renewals[0].done()  # stopped with its keeper, not left to renew on its own
    slow.turn.set()
    await a.release()


async def test_a_stall_that_begins_with_a_renewal_on_the_wire_keeps_the_lease(
    store: Store,
) -> None:
    """The renewal's answer comes during a synchronous stall of 1.5 TTLs; its timeout fires
    as late, in the same turn of the loop: the renewal was never given its time. Nobody else
    is on the database, so the holder must keep its lease at the same epoch (issue 48: this
    failed under load as epoch 2, a step-down and a new election)."""
    ttl = 0.6
    slow = EnteredStore(store)
    events = Events()
    a = _leader(slow, "a", events, ttl)
    assert await a.acquire() is not None
    slow.turn.clear()
    task = asyncio.create_task(a.run())
    await asyncio.wait_for(slow.entered.wait(), 5)  # the first renewal is on the wire
    slow.turn.set()  # its answer is ready: the stall begins before the loop can take it
    time.sleep(1.5 * ttl)  # noqa: ASYNC251 -- the point: a synchronous stall
    assert not a.holds()
    for _ in range(200):
        if a.holds():
            break
        await asyncio.sleep(0.02)
    assert events.deposed == [] and events.elected == []
    assert a.holds() and a.lease is not None and a.lease.epoch == 1
    stored = await store.current_lease(LOOP_LEASE)
    assert stored is not None and stored.epoch == 1
    assert stored.expires_at > dt.datetime.now(dt.UTC)
    await _cancel(task)
    await a.release()


async def test_confirm_after_a_restore_that_outlived_the_ttl_holds_when_nobody_took_it(
    store: Store,
) -> None:
    """A restore on SQLite outlived the TTL and the renewal had to wait for the write lock: it
    matched (nobody can take the lease meanwhile), so ``confirm`` must say the lease is held
    and the loop starts. It said no while keeping the lease, and the service never started its
    loop (issue 48, run 20: not ready for 30 s, then stopped)."""
    ttl = 0.6
    slow = SlowTurnStore(store)
    events = Events()
    a = _leader(slow, "a", events, ttl, patient=True)
    assert await a.acquire() is not None
    await asyncio.sleep(ttl * 0.95)  # the restore, nearly a TTL long
    slow.turn.clear()  # the renewal waits behind a write round
    confirming = asyncio.create_task(a.confirm())
    await asyncio.sleep(ttl)
    assert not confirming.done() and not a.holds()
    slow.turn.set()
    assert await asyncio.wait_for(confirming, 10) is True
    assert a.holds() and a.lease is not None and a.lease.epoch == 1 and events.deposed == []
    stored = await store.current_lease(LOOP_LEASE)
    assert stored is not None and stored.epoch == 1 and stored.expires_at > dt.datetime.now(dt.UTC)
    await a.release()
