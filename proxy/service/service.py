"""``ProxyService``: the facade the API calls, over rooms of one purpose each (issue 46).

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
loop's thread, under the writer's lock, and so do profile creates on SQLite.

The work is done by the rooms, each a class in a module of its own that receives
the service's :class:`~proxy.service._shared.Shared` state; this class only builds
them and delegates. Where a new kind of change goes:

=====================================  ====================================================
room                                   holds
=====================================  ====================================================
:mod:`~proxy.service._lifecycle`       start, lead, stand by, step down, stop; the lease
:mod:`~proxy.service._housekeeping`    the leader's periodic jobs (retention, roll-up)
:mod:`~proxy.service._update_models`   update models saved, restored, read anywhere
:mod:`~proxy.service._registrations`   users' feeds: register, delete, ping tokens
:mod:`~proxy.service._arrivals`        updates that arrive: pings, WebSub pushes
:mod:`~proxy.service._websub`          WebSub subscriptions' lifecycle; the hubs' callbacks
:mod:`~proxy.service._profiles`        users' profiles: create, replace, delete, status
:mod:`~proxy.service._replication`     API replicas' changes forwarded to, applied by, the leader
:mod:`~proxy.service._deliveries`      event streams; deliveries' and targets' operations
:mod:`~proxy.service._reads`           readiness, liveness, plans, flush
:mod:`~proxy.service._dry_run`         a rule tried on its feeds' documents (dry run)
=====================================  ====================================================

What it does not do: speak HTTP (``proxy.api``) or parse settings (``proxy.settings``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from proxy.feeds import FeedUrlRefusedError, Prober
from proxy.notify.senders import Sender
from proxy.rules import (
    FeedModelEstimate,
    FeedUpdateModels,
    ProfileSpec,
    RuleSpec,
    UpdateModelSettings,
)
from proxy.service._arrivals import Arrivals
from proxy.service._deliveries import Deliveries
from proxy.service._dry_run import DryRuns, RuleTrial
from proxy.service._host import LoopHost
from proxy.service._housekeeping import Housekeeping
from proxy.service._lifecycle import ORIGIN_KEY, SQLITE_ROUND_SECONDS, SUCCESS_OUTCOMES, Lifecycle
from proxy.service._persist import Writer
from proxy.service._profile_changes import ProfileChanges
from proxy.service._profiles import STATUS_PENDING_CEIS, Profiles
from proxy.service._reads import READY_PING_SECONDS, Reads, ServiceStatus
from proxy.service._registrations import Registrations
from proxy.service._replication import Replication
from proxy.service._shared import Shared, fetcher_settings
from proxy.service._update_models import SAVED_MODELS_TTL_SECONDS, UPDATE_MODELS_KEY, UpdateModels
from proxy.service._websub import CallbackAnswer, PushStatus, WebSub
from proxy.service.changes import ChangeListener
from proxy.service.clock import ChrononClock
from proxy.service.leader import Leader
from proxy.service.loop import ChrononLoop
from proxy.service.metrics import ServiceMetrics
from proxy.service.planning import PlanReport
from proxy.service.rule_status import ProfileStatus
from proxy.service.runtime import Runtime
from proxy.settings import Settings
from proxy.store import (
    Delivery,
    Feed,
    NewProfile,
    NotificationEvent,
    NotifyTarget,
    Profile,
    RegisteredFeed,
    Registration,
    Store,
)

# Re-exported: the CLI reads the saved state by these keys, the API builds a fetcher's settings.
__all__ = [
    "ORIGIN_KEY",
    "READY_PING_SECONDS",
    "SAVED_MODELS_TTL_SECONDS",
    "SQLITE_ROUND_SECONDS",
    "STATUS_PENDING_CEIS",
    "SUCCESS_OUTCOMES",
    "UPDATE_MODELS_KEY",
    "ProxyService",
    "ServiceStatus",
    "fetcher_settings",
]


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
        #: Where the chronon loop runs: its own thread, or (tests that tick by hand) here.
        self.host = LoopHost(threaded=run_loop and campaign and settings.loop_thread)
        self._s = shared = Shared(settings, self.metrics, self.host, store=store, fetcher=fetcher,
                                  wall=wall, run_loop=run_loop, campaign=campaign,
                                  update_models=update_models)
        #: Every change of a user's profiles by this process, announced once stored: the API's
        #: listing pages are amended with them and its summaries key on their version, so a
        #: client reads its own writes at once (proxy/api/_cache.py).
        self.profile_changes = ProfileChanges()
        self._models = UpdateModels(shared)
        self._deliveries = Deliveries(shared)
        self._arrivals = Arrivals(shared)
        self._replication = Replication(shared, self._arrivals)
        self._housekeeping = Housekeeping(shared, self._models)
        self._lifecycle = Lifecycle(
            shared, self._models, self._deliveries, self._replication, self._housekeeping,
            own_store=store is None, own_fetcher=fetcher is None, run_housekeeping=housekeeping,
            use_lease=run_loop if lease is None else lease, sender=sender, deliver=deliver)
        self._registrations = Registrations(shared, self._arrivals)
        self._profiles = Profiles(shared, self._models, self.profile_changes)
        self._reads = Reads(shared, self._models)
        self._dry_runs = DryRuns(shared)
        self._websub = WebSub(shared, self._arrivals)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ProxyService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the store and the fetcher, then lead (restore and tick) or stand by
        (:meth:`Lifecycle.start`)."""
        await self._lifecycle.start()
        await self._websub.start()

    async def stop(self) -> None:
        """Stop ticking, write what is queued, give the lease up, close what we opened."""
        await self._websub.stop()
        await self._lifecycle.stop()

    def stop_now(self) -> None:
        """Cut a running :meth:`stop` short (a second SIGTERM)."""
        self._lifecycle.stop_now()

    async def purge(self) -> None:
        """Retention (:meth:`Housekeeping.purge`)."""
        await self._housekeeping.purge()

    async def refresh_feed_health(self) -> None:
        """Roll-up of disabled flags changed outside the loop."""
        await self._housekeeping.refresh_feed_health()

    async def save_update_models(self) -> None:
        """Persist every feed's update model (:meth:`UpdateModels.save`)."""
        await self._models.save()

    async def update_model(self, feed: Feed) -> FeedModelEstimate | None:
        """The feed's update model now (``None``: the leader does not probe this feed)."""
        return await self._models.update_model(feed)

    async def saved_models(self) -> FeedUpdateModels:
        """The update models as the leader last saved them (:meth:`UpdateModels.saved`)."""
        return await self._models.saved()

    # ------------------------------------------------------------------ state

    @property
    def store(self) -> Store:
        return self._s.store

    @property
    def loop_store(self) -> Store:
        """The chronon loop's store: use it on the loop's event loop only (:attr:`host`)."""
        return self._s.loop_store

    @property
    def runtime(self) -> Runtime:
        return self._s.running

    @property
    def loop(self) -> ChrononLoop:
        if self._s.loop is None:
            raise RuntimeError("ProxyService is not started or is a standby")
        return self._s.loop

    @property
    def leader(self) -> Leader | None:
        """The lease keeper (``None`` when the service runs without a lease)."""
        return self._s.leader

    @property
    def leading(self) -> bool:
        """Whether this process runs the chronon loop (holds the lease, or runs without one)."""
        return self._s.runtime is not None

    @property
    def fetcher(self) -> Prober:
        """What probes the feeds: a :class:`Fetcher`, or a :class:`ProbePool` (``probe_processes``)."""
        return self._s.fetcher

    @property
    def clock(self) -> ChrononClock:
        return self._s.clock

    @property
    def first_chronon(self) -> int | None:
        """The chronon the loop starts at (after the last one ticked before a restart)."""
        return self._s.first_chronon

    # Tests and benchmarks look at (and patch) these internals through the facade.

    @property
    def _store(self) -> Store | None:
        return self._s.opened_store

    @property
    def _loop(self) -> ChrononLoop | None:
        return self._s.loop

    @property
    def _loop_task(self) -> asyncio.Task[None] | None:
        return self._s.loop_task

    @property
    def _writer(self) -> Writer | None:
        return self._s.writer

    @property
    def _changes(self) -> ChangeListener | None:
        return self._s.changes

    @property
    def _lock(self) -> asyncio.Lock:
        return self._s.lock

    @property
    def _queued_creates(self) -> list[tuple[NewProfile, asyncio.Future[Profile]]]:
        return self._profiles.queued_creates

    @property
    def _install(self) -> Callable[[Profile], None]:
        """How every room installs a stored profile (on the loop's thread); settable, so that
        patching it here patches it for all of them."""
        return self._s.install

    @_install.setter
    def _install(self, install: Callable[[Profile], None]) -> None:
        self._s.install = install

    # ------------------------------------------------------------------ feeds

    async def register_feed(self, user_id: int, url: str) -> tuple[RegisteredFeed, bool]:
        """Register a feed URL for a user; ``(feed, created)`` (:meth:`Registrations.register_feed`)."""
        return await self._registrations.register_feed(user_id, url)

    async def register_feeds(
        self, user_id: int, urls: list[str]
    ) -> list[tuple[RegisteredFeed, bool] | FeedUrlRefusedError]:
        """:meth:`register_feed` of many URLs (an OPML import), in order."""
        return await self._registrations.register_feeds(user_id, urls)

    async def delete_feed(self, user_id: int, feed_id: int) -> None:
        """Delete the user's registration (:class:`ConflictError` while their rules read it)."""
        await self._registrations.delete_feed(user_id, feed_id)
        self._websub.poke()  # its last registration gone: unsubscribe at the hub

    @property
    def websub(self) -> WebSub:
        """The WebSub subscriber (issue 44): its reconciliation, for tests and operators."""
        return self._websub

    async def websub_verify(self, callback_id: str, params: dict[str, str]) -> CallbackAnswer:
        """A hub's verification of intent or denial (:meth:`WebSub.verify`)."""
        return await self._websub.verify(callback_id, params)

    async def websub_notify(self, callback_id: str, body: bytes, signature: str | None) -> CallbackAnswer:
        """A hub's content distribution (:meth:`WebSub.notify`)."""
        return await self._websub.notify(callback_id, body, signature)

    async def push_status(self, feed_id: int) -> PushStatus | None:
        """The feed's WebSub subscription, for its detail (``None``: none)."""
        return await self._websub.status(feed_id)

    async def rotate_ping_token(self, user_id: int, feed_id: int) -> Registration:
        """A new ping token for the user's registration; the old one stops working."""
        return await self._registrations.rotate_ping_token(user_id, feed_id)

    # ------------------------------------------------------------------ updates that arrive

    async def ping(self, feed_id: int, token: str) -> int:
        """An update notification for the feed, authenticated by a registration's ping token;
        returns CEIs touched (:meth:`Arrivals.ping`)."""
        return await self._arrivals.ping(feed_id, token)

    # ------------------------------------------------------------------ profiles

    async def create_profile(self, user_id: int, spec: ProfileSpec) -> Profile:
        """Validate feed ids (422 naming ``rules.N.….feed``), store, then install in the evaluator."""
        return await self._profiles.create(user_id, spec)

    async def replace_profile(self, user_id: int, profile_id: int, spec: ProfileSpec) -> Profile:
        """Replace a profile's name and rules; its open CEIs are sealed at their current rank."""
        return await self._profiles.replace(user_id, profile_id, spec)

    async def delete_profile(self, user_id: int, profile_id: int) -> None:
        await self._profiles.delete(user_id, profile_id)

    def profiles_version(self, user_id: int) -> int:
        """A number that changes whenever this process changes the user's profiles."""
        return self.profile_changes.version(user_id)

    async def profile_status(self, user_id: int, profile_id: int) -> ProfileStatus:
        """Where each rule of the user's profile stands and what it waits for (docs/api.md,
        "Rule status"; :meth:`Profiles.status_of`)."""
        return await self.status_of(await self.store.get_profile(user_id, profile_id))  # 404 for another's

    async def status_of(self, profile: Profile) -> ProfileStatus:
        """:meth:`profile_status` of a profile already read (its owner's, so checked)."""
        return await self._profiles.status_of(profile)

    async def try_rule(self, user_id: int, rule: RuleSpec) -> RuleTrial:
        """A dry run of one rule on its feeds' current documents: which entries it would
        match and why (:mod:`~proxy.service._dry_run`); nothing is stored, no budget spent."""
        return await self._dry_runs.try_rule(user_id, rule)

    # ------------------------------------------------------------------ delivery

    def events_changed(self) -> asyncio.Event:
        """An event set at the next stored resolution (:meth:`Deliveries.events_changed`)."""
        return self._deliveries.events_changed()

    def stream_events(self, user_id: int, after: int) -> AsyncIterator[NotificationEvent | None]:
        """The user's events after ``after``, then each new one; ``None``: send a keep-alive."""
        return self._deliveries.stream_events(user_id, after)

    async def retry_delivery(self, user_id: int, delivery_id: int) -> Delivery:
        """Send a (failed) delivery again now, with a fresh retry window."""
        return await self._deliveries.retry_delivery(user_id, delivery_id)

    async def rotate_target_secret(
        self, user_id: int, target_id: int, overlap_seconds: float | None = None
    ) -> NotifyTarget:
        """A new webhook secret (shown once); the old one also signs for the overlap."""
        return await self._deliveries.rotate_target_secret(user_id, target_id, overlap_seconds)

    async def enable_target(self, user_id: int, target_id: int) -> NotifyTarget:
        return await self._deliveries.enable_target(user_id, target_id)

    # ------------------------------------------------------------------ reads

    async def plan(
        self, user_id: int, *, target: float, horizon: int, futures: int, seed: int = 0
    ) -> PlanReport:
        """The budget plan of the user's own profiles (docs/plan.md; :meth:`Reads.plan`)."""
        return await self._reads.plan(user_id, target=target, horizon=horizon, futures=futures,
                                      seed=seed)

    async def status(self) -> ServiceStatus:
        """What ``/readyz`` reports (:meth:`Reads.status`)."""
        return await self._reads.status()

    def liveness(self) -> str | None:
        """``None`` while alive; else why not (:meth:`Reads.liveness`)."""
        return self._reads.liveness()

    async def flush(self) -> None:
        """Wait until every decision so far is in the database (tests, shutdown)."""
        await self._reads.flush()
