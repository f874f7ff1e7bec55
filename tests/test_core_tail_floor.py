"""The tail floor (issue 45, item 1): the watched feeds holding most updates probed at least once a period.

``proxy.core.discovery.tail_period``, ``tail_floor`` and ``CaptureExplore.pick(tail=, tail_rate=)``.
Figures in docs/discovery.md, "The tail where the updates are".
"""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from proxy.core.discovery import CaptureExplore, TailFloor, tail_floor, tail_period


@pytest.mark.parametrize(
    ("budget", "feeds", "window", "share", "period"),
    [
        (2, 43, 10, 0.85, 18),  # the real trace's 43 watched feeds: floor(0.85 * 21.5)
        (2, 40, 10, 0.85, 17),
        (2, 10, 10, 0.85, 11),  # never below window + 1
        (1, 100, 5, 0.5, 50),
        (1, 0, 0, 0.85, 1),
        (3, 60, 4, 1.0, 20),
    ],
)
def test_tail_period_is_a_share_of_a_round_robin_cycle_never_below_the_window(
        budget: int, feeds: int, window: int, share: float, period: int) -> None:
    assert tail_period(budget, feeds, window, share) == period


@pytest.mark.parametrize(("args", "message"), [((0, 10, 1), "budget"), ((1, -1, 1), "feeds"),
                                               ((1, 10, -1), "window")])
def test_tail_period_refuses_what_has_no_cycle(args: tuple[int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tail_period(*args)


def test_a_tail_floor_refuses_a_share_outside_zero_one() -> None:
    with pytest.raises(ValueError, match="budget_share"):
        TailFloor(10, 1.5)
    with pytest.raises(ValueError, match="period"):
        TailFloor(0, 0.3)


def test_the_floor_takes_the_fastest_feeds_until_ninety_percent_of_the_updates() -> None:
    # Rates 0.5, 0.3, 0.1, 0.05, 0.05: the mass before the third is 0.8 < 0.9, before the fourth 0.9.
    floor = tail_floor([0.05, 0.5, 0.1, 0.3, 0.05], [0.0] * 5, 2.0, TailFloor(10, 1.0))
    assert floor == [0.0, 0.1, 0.1, 0.1, 0.0]


def test_the_floor_stops_at_its_share_of_the_budget_and_a_funded_feed_costs_nothing() -> None:
    rates = [0.4, 0.3, 0.2, 0.1]
    # A quarter of budget 0.8 is 0.2: two feeds at 1/10, the third would pass it.
    assert tail_floor(rates, [0.0] * 4, 0.8, TailFloor(10, 0.25, share=1.0)) == [0.1, 0.1, 0.0, 0.0]
    # The fastest already probed at 1/5 by the capture frequencies: the floor on it is free.
    assert tail_floor(rates, [0.2, 0.0, 0.0, 0.0], 0.8, TailFloor(10, 0.25, share=1.0)) == [0.1, 0.1, 0.1, 0.0]
    # A feed funded at 1/15 costs the difference, 1/10 - 1/15.
    cost = tail_floor(rates, [1 / 15, 1 / 15, 1 / 15, 0.0], 0.8, TailFloor(10, 0.25, share=1.0))
    assert cost == [0.1, 0.1, 0.1, 0.1]  # 3 * (1/30) + 1/10 = 0.2, just within
    assert tail_floor(rates, [0.0] * 4, 0.8, TailFloor(10, 0.0)) == [0.0] * 4
    assert tail_floor([0.0, 0.0], [0.0, 0.0], 1.0, TailFloor(10, 1.0)) == [0.0, 0.0]


def _run(tail: TailFloor | None, chronons: int = 200) -> dict[int, list[int]]:
    """Feed 0 updates fast but no rule waits for it (a watch rule's feed already in its CEI: weight 0),
    feeds 1..5 are waited for; budget 1, window 2. Returns each feed's probe chronons."""
    allocator = CaptureExplore(epsilon=0.0, z=0.0)
    feeds = [0, 1, 2, 3, 4, 5]
    last: dict[int, int | None] = dict.fromkeys(feeds)
    probed: dict[int, list[int]] = {r: [] for r in feeds}
    rate = [0.0, 0.1, 0.1, 0.1, 0.1, 0.1]  # the allocation's rates: none for a feed no rule waits for
    weight = [0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    tail_rate = [1.0, 0.1, 0.1, 0.1, 0.1, 0.1]  # every watched feed's own pace
    for t in range(chronons):
        picked = allocator.pick(1, t, feeds, [last[r] for r in feeds], rate, weight, 2, revisit=100,
                                tail=tail, tail_rate=tail_rate if tail is not None else None)
        for r in picked:
            last[r] = t
            probed[r].append(t)
    return probed


def test_a_fast_feed_no_rule_waits_for_is_probed_once_a_period_with_the_floor_and_left_without() -> None:
    without = _run(None)
    assert len(without[0]) <= 2  # only the revisit bound (100 chronons) reaches it
    floored = _run(TailFloor(8, 0.5))
    gaps = [b - a for a, b in itertools.pairwise(floored[0])]
    assert len(floored[0]) >= 200 // 8 - 1
    assert statistics.fmean(gaps) <= 8.5  # the capture frequencies take the rest of the budget: a little drift
    assert max(gaps) <= 8 + 2  # a strided schedule, not a deadline: the budget's other claims shift it a little
    # The floor's probes come out of the capture frequencies, not on top of the budget.
    assert sum(len(p) for p in floored.values()) == sum(len(p) for p in without.values()) == 200


def test_a_floor_with_no_budget_share_gives_exactly_the_probes_of_no_floor() -> None:
    assert _run(TailFloor(8, 0.0)) == _run(None)


def test_the_floor_period_is_below_a_round_robins_p90() -> None:
    # Round-robin's detection delays are uniform over its cycle n / C: its p90 is 0.9 n / C.
    for n, c in [(40, 2), (60, 2), (200, 3)]:
        assert tail_period(c, n, 10) < math.floor(0.9 * n / c) or tail_period(c, n, 10) == 11
