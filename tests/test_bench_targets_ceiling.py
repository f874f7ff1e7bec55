"""``benchmarks/policies/policy_targets_ceiling.py``: the target lines and the blind-policy bound on the tail."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "policies"))

from policy_targets_ceiling import (
    Point,
    blind_delays,
    feeds_holding,
    frontier,
    late_share_floor,
    quantile_floor,
    stride_schedule,
    t3_line,
    tail_budget_needed,
    target_line,
)

from proxy.bench.metrics import quantiles


def test_the_lines_follow_the_better_reader() -> None:
    better, line = target_line({"round-robin": 0.40, "adaptive": 0.58}, 1.3)
    assert better == "adaptive" and line == pytest.approx(0.754)
    better, line = target_line({"round-robin": 0.88, "adaptive": 0.65}, 1.2)
    assert better == "round-robin" and line == pytest.approx(1.056)  # above 100 %: out of reach
    assert target_line({"round-robin": 0.5, "adaptive": 0.5}, 1.3)[0] == "round-robin"  # a tie: the first
    assert t3_line(0.745, 0.959) == pytest.approx(0.8163, abs=1e-4)  # issue 45's own figures: 81.6 %


def test_feeds_holding_counts_the_fewest_fastest() -> None:
    assert feeds_holding([1] * 10) == 9
    assert feeds_holding([90, 5, 3, 2]) == 1
    assert feeds_holding([50, 30, 10, 10]) == 3
    assert feeds_holding([]) == 0 and feeds_holding([0, 0]) == 0


def test_equal_rates_leave_round_robins_late_share() -> None:
    # n feeds probed round-robin at C a chronon: period n / C, a share 1 - (d + 1) C / n of updates later than d
    n, c = 40, 2
    for d in (0, 5, 9, 17, 19, 25):
        assert late_share_floor([0.1] * n, c, d) == pytest.approx(max(0.0, 1 - (d + 1) * c / n))
    # ... so their p90 cannot go below round-robin's, and keeping it there takes the whole budget
    assert quantile_floor([0.1] * n, c) == 17
    assert tail_budget_needed([0.1] * n, 17) == pytest.approx(c * 0.9 * 20 / 18)
    assert tail_budget_needed([0.1] * n, 19) == pytest.approx(c * 0.9)


def test_unequal_rates_leave_room_and_the_bound_is_a_knapsack() -> None:
    rates = [0.18] * 20 + [0.02] * 20  # half the feeds hold 90 % of the updates
    assert feeds_holding(rates) == 20
    assert tail_budget_needed(rates, 17) == pytest.approx(20 / 18)  # those 20, once per 18 chronons
    assert late_share_floor(rates, 20 / 18, 17) == pytest.approx(0.1)
    assert quantile_floor(rates, 2) < quantile_floor([0.1] * 40, 2)
    assert late_share_floor(rates, 0, 17) == pytest.approx(1.0)
    assert late_share_floor(rates, 100, 17) == pytest.approx(0.0)


def test_the_stride_spaces_each_feeds_probes_by_its_pace() -> None:
    probes = stride_schedule([1.0] * 40, 2, 200)
    assert len(probes) == 400 and all(sum(1 for t, _ in probes if t == k) == 2 for k in range(200))
    for feed in range(40):
        times = [t for t, r in probes if r == feed]
        assert {b - a for a, b in itertools.pairwise(times)} == {20}
    fast = [t for t, r in stride_schedule([3.0] * 20 + [1.0] * 20, 2, 400) if r == 0]
    slow = [t for t, r in stride_schedule([3.0] * 20 + [1.0] * 20, 2, 400) if r == 39]
    assert len(fast) == pytest.approx(3 * len(slow), abs=1)


def test_the_lemma_round_robin_has_the_lowest_pooled_tail_on_equal_rates() -> None:
    even = quantiles([d for s in range(3) for d in blind_delays([0.1] * 40, [1.0] * 40, 2, 1500, s)])
    assert even["p90"] == pytest.approx(17, abs=1)  # round-robin's: 0.9 of its period, the bound
    for a in (2.0, 3.0):  # any uneven spend of the same budget is worse at the p90
        uneven = quantiles([d for s in range(3) for d in blind_delays([0.1] * 40, [a] * 20 + [1.0] * 20, 2, 1500, s)])
        assert uneven["p90"] > even["p90"] + 3
    # where half the feeds hold 90 % of the updates, funding them beats round-robin's p90
    rates = [0.18] * 20 + [0.02] * 20
    skewed = quantiles([d for s in range(3) for d in blind_delays(rates, [3.0] * 20 + [1.0] * 20, 2, 1500, s)])
    assert skewed["p90"] < even["p90"]


def test_the_frontier_keeps_the_points_none_beats_on_both() -> None:
    def p(ratio: float, p90: float, share: float = 0.0) -> Point:
        return Point("run", 5.0, "fixed", share, 0.5, ratio, 5.0, p90, 50.0)

    front = frontier([p(1.9, 40), p(1.5, 16), p(1.4, 20), p(1.7, 30), p(1.7, 30, 0.3), p(1.6, 35)])
    assert [(q.ratio, q.p90) for q in front] == [(1.5, 16), (1.7, 30), (1.9, 40)]
    assert front[1].share == 0.0  # of two equal points, the first
