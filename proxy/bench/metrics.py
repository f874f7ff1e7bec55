"""Metrics of a monitoring run from ground truth alone: a publication log and probe records.

Times are in chronons as floats (chronon ``c`` covers ``[c, c+1)``), so the
same functions score the live service (wall times converted with the
service's origin and chronon length), the simulator and the plain-reader
baselines (integer chronons).

Rules (main paper §2; ``docs/benchmarks.md``):

- **EI capture.**  An EI on feed ``r`` for a publication at time ``p`` with
  window ``[start, finish]`` is captured by a successful probe of ``r`` whose
  chronon lies in the window *and* which started at or after ``p`` (a probe
  that ran before the entry existed did not see it, whatever the proxy's own
  bookkeeping says).  A CEI is captured when all its EIs are.
- **Entry capture** (last-N window).  Feed ``r`` shows its last ``N``
  entries; entry ``i`` leaves the feed when entry ``i+N`` is published.  It is
  captured by a successful probe started in ``[p_i, p_{i+N})``; its capture
  delay is the first such probe's start minus ``p_i``.

Deliberately not here: any I/O, clocks or knowledge of the service.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from proxy.core.model import CEI


@dataclass(frozen=True, slots=True)
class Pub:
    """One publication of the ground-truth log: feed ``resource`` at ``time`` (chronons)."""

    resource: int
    time: float


@dataclass(frozen=True, slots=True)
class ProbeRec:
    """One probe: of ``resource``, decided at ``chronon``, started at ``time`` (chronons)."""

    resource: int
    chronon: int
    time: float
    ok: bool = True


@dataclass(frozen=True, slots=True)
class CeiOutcome:
    """CEI completeness and, per captured CEI, the chronon it became complete."""

    captured: int
    total: int
    captured_at: Mapping[str, int]
    """CEI id → the chronon of the probe that completed it."""
    deadline: Mapping[str, int]
    """CEI id → its last EI finish (when a missed CEI is known to be missed)."""

    @property
    def completeness(self) -> float:
        return self.captured / self.total if self.total else 0.0


@dataclass(frozen=True, slots=True)
class EntryOutcome:
    """Entry completeness under the last-N window rule, with capture delays (chronons)."""

    captured: int
    total: int
    delays: tuple[float, ...]

    @property
    def completeness(self) -> float:
        return self.captured / self.total if self.total else 0.0


def _probes_by_resource(probes: Iterable[ProbeRec]) -> dict[int, list[ProbeRec]]:
    out: dict[int, list[ProbeRec]] = defaultdict(list)
    for p in probes:
        if p.ok:
            out[p.resource].append(p)
    for lst in out.values():
        lst.sort(key=lambda p: (p.chronon, p.time))
    return out


def cei_outcome(
    ceis: Sequence[CEI],
    probes: Iterable[ProbeRec],
    published: Mapping[tuple[int, int], float] | None = None,
) -> CeiOutcome:
    """Which CEIs the probes capture.

    ``published`` maps ``(resource, ei.start)`` to the publication time behind
    the EI; a missing key means the EI's start chronon itself (the simulator's
    convention: an update at ``u`` is visible to a probe at ``u``).
    """
    by_res = _probes_by_resource(probes)
    chronons = {r: [p.chronon for p in lst] for r, lst in by_res.items()}
    captured_at: dict[str, int] = {}
    deadline: dict[str, int] = {}
    for cei in ceis:
        deadline[cei.id] = max(ei.finish for ei in cei.eis)
        done = -1
        for ei in cei.eis:
            lst = by_res.get(ei.resource)
            if not lst:
                break
            seen = (published or {}).get((ei.resource, ei.start), float(ei.start))
            hit = None
            for i in range(bisect_left(chronons[ei.resource], ei.start), len(lst)):
                p = lst[i]
                if p.chronon > ei.finish:
                    break
                if p.time >= seen:
                    hit = p.chronon
                    break
            if hit is None:
                break
            done = max(done, hit)
        else:
            captured_at[cei.id] = done
    return CeiOutcome(len(captured_at), len(ceis), captured_at, deadline)


def entry_outcome(pubs: Sequence[Pub], probes: Iterable[ProbeRec], window: int) -> EntryOutcome:
    """Entries fetched before ``window`` newer entries pushed them out of their feed."""
    if window < 1:
        raise ValueError(f"the feed window must be >= 1 entry, got {window}")
    times: dict[int, list[float]] = defaultdict(list)
    for p in _iter_ok(probes):
        times[p.resource].append(p.time)
    for lst in times.values():
        lst.sort()
    per_feed: dict[int, list[float]] = defaultdict(list)
    for pub in pubs:
        per_feed[pub.resource].append(pub.time)
    delays: list[float] = []
    total = 0
    for r, pts in per_feed.items():
        pts.sort()
        probe_times = times.get(r, [])
        for i, at in enumerate(pts):
            total += 1
            leaves = pts[i + window] if i + window < len(pts) else math.inf
            j = bisect_left(probe_times, at)
            if j < len(probe_times) and probe_times[j] < leaves:
                delays.append(probe_times[j] - at)
    return EntryOutcome(len(delays), total, tuple(delays))


def _iter_ok(probes: Iterable[ProbeRec]) -> Iterable[ProbeRec]:
    return (p for p in probes if p.ok)


def budget_per_chronon(probes: Iterable[ProbeRec], chronons: int) -> list[int]:
    """Probes decided in each chronon ``0..chronons-1`` (failed probes count: they cost budget)."""
    used = [0] * chronons
    for p in probes:
        if 0 <= p.chronon < chronons:
            used[p.chronon] += 1
    return used


def completeness_curve(outcome: CeiOutcome, chronons: int) -> list[float]:
    """Completeness among CEIs resolved by each chronon (captured, or past their deadline)."""
    captured = [0] * (chronons + 1)
    resolved = [0] * (chronons + 1)
    for cid, last in outcome.deadline.items():
        at = outcome.captured_at.get(cid)
        t = min(at if at is not None else last, chronons - 1)
        resolved[max(t, 0)] += 1
        if at is not None:
            captured[max(t, 0)] += 1
    out: list[float] = []
    c = n = 0
    for t in range(chronons):
        c += captured[t]
        n += resolved[t]
        out.append(c / n if n else math.nan)
    return out


def quantiles(values: Sequence[float], qs: Sequence[float] = (0.5, 0.9, 0.99)) -> dict[str, float]:
    """Nearest-rank quantiles plus mean and max; NaN for an empty sample."""
    if not values:
        return {**{f"p{round(q * 100)}": math.nan for q in qs}, "mean": math.nan, "max": math.nan}
    s = sorted(values)
    out = {f"p{round(q * 100)}": s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))] for q in qs}
    out["mean"] = sum(s) / len(s)
    out["max"] = s[-1]
    return out
