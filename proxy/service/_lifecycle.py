"""Start, lead, stand by, step down, stop: the service's lifecycle, its lease and housekeeping.

Start-up (:meth:`Lifecycle.start`): migrate (``migrate_on_start``), take the
chronon loop's lease (:mod:`proxy.service.leader`; one loop per database), and as
its holder load or persist the chronon origin (so numbering continues after a
restart), restore feeds, profiles with their rule states and pending CEIs
(:meth:`Runtime.restore`) and the update models, then start the writer, the
dispatcher, the replicas' listener, the chronon loop and the APScheduler
housekeeping jobs (retention, health roll-up, saving the update models).

When another process holds the lease, this one is a standby (``PROXY_STANDBY=wait``):
it answers reads, refuses changes with :class:`StandbyError` (503), and does the
same restore when it wins the lease. A holder that loses its lease stops probing
and writing at once and becomes a standby again. ``PROXY_STANDBY=exit`` makes
:meth:`Lifecycle.start` raise :class:`StandbyError` instead.

The lifecycle is the only room that opens, replaces and clears what
:class:`~proxy.service._shared.Shared` holds. Something new that runs while this
process leads starts in :meth:`Lifecycle._lead` and stops in both
:meth:`Lifecycle._step_down` and :meth:`Lifecycle.stop`; a new periodic job goes to
:mod:`~proxy.service._housekeeping`. The adapters that put the lease's statements and
the probes on the loop's event loop are in :mod:`~proxy.service._on_loop`.

What it does not do: change users' feeds or profiles (the other rooms do), or decide
what to probe (the loop and the engine).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc

import structlog

from proxy.aio import cancel_and_wait
from proxy.core.changepoint import ShiftDetector
from proxy.core.coupdate import CoUpdates
from proxy.core.hazard import AgeHazard
from proxy.core.policies import get_policy
from proxy.errors import StandbyError, StorageError
from proxy.faults import fault_hook
from proxy.feeds import NotModified, Ok
from proxy.notify.senders import Sender, WebhookSender
from proxy.rules import FeedUpdateModels
from proxy.service._deliveries import Deliveries
from proxy.service._feeds import update_model_settings
from proxy.service._housekeeping import Housekeeping
from proxy.service._on_loop import LeasesOnLoop, ProbeAtHome, open_prober
from proxy.service._persist import Writer
from proxy.service._replication import Replication
from proxy.service._shared import Shared, describe_lease, fetcher_settings
from proxy.service._update_models import UpdateModels
from proxy.service.changes import ChangeListener
from proxy.service.clock import ChrononClock
from proxy.service.dispatch import Dispatcher, RetryPolicy
from proxy.service.leader import LOOP_LEASE, Leader, LeaseTiming, holder_id
from proxy.service.loop import ChrononLoop
from proxy.service.predicted import Predicted, predicted_probes
from proxy.service.runtime import Runtime
from proxy.store import Lease, Store, upgrade_database

log = structlog.get_logger("proxy.service")

# Probe outcomes that saw the feed's state (a 304 confirms the copy held is current).
SUCCESS_OUTCOMES = frozenset({Ok.outcome, NotModified.outcome})

ORIGIN_KEY = "chronon_origin"
#: How long a write round may hold SQLite's one write lock, about (``Writer.round_seconds``):
#: the lease's renewals and the API's own writes wait for it, and SQLite gives up after 5 s.
SQLITE_ROUND_SECONDS = 1.0


class Lifecycle:
    """Open, lead or stand by, step down, close (module docstring). ``own_store`` and
    ``own_fetcher``: whether :meth:`stop` closes them (not when injected);
    ``run_housekeeping``: whether leading starts the periodic jobs."""

    def __init__(
        self,
        shared: Shared,
        models: UpdateModels,
        deliveries: Deliveries,
        replication: Replication,
        housekeeping: Housekeeping,
        *,
        own_store: bool,
        own_fetcher: bool,
        run_housekeeping: bool,
        use_lease: bool,
        sender: Sender | None,
        deliver: bool,
    ) -> None:
        self._s = shared
        self._models = models
        self._deliveries = deliveries
        self._replication = replication
        self._own_store = own_store
        self._own_fetcher = own_fetcher
        self._housekeeping = housekeeping
        self._run_housekeeping = run_housekeeping
        self._use_lease = use_lease
        self._sender = sender
        self._deliver = deliver
        self._leader_task: asyncio.Task[None] | None = None
        self._stopping_now = False

    async def start(self) -> None:
        """Open the store and the fetcher, then lead (restore and tick) or stand by.

        Raises :class:`StandbyError` with ``PROXY_STANDBY=exit`` when another
        process holds the loop's lease (everything opened is closed again).
        """
        sh = self._s
        s = sh.settings
        if s.migrate_on_start:
            await upgrade_database(s.database_url)
        if sh.opened_store is None:
            sh.opened_store = Store.from_url(s.database_url)
        store = sh.opened_store
        # API requests waiting for a database connection queue in the API's pool; the loop's
        # probes, its writer and the lease renewals have pools of their own, so no burst of
        # requests can make them wait (the budget comes first, issue 24.4). The loop's store
        # is used on the loop's event loop only (a pool's connections belong to one loop).
        sh.opened_loop_store = loop_store = store.sibling()
        sh.api_loop = asyncio.get_running_loop()
        host = sh.host
        host.start()
        sh.lock = asyncio.Lock()  # bound to the loop's event loop at first use: a new one
        try:
            if sh.opened_fetcher is None:
                # Opened on the loop's event loop: its HTTP sessions (or its pool's pipes)
                # belong to the loop that probes with them.
                sh.opened_fetcher = await host.run(open_prober(s))
                sh.loop_prober = sh.opened_fetcher
            elif host.threaded:
                sh.loop_prober = ProbeAtHome(sh.opened_fetcher, sh.api_loop)
            else:
                sh.loop_prober = sh.opened_fetcher
            if not self._use_lease:
                await self._lead(None)
                return
            # SQLite has one writer at a time: a renewal takes its turn with the write rounds
            # (the writer's lock), where polling SQLite's lock against back-to-back rounds lost.
            turns = sh.lock if store.engine.dialect.name == "sqlite" else None
            leader = sh.leader = Leader(
                LeasesOnLoop(loop_store, host, turns), holder_id(), LeaseTiming.of(s.chronon_seconds, s.lease_ttl_seconds),
                on_elected=self._take_over, on_deposed=self._step_down, wall=sh.wall,
                patient=turns is not None)
            if not sh.campaign:
                leader.seen = await store.current_lease(LOOP_LEASE)
                await self._stand_by()
                return
            lease = await leader.acquire()
            if lease is not None:
                await self._lead(lease)
            elif s.standby == "exit":
                seen = leader.seen
                raise StandbyError(
                    f"another `proxy serve` runs the chronon loop on this database "
                    f"({describe_lease(seen)}); PROXY_STANDBY=exit, so this one exits "
                    f"(PROXY_STANDBY=wait keeps it as a standby that takes over when the other "
                    f"stops)", seen.holder if seen else None)
            else:
                await self._stand_by()
            self._leader_task = asyncio.create_task(leader.run(), name="proxy-lease")
        except BaseException:
            await self.stop()
            raise

    async def _take_over(self, lease: Lease) -> None:
        """Won the lease as a standby: restore from the database as a restart does, and tick."""
        self._s.metrics.leader_changes.inc()
        await self._lead(lease)

    async def _stand_by(self) -> None:
        """Serve reads only: the chronon origin is read (never written) for the API's times."""
        sh = self._s
        seen = sh.leader.seen if sh.leader is not None else None
        saved = await sh.store.get_state(ORIGIN_KEY)
        length = sh.settings.chronon_seconds
        if saved is not None and float(saved["length"]) == length:
            origin = dt.datetime.fromisoformat(saved["origin"])
        else:  # provisional until this process leads (the holder owns the origin)
            origin = dt.datetime.fromtimestamp(sh.wall(), dt.UTC)
        sh.opened_clock = ChrononClock(origin, length, wall=sh.wall)
        sh.metrics.leader.set(0)
        sh.metrics.lease_epoch.set(0)
        log.warning("standby", lease=describe_lease(seen),
                    standby=sh.settings.standby, chronon_seconds=length)

    async def _step_down(self, reason: str) -> None:
        """The lease is lost: stop ticking, probing and writing NOW, then stand by.

        Everything is cancelled before the first await, so no tick or probe of
        this process runs after the loss is known (on the loop's own thread, the
        lease's guard already refuses every tick and round); queued writes are
        dropped (the new holder restores from the database and decides again).
        """
        sh = self._s
        loop_task, loop, writer = sh.loop_task, sh.loop, sh.writer
        dispatcher, sh.dispatcher = sh.dispatcher, None
        changes, sh.changes = sh.changes, None
        sh.loop_task = None
        sh.runtime = None
        sh.loop = None
        sh.writer = None
        if loop_task is not None:
            loop_task.cancel()
        self._housekeeping.stop()
        sh.metrics.leader_changes.inc()
        sh.metrics.leader.set(0)  # before any await: scrapes never see two leaders
        sh.metrics.lease_epoch.set(0)
        if loop is not None:
            await sh.host.run(loop.stop())
        if writer is not None:
            await sh.host.run(writer.abort())
        if dispatcher is not None:  # the new leader delivers (the outbox is in the database)
            await dispatcher.stop()
        if changes is not None:
            await changes.stop()
        if loop_task is not None:
            await cancel_and_wait(loop_task)
        gc.unfreeze()  # the restored state is garbage now; the next takeover freezes anew
        # The clock stays: the origin it holds is the database's (this process persisted it).
        log.error("stepped_down", reason=reason)

    async def _lead(self, lease: Lease | None) -> None:
        """Restore from the database and start the writer, the loop and housekeeping."""
        sh = self._s
        s = sh.settings
        store = sh.store
        loop_store = sh.opened_loop_store or store
        sh.opened_clock = clock = await self._load_clock(store)
        # The outbox's documents give windows as wall times too.
        store.chronon_start = loop_store.chronon_start = clock.start_of
        runtime = Runtime(clock, models=FeedUpdateModels(sh.update_model_settings
                                                         or update_model_settings(clock.length)))
        leader = sh.leader
        sqlite = loop_store.engine.dialect.name == "sqlite"
        writer = Writer(loop_store, sh.metrics, guard=leader.holds if leader is not None else None,
                        on_resolved=self._deliveries.resolved_elsewhere, fence=lease,
                        max_batches=s.write_buffer_batches, max_bytes=s.write_buffer_bytes,
                        round_seconds=SQLITE_ROUND_SECONDS if sqlite else None,
                        lock=sh.lock,
                        fault=fault_hook(s.test_faults))
        collected = await store.collect_unregistered_feeds()
        if collected:
            # Feeds nobody registered (e.g. unused ones before migration 0002) have no owner.
            log.info("unregistered_feeds_deleted", feeds=collected)
        for feed in await store.list_feeds():
            slot = runtime.feeds.put(feed)
            if feed.last_probe_at is not None:
                slot.last_probe = clock.chronon_at(feed.last_probe_at)
            if feed.last_outcome in SUCCESS_OUTCOMES and feed.last_probe_at is not None:
                # When the last probe before the restart succeeded, it bounds the next change
                # from below (the chronon it finished in: at most the one it counted for).
                slot.last_success = clock.chronon_at(feed.last_probe_at)
                slot.last_success_at = feed.last_probe_at.timestamp()
        await self._models.restore(store, runtime)
        pending = await store.pending_ceis_with_eis()
        for cei in pending:
            writer.ei_ids[cei.id] = {ei.ordinal: ei.id for ei in cei.eis}
        # Start after the last chronon ticked before a restart, even when the restart falls
        # within that same chronon: re-ticking it would spend its budget a second time.
        last = await store.last_chronon()
        now = clock.current() if last is None else max(clock.current(), last + 1)
        sh.first_chronon = now
        steps = runtime.restore(await store.all_profiles(), pending, now,
                                await store.cei_id_high_water())
        totals = await store.metric_totals()
        # Issue 23: the totals users read as totals start from the database's, not from zero.
        sh.metrics.restore_totals(totals.probes, totals.budget_used, totals.budget_offered, totals.ceis,
                                  totals.deliveries)
        # The restored rules, specs and engine columns live as long as the process: move them
        # out of the cyclic GC's scans, whose full passes over 100,000 profiles' objects
        # otherwise stall the loop for hundreds of milliseconds (docs/bench-service.md).
        gc.collect()
        gc.freeze()
        if leader is not None and not await leader.confirm():
            # The restore outlived the lease and another process took it: that one leads. The
            # leader stepped this one down (a standby) and campaigns again. A lease still held
            # but not renewed in time is given up, so that the campaign starts afresh: a holder
            # that keeps it without a loop would lead nothing, for ever.
            log.warning("lease_lost_while_restoring", feeds=len(runtime.feeds))
            if leader.lease is not None:
                await leader.release()
            return

        def start_writing() -> None:  # on the loop's thread: the writer's task lives there
            writer.start()
            writer.submit(steps)

        await sh.host.call(start_writing)
        if self._deliver:
            # Rows left pending by a previous run (even one killed between commit and send)
            # are due at once: the dispatcher's first look finds them.
            sh.dispatcher = Dispatcher(
                store, self._sender or WebhookSender(
                    fetcher_settings(s).address_policy, timeout=s.delivery_timeout_seconds,
                    user_agent=s.user_agent),
                sh.metrics,
                RetryPolicy(s.delivery_retry_base_seconds, s.delivery_retry_max_seconds,
                            s.delivery_retry_window_seconds),
                concurrency=s.delivery_concurrency, per_target=s.delivery_per_target_concurrency,
                poll=s.delivery_poll_seconds, wall=sh.wall,
            )
            sh.dispatcher.start()
        assert sh.loop_prober is not None
        sh.loop = loop = ChrononLoop(
            runtime, loop_store, writer, sh.loop_prober, clock, sh.metrics,
            budget=s.budget, policy=get_policy(s.policy),
            guard=leader.holds if leader is not None else None,
            predicted=predicted_probes(Predicted(s.discovery_predicted), runtime.models, clock),
            revisit_factor=s.discovery_revisit_factor,
            publisher_hints=s.discovery_publisher_hints,
            shifts=ShiftDetector() if s.discovery_changepoint else None,
            coupdate=CoUpdates() if s.discovery_coupdate else None,
            ages=AgeHazard(strength=s.discovery_hazard) if s.discovery_hazard > 0 else None,
            tail_budget=s.discovery_tail_budget,
            tail_target=s.discovery_tail_target, tail_hopeless=s.discovery_tail_hopeless,
            tail_sticky=s.discovery_tail_sticky,
            # 0 stays off; any other interval is at least a chronon.
            unwatched_every=(max(1, clock.chronons_for(s.unwatched_probe_interval_seconds))
                             if s.unwatched_probe_interval_seconds > 0 else 0),
        )
        sh.runtime, sh.writer = runtime, writer
        if not s.is_sqlite:  # API replicas' changes (issue 21); SQLite has no LISTEN/NOTIFY
            sh.changes = ChangeListener(s.database_url, self._replication.apply_change,
                                        self._replication.resync)
            sh.changes.start()
        sh.metrics.leader.set(1)
        sh.metrics.lease_epoch.set(lease.epoch if lease is not None else 0)
        log.info("service_started", chronon=now, feeds=len(runtime.feeds),
                 profiles=len(runtime.evaluator.profile_ids()), pending_ceis=len(pending),
                 policy=s.policy, budget=s.budget, chronon_seconds=s.chronon_seconds,
                 lease_epoch=lease.epoch if lease is not None else None)
        if sh.run_loop:
            sh.loop_task = sh.host.spawn(loop.run(now), name="proxy-chronon-loop")
        if self._run_housekeeping:
            self._housekeeping.start()

    async def stop(self) -> None:
        """Stop ticking, cancel probes in flight, write what is queued, give the lease up
        (a standby takes over at once), close what we opened."""
        sh = self._s
        if self._leader_task is not None:
            await cancel_and_wait(self._leader_task)
            self._leader_task = None
        self._housekeeping.stop()
        if sh.changes is not None:
            await sh.changes.stop()
            sh.changes = None
        if sh.loop_task is not None:
            await cancel_and_wait(sh.loop_task)
            sh.loop_task = None
        if sh.loop is not None:
            await sh.host.run(sh.loop.stop())
        if sh.writer is not None:
            # Drain: everything decided so far goes to the database, within the deadline
            # (a second signal, stop_now(), ends it at once). What is left is lost as in a
            # crash, and decided again by the next start.
            backlog = sh.writer.backlog
            if backlog:
                log.info("draining_writes", batches=backlog,
                         deadline_seconds=sh.settings.drain_seconds)
            drained = await sh.host.run(sh.writer.stop(sh.settings.drain_seconds))
            if drained and backlog:
                log.info("writes_drained", batches=backlog)
        if sh.dispatcher is not None:
            await sh.dispatcher.stop()
            sh.dispatcher = None
        if sh.runtime is not None and sh.opened_store is not None and not self._stopping_now:
            with contextlib.suppress(StorageError):  # logged inside; never block a shutdown
                await self._models.save()
        if sh.leader is not None:
            await sh.leader.release()
        if sh.opened_fetcher is not None and self._own_fetcher:
            await sh.host.run(sh.opened_fetcher.aclose())
        if sh.opened_loop_store is not None:
            await sh.host.run(sh.opened_loop_store.close())
            sh.opened_loop_store = None
        await sh.host.stop()
        if sh.opened_store is not None and self._own_store:
            await sh.opened_store.close()
            sh.opened_store = None
        log.info("service_stopped")

    def stop_now(self) -> None:
        """Cut a running :meth:`stop` short (a second SIGTERM): stop waiting for the writer's
        backlog and skip what may wait on the database; the lease is still given up."""
        self._stopping_now = True
        if self._s.writer is not None:
            self._s.host.post(self._s.writer.stop_now)  # the writer's event belongs to the loop

    async def _load_clock(self, store: Store) -> ChrononClock:
        """The chronon origin persisted on first start, so numbering continues after a restart."""
        wall = self._s.wall
        length = self._s.settings.chronon_seconds
        saved = await store.get_state(ORIGIN_KEY)
        now = dt.datetime.fromtimestamp(wall(), dt.UTC)
        if saved is None:
            origin = now
        else:
            origin = dt.datetime.fromisoformat(saved["origin"])
            if float(saved["length"]) != length:
                # A new chronon length: re-anchor so that numbering still only goes forward.
                old = ChrononClock(origin, float(saved["length"]), wall=wall)
                origin = now - dt.timedelta(seconds=(old.current() + 1) * length)
                log.warning("chronon_length_changed", old=saved["length"], new=length)
            else:
                await store.set_state(ORIGIN_KEY, saved)
                return ChrononClock(origin, length, wall=wall)
        await store.set_state(ORIGIN_KEY, {"origin": origin.isoformat(), "length": length})
        return ChrononClock(origin, length, wall=wall)
