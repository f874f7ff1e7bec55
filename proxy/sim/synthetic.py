"""Paper 002's workloads: a weekly-cycle synthetic trace, Num Update Watch CEIs, FPN noise.

* :func:`weekly_trace` — "Synthetic Data 2" (paper 002 §4.1): a stochastic
  cyclic model of one week, working days apart from weekends and working
  hours apart from nights, exponential inter-arrival times (a
  non-homogeneous Poisson process, drawn by thinning). Per-feed base rates
  are lognormal, so a few feeds produce most items (Hmedeh et al.: 17 % of
  feeds produce 97 % of the items; ours is milder). :func:`write_trace_csv`
  writes it in the real trace's shape (``feed_id,timestamp_utc_iso``), so
  ``proxy sim gen --trace`` and ``proxy bench live --workload trace --trace``
  replay it too. With :class:`CoUpdates`, clusters of feeds also react to
  common events (one story reaching several news feeds within minutes,
  issue 45, item 4).
* :func:`num_update_watch` — paper 002 §2.1's rule "notify every ``X`` new
  items" on each feed: one rank-1 CEI per ``X``-th update, life
  ``window(Y)`` or ``overwrite``, every EI an update EI (``reveal = start``).
  ``meta.update_chronons`` keeps every update, so a pull-only run sees the
  updates that open no EI as well.
* :func:`fpn_predictions` — paper 002 §4.1's FPN(ρ) update model: the true
  update times, each kept with probability ``ρ`` and otherwise moved to a
  uniformly random chronon (ρ = 1: the model is exact).

Seeded ``numpy.random.Generator`` s only; a seed reproduces a file byte for byte.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import numpy.typing as npt

from proxy.core.model import CEI, EI, Budget, Workload
from proxy.sim.generate import Life, ei_for_update

#: A Monday, so that week days fall where the weekly shape expects them.
EPOCH_START = datetime(2026, 1, 5, tzinfo=UTC)
HOURS_PER_WEEK = 168


@dataclass(frozen=True, slots=True)
class WeekShape:
    """Relative update intensity by hour: working hours of week days, nights, weekends (mean 1)."""

    work: float = 3.0  # Monday-Friday, 09:00-18:00
    evening: float = 1.0  # Monday-Friday, other hours
    weekend: float = 0.4

    def hourly(self) -> list[float]:
        """168 multipliers from Monday 00:00, rescaled to mean 1."""
        raw = []
        for h in range(HOURS_PER_WEEK):
            day, hour = divmod(h, 24)
            raw.append(self.weekend if day >= 5 else self.work if 9 <= hour < 18 else self.evening)
        mean = sum(raw) / len(raw)
        return [x / mean for x in raw]

    def per_chronon(self, chronons: int, weeks: float) -> list[float]:
        """The shape on an epoch of ``chronons`` covering ``weeks`` weeks, one multiplier per chronon.

        Only a whole number of chronons per week makes it a cycle; the caller
        gets the full list (``KnownRates`` takes it as a cycle of length K).
        """
        hourly = self.hourly()
        hours = weeks * HOURS_PER_WEEK
        out = [hourly[int((t + 0.5) * hours / chronons) % HOURS_PER_WEEK] for t in range(chronons)]
        mean = sum(out) / len(out)
        return [x / mean for x in out]


@dataclass(frozen=True, slots=True)
class CoUpdates:
    """Clusters of feeds that react to common events: the co-updates of news feeds (issue 45, item 4).

    ``share`` of the feeds (drawn at random) are dealt round-robin into
    ``clusters`` clusters. Each cluster has its own events, ``events_per_week``
    on average with the trace's weekly shape; at an event at ``t`` each member
    publishes with probability ``react_prob``, at ``t`` plus a lag uniform in
    ``[0, lag_minutes]``. These items come on top of the feed's own (its base
    rate). ``clusters`` 0: no co-updates, the trace of :func:`weekly_trace`
    without them, byte for byte.
    """

    clusters: int = 0
    share: float = 0.5
    events_per_week: float = 3.0
    react_prob: float = 0.7
    lag_minutes: float = 10.0

    def __post_init__(self) -> None:
        if self.clusters < 0:
            raise ValueError(f"clusters must be >= 0, got {self.clusters}")
        if not 0.0 <= self.share <= 1.0 or not 0.0 <= self.react_prob <= 1.0:
            raise ValueError("cluster share and react probability must be in [0, 1]")
        if self.events_per_week < 0 or self.lag_minutes < 0:
            raise ValueError("cluster events per week and lag must be >= 0")


@dataclass(frozen=True, slots=True)
class WeeklyTrace:
    """Per feed: its base rate (items per week) and its publication times (hours from :data:`EPOCH_START`).

    ``clusters``: the feed indices of each co-update cluster (:class:`CoUpdates`; empty without).
    """

    names: tuple[str, ...]
    weekly_rates: tuple[float, ...]
    hours: tuple[tuple[float, ...], ...]
    weeks: float
    shape: WeekShape
    clusters: tuple[tuple[int, ...], ...] = ()


def weekly_trace(
    feeds: int, seed: int, *, weeks: float = 4.0, items_per_week: float = 1.3, sigma: float = 1.0,
    shape: WeekShape | None = None, coupdates: CoUpdates | None = None,
) -> WeeklyTrace:
    """Paper 002's "Synthetic Data 2": ``feeds`` feeds over ``weeks`` weeks with a weekly cycle.

    The defaults give about 5.3 items per feed over 4 weeks, as 002's Table 2
    (792 objects, 4194 events). Per-feed weekly rates are lognormal with mean
    ``items_per_week``. ``coupdates``: clusters reacting to common events, drawn
    after the feeds' own items from the same generator (so the own items do not
    depend on them).
    """
    if feeds < 1:
        raise ValueError(f"feeds must be >= 1, got {feeds}")
    if weeks <= 0 or items_per_week <= 0 or sigma < 0:
        raise ValueError("weeks and items_per_week must be > 0, sigma >= 0")
    shape = shape or WeekShape()
    rng = np.random.default_rng(seed)
    rates = items_per_week * np.exp(sigma * rng.standard_normal(feeds) - sigma**2 / 2)
    hourly = np.asarray(shape.hourly())
    peak = float(hourly.max())
    total_h = weeks * HOURS_PER_WEEK
    out: list[tuple[float, ...]] = []
    for lam_week in rates.tolist():
        # Thinning: candidates at the peak rate, each kept with intensity / peak.
        lam_peak_h = lam_week / HOURS_PER_WEEK * peak
        n = int(rng.poisson(lam_peak_h * total_h))
        cand = np.sort(rng.uniform(0.0, total_h, size=n))
        keep = rng.uniform(0.0, 1.0, size=n) < hourly[(cand.astype(np.int64)) % HOURS_PER_WEEK] / peak
        out.append(tuple(round(float(h), 4) for h in cand[keep]))
    width = len(str(feeds - 1))
    names = tuple(f"syn{i:0{width}d}" for i in range(feeds))
    clusters: tuple[tuple[int, ...], ...] = ()
    if coupdates is not None and coupdates.clusters > 0:
        clusters = _co_updates(out, coupdates, rng, hourly, total_h)
    return WeeklyTrace(names, tuple(float(r) for r in rates), tuple(out), weeks, shape, clusters)


def _co_updates(
    out: list[tuple[float, ...]], co: CoUpdates, rng: np.random.Generator, hourly: npt.NDArray[np.float64],
    total_h: float,
) -> tuple[tuple[int, ...], ...]:
    """Add each cluster's reactions to its events to ``out`` (in place); the clusters' feed indices."""
    members = rng.permutation(len(out))[: round(co.share * len(out))]
    clusters = tuple(tuple(sorted(int(i) for i in members[c :: co.clusters])) for c in range(co.clusters))
    peak = float(hourly.max())
    for cluster in clusters:
        # The events: a Poisson process with the week's shape, by thinning as the feeds' own items.
        n = int(rng.poisson(co.events_per_week / HOURS_PER_WEEK * peak * total_h))
        cand = np.sort(rng.uniform(0.0, total_h, size=n))
        events = cand[rng.uniform(0.0, 1.0, size=n) < hourly[cand.astype(np.int64) % HOURS_PER_WEEK] / peak]
        for i in cluster:
            react = rng.uniform(0.0, 1.0, size=events.size) < co.react_prob
            lag = rng.uniform(0.0, co.lag_minutes / 60.0, size=events.size)
            at = np.minimum(events[react] + lag[react], np.nextafter(total_h, 0.0))
            extra = [round(float(h), 4) for h in at]
            out[i] = tuple(sorted(out[i] + tuple(extra)))
    return clusters


def write_trace_csv(trace: WeeklyTrace, path: Path) -> int:
    """Write ``feed_id,timestamp_utc_iso`` rows (the real trace's shape); returns how many."""
    rows = 0
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["feed_id", "timestamp_utc_iso"])
        for name, hours in zip(trace.names, trace.hours, strict=True):
            for h in hours:
                ts = EPOCH_START + timedelta(seconds=round(h * 3600))
                w.writerow([name, ts.strftime("%Y-%m-%dT%H:%M:%SZ")])
                rows += 1
    return rows


def trace_chronons(trace: WeeklyTrace, chronons: int) -> list[list[int]]:
    """Distinct update chronons per feed when ``trace``'s weeks are cut into ``chronons``."""
    scale = chronons / (trace.weeks * HOURS_PER_WEEK)
    return [sorted({min(int(h * scale), chronons - 1) for h in hours}) for hours in trace.hours]


def num_update_watch(
    updates: Sequence[Sequence[int]], chronons: int, *, every: int = 1, life: Life = Life.WINDOW,
    window: int = 10, budget: int | Sequence[int] = 1, meta: dict[str, object] | None = None,
) -> Workload:
    """Paper 002 §2.1 "Num Update Watch" on every feed: an EI at each ``every``-th update.

    EI ``[u, u + window]`` (or ``[u, next update - 1]`` for ``overwrite``), a
    rank-1 CEI of profile ``f<r>``; each EI is an update EI (``reveal = start``).
    """
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    pending: list[tuple[int, int, EI]] = []
    for r, ups in enumerate(updates):
        ups = sorted(set(ups))
        for i in range(every - 1, len(ups), every):
            s, f = ei_for_update(ups, i, life, window, chronons)
            pending.append((s, r, EI(r, s, f, s)))
    pending.sort(key=lambda x: (x[0], x[1]))
    width = len(str(max(len(pending) - 1, 0)))
    ceis = tuple(CEI(f"c{i:0{width}d}", f"f{r}", (ei,)) for i, (_, r, ei) in enumerate(pending))
    b = Budget(budget if isinstance(budget, int) else tuple(budget))
    info: dict[str, object] = {
        "generator": "proxy.sim.synthetic.num_update_watch/1",
        "every": every,
        "params": {"life": str(life), "window": window},
        "update_chronons": [sorted(set(u)) for u in updates],
        **(meta or {}),
    }
    wl = Workload(chronons=chronons, budget=b, resources=len(updates), ceis=ceis, meta=info)
    wl.validate()
    return wl


def fpn_predictions(
    updates: Sequence[Sequence[int]], rho: float, chronons: int, rng: np.random.Generator
) -> list[list[int]]:
    """FPN(ρ): each true update kept with probability ``ρ``, else moved to a uniform chronon."""
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho}")
    out: list[list[int]] = []
    for ups in updates:
        arr = np.asarray(sorted(set(ups)), dtype=np.int64)
        moved = rng.uniform(0.0, 1.0, size=len(arr)) >= rho
        arr[moved] = rng.integers(0, chronons, size=int(moved.sum()))
        out.append(sorted(set(arr.tolist())))
    return out
