"""``ProxyService``: the facade the API calls, owning the store, the fetcher, the loop and housekeeping.

Anything that changes the engine's or the evaluator's state goes through here
(register/delete feed, create/replace/delete profile, ping), so those changes
happen on the chronon loop's event loop in one order with the loop's own. Reads
that touch only the database (listings, CEIs, metrics summary) go to :attr:`store`.

The chronon loop runs on a thread of its own (:mod:`proxy.service._host`,
``PROXY_LOOP_THREAD``; issue 24.4: the budget comes first): its ticks, probes,
writer and store (:attr:`ProxyService.loop_store`) live there, and the engine, the
evaluator and the feed table change only there. The API's event loop stores
what users change with its own store, then hands the loop what it must apply
(:meth:`LoopHost.call`); changes whose transactions could deadlock with the
writer's rounds (deleting or replacing a profile, deleting a feed) run on the
loop's thread, under the writer's lock, and so do profile creates on SQLite
(one writer at a time: they take turns with the rounds, several at once).
Every change of a user's profiles is announced once stored
(:class:`~proxy.service._profile_changes.ProfileChanges`): the API's cached
listing pages are amended with it, so a client reads its own writes at once.

Start-up (:meth:`ProxyService.start`): migrate (``migrate_on_start``), take the
chronon loop's lease (:mod:`proxy.service.leader`; one loop per database), and as
its holder load or persist the chronon origin (so numbering continues after a
restart), restore feeds, profiles with their rule states and pending CEIs
(:meth:`Runtime.restore`), then start the writer, the chronon loop and the
APScheduler housekeeping jobs.

When another process holds the lease, this one is a standby (``PROXY_STANDBY=wait``):
it answers reads, refuses changes with :class:`StandbyError` (503), and does the
same restore when it wins the lease. A holder that loses its lease stops probing
and writing at once and becomes a standby again. ``PROXY_STANDBY=exit`` makes
:meth:`ProxyService.start` raise :class:`StandbyError` instead.

Scale-out (issue 21, docs/scale.md): the leader's writer is fenced by the lease
epoch; on PostgreSQL the leader also applies changes that API replicas
(``campaign=False``, ``proxy serve --role api``) stored and forwarded by
LISTEN/NOTIFY (:mod:`proxy.service.changes`). A replica never leads: it
validates and stores a change, then forwards it.

What it does not do: speak HTTP (``proxy.api``) or parse settings (``proxy.settings``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from proxy.aio import cancel_and_wait
from proxy.core.policies import get_policy
from proxy.errors import (
    AuthError,
    FeedNotFoundError,
    ProfileNotFoundError,
    RateLimitedError,
    StandbyError,
    StorageError,
    ValidationError,
)
from proxy.faults import fault_hook
from proxy.feeds import (
    FeedState,
    FeedUrlRefusedError,
    Fetcher,
    FetcherSettings,
    KnownEntries,
    NotModified,
    Ok,
    ProbePool,
    Prober,
    ProbeResult,
    SystemResolver,
    redact_url,
)
from proxy.notify.senders import Sender, WebhookSender
from proxy.notify.targets import check_targets
from proxy.rules import (
    FeedModelEstimate,
    FeedUpdateModels,
    ProfileSpec,
    TriggerEvaluator,
    UpdateModelSettings,
    UpdateModelStateError,
)
from proxy.rules.ports import ChrononMapping
from proxy.rules.schemas import NotifySpec
from proxy.service import health
from proxy.service._feeds import FeedTable, update_model_settings
from proxy.service._host import LoopHost
from proxy.service._persist import Step, Writer
from proxy.service._profile_changes import ProfileChanged, ProfileChanges
from proxy.service._ratelimit import TokenBuckets
from proxy.service.changes import CHANNEL, Change, ChangeListener
from proxy.service.clock import ChrononClock
from proxy.service.dispatch import Dispatcher, RetryPolicy
from proxy.service.leader import LOOP_LEASE, Leader, LeaseTiming, holder_id
from proxy.service.loop import ChrononLoop
from proxy.service.metrics import ServiceMetrics
from proxy.service.planning import PlanInputs, PlanReport, plan_inputs, run_plan
from proxy.service.predicted import Predicted, predicted_probes
from proxy.service.rule_status import ProfileStatus, profile_status
from proxy.service.runtime import Runtime, check_feeds, rule_feed_ids, rule_key
from proxy.settings import Settings
from proxy.store import (
    Delivery,
    Feed,
    Lease,
    NewProfile,
    NotificationEvent,
    NotifyTarget,
    Profile,
    RegisteredFeed,
    Registration,
    RuleInput,
    Store,
    TargetInput,
    upgrade_database,
)

log = structlog.get_logger("proxy.service")

UPDATE_MODELS_KEY = "update_models"

# Probe outcomes that saw the feed's state (a 304 confirms the copy held is current).
SUCCESS_OUTCOMES = frozenset({Ok.outcome, NotModified.outcome})

ORIGIN_KEY = "chronon_origin"
#: How long a process that does not run the loop (an API replica, a standby) reuses the update
#: models it read from the database (:meth:`ProxyService.update_model`, :meth:`ProxyService.plan`).
#: The leader saves them every five minutes, so a minute adds little staleness.
SAVED_MODELS_TTL_SECONDS = 60.0
#: Rule status reads at most this many of a profile's pending CEIs (the newest).
STATUS_PENDING_CEIS = 1000
READY_PING_SECONDS = 2.0  # /readyz: a database slower than this to answer SELECT 1 is down
#: How long a write round may hold SQLite's one write lock, about (``Writer.round_seconds``):
#: the lease's renewals and the API's own writes wait for it, and SQLite gives up after 5 s.
SQLITE_ROUND_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """What ``/readyz`` reports. ``role``: ``leader`` runs the chronon loop, ``standby`` waits
    for its lease; ``epoch`` is the lease's epoch (``None`` without a lease)."""

    database: bool
    ticking: bool
    chronon: int | None
    inflight: int
    backlog: int
    detail: str = ""
    role: Literal["leader", "standby", "api"] = "leader"
    epoch: int | None = None
    writing: bool = True
    """The writer keeps up: its oldest unwritten batch is younger than the bound."""
    write_lag: float = 0.0

    @property
    def ready(self) -> bool:
        if self.role == "api":  # an API replica (issue 21) never runs the loop
            return self.database
        return self.database and self.ticking and self.writing and self.role == "leader"

    @property
    def status(self) -> Literal["ready", "standby", "unavailable"]:
        if self.ready:
            return "ready"
        return "standby" if self.role == "standby" and self.database else "unavailable"


def fetcher_settings(settings: Settings) -> FetcherSettings:
    """The feed layer's settings from the service's."""
    return FetcherSettings(
        allow_private_networks=settings.allow_private_networks,
        connect_timeout=settings.http_connect_timeout_seconds,
        read_timeout=settings.http_read_timeout_seconds,
        total_timeout=settings.http_total_timeout_seconds,
        max_body_bytes=settings.max_body_bytes,
        per_host_concurrency=settings.per_host_concurrency,
        per_host_min_delay=settings.per_host_min_delay_seconds,
        respect_cache_hints=settings.respect_cache_hints,
        user_agent=settings.user_agent,
    )


class ProxyService:
    """The running proxy. ``async with ProxyService(settings) as service: …`` or start()/stop().

    ``store``/``fetcher`` may be injected (the service then does not close
    them); ``wall`` is the wall clock the chronon clock reads (tests);
    ``run_loop=False`` restores everything but does not tick (tests drive
    :meth:`ChrononLoop.tick` themselves). ``lease`` (default: ``run_loop``): take
    the chronon loop's lease first; without it the service always leads.
    ``campaign=False`` (``--role api``): never take the lease, serve as a standby.
    With ``run_loop`` (and ``PROXY_LOOP_THREAD``) the loop runs on a thread of its own
    (:attr:`host`); an injected ``fetcher`` then keeps probing on the caller's event loop.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        fetcher: Prober | None = None,
        metrics: ServiceMetrics | None = None,
        wall: Callable[[], float] = time.time,
        run_loop: bool = True,
        housekeeping: bool = True,
        lease: bool | None = None,
        sender: Sender | None = None,
        deliver: bool = True,
        campaign: bool = True,
        update_models: UpdateModelSettings | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or ServiceMetrics()
        self._store = store
        self._own_store = store is None
        #: The chronon loop's own connection pool (its probes, writer and lease; issue 24.4),
        #: used on the loop's event loop only.
        self._loop_store: Store | None = None
        #: Where the chronon loop runs: its own thread, or (tests that tick by hand) here.
        self.host = LoopHost(threaded=run_loop and campaign and settings.loop_thread)
        self._api_loop: asyncio.AbstractEventLoop | None = None
        #: What the loop probes with: the fetcher, or (an injected one, on another event loop
        #: than the loop's) a proxy that sends its probes home.
        self._loop_prober: Prober | None = None
        self._fetcher = fetcher
        self._own_fetcher = fetcher is None
        self._wall = wall
        self._run_loop = run_loop
        self._housekeeping = housekeeping
        self._use_lease = run_loop if lease is None else lease
        # Issue 21: an API replica (`--role api`) never leads; it serves reads as a standby.
        self._campaign = campaign
        #: What the update models assume (their prior above all); tests squeeze time with it.
        self._update_model_settings = update_models
        self._changes: ChangeListener | None = None
        self._leader: Leader | None = None
        self._leader_task: asyncio.Task[None] | None = None
        self._sender = sender
        self._deliver = deliver
        self._dispatcher: Dispatcher | None = None
        #: Set and replaced whenever resolutions (and so events) were stored: the event
        #: streams wait on it (:meth:`events_changed`).
        self._events_changed = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._scheduler: Any = None
        self._runtime: Runtime | None = None
        self._writer: Writer | None = None
        self._stopping_now = False
        self._loop: ChrononLoop | None = None
        self._clock: ChrononClock | None = None
        #: The chronon the loop starts at (after the last one ticked before a restart).
        self.first_chronon: int | None = None
        #: The writer's lock (a round's transaction holds it), and changes whose transactions
        #: must not interleave with a round's; used on the loop's event loop only.
        self._lock = asyncio.Lock()
        # One plan at a time: each is seconds of CPU in a worker thread, sharing the GIL with the loop.
        self._plan_lock = asyncio.Lock()
        #: Without a loop: the update models last read from the database, and when (monotonic).
        self._saved_models: tuple[float, FeedUpdateModels] | None = None
        self._saved_models_lock = asyncio.Lock()
        # Pings per feed (issue 24.6): every user who registered a feed knows a token for it, and
        # each accepted ping may open CEIs that spend the shared budget.
        self._ping_buckets = TokenBuckets(settings.ping_rate_per_minute / 60.0, settings.ping_burst)
        #: Every change of a user's profiles by this process, announced once stored: the API's
        #: listing pages are amended with them and its summaries key on their version, so a
        #: client reads its own writes at once (proxy/api/_cache.py).
        self.profile_changes = ProfileChanges()
        #: SQLite creates waiting for the writer's lock (:meth:`_create_in_turn`); loop's thread.
        self._queued_creates: list[tuple[NewProfile, asyncio.Future[Profile]]] = []

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ProxyService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("ProxyService is not started")
        return self._store

    @property
    def loop_store(self) -> Store:
        """The chronon loop's store: use it on the loop's event loop only (:attr:`host`)."""
        if self._loop_store is None:
            raise RuntimeError("ProxyService is not started")
        return self._loop_store

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            raise RuntimeError("ProxyService is not started or is a standby")
        return self._runtime

    @property
    def loop(self) -> ChrononLoop:
        if self._loop is None:
            raise RuntimeError("ProxyService is not started or is a standby")
        return self._loop

    @property
    def leader(self) -> Leader | None:
        """The lease keeper (``None`` when the service runs without a lease)."""
        return self._leader

    @property
    def leading(self) -> bool:
        """Whether this process runs the chronon loop (holds the lease, or runs without one)."""
        return self._runtime is not None

    @property
    def fetcher(self) -> Prober:
        """What probes the feeds: a :class:`Fetcher`, or a :class:`ProbePool` (``probe_processes``)."""
        if self._fetcher is None:
            raise RuntimeError("ProxyService is not started")
        return self._fetcher

    @property
    def clock(self) -> ChrononClock:
        if self._clock is None:
            raise RuntimeError("ProxyService is not started")
        return self._clock

    async def start(self) -> None:
        """Open the store and the fetcher, then lead (restore and tick) or stand by.

        Raises :class:`StandbyError` with ``PROXY_STANDBY=exit`` when another
        process holds the loop's lease (everything opened is closed again).
        """
        s = self.settings
        if s.migrate_on_start:
            await upgrade_database(s.database_url)
        if self._store is None:
            self._store = Store.from_url(s.database_url)
        store = self._store
        # API requests waiting for a database connection queue in the API's pool; the loop's
        # probes, its writer and the lease renewals have pools of their own, so no burst of
        # requests can make them wait (the budget comes first, issue 24.4). The loop's store
        # is used on the loop's event loop only (a pool's connections belong to one loop).
        self._loop_store = loop_store = store.sibling()
        self._api_loop = asyncio.get_running_loop()
        host = self.host
        host.start()
        self._lock = asyncio.Lock()  # bound to the loop's event loop at first use: a new one
        try:
            if self._fetcher is None:
                # Opened on the loop's event loop: its HTTP sessions (or its pool's pipes)
                # belong to the loop that probes with them.
                self._fetcher = await host.run(_open_prober(s))
                self._loop_prober = self._fetcher
            elif host.threaded:
                self._loop_prober = _ProbeAtHome(self._fetcher, self._api_loop)
            else:
                self._loop_prober = self._fetcher
            if not self._use_lease:
                await self._lead(None)
                return
            # SQLite has one writer at a time: a renewal takes its turn with the write rounds
            # (the writer's lock), where polling SQLite's lock against back-to-back rounds lost.
            turns = self._lock if store.engine.dialect.name == "sqlite" else None
            leader = self._leader = Leader(
                _LeasesOnLoop(loop_store, host, turns), holder_id(), LeaseTiming.of(s.chronon_seconds, s.lease_ttl_seconds),
                on_elected=self._take_over, on_deposed=self._step_down, wall=self._wall,
                patient=turns is not None)
            if not self._campaign:
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
                    f"({_describe_lease(seen)}); PROXY_STANDBY=exit, so this one exits "
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
        self.metrics.leader_changes.inc()
        await self._lead(lease)

    async def _stand_by(self) -> None:
        """Serve reads only: the chronon origin is read (never written) for the API's times."""
        store = self.store
        seen = self._leader.seen if self._leader is not None else None
        saved = await store.get_state(ORIGIN_KEY)
        length = self.settings.chronon_seconds
        if saved is not None and float(saved["length"]) == length:
            origin = dt.datetime.fromisoformat(saved["origin"])
        else:  # provisional until this process leads (the holder owns the origin)
            origin = dt.datetime.fromtimestamp(self._wall(), dt.UTC)
        self._clock = ChrononClock(origin, length, wall=self._wall)
        self.metrics.leader.set(0)
        self.metrics.lease_epoch.set(0)
        log.warning("standby", lease=_describe_lease(seen),
                    standby=self.settings.standby, chronon_seconds=length)

    async def _step_down(self, reason: str) -> None:
        """The lease is lost: stop ticking, probing and writing NOW, then stand by.

        Everything is cancelled before the first await, so no tick or probe of
        this process runs after the loss is known (on the loop's own thread, the
        lease's guard already refuses every tick and round); queued writes are
        dropped (the new holder restores from the database and decides again).
        """
        loop_task, loop, writer = self._loop_task, self._loop, self._writer
        dispatcher, self._dispatcher = self._dispatcher, None
        changes, self._changes = self._changes, None
        self._loop_task = None
        self._runtime = None
        self._loop = None
        self._writer = None
        if loop_task is not None:
            loop_task.cancel()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        self.metrics.leader_changes.inc()
        self.metrics.leader.set(0)  # before any await: scrapes never see two leaders
        self.metrics.lease_epoch.set(0)
        if loop is not None:
            await self.host.run(loop.stop())
        if writer is not None:
            await self.host.run(writer.abort())
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
        s = self.settings
        store = self.store
        loop_store = self._loop_store or store
        self._clock = clock = await self._load_clock(store)
        # The outbox's documents give windows as wall times too.
        store.chronon_start = loop_store.chronon_start = clock.start_of
        runtime = Runtime(clock, models=FeedUpdateModels(self._update_model_settings
                                                         or update_model_settings(clock.length)))
        leader = self._leader
        sqlite = loop_store.engine.dialect.name == "sqlite"
        writer = Writer(loop_store, self.metrics, guard=leader.holds if leader is not None else None,
                        on_resolved=self._resolved_elsewhere, fence=lease, max_batches=s.write_buffer_batches,
                        max_bytes=s.write_buffer_bytes,
                        round_seconds=SQLITE_ROUND_SECONDS if sqlite else None,
                        lock=self._lock,
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
        await self._restore_models(store, runtime)
        pending = await store.pending_ceis_with_eis()
        for cei in pending:
            writer.ei_ids[cei.id] = {ei.ordinal: ei.id for ei in cei.eis}
        # Start after the last chronon ticked before a restart, even when the restart falls
        # within that same chronon: re-ticking it would spend its budget a second time.
        last = await store.last_chronon()
        now = clock.current() if last is None else max(clock.current(), last + 1)
        self.first_chronon = now
        steps = runtime.restore(await store.all_profiles(), pending, now,
                                await store.cei_id_high_water())
        totals = await store.metric_totals()
        # Issue 23: the totals users read as totals start from the database's, not from zero.
        self.metrics.restore_totals(totals.probes, totals.budget_used, totals.budget_offered, totals.ceis,
                                    totals.deliveries)
        # The restored rules, specs and engine columns live as long as the process: move them
        # out of the cyclic GC's scans, whose full passes over 100,000 profiles' objects
        # otherwise stall the loop for hundreds of milliseconds (docs/bench-service.md).
        gc.collect()
        gc.freeze()
        if leader is not None and not await leader.confirm():
            # The restore outlived the lease and another process took it: that one leads. The
            # leader stepped this one down (a standby) and campaigns again.
            log.warning("lease_lost_while_restoring", feeds=len(runtime.feeds))
            return

        def start_writing() -> None:  # on the loop's thread: the writer's task lives there
            writer.start()
            writer.submit(steps)

        await self.host.call(start_writing)
        if self._deliver:
            # Rows left pending by a previous run (even one killed between commit and send)
            # are due at once: the dispatcher's first look finds them.
            self._dispatcher = Dispatcher(
                store, self._sender or WebhookSender(
                    fetcher_settings(s).address_policy, timeout=s.delivery_timeout_seconds,
                    user_agent=s.user_agent),
                self.metrics,
                RetryPolicy(s.delivery_retry_base_seconds, s.delivery_retry_max_seconds,
                            s.delivery_retry_window_seconds),
                concurrency=s.delivery_concurrency, per_target=s.delivery_per_target_concurrency,
                poll=s.delivery_poll_seconds, wall=self._wall,
            )
            self._dispatcher.start()
        assert self._loop_prober is not None
        self._loop = ChrononLoop(
            runtime, loop_store, writer, self._loop_prober, clock, self.metrics,
            budget=s.budget, policy=get_policy(s.policy),
            guard=leader.holds if leader is not None else None,
            predicted=predicted_probes(Predicted(s.discovery_predicted), runtime.models, clock),
            # 0 stays off; any other interval is at least a chronon.
            unwatched_every=(max(1, clock.chronons_for(s.unwatched_probe_interval_seconds))
                             if s.unwatched_probe_interval_seconds > 0 else 0),
        )
        self._runtime, self._writer = runtime, writer
        if not s.is_sqlite:  # API replicas' changes (issue 21); SQLite has no LISTEN/NOTIFY
            self._changes = ChangeListener(s.database_url, self._apply_change, self._resync)
            self._changes.start()
        self.metrics.leader.set(1)
        self.metrics.lease_epoch.set(lease.epoch if lease is not None else 0)
        log.info("service_started", chronon=now, feeds=len(runtime.feeds),
                 profiles=len(runtime.evaluator.profile_ids()), pending_ceis=len(pending),
                 policy=s.policy, budget=s.budget, chronon_seconds=s.chronon_seconds,
                 lease_epoch=lease.epoch if lease is not None else None)
        if self._run_loop:
            self._loop_task = self.host.spawn(self._loop.run(now), name="proxy-chronon-loop")
        if self._housekeeping:
            self._start_housekeeping()

    async def stop(self) -> None:
        """Stop ticking, cancel probes in flight, write what is queued, give the lease up
        (a standby takes over at once), close what we opened."""
        if self._leader_task is not None:
            await cancel_and_wait(self._leader_task)
            self._leader_task = None
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        if self._changes is not None:
            await self._changes.stop()
            self._changes = None
        if self._loop_task is not None:
            await cancel_and_wait(self._loop_task)
            self._loop_task = None
        if self._loop is not None:
            await self.host.run(self._loop.stop())
        if self._writer is not None:
            # Drain: everything decided so far goes to the database, within the deadline
            # (a second signal, stop_now(), ends it at once). What is left is lost as in a
            # crash, and decided again by the next start.
            backlog = self._writer.backlog
            if backlog:
                log.info("draining_writes", batches=backlog,
                         deadline_seconds=self.settings.drain_seconds)
            drained = await self.host.run(self._writer.stop(self.settings.drain_seconds))
            if drained and backlog:
                log.info("writes_drained", batches=backlog)
        if self._dispatcher is not None:
            await self._dispatcher.stop()
            self._dispatcher = None
        if self._runtime is not None and self._store is not None and not self._stopping_now:
            with contextlib.suppress(StorageError):  # logged inside; never block a shutdown
                await self.save_update_models()
        if self._leader is not None:
            await self._leader.release()
        if self._fetcher is not None and self._own_fetcher:
            await self.host.run(self._fetcher.aclose())
        if self._loop_store is not None:
            await self.host.run(self._loop_store.close())
            self._loop_store = None
        await self.host.stop()
        if self._store is not None and self._own_store:
            await self._store.close()
            self._store = None
        log.info("service_stopped")

    def stop_now(self) -> None:
        """Cut a running :meth:`stop` short (a second SIGTERM): stop waiting for the writer's
        backlog and skip what may wait on the database; the lease is still given up."""
        self._stopping_now = True
        if self._writer is not None:
            self.host.post(self._writer.stop_now)  # the writer's event belongs to the loop

    async def _load_clock(self, store: Store) -> ChrononClock:
        """The chronon origin persisted on first start, so numbering continues after a restart."""
        length = self.settings.chronon_seconds
        saved = await store.get_state(ORIGIN_KEY)
        now = dt.datetime.fromtimestamp(self._wall(), dt.UTC)
        if saved is None:
            origin = now
        else:
            origin = dt.datetime.fromisoformat(saved["origin"])
            if float(saved["length"]) != length:
                # A new chronon length: re-anchor so that numbering still only goes forward.
                old = ChrononClock(origin, float(saved["length"]), wall=self._wall)
                origin = now - dt.timedelta(seconds=(old.current() + 1) * length)
                log.warning("chronon_length_changed", old=saved["length"], new=length)
            else:
                await store.set_state(ORIGIN_KEY, saved)
                return ChrononClock(origin, length, wall=self._wall)
        await store.set_state(ORIGIN_KEY, {"origin": origin.isoformat(), "length": length})
        return ChrononClock(origin, length, wall=self._wall)

    def _start_housekeeping(self) -> None:
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        scheduler = AsyncIOScheduler(timezone=dt.UTC)
        if self.settings.retention_days > 0:
            scheduler.add_job(self.purge, "interval", hours=1, id="purge", coalesce=True,
                              max_instances=1, next_run_time=dt.datetime.now(dt.UTC))
        scheduler.add_job(self.refresh_feed_health, "interval", minutes=1, id="rollup",
                          coalesce=True, max_instances=1)
        scheduler.add_job(self.save_update_models, "interval", minutes=5, id="update-models",
                          coalesce=True, max_instances=1)
        scheduler.start()
        self._scheduler = scheduler

    async def save_update_models(self) -> None:
        """Persist every feed's update model (``service_state['update_models']``) and count kinds.

        Every five minutes and at shutdown: a restart resumes the learning where it
        stopped. The gauge ``proxy_update_models{kind}`` is refreshed at the same time.
        """
        rt = self.runtime

        def read() -> tuple[dict[str, int], Any]:  # on the loop's thread: it learns meanwhile
            kinds = rt.models.kind_counts(slot.resource for slot in rt.feeds.by_id.values())
            return {str(kind): n for kind, n in kinds.items()}, rt.models.snapshot()

        kinds, snapshot = await self.host.call(read)
        for name, n in kinds.items():
            self.metrics.update_models.labels(kind=name).set(n)
        try:
            await self.store.set_state(UPDATE_MODELS_KEY, snapshot)
        except StorageError as exc:
            self.metrics.db_errors.inc()
            log.error("update_models_not_saved", error=str(exc))
            raise

    async def _restore_models(self, store: Store, runtime: Runtime) -> None:
        data = await store.get_state(UPDATE_MODELS_KEY)
        if data is None:
            return
        try:
            runtime.models.restore(data)
        except UpdateModelStateError as exc:
            # Learnt state only: start learning afresh rather than refuse to start.
            log.warning("update_models_not_restored", reason=str(exc))
            return
        # The background ranking reads each feed's evidence from its slot: without this, every
        # feed would look unseen until its next probe, and the spare budget would go by the
        # rules' weights alone for the first hundreds of chronons after a restart.
        at = self.clock.now().timestamp()
        for slot in runtime.feeds.by_id.values():
            slot.learn_rate(runtime.models, at, self.clock)
        log.info("update_models_restored", feeds=len(runtime.models.feeds()))

    async def update_model(self, feed: Feed) -> FeedModelEstimate | None:
        """The feed's update model now (``None``: the leader does not probe this feed).

        The leader reads it on the loop's thread, where probes change it. A process that does
        not run the loop (an API replica, a standby) reads the models the leader saved last
        (every five minutes and at shutdown: :meth:`saved_models`), so its answer may be
        that much older; it never fails for want of a loop.
        """
        after = self.clock.now().timestamp()
        rt = self._runtime
        if rt is None:
            return (await self.saved_models()).estimate(feed.resource, after=after)

        return await self.host.call(lambda: _live_estimate(rt, feed.id, after))

    async def saved_models(self) -> FeedUpdateModels:
        """The update models as the leader last saved them (``service_state['update_models']``),
        read at most once every :data:`SAVED_MODELS_TTL_SECONDS`; the population prior alone if
        none are saved or they do not read (logged). For processes without a loop: read them,
        never change them (the copy is shared by the requests of the next minute)."""

        def fresh() -> FeedUpdateModels | None:
            cached = self._saved_models
            return cached[1] if cached is not None and time.monotonic() - cached[0] < SAVED_MODELS_TTL_SECONDS else None

        if (models := fresh()) is not None:
            return models
        async with self._saved_models_lock:  # one read at a time; the others take its result
            if (models := fresh()) is not None:
                return models
            data = await self.store.get_state(UPDATE_MODELS_KEY)
            models = FeedUpdateModels(self._update_model_settings
                                      or update_model_settings(self.settings.chronon_seconds))
            if data is not None:
                try:  # 10,000 feeds' records take a while to read: not on the API's event loop
                    await asyncio.to_thread(models.restore, data)
                except UpdateModelStateError as exc:
                    log.warning("saved_update_models_not_read", reason=str(exc))
            self._saved_models = (time.monotonic(), models)
            return models

    async def purge(self) -> None:
        """Retention: delete probes and uncaptured entries older than ``retention_days``, and
        notifications settled (delivered or dead letters) before then with their events;
        pending deliveries stay, however old."""
        cutoff = self.clock.now() - dt.timedelta(days=self.settings.retention_days)
        try:
            result = await self.store.purge_older_than(cutoff)
        except StorageError as exc:
            self.metrics.db_errors.inc()
            log.error("purge_failed", error=str(exc))
            return
        log.info("purged", probes=result.probes, entries=result.entries,
                 deliveries=result.deliveries, events=result.events, cutoff=cutoff.isoformat())

    async def refresh_feed_health(self) -> None:
        """Roll-up: reconcile disabled flags changed outside the loop (e.g. by an operator)."""
        try:
            feeds = await self.store.list_feeds()
        except StorageError as exc:
            self.metrics.db_errors.inc()
            log.error("rollup_failed", error=str(exc))
            return
        rt = self._runtime
        if rt is None:
            return  # stepped down meanwhile

        def apply() -> None:
            for feed in feeds:
                slot = rt.feeds.by_id.get(feed.id)
                if slot is not None:
                    slot.disabled = feed.disabled
                    rt.feeds.note(slot)

        await self.host.call(apply)

    # ------------------------------------------------------------------ feeds

    async def register_feed(self, user_id: int, url: str) -> tuple[RegisteredFeed, bool]:
        """Register a feed URL for a user (SSRF-checked unless private networks are allowed).

        Returns ``(feed, created)``; ``created`` is whether the *user's* registration is new.
        Users who register the same (normalised) URL share one feed, fetched once per probe.
        """
        if self._replica:
            url = url.strip()
            await self.fetcher.check_url(url)
            registered, created = await self.store.register_feed_for(user_id, url)
            await self._forward(Change("feed", registered.feed.id))
            return registered, created
        self._require_leader()
        url = url.strip()
        await self.fetcher.check_url(url)
        registered, created = await self.store.register_feed_for(user_id, url)
        feed = registered.feed
        if feed.id not in self.runtime.feeds.by_id:
            log.info("feed_added", feed=feed.id, url=redact_url(feed.url), resource=feed.resource)
        await self.host.call(self._put_feeds, [feed])
        if created:
            log.info("feed_registered", feed=feed.id, user=user_id)
        return registered, created

    async def register_feeds(
        self, user_id: int, urls: list[str]
    ) -> list[tuple[RegisteredFeed, bool] | FeedUrlRefusedError]:
        """:meth:`register_feed` of many URLs (an OPML import), in order: each URL's
        ``(feed, created)``, or the :class:`FeedUrlRefusedError` that refused it. The SSRF
        checks run concurrently (bounded: they may resolve host names), the accepted URLs
        are stored in one transaction."""
        self._require_leader()
        gate = asyncio.Semaphore(32)

        async def check(url: str) -> FeedUrlRefusedError | None:
            async with gate:
                try:
                    await self.fetcher.check_url(url)
                except FeedUrlRefusedError as exc:
                    return exc
                return None

        refusals = await asyncio.gather(*(check(url.strip()) for url in urls))
        accepted = [url.strip() for url, refused in zip(urls, refusals, strict=True) if refused is None]
        stored = await self.store.register_feeds_for(user_id, accepted) if accepted else []
        await self.host.call(self._put_feeds, [registered.feed for registered, _ in stored])
        rows = iter(stored)
        out: list[tuple[RegisteredFeed, bool] | FeedUrlRefusedError] = []
        added = 0
        for refused in refusals:
            if refused is not None:
                out.append(refused)
                continue
            registered, created = next(rows)
            added += created
            out.append((registered, created))
        log.info("feeds_registered", user=user_id, added=added, given=len(urls))
        return out

    async def delete_feed(self, user_id: int, feed_id: int) -> None:
        """Delete the user's registration (:class:`ConflictError` while their rules read it);
        the shared feed leaves the engine with its last registration."""
        if self._replica:
            if await self.store.delete_registration(user_id, feed_id):
                await self._forward(Change("feed_deleted", feed_id))
            return
        self._require_leader()

        async def delete() -> bool:  # on the loop's thread: not while a write round runs,
            async with self._lock:  # their row locks would deadlock
                gone = await self.loop_store.delete_registration(user_id, feed_id)
            if gone:
                self.runtime.feeds.remove(feed_id)
            return gone

        gone = await self.host.run(delete())
        if gone:
            self._ping_buckets.forget(feed_id)
        log.info("feed_unregistered", feed=feed_id, user=user_id, feed_deleted=gone)

    async def rotate_ping_token(self, user_id: int, feed_id: int) -> Registration:
        """A new ping token for the user's registration; the old one stops working."""
        if not self._replica:  # a token lives in the database only: any replica rotates it
            self._require_leader()
        registration = await self.store.rotate_ping_token(user_id, feed_id)
        log.info("ping_token_rotated", feed=feed_id, user=user_id)
        return registration

    async def ping(self, feed_id: int, token: str) -> int:
        """An update notification for the feed, authenticated by a registration's ping token;
        returns CEIs touched.

        The token says whose registration is pinging, and only that user's rules hear
        it (issue 22: one user's token must not open CEIs for another user's rules).
        The proxy still has to fetch: a ping only opens or grows CEIs (rules with
        ``on: ping`` and watch rules); the loop schedules the probes. Authenticated
        pings of one feed are rate-limited by a token bucket (:class:`RateLimitedError`
        with the seconds to wait), whoever sends them: a flood on one feed cannot open
        CEIs that spend the budget other feeds' rules need.
        """
        if not self._replica:
            self._require_leader()
        s = self.settings
        users = await self.store.ping_users(feed_id, token) if token else []
        if not users:
            if self._replica:
                await self.store.get_feed(feed_id)  # FeedNotFoundError
            elif feed_id not in self.runtime.feeds.by_id:
                raise FeedNotFoundError(feed_id)
            raise AuthError("wrong or missing ping token for this feed")
        wait = self._ping_buckets.take(feed_id)
        if wait:
            self.metrics.pings.labels(outcome="rate_limited").inc()
            raise RateLimitedError(
                f"too many pings for feed {feed_id}: at most {s.ping_burst} at once and "
                f"{s.ping_rate_per_minute:g} per minute (PROXY_PING_BURST, "
                f"PROXY_PING_RATE_PER_MINUTE); retry in {wait:.1f} s", wait)
        self.metrics.pings.labels(outcome="accepted").inc()
        if self._replica:
            # The leader applies it when the notification arrives: how many CEIs it touches is
            # not known here (0).
            await self._forward(Change("ping", feed_id, users=tuple(users)))
            return 0
        return await self._apply_ping(feed_id, users)

    async def _apply_ping(self, feed_id: int, users: list[int]) -> int:
        """A ping authenticated as ``users``: the evaluator hears it for their profiles."""
        profiles = {str(pid) for pid in await self.store.profile_ids_of(users)}
        return await self.host.call(self._hear_ping, feed_id, profiles, users)

    def _hear_ping(self, feed_id: int, profiles: set[str], users: list[int]) -> int:
        """On the loop's thread: the evaluator hears the ping; returns the ops it caused."""
        rt = self._require_leader()
        slot = rt.feeds.by_id.get(feed_id)
        if slot is None:
            raise FeedNotFoundError(feed_id)
        ops = rt.evaluator.on_notification(slot.resource, rt.engine.now, profiles)
        at = self.clock.now().timestamp()
        if rt.models.observe_ping(slot.resource, at) and rt.models.trusts_pings(slot.resource):
            slot.learn_rate(rt.models, at, self.clock)  # the ping taught the model (a feed that pings every update)
        steps = rt.apply(ops)
        steps += rt.drain_all()
        steps += rt.rule_states()
        self._submit(steps)
        log.info("ping", feed=feed_id, users=users, chronon=rt.engine.now, ops=len(ops))
        return len(ops)

    # ------------------------------------------------------------------ profiles

    async def create_profile(self, user_id: int, spec: ProfileSpec) -> Profile:
        """Validate feed ids (422 naming ``rules.N.….feed``), store, then install in the evaluator."""
        changes = self.profile_changes
        if self._replica:
            await self._check(user_id, spec)
            async with changes.changing(user_id):
                profile = await self.store.create_profile(
                    user_id, spec.name, _rule_inputs(spec), *_profile_notify(spec))
                changes.announce(ProfileChanged(user_id, "created", profile.id, profile))
            await self._forward(Change("profile", profile.id, user_id))
            return profile
        self._require_leader()
        await self._check(user_id, spec)
        async with changes.changing(user_id):
            if self.store.engine.dialect.name == "sqlite":
                new = NewProfile(user_id, spec.name, tuple(_rule_inputs(spec)),
                                 *_profile_notify(spec))
                profile = await self.host.run(self._create_in_turn(new))
            else:
                # PostgreSQL: stored first, by the API's own store and with no lock: new rows
                # that no write round touches (its rules have no CEI yet), so creates do not
                # queue behind the loop's writer nor each other (issue 24.4). Then the loop's
                # thread installs it.
                profile = await self.store.create_profile(
                    user_id, spec.name, _rule_inputs(spec), *_profile_notify(spec))
                try:
                    await self.host.call(self._install_newer, profile)
                except Exception:
                    await self.store.delete_profile(user_id, profile.id)
                    raise
            changes.announce(ProfileChanged(user_id, "created", profile.id, profile))
        log.info("profile_created", profile=profile.id, user=user_id, rules=len(profile.rules))
        return profile

    async def replace_profile(self, user_id: int, profile_id: int, spec: ProfileSpec) -> Profile:
        """Replace a profile's name and rules; its open CEIs are sealed at their current rank."""
        changes = self.profile_changes
        if self._replica:
            await self.store.get_profile(user_id, profile_id)
            await self._check(user_id, spec)
            async with changes.changing(user_id):
                profile = await self.store.replace_profile(
                    user_id, profile_id, spec.name, _rule_inputs(spec), *_profile_notify(spec))
                changes.announce(ProfileChanged(user_id, "replaced", profile.id, profile))
            await self._forward(Change("profile", profile.id, user_id))
            return profile
        self._require_leader()
        # Another user's profile is 404 before anything about its body (feeds) is said.
        await self.store.get_profile(user_id, profile_id)
        await self._check(user_id, spec)

        async def replace() -> Profile:
            # On the loop's thread, under the writer's lock: the old rules' rows are the ones a
            # round writes states and CEIs for (PostgreSQL would deadlock the two); one replace
            # at a time, so the evaluator ends with the rules the database ends with.
            async with self._lock:
                profile = await self.loop_store.replace_profile(
                    user_id, profile_id, spec.name, _rule_inputs(spec), *_profile_notify(spec))
                self._install(profile)
            return profile

        async with changes.changing(user_id):
            profile = await self.host.run(replace())
            changes.announce(ProfileChanged(user_id, "replaced", profile.id, profile))
        log.info("profile_replaced", profile=profile.id, user=user_id, rules=len(profile.rules))
        return profile

    async def _create_in_turn(self, new: NewProfile) -> Profile:
        """Store and install a profile on the loop's thread, under the writer's lock (SQLite).

        SQLite takes one writer at a time: the others poll for its lock, sleeping longer
        each time they find it taken. Creates on the API's store polled against the loop's
        write rounds and against each other, and each of their statements waited its turn
        on the API's busy event loop while holding the lock (mixed phase: a create's p99
        555 ms, a write round's 542 ms). Here creates and rounds take turns in order, and
        the first create to get the lock stores every create queued by then in one
        transaction of three statements (:meth:`Store.create_profiles`)."""
        mine: asyncio.Future[Profile] = asyncio.get_running_loop().create_future()
        self._queued_creates.append((new, mine))
        try:
            async with self._lock:
                if not mine.done():
                    batch, self._queued_creates = self._queued_creates, []
                    await self._create_batch(batch)
        except asyncio.CancelledError:
            self._queued_creates = [(n, f) for n, f in self._queued_creates if f is not mine]
            raise
        return mine.result()

    async def _create_batch(self, batch: list[tuple[NewProfile, asyncio.Future[Profile]]]) -> None:
        """Store the profiles in one transaction, install them, and answer each create; if
        one is refused, each on its own (to tell which). Every create is answered."""
        try:
            try:
                profiles = await self.loop_store.create_profiles([new for new, _ in batch])
            except Exception as error:
                if len(batch) == 1:
                    batch[0][1].set_exception(error)
                else:
                    for item in batch:
                        await self._create_batch([item])
                return
            for (new, done), profile in zip(batch, profiles, strict=True):
                try:
                    self._install(profile)
                except Exception as error:  # stored, not installed: not created after all
                    done.set_exception(error)
                    try:
                        await self.loop_store.delete_profile(new.user_id, profile.id)
                    except Exception:
                        log.exception("profile_not_removed", profile=profile.id, user=new.user_id)
                else:
                    done.set_result(profile)
        finally:
            for _, done in batch:
                if not done.done():
                    done.set_exception(StorageError("the create was interrupted", unavailable=True))

    def profiles_version(self, user_id: int) -> int:
        """A number that changes whenever this process changes the user's profiles."""
        return self.profile_changes.version(user_id)

    async def _check(self, user_id: int, spec: ProfileSpec) -> None:
        """Everything that can refuse a profile, before anything is stored (a 422 loses nothing):
        feed ids (only feeds the user registered: another user's feed is as unknown as a
        missing one), then compiling it in a scratch evaluator (regexes, cron, durations)."""
        if self._replica:  # no engine here: the feeds as stored, the clock as read at start
            feeds = FeedTable()
            for feed in await self.store.list_feeds():
                feeds.put(feed)
            clock: ChrononMapping = self.clock
        else:
            feeds, clock = self.runtime.feeds, self.runtime.clock
        check_feeds(spec, feeds, await self.store.registered_feed_ids(user_id))
        TriggerEvaluator(clock).add_profile("check", spec, feeds.resource_of)
        # Notify targets: the feeds' SSRF guard for webhooks (issue 19), Apprise's parser.
        targets = [(f"notify.{i}.{t.kind}", t.kind, t.url) for i, t in enumerate(spec.notify or ())]
        for r, rule in enumerate(spec.rules):
            targets += [(f"rules.{r}.notify.{i}.{t.kind}", t.kind, t.url)
                        for i, t in enumerate(rule.notify or ())]
        if targets:
            policy = fetcher_settings(self.settings).address_policy
            await check_targets(targets, policy, SystemResolver())

    async def delete_profile(self, user_id: int, profile_id: int) -> None:
        changes = self.profile_changes
        if self._replica:
            async with changes.changing(user_id):
                await self.store.delete_profile(user_id, profile_id)
                changes.announce(ProfileChanged(user_id, "deleted", profile_id))
            await self._forward(Change("profile_deleted", profile_id, user_id))
            return
        self._require_leader()

        async def delete() -> None:  # on the loop's thread, under the writer's lock (replace)
            async with self._lock:
                await self.loop_store.delete_profile(user_id, profile_id)
                self._uninstall(profile_id)

        async with changes.changing(user_id):
            await self.host.run(delete())
            changes.announce(ProfileChanged(user_id, "deleted", profile_id))
        log.info("profile_deleted", profile=profile_id, user=user_id)

    async def profile_status(self, user_id: int, profile_id: int) -> ProfileStatus:
        """Where each rule of the user's profile stands and what it waits for (docs/api.md,
        "Rule status"). The loop's holder reads the rules' states and the feeds' models on the
        loop's thread; a process without the loop reads the states as last stored (the writer
        stores each change within a round) and the models the leader saved last."""
        return await self.status_of(await self.store.get_profile(user_id, profile_id))  # 404 for another's

    async def status_of(self, profile: Profile) -> ProfileStatus:
        """:meth:`profile_status` of a profile already read (its owner's, so checked)."""
        user_id, profile_id = profile.user_id, profile.id
        feeds = {r.feed.id: r for r in await self.store.registered_feeds(
            user_id, {f for rule in profile.rules for f in rule.feed_ids})}
        pending = await self.store.list_ceis(user_id, profile_id, "pending", limit=STATUS_PENDING_CEIS)
        now = self.clock.now()
        after = now.timestamp()
        rt = self._runtime
        if rt is None:
            saved = await self.saved_models()
            models: dict[int, FeedModelEstimate | None] = {
                fid: saved.estimate(reg.feed.resource, after=after) for fid, reg in feeds.items()}
            return profile_status(profile, {r.id: r.state for r in profile.rules}, feeds, models,
                                  self.clock, now, "saved", pending)

        def read() -> tuple[dict[int, Any], dict[int, FeedModelEstimate | None]]:
            states: dict[int, Any] = {}
            for rule in profile.rules:
                try:
                    states[rule.id] = rt.evaluator.snapshot_state(rule_key(rule.id))
                except KeyError:  # not installed (yet, or its profile did not restore)
                    states[rule.id] = None
            return states, {fid: _live_estimate(rt, fid, after) for fid in feeds}

        states, models = await self.host.call(read)
        return profile_status(profile, states, feeds, models, self.clock, now, "live", pending)

    # ------------------------------------------------------------------ replicas (issue 21)

    @property
    def _replica(self) -> bool:
        """An API replica (``--role api``): changes go to the database, then to the leader."""
        return not self._campaign

    async def _forward(self, change: Change) -> None:
        """Tell the leading scheduler (LISTEN/NOTIFY, :mod:`proxy.service.changes`)."""
        await self.store.notify(CHANNEL, change.encode())
        log.info("change_forwarded", kind=change.kind, id=change.id)

    async def _apply_change(self, change: Change) -> None:
        """A replica's change, on the leader: as if this process's own API had made it."""
        rt = self._runtime
        if rt is None:
            return  # stepped down meanwhile: the next leader restores from the database
        if change.kind == "feed":
            await self.host.call(self._put_feeds, [await self.store.get_feed(change.id)])
        elif change.kind == "feed_deleted":
            try:
                await self.store.get_feed(change.id)
            except FeedNotFoundError:
                await self.host.call(self._remove_feed, change.id)
        elif change.kind == "ping":
            await self._apply_ping(change.id, list(change.users))
        elif change.kind == "profile" and change.user is not None:
            profile = await self.store.get_profile(change.user, change.id)
            if not await self.host.call(self._install_newer, profile):
                return  # what runs is this version already (a resync got it first)
        elif change.kind == "profile_deleted":
            await self.host.call(self._uninstall, change.id)
        log.info("change_applied", kind=change.kind, id=change.id)

    async def _resync(self) -> None:
        """What the leader runs, made equal to the database after notifications may have been
        missed (:mod:`proxy.service.changes`): feeds by id; profiles by ``updated_at``,
        installed when new or changed, removed when gone. Rules whose profile did not change
        keep their state. What this process's own API changes meanwhile is not undone: a
        profile or feed is removed only if it is still absent from a second read (ids are
        never used twice, so one absent after it ran here is gone for good)."""
        if self._runtime is None:
            return
        feeds = await self.store.list_feeds()
        versions = await self.store.profile_versions()

        def diff() -> tuple[list[Feed], list[int], list[int], list[int]]:
            """(feeds to add, profiles to install, feeds and profiles that may be gone)."""
            rt = self._require_leader()
            held = set(rt.feeds.by_id)
            stored = {feed.id for feed in feeds}
            stale = sorted(pid for pid, (_, at) in versions.items() if rt.versions.get(pid) != at)
            return ([f for f in feeds if f.id not in held], stale, sorted(held - stored),
                    sorted(set(rt.versions) - set(versions)))

        added, stale, feeds_gone, profiles_gone = await self.host.call(diff)
        if added:
            await self.host.call(self._put_feeds, added)
        installed = 0
        for pid in stale:
            user, _ = versions[pid]
            try:
                profile = await self.store.get_profile(user, pid)
                installed += await self.host.call(self._install_newer, profile)
            except ProfileNotFoundError:
                continue  # deleted meanwhile: its own notification follows
            except (ValidationError, ValueError) as exc:
                log.error("profile_not_installed", profile=pid, reason=str(exc))
        if profiles_gone:
            again = await self.store.profile_versions()
            profiles_gone = [pid for pid in profiles_gone if pid not in again]
            for pid in profiles_gone:
                await self.host.call(self._uninstall, pid)
        if feeds_gone:
            again_feeds = {feed.id for feed in await self.store.list_feeds()}
            feeds_gone = [fid for fid in feeds_gone if fid not in again_feeds]
            for fid in feeds_gone:
                await self.host.call(self._remove_feed, fid)
        if added or installed or profiles_gone or feeds_gone:
            log.info("changes_resynced", feeds_added=len(added), feeds_removed=len(feeds_gone),
                     profiles_installed=installed, profiles_removed=len(profiles_gone))

    # ------------------------------------------------------------------ delivery

    def _resolved_elsewhere(self) -> None:
        """The writer (on the loop's thread) stored resolutions: wake whom :meth:`_resolved`
        wakes, on the API's event loop (their events belong to it)."""
        if self._api_loop is not None:
            with contextlib.suppress(RuntimeError):  # closed meanwhile: nobody left to wake
                self._api_loop.call_soon_threadsafe(self._resolved)

    def _resolved(self) -> None:
        """The writer stored resolutions: wake the dispatcher and the event streams."""
        if self._dispatcher is not None:
            self._dispatcher.wake()
        changed, self._events_changed = self._events_changed, asyncio.Event()
        changed.set()

    def events_changed(self) -> asyncio.Event:
        """An event set at the next stored resolution: take it BEFORE reading the events
        table, then wait on it, so nothing stored in between is slept through."""
        return self._events_changed

    async def stream_events(
        self, user_id: int, after: int
    ) -> AsyncIterator[NotificationEvent | None]:
        """The user's events with ids above ``after``, then each new one as it is stored, for
        ever; ``None`` after ``sse_keepalive_seconds`` without one (send a keep-alive).

        Read from the events table, so a client that reconnects with the last id it saw
        gets every later event once (ids grow in commit order: one writer stores them)."""
        last = after
        while True:
            changed = self.events_changed()
            events = await self.store.events_after(user_id, last)
            for event in events:
                last = event.id
                yield event
            if events:
                continue
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation
                # that comes as the event is set (the writer sets it from the loop's thread).
                async with asyncio.timeout(self.settings.sse_keepalive_seconds):
                    await changed.wait()
            except TimeoutError:
                yield None

    async def retry_delivery(self, user_id: int, delivery_id: int) -> Delivery:
        """Send a (failed) delivery again now, with a fresh retry window."""
        delivery = await self.store.retry_delivery(user_id, delivery_id)
        if self._dispatcher is not None:
            self._dispatcher.wake()
        log.info("delivery_retry_requested", delivery=delivery_id, user=user_id)
        return delivery

    async def rotate_target_secret(
        self, user_id: int, target_id: int, overlap_seconds: float | None = None
    ) -> NotifyTarget:
        """A new webhook secret (shown once); the old one also signs for the overlap."""
        seconds = (self.settings.webhook_secret_overlap_seconds
                   if overlap_seconds is None else overlap_seconds)
        target = await self.store.rotate_target_secret(
            user_id, target_id, dt.timedelta(seconds=seconds))
        log.info("target_secret_rotated", target=target_id, user=user_id, overlap=seconds)
        return target

    async def enable_target(self, user_id: int, target_id: int) -> NotifyTarget:
        target = await self.store.enable_target(user_id, target_id)
        log.info("target_enabled", target=target_id, user=user_id)
        return target

    # ------------------------------------------------------------------ planning

    async def plan(
        self, user_id: int, *, target: float, horizon: int, futures: int, seed: int = 0
    ) -> PlanReport:
        """The budget plan of the user's own profiles (docs/plan.md): the expected completeness at
        the configured budget, and the least budget that reaches ``target``, if the budget served
        these profiles alone (it is shared: the operator's ``proxy plan`` plans every profile).

        Reads the running service's update models from chronon ``now`` for ``horizon`` chronons
        (a process without the loop: those the leader saved last, :meth:`saved_models`); the
        simulation runs in a worker thread on copies, one plan at a time.
        """
        profiles = await self.store.list_profiles(user_id)
        rt = self._runtime
        if rt is None:
            models = await self.saved_models()
            resources = {f.id: f.resource for f in await self.store.list_feeds()}
            inputs = plan_inputs(profiles, resources, models, self.clock, self.clock.current(), horizon)
        else:
            def read() -> PlanInputs:  # on the loop's thread: the models learn there
                resources = {fid: slot.resource for fid, slot in rt.feeds.by_id.items()}
                return plan_inputs(profiles, resources, rt.models, rt.clock, self.clock.current(),
                                   horizon)

            inputs = await self.host.call(read)
        s = self.settings
        async with self._plan_lock:
            report = await asyncio.to_thread(run_plan, inputs, budget=s.budget, target=target,
                                             policy=s.policy, futures=futures, seed=seed)
        log.info("plan", user=user_id, profiles=inputs.profiles, rules=len(inputs.rules),
                 horizon=horizon, futures=futures, seconds=round(report.seconds, 3))
        return report

    # ------------------------------------------------------------------ status

    def _require_leader(self) -> Runtime:
        """The runtime, or :class:`StandbyError`: only the loop's holder changes feeds and
        profiles (its engine and evaluator are the ones that must see the change)."""
        if self._runtime is None:
            seen = self._leader.seen if self._leader is not None else None
            raise StandbyError(
                f"this process is a standby ({_describe_lease(seen)}): send changes to the "
                f"process whose /readyz answers 200", seen.holder if seen else None)
        return self._runtime

    async def status(self) -> ServiceStatus:
        """Database reachable, the loop ticking (a tick within the last three chronons) and
        the writer keeping up (its oldest batch younger than ``PROXY_WRITE_LAG_READY_SECONDS``);
        ``role`` says whether this process leads or stands by. ``detail`` names each thing
        unavailable (:mod:`proxy.service.health`); a driver's error goes to the log only."""
        problems: list[str] = []
        try:
            # Bounded: a database that does not answer must not hang the health check.
            await asyncio.wait_for(self.store.ping(), READY_PING_SECONDS)
            database = True
        except (StorageError, TimeoutError) as exc:
            self.metrics.db_errors.inc()
            log.warning("readiness_database_down", error=str(exc) or type(exc).__name__)
            database = False
            problems.append(health.database_down())
        loop = self._loop
        last = loop.last_tick if loop is not None else None
        since = None if last is None else time.monotonic() - last
        ticking = bool(
            self._run_loop
            and since is not None
            and since < max(3 * self.settings.chronon_seconds, 1.0)
        )
        writer = self._writer
        lag = writer.lag() if writer is not None else 0.0
        writing = lag <= self.settings.write_lag_ready_seconds
        leader = self._leader
        role: Literal["leader", "standby", "api"] = "leader" if self.leading else "standby"
        if not self._campaign:
            role = "api"  # an API replica (issue 21): never runs the loop nor writes its decisions
        if role == "leader":
            if self._run_loop and not ticking:
                problems.append(health.loop_stalled(since))
            if not writing:
                problems.append(health.writes_lagging(
                    lag, self.settings.write_lag_ready_seconds, writer.backlog if writer else 0))
        if role == "standby" and not problems:
            problems.append(
                f"standby: {_describe_lease(leader.seen if leader is not None else None)}")
        lease = leader.lease if leader is not None else None
        return ServiceStatus(
            database=database,
            ticking=ticking,
            chronon=loop.current if loop is not None else None,
            inflight=loop.inflight if loop is not None else 0,
            backlog=writer.backlog if writer is not None else 0,
            detail="; ".join(problems),
            role=role,
            epoch=lease.epoch if lease is not None else None,
            writing=writing,
            write_lag=round(lag, 3),
        )

    def liveness(self) -> str | None:
        """``None`` while alive; else why not: this process runs the chronon loop and the loop
        has not ticked for five chronons (at least 30 s). A standby, or a process still
        restoring, is alive. No database call: a database outage is not a reason to restart."""
        loop = self._loop
        if not self._run_loop or loop is None or loop.last_tick is None or not self.leading:
            return None
        since = time.monotonic() - loop.last_tick
        if since > max(5 * self.settings.chronon_seconds, 30.0):
            return health.loop_not_live(since)
        return None

    async def flush(self) -> None:
        """Wait until every decision so far is in the database (tests, shutdown)."""
        if self._writer is not None:
            await self.host.run(self._writer.flush())

    # ------------------------------------------------------------------ on the loop's thread

    def _submit(self, steps: list[Step]) -> None:
        if self._writer is not None:
            self._writer.submit(steps)

    def _put_feeds(self, feeds: list[Feed]) -> None:
        rt = self._require_leader()
        for feed in feeds:
            rt.feeds.put(feed)

    def _install(self, profile: Profile) -> None:
        """A stored profile into the evaluator; its steps go to the writer in the same turn."""
        self._submit(self._require_leader().install(profile, restore_states=False))

    def _install_newer(self, profile: Profile) -> bool:
        """:meth:`_install` unless this very version runs already; whether it installed."""
        if self._require_leader().versions.get(profile.id) == profile.updated_at:
            return False
        self._install(profile)
        return True

    def _remove_feed(self, feed_id: int) -> None:
        rt = self._runtime
        if rt is not None:
            rt.feeds.remove(feed_id)

    def _uninstall(self, profile_id: int) -> None:
        rt = self._runtime
        if rt is not None:  # a standby has nothing installed
            self._submit(rt.uninstall(profile_id))


async def _open_prober(s: Settings) -> Prober:
    """The service's own prober, opened on the event loop that will probe with it."""
    if s.probe_processes:
        pool = ProbePool(fetcher_settings(s), processes=s.probe_processes)
        await pool.__aenter__()
        return pool
    fetcher = Fetcher(fetcher_settings(s))
    await fetcher.__aenter__()
    return fetcher


@dataclass(frozen=True, slots=True)
class _LeasesOnLoop:
    """The lease's statements run on the chronon loop's event loop with its store, where no
    API handler delays them. The :class:`Leader` itself stays on the API's event loop, with
    the service it drives.

    ``turns``: on SQLite, the writer's lock. SQLite takes one writer at a time and makes the
    others poll for its lock (sleeping longer each time they find it taken): after a restore
    of 100,000 profiles the writer's rounds followed each other for tens of seconds, each
    renewal found the lock taken until its 5 s busy timeout, and the process lost its lease
    on a quiet machine. Under the writer's lock a renewal waits for one round at most, in
    turn. (PostgreSQL's renewals do not wait for the rounds: ``None``.)"""

    store: Store
    host: LoopHost
    turns: asyncio.Lock | None = None

    async def acquire_lease(self, name: str, holder: str, *, now: dt.datetime,
                            ttl: float) -> Lease | None:
        return await self.host.run(self.store.acquire_lease(name, holder, now=now, ttl=ttl))

    async def renew_lease(self, lease: Lease, *, now: dt.datetime, ttl: float) -> Lease | None:
        async def renew() -> Lease | None:
            if self.turns is None:
                return await self.store.renew_lease(lease, now=now, ttl=ttl)
            async with self.turns:
                return await self.store.renew_lease(lease, now=now, ttl=ttl)

        return await self.host.run(renew())

    async def release_lease(self, lease: Lease, *, now: dt.datetime) -> bool:
        return await self.host.run(self.store.release_lease(lease, now=now))

    async def current_lease(self, name: str) -> Lease | None:
        return await self.host.run(self.store.current_lease(name))


@dataclass(frozen=True, slots=True)
class _ProbeAtHome:
    """An injected prober (a broker client, a test's fetcher) belongs to the event loop it
    was opened on: the loop's thread sends its probes there and awaits the results."""

    prober: Prober
    home: asyncio.AbstractEventLoop

    async def probe(self, state: FeedState, known: KnownEntries, *, now: dt.datetime) -> ProbeResult:
        future = asyncio.run_coroutine_threadsafe(
            self.prober.probe(state, known, now=now), self.home)
        return await asyncio.wrap_future(future)

    async def check_url(self, url: str) -> None:
        await self.prober.check_url(url)

    async def aclose(self) -> None:  # its owner closes it
        return None


def _live_estimate(rt: Runtime, feed_id: int, after: float) -> FeedModelEstimate | None:
    """Feed ``feed_id``'s update model in the running loop (``None``: the loop does not probe
    it); call on the loop's thread, where probes change the models."""
    slot = rt.feeds.by_id.get(feed_id)
    return None if slot is None else rt.models.estimate(slot.resource, after=after)


def _targets(notify: list[NotifySpec] | None) -> tuple[TargetInput, ...] | None:
    if notify is None:
        return None
    return tuple(TargetInput(t.kind, t.url, tuple(t.events)) for t in notify)


def _profile_notify(spec: ProfileSpec) -> tuple[tuple[TargetInput, ...] | None, Any]:
    """The profile's default targets, and as submitted (JSON) for reading it back."""
    as_json = None if spec.notify is None else [
        t.model_dump(mode="json", exclude_none=True) for t in spec.notify]
    return _targets(spec.notify), as_json


def _rule_inputs(spec: ProfileSpec) -> list[RuleInput]:
    return [
        RuleInput(rule.name, rule.model_dump(mode="json", exclude_none=True), rule_feed_ids(spec, i),
                  _targets(rule.notify))
        for i, rule in enumerate(spec.rules)
    ]


def _describe_lease(lease: Lease | None) -> str:
    """Who runs the loop, for messages: holder, epoch and expiry of the lease as last read."""
    if lease is None or lease.holder is None:
        return f"the {LOOP_LEASE} lease is free; this process will take it"
    return (f"{LOOP_LEASE} lease held by {lease.holder}, epoch {lease.epoch}, "
            f"until {lease.expires_at.isoformat(timespec='seconds')} unless renewed")
