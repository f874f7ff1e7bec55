"""CaptureExplore (proxy.core.discovery): capture-optimal frequencies that keep exploring under learnt rates."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import gamma, norm

from proxy.core.discovery import CaptureExplore
from proxy.core.rates import OnlineRates, gamma_upper


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
          window: int, resources: list[int] | None = None) -> list[list[int]]:
    """Run ``alloc`` over ``chronons``: every probe succeeds; the invariants hold at every chronon."""
    res = resources if resources is not None else list(range(len(rate)))
    last: dict[int, int | None] = dict.fromkeys(res)
    out = []
    for t in range(chronons):
        picked = alloc.pick(budget, t, res, [last[r] for r in res], rate, weight, window)
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
