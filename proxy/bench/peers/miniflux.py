"""A replica of Miniflux's two polling schedulers, written from its source (issue 47, item 5).

Miniflux cannot be built here (no Go toolchain), so it is a **replica**, listed as
``replica miniflux-entry-frequency`` / ``replica miniflux-round-robin``, never as a
peer.  What it replicates, from miniflux/v2:

- ``internal/storage/batch.go`` (``BatchBuilder.FetchJobs`` with
  ``WithNextCheckExpired`` and ``WithBatchSize``): every ``POLLING_FREQUENCY``
  minutes the scheduler takes the feeds whose ``next_check_at < now()``,
  ``ORDER BY next_check_at ASC LIMIT POLLING_BATCH_SIZE``, and refreshes them.
- ``internal/model/feed.go`` (``Feed.ScheduleNextCheck(weeklyCount,
  refreshDelayInMinutes)``): after a refresh, ``round_robin`` waits
  ``SCHEDULER_ROUND_ROBIN_MIN_INTERVAL`` minutes; ``entry_frequency`` waits
  ``round(7*24*60 / (weeklyCount * FACTOR))`` minutes clamped to
  ``[ENTRY_FREQUENCY_MIN_INTERVAL, ENTRY_FREQUENCY_MAX_INTERVAL]``, or the maximum
  when no entry is dated within the last week; a TTL / Retry-After /
  Cache-Control / Expires delay longer than that wins (the farm sends
  ``max-age=0``: none), and the result is capped by the scheduler's maximum.
- A new feed is refreshed when it is created (``next_check_at`` starts at creation).

Defaults are Miniflux's (``internal/config``): polling every 60 min, batches of 100,
round-robin 60 min (max 1440), entry frequency 5..1440 min, factor 1.

Time: like the peers, one knob: how many chronons a Miniflux minute lasts
(:func:`match`), bisected so that its feed GETs come out at the proxy's.  Its
probes become farm-like request records and go through the one scorer
(:func:`proxy.bench.peers._score.score`); the bytes it would have sent are not
known, so its line shows none.

Deliberately not here: HTTP.  Fetches take no time and always succeed.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from proxy.farm import RequestKind, RequestRecord

if TYPE_CHECKING:
    from proxy.bench.live import BenchWorkload
    from proxy.bench.peers._run import PollerResult

WEEK_MINUTES = 7 * 24 * 60
SCHEDULERS = ("entry-frequency", "round-robin")
REFRESH_SECONDS = 1.0
"""How long after its tick a refresh ends (its next check counts from then)."""


@dataclass(frozen=True, slots=True)
class MinifluxSettings:
    """Miniflux's polling settings (its environment variables), in its minutes."""

    polling_frequency: int = 60
    batch_size: int = 100
    round_robin_min_interval: int = 60
    round_robin_max_interval: int = 1440
    entry_frequency_min_interval: int = 5
    entry_frequency_max_interval: int = 1440
    entry_frequency_factor: int = 1


def next_interval(scheduler: str, weekly_count: int, refresh_delay: int, s: MinifluxSettings) -> int:
    """Minutes until the next check: ``Feed.ScheduleNextCheck`` in internal/model/feed.go."""
    interval = s.round_robin_min_interval
    if scheduler == "entry-frequency":
        if weekly_count <= 0:
            interval = s.entry_frequency_max_interval
        else:
            # Go's math.Round rounds half away from zero.
            interval = math.floor(WEEK_MINUTES / (weekly_count * s.entry_frequency_factor) + 0.5)
            interval = min(interval, s.entry_frequency_max_interval)
            interval = max(interval, s.entry_frequency_min_interval)
    if refresh_delay > 0 and refresh_delay > interval:
        interval = refresh_delay
    cap = s.round_robin_max_interval if scheduler == "round-robin" else s.entry_frequency_max_interval
    return min(interval, cap)


def schedule(scheduler: str, updates: Sequence[Sequence[float]], chronons: int, minute: float,
             s: MinifluxSettings | None = None, window: int = 20) -> list[tuple[float, int]]:
    """Miniflux's refreshes ``(time in chronons, feed)`` over ``updates`` (entry times per feed).

    ``minute``: chronons per Miniflux minute.  The weekly count is of the entries
    it has seen (the last ``window`` a feed showed at each refresh) dated within
    the last week, as it counts its stored entries.
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
    s = s or MinifluxSettings()
    n = len(updates)
    series = [sorted(u) for u in updates]
    known = [bytearray(len(x)) for x in series]
    out: list[tuple[float, int]] = []

    def refresh(t: float, r: int) -> float:
        out.append((t, r))
        ups = series[r]
        hi = bisect_right(ups, t)
        lo = max(0, hi - window)
        known[r][lo:hi] = b"\x01" * (hi - lo)
        weekly = known[r].count(1, bisect_right(ups, t - WEEK_MINUTES * minute), hi)
        # ScheduleNextCheck counts from time.Now() when the refresh ends, a little after the tick
        # that started it; so with an interval equal to the polling frequency, the next tick finds
        # next_check_at not yet < now() and the feed waits one more tick (as Miniflux's does).
        return t + REFRESH_SECONDS / 60 * minute + next_interval(scheduler, weekly, 0, s) * minute

    # Created feeds are refreshed at once, then wait for the polling ticks.
    due = [(refresh(0.0, r), r) for r in range(n)]
    heapq.heapify(due)
    tick = s.polling_frequency * minute
    t = tick
    while t < chronons:
        batch: list[tuple[float, int]] = []
        while due and due[0][0] < t and len(batch) < s.batch_size:
            batch.append(heapq.heappop(due))
        for _, r in batch:
            heapq.heappush(due, (refresh(t, r), r))
        t += tick
    return [(t, r) for t, r in out if t < chronons]


def as_requests(probes: Sequence[tuple[float, int]], feeds: Sequence[int], updates: Sequence[Sequence[float]],
                ) -> list[RequestRecord]:
    """The refreshes as the farm would log them (ms = chronons x 1000; 304 when nothing was new).

    Miniflux sends the ETag and Last-Modified it stored with every refresh after the first.
    """
    last: dict[int, float] = {}
    out = []
    for t, r in sorted(probes):
        prev = last.get(r)
        fresh = prev is not None and not any(prev < u <= t for u in updates[r])
        last[r] = t
        out.append(RequestRecord(round(t * 1000), "GET", f"/feeds/{feeds[r]}.xml", RequestKind.FEED,
                                 str(feeds[r]), 304 if fresh else 200, '"etag"' if prev is not None else None,
                                 None, -1, "Miniflux replica"))
    return out


def match(scheduler: str, updates: Sequence[Sequence[float]], chronons: int, gets: int,
          s: MinifluxSettings | None = None, window: int = 20) -> tuple[float, list[tuple[float, int]]]:
    """The minute (chronons) whose run makes about ``gets`` refreshes, and that run."""
    lo, hi = 1e-6, float(chronons)  # refreshes fall as the minute grows
    best_m = math.sqrt(lo * hi)
    best = schedule(scheduler, updates, chronons, best_m, s, window)
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        cur = schedule(scheduler, updates, chronons, mid, s, window)
        if abs(len(cur) - gets) < abs(len(best) - gets):
            best_m, best = mid, cur
        if len(cur) > gets:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.0001:
            break
    return best_m, best


def replica_results(bw: BenchWorkload, phase: float, feed_window: int, gets: int) -> list[PollerResult]:
    """Both schedulers on ``bw``'s watched feeds, each tuned to ``gets`` refreshes, scored by the one scorer."""
    from proxy.bench.live import reader_view
    from proxy.bench.metrics import Pub
    from proxy.bench.peers._run import PollerResult
    from proxy.bench.peers._score import RunClock, score

    k = bw.workload.chronons
    feeds = reader_view(bw).feeds
    # Entries are dated at publication (u + phase); history (if any) is what first fetches show.
    updates = [sorted([u + phase for u in bw.updates[r]] + list(bw.history[r] if bw.history else ()))
               for r in feeds]
    pubs = [Pub(r, u + phase) for r in range(bw.workload.resources) for u in bw.updates[r]]
    published = {(r, u): u + phase for r in range(bw.workload.resources) for u in bw.updates[r]}
    clock = RunClock(0.0, 1.0, k)
    out = []
    for scheduler in SCHEDULERS:
        minute, probes = match(scheduler, updates, k, gets, window=feed_window)
        records = as_requests(probes, feeds, updates)
        figures = score(records, clock, bw.workload.ceis, pubs, published, frozenset(feeds), feed_window,
                        {str(r): r for r in range(bw.workload.resources)})
        settings = {"scheduler": scheduler.replace("-", "_"), **asdict(MinifluxSettings()),
                    "minute_chronons": round(minute, 4),
                    "source": "miniflux/v2 internal/model/feed.go ScheduleNextCheck, "
                              "internal/storage/batch.go FetchJobs"}
        out.append(PollerResult(f"replica miniflux-{scheduler}", figures, clock, settings, tuple(records),
                                note="bytes not measured (a replica)"))
    return out
