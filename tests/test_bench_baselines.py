"""Plain-reader baselines: schedules with known shapes and completeness on hand-made CEIs."""

from __future__ import annotations

import itertools
import random

import pytest

from proxy.bench.baselines import (
    AdaptiveParams,
    adaptive,
    completeness,
    feed_orders,
    match_probes,
    probes_to_reach,
    round_robin,
)
from proxy.bench.live import lagged
from proxy.bench.metrics import ProbeRec, cei_outcome
from proxy.core.model import CEI, EI, Budget, Workload


def test_round_robin_spreads_probes_evenly_and_cycles_feeds() -> None:
    s = round_robin(3, 6, 4)
    assert s == [(1, 0), (2, 1), (4, 2), (5, 0)]
    assert round_robin(2, 3, 100) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]  # capped at n*K
    with pytest.raises(ValueError, match="resource"):
        round_robin(0, 5, 1)


def test_adaptive_polls_busy_feeds_more_often() -> None:
    # Feed 0 updates every 2 chronons, feed 1 never: feed 1 waits max_interval each time.
    updates = [list(range(0, 100, 2)), []]
    p = AdaptiveParams(min_interval=1, max_interval=50, lookback=10, window=20)
    s = adaptive(updates, 100, p)
    per = [sum(1 for _, r in s if r == i) for i in (0, 1)]
    assert per[1] == 2  # at 25 (staggered start) and 75
    # 5 entries within a lookback of 10 -> interval 2 once the reader has seen them.
    assert per[0] >= 45
    assert s == sorted(s)


def test_adaptive_clamps_to_min_interval_and_learns_only_from_its_probes() -> None:
    updates = [list(range(100))]  # an update every chronon: 10 per lookback -> interval 1
    s = adaptive(updates, 20, AdaptiveParams(min_interval=3, max_interval=8, lookback=10, window=20))
    times = [t for t, _ in s]
    assert all(b - a >= 3 for a, b in itertools.pairwise(times))
    # The feed shows 2 entries: the probe at 0 sees 1 entry in the lookback (interval 10);
    # at 10 it sees entries 9 and 10 (with 0 remembered: 2 in (0, 10] -> interval 5); at 15
    # it sees 14 and 15 (4 known in (5, 15] -> interval round(2.5) = 2).
    s = adaptive(updates, 30, AdaptiveParams(min_interval=1, max_interval=50, lookback=10, window=2))
    assert [t for t, _ in s][:4] == [0, 10, 15, 17]
    with pytest.raises(ValueError, match="min_interval"):
        adaptive(updates, 10, AdaptiveParams(min_interval=5, max_interval=2))


CEIS = (
    CEI("a", "p0", (EI(0, 0, 2), EI(1, 1, 3))),
    CEI("b", "p0", (EI(0, 5, 7), EI(1, 6, 8))),
)
UPDATES = [[0, 5], [1, 6]]


def test_reader_completeness_and_matching_probes() -> None:
    assert completeness(CEIS, [(1, 0), (2, 1), (6, 0), (7, 1)]) == 1.0
    assert completeness(CEIS, [(1, 0), (4, 1)]) == 0.0
    run = match_probes("round-robin", CEIS, UPDATES, 10, 4)
    assert run.probes == 4
    best = probes_to_reach("round-robin", CEIS, UPDATES, 10, 1.0)
    assert best is not None and best.completeness == 1.0
    # Every feed every chronon reaches anything; fewer must not be claimed when it falls short.
    full = round_robin(2, 10, best.probes - 1)
    assert completeness(CEIS, full) < 1.0 or best.probes <= 4
    ad = match_probes("adaptive", CEIS, UPDATES, 10, 6, AdaptiveParams(max_interval=5, lookback=5))
    assert abs(ad.probes - 6) <= 2


def test_lagged_workload_reveals_each_ei_one_chronon_later() -> None:
    wl = Workload(chronons=10, budget=Budget(1), resources=2,
                  ceis=(CEI("a", "p", (EI(0, 2, 5, 2), EI(1, 9, 9, 9))),))
    (cei,) = lagged(wl).ceis
    assert cei.eis == (EI(0, 2, 5, 3), EI(1, 9, 9, 9))  # a probe at 2 still captures
    (cei,) = lagged(wl, shift_start=True).ceis
    assert cei.eis == (EI(0, 3, 5, 3), EI(1, 9, 9, 9))  # the entry appears after 2's probes


def test_feed_orders_start_with_the_feeds_own_order_then_seeded_shuffles() -> None:
    orders = feed_orders(6, 5)
    assert orders[0] == [0, 1, 2, 3, 4, 5]
    assert len(orders) == 5 and all(sorted(o) == list(range(6)) for o in orders)
    assert any(o != orders[0] for o in orders[1:])
    assert feed_orders(6, 5) == orders  # seeded: every run compares the same readers
    assert feed_orders(6, 1) == [orders[0]]
    with pytest.raises(ValueError, match="orders"):
        feed_orders(6, 0)


def test_readers_visit_the_feeds_in_the_order_given() -> None:
    assert round_robin(3, 3, 6, [2, 0, 1]) == [(0, 2), (0, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
    with pytest.raises(ValueError, match="each of the 3 feeds once"):
        round_robin(3, 3, 6, [0, 0, 1])
    # The adaptive reader staggers its first probes over one interval in that order.
    p = AdaptiveParams(min_interval=1, max_interval=9, lookback=3, window=5)
    firsts = {r: min(t for t, q in adaptive([[], [], []], 9, p, [1, 2, 0]) if q == r) for r in range(3)}
    assert firsts == {1: 0, 2: 1, 0: 2}


# Feed 0 updates at 0, feed 1 at 1: one probe a chronon, each EI open for one chronon. Visiting
# 0 then 1 catches both; visiting 1 then 0 catches neither.
LUCKY = (CEI("a", "p", (EI(0, 0, 0),)), CEI("b", "p", (EI(1, 1, 1),)))


def test_a_readers_figure_is_its_mean_over_feed_orders() -> None:
    orders = feed_orders(2, 16)
    assert [1, 0] in orders
    each = [completeness(LUCKY, round_robin(2, 4, 4, o)) for o in orders]
    assert sorted(set(each)) == [0.0, 1.0]  # the feeds' own order is the lucky one
    run = match_probes("round-robin", LUCKY, [[0], [1]], 4, 4, orders=16)
    assert run.spread == tuple(each) and run.spread[0] == 1.0
    assert run.completeness == pytest.approx(sum(each) / 16) and run.completeness < 1.0
    assert len(run.schedules) == 16 and run.schedule == run.schedules[0] == round_robin(2, 4, 4)
    assert match_probes("round-robin", LUCKY, [[0], [1]], 4, 4).completeness == 1.0  # one order: the own
    ad = match_probes("adaptive", LUCKY, [[0], [1]], 4, 4, AdaptiveParams(max_interval=2, lookback=2), 16)
    assert ad.completeness == pytest.approx(sum(ad.spread) / 16)


def test_probes_to_reach_a_target_on_the_mean_over_orders() -> None:
    one = probes_to_reach("round-robin", LUCKY, [[0], [1]], 4, 1.0)
    assert one is not None and one.probes == 4  # the own order catches both with a probe a chronon
    many = probes_to_reach("round-robin", LUCKY, [[0], [1]], 4, 1.0, orders=16)
    assert many is not None and many.completeness == 1.0 and many.probes == 8  # every order: both feeds
    below = match_probes("round-robin", LUCKY, [[0], [1]], 4, many.probes - 1, orders=16)
    assert below.completeness < 1.0


def test_reader_completeness_counts_as_the_live_metric_does() -> None:
    # completeness() counts a schedule's captures itself (it runs thousands of times a bench);
    # it must say what cei_outcome says of the same probes.
    rng = random.Random(5)
    for _ in range(200):
        ceis = tuple(
            CEI(f"c{i}", "p", tuple(EI(r, s, s + rng.randrange(4))
                                    for r, s in ((rng.randrange(4), rng.randrange(30)) for _ in range(rng.randrange(1, 4)))))
            for i in range(rng.randrange(1, 8)))
        schedule = sorted((rng.randrange(30), rng.randrange(4)) for _ in range(rng.randrange(0, 40)))
        want = cei_outcome(ceis, [ProbeRec(r, t, float(t)) for t, r in schedule]).completeness
        assert completeness(ceis, schedule) == want
    assert completeness((), [(0, 0)]) == 0.0
