"""The chronon loop: one decision per chronon, probes in the background, results into one engine.

Per chronon ``t`` (design.md, "The data flow of one chronon"):

1. sleep until ``t`` starts on the wall clock (absolute times, so lateness does
   not accumulate: :meth:`ChrononClock.sleep_until_chronon`), observe the jitter;
2. ``engine.advance(t)``; the evaluator's ``on_tick(t)`` ops; the engine's events
   (captures, misses; missed trigger CEIs are sealed via ``on_trigger_missed``);
3. ``engine.select(C_t, policy, exclude=…)`` where excluded are feeds with a
   probe in flight or still being persisted, disabled feeds, feeds told to wait
   (``Retry-After``, cache hints, error back-off) and resources without a feed;
   the budget it leaves goes first to the proxy's predicted EIs when they are on
   (``proxy.service.predicted``: SUP/fbSUP, ``PROXY_DISCOVERY_PREDICTED``), then to
   background probes of feeds whose updates rules wait for
   (``proxy.core.discovery``: most feeds never ping), and what is still left to
   the registered feeds no rule reads, stalest first, each at most once per
   ``PROXY_UNWATCHED_PROBE_INTERVAL_SECONDS`` (a reader's polling);
4. each selected feed: ``engine.begin_probe``, then a task fetches it. The loop
   does not wait for it: the next chronon's decision happens on time.

When a probe ends its task runs, without awaiting in between (the engine and
the evaluator are not thread-safe and must see one consistent order):
``evaluator.on_probe`` (before the capture, so a trigger CEI gets its query EIs
first; new entries after the feed's previous successful probe are an update
for its ``on: update`` and watch rules, pinged or not), ``engine.complete_probe(success=…)``, the events, and submits the
steps, among them ONE ``record_probe`` transaction (probe, new entries,
captures, CEI resolutions, feed health). A probe counts for the chronon it
started in. Only a successful probe captures: a 200 (parsed) or a 304 Not
Modified — a 304 is the server confirming the copy we hold is current, so the
proxy observed the feed's state at that chronon (RFC 9110 §15.4.5).

What it does not do: retry failed probes within a chronon (the policy decides
again next chronon), or wait for probes before deciding.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import heapq
import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from proxy.core.changepoint import ShiftDetector
from proxy.core.coupdate import CoUpdates
from proxy.core.discovery import CaptureExplore, TailFloor, revisit_bound, tail_period
from proxy.core.hazard import AgeHazard
from proxy.core.policies import Policy
from proxy.core.rates import CycleShape, pooled_rates
from proxy.errors import FeedNotFoundError, StorageError
from proxy.feeds import (
    Entry,
    Gone,
    HttpError,
    NetworkError,
    NothingKnown,
    NotModified,
    Ok,
    ParseError,
    Prober,
    ProbeResult,
    RateLimited,
    Redirected,
    Refused,
    Timeout,
    TooLarge,
)
from proxy.service._feeds import FeedSlot
from proxy.service._persist import Captured as CapturedStep
from proxy.service._persist import ChrononRow, ProbeWrite, Resolved, Step, Writer
from proxy.service.clock import ChrononClock
from proxy.service.metrics import ServiceMetrics
from proxy.service.predicted import PredictedProbes
from proxy.service.runtime import Runtime
from proxy.store import FeedUpdate, NewEntry, ProbeInput, Store

log = structlog.get_logger("proxy.service")

PUSH_OUTCOME = "push"
"""A pushed document's row among the feed's probes (issue 44): a success that spent no budget."""

LEVEL_EXPONENT = 1.0
"""How much the background frequencies trust each feed's rate (``CaptureExplore``'s
``level_exponent``): 1, capture-optimal, filling feeds by ``weight × rate``. The rates are
pooled (``POOL_STRENGTH``), so a feed's own rate counts once its record outweighs the pool's.
The service used 0 (weights alone) while its models could not tell feeds apart at the
bench's pace; with pooled rates 0 loses 0.26 of the ratio to the better reader on the
larger traces of the bench's replica and ties on the 60-feed ones (docs/discovery.md,
"Rates the allocation can use")."""

POOL_STRENGTH = 8.0
"""Pseudo-updates of the pool's rate in each feed's (``proxy.core.rates.pooled_rates``): a
feed's own rate outweighs the rate of the feeds it competes with after about eight updates.
In the replica 4, 8 and 16 were within noise of each other; 1 (a feed's few updates taken
at their word) lost 0.06 of the ratio on the 60-feed traces and 0.42 on the larger ones."""

OPTIMISM_Z = 2.0
"""How optimistic the background allocation is about rates it knows little of: the upper
``z`` quantile of each feed's pooled Gamma posterior (UCB, Auer et al. 2002), so a feed seen
little keeps a chance of probes without a floor of stalest-first probes. In the replica
z = 1 and 2 were within noise; 2 was already the service's."""

EVIDENCE_FADE = 2.0
"""How fast a feed's record fades while nobody probes it (``pooled_rates``' ``fade``): it
counts half once the waited-for feeds would have updated twice on average since the feed's
last successful probe. A feed the frequencies starved because its record looked slow thus
comes back (as an unknown feed would: the pool's rate, optimistically) and its next
document shows whether its rhythm changed: a revisit floor at the feeds' own pace, with no
share of the budget set aside. In the replica 0.5 to 16 were within noise of no fade on the
bench's traces (stationary within a run); in ``tests/test_core_capture_explore.py`` a feed
silent for 300 chronons that then updates every 5 is never probed again without it.
"""

COORDINATION_ROUNDS = 3
"""Rounds of ``proxy.core.discovery.coordinated_weights`` behind the background frequencies: a
watch rule's share on a feed is scaled by the chance its other feeds are caught, so the budget
funds whole rules rather than one feed of each (each round moves the weights halfway). In the
replica, 1 to 5 rounds all beat none (3: mean ratio to the better reader +0.21 to +0.37 per
group of 200- to 2,000-feed traces, +0.02 to +0.07 on the real trace's profile draws, within
noise on 60-feed traces); 0 turns it off. The rules' groups are read
only when the frequencies are recomputed (every 10 chronons), not every tick."""

UNFUNDED_CATCH = 0.3
"""The chance ``coordinated_weights`` gives a feed the frequencies do not fund of being caught
in time anyway (the fill, the stride's leftovers). In the replica 0.2 to 0.4 were within noise."""

EXPLORE_SHARE = 0.0
"""The spare budget's share for the stalest watched feeds (``CaptureExplore``'s ``epsilon``).
0: a probe's document dates the feed's past entries, so a feed's rate is learnt from any
probe, while an explore probe, one per ``n / (share × budget)`` chronons for each of ``n``
feeds, rarely lands within an update's window. In the replica 0.05 lost 0.02 of the ratio
on the 60-feed traces and 0.12 on the larger ones, 0.2 (the previous share) 0.13 and 0.51.
Feeds never probed still come first in the work-conserving fill, and the optimism brings
back a feed seen little."""

TAIL_POOL_STRENGTH = 1.0
"""Pseudo-updates of the pool's rate behind the tail floor's ranking of the feeds (``TailFloor``):
one, so a feed whose first document dates a burst of entries ranks as fast at once. In the replica
the allocation's own eight left the rates too flat to tell the fast feeds (docs/discovery.md,
"The tail where the updates are")."""


def background_allocator() -> CaptureExplore:
    """A fresh allocator of the spare budget as the loop runs it (the loop's and ``proxy plan``'s)."""
    return CaptureExplore(epsilon=EXPLORE_SHARE, level_exponent=LEVEL_EXPONENT,
                          coordination_rounds=COORDINATION_ROUNDS, unfunded=UNFUNDED_CATCH)


@dataclass
class ChrononLoop:
    """Drives :class:`Runtime` chronon by chronon and runs the probes it selects.

    ``max_inflight`` bounds the probes in flight (and being persisted): when
    slow feeds pile up, fewer new probes start rather than unbounded tasks.
    ``guard``, when given, is asked before every tick of :meth:`run`: while it
    says no (the loop's lease could not be renewed in time) the chronon is not
    ticked, whatever the renewal task is doing.
    """

    runtime: Runtime
    store: Store
    writer: Writer
    fetcher: Prober
    clock: ChrononClock
    metrics: ServiceMetrics
    budget: int
    policy: Policy
    max_inflight: int = 0
    guard: Callable[[], bool] | None = None
    #: How long :meth:`run`'s first tick waits at most for what was submitted before it.
    start_wait: float = 10.0
    last_tick: float | None = None  # monotonic time of the last tick, for /readyz
    ticks: int = 0
    current: int | None = None
    #: The last ticks' lateness and decision time in seconds (benchmarks, diagnostics).
    jitters: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))
    tick_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))
    _busy: set[int] = field(default_factory=set)
    _paused_from: int | None = None  # first chronon of a pause with the write buffer full
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _known: NothingKnown = field(default_factory=NothingKnown)
    #: Paper 002's predicted EIs (SUP/fbSUP) for watched feeds that do not ping; None: off.
    predicted: PredictedProbes | None = None
    #: Chronons between two probes of a feed no rule reads, with budget no rule needs (0: none).
    unwatched_every: int = 0
    #: Told ``(feed_id, url, hub, self_url)`` after each 200 (WebSub discovery, issue 44).
    on_push_links: Callable[[int, str, str | None, str | None], None] | None = None
    #: Feeds a live WebSub subscription pushes (issue 44), by resource: the seconds between two
    #: health probes (the lease). Replaced whole by the subscriber; read at each tick.
    pushed: Mapping[int, float] = field(default_factory=dict)
    #: Pushed feeds whose polls found entries the hub never sent (polled again until it pushes).
    _silent: set[int] = field(default_factory=set)
    #: When each feed's last probe started (POSIX seconds): when a pushed feed's health probe is due.
    _polled_at: dict[int, float] = field(default_factory=dict)
    #: Where the spare budget goes (docs/discovery.md): stride credit and frequencies live here.
    _allocator: CaptureExplore = field(default_factory=background_allocator)
    #: The revisit bound's factor (``proxy.core.discovery.revisit_bound``; 0: no bound, issue 45).
    revisit_factor: float = 0.0
    #: Feed -> the last chronon a rule waited for it: the watched feeds the revisit bound keeps in turn.
    _waited: dict[int, int] = field(default_factory=dict)
    #: A feed's stated update interval is the prior of its rate (``PROXY_DISCOVERY_PUBLISHER_HINTS``).
    publisher_hints: bool = False
    #: Regime shifts in the feeds' rates (``PROXY_DISCOVERY_CHANGEPOINT``); None: off.
    shifts: ShiftDetector | None = None
    #: Feed -> the rate per chronon the background allocation last gave it: the detector's prior.
    _believed: dict[int, float] = field(default_factory=dict)
    #: Which feeds update together, told every successful probe's dated new entries; its hints go to
    #: the background allocation (``PROXY_DISCOVERY_COUPDATE``, issue 45). None: off.
    coupdate: CoUpdates | None = None
    #: The hazard by age since each feed's last publication, told every successful probe's dated
    #: document; a feed without a cycle is read at its age (``PROXY_DISCOVERY_HAZARD``, issue 45). None: off.
    ages: AgeHazard | None = None
    #: The tail floor's share of the budget (``proxy.core.discovery.TailFloor``; 0: off, issue 45):
    #: the watched feeds holding most updates probed in turn, for the detection delay's p90.
    tail_budget: float = 0.0
    #: The adaptive tail floor's ``TailFloor.target`` and ``hopeless`` (``PROXY_DISCOVERY_TAIL_TARGET``,
    #: ``PROXY_DISCOVERY_TAIL_HOPELESS``); None or 0: the fixed floor.
    tail_target: float | None = None
    tail_hopeless: float = 1.0
    #: The adaptive floor's ``TailFloor.sticky`` (``PROXY_DISCOVERY_TAIL_STICKY``; 0: not sticky).
    tail_sticky: int = 0

    def __post_init__(self) -> None:
        if self.max_inflight <= 0:
            self.max_inflight = 10 * self.budget

    @property
    def inflight(self) -> int:
        return len(self._busy)

    async def run(self, first: int) -> None:
        """Tick from chronon ``first`` (or the current one, if later) for ever (cancel to stop).

        The first tick waits until the writer has stored what was submitted before it: after
        a restart, the restore's own decisions (the CEIs whose windows passed while the
        service was down, a thousand and more, with their notification documents). Ticking
        meanwhile would only queue the first chronons' decisions behind that round, where a
        crash loses them; waiting starts the loop on a committed restore, and the first
        chronons' rounds are small (issue 24: probing back at the full budget, stored,
        within three chronons of a restart). The chronons the wait takes are not ticked, as
        for any late start: the engine and the evaluator coalesce them.

        It waits ``start_wait`` seconds at most: a restore round that takes longer (a
        restart of 100,000 profiles after a long outage, the database away) does not keep
        the loop from probing; its first chronons then queue behind the round, as before.
        """
        began = time.monotonic()
        backlog = self.writer.backlog
        written = True
        try:
            async with asyncio.timeout(self.start_wait):
                await self.writer.flush()
        except TimeoutError:
            written = False
        t = max(first, self.clock.current())
        log.info("loop_started", chronon=t, restore_chronon=first, batches=backlog, written=written,
                 waited_seconds=round(time.monotonic() - began, 3))
        while True:
            jitter = await self.clock.sleep_until_chronon(t)
            if self.guard is not None and not self.guard():
                log.error("tick_refused_without_lease", chronon=t)
                t = max(t + 1, self.clock.current())
                continue
            began = time.perf_counter()
            try:
                self.tick(t, jitter)
            except Exception:  # a bug must not stop the loop: log it and go on with t + 1
                log.exception("tick_failed", chronon=t)
            self.jitters.append(jitter)
            self.tick_seconds.append(time.perf_counter() - began)
            # If we fell more than a chronon behind, skip to now: the engine and the
            # evaluator coalesce gaps (missed fires, EIs expiring) by themselves.
            t = max(t + 1, self.clock.current())

    def tick(self, t: int, jitter: float) -> list[int]:
        """Chronon ``t``: advance, open due CEIs, select and start probes; returns the resources probed."""
        rt = self.runtime
        now = self.clock.now()
        self.current = t
        if self.writer.full:
            return self._paused(t)
        if self._paused_from is not None:
            log.warning("loop_resumed", chronon=t, paused_chronons=t - self._paused_from,
                        backlog=self.writer.backlog)
            self._paused_from = None
        rt.engine.advance(t)
        steps: list[Step] = rt.drain_all()
        steps += rt.apply(rt.evaluator.on_tick(t))
        steps += rt.drain_all()
        steps += rt.rule_states()
        rt.forget_resolved(t)  # the engine's verdicts of CEIs nothing names any more: bounded memory
        exclude = rt.feeds.blocked(rt.engine.resources, now) | self._busy
        budget = min(self.budget, max(0, self.max_inflight - len(self._busy)))
        chosen = rt.engine.select(budget, self.policy, exclude=exclude) if budget else []
        # Known EIs first (the engine's picks), then the proxy's predicted EIs, then the
        # background: an internal guess never takes a probe a user's CEI needs. A feed that
        # pushes well needs no probe to find its updates: one health probe per lease.
        taken = exclude | set(chosen) | self._quiet(now.timestamp())
        predicted = self._predicted(budget - len(chosen), t, taken)
        chosen += predicted
        taken.update(predicted)
        background = self._background(budget - len(chosen), t, taken)
        chosen += background
        taken.update(background)
        unwatched = self._unwatched(budget - len(chosen), t, taken)
        chosen += unwatched
        if chosen:  # the decision itself, for `proxy demo` and debugging (debug: one line a chronon)
            log.debug("selected", chronon=t, budget=budget,
                      feeds=[rt.feeds.by_resource[r].id for r in chosen])
        for r in chosen:
            slot = rt.feeds.by_resource[r]
            rt.engine.begin_probe(r)
            slot.last_probe = t
            self._polled_at[r] = now.timestamp()
            self._busy.add(r)
            task = asyncio.create_task(self._probe(slot, t, now), name=f"probe-{slot.id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        steps.append(ChrononRow(t, self.clock.start_of(t), self.budget, len(chosen),
                                rt.tally.captured, rt.tally.missed, jitter))
        rt.tally.captured = rt.tally.missed = 0
        self.writer.submit(steps)
        m = self.metrics
        if rt.tally.refused_ops:
            m.ops_refused.inc(rt.tally.refused_ops)
            rt.tally.refused_ops = 0
        m.tick_jitter.observe(jitter)
        m.chronon.set(t)
        m.budget.set(self.budget)
        m.budget_used.set(len(chosen))
        m.budget_used_total.inc(len(chosen))
        m.background_total.inc(len(background))
        m.predicted_total.inc(len(predicted))
        m.unwatched_total.inc(len(unwatched))
        m.budget_offered_total.inc(self.budget)
        m.show_ceis({state.value: n for state, n in rt.engine.counts().items()})
        self.last_tick = time.monotonic()
        self.ticks += 1
        return chosen

    def _quiet(self, at: float) -> set[int]:
        """Pushed feeds (issue 44) that need no probe to find their updates now: not silent, and
        polled within their lease (each gets one health probe per lease, which shows whether the
        hub misses pushes)."""
        if not self.pushed:
            return set()
        polled = self._polled_at
        return {r for r, every in self.pushed.items()
                if r not in self._silent and at - polled.get(r, -math.inf) < every}

    def _predicted(self, spare: int, t: int, exclude: set[int]) -> list[int]:
        """Feeds whose predicted EI (SUP/fbSUP, ``proxy.service.predicted``) is due at ``t``, within ``spare``.

        Called every chronon when on, with no spare budget too, so each chain moves on.
        """
        if self.predicted is None:
            return []
        evaluator = self.runtime.evaluator
        return self.predicted.pick(max(spare, 0), t, evaluator.update_weights(), evaluator.update_window(),
                                   exclude)

    def _paused(self, t: int) -> list[int]:
        """Chronon ``t`` with the write buffer full (the database away for long): decide nothing
        and probe nothing, so the memory waiting for the database stays bounded; the loop stays
        alive (liveness) and, once the writer is under its bounds again, goes on from the
        current chronon: the engine and the evaluator coalesce the skipped chronons as after
        any late tick (docs/operations.md, "Past the bound")."""
        if self._paused_from is None:
            self._paused_from = t
            log.warning("loop_paused_write_buffer_full", chronon=t, backlog=self.writer.backlog,
                        backlog_bytes=self.writer.backlog_bytes)
        self.metrics.write_buffer_full.inc()
        self.metrics.chronon.set(t)
        self.last_tick = time.monotonic()
        self.ticks += 1
        return []

    def _background(self, spare: int, t: int, exclude: set[int]) -> list[int]:
        """Spare budget to the feeds rules wait for: capture-optimal frequencies on pooled rates.

        ``proxy.core.discovery.CaptureExplore`` (docs/discovery.md, "Background
        probes"): frequencies filled by ``weight × rate``, one probe per
        ``window + 1`` chronons at most, strided, and whatever is left by the
        greedy index. Rates: each feed's record in its update model (updates over
        covered time, ``FeedSlot.evidence``) pooled with the other waited-for
        feeds' (``pooled_rates``: ``POOL_STRENGTH`` pseudo-updates of their rate),
        at the posterior's upper ``OPTIMISM_Z`` quantile, each record faded by the
        time since the feed's last success (``EVIDENCE_FADE``). The frequencies go
        by the rules' shares coordinated (``COORDINATION_ROUNDS``: a share counts as
        much as the rule's other feeds are likely caught), the fill by the plain
        weights. Weights: what finding
        each feed's next update in time is worth to the rules waiting for it
        (``TriggerEvaluator.update_weights``: a watch rule's worth spread over the
        feeds its CEI still lacks, a quarter of it once that CEI is missed);
        window: the shortest a waiting rule allows. Called every chronon, with no
        spare budget too, so the allocator's stride credit keeps time.
        ``exclude``: blocked feeds, probes in flight and the engine's own picks.
        """
        rt = self.runtime
        if len(self._believed) > len(rt.feeds.by_resource):  # feeds deleted: their detector state goes too
            self._forget_deleted()
        evaluator = rt.evaluator
        window = evaluator.update_window()
        if window is None:
            return []
        resources: list[int] = []
        last: list[int | None] = []
        updates: list[float] = []
        exposure: list[float] = []
        said: list[float] = []  # the publishers' stated rates per chronon (NaN: none, or hints off)
        weight: list[float] = []
        shape: list[CycleShape | None] = []
        length = self.clock.length
        weights = evaluator.update_weights()
        bound, watched = self._revisit(t, list(weights), window)
        for r in watched:
            slot = rt.feeds.by_resource.get(r)
            if slot is None or r in exclude:
                continue
            worth = weights.get(r, 0.0)
            resources.append(r)
            last.append(slot.last_success)
            n, seconds = slot.evidence
            if self.shifts is not None and (since := self.shifts.record(r)) is not None:
                n, seconds = since[0], since[1] * length  # the record since the feed's regime shift
            said.append(length / slot.update_every if self.publisher_hints and slot.update_every else math.nan)
            updates.append(n)
            exposure.append(seconds / length)
            weight.append(worth)
            cycle = slot.shape if worth > 0 else None
            if cycle is None and worth > 0 and self.ages is not None:  # no cycle: read at its age
                cycle = self.ages.shape(r, t)
            shape.append(cycle)
        # The rates and their pool are the waited-for feeds' (first in ``watched``); a feed only the
        # revisit bound keeps has weight 0, no frequency and no fill score, so no rate either.
        m = sum(r in weights for r in resources)
        unseen = [0.0 if at is None else float(max(t - at, 0)) for at in last[:m]]
        rate = pooled_rates(updates[:m], exposure[:m], POOL_STRENGTH, OPTIMISM_Z, unseen=unseen, fade=EVIDENCE_FADE,
                            prior=said[:m] if self.publisher_hints else None)
        if self.shifts is not None or self.ages is not None:
            self._believed.update(zip(resources[:m], rate, strict=True))
        rate += [0.0] * (len(resources) - m)
        tail, tail_rate = None, None
        if self.tail_budget > 0 and resources:
            # Every watched feed's own pace, barely pooled (TAIL_POOL_STRENGTH) and not optimistic: the
            # floor ranks feeds by how many updates they hold, and a fast feed must stand out soon.
            tail = TailFloor(tail_period(self.budget, len(resources), window), self.tail_budget,
                             target=self.tail_target or None, hopeless=self.tail_hopeless,
                             sticky=self.tail_sticky)
            tail_rate = pooled_rates(updates, exposure, TAIL_POOL_STRENGTH, 0.0,
                                     unseen=[0.0 if at is None else float(max(t - at, 0)) for at in last],
                                     fade=EVIDENCE_FADE)
        hint = None if self.coupdate is None else self.coupdate.hints(t, window, resources, last, rate)
        return self._allocator.pick(max(spare, 0), t, resources, last, rate, weight, window, shape=shape,
                                    groups=evaluator.update_groups, revisit=bound, hint=hint, tail=tail, tail_rate=tail_rate)

    def _forget_deleted(self) -> None:
        """Drop the rates and shift detectors of feeds no longer registered: what the regime-shift
        detector keeps is bounded by the registered feeds, not by every feed ever watched."""
        registered = self.runtime.feeds.by_resource
        for r in [r for r in self._believed if r not in registered]:
            del self._believed[r]
            if self.shifts is not None:
                self.shifts.forget(r)
            if self.ages is not None:
                self.ages.drop(r)

    def _revisit(self, t: int, waiting: list[int], window: int) -> tuple[int | None, list[int]]:
        """The revisit bound at ``t`` (``None``: off) and the feeds it covers, the waited-for ones first.

        With the bound on, a feed a rule once waited for stays watched at weight 0
        while no rule waits for it (a watch rule's feed already in its CEI, for as
        long as its partners keep that CEI open): only the bound probes it, so its
        updates are not left for ever. It drops out when no rule reads it any more
        (its rules deleted). Issue 45, docs/discovery.md ("A bound on the tail").
        """
        if self.revisit_factor <= 0:
            return None, waiting
        waited = self._waited
        for r in waiting:
            waited[r] = t
        reads = self.runtime.evaluator.reads
        for r in [r for r, at in waited.items() if at < t and not reads(r)]:
            del waited[r]
        bound = revisit_bound(self.budget, len(waited), window, self.revisit_factor)
        return bound, waiting + [r for r, at in waited.items() if at < t]

    def _unwatched(self, spare: int, t: int, exclude: set[int]) -> list[int]:
        """Budget no rule needs, to the registered feeds no rule reads: never probed first, then the stalest.

        What a feed reader does with every subscription, and what the proxy did
        not: a feed registered (an OPML import, say) but read by no rule yet is
        probed at most once per ``unwatched_every`` chronons, so its health
        (``GET /api/v1/feeds``) shows whether it works and its update model
        learns from its documents before a rule needs it. Only what the engine,
        the predicted EIs and the background left: while any rule waits for a
        feed the background's fill spends every probe, so these feeds take
        nothing from the rules. Ties by resource id. O(feeds), and only in a
        chronon with budget to spare.
        """
        if spare <= 0 or self.unwatched_every <= 0:
            return []
        rt = self.runtime
        reads = rt.evaluator.reads
        due = t - self.unwatched_every
        stale: list[tuple[float, int]] = []
        for r, slot in rt.feeds.by_resource.items():
            at = slot.last_probe
            if (at is None or at <= due) and r not in exclude and not reads(r):
                stale.append((-math.inf if at is None else float(at), r))
        if len(stale) > spare:
            stale = heapq.nsmallest(spare, stale)
        else:
            stale.sort()
        return [r for _, r in stale]

    def _learn(self, slot: FeedSlot, document: Sequence[Entry] | None, new: tuple[Entry, ...],
               started_at: dt.datetime) -> None:
        """What a successful probe (or a pushed document) says about when the feed changes.

        The probe's interval since the previous success is censored evidence (new
        entries or none, dated or not); a document (a 200's, a push's) dates every
        entry it holds. A ping and the probe that confirms it count once (the model's rule).
        """
        models = self.runtime.models
        r, at = slot.resource, started_at.timestamp()
        if slot.last_success_at is not None and at > slot.last_success_at:
            models.observe_probe(r, slot.last_success_at, at, len(new), [e.published for e in new])
        if document is not None:
            models.observe_document(r, at, [e.published for e in document])
        # A probe that started before a push settled must not move the feed's last success back.
        slot.last_success_at = at if slot.last_success_at is None else max(at, slot.last_success_at)
        slot.learn_rate(models, at, self.clock)

    async def stop(self) -> None:
        """Cancel the probes in flight (their results are lost; the feeds are probed again later)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def drain_probes(self) -> None:
        """Wait for the probes in flight (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ------------------------------------------------------------------ probes

    async def _probe(self, slot: FeedSlot, started: int, started_at: dt.datetime) -> None:
        self.metrics.inflight.inc()
        new: tuple[Entry, ...] = ()
        known_failed = False
        try:
            state = slot.state()
            if self.runtime.evaluator.wants_document(slot.resource):
                # A rule's backfill reads the whole document: no validators, so no 304.
                state = dataclasses.replace(state, etag=None, last_modified=None)
            result = await self.fetcher.probe(state, self._known, now=started_at)
            if isinstance(result, Ok) and result.entries:
                # Entries of this feed's probes still waiting for the writer are not new, though
                # the database does not have them yet; read before the database, so an entry
                # written meanwhile is in one of the two.
                known = self.writer.unwritten(slot.id)
                try:
                    known |= await self.store.known_identities(
                        slot.id, [e.identity for e in result.entries])
                except StorageError as exc:
                    self.metrics.db_errors.inc()
                    if slot.seen is None:
                        # Without knowing what is new, the probe decides nothing: count it failed.
                        log.error("known_entries_failed", feed=slot.id, error=str(exc))
                        known_failed = True
                    else:
                        # The database is away: what the last document held is not new (an
                        # old entry that left the document and came back would be taken for new).
                        known |= slot.seen
                new = tuple(e for e in result.entries if e.identity not in known)
        finally:
            self.metrics.inflight.dec()
        try:
            self._finish(slot, started, started_at, result, new, known_failed)
        except Exception:
            log.exception("probe_finish_failed", feed=slot.id, chronon=started)
            self._busy.discard(slot.resource)

    def _settle(
        self, slot: FeedSlot, started: int, started_at: dt.datetime, success: bool,
        new: tuple[Entry, ...], document: Sequence[Entry] | None,
    ) -> tuple[list[Step], tuple[CapturedStep, ...], tuple[Resolved, ...], list[Step]]:
        """A finished probe of ``slot`` (or a pushed document, issue 44) into the evaluator, the
        models and the engine, with nothing awaited: the steps before the probe's record, its
        captures and resolutions, and the follow-ups written after it."""
        rt = self.runtime
        r = slot.resource
        # The rules engineer's order: on_probe first, so a trigger CEI gets its query
        # EIs before the capture could complete it at rank 1.
        steps = rt.apply(rt.evaluator.on_probe(
            r, started, success, new, previous_success=slot.last_success, document=document))
        if success:
            baseline = slot.last_success is None  # the first success: its entries are the backlog
            if self.shifts is not None and not baseline and started > (slot.last_success or started):
                believed = self._believed.get(r)
                if believed is not None and believed > 0:  # a feed the allocation has rated
                    self.shifts.observe(r, started - (slot.last_success or started), len(new), believed)
            # A probe that started before a push settled does not move the last success back.
            slot.last_success = started if baseline else max(started, slot.last_success or started)
            self._learn(slot, document, new, started_at)
            if self.coupdate is not None:  # the new entries' dates, in chronons (undated ones say nothing)
                self.coupdate.observe(r, started, [min(self.clock.chronon_at(e.published), started)
                                                   for e in new if e.published is not None])
            paced = self._believed.get(r)
            if self.ages is not None and document is not None and paced is not None:
                # The document's dates in chronons (undated entries say nothing), against the rate the
                # allocation last gave the feed: a feed it has not rated yet teaches nothing.
                self.ages.observe(r, started, [min(self.clock.chronon_at(e.published), started)
                                               for e in document if e.published is not None], paced)
            if self.predicted is not None:  # fbSUP: a probe that found nothing opens the next EI
                self.predicted.on_probe(r, started, bool(new) and not baseline)
            if document is not None:
                slot.seen = frozenset(e.identity for e in document)
        steps += rt.drain_all()
        rt.engine.complete_probe(r, started, success=success)
        direct, follow = rt.drain()
        captures = tuple(s for s in direct if isinstance(s, CapturedStep))
        resolved = tuple(s for s in direct if isinstance(s, Resolved))
        return steps, captures, resolved, follow

    async def hear_push(self, feed_id: int, document: Sequence[Entry],
                        heard: Callable[[FeedSlot], int]) -> int:
        """A pushed document of feed ``feed_id`` (WebSub, issue 44; signature checked): a successful
        probe at the current chronon that spent no budget. On the loop's event loop.

        Its new entries are told exactly as a probe's are (:meth:`_probe`: the writer's unwritten
        identities, then the database; :meth:`_settle`: the evaluator, the models, the engine),
        so an entry that arrives by push and then by probe is new once. ``heard(slot)`` runs
        first, in the same turn, when the document holds new entries: the caller hears the push
        as an update at its arrival chronon (a ping's path). The document captures the feed's
        open EIs (``begin_probe``/``complete_probe`` at the current chronon): it is the feed's
        content at that instant. Returns the new entries' count (:class:`FeedNotFoundError`
        when the feed is gone).
        """
        rt = self.runtime
        slot = rt.feeds.by_id.get(feed_id)
        if slot is None:
            raise FeedNotFoundError(feed_id)
        known = self.writer.unwritten(feed_id)
        if document:
            try:
                known |= await self.store.known_identities(feed_id, [e.identity for e in document])
            except StorageError as exc:
                self.metrics.db_errors.inc()
                if slot.seen is None:
                    raise
                log.warning("known_entries_failed", feed=feed_id, error=str(exc))
                known |= slot.seen
        if rt.feeds.by_id.get(feed_id) is not slot:
            raise FeedNotFoundError(feed_id)  # removed while we read
        new = _unseen(slot, tuple(e for e in document if e.identity not in known))
        self._silent.discard(slot.resource)  # the hub pushes: a silent spell is over
        steps: list[Step] = []
        if new:
            heard(slot)
        r = slot.resource
        started = rt.engine.now
        at = self.clock.now()
        rt.engine.begin_probe(r)
        settled, captures, resolved, follow = self._settle(slot, started, at, True, new, document)
        steps += settled
        steps.append(ProbeWrite(
            probe=ProbeInput(feed_id=feed_id, started_at=at, outcome=PUSH_OUTCOME,
                             finished_at=at, chronon=started, http_status=None, error=None),
            entries=tuple(
                NewEntry(e.identity, e.title, e.link, e.published, e.summary or e.content)
                for e in new),
            captures=captures, resolved=resolved, feed_update=None))
        steps += follow
        steps += rt.rule_states()
        self.writer.submit(steps)
        log.info("push_settled", feed=feed_id, chronon=started, new_entries=len(new),
                 captured_eis=len(captures))
        return len(new)

    def _finish(
        self,
        slot: FeedSlot,
        started: int,
        started_at: dt.datetime,
        result: ProbeResult,
        new: tuple[Entry, ...],
        known_failed: bool,
    ) -> None:
        rt = self.runtime
        r = slot.resource
        success = isinstance(result, Ok | NotModified) and not known_failed
        new = _unseen(slot, new)
        if success and new and r in self.pushed and slot.last_success is not None:
            # Issue 44: a poll found entries the hub never pushed: it is silent, poll again.
            self._silent.add(r)
            log.info("websub_hub_silent", feed=slot.id, new_entries=len(new))
        steps, captures, resolved, follow = self._settle(
            slot, started, started_at, success, new, result.entries if isinstance(result, Ok) else None)
        finished = self.clock.now()
        status, error = _status_and_error(result)
        gone = isinstance(result, Gone)
        # A document whose new entries could not be told keeps the old validators: the next
        # probe must fetch it again, not get a 304 for entries never looked at.
        _update_slot(slot, result, validators=not known_failed)
        if isinstance(result, Ok) and self.on_push_links is not None:
            try:
                self.on_push_links(slot.id, result.state.url, result.hub, result.self_url)
            except Exception:  # the probe's own bookkeeping must go on
                log.exception("push_links_failed", feed=slot.id)
        rt.feeds.note(slot)
        update = FeedUpdate(
            probed_at=finished,
            outcome=result.outcome,
            error=result.is_error,
            update_validators=isinstance(result, Ok) and not known_failed,
            etag=result.state.etag,
            last_modified=result.state.last_modified,
            next_allowed_at=result.not_before,
            new_url=result.moved_to,
            disabled_reason="410 Gone (RFC 9110 §15.5.11)" if gone else None,
        )

        # The feed may be probed again before this probe is written: the writer keeps its
        # entries' identities until then (Writer.unwritten), so nothing is found new twice.
        self._busy.discard(r)
        steps.append(ProbeWrite(
            probe=ProbeInput(
                feed_id=slot.id, started_at=started_at, outcome=result.outcome,
                finished_at=finished, chronon=started, http_status=status, error=error,
            ),
            entries=tuple(
                NewEntry(e.identity, e.title, e.link, e.published, e.summary or e.content)
                for e in new
            ),
            captures=captures,
            resolved=resolved,
            feed_update=update,
        ))
        steps += follow
        steps += rt.rule_states()
        self.writer.submit(steps)
        self.metrics.probes.labels(outcome=result.outcome).inc()
        self.metrics.probe_duration.observe(result.elapsed)
        log.info(
            "probe", feed=slot.id, chronon=started, outcome=result.outcome,
            duration=round(result.elapsed, 4), new_entries=len(new), captured_eis=len(captures),
            http_status=status,
        )


def _unseen(slot: FeedSlot, new: tuple[Entry, ...]) -> tuple[Entry, ...]:
    """``new`` without the entries of the feed's last settled document (a probe's or a push's):
    a push and a probe of one feed may both read "not known" before either is settled."""
    seen = slot.seen
    return new if not seen else tuple(e for e in new if e.identity not in seen)


def _update_slot(slot: FeedSlot, result: ProbeResult, *, validators: bool = True) -> None:
    """What the next probe of the feed needs from this one."""
    slot.url = result.state.url
    if validators:
        slot.etag = result.state.etag
        slot.last_modified = result.state.last_modified
    slot.consecutive_errors = result.consecutive_errors
    slot.not_before = result.not_before
    if isinstance(result, Ok):
        slot.update_every = result.update_every
    if isinstance(result, Gone):
        slot.disabled = True


def _status_and_error(result: ProbeResult) -> tuple[int | None, str | None]:
    if isinstance(result, Ok):
        return 200, result.warning
    if isinstance(result, NotModified):
        return 304, None
    if isinstance(result, Gone):
        return 410, None
    if isinstance(result, RateLimited | HttpError):
        return result.status, None
    if isinstance(result, Timeout):
        return None, f"timeout ({result.phase})"
    if isinstance(result, TooLarge):
        return None, f"body over {result.limit} bytes"
    if isinstance(result, ParseError):
        return None, f"{result.reason}: {result.detail}"[:500]
    if isinstance(result, NetworkError | Refused):
        return None, result.reason[:500]
    if isinstance(result, Redirected):
        return None, result.reason[:500]
    return None, None
