"""Background probes (proxy.core.discovery): where the spare budget goes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.discovery import background_probes


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
    score = {
        r: math.inf if last[r] is None else weight[r] * -math.expm1(-rate[r] * (now - last[r]))
        for r in resources
    }
    assert all(score[r] > 0 for r in picked)
    # Nobody left out scores higher than someone picked.
    if picked:
        worst = min(score[r] for r in picked)
        assert all(score[r] <= worst for r in resources if r not in picked)
