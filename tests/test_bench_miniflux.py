"""The Miniflux replica (issue 47, item 5) follows its source: ScheduleNextCheck and the batch of due feeds."""

from __future__ import annotations

import pytest

from proxy.bench.live import poisson_workload
from proxy.bench.peers.miniflux import (
    MinifluxSettings,
    match,
    next_interval,
    replica_results,
    schedule,
)

DEFAULTS = MinifluxSettings()


@pytest.mark.parametrize(("scheduler", "weekly", "delay", "minutes"), [
    ("entry-frequency", 0, 0, 1440),  # nothing dated within the week: the maximum
    ("entry-frequency", 1, 0, 1440),  # 10080 min, capped
    ("entry-frequency", 10, 0, 1008),
    ("entry-frequency", 2016, 0, 5),
    ("entry-frequency", 5000, 0, 5),  # round(2.016) = 2, raised to the 5 min minimum
    ("entry-frequency", 10, 1200, 1200),  # a longer TTL / Cache-Control / Retry-After delay wins
    ("entry-frequency", 10, 5000, 1440),  # ... up to the scheduler's maximum
    ("round-robin", 0, 0, 60),
    ("round-robin", 500, 0, 60),
    ("round-robin", 0, 120, 120),
    ("round-robin", 0, 9999, 1440),
])
def test_next_interval_is_schedule_next_check(scheduler: str, weekly: int, delay: int, minutes: int) -> None:
    assert next_interval(scheduler, weekly, delay, DEFAULTS) == minutes


def test_round_robin_feeds_wait_two_ticks_and_batches_take_the_most_overdue_first() -> None:
    # A minute = 1 chronon: created feeds are refreshed at 0; next_check_at = 60 min + the refresh
    # time is not < the tick at 60, so each waits to the tick at 120 (Miniflux with its defaults).
    assert schedule("round-robin", [[], []], 400, 1.0) == [
        (0.0, 0), (0.0, 1), (120.0, 0), (120.0, 1), (240.0, 0), (240.0, 1), (360.0, 0), (360.0, 1)]
    # Batches of one: the feed whose next_check_at is oldest goes first, the other a tick later.
    small = MinifluxSettings(batch_size=1)
    assert schedule("round-robin", [[], []], 250, 1.0, small)[:4] == [(0.0, 0), (0.0, 1), (120.0, 0), (180.0, 1)]


def test_entry_frequency_polls_busy_feeds_more_and_matches_a_get_count() -> None:
    busy, quiet = [float(t) for t in range(0, 3000, 2)], [5.0]
    probes = schedule("entry-frequency", [busy, quiet], 3000, 0.1)
    assert sum(1 for _, r in probes if r == 0) > 3 * sum(1 for _, r in probes if r == 1)
    minute, matched = match("round-robin", [[], [], []], 1000, 60)
    assert abs(len(matched) - 60) <= 3 and minute > 0


def test_replica_results_are_scored_as_replicas() -> None:
    bw = poisson_workload(resources=10, profiles=6, chronons=100, lam=8, rank=2, window=5, seed=1)
    for res in replica_results(bw, -0.1, 20, 80):
        assert res.name.startswith("replica miniflux-")
        assert abs(res.figures.feed_gets - 80) <= 0.05 * 80 + 10  # its GETs come in rounds of the feeds
        assert res.figures.bytes == -1 and 0 <= res.figures.completeness <= 1
