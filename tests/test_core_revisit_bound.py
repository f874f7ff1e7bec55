"""The revisit bound (issue 45, item 1): no watched feed goes unprobed longer than a bound from budget and windows."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.discovery import CaptureExplore, revisit_bound
from proxy.service.loop import background_allocator


@pytest.mark.parametrize(
    ("budget", "feeds", "window", "factor", "expected"),
    [
        (2, 40, 10, 1.0, 20),  # factor 1: a round-robin's cycle, n / C
        (2, 40, 10, 2.0, 40),  # twice it: at most half the budget goes to the bound
        (2, 41, 10, 2.0, 41),  # rounded up: 41 feeds at 2 a chronon need 20.5 chronons a cycle, twice that
        (3, 10, 10, 2.0, 11),  # never below window + 1: a tighter revisit catches nothing more
        (1, 0, 0, 1.0, 1),  # no feed: the window's floor alone
        (10, 2000, 10, 1.5, 300),
        (2.5, 10, 0, 1.0, 4),  # a fractional budget (a mean spare) is fine
    ],
)
def test_the_bound_derives_from_budget_feeds_and_window(
    budget: float, feeds: int, window: int, factor: float, expected: int
) -> None:
    assert revisit_bound(budget, feeds, window, factor) == expected


@pytest.mark.parametrize(
    ("args", "match"),
    [((0, 10, 5, 2.0), "budget"), ((1, -1, 5, 2.0), "feeds"), ((1, 10, -1, 2.0), "window"),
     ((1, 10, 5, 0.5), "factor"), ((1, 10, 5, float("inf")), "factor"), ((1, 10, 5, float("nan")), "factor")],
)
def test_a_bound_that_cannot_hold_is_refused(args: tuple[float, int, int, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        revisit_bound(*args)


def test_a_revisit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="revisit"):
        CaptureExplore().pick(1, 0, [0, 1], [None, None], [0.1, 0.1], [1.0, 1.0], 3, revisit=0)


def run(alloc: CaptureExplore, budget: int, chronons: int, rate: list[float], weight: list[float], window: int,
        revisit: int | None) -> list[list[int]]:
    """Every probe succeeds; the budget is never exceeded, picks are distinct and watched."""
    res = list(range(len(rate)))
    last: dict[int, int | None] = dict.fromkeys(res)
    out = []
    for t in range(chronons):
        picked = alloc.pick(budget, t, res, [last[r] for r in res], rate, weight, window, revisit=revisit)
        assert len(picked) <= budget and len(set(picked)) == len(picked) and set(picked) <= set(res)
        for r in picked:
            last[r] = t
        out.append(picked)
    return out


def longest_waits(history: list[list[int]], feeds: int) -> list[int]:
    """Per feed: the longest run of chronons between two probes, the first counted from chronon 0 (first shown)."""
    out = []
    for r in range(feeds):
        times = [0, *(t for t, picked in enumerate(history) if r in picked), len(history) - 1]
        out.append(max(b - a for a, b in itertools.pairwise(times)))
    return out


def skewed(n: int, seed: int) -> tuple[list[float], list[float]]:
    """A few fast, heavily watched feeds and a long tail the capture frequencies never fund."""
    rng = np.random.default_rng(seed)
    rate = (0.5 * rng.lognormal(-3.0, 1.5, n)).clip(1e-6, 1.0).tolist()
    weight = rng.integers(1, 6, n).astype(float).tolist()
    return rate, weight


@pytest.mark.parametrize(("n", "budget", "window", "factor"),
                         [(40, 2, 10, 2.0), (40, 2, 10, 1.0), (60, 1, 5, 1.5), (200, 5, 10, 3.0), (9, 3, 0, 1.0)])
def test_no_watched_feed_waits_past_the_bound(n: int, budget: int, window: int, factor: float) -> None:
    rate, weight = skewed(n, n + budget)
    bound = revisit_bound(budget, n, window, factor)
    history = run(background_allocator(), budget, 6 * bound, rate, weight, window, bound)
    assert max(longest_waits(history, n)) <= bound
    # Work-conserving still: the bound only reorders the budget.
    assert all(len(picked) == min(budget, n) for picked in history)


def test_without_the_bound_the_tail_waits_longer() -> None:
    # The same skewed feeds: the capture frequencies fund the fast ones and leave the tail to the fill.
    # Unless the bound is what keeps them in turn, the test above could pass without it.
    n, budget, window = 40, 2, 10
    rate, weight = skewed(n, n + budget)
    bound = revisit_bound(budget, n, window, 2.0)
    free = run(background_allocator(), budget, 6 * bound, rate, weight, window, None)
    assert max(longest_waits(free, n)) > bound


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 50),
    budget=st.integers(1, 4),
    window=st.integers(0, 12),
    factor=st.floats(1.0, 4.0),
    seed=st.integers(0, 10_000),
    epsilon=st.sampled_from([0.0, 0.2]),
)
def test_the_bound_holds_for_any_rates_weights_and_explore_share(
    n: int, budget: int, window: int, factor: float, seed: int, epsilon: float
) -> None:
    rate, weight = skewed(n, seed)
    bound = revisit_bound(budget, n, window, factor)
    alloc = CaptureExplore(epsilon=epsilon, coordination_rounds=0)
    history = run(alloc, budget, 4 * bound + 5, rate, weight, window, bound)
    assert max(longest_waits(history, n)) <= bound


def test_a_bound_per_feed_holds_for_each() -> None:
    # One bound per resource (the caller's choice): feed 0 every 3 chronons, the rest every 12
    # (1/3 + 11/12 probes a chronon at most: within the budget of 2).
    n, budget, window = 12, 2, 2
    rate, weight = [0.001] * n, [1.0] * n
    rate[5], weight[5] = 0.5, 5.0  # the capture frequencies want this one, and get it within its window
    weight[0] = 0.1  # the fill's last choice
    bounds = [12] * n
    bounds[0] = 3
    history = run(CaptureExplore(epsilon=0.0), budget, 120, rate, weight, window, None)
    assert longest_waits(history, n)[0] > 3
    alloc = CaptureExplore(epsilon=0.0)
    res = list(range(n))
    last: dict[int, int | None] = dict.fromkeys(res)
    history = []
    for t in range(120):
        picked = alloc.pick(budget, t, res, [last[r] for r in res], rate, weight, window, revisit=bounds)
        for r in picked:
            last[r] = t
        history.append(picked)
    waits = longest_waits(history, n)
    assert waits[0] <= 3 and max(waits) <= 12, waits


def test_a_feed_never_probed_waits_from_when_it_was_first_shown_not_at_once() -> None:
    # Twenty new feeds at once would otherwise all be due at chronon 0: a sweep taking the budget
    # from the funded feed for twenty chronons. Each is due a bound after it was first shown.
    n, budget, window = 21, 1, 2
    rate, weight = [0.001] * n, [1.0] * n
    rate[0], weight[0] = 0.5, 10.0
    bound = revisit_bound(budget, n, window, 2.0)  # 42
    history = run(CaptureExplore(epsilon=0.0), budget, 2 * bound, rate, weight, window, bound)
    first_sweep = [t for t, picked in enumerate(history[:20]) if 0 in picked]
    assert len(first_sweep) >= 5  # the funded feed keeps its probes while the bound is far
    assert max(longest_waits(history, n)) <= bound


def test_a_feed_no_rule_waits_for_is_probed_by_the_bound_alone() -> None:
    # Weight 0: a watch rule's feed already in its CEI. The fill and the stride leave it alone (even
    # never probed), the bound does not; and it keeps the frequency it had for when a rule waits again.
    n, budget, window = 6, 1, 1
    rate, weight = [0.2] * n, [1.0] * (n - 1) + [0.0]
    free = run(CaptureExplore(epsilon=0.0), budget, 60, rate, weight, window, None)
    assert all(n - 1 not in picked for picked in free)
    bound = revisit_bound(budget, n, window, 2.0)  # 12
    bounded = run(CaptureExplore(epsilon=0.0), budget, 60, rate, weight, window, bound)
    times = [t for t, picked in enumerate(bounded) if n - 1 in picked]
    assert times and max(b - a for a, b in itertools.pairwise([0, *times, 59])) <= bound
    alloc = CaptureExplore(epsilon=0.0, refresh=1)
    res = list(range(n))
    alloc.pick(budget, 0, res, [None] * n, rate, [1.0] * n, window)
    before = alloc.frequency(0)
    alloc.pick(budget, 1, res, [0] * n, rate, [0.0] + [1.0] * (n - 1), window, revisit=bound)
    assert before > 0 and alloc.frequency(0) == before
