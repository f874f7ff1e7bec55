"""What every room of the service shares: the stores, the runtime, the loop, the lease, the clock.

:class:`ProxyService` is a facade over rooms of one purpose each (issue 46):
:mod:`~proxy.service._lifecycle` (start, stop, lease, standby, housekeeping),
:mod:`~proxy.service._update_models`, :mod:`~proxy.service._registrations` (feeds),
:mod:`~proxy.service._arrivals` (updates that arrive: pings, pushes),
:mod:`~proxy.service._websub` (WebSub subscriptions), :mod:`~proxy.service._profiles`,
:mod:`~proxy.service._replication`, :mod:`~proxy.service._deliveries` and
:mod:`~proxy.service._reads`. Each room receives the one :class:`Shared` of its service;
only the lifecycle opens, replaces and clears what it holds (the stores, the runtime, the
writer, the loop, the clock), the others read it.

It also holds the few changes of the engine's state that several rooms make on the
loop's thread (put a feed, install or uninstall a profile, submit steps to the writer),
and the rule that only the loop's holder changes feeds and profiles
(:meth:`Shared.require_leader`).

What it does not do: decide anything, or run I/O of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from proxy.errors import StandbyError
from proxy.feeds import FetcherSettings, Prober
from proxy.rules import FeedModelEstimate, UpdateModelSettings
from proxy.service._host import LoopHost
from proxy.service._persist import Step, Writer
from proxy.service.changes import ChangeListener
from proxy.service.clock import ChrononClock
from proxy.service.dispatch import Dispatcher
from proxy.service.leader import LOOP_LEASE, Leader
from proxy.service.loop import ChrononLoop
from proxy.service.metrics import ServiceMetrics
from proxy.service.runtime import Runtime
from proxy.settings import Settings
from proxy.store import Feed, Lease, Profile, Store


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


class Shared:
    """One service's state, as its rooms see it. ``store``, ``loop_store``, ``fetcher`` and
    ``clock`` raise until the lifecycle opened them; ``runtime``, ``writer`` and ``loop`` are
    ``None`` unless this process leads."""

    def __init__(
        self,
        settings: Settings,
        metrics: ServiceMetrics,
        host: LoopHost,
        *,
        store: Store | None,
        fetcher: Prober | None,
        wall: Callable[[], float],
        run_loop: bool,
        campaign: bool,
        update_models: UpdateModelSettings | None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        #: Where the chronon loop runs: its own thread, or (tests that tick by hand) here.
        self.host = host
        self.wall = wall
        self.run_loop = run_loop
        # Issue 21: an API replica (`--role api`) never leads; it serves reads as a standby.
        self.campaign = campaign
        #: What the update models assume (their prior above all); tests squeeze time with it.
        self.update_model_settings = update_models
        self.opened_store: Store | None = store
        #: The chronon loop's own connection pool (its probes, writer and lease; issue 24.4),
        #: used on the loop's event loop only.
        self.opened_loop_store: Store | None = None
        self.opened_fetcher: Prober | None = fetcher
        #: What the loop probes with: the fetcher, or (an injected one, on another event loop
        #: than the loop's) a proxy that sends its probes home.
        self.loop_prober: Prober | None = None
        self.api_loop: asyncio.AbstractEventLoop | None = None
        self.opened_clock: ChrononClock | None = None
        self.leader: Leader | None = None
        self.runtime: Runtime | None = None
        self.writer: Writer | None = None
        self.loop: ChrononLoop | None = None
        self.loop_task: asyncio.Task[None] | None = None
        self.dispatcher: Dispatcher | None = None
        self.changes: ChangeListener | None = None
        #: The chronon the loop starts at (after the last one ticked before a restart).
        self.first_chronon: int | None = None
        #: The writer's lock (a round's transaction holds it), and changes whose transactions
        #: must not interleave with a round's; used on the loop's event loop only.
        self.lock = asyncio.Lock()
        #: How a stored profile goes into the evaluator (:meth:`install_profile`): an attribute,
        #: so that a test replacing it (``ProxyService._install``) replaces it for every room.
        self.install: Callable[[Profile], None] = self.install_profile

    @property
    def store(self) -> Store:
        if self.opened_store is None:
            raise RuntimeError("ProxyService is not started")
        return self.opened_store

    @property
    def loop_store(self) -> Store:
        """The chronon loop's store: use it on the loop's event loop only (:attr:`host`)."""
        if self.opened_loop_store is None:
            raise RuntimeError("ProxyService is not started")
        return self.opened_loop_store

    @property
    def fetcher(self) -> Prober:
        if self.opened_fetcher is None:
            raise RuntimeError("ProxyService is not started")
        return self.opened_fetcher

    @property
    def clock(self) -> ChrononClock:
        if self.opened_clock is None:
            raise RuntimeError("ProxyService is not started")
        return self.opened_clock

    @property
    def running(self) -> Runtime:
        """The runtime, or :class:`RuntimeError` (a bug: the caller checked it leads)."""
        if self.runtime is None:
            raise RuntimeError("ProxyService is not started or is a standby")
        return self.runtime

    @property
    def replica(self) -> bool:
        """An API replica (``--role api``): changes go to the database, then to the leader."""
        return not self.campaign

    def require_leader(self) -> Runtime:
        """The runtime, or :class:`StandbyError`: only the loop's holder changes feeds and
        profiles (its engine and evaluator are the ones that must see the change)."""
        if self.runtime is None:
            seen = self.leader.seen if self.leader is not None else None
            raise StandbyError(
                f"this process is a standby ({describe_lease(seen)}): send changes to the "
                f"process whose /readyz answers 200", seen.holder if seen else None)
        return self.runtime

    # ------------------------------------------------------------------ on the loop's thread

    def submit(self, steps: list[Step]) -> None:
        if self.writer is not None:
            self.writer.submit(steps)

    def put_feeds(self, feeds: list[Feed]) -> None:
        rt = self.require_leader()
        for feed in feeds:
            rt.feeds.put(feed)

    def install_profile(self, profile: Profile) -> None:
        """A stored profile into the evaluator; its steps go to the writer in the same turn."""
        self.submit(self.require_leader().install(profile, restore_states=False))

    def install_newer(self, profile: Profile) -> bool:
        """:meth:`install` unless this very version runs already; whether it installed."""
        if self.require_leader().versions.get(profile.id) == profile.updated_at:
            return False
        self.install(profile)
        return True

    def remove_feed(self, feed_id: int) -> None:
        rt = self.runtime
        if rt is not None:
            rt.feeds.remove(feed_id)

    def uninstall(self, profile_id: int) -> None:
        rt = self.runtime
        if rt is not None:  # a standby has nothing installed
            self.submit(rt.uninstall(profile_id))


def live_estimate(rt: Runtime, feed_id: int, after: float) -> FeedModelEstimate | None:
    """Feed ``feed_id``'s update model in the running loop (``None``: the loop does not probe
    it); call on the loop's thread, where probes change the models."""
    slot = rt.feeds.by_id.get(feed_id)
    return None if slot is None else rt.models.estimate(slot.resource, after=after)


def describe_lease(lease: Lease | None) -> str:
    """Who runs the loop, for messages: holder, epoch and expiry of the lease as last read."""
    if lease is None or lease.holder is None:
        return f"the {LOOP_LEASE} lease is free; this process will take it"
    return (f"{LOOP_LEASE} lease held by {lease.holder}, epoch {lease.epoch}, "
            f"until {lease.expires_at.isoformat(timespec='seconds')} unless renewed")
