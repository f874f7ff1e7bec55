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
probes as the proxy, which favours them.  Deliberately not here: HTTP (the
readers run on the ground-truth trace) or CEI knowledge (readers have none).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from proxy.bench.metrics import ProbeRec, cei_outcome
from proxy.core.model import CEI

Schedule = list[tuple[int, int]]


def round_robin(resources: int, chronons: int, probes: int) -> Schedule:
    """``probes`` probes spread evenly over ``chronons``, visiting feeds ``0..n-1`` in turn."""
    if resources < 1 or chronons < 1:
        raise ValueError(f"need at least one resource and one chronon (got {resources}, {chronons})")
    probes = max(0, min(probes, resources * chronons))
    out: Schedule = []
    nxt = 0
    for t in range(chronons):
        k = (t + 1) * probes // chronons - t * probes // chronons
        for _ in range(k):
            out.append((t, nxt))
            nxt = (nxt + 1) % resources
    return out


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


def adaptive(updates: Sequence[Sequence[int]], chronons: int, params: AdaptiveParams) -> Schedule:
    """The adaptive reader's probes over ``updates`` (sorted update chronons per feed)."""
    params.check()
    n = len(updates)
    first = _interval(1, params)
    # New feeds are checked soon (Miniflux: at once), staggered over one typical
    # interval so the first pass is not one burst.
    heap = [((r * first) // max(n, 1), r) for r in range(n)]
    heapq.heapify(heap)
    known: list[set[int]] = [set() for _ in range(n)]
    out: Schedule = []
    while heap:
        t, r = heapq.heappop(heap)
        if t >= chronons:
            break
        out.append((t, r))
        ups = updates[r]
        hi = bisect_right(ups, t)
        known[r].update(ups[max(0, hi - params.window):hi])
        recent = sum(1 for u in known[r] if t - params.lookback < u <= t)
        heapq.heappush(heap, (t + _interval(recent, params), r))
    out.sort()
    return out


def _interval(recent: int, p: AdaptiveParams) -> int:
    top = max(p.min_interval, round(p.scale * p.max_interval))
    if recent == 0:
        return top
    return max(p.min_interval, min(top, round(p.scale * p.lookback / recent)))


def completeness(ceis: Sequence[CEI], schedule: Schedule) -> float:
    """CEI completeness of a reader's schedule (an update at ``u`` is visible to a probe at ``u``)."""
    return cei_outcome(ceis, (ProbeRec(r, t, float(t)) for t, r in schedule)).completeness


@dataclass(frozen=True, slots=True)
class ReaderRun:
    """One reader setting: its probes and CEI completeness."""

    probes: int
    completeness: float
    setting: float
    """The tuned knob: total probes (round robin) or the interval scale (adaptive)."""
    schedule: Schedule = field(default_factory=list, compare=False, repr=False)
    """The reader's probes as ``(chronon, feed)``, for its update-detection delays."""


def match_probes(
    kind: str, ceis: Sequence[CEI], updates: Sequence[Sequence[int]], chronons: int, probes: int,
    params: AdaptiveParams | None = None,
) -> ReaderRun:
    """The reader ``kind`` (``round-robin`` / ``adaptive``) tuned to about ``probes`` probes."""
    if kind == "round-robin":
        s = round_robin(len(updates), chronons, probes)
        return ReaderRun(len(s), completeness(ceis, s), float(probes), s)
    p = params or AdaptiveParams()
    run = _adaptive_run(ceis, updates, chronons, p)
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
    kind: str, ceis: Sequence[CEI], updates: Sequence[Sequence[int]], chronons: int, target: float,
    params: AdaptiveParams | None = None,
) -> ReaderRun | None:
    """The fewest probes (found by bisection) with which the reader reaches ``target``; None if never."""
    n = len(updates)
    if kind == "round-robin":
        def rr(p: int) -> ReaderRun:
            s = round_robin(n, chronons, p)
            return ReaderRun(len(s), completeness(ceis, s), float(p))

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
    run = _adaptive_run(ceis, updates, chronons, AdaptiveParams(
        1, p.max_interval, p.lookback, p.scale, p.window))
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
    ceis: Sequence[CEI], updates: Sequence[Sequence[int]], chronons: int, p: AdaptiveParams,
) -> Callable[[float], ReaderRun]:
    def run(scale: float) -> ReaderRun:
        s = adaptive(updates, chronons, AdaptiveParams(p.min_interval, p.max_interval, p.lookback,
                                                       scale, p.window))
        return ReaderRun(len(s), completeness(ceis, s), scale, s)

    return run


def updates_of(ceis: Sequence[CEI], resources: int) -> list[list[int]]:
    """Update chronons per resource recovered from CEIs (EI starts); a helper for tests."""
    per: list[set[int]] = [set() for _ in range(resources)]
    for cei in ceis:
        for ei in cei.eis:
            per[ei.resource].add(ei.start)
    return [sorted(s) for s in per]


__all__ = [
    "AdaptiveParams",
    "ReaderRun",
    "adaptive",
    "completeness",
    "match_probes",
    "probes_to_reach",
    "round_robin",
    "updates_of",
]
