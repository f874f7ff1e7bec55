"""The leader's periodic jobs (APScheduler): retention, the feeds' health roll-up, saving the update models, trimming the heap.

They run only while this process leads: the lifecycle starts them once the
restore is done (:meth:`Housekeeping.start`) and stops them when it steps down or
stops (:meth:`Housekeeping.stop`). A new periodic job goes to
:meth:`Housekeeping.start`, its work as a method here (or on the room whose state
it keeps, as saving the update models is).

What it does not do: tick (the chronon loop has its own clock), or retry a failed
job early (each logs its failure and runs again at its next interval).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import structlog

from proxy.errors import StorageError
from proxy.service._heap import trim_heap
from proxy.service._shared import Shared
from proxy.service._update_models import UpdateModels

log = structlog.get_logger("proxy.service")


class Housekeeping:
    """The leader's periodic jobs (module docstring)."""

    def __init__(self, shared: Shared, models: UpdateModels) -> None:
        self._s = shared
        self._models = models
        self._scheduler: Any = None

    def start(self) -> None:
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        scheduler = AsyncIOScheduler(timezone=dt.UTC)
        if self._s.settings.retention_days > 0:
            scheduler.add_job(self.purge, "interval", hours=1, id="purge", coalesce=True,
                              max_instances=1, next_run_time=dt.datetime.now(dt.UTC))
        scheduler.add_job(self.refresh_feed_health, "interval", minutes=1, id="rollup",
                          coalesce=True, max_instances=1)
        scheduler.add_job(self._models.save, "interval", minutes=5, id="update-models",
                          coalesce=True, max_instances=1)
        scheduler.add_job(self.trim_heap, "interval", minutes=1, id="heap-trim",
                          coalesce=True, max_instances=1)
        scheduler.start()
        self._scheduler = scheduler

    def stop(self) -> None:
        """Stop the jobs (one running finishes on its own); at once, without an await."""
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None

    async def purge(self) -> None:
        """Retention: delete probes and uncaptured entries older than ``retention_days``, and
        notifications settled (delivered or dead letters) before then with their events;
        pending deliveries stay, however old."""
        sh = self._s
        cutoff = sh.clock.now() - dt.timedelta(days=sh.settings.retention_days)
        try:
            result = await sh.store.purge_older_than(cutoff)
        except StorageError as exc:
            sh.metrics.db_errors.inc()
            log.error("purge_failed", error=str(exc))
            return
        log.info("purged", probes=result.probes, entries=result.entries,
                 deliveries=result.deliveries, events=result.events, cutoff=cutoff.isoformat())

    async def trim_heap(self) -> None:
        """Hand the C heap's free memory back to the OS (``proxy.service._heap``), on a thread:
        resident memory then follows the live heap instead of glibc's high-water mark."""
        await asyncio.to_thread(trim_heap)

    async def refresh_feed_health(self) -> None:
        """Roll-up: reconcile disabled flags changed outside the loop (e.g. by an operator)."""
        sh = self._s
        try:
            feeds = await sh.store.list_feeds()
        except StorageError as exc:
            sh.metrics.db_errors.inc()
            log.error("rollup_failed", error=str(exc))
            return
        rt = sh.runtime
        if rt is None:
            return  # stepped down meanwhile

        def apply() -> None:
            for feed in feeds:
                slot = rt.feeds.by_id.get(feed.id)
                if slot is not None:
                    slot.disabled = feed.disabled
                    rt.feeds.note(slot)

        await sh.host.call(apply)
