"""Plain feed-reader polling on the same trace and CEIs: what most readers do, as schedules.

Two readers, each turned into a ``(chronon, resource)`` schedule that the
same metrics score (a reader's probe at chronon ``t`` captures every EI
active on that feed at ``t``, exactly as in :func:`proxy.sim.score.score_schedule`):

- :func:`round_robin` — fixed-interval polling of every feed in turn, the
  probes spread evenly over the run (most readers poll every feed hourly;
  Urbansky et al., ICWSM 2011).
- :func:`adaptive` — per-feed intervals from each feed's observed entry
  frequency, like Miniflux's ``entry_frequency`` scheduler: ``interval =
  lookback / (entries dated within the lookback)``, clamped to
  ``[min_interval, max_interval]``; a feed with no recent entry waits
  ``max_interval``.  One knob, ``scale``, multiplies the interval and the
  maximum (how eagerly the reader polls); tuning it matches a probe count.  It learns online, only from what its own probes show (the
  dates of the last ``window`` entries of the feed at probe time).

:func:`match_probes` tunes a reader to a total number of probes, and
:func:`probes_to_reach` finds the fewest probes with which a reader reaches a
completeness.  Readers have no per-chronon cap: they get the same *total*
probes as the proxy, which favours them.

**A reader's figure is its mean over feed orders** (``orders``, the live
bench's :data:`READER_ORDERS`). Which feed a reader visits first is an
accident of its subscription list, unrelated to when feeds publish, yet it
decides which updates its fixed interval happens to land on: on one 60-feed
trace, round-robin over 300 random orders caught 31 % of the CEIs at the 5th
percentile and 59 % at the 95th (the feeds' own order: 68 %). One order is
one draw from that spread; the mean over many is what a plain reader catches,
whichever order it has. The feeds' own order is always the first of them
(``orders=1`` is that order alone).

Deliberately not here: HTTP (the readers run on the ground-truth trace) or
CEI knowledge (readers have none).
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from proxy.core.model import CEI

Schedule = list[tuple[int, int]]

READER_ORDERS = 64
"""Feed orders a reader's figure is the mean over in the live bench (:func:`feed_orders`)."""


def feed_orders(resources: int, orders: int, seed: int = 0) -> list[list[int]]:
    """``orders`` visiting orders of feeds ``0..n-1``: the feeds' own order, then seeded shuffles."""
    if orders < 1:
        raise ValueError(f"orders must be >= 1, got {orders}")
    rng = random.Random(seed)
    out = [list(range(resources))]
    for _ in range(orders - 1):
        order = list(range(resources))
        rng.shuffle(order)
        out.append(order)
    return out


def round_robin(resources: int, chronons: int, probes: int, order: Sequence[int] | None = None) -> Schedule:
    """``probes`` probes spread evenly over ``chronons``, visiting the feeds in turn.

    ``order``: the feeds in the order visited (default ``0..n-1``).
    """
    if resources < 1 or chronons < 1:
        raise ValueError(f"need at least one resource and one chronon (got {resources}, {chronons})")
    feeds = _order(resources, order)
    probes = max(0, min(probes, resources * chronons))
    out: Schedule = []
    nxt = 0
    for t in range(chronons):
        k = (t + 1) * probes // chronons - t * probes // chronons
        for _ in range(k):
            out.append((t, feeds[nxt]))
            nxt = (nxt + 1) % resources
    return out


def _order(resources: int, order: Sequence[int] | None) -> list[int]:
    if order is None:
        return list(range(resources))
    if sorted(order) != list(range(resources)):
        raise ValueError(f"order must hold each of the {resources} feeds once, got {list(order)!r}")
    return list(order)


@dataclass(frozen=True, slots=True)
class AdaptiveParams:
    """Miniflux-like ``entry_frequency`` settings, in chronons."""

    min_interval: int = 1
    max_interval: int = 500
    lookback: int = 200
    scale: float = 1.0
    window: int = 20
    """Entries a feed shows (the reader learns dates of these only)."""

    def check(self) -> None:
        if not 1 <= self.min_interval <= self.max_interval:
            raise ValueError(
                f"need 1 <= min_interval <= max_interval, got {self.min_interval}, {self.max_interval}")
        if self.lookback < 1 or self.window < 1 or not self.scale > 0:
            raise ValueError("lookback and window must be >= 1 and scale > 0")


def adaptive(updates: Sequence[Sequence[int]], chronons: int, params: AdaptiveParams,
             order: Sequence[int] | None = None) -> Schedule:
    """The adaptive reader's probes over ``updates`` (sorted update chronons per feed).

    ``order``: the order of the feeds' first probes (default ``0..n-1``).
    """
    params.check()
    n = len(updates)
    first = _interval(1, params)
    # New feeds are checked soon (Miniflux: at once), staggered over one typical
    # interval so the first pass is not one burst.
    heap = [((i * first) // max(n, 1), r) for i, r in enumerate(_order(n, order))]
    heapq.heapify(heap)
    series = [sorted(set(u)) for u in updates]
    known = [bytearray(len(s)) for s in series]  # 1 where the reader has seen that entry
    out: Schedule = []
    while heap:
        t, r = heapq.heappop(heap)
        if t >= chronons:
            break
        out.append((t, r))
        ups = series[r]
        hi = bisect_right(ups, t)
        lo = max(0, hi - params.window)
        known[r][lo:hi] = b"\x01" * (hi - lo)
        # The entries it knows of dated within the lookback (t - lookback, t].
        recent = known[r].count(1, bisect_right(ups, t - params.lookback), hi)
        heapq.heappush(heap, (t + _interval(recent, params), r))
    out.sort()
    return out


def _interval(recent: int, p: AdaptiveParams) -> int:
    top = max(p.min_interval, round(p.scale * p.max_interval))
    if recent == 0:
        return top
    return max(p.min_interval, min(top, round(p.scale * p.lookback / recent)))


def completeness(ceis: Sequence[CEI], schedule: Schedule) -> float:
    """CEI completeness of a reader's schedule (an update at ``u`` is visible to a probe at ``u``).

    What :func:`proxy.bench.metrics.cei_outcome` says of the schedule's probes, counted
    directly: the readers are scored thousands of times per run (every order, every step
    of a bisection).
    """
    if not ceis:
        return 0.0
    at: dict[int, list[int]] = {}
    for t, r in schedule:
        at.setdefault(r, []).append(t)
    for times in at.values():
        times.sort()

    def caught(resource: int, start: int, finish: int) -> bool:
        times = at.get(resource)
        if not times:
            return False
        i = bisect_left(times, start)
        return i < len(times) and times[i] <= finish

    return sum(all(caught(e.resource, e.start, e.finish) for e in c.eis) for c in ceis) / len(ceis)


@dataclass(frozen=True, slots=True)
class ReaderRun:
    """One reader setting: its probes and CEI completeness, each the mean over the feed orders run."""

    probes: int
    completeness: float
    setting: float
    """The tuned knob: total probes (round robin) or the interval scale (adaptive), of the first order."""
    schedules: tuple[Schedule, ...] = field(default=(), compare=False, repr=False)
    """Every order's probes as ``(chronon, feed)``, the feeds' own order first."""
    spread: tuple[float, ...] = field(default=(), compare=False, repr=False)
    """Each order's completeness, the feeds' own order first."""

    @property
    def schedule(self) -> Schedule:
        """The reader's probes in the feeds' own order."""
        return self.schedules[0]


CeisOf = Sequence[CEI] | Callable[[Schedule], Sequence[CEI]]
"""The CEIs a reader is scored on, or how to make them from its schedule: a trigger rule's
query EIs start at the schedule's own probe of its trigger (:mod:`proxy.bench.workload_rules`)."""


def _one(ceis: CeisOf, schedule: Schedule, setting: float) -> ReaderRun:
    """A reader's run in one order."""
    c = completeness(ceis(schedule) if callable(ceis) else ceis, schedule)
    return ReaderRun(len(schedule), c, setting, (schedule,), (c,))


def _mean(runs: Sequence[ReaderRun]) -> ReaderRun:
    """The runs of one reader over several feed orders as one: mean probes and completeness."""
    return ReaderRun(round(statistics.fmean(r.probes for r in runs)),
                     statistics.fmean(r.completeness for r in runs), runs[0].setting,
                     tuple(r.schedule for r in runs), tuple(r.completeness for r in runs))


def match_probes(
    kind: str, ceis: CeisOf, updates: Sequence[Sequence[int]], chronons: int, probes: int,
    params: AdaptiveParams | None = None, orders: int = 1,
) -> ReaderRun:
    """The reader ``kind`` (``round-robin`` / ``adaptive``) tuned to about ``probes`` probes.

    Over ``orders`` feed orders (:func:`feed_orders`), each tuned on its own: the mean.
    """
    return _mean([_match(kind, ceis, updates, chronons, probes, params, order)
                  for order in feed_orders(len(updates), orders)])


def _match(
    kind: str, ceis: CeisOf, updates: Sequence[Sequence[int]], chronons: int, probes: int,
    params: AdaptiveParams | None, order: Sequence[int],
) -> ReaderRun:
    if kind == "round-robin":
        return _one(ceis, round_robin(len(updates), chronons, probes, order), float(probes))
    p = params or AdaptiveParams()
    run = _adaptive_run(ceis, updates, chronons, p, order)
    # Probes fall as the scale grows: bisect the scale in log space.
    lo, hi = 1e-3, 1e3
    best = run(1.0)
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        cur = run(mid)
        if abs(cur.probes - probes) < abs(best.probes - probes):
            best = cur
        if cur.probes > probes:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.0001:
            break
    return best


def probes_to_reach(
    kind: str, ceis: CeisOf, updates: Sequence[Sequence[int]], chronons: int, target: float,
    params: AdaptiveParams | None = None, orders: int = 1,
) -> ReaderRun | None:
    """The fewest probes (found by bisection) with which the reader reaches ``target``; None if never.

    Over ``orders`` feed orders: the fewest with which their mean completeness reaches it.
    """
    n = len(updates)
    every = feed_orders(n, orders)
    if kind == "round-robin":
        def rr(p: int) -> ReaderRun:
            return _mean([_one(ceis, round_robin(n, chronons, p, order), float(p)) for order in every])

        top = rr(n * chronons)
        if top.completeness < target:
            return None
        lo, hi = 0, n * chronons
        best = top
        while hi - lo > max(1, hi // 200):
            mid = (lo + hi) // 2
            cur = rr(mid)
            if cur.completeness >= target:
                hi, best = mid, cur
            else:
                lo = mid
        return best
    p = params or AdaptiveParams()
    eager_params = AdaptiveParams(1, p.max_interval, p.lookback, p.scale, p.window)
    each = [_adaptive_run(ceis, updates, chronons, eager_params, order) for order in every]

    def run(knob: float) -> ReaderRun:
        return _mean([one(knob) for one in each])

    eager, lazy = 1e-4, 1e3
    top = run(eager)
    if top.completeness < target:
        return None
    best = top
    for _ in range(40):
        knob = math.sqrt(eager * lazy)
        cur = run(knob)
        if cur.completeness >= target:
            eager, best = knob, cur
        else:
            lazy = knob
        if lazy / eager < 1.001:
            break
    return best


def _adaptive_run(
    ceis: CeisOf, updates: Sequence[Sequence[int]], chronons: int, p: AdaptiveParams,
    order: Sequence[int] | None = None,
) -> Callable[[float], ReaderRun]:
    def run(scale: float) -> ReaderRun:
        return _one(ceis, adaptive(updates, chronons, AdaptiveParams(p.min_interval, p.max_interval, p.lookback,
                                                                     scale, p.window), order), scale)

    return run


def updates_of(ceis: Sequence[CEI], resources: int) -> list[list[int]]:
    """Update chronons per resource recovered from CEIs (EI starts); a helper for tests."""
    per: list[set[int]] = [set() for _ in range(resources)]
    for cei in ceis:
        for ei in cei.eis:
            per[ei.resource].add(ei.start)
    return [sorted(s) for s in per]


__all__ = [
    "READER_ORDERS",
    "AdaptiveParams",
    "CeisOf",
    "ReaderRun",
    "adaptive",
    "completeness",
    "feed_orders",
    "match_probes",
    "probes_to_reach",
    "round_robin",
    "updates_of",
]
