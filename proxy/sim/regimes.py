"""Regime shifts on a synthetic trace: feeds whose rate changes once, for good (issue 45, item 3).

A real blog goes quiet for a month, a news feed doubles its output when an
editor changes: the rate a feed had is not the rate it has. :func:`shift_regimes`
takes a :class:`~proxy.sim.synthetic.WeeklyTrace` and, for ``share`` of its feeds
(drawn at random), multiplies the rate from a chronon drawn uniformly in the middle
of the trace (``[0.2, 0.8]`` of its span) onward by ``factor`` or ``1 / factor``
(either, equally likely): slower by thinning the later items, faster by adding a
Poisson process of the extra rate with the trace's weekly shape (by thinning,
as :func:`~proxy.sim.synthetic.weekly_trace` draws the items). Its own seeded
generator: the trace it starts from is unchanged, and ``share`` 0 returns it as is.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from proxy.sim.synthetic import HOURS_PER_WEEK, WeeklyTrace

__all__ = ["RegimeShift", "shift_regimes"]


@dataclasses.dataclass(frozen=True, slots=True)
class RegimeShift:
    """One feed's shift: from hour ``at`` (from the trace's start) its rate is ``factor`` times what it was."""

    feed: int
    at: float
    factor: float


def shift_regimes(trace: WeeklyTrace, share: float, factor: float, seed: int) -> tuple[WeeklyTrace, tuple[RegimeShift, ...]]:
    """``trace`` with ``share`` of its feeds shifted once by ``factor`` or ``1 / factor``; the shifts made."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the regime-shift share must be in [0, 1], got {share}")
    if not (factor >= 1.0 and math.isfinite(factor)):
        raise ValueError(f"the regime-shift factor must be a finite number >= 1, got {factor}")
    if share == 0.0 or factor == 1.0:
        return trace, ()
    rng = np.random.default_rng(seed)
    n = len(trace.hours)
    chosen = sorted(int(i) for i in rng.permutation(n)[: round(share * n)])
    hourly = np.asarray(trace.shape.hourly())
    peak = float(hourly.max())
    total_h = trace.weeks * HOURS_PER_WEEK
    hours = list(trace.hours)
    shifts: list[RegimeShift] = []
    for i in chosen:
        at = float(rng.uniform(0.2, 0.8) * total_h)
        f = factor if rng.uniform() < 0.5 else 1.0 / factor
        before = [h for h in hours[i] if h < at]
        after = np.asarray([h for h in hours[i] if h >= at], dtype=np.float64)
        if f < 1.0:
            after = after[rng.uniform(0.0, 1.0, size=after.size) < f]
        else:
            # The extra rate (f - 1) times the feed's base, with the week's shape, by thinning.
            lam_peak_h = (f - 1.0) * trace.weekly_rates[i] / HOURS_PER_WEEK * peak
            m = int(rng.poisson(lam_peak_h * (total_h - at)))
            cand = rng.uniform(at, total_h, size=m)
            keep = rng.uniform(0.0, 1.0, size=m) < hourly[cand.astype(np.int64) % HOURS_PER_WEEK] / peak
            after = np.concatenate((after, np.round(cand[keep], 4)))
        hours[i] = tuple(before) + tuple(sorted(float(h) for h in after))
        shifts.append(RegimeShift(i, round(at, 4), f))
    return dataclasses.replace(trace, hours=tuple(hours)), tuple(shifts)
