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


# The adaptive floor (TailFloor.target): only what the expected pooled tail needs, nothing where it cannot
# come near the target. Rates here sum to 1, so a rate is its share of the update mass.

RATES = [0.05, 0.5, 0.1, 0.3, 0.05]


@pytest.mark.parametrize(
    ("target", "idle", "expected"),
    [
        # Unprobed feeds (idle 0): every update of an unfloored feed waits past the period.
        (0.1, 0.0, [0.0, 0.1, 0.1, 0.1, 0.0]),  # 0.5 + 0.3 + 0.1 leaves 0.1 waiting
        (0.2, 0.0, [0.0, 0.1, 0.0, 0.1, 0.0]),  # 0.5 + 0.3 leaves 0.2
        (0.6, 0.0, [0.0, 0.1, 0.0, 0.0, 0.0]),
        (1.0, 0.0, [0.0] * 5),  # the tail is within the target already
        # Probed once per 20 chronons without a floor: half of each feed's updates wait past 10.
        (0.1, 0.05, [0.0, 0.1, 0.0, 0.1, 0.0]),  # 0.5 left waiting, 0.25 + 0.15 taken out
        (0.5, 0.05, [0.0] * 5),
        # Probed once per 10 chronons anyway: no tail, no floor.
        (0.0, 0.1, [0.0] * 5),
    ],
)
def test_the_adaptive_floor_takes_only_the_feeds_that_bring_the_expected_tail_to_its_target(
        target: float, idle: float, expected: list[float]) -> None:
    floor = TailFloor(10, 1.0, target=target)
    assert tail_floor(RATES, [0.0] * 5, 2.0, floor, idle) == expected


def test_the_adaptive_floor_leaves_a_feed_the_capture_funds_within_the_period_and_pays_for_a_partial_one() -> None:
    # The fastest is funded at 1/5 (no tail); the second at 1/20 (half its updates late, costs 1/20 to raise).
    floor = TailFloor(10, 1.0, target=0.1)
    assert tail_floor(RATES, [0.0, 0.2, 0.0, 0.05, 0.0], 2.0, floor) == [0.0, 0.0, 0.1, 0.1, 0.0]
    # A share that pays for the half-funded feed (1/20) and not one more (1/10): the rest is too late.
    capped = TailFloor(10, 0.05 / 2.0, target=0.1)
    assert tail_floor(RATES, [0.0, 0.2, 0.0, 0.05, 0.0], 2.0, capped) == [0.0, 0.0, 0.0, 0.1, 0.0]


def test_the_adaptive_floor_spends_nothing_where_its_share_cannot_come_near_the_target() -> None:
    flat = [0.1] * 10
    # A share of 0.1 / 1.0 pays for one feed at 1/10: 0.9 of the mass still waits past the period.
    assert tail_floor(flat, [0.0] * 10, 1.0, TailFloor(10, 0.1, target=0.1, hopeless=0.5)) == [0.0] * 10
    assert tail_floor(flat, [0.0] * 10, 1.0, TailFloor(10, 0.1, target=0.1, hopeless=0.9)) == [0.1] + [0.0] * 9
    # Five feeds bring it to 0.5: within a hopeless line of 0.5, spent.
    assert tail_floor(flat, [0.0] * 10, 1.0, TailFloor(10, 0.5, target=0.1, hopeless=0.5)) == [0.1] * 5 + [0.0] * 5


def test_an_adaptive_floor_refuses_a_target_or_hopeless_line_outside_zero_one() -> None:
    with pytest.raises(ValueError, match="target"):
        TailFloor(10, 0.3, target=1.5)
    with pytest.raises(ValueError, match="hopeless"):
        TailFloor(10, 0.3, target=0.1, hopeless=-0.1)


def test_an_adaptive_floor_whose_tail_is_already_within_target_gives_exactly_the_probes_of_no_floor() -> None:
    assert _run(TailFloor(8, 0.5, target=1.0)) == _run(None)


def test_an_adaptive_floor_probes_the_fast_feed_no_rule_waits_for_as_the_fixed_one_does() -> None:
    # Feed 0 holds 2/3 of the updates and no rule waits for it: the adaptive floor keeps it too, from the
    # first recomputation that knows the capture frequencies (chronon 10); at chronon 0 none is funded yet,
    # and a budget of 1 over 6 feeds looks like once per 6 chronons, within the period of 8.
    floored = _run(TailFloor(8, 0.5, target=0.1))
    after = [t for t in floored[0] if t >= 10]
    assert len(after) >= 190 // 8 - 1
    assert max(b - a for a, b in itertools.pairwise(after)) <= 8 + 2
    assert sum(len(p) for p in floored.values()) == 200
    assert len(_run(None)[0]) <= 2


def test_the_fixed_floor_with_a_hopeless_line_spends_nothing_where_it_leaves_too_much_waiting() -> None:
    flat = [0.1] * 10
    # Fastest first within a share of 0.3: three feeds at 1/10, 0.7 of the mass still unprobed.
    assert tail_floor(flat, [0.0] * 10, 1.0, TailFloor(10, 0.3)) == [0.1] * 3 + [0.0] * 7
    assert tail_floor(flat, [0.0] * 10, 1.0, TailFloor(10, 0.3, hopeless=0.5)) == [0.0] * 10
    # Probed once per 20 chronons anyway (idle 0.05): half of 0.7 waits past the period, within 0.5.
    assert tail_floor(flat, [0.0] * 10, 1.0, TailFloor(10, 0.3, hopeless=0.5), 0.05) == [0.1] * 3 + [0.0] * 7
    # The rates of test_the_floor_takes_the_fastest_feeds...: 0.1 left, within any line above it.
    assert tail_floor(RATES, [0.0] * 5, 2.0, TailFloor(10, 1.0, hopeless=0.1)) == [0.0, 0.1, 0.1, 0.1, 0.0]
    assert tail_floor(RATES, [0.0] * 5, 2.0, TailFloor(10, 1.0, hopeless=0.05)) == [0.0] * 5


# The sticky floor (TailFloor.sticky, PROXY_DISCOVERY_TAIL_STICKY): a recomputation whose adaptive floor takes no
# feed keeps the last floor's feeds, for up to `sticky` such recomputations in a row (docs/discovery.md, "A sticky
# floor"). On the real trace the hopeless test flips the floor on and off between recomputations.

_ON = [1.0] + [0.0] * 9  # all the tail in feed 0: the floor takes it
_OFF = [0.0] + [1.0] * 9  # spread over nine: one feed's worth of share cannot bring it to the hopeless line


def _phased(tail: TailFloor, phases: list[bool]) -> tuple[list[int], list[list[int]]]:
    """Feed 0 no rule waits for, feeds 1..9 waited for; budget 1, window 2, a recomputation every 10 chronons,
    the tail's rates ``_ON`` or ``_OFF`` per recomputation. Returns feed 0's probes per recomputation and every
    chronon's picks."""
    allocator = CaptureExplore(epsilon=0.0, z=0.0, refresh=10)
    feeds = list(range(10))
    last: dict[int, int | None] = dict.fromkeys(feeds)
    rate, weight = [0.0] + [0.1] * 9, [0.0] + [1.0] * 9
    picks: list[list[int]] = []
    for t in range(10 * len(phases)):
        picked = allocator.pick(1, t, feeds, [last[r] for r in feeds], rate, weight, 2, tail=tail,
                                tail_rate=_ON if phases[t // 10] else _OFF)
        for r in picked:
            last[r] = t
        picks.append(picked)
    return [sum(0 in p for p in picks[b:b + 10]) for b in range(0, len(picks), 10)], picks


def _hopeless(sticky: int = 0) -> TailFloor:
    # A share of 0.15 pays for one feed at 1/8; a hopeless line of 0 skips any floor that leaves a late update.
    return TailFloor(8, 0.15, target=0.0, hopeless=0.0, sticky=sticky)


@pytest.mark.parametrize("sticky", [1, 2, 3])
def test_a_sticky_floor_keeps_its_feed_across_up_to_k_skipped_recomputations_then_drops_it(sticky: int) -> None:
    kept, _ = _phased(_hopeless(sticky), [True] + [False] * 5)
    # Probed at its period (8) while floored: at least once per recomputation of 10 chronons; never after.
    assert all(n >= 1 for n in kept[: 1 + sticky]), kept
    assert kept[1 + sticky:] == [0] * (5 - sticky), kept


def test_a_floor_that_takes_a_feed_again_starts_the_count_again() -> None:
    kept, _ = _phased(_hopeless(2), [True, False, False, True, False, False, False, False])
    # On at 0, kept at 1 and 2, on at 3 (the count starts again), kept at 4 and 5, dropped at 6.
    assert all(n >= 1 for n in kept[:6]), kept
    assert kept[6:] == [0, 0], kept


def test_a_floor_that_is_not_sticky_drops_its_feed_at_the_first_skipped_recomputation() -> None:
    kept, _ = _phased(_hopeless(0), [True] + [False] * 5)
    assert kept[0] >= 1 and kept[1:] == [0] * 5


def test_sticky_zero_gives_exactly_the_probes_of_todays_floor() -> None:
    for phases in ([True] + [False] * 5, [True, False, False, True, False, False, False, False]):
        assert _phased(_hopeless(0), phases)[1] == _phased(TailFloor(8, 0.15, target=0.0, hopeless=0.0),
                                                            phases)[1]
    assert _run(TailFloor(8, 0.5, target=0.1, sticky=0)) == _run(TailFloor(8, 0.5, target=0.1))
    with pytest.raises(ValueError, match="sticky"):
        TailFloor(8, 0.3, target=0.1, sticky=-1)
