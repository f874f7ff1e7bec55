"""The chronon loop starts on a committed restore (issue 24): its first tick waits for the writer.

After a restart the restore's own decisions (CEIs whose windows passed while the
service was down, resolved with their notifications) are the writer's first
round. The loop does not tick before that round commits, so the first
chronons' rounds never queue behind it (where a kill 3 s later lost them), and
it starts at the chronon current by then, not at the one the restore saw. A
round that takes longer than ``start_wait`` does not keep the loop from probing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import cast

from proxy.aio import cancel_and_wait
from proxy.core.policies import Policy
from proxy.feeds import Prober
from proxy.service._persist import Resolved, Writer
from proxy.service.clock import ChrononClock
from proxy.service.loop import ChrononLoop
from proxy.service.metrics import ServiceMetrics
from proxy.service.runtime import Runtime
from proxy.store import NewEi, RuleInput, Store

ORIGIN = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


class _Wall:
    """A wall clock the test moves; ``sleep_until_chronon`` does not wait on it."""

    def __init__(self) -> None:
        self.seconds = ORIGIN.timestamp() + 10.5  # chronon 10 when the restore decided

    def __call__(self) -> float:
        return self.seconds


class _InstantClock(ChrononClock):
    async def sleep_until_chronon(self, t: int) -> float:
        await asyncio.sleep(0)
        return 0.0


@dataclass
class _Restart:
    """A writer holding the restore's resolution of ``r1:0`` (its round blocked on ``lock``),
    and a loop that records each tick as (chronon, batches still queued)."""

    wall: _Wall
    lock: asyncio.Lock
    writer: Writer
    loop: ChrononLoop
    ticks: list[tuple[int, int]] = field(default_factory=list)
    ticked: asyncio.Event = field(default_factory=asyncio.Event)


@asynccontextmanager
async def _restart(store: Store, start_wait: float) -> AsyncIterator[_Restart]:
    user, _ = await store.create_user("u")
    feed = (await store.register_feed_for(user, "http://127.0.0.1:9/a.xml"))[0].feed.id
    profile = await store.create_profile(user, "p", [RuleInput("r", {"x": 1}, (feed,))])
    await store.add_cei("r1:0", profile.id, 1, (NewEi(0, feed, 1, 2),),
                        rule_id=profile.rules[0].id, sealed=True)
    wall = _Wall()
    lock = asyncio.Lock()
    writer = Writer(store, ServiceMetrics(), lock=lock)

    class _Loop(ChrononLoop):
        def tick(self, t: int, jitter: float) -> list[int]:
            # A batch leaves the writer's queue only once its round has committed.
            run.ticks.append((t, writer.backlog))
            run.ticked.set()
            return []

    loop = _Loop(cast(Runtime, None), store, writer, cast(Prober, None),
                 _InstantClock(ORIGIN, 1.0, wall=wall), ServiceMetrics(), budget=1,
                 policy=cast(Policy, None), start_wait=start_wait)
    run = _Restart(wall, lock, writer, loop)
    await lock.acquire()  # the restore's round cannot commit yet (as if it took seconds)
    writer.start()
    writer.submit([Resolved("r1:0", "missed", 10)])
    task = asyncio.create_task(loop.run(10))
    try:
        yield run
    finally:
        await cancel_and_wait(task)
        if lock.locked():
            lock.release()
        await writer.stop()
    (cei,) = await store.list_ceis(user, profile.id)
    assert cei.state == "missed"


async def test_the_first_tick_waits_for_the_restore_round_and_starts_at_the_current_chronon(
    store: Store,
) -> None:
    async with _restart(store, start_wait=30) as run:
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert run.ticks == [] and run.loop.last_tick is None  # nothing ticked behind the restore
        run.wall.seconds += 3  # the round took three chronons
        run.lock.release()
        await asyncio.wait_for(run.ticked.wait(), 10)
        # The current chronon, and the restore's resolution was stored before it.
        assert run.ticks[0] == (13, 0)


async def test_a_restore_round_longer_than_start_wait_does_not_keep_the_loop_from_ticking(
    store: Store,
) -> None:
    async with _restart(store, start_wait=0.2) as run:
        run.wall.seconds += 2
        await asyncio.wait_for(run.ticked.wait(), 10)
        assert run.ticks[0] == (12, 1)  # ticking, the restore's round still queued
