"""When did a feed change? The update time a probe discovered.

A probe that finds new entries saw that the feed changed some time after the
previous successful probe: :func:`estimate_update_chronon` dates that change.
When feeds change in general (what sizes ``overwrite`` lives and spends the
background budget) is :mod:`proxy.rules.update_models`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from proxy.rules.ports import ChrononMapping

__all__ = ["estimate_update_chronon"]


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
