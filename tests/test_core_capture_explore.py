"""CaptureExplore (proxy.core.discovery): capture-optimal frequencies that keep exploring under learnt rates."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import gamma, norm

from proxy.core.discovery import CaptureExplore
from proxy.core.rates import CycleShape, OnlineRates, gamma_upper


@pytest.mark.parametrize(("shape", "rate", "z"), [(1, 10, 1.0), (1, 10, 2.0), (3, 50, 1.0), (20, 400, 1.0),
                                                  (5, 5, 0.0), (2, 100, -1.0), (100, 1000, 2.0)])
def test_gamma_upper_is_close_to_the_exact_quantile(shape: float, rate: float, z: float) -> None:
    exact = gamma.ppf(norm.cdf(z), shape, scale=1 / rate)
    assert gamma_upper(shape, rate, z) == pytest.approx(exact, rel=0.03)


def test_gamma_upper_refuses_an_improper_posterior() -> None:
    with pytest.raises(ValueError, match="> 0"):
        gamma_upper(0.0, 1.0, 1.0)


def test_online_rates_posterior_is_prior_plus_what_probes_saw() -> None:
    m = OnlineRates(prior_count=1.0, prior_chronons=10.0)
    assert m.posterior(3) == (1.0, 10.0)
    m.observe_probe(3, 5, 9)  # the baseline: backlog, not a rate
    m.observe_probe(3, 25, 2)
    assert m.posterior(3) == (3.0, 30.0)
    assert m.rate(3, 25) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("rate", "posterior", "expected"),
    [
        ([0.1, 0.1], None, [0.1, 0.1]),  # rates known: no optimism
        # Same mean 0.1: seen for 10 chronons (1 update) vs 1,000 (100): the first looks ~1.8x faster.
        ([0.1, 0.1], [(1.0, 10.0), (100.0, 1000.0)], [0.183, 0.110]),
        ([0.0, -1.0], [(1.0, 10.0), (1.0, 10.0)], [0.0, 0.0]),  # a zero rate stays zero
    ],
)
def test_optimistic_rates_scale_by_the_posterior_quantile(
    rate: list[float], posterior: list[tuple[float, float]] | None, expected: list[float]
) -> None:
    assert CaptureExplore(z=1.0).optimistic(rate, posterior) == pytest.approx(expected, abs=2e-3)


def drive(alloc: CaptureExplore, budget: int, chronons: int, rate: list[float], weight: list[float],
          window: int, resources: list[int] | None = None,
          shape: list[CycleShape | None] | None = None) -> list[list[int]]:
    """Run ``alloc`` over ``chronons``: every probe succeeds; the invariants hold at every chronon."""
    res = resources if resources is not None else list(range(len(rate)))
    last: dict[int, int | None] = dict.fromkeys(res)
    out = []
    for t in range(chronons):
        picked = alloc.pick(budget, t, res, [last[r] for r in res], rate, weight, window, shape=shape)
        assert len(picked) <= budget and len(set(picked)) == len(picked) and set(picked) <= set(res)
        for r in picked:
            last[r] = t
        out.append(picked)
    return out


@pytest.mark.parametrize(
    ("n", "budget", "epsilon", "window"),
    [(5, 1, 0.2, 4), (20, 1, 0.2, 9), (20, 3, 0.2, 9), (20, 1, 0.5, 2), (40, 2, 0.1, 10), (7, 1, 1.0, 0)],
)
def test_the_explore_floor_reaches_every_watched_feed_within_a_bound(
    n: int, budget: int, epsilon: float, window: int
) -> None:
    # One feed looks 1,000x faster than the rest: capture alone would probe it and its window-mates only.
    rate = [1.0] + [0.001] * (n - 1)
    history = drive(CaptureExplore(epsilon=epsilon), budget, 400, rate, [1.0] * n, window)
    # Stalest first: n explore probes reach every feed; epsilon*budget of them per chronon.
    bound = math.ceil(n / (epsilon * budget)) + 1
    for r in range(n):
        times = [-1] + [t for t, picked in enumerate(history) if r in picked] + [400]
        assert max(b - a for a, b in itertools.pairwise(times)) <= bound, r


@pytest.mark.parametrize(
    ("budget", "rate", "window", "expected"),
    [
        # epsilon 0, rates known: capture frequencies (0.5, 0.5, 0 for W=1) strided. At 0 no credit yet:
        # the greedy fill probes feed 0 (never probed, smallest id), which spends its credit.
        (1, [0.5, 0.2, 0.0], 1, [[0], [1], [0], [1], [0], [1]]),
        # Budget 2, W=3: f = (0.25, 0.25, 0); every fill probe resets a feed's credit, so the greedy
        # index (fastest first, never-probed first) spends what the stride leaves.
        (2, [0.5, 0.2, 0.1], 3, [[0, 1], [2, 0], [0, 1], [0, 2], [0, 1], [0, 2]]),
        (0, [0.5], 1, [[]] * 6),
    ],
)
def test_without_exploration_and_known_rates_it_is_capture_plus_a_greedy_fill(
    budget: int, rate: list[float], window: int, expected: list[list[int]]
) -> None:
    got = drive(CaptureExplore(epsilon=0.0), budget, 6, rate, [1.0] * len(rate), window)
    assert got == expected


@settings(max_examples=50, deadline=None)
@given(
    st.integers(0, 4),
    st.lists(st.tuples(st.floats(0, 2), st.floats(0, 3)), min_size=1, max_size=10),
    st.floats(0, 1),
    st.integers(0, 6),
)
def test_picks_are_distinct_watched_within_budget_and_deterministic(
    budget: int, feeds: list[tuple[float, float]], epsilon: float, window: int
) -> None:
    rate, weight = [f[0] for f in feeds], [f[1] for f in feeds]
    resources = [3 * i + 1 for i in range(len(feeds))]  # ids that are not indices
    a = drive(CaptureExplore(epsilon=epsilon), budget, 30, rate, weight, window, resources)
    assert a == drive(CaptureExplore(epsilon=epsilon), budget, 30, rate, weight, window, resources)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        CaptureExplore(epsilon=1.5)
    with pytest.raises(ValueError, match="refresh"):
        CaptureExplore(refresh=0)
    with pytest.raises(ValueError, match="same length"):
        CaptureExplore().pick(1, 0, [0, 1], [None], [1.0, 1.0], [1.0, 1.0], 3)


@pytest.mark.parametrize(
    ("start", "length", "weights", "a", "b", "expected"),
    [
        (0.0, 10.0, (1.0,), 3.0, 7.5, 4.5),  # flat: the length of the interval
        (0.0, 100.0, (2.0, 0.0), 10.0, 30.0, 40.0),  # busy half: twice the mean
        (0.0, 100.0, (2.0, 0.0), 60.0, 90.0, 0.0),  # quiet half: nothing expected
        (0.0, 100.0, (2.0, 0.0), 40.0, 110.0, 40.0),  # across the cycle's end: 10 busy + 10 busy again
        (10.0, 100.0, (2.0, 0.0), -90.0, 10.0, 100.0),  # a whole cycle before the start: its mean
        (0.0, 100.0, (2.0, 0.0), 0.0, 1000.0, 1000.0),  # ten cycles
        (0.0, 100.0, (1.5, 0.5, 1.0, 1.0), 20.0, 30.0, 10.0),  # across two bins: 5 × 1.5 + 5 × 0.5
        (0.0, 100.0, (2.0, 0.0), 30.0, 30.0, 0.0),  # empty interval
        (0.0, 100.0, (2.0, 0.0), 30.0, 20.0, 0.0),  # reversed: 0, not negative
    ],
)
def test_cycle_shape_mass(start: float, length: float, weights: tuple[float, ...], a: float, b: float,
                          expected: float) -> None:
    assert CycleShape(start, length, weights).mass(a, b) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("start", "length", "weights", "match"),
    [(0.0, 0.0, (1.0,), "length"), (math.nan, 10.0, (1.0,), "finite"), (0.0, 10.0, (), "weights"),
     (0.0, 10.0, (1.0, -1.0, 3.0), "weights"), (0.0, 10.0, (2.0, 2.0), "mean 1")],
)
def test_a_bad_cycle_shape_is_refused(start: float, length: float, weights: tuple[float, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CycleShape(start, length, weights)


def busy_and_quiet_probes(shaped: bool) -> tuple[int, int]:
    """Feed 0 changes only in the first half of each 100-chronon cycle; feeds 1-5 all the time; same mean rate."""
    cycle = CycleShape(0.0, 100.0, (2.0, 0.0))
    history = drive(CaptureExplore(epsilon=0.0), 1, 1000, [0.1] * 6, [1.0] * 6, 4,
                    shape=[cycle if shaped else None] + [None] * 5)
    busy = sum(0 in picked for t, picked in enumerate(history) if t % 100 < 50)
    quiet = sum(0 in picked for t, picked in enumerate(history) if t % 100 >= 50)
    return busy, quiet


def test_a_seasonal_feed_gets_its_probes_in_its_busy_hours() -> None:
    # The same budget (1 per chronon) and mean rates. Read at its mean, feed 0 is probed every
    # window + 1 = 5 chronons all the time; read off its cycle, as often in its busy half (all its
    # updates caught) and never in its quiet half, whose 100 probes go to the other feeds.
    assert busy_and_quiet_probes(shaped=False) == (100, 100)
    assert busy_and_quiet_probes(shaped=True) == (100, 0)


def test_equal_shaped_feeds_tie_by_id_and_the_budget_is_never_exceeded() -> None:
    cycle = CycleShape(0.0, 20.0, (1.8, 0.2))
    history = drive(CaptureExplore(epsilon=0.0), 1, 40, [0.3, 0.3], [1.0, 1.0], 1, shape=[cycle, cycle])
    assert history[:4] == [[0], [1], [0], [1]]  # never probed: the smaller id first; then the stride alternates
    assert all(len(picked) <= 1 for picked in history)


def test_shape_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        CaptureExplore().pick(1, 0, [0, 1], [None, None], [1.0, 1.0], [1.0, 1.0], 3, shape=[None])


@pytest.mark.parametrize(
    ("level_exponent", "expected"),
    [
        (1.0, [20, 0, 0]),  # weight x rate: feed 0 (1 x 0.5) over feed 2 (3 x 0.01)
        (0.5, [20, 0, 0]),  # 1 x 0.71 still over 3 x 0.1
        (0.0, [0, 0, 20]),  # weight alone: feed 2, three rules waiting for it
    ],
)
def test_the_level_exponent_sets_how_much_the_rates_rank_the_frequencies(
    level_exponent: float, expected: list[int]
) -> None:
    # Window 0: one feed's frequency (one probe per chronon, credit from the first chronon) takes
    # the whole budget, so the frequencies alone decide every probe.
    history = drive(CaptureExplore(epsilon=0.0, level_exponent=level_exponent), 1, 20, [0.5, 0.2, 0.01],
                    [1.0, 1.0, 3.0], 0)
    assert [sum(r in picked for picked in history) for r in range(3)] == expected


def test_a_level_exponent_outside_0_1_is_refused() -> None:
    with pytest.raises(ValueError, match="level_exponent"):
        CaptureExplore(level_exponent=1.5)
