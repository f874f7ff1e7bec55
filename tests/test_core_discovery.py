"""Background probes (proxy.core.discovery): where the spare budget goes."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.discovery import (
    FrequencyStride,
    MemorylessSqrt,
    RoundRobinWatch,
    background_probes,
    capture_frequencies,
    freshness_frequencies,
    wic_probes,
)


@pytest.mark.parametrize(
    ("budget", "now", "resources", "last", "rate", "weight", "expected"),
    [
        # Equal rates and weights: the stalest first (round-robin over watched feeds).
        (2, 10, [0, 1, 2], [9, 3, 6], [0.1] * 3, [1.0] * 3, [1, 2]),
        # Never probed successfully: first, whatever the others' scores.
        (1, 10, [0, 1], [0, None], [5.0, 0.001], [9.0, 1.0], [1]),
        # A fast feed beats a slower one last probed at the same time...
        (1, 10, [0, 1], [5, 5], [0.01, 0.5], [1.0, 1.0], [1]),
        # ...but not one left alone long enough: 1-e^{-0.1*40} > 1-e^{-1*2}.
        (1, 42, [0, 1], [2, 40], [0.1, 1.0], [1.0, 1.0], [0]),
        # Weights: two rules waiting on a feed double its worth.
        (1, 10, [0, 1], [5, 5], [0.1, 0.1], [1.0, 2.0], [1]),
        # Equal scores: the longer wait, then the smaller id.
        (2, 10, [7, 3, 5], [4, 4, 4], [0.0, 0.0, 0.0], [1.0] * 3, []),
        (2, 10, [7, 3, 5], [4, 4, 4], [0.2] * 3, [1.0] * 3, [3, 5]),
        # Probed this chronon: nothing to gain, not picked even with budget to spare.
        (3, 10, [0, 1], [10, 2], [0.5, 0.5], [1.0, 1.0], [1]),
        (0, 10, [0], [None], [1.0], [1.0], []),
        (2, 10, [], [], [], [], []),
    ],
)
def test_background_probes(
    budget: int, now: int, resources: list[int], last: list[int | None], rate: list[float],
    weight: list[float], expected: list[int],
) -> None:
    assert background_probes(budget, now, resources, last, rate, weight) == expected


def test_mismatched_lengths_and_negative_budget_are_refused() -> None:
    with pytest.raises(ValueError, match="same length"):
        background_probes(1, 0, [0, 1], [None], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="budget"):
        background_probes(-1, 0, [0], [None], [1.0], [1.0])


@given(
    st.integers(0, 5),
    st.lists(
        st.tuples(st.one_of(st.none(), st.integers(0, 100)), st.floats(0, 3), st.floats(0, 5)),
        max_size=12,
    ),
)
def test_picks_are_distinct_watched_and_within_budget(budget: int, feeds: list[tuple[int | None, float, float]]) -> None:
    now = 100
    resources = list(range(len(feeds)))
    last, rate, weight = ([f[i] for f in feeds] for i in range(3))
    picked = background_probes(budget, now, resources, last, rate, weight)
    assert len(picked) <= budget and len(set(picked)) == len(picked)
    # Never probed: first, unless no rule waits for it (weight 0: a feed only the revisit
    # bound keeps, issue 45), which is never picked here (the bound probes it, not this).
    score = {
        r: (math.inf if weight[r] > 0 else 0.0) if last[r] is None
        else weight[r] * -math.expm1(-rate[r] * (now - last[r]))
        for r in resources
    }
    assert all(score[r] > 0 for r in picked)
    # Nobody left out scores higher than someone picked.
    if picked:
        worst = min(score[r] for r in picked)
        assert all(score[r] <= worst for r in resources if r not in picked)


# --- allocation variants (docs/discovery-sim.md compares them) -------------------------

@pytest.mark.parametrize(
    ("budget", "last", "rate", "window", "expected"),
    [
        # Left alone past the window: worth only window+1 chronons of updates, like a feed probed then.
        (1, [0, 85], [0.1, 0.1], 9, [0]),  # elapsed 100 vs 15, both capped at 10: tie -> longer wait
        (1, [0, 95], [0.05, 0.1], 4, [1]),  # 0.05*5 < 0.1*5
        (1, [0, 98], [0.05, 0.1], 4, [0]),  # 0.05*5 > 0.1*2
        (2, [100, None], [0.1, 0.0], 4, [1]),  # never probed first; probed now: nothing to gain
    ],
)
def test_wic_probes(budget: int, last: list[int | None], rate: list[float], window: int, expected: list[int]) -> None:
    assert wic_probes(budget, 100, [0, 1], last, rate, [1.0, 1.0], window) == expected


def test_round_robin_cycles_over_watched_feeds() -> None:
    rr = RoundRobinWatch()
    assert [rr.pick(2, [5, 1, 3]) for _ in range(3)] == [[1, 3], [5, 1], [3, 5]]
    assert rr.pick(0, [1]) == [] and rr.pick(1, []) == []


def test_memoryless_sqrt_follows_sqrt_rates() -> None:
    pick = MemorylessSqrt(np.random.default_rng(0))
    counts = {0: 0, 1: 0, 2: 0}
    for _ in range(4000):
        for r in pick.pick(1, [0, 1, 2], [1.0, 4.0, 0.0], [1.0, 1.0, 1.0]):
            counts[r] += 1
    assert counts[2] == 0
    assert counts[1] / counts[0] == pytest.approx(2.0, rel=0.15)  # sqrt(4) / sqrt(1)


def test_freshness_frequencies_abandon_the_fastest_and_sum_to_the_budget() -> None:
    f = freshness_frequencies([0.01, 0.1, 50.0], [1.0, 1.0, 1.0], 0.2)
    assert sum(f) == pytest.approx(0.2, rel=1e-3)
    assert f[2] == pytest.approx(0.0, abs=1e-6)  # Cho & Garcia-Molina: too fast to keep fresh
    assert f[1] > f[0] > 0


def test_capture_frequencies_fill_the_best_feeds_up_to_one_probe_per_window() -> None:
    assert capture_frequencies([0.1, 0.3, 0.2], [1.0, 1.0, 1.0], 0.5, 4) == pytest.approx([0.1, 0.2, 0.2])
    with pytest.raises(ValueError, match="window"):
        capture_frequencies([0.1], [1.0], 1.0, -1)


def test_frequency_stride_is_near_periodic() -> None:
    stride = FrequencyStride()
    probes = [t for t in range(50) if stride.pick(1, [0, 1], [0.2, 0.1]) == [0]]
    assert len(probes) == 10 and all(b - a == 5 for a, b in itertools.pairwise(probes))


def test_freshness_frequencies_spend_a_budget_far_below_the_rates() -> None:
    # Every page stays stale: F is linear in f, and the whole budget is still spent.
    f = freshness_frequencies([0.1] * 792, [1.0] * 792, 1.0)
    assert sum(f) == pytest.approx(1.0) and min(f) > 0
