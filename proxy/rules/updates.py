"""When did a feed change? The update time a probe discovered, and the mean time between updates.

A probe that finds new entries saw that the feed changed some time after the
previous successful probe: :func:`estimate_update_chronon` dates that change.
:class:`UpdateModel` keeps the mean time between a feed's observed updates,
which sizes ``overwrite`` lives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from proxy.rules.ports import ChrononMapping

__all__ = ["UpdateModel", "estimate_update_chronon"]


def estimate_update_chronon(
    published: Iterable[datetime | None], previous: int, probe: int, clock: ChrononMapping
) -> int:
    """The chronon at which a feed changed, seen by a probe at ``probe`` after a success at ``previous``.

    The change happened in ``(previous, probe]``: the previous successful probe
    did not see the new entries, this one does. The estimate is the earliest
    publication date among the new entries, in chronons, clipped into that
    interval. A date that misses the interval by more than the interval's own
    length says nothing about it (junk such as ``0001-01-01``, a post
    back-dated by days, a clock years ahead) and is ignored; with no usable
    date the estimate is the interval's midpoint (rounded up).

    Bias (docs/discovery.md): a publication date is the publisher's word, and
    entries usually reach the document after it (drafts, caches, CDNs), so a
    dated estimate tends to be *early*: a discovery may be counted late when
    it was timely, seldom the reverse. The midpoint is the mean arrival time of
    one memoryless update in the interval, the unbiased guess without a date.
    """
    if probe <= previous:
        raise ValueError(f"the probe at {probe} must come after the previous success at {previous}")
    lo, hi = previous + 1, probe
    span = hi - lo + 1
    usable = [
        min(max(c, lo), hi)
        for c in (clock.chronon_at(p) for p in published if p is not None)
        if lo - span <= c <= hi + span
    ]
    return min(usable) if usable else (lo + hi + 1) // 2


class UpdateModel:
    """Per-feed estimate of the mean time between updates: an EWMA of observed gaps, in chronons.

    Updates are observed from notifications and from probes that found new
    entries (a probe only bounds the update time from above, so gaps are biased
    towards the probing rhythm; good enough to size an ``overwrite`` window).
    Repeated observations at the same chronon (a ping and the probe it causes)
    count once; out-of-order ones are ignored.
    """

    def __init__(self, *, alpha: float = 0.3, default_interval: int = 10, max_interval: int = 1440) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if not 1 <= default_interval <= max_interval:
            raise ValueError("need 1 <= default_interval <= max_interval")
        self.alpha = alpha
        self.default_interval = default_interval
        self.max_interval = max_interval
        self._last: dict[int, int] = {}
        self._ewma: dict[int, float] = {}

    def observe(self, resource: int, t: int) -> bool:
        """Record an update of ``resource`` at chronon ``t``; True when the model changed."""
        last = self._last.get(resource)
        if last is not None and t <= last:
            return False
        self._last[resource] = t
        if last is not None:
            gap = float(t - last)
            prev = self._ewma.get(resource)
            self._ewma[resource] = gap if prev is None else self.alpha * gap + (1 - self.alpha) * prev
        return True

    def mean_interval(self, resource: int) -> int:
        """The estimated chronons between updates, clamped to ``[1, max_interval]``."""
        estimate = self._ewma.get(resource)
        if estimate is None:
            return self.default_interval
        return min(self.max_interval, max(1, round(estimate)))

    def snapshot(self, resources: Iterable[int] | None = None) -> dict[str, list[float]]:
        """``{str(resource): [last_update, ewma_or_-1]}`` for ``resources`` (default: all)."""
        keys = self._last.keys() if resources is None else [r for r in resources if r in self._last]
        return {str(r): [self._last[r], self._ewma.get(r, -1.0)] for r in keys}

    def restore(self, data: Mapping[str, Sequence[float]]) -> None:
        """Merge a snapshot; for a feed known on both sides the later ``last_update`` wins."""
        for key, pair in data.items():
            r, last, ewma = int(key), int(pair[0]), float(pair[1])
            if r in self._last and self._last[r] >= last:
                continue
            self._last[r] = last
            if ewma >= 0:
                self._ewma[r] = ewma
            else:
                self._ewma.pop(r, None)
