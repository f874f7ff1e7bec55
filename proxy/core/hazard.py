"""Age-dependent hazards: how likely a feed is to change given the time since its last publication.

A Poisson rate says how often a feed changes, not when. Real news feeds are
not Poisson at the bench's pace (issue 45, ``docs/discovery.md``, "Age
hazards"): pooled over the real trace's feeds, the chance of an update in the
chronon after a publication is 3.4 times the feed's mean rate, 0.6–0.8 times
it three to eight chronons on, and 2.3 times it again a day later. A probe's
document dates its entries, so after each probe the time since the feed's
last publication (its *age*) is known.

:class:`AgeHazard` learns one table of the hazard by age relative to each
feed's mean rate, pooled over the feeds: for each bin of ages, the updates
that came at that age over the updates the feed's mean rate expected in the
chronons spent at that age (a renewal process's hazard, the age reset by each
publication). Every stretch of ages is counted once it is observed: up to a
dated entry (an event at its age), or up to a probe that found nothing more
(survival). Each bin is shrunk toward 1 (Poisson) by ``strength`` expected
updates, so a table learnt from little says little. :meth:`AgeHazard.shape`
hands the table to the allocation as a :class:`proxy.core.rates.CycleShape`
starting at the feed's last publication, so ``CaptureExplore`` reads a feed at
its age: its frequency from the updates expected over the next chronons, its
fill index from those expected since its last probe (the same path as a
seasonal model's cycle). Past ``horizon`` chronons of age the feed is read at
its mean again (no shape).

Bounded memory: the table (one pair of floats per bin), and per feed its last
publication, how far its ages were observed, and its shape (``2 horizon``
floats, rebuilt at most once per probe). Cost per probe: O(bins) per new
entry, plus one shape (``benchmarks/machinery/bench_hazard.py``).

Pure: chronons in, shapes out. Does not know rules, budgets nor the clock; the
caller converts the documents' dates into chronons. Not per feed: a feed's own
table would need far more publications than a run of the bench holds.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Iterable

from proxy.core.rates import CycleShape

__all__ = ["AGE_EDGES", "REBUILD", "AgeHazard"]

AGE_EDGES: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0)
"""Upper edges of the age bins, in chronons: ``(0, 1], (1, 2], ..., (48, 64]``, then one open bin past 64."""
REBUILD = 32
"""Observations (entries and probes) that change the table between two rebuilds of the shapes' weights."""


class AgeHazard:
    """A pooled table of the hazard by age since the last publication, relative to the mean rate (module docstring)."""

    __slots__ = ("_bin_of_age", "_edges", "_events", "_expected", "_horizon", "_last", "_merge", "_seen", "_shapes",
                 "_strength", "_version", "_weights", "_weights_at")

    def __init__(self, *, strength: float = 5.0, horizon: int = 64, merge: float = 0.5,
                 edges: Iterable[float] = AGE_EDGES) -> None:
        self._edges = tuple(float(e) for e in edges)
        if not self._edges or any(b <= a for a, b in zip(self._edges, self._edges[1:], strict=False)) \
                or self._edges[0] <= 0:
            raise ValueError("edges must be positive and increasing")
        if strength <= 0:
            raise ValueError(f"strength must be > 0, got {strength}")
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        if merge < 0:
            raise ValueError(f"merge must be >= 0, got {merge}")
        self._strength = strength
        self._horizon = horizon
        self._merge = merge  # entries closer than this to the previous one are one publication
        self._events = [0.0] * (len(self._edges) + 1)
        self._expected = [0.0] * (len(self._edges) + 1)
        self._last: dict[int, float] = {}  # per feed: its newest publication, in chronons
        self._seen: dict[int, float] = {}  # per feed: its ages are observed up to this chronon
        self._shapes: dict[int, CycleShape | None] = {}
        self._version = 0
        # The bin of each whole chronon of age the shapes hold (the chronon (a, a + 1] by its end).
        self._bin_of_age = [bisect.bisect_left(self._edges, a + 1.0) for a in range(2 * horizon)]
        self._weights: CycleShape | None = None  # the table as a shape from age 0 (_template)
        self._weights_at = 0

    def ratios(self) -> tuple[float, ...]:
        """Per bin (``AGE_EDGES``, then the open bin): the hazard over the mean rate, shrunk toward 1."""
        s = self._strength
        return tuple((e + s) / (x + s) for e, x in zip(self._events, self._expected, strict=True))

    def ratio(self, age: float) -> float:
        """The hazard over the mean rate at ``age`` chronons since the last publication."""
        k = bisect.bisect_left(self._edges, age)
        return (self._events[k] + self._strength) / (self._expected[k] + self._strength)

    def observe(self, feed: int, now: float, dates: Iterable[float], rate: float) -> None:
        """A probe of ``feed`` at ``now`` showed entries dated ``dates`` (chronons; any order, old ones too).

        ``rate``: the feed's mean rate per chronon as the caller believes it now (what the table is
        relative to). Dates at or before the feed's known newest publication (plus ``merge``) are
        ones already counted; the first date a feed shows starts its ages and counts nothing.
        """
        if rate < 0:
            raise ValueError(f"rate must be >= 0, got {rate}")
        last = self._last.get(feed)
        seen = self._seen.get(feed, now)
        changed = False
        # Most of a document's dates are old: only those past the newest known one (and merge) are news.
        fresh = dates if last is None else [d for d in dates if d > last + self._merge]
        for d in sorted(fresh):
            if d > now:
                d = now  # a date in the future (a clock's skew) is read as now
            if last is None:
                last, seen, changed = d, d, True
                continue
            if d <= last + self._merge:
                continue
            self._expose(max(seen, last) - last, d - last, rate)
            self._events[bisect.bisect_left(self._edges, d - last)] += 1.0
            last, seen, changed = d, d, True
            self._version += 1
        if last is None:
            return
        if now > seen:
            self._expose(seen - last, now - last, rate)
            self._version += 1
        self._last[feed], self._seen[feed] = last, max(seen, now)
        shape = self._shapes.get(feed)
        template = self._template()
        if changed or shape is None or shape.weights is not template.weights:
            self._shapes[feed] = _moved(template, last)

    def shape(self, feed: int, now: float) -> CycleShape | None:
        """``feed``'s intensity relative to its mean from its last publication on; ``None`` past ``horizon``.

        ``None`` too for a feed no probe has dated yet. The shape is the table as of the feed's last
        probe (rebuilt there, not each chronon).
        """
        last = self._last.get(feed)
        if last is None or now - last > self._horizon:
            return None
        return self._shapes.get(feed)

    def age(self, feed: int) -> float | None:
        """``feed``'s newest known publication, in chronons (``None``: none dated yet)."""
        return self._last.get(feed)

    def drop(self, feed: int) -> None:
        """Forget ``feed`` (deleted or no longer watched); the pooled table keeps what it taught."""
        self._last.pop(feed, None)
        self._seen.pop(feed, None)
        self._shapes.pop(feed, None)

    def __len__(self) -> int:
        return len(self._last)

    def _expose(self, a: float, b: float, rate: float) -> None:
        """The mean rate's expected updates over ages ``(a, b]``, spread over the bins."""
        if b <= a or rate <= 0:
            return
        lo = 0.0
        for k, hi in enumerate((*self._edges, float("inf"))):
            if hi > a and lo < b:
                self._expected[k] += rate * (min(b, hi) - max(a, lo))
            if hi >= b:
                break
            lo = hi

    def _template(self) -> CycleShape:
        """The table as a shape from age 0: one weight per chronon of age over ``2 horizon`` chronons, mean 1.

        Rebuilt once ``REBUILD`` observations have changed the table since the last one, not at
        every probe: a bin moves little by one more observation, and a rebuild is the costly part.
        """
        if self._weights is None or self._version - self._weights_at >= REBUILD:
            ratios = self.ratios()
            raw = [ratios[k] for k in self._bin_of_age]
            mean = sum(raw) / len(raw)
            self._weights = CycleShape(0.0, 2.0 * self._horizon, tuple(w / mean for w in raw))
            self._weights_at = self._version
        return self._weights


def _moved(template: CycleShape, start: float) -> CycleShape:
    """``template`` starting at ``start``: its weights and cumulative sums shared, not validated again."""
    shape = copy.copy(template)
    object.__setattr__(shape, "start", start)  # a fresh copy of a frozen dataclass, not the shared template
    return shape
