"""The chronon loop starts on a committed restore (issue 24): its first tick waits for the writer.

After a restart the restore's own decisions (CEIs whose windows passed while the
service was down, resolved with their notifications) are the writer's first
round. The loop does not tick before that round commits, so the first
chronons' rounds never queue behind it (where a kill 3 s later lost them), and
it starts at the chronon current by then, not at the one the restore saw.
"""

from __future__ import annotations

import asyncio
import datetime as dt
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
        self.seconds = ORIGIN.timestamp()

    def __call__(self) -> float:
        return self.seconds


class _InstantClock(ChrononClock):
    async def sleep_until_chronon(self, t: int) -> float:
        await asyncio.sleep(0)
        return 0.0


async def test_the_first_tick_waits_for_the_restore_round_and_starts_at_the_current_chronon(
    store: Store,
) -> None:
    user, _ = await store.create_user("u")
    feed = (await store.register_feed_for(user, "http://127.0.0.1:9/a.xml"))[0].feed.id
    profile = await store.create_profile(user, "p", [RuleInput("r", {"x": 1}, (feed,))])
    await store.add_cei("r1:0", profile.id, 1, (NewEi(0, feed, 1, 2),),
                        rule_id=profile.rules[0].id, sealed=True)
    wall = _Wall()
    clock = _InstantClock(ORIGIN, 1.0, wall=wall)
    wall.seconds += 10.5  # chronon 10 when the restore decided
    lock = asyncio.Lock()
    writer = Writer(store, ServiceMetrics(), lock=lock)
    ticks: list[tuple[int, int]] = []
    ticked = asyncio.Event()

    class _Loop(ChrononLoop):
        def tick(self, t: int, jitter: float) -> list[int]:
            ticks.append((t, writer.backlog))  # a batch leaves the queue once its round commits
            ticked.set()
            return []

    loop = _Loop(cast(Runtime, None), store, writer, cast(Prober, None), clock, ServiceMetrics(),
                 budget=1, policy=cast(Policy, None))
    await lock.acquire()  # the restore's round cannot commit yet (as if it took seconds)
    writer.start()
    writer.submit([Resolved("r1:0", "missed", 10)])
    task = asyncio.create_task(loop.run(10))
    try:
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert ticks == [] and loop.last_tick is None  # no chronon ticked behind the restore
        wall.seconds += 3  # the round took three chronons
        lock.release()

        await asyncio.wait_for(ticked.wait(), 10)
    finally:
        await cancel_and_wait(task)
        await writer.stop()
    # The first tick is the current chronon, and the restore's resolution was stored before it.
    assert ticks[0] == (13, 0)
    (cei,) = await store.list_ceis(user, profile.id)
    assert cei.state == "missed"
