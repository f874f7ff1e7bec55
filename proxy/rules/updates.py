"""When did a feed change? The update time a probe discovered.

A probe that finds new entries saw that the feed changed some time after the
previous successful probe: :func:`estimate_update_chronon` dates that change,
and :func:`update_chronons` lists every distinct change its dates show (a watch
rule whose CEI began inside the interval wants the first one after that start).
When feeds change in general (what sizes ``overwrite`` lives and spends the
background budget) is :mod:`proxy.rules.update_models`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from proxy.rules.ports import ChrononMapping

__all__ = ["DATE_RESOLUTION", "changes_since", "estimate_update_chronon", "update_chronons"]

DATE_RESOLUTION = timedelta(seconds=1)
"""How coarse a feed's dates are: whole seconds (RFC 822 dates, most Atom feeds)."""


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
    return update_chronons(published, previous, probe, clock)[0]


def update_chronons(
    published: Iterable[datetime | None], previous: int, probe: int, clock: ChrononMapping
) -> list[int]:
    """Every distinct chronon the new entries date a change at, ascending; never empty.

    The dates :func:`estimate_update_chronon` reads, each clipped into
    ``(previous, probe]`` the same way and junk ignored the same way; its
    estimate is the first of them. With no usable date the list is the
    midpoint alone. Several entries dated inside one interval are several
    changes: a watch rule whose current CEI began after the first of them
    takes the first one after its start (AuctionWatch), and one probe can
    complete a CEI and begin the next.
    """
    if probe <= previous:
        raise ValueError(f"the probe at {probe} must come after the previous success at {previous}")
    lo, hi = previous + 1, probe
    span = hi - lo + 1
    usable = {
        min(max(c, lo), hi)
        for c in (clock.chronon_at(p) for p in published if p is not None)
        if lo - span <= c <= hi + span
    }
    return sorted(usable) if usable else [(lo + hi + 1) // 2]


def changes_since(published: Iterable[datetime | None], since: int, probe: int, clock: ChrononMapping) -> list[int]:
    """The distinct chronons at or after ``since`` that a feed's first successful probe dates changes at.

    The first document of a feed is its backlog: an entry dated before
    ``since`` (the chronon a rule was installed in) is history, but one dated
    at or after it is a change that happened while the rule existed, which the
    rule would have seen had the feed been probed earlier. Feed dates carry
    whole seconds (RFC 822, most Atom feeds), so an entry published in the
    install's own second may show a date up to :data:`DATE_RESOLUTION` before
    the install: it counts, at ``since``. Otherwise, unlike
    :func:`update_chronons`, nothing earlier is clipped up (a date before the
    install is backlog, not cache lag) and an undated entry says nothing, so
    the list may be empty. A date ahead of the probe by no more than
    ``probe - since + 1`` chronons is clipped to the probe; further ahead it
    is junk.
    """
    if probe < since:
        return []
    span = probe - since + 1
    earliest = clock.start_of(since) - DATE_RESOLUTION
    out: set[int] = set()
    for p in published:
        if p is None or p < earliest:
            continue
        c = clock.chronon_at(p)
        if c <= probe + span:
            out.add(min(max(c, since), probe))
    return sorted(out)
